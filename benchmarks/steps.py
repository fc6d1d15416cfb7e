"""What a benchmark script adds to the suite, declared once in the script itself.

A script that `benchmarks/run.py` runs declares, at module level,

    BENCHMARK = Benchmark(steps=(Step("name", order=..., args=(...), expected_keys=(...)),), ...)

with its steps (each one run of the script and its JSON file, benchmarks/out/<name>.json), and what
benchmarks/report.py draws from them: sections of RESULTS.md, rows of the targets table, plots. The
runner and the report find every `benchmarks/*.py` that declares ``BENCHMARK`` (:func:`discover`) and
loop over what they declare, each list in its ``order``; a new benchmark is one new file.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"  # where every step writes its JSON file
HOME = OUT / "hugo-home"  # the default-backend Hugo index, reused by later steps
MODELS = OUT / "models"  # the model cache the steps share

Json = dict[str, Any]

NA = "–"

# A module-level `BENCHMARK = Benchmark(` line: what :func:`discover` looks for before it imports a file.
DECLARES = re.compile(r"^BENCHMARK = Benchmark\(", re.MULTILINE)


@dataclass(frozen=True)
class Step:
    """One run of a benchmark script: its arguments, its JSON file, what the report checks in it."""

    name: str  # the JSON file's stem (benchmarks/out/<name>.json) and run.py's --only name
    order: int  # its place in the run and in the report's table of steps
    args: tuple[str, ...] = ()  # the script's arguments; run.py adds `--json benchmarks/out/<name>.json`
    expected_keys: tuple[str, ...] = ()  # top-level keys the script writes today: without them a file predates it
    same_machine: tuple[str, ...] = ()  # recorded keys ("cpus", "python") the report compares with its machine
    check: Callable[[Data], list[str]] | None = None  # further notes on the data (several steps' files together)
    script: str = ""  # the file that declares it, set by discover()


@dataclass(frozen=True)
class Section:
    """A section of RESULTS.md: ``render(data)`` gives its Markdown lines, heading included."""

    title: str  # its heading, and report.py's --section name
    order: int  # its place among the sections
    render: Callable[[Data], list[str]]
    under: str = ""  # the title of a "##" section this one is a "###" of (sections under one title are grouped)


@dataclass
class Row:
    """A row of the targets table."""

    target: str
    measured: str
    baseline: str = NA
    ratio: str = NA
    result: str = NA


@dataclass(frozen=True)
class Target:
    """Rows of the targets table: ``rows(data)``."""

    order: int  # its place in the table
    rows: Callable[[Data], list[Row]]


@dataclass(frozen=True)
class Plot:
    """A PNG plot: ``draw(data, path)`` writes it and says whether there was anything to draw."""

    order: int  # its place among the plots
    file: str  # its file name in the plots folder
    title: str
    steps: tuple[str, ...]  # the steps whose figures it draws (named when they are missing)
    draw: Callable[[Data, Path], bool]


@dataclass(frozen=True)
class Benchmark:
    """Everything one script declares."""

    steps: tuple[Step, ...] = ()
    sections: tuple[Section, ...] = ()
    targets: tuple[Target, ...] = ()
    plots: tuple[Plot, ...] = ()


@dataclass
class Suite:
    """Every declared benchmark, merged, each list in its order."""

    steps: dict[str, Step] = field(default_factory=dict)  # by name, in run order
    sections: list[Section] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)

    def command(self, step: str) -> list[str]:
        """The script and its arguments for ``step`` (no interpreter, no --json)."""
        s = self.steps[step]
        return [s.script, *s.args]


def discover(folder: Path = HERE) -> Suite:
    """Import every ``folder/*.py`` that declares ``BENCHMARK`` (no benchmark runs) and merge what they declare."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    suite = Suite()
    steps: list[Step] = []
    for path in sorted(folder.glob("*.py")):
        if not DECLARES.search(path.read_text(encoding="utf-8")):
            continue
        bench = importlib.import_module(path.stem).BENCHMARK
        steps += [replace(s, script=path.name) for s in bench.steps]
        suite.sections += bench.sections
        suite.targets += bench.targets
        suite.plots += bench.plots
    names = [s.name for s in steps]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"steps declared twice: {', '.join(twice)}")
    suite.steps = {s.name: s for s in sorted(steps, key=lambda s: s.order)}
    suite.sections.sort(key=lambda s: s.order)
    suite.targets.sort(key=lambda t: t.order)
    suite.plots.sort(key=lambda p: p.order)
    return suite


@dataclass
class Data:
    """The JSON files of one run, by step, and why the others are absent."""

    out_dir: Path
    suite: Suite  # the declared steps: get() refuses any other name
    files: dict[str, Json] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    mtimes: dict[str, float] = field(default_factory=dict)

    def get(self, step: str) -> Json | None:
        """The step's figures, None when its file is missing or unreadable; KeyError for an undeclared step."""
        if step not in self.suite.steps:
            raise KeyError(f"no benchmark declares the step {step!r}")
        return self.files.get(step)


def load_data(out_dir: Path, suite: Suite) -> Data:
    """``out_dir/<step>.json`` for every declared step."""
    data = Data(out_dir, suite)
    for step in suite.steps:
        path = out_dir / f"{step}.json"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            data.problems[step] = "no file"
            continue
        except OSError as exc:
            data.problems[step] = f"unreadable: {exc.strerror or exc}"
            continue
        try:
            obj = json.loads(text)
        except ValueError as exc:
            data.problems[step] = f"not valid JSON: {exc}"
            continue
        if not isinstance(obj, dict):
            data.problems[step] = "not a JSON object"
            continue
        data.files[step] = obj
        data.mtimes[step] = path.stat().st_mtime
    return data
