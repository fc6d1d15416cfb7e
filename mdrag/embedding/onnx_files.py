"""The model's ONNX file under the cache folder: where it lives, the checksum beside it, and writing it.

``<cache>/models/<name>-<key>/model.onnx``, with ``model.onnx.sha256`` beside it.
:func:`prepare_onnx` writes it: a BERT model from its safetensors by
:mod:`mdrag.embedding.onnx_build`, without torch, in about a second; other
architectures through torch's exporter (:func:`export_onnx`, the torch extra).
:mod:`mdrag.embedding.onnx` runs it.

A process that opens a model written before pays nothing in proportion to its
size: the sidecar holds the file's sha256 and its size, mtime, ctime and inode
when written, and the file is hashed again only when those differ (a rewrite,
even one that sets the mtime back, changes the ctime). The cache key covers the
config's bytes and the weights' size and mtime.

The tokenizer and configuration are kept beside the file (:func:`keep_beside`), so
that a home which holds it runs the model without the weights it was written from
(:func:`kept_model_dir`: the weights package uninstalled, the hub out of reach).
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import inspect
import logging
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from mdrag.embedding.onnx_build import BUILDER_VERSION, OPSET, UnsupportedModelError, build_onnx
from mdrag.errors import EmbeddingError
from mdrag.extras import extra_installed, require_extra
from mdrag.fileio import file_sha256
from mdrag.version import install_target

__all__ = [
    "INPUTS",
    "OUTPUT",
    "WEIGHTS",
    "checksum_ok",
    "export_onnx",
    "int8_model_path",
    "keep_beside",
    "kept_model_dir",
    "label",
    "onnx_model_path",
    "prepare_int8",
    "prepare_onnx",
]

log = logging.getLogger(__name__)

_EXPORT_VERSION = "2"  # part of the cache key: bump when the export itself changes (2: built without torch)
INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # the graph's inputs, in this order
OUTPUT = "last_hidden_state"  # its one output
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the files the graph is written from
#: What the ONNX backends read beside the graph (with ``*_Pooling/config.json``): kept next to the written file,
#: so that its folder runs the model once the weights it was written from are gone (:func:`kept_model_dir`).
BESIDE = ("config.json", "modules.json", "sentence_bert_config.json", "tokenizer.json")


def _weights_hash(model_dir: Path) -> str:
    """The cache key of ``model_dir``'s ONNX file: the config's bytes, the weights' size and mtime.

    Reading the weights themselves (90 MB for MiniLM) would cost every process a
    quarter of a second; weights replaced in place get a new mtime, and so a new key.
    """
    h = hashlib.sha256(f"mdrag-onnx-{_EXPORT_VERSION}-opset{OPSET}-build{BUILDER_VERSION}".encode())
    config = model_dir / "config.json"
    if config.is_file():
        h.update(b"config.json:" + config.read_bytes())
    for name in WEIGHTS:
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
        Path(cache_dir) / "models" / f"{label(name or model_dir.name)}-{_weights_hash(Path(model_dir))}" / "model.onnx"
    )


def label(name: str) -> str:
    """``name`` fit for a folder name."""
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


def checksum_ok(out: Path) -> bool:
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


def keep_beside(model_dir: Path, out: Path) -> None:
    """Copy what the ONNX backends read beside the graph (:data:`BESIDE`, the pooling configuration) from
    ``model_dir`` next to ``out``, where missing (a few ``stat`` calls when they are there; about 700 kB
    once): the folder of ``out`` then runs the model alone (:func:`kept_model_dir`)."""
    sources = [*(model_dir / name for name in BESIDE), *sorted(model_dir.glob("*_Pooling/config.json"))]
    for src in sources:
        dst = out.parent / src.relative_to(model_dir)
        if dst.is_file() or not src.is_file():
            continue
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(f".{dst.name}.{os.getpid()}")
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        except OSError as e:  # a read-only home: the weights stay needed
            log.info("could not keep %s beside %s: %s", src.name, out, e)
            return


def kept_model_dir(cache_dir: Path, name: str) -> Path | None:
    """The newest folder under ``<cache_dir>/models/`` that holds a finished ONNX file of the model ``name``
    and what is read beside it (:func:`keep_beside`); None when there is none. Its checksum is checked
    when the file is loaded."""
    found = [
        onnx.parent
        for onnx in (Path(cache_dir) / "models").glob(f"{glob.escape(label(name))}-*/model.onnx")
        if _sidecar(onnx).is_file() and all((onnx.parent / f).is_file() for f in ("config.json", "tokenizer.json"))
    ]
    return max(found, key=lambda folder: (folder / "model.onnx").stat().st_mtime, default=None)


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
    keep_beside(model_dir, out)
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
            f"`pip install --force-reinstall {install_target('torch')}` once (the export is cached), "
            "or set embedding.backend=torch."
        ) from e
    log.info("exporting %s to ONNX at %s (once)", model_dir, out)
    try:
        model = AutoModel.from_pretrained(str(model_dir), local_files_only=True, attn_implementation="eager")
    except Exception as e:
        raise EmbeddingError(f"Could not load the model in {model_dir} for the ONNX export: {e}") from e
    model.eval()

    # BERT-style models take token_type_ids; others (DistilBERT) get a graph without it.
    inputs = [n for n in INPUTS if n != "token_type_ids" or n in inspect.signature(model.forward).parameters]

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
        "output_names": [OUTPUT],
        "dynamic_axes": {k: {0: "batch", 1: "sequence"} for k in (*inputs, OUTPUT)},
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
        if importlib.util.find_spec("onnxruntime") is not None:
            import onnxruntime

            session = onnxruntime.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
            got = session.run([OUTPUT], dict(zip(inputs, (t.numpy() for t in check))))[0]
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


# -- the int8 model: the float file's MatMul weights quantized by onnxruntime --------------------------


def int8_model_path(float_path: Path) -> Path:
    """Where the int8 model made from the float ONNX file ``float_path`` is cached: beside it,
    ``model.int8.onnx`` (a new key of the float file is a new folder, and so a new int8 file)."""
    return Path(float_path).with_name(f"{Path(float_path).stem}.int8.onnx")


class _QuantizerChatter(logging.Filter):
    """Drops what onnxruntime's quantizer logs on the root logger (advice on pre-processing, a line per
    tensor it leaves float) while it runs: mdrag says what it wrote."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name != "root"


def prepare_int8(float_path: Path, out: Path) -> Path:
    """Write the int8 model of the float ONNX file ``float_path`` to ``out``, with its sidecar; returns ``out``.

    onnxruntime's dynamic quantization (``onnxruntime.quantization.quantize_dynamic``, which needs only
    ``onnx``): the weights of the MatMul nodes become int8, one scale per output channel, and the
    activations are quantized at run time, batch by batch. The rest of the graph (embeddings, LayerNorm,
    softmax, attention's own products) stays float. The same float file gives the same bytes. Checked
    and cached as the float file is (:func:`checksum_ok`): a damaged file is written again from it.
    """
    float_path, out = Path(float_path), Path(out)
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as e:
        raise EmbeddingError(
            f"embedding.precision int8 needs onnxruntime's quantization, which cannot be imported ({e}): "
            "reinstall onnxruntime and onnx, or set embedding.precision to fp32."
        ) from e
    tmp = _temp_file(out)
    chatter = _QuantizerChatter()
    logging.getLogger().addFilter(chatter)
    try:
        quantize_dynamic(
            float_path, tmp, per_channel=True, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8
        )
        _sidecar(out).unlink(missing_ok=True)  # a file without its sidecar is unfinished
        os.replace(tmp, out)
        _write_sidecar(out, file_sha256(out), float_path)
    except OSError as e:
        raise EmbeddingError(f"Cannot write the int8 model {out}: {e}.") from e
    except Exception as e:  # the quantizer's own errors (a graph it cannot read)
        raise EmbeddingError(f"Quantizing {float_path} to int8 failed ({e}): set embedding.precision to fp32.") from e
    finally:
        logging.getLogger().removeFilter(chatter)
        tmp.unlink(missing_ok=True)
    log.info("wrote %s (%.0f MB, int8) from %s", out, out.stat().st_size / 1e6, float_path)
    return out
