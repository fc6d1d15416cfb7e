"""How documents are cut: the ``chunk.*`` settings, stored in the manifest."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from mdrag.chunking.langchain import splitter_class
from mdrag.errors import ConfigError
from mdrag.settings import DEFAULTS, ChunkContext, ChunkStrategy, ChunkUnit, bounds, choices

if TYPE_CHECKING:
    from mdrag.chunking.deadline import Deadline
    from mdrag.chunking.langchain import Truncated
    from mdrag.config import Config

__all__ = ["ChunkLimits", "ChunkSettings"]


def _setting(name: str) -> Any:
    """The default of setting ``chunk.<name>``: settings built without a config cut as `mdrag index` does."""
    return DEFAULTS["chunk." + name][1]


def _one_of(values: list[str]) -> str:
    """``'a', 'b' or 'c'``."""
    quoted = [repr(v) for v in values]
    return f"{', '.join(quoted[:-1])} or {quoted[-1]}"


@dataclass(frozen=True, kw_only=True)
class ChunkSettings:
    """How documents are cut. Stored in the manifest: a change means a re-chunk. Each field is the setting
    ``chunk.<field>``, with its default, values and bounds (mdrag.settings)."""

    size: int = _setting("size")
    overlap: int = _setting("overlap")  # and at most half of size
    unit: ChunkUnit = _setting("unit")
    # What is embedded (and BM25-indexed) before each chunk's text: nothing, the
    # "title > heading path" trail, or the trail plus, on a file's first chunk,
    # its frontmatter topics (description, tags, keywords...).
    context: ChunkContext = _setting("context")
    # The file's folder and file names, as words, lead that header (not with "none").
    # Off by default: it lowers hybrid nDCG@10 on the Hugo questions (benchmarks/RESULTS.md).
    path_words: bool = _setting("path_words")
    # Who cuts: this module (by headings, fitted to the model's window) or LangChain's
    # MarkdownTextSplitter, as md-qa does (mdrag/chunking/langchain.py).
    strategy: ChunkStrategy = _setting("strategy")
    # Notes vaults (a folder holding .obsidian/, or Markdown with [[wikilinks]]) read as their app shows
    # them (mdrag.parsers.vault); False: as plain Markdown.
    vault: bool = _setting("vault")

    @classmethod
    def from_config(cls, config: Config, recorded: Mapping[str, Any] | None = None) -> ChunkSettings:
        """The settings ``chunk.size``, ``chunk.overlap``, ... ask for; those ``config`` leaves at their default
        (set by no file, variable or flag) take the value ``recorded`` (an index's manifest's ``chunking``)
        holds, so that a program that does not mention them does not chunk the index again."""
        recorded = recorded or {}
        fields = ("size", "overlap", "unit", "context", "path_words", "strategy", "vault")
        return cls(
            **{
                name: recorded[name]
                if name in recorded and config.sources.get(f"chunk.{name}", "default") == "default"
                else config[f"chunk.{name}"]
                for name in fields
            }
        )

    def __post_init__(self) -> None:
        least = bounds("chunk.size")["ge"]
        if self.size < least:
            raise ConfigError(f"chunk.size must be at least {least}, got {self.size}")
        least = bounds("chunk.overlap")["ge"]
        if not least <= self.overlap < self.size // 2 + 1:
            raise ConfigError(
                f"chunk.overlap must be between {least} and half of chunk.size ({self.size}), got {self.overlap}"
            )
        for name in ("unit", "context", "strategy"):
            values = choices("chunk." + name) or []
            if getattr(self, name) not in values:
                raise ConfigError(f"chunk.{name} must be {_one_of(values)}, got {getattr(self, name)!r}")
        if self.strategy == "langchain":
            splitter_class()  # installed, or a ConfigError before any file is read

    def as_dict(self) -> dict[str, Any]:
        """The settings as the manifest records them; ``strategy`` and ``vault`` only when not the default,
        so that indexes built before they existed are not chunked again."""
        d = asdict(self)
        if self.strategy == "headings":
            del d["strategy"]
        if self.vault:
            del d["vault"]
        return d


@dataclass(frozen=True)
class ChunkLimits:
    """What an indexing run holds one file's chunking to, and counts of it: none of it changes the chunks made."""

    # Chunking that passes it raises ChunkingTimeoutError (the indexer skips the file); None: no time limit.
    deadline: Deadline | None = None
    # A file whose chunking is expected to need more memory (MB) raises ChunkingMemoryError before it starts.
    max_mb: float | None = None
    # The langchain strategy's chunks longer than the model's window are counted in it (with the window given).
    truncated: Truncated | None = None
