"""The whole benchmark suite in one command: figures, ratios, RESULTS.md and plots.

    python benchmarks/run.py                 (or: make bench)
    python benchmarks/run.py --only hugo,scifact   # some steps, then the report
    python benchmarks/run.py --report-only         # RESULTS.md and plots from benchmarks/out/*.json

Each step is one run of a script that prints its figures with the ratio to a
baseline measured in the same run and writes benchmarks/out/<step>.json; the
steps are those the scripts declare (their ``BENCHMARK``, benchmarks/steps.py),
in their order. Then
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

from steps import HERE, OUT, discover


def main() -> None:
    steps = discover().steps
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated steps: " + ", ".join(steps))
    ap.add_argument("--skip", default="", help="comma-separated steps to leave out")
    ap.add_argument("--report-only", action="store_true", help="only write RESULTS.md and the plots")
    args = ap.parse_args()
    names = [] if args.report_only else (args.only.split(",") if args.only else list(steps))
    names = [n for n in names if n not in set(args.skip.split(","))]
    unknown = [n for n in names if n not in steps]
    if unknown:
        sys.exit(f"unknown step(s) {', '.join(unknown)}; steps: {', '.join(steps)}")
    OUT.mkdir(exist_ok=True)
    failed = []
    for name in names:
        script, rest = steps[name].script, steps[name].args
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
