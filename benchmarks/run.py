"""The whole benchmark suite in one command: figures, ratios, RESULTS.md and plots.

    python benchmarks/run.py                 (or: make bench)
    python benchmarks/run.py --only hugo,scifact   # some steps, then the report
    python benchmarks/run.py --report-only         # RESULTS.md and plots from benchmarks/out/*.json

Each step is one script that prints its figures with the ratio to a baseline
measured in the same run and writes benchmarks/out/<step>.json; then
benchmarks/report.py writes benchmarks/RESULTS.md and benchmarks/plots/*.png
from those files. Takes about 45 minutes on 2 CPU cores (the fault suite about
4 of them, the hostile-input tests about 1; the LlamaIndex step installs
LlamaIndex in its own virtualenv the first time, a few minutes more).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
HOME = OUT / "hugo-home"  # the default-backend Hugo index, reused by later steps

# step name -> script and arguments; each writes OUT/<name>.json
STEPS: dict[str, list[str]] = {
    "embedders": ["embedders.py", "--cache", str(OUT / "models")],
    "embedders_longest": ["embedders.py", "--longest", "--cache", str(OUT / "models")],
    "hugo_torch": ["hugo_index.py", "--backend", "torch"],
    "hugo": ["hugo_index.py", "--keep", str(HOME), "--model-cache", str(OUT / "models")],
    "threshold": ["threshold.py", "--home", str(HOME)],
    "context": ["context.py", "--model-cache", str(OUT / "models")],
    "incremental": ["incremental.py"],
    "server_load": ["server_load.py", "--home", str(HOME)],
    # mdrag serve while it indexes 300 otel docs dropped into the served Hugo docs (issue 26)
    "index_changes": ["index_changes.py", "--otel-files", "300"],
    "mcp_latency": ["mcp_latency.py"],
    "scifact": ["scifact.py"],
    "scifact_torch": ["scifact.py", "--backend", "torch"],
    "store_scale": ["store_scale.py"],
    "llamaindex": ["llamaindex_compare.py", "--model-cache", str(OUT / "models")],
    "faults": ["faults.py"],  # the fault suite, tests/faults/ (pytest): it writes OUT/faults.json itself
    "parse_worker": ["parse_worker.py"],
    "hostile": ["hostile.py"],  # the hostile-input CI tests (pytest); they write their counts, it merges them
    "citations": ["citations.py", "--model-cache", str(OUT / "models")],
    "chunks": ["chunks.py"],
    "html_extract": ["html_extract.py"],
    # refusal ("no relevant information") per corpus; each builds its index on first use (otel: ~11,600 chunks)
    "refusal_otel": ["refusal.py", "--corpus", "otel", "--home", str(OUT / "refusal-otel")],
    "refusal_hugo": ["refusal.py", "--corpus", "hugo", "--home", str(HOME)],
    "refusal_cncf": ["refusal.py", "--corpus", "cncf", "--home", str(OUT / "refusal-cncf")],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated steps: " + ", ".join(STEPS))
    ap.add_argument("--skip", default="", help="comma-separated steps to leave out")
    ap.add_argument("--report-only", action="store_true", help="only write RESULTS.md and the plots")
    args = ap.parse_args()
    names = [] if args.report_only else (args.only.split(",") if args.only else list(STEPS))
    names = [n for n in names if n not in set(args.skip.split(","))]
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        sys.exit(f"unknown step(s) {', '.join(unknown)}; steps: {', '.join(STEPS)}")
    OUT.mkdir(exist_ok=True)
    failed = []
    for name in names:
        script, *rest = STEPS[name]
        cmd = [sys.executable, str(HERE / script), *rest, "--json", str(OUT / f"{name}.json")]
        print(f"\n== {name}: python benchmarks/{script} {' '.join(rest)}", flush=True)
        t = time.perf_counter()
        if subprocess.run(cmd, cwd=HERE.parent).returncode != 0:
            failed.append(name)
        print(f"== {name}: {time.perf_counter() - t:.0f} s", flush=True)
    subprocess.run([sys.executable, str(HERE / "report.py")], cwd=HERE.parent, check=True)
    if failed:
        sys.exit(f"steps that failed: {', '.join(failed)} (their previous figures, if any, stay in the report)")


if __name__ == "__main__":
    main()
