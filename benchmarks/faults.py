"""The fault suite (tests/faults/) as a benchmark step: kill -9 at every phase, concurrency, a hostile machine.

    python benchmarks/faults.py [--json benchmarks/out/faults.json]

Runs ``python -m pytest -q -p no:cacheprovider tests/faults`` from the
repository root and exits with pytest's code. The suite itself writes
benchmarks/out/faults.json (its ``pytest_terminal_summary`` hook in
tests/faults/conftest.py: every kill trial, the repair times, the suite's
time); this script adds to that file pytest's exit code, the command and each
test's outcome (from pytest's JUnit XML: passed, failed, error, skipped and
why), so that the report can show the concurrency and environment tests'
results beside the kill trials. ``--json`` elsewhere: a copy goes there too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WRITTEN = ROOT / "benchmarks" / "out" / "faults.json"  # where tests/faults/conftest.py writes
COMMAND = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/faults"]


def outcomes(junit: Path) -> dict[str, dict[str, Any]]:
    """Test id (``module::name[param]``) -> {"outcome", "message", "seconds"} from pytest's JUnit XML."""
    out: dict[str, dict[str, Any]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                outcome, message = {"failure": "failed"}.get(tag, tag), child.get("message", "")
                break
        out[f"{module}::{case.get('name', '')}"] = {
            "outcome": outcome,
            "message": message[:300],
            "seconds": round(float(case.get("time") or 0), 1),  # set-up and teardown included
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help=f"also copy the figures here (the suite writes {WRITTEN})")
    args = ap.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        code = subprocess.run([sys.executable, *COMMAND, f"--junit-xml={junit}"], cwd=ROOT).returncode
        tests = outcomes(junit) if junit.is_file() else {}
    if not WRITTEN.is_file() or WRITTEN.stat().st_mtime < started:
        print(f"faults: the suite did not write {WRITTEN} (pytest exit {code})", file=sys.stderr)
        sys.exit(code or 1)
    figures: dict[str, Any] = json.loads(WRITTEN.read_text())
    figures.update(
        {"pytest_exit": code, "command": "python " + " ".join(COMMAND), "tests": tests, "cpus": os.cpu_count()}
    )
    WRITTEN.write_text(json.dumps(figures, indent=2) + "\n")
    counts: dict[str, int] = {}
    for t in tests.values():
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    print(
        f"faults: {figures['passed']} of {figures['trials']} kill trials repaired to a fresh index's chunks; "
        f"repair p50 {figures['repair_p50_s']} s, max {figures['repair_max_s']} s; tests: "
        + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
        + f"; pytest exit {code}"
    )
    if args.json and args.json.resolve() != WRITTEN.resolve():
        args.json.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(WRITTEN, args.json)
    sys.exit(code)


if __name__ == "__main__":
    main()
