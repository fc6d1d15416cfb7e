"""The options that are extras of the mdrag package, and the one error for an option whose extra is missing.

``pip install mdrag-docs`` (:data:`mdrag.version.DISTRIBUTION`) gives the default path (FAISS store, the
local MiniLM model run by onnxruntime); each option below is an extra named for what it gives
(pyproject.toml). A store backend declares its own :class:`Extra` (:attr:`mdrag.store.StoreBackend.extra`;
Milvus's is in :mod:`mdrag.store.milvus`), a third party's naming its own package. Choosing an option
whose extra is not installed raises :class:`MissingExtraError` at once, from whichever front end chose it:
its text names the ``pip install`` to run. Whether an extra is installed is found without
importing it, so asking costs nothing.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from mdrag.errors import ConfigError
from mdrag.version import DISTRIBUTION

__all__ = ["EXTRAS", "Extra", "MissingExtraError", "extra_installed", "require_extra"]


@dataclass(frozen=True)
class Extra:
    """An extra: what ``pip install`` adds for an option, as its error names it."""

    name: str  # e.g. "milvus"; MissingExtraError.extra
    modules: tuple[str, ...]  # the modules it brings that the option imports
    gives: str  # what it gives, as the error and the README say it
    # What `pip install` names (unquoted): mdrag's own extra by default ("mdrag-docs[milvus]"); a third
    # party's backend names its package ("mdrag-lance", "mdrag-lance[s3]").
    requirement: str = ""

    @property
    def install(self) -> str:
        """The requirement as an install command names it, quoted for the shell when it has brackets."""
        req = self.requirement or f"{DISTRIBUTION}[{self.name}]"
        return f"'{req}'" if "[" in req else req

    @property
    def what(self) -> str:
        """How an error names it: "the mdrag-docs[milvus] extra", or a package "mdrag-lance"."""
        req = self.requirement or f"{DISTRIBUTION}[{self.name}]"
        return f"the {req} extra" if "[" in req else req


#: mdrag's own extras but those of its store backends (which declare theirs), by name.
EXTRAS: dict[str, Extra] = {
    e.name: e
    for e in (
        Extra(
            "torch",
            ("sentence_transformers",),
            "the torch backend, embedding.backend: torch, with GPUs through embedding.device; the local "
            "CrossEncoder reranker, rerank.path",
        ),
        Extra("openvino", ("openvino",), "the OpenVINO backend, embedding.backend: openvino"),
        Extra("langchain", ("langchain_text_splitters",), "chunk.strategy: langchain"),
    )
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


def extra_installed(extra: str | Extra, modules: tuple[str, ...] | None = None) -> bool:
    """Whether ``extra``'s modules (or just ``modules`` of it) are installed; nothing is imported.
    ``extra``: one of :data:`EXTRAS` by name, or a backend's own."""
    declared = EXTRAS[extra] if isinstance(extra, str) else extra
    return all(_found(m) for m in modules or declared.modules)


def require_extra(extra: str | Extra, chosen: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise :class:`MissingExtraError` unless ``extra`` (or just ``modules`` of it) is installed.

    ``extra``: one of :data:`EXTRAS` by name, or a backend's own. ``chosen`` says what asked for it, as the
    user wrote it: ``"store.backend: milvus"``, ``"the Milvus server http://127.0.0.1:19530"``.
    """
    declared = EXTRAS[extra] if isinstance(extra, str) else extra
    missing = [m for m in modules or declared.modules if not _found(m)]
    if missing:
        target = declared.install
        if declared.requirement:  # a third party's package, installed beside mdrag
            others = f"`pipx inject {DISTRIBUTION} {target}`; with uv: `uv tool install {DISTRIBUTION} --with {target}`"
        else:
            others = f"`pipx install --force {target}`; with uv: `uv tool install {target}`"
        raise MissingExtraError(
            f"{chosen} needs {declared.what} ({declared.gives}), which is not installed (no "
            f"module {', '.join(missing)}). Run `pip install {target}` (installed with pipx: {others}), "
            "then run this again.",
            declared.name,
        )
