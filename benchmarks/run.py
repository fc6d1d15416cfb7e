"""Run every benchmark in order; figures go to stdout and benchmarks/out/*.json.

    python benchmarks/run.py        (or: make bench)

Takes about 20 minutes on 2 CPU cores: the Hugo docs are indexed once (and the
index reused by the threshold benchmark), SciFact once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def run(*args: str) -> None:
    print(f"\n$ python {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, *args], check=True, cwd=HERE.parent)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    home = OUT / "hugo-home"
    run("benchmarks/hugo_index.py", "--json", str(OUT / "hugo_index.json"), "--keep", str(home))
    run("benchmarks/threshold.py", "--home", str(home), "--json", str(OUT / "threshold.json"))
    run("benchmarks/server_load.py", "--home", str(home), "--json", str(OUT / "server_load.json"))
    run("benchmarks/scifact.py", "--json", str(OUT / "scifact.json"))


if __name__ == "__main__":
    main()
