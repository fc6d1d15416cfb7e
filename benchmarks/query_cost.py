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

Then the warm search's split, per mode (dense, bm25, hybrid): the query's
embedding (the configured embedder) and the rest of ``Index.search`` (the
same search given the query's vector), with the rest's ratio to the
embedding (the target: at most a third). ``--split`` measures that alone
(any corpus: ``--index`` names the index in the home, ``--questions`` a
question set of benchmarks/data).

    python benchmarks/query_cost.py --home DIR [--json out.json]
    python benchmarks/query_cost.py --home DIR --split [--index NAME] [--questions benchmarks/data/otel_qa.jsonl]
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
MODES = ("dense", "bm25", "hybrid")


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
    ap.add_argument("--split", action="store_true", help="only the warm search's split, per mode")
    ap.add_argument("--index", help="the index searched (default: the home's configured one)")
    ap.add_argument("--questions", type=Path, default=QA, help="a question set (default: the Hugo questions)")
    args = ap.parse_args()
    os.environ["MDRAG_HOME"] = str(args.home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.split:
        out = split(args.index, args.questions)
        if args.json:
            args.json.write_text(json.dumps(out, indent=2) + "\n")
        return

    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from mdrag.config import load_config
    from mdrag.embedding.onnx import OnnxEmbedder, OpenVinoEmbedder
    from mdrag.index import Index

    questions = [json.loads(line)["question"] for line in args.questions.read_text().splitlines() if line.strip()]
    index = Index(load_config({"index": args.index} if args.index else None))
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
    out["split"] = _split(index, questions, embed)
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
    _print_split(out["split"])
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


def split(name: str | None, qa: Path) -> dict[str, Any]:
    """The warm search's split on index ``name`` over the questions of ``qa`` (printed; returned)."""
    from mdrag.config import load_config
    from mdrag.index import Index

    questions = [json.loads(line)["question"] for line in qa.read_text().splitlines() if line.strip()]
    index = Index(load_config({"index": name} if name else None))
    if not index.status().chunks:
        raise SystemExit(f"index {index.name!r} of {os.environ['MDRAG_HOME']} holds no chunks: run `mdrag index`")
    index.search(questions[0])
    embed = index.embedder.embed_query
    index.embedder.embed_query = {q: embed(q) for q in questions}.__getitem__  # type: ignore[method-assign]
    out = {"index": index.name, "chunks": index.status().chunks, "questions": len(questions)}
    out.update(_split(index, questions, embed))
    index.close()
    print(f"{qa.name} on index {out['index']} ({out['chunks']} chunks), {out['questions']} questions; p50 ms")
    _print_split(out)
    return out


def _split(index: Any, questions: list[str], embed: Callable[[str], object]) -> dict[str, Any]:
    """p50 of the query's embedding (``embed``) and of the rest of a warm search in each mode (``index``'s
    embedder answers from a table of the questions' vectors)."""
    rest = {mode: p50(whole(lambda q, m=mode: index.search(q, k=K, mode=m)), questions) for mode in MODES}
    return {"embedding_ms": p50(whole(embed), questions), "rest_ms": rest}


def _print_split(split: dict[str, Any]) -> None:
    e = split["embedding_ms"]
    for mode, rest in split["rest_ms"].items():
        print(f"  warm {mode} search: query embedding {e:.2f}, the rest {rest:.2f} (rest / embedding {rest / e:.2f})")


if __name__ == "__main__":
    main()
