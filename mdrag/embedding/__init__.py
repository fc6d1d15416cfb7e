"""Embedders: the local model (torch, onnxruntime or OpenVINO), or an OpenAI-compatible API.

The interface is :class:`~mdrag.embedding.base.Embedder`. A backend is one
module with a class that implements it, ending with its
:class:`~mdrag.embedding.base.EmbedderBackend` declaration, plus one line in an
entry-point group (:mod:`mdrag.plugins`): ``mdrag.embedders`` for a provider
(``embedding.provider``), ``mdrag.local_embedders`` for a way to run the local
model (``embedding.backend``). mdrag's own are registered there as a third
party's would be. :func:`make_embedder` picks one from those two settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mdrag import plugins
from mdrag.embedding.base import Embedder, EmbedderBackend
from mdrag.errors import ConfigError

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = ["Embedder", "EmbedderBackend", "embedder_name", "embedders", "make_embedder"]


def embedders() -> dict[str, EmbedderBackend]:
    """Every registered embedder by name (providers, then ways to run the local model), each module imported."""
    return {
        name: plugins.load(group, name, EmbedderBackend)
        for group in (plugins.EMBEDDERS, plugins.LOCAL_EMBEDDERS)
        for name in plugins.names(group)
    }


def embedder_name(config: Config) -> str:
    """The registered embedder the settings ask for, ``embedding.backend: auto`` resolved.

    ``auto`` takes the usable way to run the local model of the lowest ``auto_rank``
    (:class:`~mdrag.embedding.base.EmbedderBackend`): OpenVINO, then onnxruntime,
    whichever is installed; torch when neither is, or when ``embedding.device`` is
    not the CPU.
    """
    provider: str = config["embedding.provider"]
    if provider != "local":
        return provider
    backend: str = config["embedding.backend"]
    if backend != "auto":
        return backend
    local: list[EmbedderBackend] = [
        plugins.load(plugins.LOCAL_EMBEDDERS, n, EmbedderBackend) for n in plugins.names(plugins.LOCAL_EMBEDDERS)
    ]
    ranked = sorted((b for b in local if b.auto_rank is not None), key=lambda b: b.auto_rank or 0)
    usable = next((b.name for b in ranked if b.usable(config)), None)
    if usable is None:
        raise ConfigError("embedding.backend is auto, but no way to run the local model can run here")
    return usable


def make_embedder(config: Config) -> Embedder:
    """The embedder the configuration asks for (no model is loaded yet)."""
    name = embedder_name(config)
    group = plugins.EMBEDDERS if name in plugins.names(plugins.EMBEDDERS) else plugins.LOCAL_EMBEDDERS
    declared: EmbedderBackend = plugins.load(group, name, EmbedderBackend)
    return declared.embedder(config)
