"""Embedders: the local sentence-transformers model, or an OpenAI-compatible API."""

from mdrag.embedding.base import Embedder

__all__ = ["Embedder"]
