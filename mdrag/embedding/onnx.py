"""all-MiniLM-L6-v2 (or another local sentence-transformers model) as ONNX.

The same weights as :class:`~mdrag.embedding.local.LocalEmbedder`, written once
as an ONNX graph and cached under ``<cache>/models/``; embedding needs only
``tokenizers`` and a runtime: onnxruntime (:class:`OnnxEmbedder`) or OpenVINO
(:class:`OpenVinoEmbedder`). A BERT model is written from its safetensors by
:mod:`mdrag.embedding.onnx_build`, without torch, in about a second; other
architectures fall back on torch's exporter (:func:`export_onnx`, the torch
extra). A model fetched from the Hugging Face hub comes with its own ONNX file,
run where the hub's cache keeps it. The vectors equal the torch ones within
tolerance, so the backends share one ``model_id`` and an index built with one
keeps working with the others.

A process that opens a model written before pays nothing in proportion to its
size: the sidecar ``model.onnx.sha256`` holds the file's sha256 and its size,
mtime, ctime and inode when written, and the file is hashed again only when
those differ (a rewrite, even one that sets the mtime back, changes the ctime).
The cache key covers the config's bytes and the weights' size and mtime.

The graph ends at ``last_hidden_state``; pooling (mean over the attention
mask, or CLS) is done here in numpy, and the base class normalizes.
"""

from __future__ import annotations

import glob
import hashlib
import importlib
import importlib.util
import inspect
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mdrag.embedding.base import Embedder, EmbedderBackend
from mdrag.embedding.local import _ALIASES, DEFAULT_MODEL, HUB_ONNX_FILE, resolve_model_dir
from mdrag.embedding.onnx_build import BUILDER_VERSION, UnsupportedModelError, build_onnx
from mdrag.embedding.priority import run_yielding, yielding_busy
from mdrag.errors import EmbeddingError
from mdrag.extras import extra_installed, require_extra
from mdrag.ingest.manifest import file_sha256

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

OPSET = 17
_EXPORT_VERSION = "2"  # part of the cache key: bump when the export itself changes (2: built without torch)
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the files the graph is written from
_OUTPUT = "last_hidden_state"
_SUPPORTED_MODULES = {
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
}

_sessions: dict[tuple[str, int], Any] = {}  # (runtime + file, threads) -> session or compiled model, one per process
_sessions_lock = threading.Lock()  # also serializes exports within a process


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


def _weights_hash(model_dir: Path) -> str:
    """The cache key of ``model_dir``'s ONNX file: the config's bytes, the weights' size and mtime.

    Reading the weights themselves (90 MB for MiniLM) would cost every process a
    quarter of a second; weights replaced in place get a new mtime, and so a new key.
    """
    h = hashlib.sha256(f"mdrag-onnx-{_EXPORT_VERSION}-opset{OPSET}-build{BUILDER_VERSION}".encode())
    config = model_dir / "config.json"
    if config.is_file():
        h.update(b"config.json:" + config.read_bytes())
    for name in _WEIGHTS:
        f = model_dir / name
        if f.is_file():
            st = f.stat()
            h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:12]


def onnx_model_path(model_dir: Path, cache_dir: Path, name: str | None = None) -> Path:
    """Where the ONNX file of ``model_dir`` is cached.

    ``<cache_dir>/models/<name>-<hash>/model.onnx``: the hash covers the
    config and the weights' size and mtime, so changed weights get a fresh
    file. ``name`` defaults to the model folder's name.
    """
    return (
        Path(cache_dir) / "models" / f"{_label(name or model_dir.name)}-{_weights_hash(Path(model_dir))}" / "model.onnx"
    )


def _label(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"


def _sidecar(out: Path) -> Path:
    return out.with_name(out.name + ".sha256")


def _stamp(path: Path) -> str:
    """What changes when a file is rewritten: size, mtime, ctime (utime cannot set it back) and inode."""
    st = path.stat()
    return f"{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}"


def _read_sidecar(out: Path) -> dict[str, str]:
    """The sidecar's fields: ``sha256``, then ``stamp`` and ``source`` (older sidecars hold the sha256 alone)."""
    try:
        lines = _sidecar(out).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    fields = {"sha256": lines[0].split()[0]} if lines and lines[0].split() else {}
    for line in lines[1:]:
        key, _, value = line.partition(" ")
        fields[key] = value
    return fields


def _write_sidecar(out: Path, digest: str, source: Path | None) -> None:
    """``<out>.sha256``: the sha256 (as sha256sum writes it), the file's stamp and the folder it was made from."""
    text = f"{digest}  {out.name}\nstamp {_stamp(out)}\n" + (f"source {source}\n" if source else "")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.sha256")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, _sidecar(out))


def _checksum_ok(out: Path) -> bool:
    """True when ``out`` exists and matches the sha256 written beside it.

    The file is read only when its stamp (size, mtime, ctime, inode) is not the one
    recorded: a process that opens an untouched model pays a ``stat``. When the
    bytes still match (a copied home), the new stamp is recorded, where the folder
    is writable, so the next process is spared the hash.
    """
    fields = _read_sidecar(out)
    if not out.is_file() or not fields.get("sha256"):
        return False
    if fields.get("stamp") == _stamp(out):
        return True
    log.info("hashing %s: it changed since its checksum was written", out)
    if file_sha256(out) != fields["sha256"]:
        return False
    try:
        _write_sidecar(out, fields["sha256"], Path(fields["source"]) if fields.get("source") else None)
    except OSError:  # a read-only home: hash again next time
        pass
    return True


def _install(tmp: Path, out: Path, digest: str, model_dir: Path) -> None:
    """Move the finished file ``tmp`` to ``out``, then its sidecar (last: a file without one is unfinished).

    Compiled OpenVINO blobs of the old file go, and so do the folders of older
    files made from the same model folder (another key, another mdrag version):
    a home keeps one copy of a model's weights.
    """
    _sidecar(out).unlink(missing_ok=True)
    shutil.rmtree(out.parent / "openvino", ignore_errors=True)  # blobs compiled from the old file
    os.replace(tmp, out)
    _write_sidecar(out, digest, model_dir)
    label = out.parent.name.rsplit("-", 1)[0]
    for old in out.parent.parent.glob(f"{glob.escape(label)}-*"):
        fields = _read_sidecar(old / out.name)
        if old != out.parent and old.name.rsplit("-", 1)[0] == label and fields.get("source") in (None, str(model_dir)):
            log.info("removing %s, an older ONNX file of %s", old, model_dir)
            shutil.rmtree(old, ignore_errors=True)


def prepare_onnx(model_dir: Path, out: Path) -> Path:
    """Write the ONNX file of the model in ``model_dir`` to ``out``, with its sidecar; returns ``out``.

    A BERT model is written from its weights (:mod:`mdrag.embedding.onnx_build`,
    no torch); other architectures are exported by torch (:func:`export_onnx`) when
    the torch extra is installed, else a :class:`~mdrag.extras.MissingExtraError`
    names it.
    """
    model_dir, out = Path(model_dir), Path(out)
    try:
        data = build_onnx(model_dir)
    except UnsupportedModelError as e:
        if not extra_installed("torch"):
            require_extra("torch", f"The model in {model_dir} ({e}; mdrag writes BERT models without torch)")
        log.info("%s: exporting %s with torch instead", e, model_dir)
        return export_onnx(model_dir, out)
    tmp = _temp_file(out)
    try:
        tmp.write_bytes(data)
        _install(tmp, out, hashlib.sha256(data).hexdigest(), model_dir)
    except OSError as e:
        raise EmbeddingError(f"Cannot write the model's ONNX file {out}: {e}.") from e
    finally:
        tmp.unlink(missing_ok=True)
    log.info("wrote %s (%.0f MB) from %s", out, len(data) / 1e6, model_dir)
    return out


def _temp_file(out: Path) -> Path:
    """A new temporary file beside ``out``; an EmbeddingError that says what to do when that folder is read-only."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".export-", suffix=".onnx", dir=out.parent)
    except OSError as e:  # a read-only MDRAG_HOME that holds no model file yet
        raise EmbeddingError(
            f"Cannot write the model's ONNX file {out}: {e.strerror}. "
            "Run mdrag once where that folder is writable (or point MDRAG_HOME at one)."
        ) from e
    os.close(fd)
    return Path(tmp_name)


def export_onnx(model_dir: Path, out: Path) -> Path:
    """Export the transformer in ``model_dir`` to ONNX at ``out`` with torch (the torch extra).

    Only for the architectures :func:`prepare_onnx` cannot write itself. Inputs
    ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, dynamic batch and
    sequence axes); output ``last_hidden_state``. Written to a temporary file,
    checked against torch on another shape, then renamed into
    place, with its sha256 in ``<out>.sha256``. Returns ``out``.
    """
    model_dir, out = Path(model_dir), Path(out)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read when transformers is first imported
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bar
    chosen = f"Exporting {model_dir} to ONNX (not a BERT model, which mdrag writes without torch)"
    require_extra("torch", chosen)
    try:
        import onnx  # noqa: F401  - the TorchScript exporter writes through it
        import torch
        from transformers import AutoModel
    except ImportError as e:
        raise EmbeddingError(
            f"{chosen} needs torch and transformers, which cannot be imported ({e}): run "
            "`pip install --force-reinstall 'mdrag[torch]'` once (the export is cached), "
            "or set embedding.backend=torch."
        ) from e
    log.info("exporting %s to ONNX at %s (once)", model_dir, out)
    try:
        model = AutoModel.from_pretrained(str(model_dir), local_files_only=True, attn_implementation="eager")
    except Exception as e:
        raise EmbeddingError(f"Could not load the model in {model_dir} for the ONNX export: {e}") from e
    model.eval()

    # BERT-style models take token_type_ids; others (DistilBERT) get a graph without it.
    inputs = [n for n in _INPUTS if n != "token_type_ids" or n in inspect.signature(model.forward).parameters]

    class _Encoder(torch.nn.Module):
        """Positional inputs in a fixed order; returns only the token states."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner  # the transformers model

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(inputs, args))).last_hidden_state

    def sample(batch: int, seq: int) -> tuple[Any, ...]:
        gen = torch.Generator().manual_seed(batch * 1000 + seq)
        ids = torch.randint(1000, 2000, (batch, seq), generator=gen, dtype=torch.long)
        mask = torch.ones((batch, seq), dtype=torch.long)
        mask[-1, seq // 2 :] = 0  # one padded row, as in real batches
        return (ids, mask, torch.zeros((batch, seq), dtype=torch.long))[: len(inputs)]

    kwargs: dict[str, Any] = {
        "input_names": inputs,
        "output_names": [_OUTPUT],
        "dynamic_axes": {k: {0: "batch", 1: "sequence"} for k in (*inputs, _OUTPUT)},
        "opset_version": OPSET,
        "do_constant_folding": True,
    }
    params = inspect.signature(torch.onnx.export).parameters
    if "dynamo" in params:
        kwargs["dynamo"] = False  # the TorchScript exporter: no onnxscript needed, dynamic axes as given
    tmp = _temp_file(out)
    try:
        wrapper = _Encoder(model).eval()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer and deprecation chatter
            torch.onnx.export(wrapper, sample(2, 16), str(tmp), **kwargs)
            check = sample(3, 23)  # another shape: the axes must really be dynamic
            expected = wrapper(*check).numpy()
        if onnx_available():
            got = _new_session(tmp, 1).run([_OUTPUT], dict(zip(inputs, (t.numpy() for t in check))))[0]
            err = float(np.abs(got - expected).max())
            if err > 1e-3:
                raise EmbeddingError(f"The ONNX export of {model_dir} differs from torch (max error {err:.2g}).")
        _install(tmp, out, file_sha256(tmp), model_dir)
    except EmbeddingError:
        raise
    except Exception as e:
        raise EmbeddingError(f"Exporting {model_dir} to ONNX failed: {e}; set embedding.backend=torch.") from e
    finally:
        tmp.unlink(missing_ok=True)
    log.info("exported %s (%.0f MB)", out, out.stat().st_size / 1e6)
    return out


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
    ) -> None:
        self.model_dir = resolve_model_dir(model)  # where the weights and tokenizer live
        self.model_id = DEFAULT_MODEL if model in _ALIASES else model  # same identity as the torch backend
        self.batch_size = batch_size  # texts per session run
        if cache_dir is None:
            from mdrag.config import home_dir

            cache_dir = home_dir() / "cache"
        self.cache_dir = Path(cache_dir)  # the export lives under <cache_dir>/models/
        self.threads = threads or os.cpu_count() or 1  # onnxruntime intra-op threads
        self.yields = False  # runs the model in the yielding thread (see background())
        self._check_pipeline()

    @classmethod
    def from_config(cls, config: Config) -> OnnxEmbedder:
        """The embedder of ``embedding.model`` and ``embedding.batch_size``, its export under the cache folder."""
        return cls(
            config.effective("embedding.model"),
            batch_size=config["embedding.batch_size"],
            cache_dir=config.cache_dir,
        )

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
        for cfg in sorted(self.model_dir.glob("*_Pooling/config.json")):
            return dict(json.loads(cfg.read_text()))
        return {}

    @cached_property
    def _pooling_mode(self) -> str:
        """'mean' or 'cls' (the two done here), else the names of the unsupported modes."""
        flags = self._pooling.items()
        on = sorted(k.removeprefix("pooling_mode_") for k, v in flags if k.startswith("pooling_mode_") and v)
        if not on or on == ["mean_tokens"]:
            return "mean"
        return "cls" if on == ["cls_token"] else "+".join(on)

    @cached_property
    def _st_config(self) -> dict[str, Any]:
        cfg = self.model_dir / "sentence_bert_config.json"
        return dict(json.loads(cfg.read_text())) if cfg.is_file() else {}

    @property
    def dimension(self) -> int:
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

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in self._counter.encode_batch(list(texts))]

    @cached_property
    def _ready_onnx(self) -> Path | None:
        """The ONNX file that came with the model (the hub's ``onnx/model.onnx``), run as it is, where the
        folder holds no weights to write one from; None otherwise."""
        ready = self.model_dir / HUB_ONNX_FILE
        if ready.is_file() and not any((self.model_dir / name).is_file() for name in _WEIGHTS):
            return ready
        return None

    @cached_property
    def onnx_path(self) -> Path:
        """The ONNX file this embedder runs: the model's own (:attr:`_ready_onnx`), or the one written
        under the cache folder (found once per embedder: the key costs a few ``stat`` calls)."""
        return self._ready_onnx or onnx_model_path(self.model_dir, self.cache_dir, self._name)

    @property
    def _name(self) -> str:
        return self.model_id.rsplit("/", 1)[-1]

    @cached_property
    def _blob_dir(self) -> Path:
        """Where OpenVINO caches the blobs it compiles: beside the written file, or under the cache folder
        for the model's own file (in the hub's cache, which is not mdrag's to write to)."""
        if self._ready_onnx is None:
            return self.onnx_path.parent / "openvino"
        key = hashlib.sha256(str(self._ready_onnx.resolve()).encode()).hexdigest()[:12]
        return self.cache_dir / "models" / f"{_label(self._name)}-hub-{key}" / "openvino"

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
        ready = self._ready_onnx is not None
        if not ready and not _checksum_ok(path):
            if path.is_file():
                log.warning("%s does not match its checksum (corrupt or unfinished): writing it again", path)
            else:  # the first use, or the file was deleted
                log.info("writing the %s model to %s for the %s runtime (once)", self._name, path.parent, self.runtime)
            prepare_onnx(self.model_dir, path)
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
            log.warning("could not load %s (%s): writing it again", path, e)
            prepare_onnx(self.model_dir, path)
            model = load()
        names, outputs = self._io_names(model)
        if not names <= set(_INPUTS) or outputs[:1] != [_OUTPUT]:
            raise EmbeddingError(f"{path} is not an mdrag export (inputs {sorted(names)}): delete it to export again.")
        return model

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
        return super().embed_query(text)

    @cached_property
    def _single(self) -> OnnxEmbedder:
        return self._with(threads=1)

    def _with(self, **changes: Any) -> OnnxEmbedder:
        """An embedder of the same model, ``changes`` made to the constructor's arguments."""
        args: dict[str, Any] = {"batch_size": self.batch_size, "cache_dir": self.cache_dir, "threads": self.threads}
        return type(self)(self.model_id, **{**args, **changes})

    def _run(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """The token states for one tokenized batch, in this thread or (:attr:`yields`) the yielding one."""
        if not self.yields:
            return self._infer(feed)
        self.session  # noqa: B018  # loaded here, at this thread's priority: never by the yielding thread
        return run_yielding(lambda: self._infer(feed))

    def _infer(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(self.session.run([_OUTPUT], feed)[0], dtype=np.float32)

    def embed(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        """As :meth:`Embedder.embed`, tokenizing each text once: the batches are cut by its token count."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        enc = self._encoder.encode_batch(list(texts))
        return self._embed_by_length(enc, [len(e.ids) for e in enc], self._embed_encodings, progress)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self._embed_encodings(self._encoder.encode_batch(list(texts)))

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
    ) -> None:
        require_extra("openvino", "embedding.backend: openvino")  # said when chosen, before any model is read
        super().__init__(model, batch_size, cache_dir, threads)
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
