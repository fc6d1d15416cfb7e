"""The model in a new home: written from the weights without torch, against torch's export.

Each figure is a fresh process, timed from before it starts until the model is ready to embed (wall, and
the CPU time of the process: user + system), in a new cache folder each time; the rounds interleave the
ways, so load on the machine falls on all of them alike:

- ``build``: mdrag's way, `OnnxEmbedder(...).warm_up()` in a new cache: the ONNX file written from the
  weights by mdrag/embedding/onnx_build.py, then opened by onnxruntime;
- ``torch_export`` (the baseline, the way of earlier releases): torch's ONNX export of the same weights
  (`export_onnx`, which also checks the file against torch), then opened by onnxruntime; needs the torch
  extra;
- ``warm``: a second process in a home whose model is written: what every later command pays;
- ``first_index``: the first `mdrag index examples/docs` in a new home, as a user runs it
  (`embedding.backend: onnx`, the default install's backend), and the size of the home's model folder.

    python benchmarks/model_prep.py [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from render import NA, fint, fmb, fratio, fsec, not_measured, prose, table
from steps import Benchmark, Data, Section, Step

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "docs"

BUILD = """\
import sys
from pathlib import Path
from mdrag.embedding.onnx import OnnxEmbedder
OnnxEmbedder(cache_dir=Path(sys.argv[1])).warm_up()
"""

TORCH_EXPORT = """\
import sys
from pathlib import Path
from mdrag.embedding.local import DEFAULT_MODEL, resolve_model_dir
from mdrag.embedding.onnx import _new_session, export_onnx
out = Path(sys.argv[1]) / "model.onnx"
export_onnx(resolve_model_dir(DEFAULT_MODEL), out)
_new_session(out, 2)
"""


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall s, CPU s) of one child process, from before it starts until it exits."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def torch_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def run(rounds: int) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    ways = ["build", "torch_export"] if torch_installed() else ["build"]
    figures: dict[str, dict[str, list[float]]] = {w: {"wall_s": [], "cpu_s": []} for w in [*ways, "warm"]}
    index: dict[str, list[float]] = {"wall_s": [], "cpu_s": []}
    models_mb = None
    with tempfile.TemporaryDirectory(prefix="mdrag-model-prep-") as tmp:
        for r in range(rounds):
            for way in ways:
                cache = Path(tmp) / f"{way}-{r}"
                code = BUILD if way == "build" else TORCH_EXPORT
                wall, cpu = timed([sys.executable, "-c", code, str(cache)], env)
                figures[way]["wall_s"].append(wall)
                figures[way]["cpu_s"].append(cpu)
                if way == "build":  # the same home again: the model is there
                    wall, cpu = timed([sys.executable, "-c", BUILD, str(cache)], env)
                    figures["warm"]["wall_s"].append(wall)
                    figures["warm"]["cpu_s"].append(cpu)
            home = Path(tmp) / f"home-{r}"
            home.mkdir()
            (home / "config.yaml").write_text("embedding:\n  backend: onnx\n")
            wall, cpu = timed(
                [sys.executable, "-m", "mdrag", "index", str(EXAMPLES), "-q"], {**env, "MDRAG_HOME": str(home)}
            )
            index["wall_s"].append(wall)
            index["cpu_s"].append(cpu)
            models_mb = folder_mb(home / "cache" / "models")
            print(
                f"round {r + 1}/{rounds}: "
                + ", ".join(f"{w} {figures[w]['wall_s'][-1]:.2f} s" for w in figures)
                + f", first index {wall:.2f} s",
                flush=True,
            )
    out: dict[str, Any] = {w: summarize(f) for w, f in figures.items()}
    out["first_index"] = {**summarize(index), "models_mb": models_mb, "files": len(list(EXAMPLES.rglob("*.*")))}
    out["rounds"] = rounds
    out["cpus"] = os.cpu_count()
    out["python"] = sys.version.split()[0]
    return out


def summarize(f: dict[str, list[float]]) -> dict[str, Any]:
    return {**f, **{f"{k}_median": statistics.median(v) for k, v in f.items()}}


def summary(r: dict[str, Any]) -> None:
    """Each figure with its ratio to torch's export (the baseline, same run)."""
    base = r.get("torch_export")
    for way in ("build", "torch_export", "warm"):
        f = r.get(way)
        if not f:
            print(f"{way}: not measured (torch is not installed)")
            continue
        ratio = f" ({f['wall_s_median'] / base['wall_s_median']:.2f}x torch's export)" if base else ""
        print(f"{way}: median wall {f['wall_s_median']:.2f} s{ratio}, CPU {f['cpu_s_median']:.2f} s")
    i = r["first_index"]
    print(
        f"first `mdrag index examples/docs` in a new home: median wall {i['wall_s_median']:.2f} s, CPU "
        f"{i['cpu_s_median']:.2f} s; the home's model folder: {i['models_mb']:.0f} MB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    result = run(args.rounds)
    summary(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


# -- in the report (benchmarks/report.py) --------------------------------------


def section_model_prep(data: Data) -> list[str]:
    mp = data.get("model_prep")
    lines = ["## The model in a new home", ""]
    lines += prose("model_prep", cmd_model_prep="`python benchmarks/model_prep.py`")
    if not mp:
        return lines + [not_measured("model_prep", data), ""]
    base = mp.get("torch_export") or {}
    rows = []
    for way, label in (
        ("build", "written from the weights, no torch (mdrag's way)"),
        ("torch_export", "torch's export (baseline)"),
        ("warm", "a later process, model already written"),
    ):
        f = mp.get(way) or {}
        wall = f.get("wall_s") or []
        ratio = f.get("wall_s_median", 0) / base["wall_s_median"] if base and f else None
        rows.append(
            [
                label,
                fsec(f.get("wall_s_median")),
                f"{fsec(min(wall))} - {fsec(max(wall))}" if wall else NA,
                fsec(f.get("cpu_s_median")),
                fratio(ratio) if way != "torch_export" else "1.00x",
            ]
        )
    lines += table(["process to model ready", "wall, median", "wall, range", "CPU, median", "x torch's export"], rows)
    i = mp.get("first_index") or {}
    lines += [
        f"First `mdrag index examples/docs` ({fint(i.get('files'))} files) in a new home, from nothing to indexed: "
        f"median {fsec(i.get('wall_s_median'))} wall, {fsec(i.get('cpu_s_median'))} CPU; the home then keeps "
        f"{fmb(i.get('models_mb'))} of model files (one copy). {fint(mp.get('rounds'))} interleaved rounds, "
        f"{fint(mp.get('cpus'))} CPUs.",
        "",
    ]
    return lines


BENCHMARK = Benchmark(
    steps=(Step("model_prep", 5, (), ("build", "warm", "first_index")),),
    sections=(Section("The model in a new home", 15, section_model_prep),),
)


if __name__ == "__main__":
    main()
