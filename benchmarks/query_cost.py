"""Where a warm hybrid search's time goes on this machine (the target "Hugo hybrid p50 <= 5 ms").

On a FAISS index of the Hugo docs (``--home``: an MDRAG_HOME whose config.yaml
says ``store: {backend: faiss}``, such as ``benchmarks/stores.py hugo --keep
DIR`` leaves in ``DIR/faiss/home``), over the Hugo questions, p50 of:

- ``Index.search`` hybrid, k 10, as a user's search runs (query embedding included);
- the query embedding alone: the configured embedder, OpenVINO f32, onnxruntime
  f32, and onnxruntime with its weights quantized to int8 (dynamic
  quantization), with the int8 vectors' cosine to the f32 ones;
- the search less the embedding: warm (searches back to back), right after a
  query embedding, and right after streaming 48 MB through memory (as much as
  the model's weights and more), which tells a cache effect from the runtime's
  threads.

The baseline is the warm search less the embedding, from the same run; each
figure is printed with its ratio to it.

    python benchmarks/query_cost.py --home DIR [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import QA  # noqa: E402

ROUNDS = 5
K = 10


def p50(run: Callable[[str], float], questions: list[str]) -> float:
    """Median milliseconds over ROUNDS passes of the questions; ``run(q)`` returns the seconds it measured."""
    return round(float(np.median([run(q) for _ in range(ROUNDS) for q in questions])) * 1000, 3)


def whole(call: Callable[[str], object]) -> Callable[[str], float]:
    """``call`` timed as a whole."""

    def run(q: str) -> float:
        t = time.perf_counter()
        call(q)
        return time.perf_counter() - t

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, required=True, help="MDRAG_HOME of a FAISS index of the Hugo docs")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    os.environ["MDRAG_HOME"] = str(args.home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from mdrag.config import load_config
    from mdrag.embedding.onnx import OnnxEmbedder, OpenVinoEmbedder
    from mdrag.index import Index

    questions = [json.loads(line)["question"] for line in QA.read_text().splitlines() if line.strip()]
    index = Index(load_config())
    if index.status().backend != "faiss" or not index.status().chunks:
        raise SystemExit(f"{args.home} holds no FAISS index: run `mdrag index` there with store.backend faiss")
    index.search(questions[0])
    cache = load_config().cache_dir

    out: dict[str, Any] = {"chunks": index.status().chunks, "questions": len(questions), "cpus": os.cpu_count()}

    def hybrid(q: str) -> object:
        return index.search(q, k=K, mode="hybrid")

    out["hybrid_ms"] = p50(whole(hybrid), questions)

    ov = OpenVinoEmbedder(cache_dir=cache, precision="f32")
    onnx = OnnxEmbedder(cache_dir=cache)
    f32 = np.vstack([onnx.embed_query(q) for q in questions])
    with tempfile.TemporaryDirectory(prefix="mdrag-int8-") as tmp:
        int8_path = Path(tmp) / "model-int8.onnx"
        quantize_dynamic(str(onnx.onnx_path), str(int8_path), weight_type=QuantType.QInt8)
        options = ort.SessionOptions()
        options.intra_op_num_threads = onnx.threads
        int8_session = ort.InferenceSession(str(int8_path), options, providers=["CPUExecutionProvider"])

    class Int8(OnnxEmbedder):
        @property
        def session(self) -> Any:
            return int8_session

    int8 = Int8(cache_dir=cache)
    int8_vectors = np.vstack([int8.embed_query(q) for q in questions])
    cosines = (int8_vectors * f32).sum(axis=1)
    out["embedding_ms"] = {
        "configured": p50(whole(index.embedder.embed_query), questions),
        "openvino_f32": p50(whole(ov.embed_query), questions),
        "onnxruntime_f32": p50(whole(onnx.embed_query), questions),
        "onnxruntime_int8": p50(whole(int8.embed_query), questions),
    }
    out["int8_cosine_to_f32"] = {"mean": round(float(cosines.mean()), 4), "min": round(float(cosines.min()), 4)}

    vectors = {q: index.embedder.embed_query(q) for q in questions}
    embed = index.embedder.embed_query
    index.embedder.embed_query = vectors.__getitem__  # type: ignore[method-assign]
    big = np.ones(12_000_000, dtype=np.float32)  # 48 MB

    def after(evict: Callable[[str], object]) -> Callable[[str], float]:
        """The search alone, timed right after ``evict(q)``."""

        def run(q: str) -> float:
            evict(q)
            return whole(hybrid)(q)

        return run

    out["search_less_embedding_ms"] = {
        "warm": p50(whole(hybrid), questions),
        "after_a_query_embedding": p50(after(embed), questions),
        "after_streaming_48_mb": p50(after(lambda q: big.sum()), questions),
    }
    index.close()

    base = out["search_less_embedding_ms"]["warm"]
    print(f"FAISS Hugo index, {out['chunks']} chunks, {out['questions']} questions, {out['cpus']} CPUs; p50 ms")
    print(f"  Index.search hybrid, query embedding included: {out['hybrid_ms']:.2f} (x{out['hybrid_ms'] / base:.1f})")
    for name, v in out["embedding_ms"].items():
        print(f"  query embedding, {name}: {v:.2f} (x{v / base:.1f})")
    c = out["int8_cosine_to_f32"]
    print(f"  int8 query vectors' cosine to f32: mean {c['mean']:.4f}, min {c['min']:.4f}")
    for name, v in out["search_less_embedding_ms"].items():
        print(f"  search less embedding, {name.replace('_', ' ').replace(' mb', ' MB')}: {v:.2f} (x{v / base:.2f})")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
