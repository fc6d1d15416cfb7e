"""Exceptions raised by mdrag.

Every error a user can see derives from :class:`MdragError` and says what went
wrong and what to do next::

    MdragError
    ├── ConfigError (also ValueError)         invalid setting; the key is named
    ├── UnsupportedFormatError (also ValueError)  no parser for an extension
    ├── ParseError                            a file could not be parsed
    │   └── ParserCrashError                  a parser raised an unexpected exception (a bug)
    ├── EmbeddingError                        the embedder failed
    │   └── ModelMismatchError                index built with another model
    ├── StoreError                            the vector store failed
    │   ├── StoreUnavailableError (also ConnectionError)
    │   │   └── StoreInUseError               a Milvus Lite file locked by another process
    │   └── StoreDamagedError                 the store's files are damaged
    ├── ManifestError                         the index manifest cannot be written
    ├── IndexingCancelledError                an indexing run was asked to stop, and did
    ├── IndexBuildingError                    a search of an index whose first build has not committed
    ├── ProtocolError (also ValueError)       a malformed WebSocket message
    ├── LLMError                              the chat model failed or timed out
    └── DocsetError                           .knowledge config, docsets, web sources
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfigError",
    "DocsetError",
    "EmbeddingError",
    "IndexBuildingError",
    "IndexingCancelledError",
    "KnowledgeConfigError",
    "NoProjectError",
    "MdragError",
    "ModelMismatchError",
    "LLMError",
    "ManifestError",
    "ParseError",
    "ParserCrashError",
    "ProtocolError",
    "StoreDamagedError",
    "StoreError",
    "StoreInUseError",
    "StoreUnavailableError",
    "UnsupportedFormatError",
]


class MdragError(Exception):
    """Root of all mdrag errors."""


class ConfigError(MdragError, ValueError):
    """A configuration value is missing or invalid."""


class UnsupportedFormatError(MdragError, ValueError):
    """No parser is registered for a file's extension."""


class ParseError(MdragError):
    """A file could not be read or parsed; the indexer skips it."""


class ParserCrashError(ParseError):
    """A parser raised something other than ParseError: a bug in it, or input it does not handle.

    The file is skipped like any other; the traceback is logged at debug level
    and the indexing summary counts these apart (``parser_errors``).
    """


class EmbeddingError(MdragError):
    """The embedding backend failed (model load, HTTP error, bad response)."""


class ModelMismatchError(EmbeddingError):
    """The index was built with another embedding model or dimension.

    ``built`` and ``configured`` are the two embedders' identities (``model``, ``dimension``) when known.
    """

    def __init__(
        self, message: str, built: dict[str, Any] | None = None, configured: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.built = built  # the identity the index records; None: it records none
        self.configured = configured  # the identity of the embedder the settings give

    @classmethod
    def between(cls, index: str, built: dict[str, Any], configured: dict[str, Any]) -> ModelMismatchError:
        """The error for index ``index``, built with the embedder ``built``, read with ``configured``."""
        return cls(
            f"Index {index!r} was built with {_embedder(built)} but the configured embedder is "
            f"{_embedder(configured)}. Configure the embedder it was built with (embedding.provider, "
            "embedding.model, embedding.precision), or rebuild it with the configured one (`mdrag index "
            "--rebuild`), or use another --index name.",
            built,
            configured,
        )


def _embedder(identity: dict[str, Any]) -> str:
    """An embedder's identity as text: ``openai:text-embedding-3-small (1536-d)``, ``... (384-d, int8)``."""
    precision = f", {identity['precision']}" if identity.get("precision") else ""
    return f"{identity.get('model')} ({identity.get('dimension')}-d{precision})"


class StoreError(MdragError):
    """The vector store failed."""


class StoreUnavailableError(StoreError, ConnectionError):
    """The vector store cannot be reached."""


class StoreInUseError(StoreUnavailableError):
    """A Milvus Lite file is locked by another process (a running `mdrag index` or `mdrag serve`)."""


class StoreDamagedError(StoreError):
    """The store's files are damaged: the message names where, and what `mdrag index --rebuild` does."""


class ManifestError(MdragError):
    """The index manifest cannot be written (a full disk, a read-only folder)."""


class IndexingCancelledError(MdragError):
    """An indexing run stopped at a safe point because it was asked to; the next run finishes its work."""


class IndexBuildingError(MdragError):
    """A search of an index whose first build has committed nothing yet: it says how far the build is
    (``done`` of ``total`` files; ``total`` None while its folders are scanned) rather than "nothing found"."""

    def __init__(self, message: str, done: int = 0, total: int | None = None) -> None:
        super().__init__(message)
        self.done, self.total = done, total


class ProtocolError(MdragError, ValueError):
    """A client sent a message the server cannot use; the text is sent back."""


class LLMError(MdragError):
    """The chat completions endpoint failed, refused the key, or timed out."""


class DocsetError(MdragError):
    """A docset problem: no .knowledge/config.yaml, an unknown docset, a failed git source."""


class KnowledgeConfigError(DocsetError, ConfigError):
    """The project's .knowledge/config.yaml is missing, unreadable or invalid (a configuration error)."""


class NoProjectError(KnowledgeConfigError):
    """No .knowledge/config.yaml in the folder given nor in any parent: there is no project there."""
