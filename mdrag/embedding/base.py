"""The embedder interface every backend fills in, and the declaration that registers a backend."""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = ["Embedder", "EmbedderBackend"]

T = TypeVar("T")


class Embedder(ABC):
    """Turns texts into L2-normalized float32 vectors of a fixed dimension.

    ``model_id`` names the model and is recorded with the index: vectors of two
    different ``model_id`` values are never mixed in one index.
    """

    model_id: str  # e.g. "sentence-transformers/all-MiniLM-L6-v2"
    batch_size: int = 32  # texts per call to the backend

    @property
    @abstractmethod
    def dimension(self) -> int:
        """Length of each vector."""

    @property
    def max_tokens(self) -> int | None:
        """Longest input the model reads (special tokens included), or None if unknown."""
        return None

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text as the model counts them (special tokens included).

        Backends without a tokenizer estimate four characters per token.
        """
        return [len(t) // 4 + 2 for t in texts]

    @property
    def prompts(self) -> tuple[str, str]:
        """What the model asks to have put before a query's text and before a passage's (its own configuration's
        prompts, E5's "query: " and "passage: "); none unless a backend reads them."""
        return "", ""

    def _passages(self, texts: Sequence[str]) -> list[str]:
        """``texts`` as the model reads passages: its passage prompt before each."""
        document = self.prompts[1]
        return [document + t for t in texts] if document else list(texts)

    @abstractmethod
    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Embed at most ``batch_size`` texts; returns an (n, dimension) float32 array."""

    def embed(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Embed any number of texts in batches of ``batch_size``.

        Texts are batched by token count (as :meth:`count_tokens` counts, up
        to :attr:`max_tokens`), so that a batch pads its texts to nearly the
        same length, and returned in the order given. ``progress`` is told
        how many texts each batch embedded, as it returns.
        """
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        cap = self.max_tokens or sys.maxsize
        lengths = [min(n, cap) for n in self.count_tokens(texts)]
        return self._embed_by_length(texts, lengths, self.embed_batch, progress)

    def _embed_by_length(
        self,
        items: Sequence[T],
        lengths: Sequence[int],
        run: Callable[[list[T]], np.ndarray],
        progress: Callable[[int], None] | None,
    ) -> np.ndarray:
        """``run`` over batches of ``items`` sorted by ``lengths``; rows in the order given, normalized.
        ``progress`` is told each batch's size as it returns."""
        order = sorted(range(len(items)), key=lengths.__getitem__)
        parts = []
        for s in range(0, len(items), self.batch_size):
            parts.append(run([items[i] for i in order[s : s + self.batch_size]]))
            if progress is not None:
                progress(len(parts[-1]))
        out = np.empty((len(items), parts[0].shape[1]), dtype=np.float32)
        out[order] = np.vstack(parts)
        return _normalize(out)

    def warm_up(self) -> None:
        """Load the model now, so that the first :meth:`embed` call does not (a no-op where nothing loads)."""
        return None

    def background(self) -> Embedder:
        """This model for work that must give way to queries (an index updated while it is searched): the same
        vectors, computed where the backend can on one thread at a lower OS priority
        (:mod:`mdrag.embedding.priority`). Backends that cannot give the embedder itself."""
        return self

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query; returns a (dimension,) vector."""
        vector: np.ndarray = self.embed([text])[0]
        return vector

    @property
    def identity(self) -> dict[str, object]:
        """What the index records about the model that wrote its vectors."""
        return {"model": self.model_id, "dimension": self.dimension}

    def for_index(self, recorded: dict[str, Any]) -> Embedder:
        """The embedder that reads and updates an index whose vectors were written by the embedder ``recorded``
        (its :attr:`identity`): itself, or, where the backend runs the same model at several precisions, the
        one the index was built with, whatever the settings now say (a rebuild takes the configured one)."""
        return self


def _normalize(v: np.ndarray) -> np.ndarray:
    norms: np.ndarray = np.linalg.norm(v, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: np.ndarray = v / norms
    return unit


def _always(config: Config) -> bool:
    return True


@dataclass(frozen=True)
class EmbedderBackend:
    """An embedder as it declares itself, once, at the end of its module, and registers by entry point: in
    ``mdrag.embedders`` (a value of ``embedding.provider``) or ``mdrag.local_embedders`` (a way to run the
    local model: a value of ``embedding.backend``); see :mod:`mdrag.plugins`.
    """

    name: str  # the value of the setting that picks it (its entry point's name)
    embedder: Callable[[Config], Embedder]  # the embedder the settings ask for; no model is loaded yet
    # A way to run the local model: its rank when embedding.backend is auto (the lowest usable one is
    # picked; None: auto never picks it), and whether it can run with these settings here.
    auto_rank: int | None = None
    usable: Callable[[Config], bool] = _always
