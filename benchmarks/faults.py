"""The fault suite (tests/faults/) as a benchmark step: kill -9 at every phase, concurrency, a hostile machine,
damage to the stores (the count of its cases printed with the kill trials').

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

from render import command, fint, fsec, not_measured, num, prose, quantile, table, verdict  # noqa: E402
from steps import NA, Benchmark, Data, Json, Row, Section, Step, Target  # noqa: E402

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
        f"repair p50 {figures['repair_p50_s']} s, max {figures['repair_max_s']} s; "
        f"{damage_counts(figures.get('damage') or [])}; tests: "
        + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
        + f"; pytest exit {code}"
    )
    if args.json and args.json.resolve() != WRITTEN.resolve():
        args.json.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(WRITTEN, args.json)
    sys.exit(code)


def damage_counts(cases: list[Json]) -> str:
    """The damage cases (tests/faults/test_damage_served.py) passed, in all and by store and damage."""
    if not cases:
        return "damage: no case ran"
    stores: dict[str, list[Json]] = {}
    for d in cases:
        stores.setdefault(str(d.get("store")), []).append(d)
    by = "; ".join(
        f"{store} {sum(bool(d.get('passed')) for d in ds)} of {len(ds)} ("
        + ", ".join(f"{d.get('damage')} {'passed' if d.get('passed') else 'FAILED'}" for d in ds)
        + ")"
        for store, ds in sorted(stores.items())
    )
    passed = sum(bool(d.get("passed")) for d in cases)
    return f"damage: {passed} of {len(cases)} cases said, never served and repaired: {by}"


# -- in the report (benchmarks/report.py) --------------------------------------

FAULT_TRIALS = 20  # kill trials the fault suite must run, every one repaired to a fresh index's chunks
# The fault driver's phases (tests/faults/driver.py PHASES) and the kill trials' two starting states.
FAULT_PHASES = ("scan", "parse", "embed", "upsert", "commit", "delete", "save")
FAULT_MODES = ("fresh", "incremental")
# The pytest command of the fault suite (benchmarks/faults.py records the one it ran as `command`).
FAULTS_PYTEST = "python -m pytest -q -p no:cacheprovider tests/faults"
# What each test of the fault suite checks, read from tests/faults/ (module::function -> one line).
FAULT_TESTS = {
    "test_concurrency::test_a_second_index_run_fails_clearly_and_the_first_finishes": (
        "while an `mdrag index` run is held mid-run (store open, manifest dirty), a second `mdrag index` of the "
        'same index, from the same folder or another one, exits 1 with one `mdrag: error:` line ("in use by '
        'another process"), no traceback; the first run finishes and its index is whole'
    ),
    "test_concurrency::test_search_and_status_during_index_say_so": (
        "`mdrag search` and `mdrag status` (text and `--json`) during an index run exit 1 with a clear error: "
        "the store is in use and no mdrag server answers; the run's index is whole afterwards"
    ),
    "test_concurrency::test_index_while_serve_owns_the_index": (
        "while `mdrag serve` owns the index, `mdrag index` is refused with an error naming `mdrag serve`, a "
        "search through the server (`--server`) answers, the server stops cleanly on Ctrl-C, and the refused run "
        "changed nothing (the server, watching the folders, may have indexed the new file itself)"
    ),
    "test_environment::test_status_into_a_closed_pipe_exits_quietly": (
        "`mdrag status` (text and `--json`) writing into a pipe whose reader is gone exits 141 (128 + SIGPIPE) "
        "with nothing on stderr"
    ),
    "test_environment::test_search_into_a_closed_pipe_or_head_exits_quietly": (
        "`mdrag search` (50 results, text and `--json`) into a closed pipe exits 141 quietly; `mdrag search ... "
        "| head -1` ends with 0 or 141 and an empty stderr"
    ),
    "test_environment::test_search_and_status_work_on_a_read_only_home": (
        "with MDRAG_HOME read-only (chmod a-w, run without CAP_DAC_OVERRIDE when root; and a read-only bind "
        'mount, root only), search and status answer, `mdrag index` fails with a clear "read-only" error, '
        "nothing in the home changes and the private temporary copy of the store is removed"
    ),
    "test_environment::test_search_on_a_read_only_home_without_the_model_export_says_what_to_do": (
        "on a read-only home without the model's ONNX export, `mdrag search` fails with an error naming the "
        "ONNX export and `embedding.backend=torch`"
    ),
    "test_environment::test_index_on_a_full_disk_fails_clearly_then_repairs": (
        "MDRAG_HOME on an 8 MB tmpfs (root only), full before the run or filling up during it: `mdrag index` "
        'exits 1 with a "space"/"full" error and no half-written manifest; once space is freed the next '
        "run indexes all 52 files and the index is whole"
    ),
    "test_crash::test_kill_9_at_many_points_then_repair": (
        "8 rounds of edits, each run killed at a random moment while it writes (a slowed embedder): the next "
        "run repairs the index to exactly the chunks of a clean index of the same files"
    ),
    "test_damage_served::test_damage_is_said_never_served_and_repaired": (
        "the real CLI and model on 24 CNCF glossary pages, on FAISS and Milvus Lite: a store file that cannot be "
        "read (SQLite pages; a Milvus Lite schema or data file, times kept) fails `mdrag index`, `status` and "
        "`search` with one message naming `mdrag index --rebuild`; zeroed vectors (FAISS) and edited chunk texts "
        "are never served and are found by `status --verify`, then read again by `mdrag index`; a deleted "
        'manifest is said lost (status exits 1), never "being built"; after each repair `status --verify` '
        "passes and the search answers as before"
    ),
    "test_crash::test_kill_9_of_the_real_cli_with_the_real_model": (
        "the real `python -m mdrag index` with the real model, killed while it embeds and writes: the next run "
        "says `repaired` and the store's ids are the manifest's"
    ),
}


def fault_phases(fa: Json) -> list[str]:
    """The driver's phases in its order, then any other phase the trials record."""
    seen = {phase for phase, _ in fault_cells(fa)}
    return [*FAULT_PHASES, *sorted(seen - set(FAULT_PHASES))]


def fault_cells(fa: Json) -> dict[tuple[str, str], list[Json]]:
    """(phase, mode) -> the trials that killed a run in that phase (a trial with two kills counts in both)."""
    cells: dict[tuple[str, str], list[Json]] = {}
    for r in fa.get("runs") or []:
        if not isinstance(r, dict):
            continue
        for i, f in enumerate(k for k in r.get("faults") or [] if isinstance(k, dict)):
            cells.setdefault((str(f.get("phase")), str(r.get("mode"))), []).append({**r, "kill": f, "nth_kill": i})
    return cells


def t_faults(data: Data) -> list[Row]:
    name = (
        "kill -9 at every phase, then a normal run: every trial gives a fresh index's chunks "
        f"(>= {FAULT_TRIALS} trials)"
    )
    fa = data.get("faults")
    if not fa:
        return [Row(name, not_measured("faults", data))]
    trials, passed = num(fa.get("trials")), num(fa.get("passed"))
    killed = {phase for phase, _ in fault_cells(fa)}
    missing = [p for p in FAULT_PHASES if p not in killed]
    ok = None if trials is None or passed is None else passed == trials >= FAULT_TRIALS and not missing
    result = verdict(ok)
    if ok is False and trials is not None and passed is not None:
        why = [f"{fint(trials - passed)} failed"] if passed != trials else []
        why += [f"fewer than {FAULT_TRIALS} trials"] if trials < FAULT_TRIALS else []
        why += [f"no kill in {', '.join(missing)}"] if missing else []
        result = "**FAIL**: " + "; ".join(why)
    return [
        Row(
            name,
            f"{fint(passed)} of {fint(trials)} trials passed, {len(killed & set(FAULT_PHASES))} of "
            f"{len(FAULT_PHASES)} phases (seed {fa.get('seed', NA)}); the normal run after the kill: "
            f"p50 {fsec(fa.get('repair_p50_s'))}, max {fsec(fa.get('repair_max_s'))}",
            "a fresh index of the same files (same run)",
            NA,
            result,
        )
    ]


def fault_outcome(runs: list[Json]) -> str:
    """One test's outcome over its parameters: "passed", "2 passed", "1 passed, 1 skipped (why)"..."""
    counts: dict[str, int] = {}
    whys: list[str] = []
    for r in runs:
        o = str(r.get("outcome", "?"))
        counts[o] = counts.get(o, 0) + 1
        if o != "passed" and r.get("message"):
            whys.append(str(r["message"]).removeprefix("Skipped: ").splitlines()[0][:120])
    if counts == {"passed": 1}:
        return "passed"
    text = ", ".join(f"{n} {o}" for o, n in sorted(counts.items(), key=lambda t: t[0] != "passed"))
    return text + (f" ({'; '.join(dict.fromkeys(whys))})" if whys else "")


def section_faults(data: Data) -> list[str]:
    fa = data.get("faults")
    cmd = str((fa or {}).get("command") or FAULTS_PYTEST)
    lines = ["## Crash and fault safety", ""]
    lines += prose("faults", cmd_faults=command(data, "faults"), cmd=cmd)
    if not fa:
        return lines + [not_measured("faults", data), ""]
    runs = [r for r in fa.get("runs") or [] if isinstance(r, dict)]
    process = sorted(x for x in (num(r.get("process_s")) for r in runs) if x is not None)
    dirty = sum(bool(r.get("repaired")) for r in runs)
    files = sorted({(r.get("files"), r.get("files_searched")) for r in runs if r.get("files") is not None}, key=str)
    exit_code = fa.get("pytest_exit")
    lines += [
        f"- Trials: {fint(fa.get('passed'))} of {fint(fa.get('trials'))} passed (seed {fa.get('seed', NA)}; "
        f"another seed: `MDRAG_FAULT_SEED=n`).",
        f"- The normal run after the kill (`mdrag index` inside the driver): p50 {fsec(fa.get('repair_p50_s'))}, "
        f"max {fsec(fa.get('repair_max_s'))}; the whole process, Python start-up included: p50 "
        f"{fsec(quantile(process, 0.5))}, max {fsec(process[-1] if process else None)}. In {dirty} of "
        f"{len(runs)} trials the (last) kill left the manifest dirty and the normal run reported `repaired`; in "
        "the others the manifest was clean when the kill came (before the run's first write, or after its last "
        "save).",
        "- Files per trial: "
        + ("; ".join(f"{fint(n)} indexed, {fint(s)} checked by a search" for n, s in files) or NA)
        + ".",
        f"- Damage: {damage_counts(fa.get('damage') or [])}.",
        f"- Suite time: {fsec(fa.get('suite_s'))} (every test in tests/faults/, set-up included"
        + (f", {fa['cpus']} CPUs" if fa.get("cpus") else "")
        + ")"
        + (f"; pytest exit code {exit_code}." if exit_code is not None else "; pytest's exit code not recorded."),
        "",
    ]
    cells = fault_cells(fa)

    def cell(phase: str, mode: str) -> tuple[str, str]:
        trials = cells.get((phase, mode), [])
        if not trials:
            return ("no calls" if (phase, mode) == ("delete", "fresh") else NA), NA
        ok = sum(bool(t.get("passed")) for t in trials)
        seen: dict[str, int] = {}
        for t in trials:
            k = t["kill"]
            point = f"{k.get('n', '?')}/{k.get('of', '?')} {k.get('when', '?')}" + (
                " (2nd kill)" if t["nth_kill"] else ""
            )
            seen[point] = seen.get(point, 0) + 1
        return f"{ok}/{len(trials)}", "; ".join(p + (f" ×{n}" if n > 1 else "") for p, n in seen.items())

    rows = []
    for phase in fault_phases(fa):
        row = [f"`{phase}`"]
        for mode in FAULT_MODES:
            row += list(cell(phase, mode))
        rows.append(row)
    lines += [
        "Trials per phase (passed / trials; a trial with two kills counts in the phase of each). A kill point "
        "n/N before|after: the n-th of the N calls a run without a fault makes, killed before or after the call.",
        "",
    ]
    lines += table(["phase", "fresh", "fresh: kill points", "incremental", "incremental: kill points"], rows)
    tests = fa.get("tests") if isinstance(fa.get("tests"), dict) else None
    by_test: dict[str, list[Json]] = {}
    for tid, r in (tests or {}).items():
        by_test.setdefault(str(tid).split("[", 1)[0], []).append(r if isinstance(r, dict) else {})
    rows = []
    for key, what in FAULT_TESTS.items():
        outcome = fault_outcome(by_test[key]) if key in by_test else NA
        rows.append([key.split("::")[0].removeprefix("test_"), what, outcome])
    for key in sorted(set(by_test) - set(FAULT_TESTS) - {"test_kill_points::test_kill_at_a_point_then_repair"}):
        rows.append(
            [
                key.split("::")[0].removeprefix("test_"),
                f"`{key.split('::')[-1]}` (not described here)",
                fault_outcome(by_test[key]),
            ]
        )
    kill_key = "test_kill_points::test_kill_at_a_point_then_repair"
    if kill_key in by_test:
        rows.append(["kill_points", "the kill trials above, one test each", fault_outcome(by_test[kill_key])])
    lines += [
        "The suite's other tests: concurrency (two mdrag processes on one index), the environment (a reader that "
        "goes away, a read-only home, a full disk) and kills at random moments. "
        + (
            "Outcomes from this run's pytest."
            if tests is not None
            else "Outcomes not recorded: faults.json was written by pytest alone; "
            "`python benchmarks/run.py --only faults` records them."
        ),
        "",
    ]
    lines += table(["file", "what the test checks", "outcome"], rows)
    return lines


BENCHMARK = Benchmark(
    # the fault suite, tests/faults/ (pytest): it writes OUT/faults.json itself
    steps=(
        Step(
            "faults",
            150,
            (),
            ("trials", "passed", "seed", "repair_p50_s", "repair_max_s", "suite_s", "runs", "damage"),
        ),
    ),
    sections=(Section("Crash and fault safety", 100, section_faults),),
    targets=(Target(110, t_faults),),
)


if __name__ == "__main__":
    main()
