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

from faults import fault_outcome, outcomes
from render import command, fint, fsec, machine, not_measured, num, prose, table  # noqa: E402
from steps import NA, Benchmark, Data, Json, Section, Step  # noqa: E402

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


# -- in the report (benchmarks/report.py) --------------------------------------

# The pytest command of the hostile-input tests (benchmarks/hostile.py records the one it ran as `command`).
HOSTILE_PYTEST = (
    "python -m pytest -q -p no:cacheprovider tests/test_ws_fuzz.py tests/test_mcp_hostile.py "
    "tests/test_knowledge_hostile.py"
)
# The tests of benchmarks/hostile.py that write counts (module::function), and the git transports.
WS_FUZZ_TEST = "test_ws_fuzz::test_fuzz_and_load_with_no_close_and_no_error"
MCP_TEST = "test_mcp_hostile::test_mcp_malformed_requests"
GIT_TEST = "test_knowledge_hostile::test_hostile_repository_copies_nothing_from_outside"
GIT_TRANSPORTS = {
    "file": "over file:// from a local bare repository (`allow_local_git: true`)",
    "git": "over git:// from `git daemon` on 127.0.0.1, serving a local bare repository (no `allow_local_git`)",
}


def section_hostile(data: Data) -> list[str]:
    ho = data.get("hostile")
    cmd = str((ho or {}).get("command") or HOSTILE_PYTEST)
    lines = ["## Hostile input", ""]
    lines += prose("hostile", cmd_hostile=command(data, "hostile"), cmd=cmd)
    if not ho:
        return lines + [not_measured("hostile", data), ""]
    tests = ho.get("tests") if isinstance(ho.get("tests"), dict) else {}
    by_test: dict[str, list[Json]] = {}
    for tid, r in tests.items():
        by_test.setdefault(str(tid).split("[", 1)[0], []).append(r if isinstance(r, dict) else {})

    def outcome(key: str) -> str:
        return fault_outcome(by_test[key]) if key in by_test else NA

    def seconds(key: str) -> str:
        runs = by_test.get(key) or []
        return fsec(sum(num(r.get("seconds")) or 0.0 for r in runs)) if runs else NA

    absent = "no counts from this run (its test was skipped or stopped before writing them)"
    rows = []
    ws = ho.get("ws_fuzz") if isinstance(ho.get("ws_fuzz"), dict) else None
    cats = (ws or {}).get("fuzz_categories") or {}
    sent = f"{fint((ws or {}).get('fuzz_messages'))} malformed messages" if ws else "malformed messages"
    if ws:
        sent += (
            f" over {fint(ws.get('fuzz_connections'))} connections, from a seeded random (seed {ws.get('seed', NA)}: "
            "the same ones every run): "
            + ", ".join(f"{name} {fint(n)}" for name, n in sorted(cats.items(), key=lambda t: -(num(t[1]) or 0)))
            + f"; at the same time {fint(ws.get('load_clients'))} clients × {fint(ws.get('load_queries_each'))} "
            "searches, and a `status` probe every 0.2 s"
        )
    load_total = (num((ws or {}).get("load_clients")) or 0) * (num((ws or {}).get("load_queries_each")) or 0)
    rows.append(
        [
            "WebSocket fuzz and load (`test_ws_fuzz.py`, the `mdrag serve` server on the example docs)",
            sent,
            (
                f"{fint(ws.get('fuzz_error_replies'))} of {fint(ws.get('fuzz_messages'))} answered with an error "
                'reply (no "internal error", traceback or path of the server\'s folders in it)'
                + (
                    f", {fint(ws.get('fuzz_searched'))} with results (valid on the {ws.get('store', NA)} store: a "
                    "backslash in a path prefix, which only Milvus refuses)"
                    if ws.get("fuzz_searched")
                    else ""
                )
                + f", {fint(ws.get('fuzz_closes'))} connections closed; {fint(ws.get('load_answered'))} of "
                f"{fint(load_total)} searches answered with results, {fint(ws.get('load_errors'))} errors, "
                f"{fint(ws.get('load_closes'))} closes; the probe answered {fint(ws.get('probe_answered'))} of "
                f"{fint(ws.get('probe_sent'))} times"
            )
            if ws
            else absent,
            outcome(WS_FUZZ_TEST),
            seconds(WS_FUZZ_TEST)
            + (f" (fuzz, load and probe together {fsec(ws.get('wall_s'))}, the index already built)" if ws else ""),
        ]
    )
    mc = ho.get("mcp_malformed") if isinstance(ho.get("mcp_malformed"), dict) else None
    rows.append(
        [
            "MCP malformed requests (`test_mcp_hostile.py`, `python -m mdrag mcp` over stdio)",
            (
                f"{fint(mc.get('requests'))} malformed requests, each followed by a `tools/list` probe: "
                f"{fint((num(mc.get('requests')) or 0) - (num(mc.get('tool_argument_requests')) or 0))} at the "
                "JSON-RPC level (not JSON or not UTF-8, NaN, nested 1,000 deep, a batch, ids that are objects, "
                "fractions, 5,000 digits or lone surrogates, no or unknown method or tool, params of the wrong "
                "shape, lone surrogates and a 5,000-digit `k` in arguments, a 17 MiB line) "
                f"and {fint(mc.get('tool_argument_requests'))} with tool arguments of the wrong type or range "
                "(queries of 5,000 characters and 10 MB, empty or not a string, `k` a string, a fraction, a "
                "boolean, 0 or 10**18, a docset that is a path or unknown, keywords of the wrong type, too long or "
                "with a newline); and "
                f"{fint(mc.get('notifications'))} notifications and responses. A fixed set, no random"
                if mc
                else "malformed JSON-RPC lines, notifications and responses"
            ),
            (
                f"{fint(mc.get('answered'))} of {fint(mc.get('requests'))} requests answered, {fint(mc.get('hangs'))} "
                f"hangs (no reply in 30 s), {fint(mc.get('wrong'))} lines not as expected (a wrong error code or "
                'message; the home\'s path, a traceback or "internal error" in the reply; the probe unanswered); '
                f"{fint(mc.get('unanswered'))} of "
                f"{fint(mc.get('notifications'))} notifications and responses left unanswered, as JSON-RPC "
                f"requires; the probe answered {fint(mc.get('probes_answered'))} of {fint(mc.get('probes'))} "
                f"times; the server exited with {mc.get('exit_code', NA)} at the end of its input"
            )
            if mc
            else absent,
            outcome(MCP_TEST),
            seconds(MCP_TEST) + (f" (server start to exit {fsec(mc.get('wall_s'))})" if mc else ""),
        ]
    )
    git = ho.get("hostile_git") if isinstance(ho.get("hostile_git"), dict) else {}
    for transport, how in GIT_TRANSPORTS.items():
        g = git.get(transport) if isinstance(git.get(transport), dict) else None
        run = tests.get(f"{GIT_TEST}[{transport}]")
        run = run if isinstance(run, dict) else None
        rows.append(
            [
                f"hostile git repository, {transport}:// (`test_knowledge_hostile.py`, `mdrag knowledge refresh`)",
                "a repository committed with symbolic links to /etc, to a folder beside it, into its own `.git` "
                f"and round a loop, {how}: "
                + (
                    f"{fint(g.get('explicit_paths'))} docsets each with one hostile `paths` entry (through those "
                    "links, absolute, `..`, `.git/`), and two that take the whole repository or `docs/`, "
                    f"meeting {fint((num(g.get('links_walked')) or 0) / 2)} links that lead out each"
                    if g
                    else "docsets with hostile `paths` entries, and two that take the whole repository or `docs/`"
                ),
                (
                    f"{fint(g.get('paths_tried'))} paths tried, {fint(g.get('refused'))} refused with the reason, "
                    f"{fint(g.get('escaped'))} escaped; {fint(g.get('files_copied'))} files copied (the test checks: "
                    "the repository's own files, in the two docsets without a hostile path)"
                )
                if g
                else absent,
                fault_outcome([run]) if run else NA,
                (fsec(run.get("seconds")) if run else NA) + (f" (the refresh {fsec(g.get('wall_s'))})" if g else ""),
            ]
        )
    lines += table(["test", "what it sends", "counts", "outcome", "time"], rows)
    counted = {WS_FUZZ_TEST, MCP_TEST, GIT_TEST}
    others = {k: v for k, v in by_test.items() if k not in counted}
    failing = sorted(k for k, v in others.items() if any(r.get("outcome") == "failed" for r in v))
    code = ho.get("pytest_exit")
    lines += [
        f"- The other {sum(len(v) for v in others.values())} tests in these files (a docset folder confined to the "
        "project, links in the docset folder not written through, the selection rules, the MCP server reading "
        "outside the project only what the user allows): "
        + (fault_outcome([r for v in others.values() for r in v]) if others else NA)
        + (f"; failed: {', '.join(f'`{k}`' for k in failing)}" if failing else "")
        + ".",
        f"- pytest exit code {code if code is not None else NA}; the three files ran {fsec(ho.get('tests_s'))} "
        "(pytest's JUnit times, set-up included).",
        f"- Machine: {ho.get('machine', NA)}; Python {ho.get('python', NA)}.",
        "",
    ]
    return lines


BENCHMARK = Benchmark(
    # the hostile-input CI tests (pytest); they write their counts, it merges them
    steps=(
        Step(
            "hostile",
            170,
            (),
            ("command", "pytest_exit", "tests", "ws_fuzz", "mcp_malformed", "hostile_git"),
            ("cpus",),
        ),
    ),
    sections=(Section("Hostile input", 120, section_hostile),),
)


if __name__ == "__main__":
    main()
