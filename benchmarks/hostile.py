"""The hostile-input CI tests as a benchmark step: WebSocket fuzz and load, malformed MCP requests, hostile git.

    python benchmarks/hostile.py [--json benchmarks/out/hostile.json]

Runs ``python -m pytest -q -p no:cacheprovider tests/test_ws_fuzz.py
tests/test_mcp_hostile.py tests/test_knowledge_hostile.py`` from the repository
root (HF_HUB_OFFLINE=1) and exits with pytest's code. Three of those tests
write their counts to benchmarks/out/ (tests/figures.py): ws_fuzz.json,
mcp_malformed.json and hostile_git.json; this script merges the ones this run
wrote with pytest's exit code, the command, each test's outcome and time (from
pytest's JUnit XML) and the machine into one file for benchmarks/report.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from faults import outcomes
from report import machine

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
TESTS = ["tests/test_ws_fuzz.py", "tests/test_mcp_hostile.py", "tests/test_knowledge_hostile.py"]
COMMAND = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]
PARTS = ("ws_fuzz", "mcp_malformed", "hostile_git")  # benchmarks/out/<part>.json, written by the tests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=OUT / "hostile.json", help="where to write the figures")
    args = ap.parse_args()
    started = time.time()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        code = subprocess.run([sys.executable, *COMMAND, f"--junit-xml={junit}"], cwd=ROOT, env=env).returncode
        tests = outcomes(junit) if junit.is_file() else {}
    figures: dict[str, Any] = {
        "command": "python " + " ".join(COMMAND),
        "pytest_exit": code,
        "tests": tests,
        "tests_s": round(sum(t["seconds"] for t in tests.values()), 1),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": machine(),
    }
    for part in PARTS:
        path = OUT / f"{part}.json"
        fresh = path.is_file() and path.stat().st_mtime >= started
        figures[part] = json.loads(path.read_text()) if fresh else None  # None: this run's test did not get there
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(figures, indent=2) + "\n")
    counts: dict[str, int] = {}
    for t in tests.values():
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    missing = [p for p in PARTS if figures[p] is None]
    print(
        "hostile: tests: "
        + (", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "none recorded")
        + (f"; no figures from {', '.join(missing)}" if missing else "")
        + f"; pytest exit {code}; figures in {args.json}"
    )
    sys.exit(code or (1 if missing else 0))


if __name__ == "__main__":
    main()
