"""The benchmark suite is declared once, in each script (benchmarks/steps.py): run.py and report.py find it.

Both run in their own processes, as a user runs them: the scripts are imported by their bare names
(``faults``, ``chunks``) from benchmarks/, which must not meet this process's modules.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}

NEW_BENCHMARK = '''"""{cmd}: counts
to three."""

import argparse
import json
from pathlib import Path

from render import command, fint, not_measured, prose, verdict
from steps import Benchmark, Data, Row, Section, Step, Target


def section_tally(data: Data) -> list[str]:
    t = data.get("tally")
    lines = ["## Tally", "", *prose("tally", __doc__, cmd=command(data, "tally"))]
    return lines + ([not_measured("tally", data), ""] if not t else [f"Counted {fint(t.get('count'))}.", ""])


def t_tally(data: Data) -> list[Row]:
    t = data.get("tally") or {}
    return [Row("tally counts 3", fint(t.get("count")), result=verdict(t.get("count") == 3 if t else None))]


BENCHMARK = Benchmark(
    steps=(Step("tally", 5, ("--upto", "3"), ("count",)),),
    sections=(Section("Tally", 5, section_tally),),
    targets=(Target(5, t_tally),),
)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--upto", type=int)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.json.write_text(json.dumps({"count": args.upto}))
'''


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300
    )


def test_a_benchmark_in_a_new_file_is_run_and_reported(tmp_path: Path) -> None:
    """One new file, prose in its docstring: run.py runs its step, report.py writes its section and target row."""
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    for name in ("steps.py", "render.py", "run.py", "report.py"):
        shutil.copy(BENCH / name, bench / name)
    (bench / "tally.py").write_text(NEW_BENCHMARK, encoding="utf-8")

    helped = run(bench / "run.py", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "tally" in helped.stdout
    ran = run(bench / "run.py", "--only", "tally", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert json.loads((bench / "out" / "tally.json").read_text()) == {"count": 3}
    results = (bench / "RESULTS.md").read_text(encoding="utf-8")
    assert "| tally | `tally.json` |" in results  # the table of steps
    assert "`python benchmarks/tally.py --upto 3`: counts to three." in results  # its prose, from its docstring
    assert "Counted 3." in results
    assert "| tally counts 3 | 3 | – | – | **PASS** |" in results
    assert "1 passed, 0 failed, 0 not measured, of 1." in results


def declared() -> dict[str, str]:
    """Step -> the script that declares it, as run.py and report.py find them."""
    code = "import json, steps; print(json.dumps({n: s.script for n, s in steps.discover().steps.items()}))"
    found = run("-c", code, cwd=BENCH)
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout)


def test_every_step_of_the_suite_is_declared_by_its_script() -> None:
    """The steps of the committed RESULTS.md are declared, each by a script run.py can run (it takes --json)."""
    steps = declared()
    results = (BENCH / "RESULTS.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| (\w+) \| `\1\.json` \|", results, re.MULTILINE)
    assert listed, "RESULTS.md has no table of steps"
    assert [s for s in listed if s not in steps] == []
    for step, script in steps.items():
        assert '"--json"' in (BENCH / script).read_text(encoding="utf-8"), f"{script} ({step}) takes no --json"


def test_the_report_reads_only_declared_steps(tmp_path: Path) -> None:
    """Every section, target and plot asks for a declared step: an undeclared name would be refused."""
    out = tmp_path / "out"
    out.mkdir()
    for step in declared():
        (out / f"{step}.json").write_text('{"x": 1}')
    made = run(
        BENCH / "report.py", "--out-dir", out, "--results", tmp_path / "RESULTS.md", "--plots", tmp_path / "plots"
    )
    assert made.returncode == 0, made.stderr
    results = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "no benchmark declares the step" not in results
    assert "## Retrieval quality" in results and "### SciFact (BEIR test)" in results
