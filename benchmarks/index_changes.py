"""`mdrag serve` while its index changes: search latency quiet and while the
server indexes a large folder dropped into the one it serves, and how long an edit takes to become
searchable meanwhile.

The server runs as its own process (`mdrag serve DIR`) over a copy of the Hugo docs, with the real
MiniLM model, and builds its index first. Then, over WebSocket, one search every 0.3 s:
- quiet: the Hugo QA questions, on the built index;
- during indexing: the OpenTelemetry docs are copied into the served folder (a long update), and the
  same searches go on; every 20 s one Hugo file gets a new sentence with a made-up word, and the time
  until a search for that word finds the file is the edit-to-searchable time.
Every answer is checked: none may be empty (each question finds something on the Hugo docs).
Baseline in the same run: the quiet figures. `--load N` runs N busy processes meanwhile (another job).

    python benchmarks/index_changes.py [--otel-files 300] [--load 0] [--json benchmarks/out/index_changes.json]

The JSON file holds the latest run's figures and, under `runs`, every run kept there: each run replaces
the one of the same commit and load, so a run before a change, one after, and each with `--load 1`
make one table in the report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from render import command, fint, fms, fnum, fratio, fsec, not_measured, num, prose, table  # noqa: E402
from steps import Benchmark, Data, Json, Section, Step  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "out"
QUESTIONS = [
    json.loads(line)["question"]
    for line in (ROOT / "benchmarks" / "data" / "hugo_qa.jsonl").read_text().splitlines()
    if line.strip()
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu() -> str:
    """The CPU's model name and core count, for the report."""
    try:
        name = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        name = "unknown CPU"
    return f"{name}, {os.cpu_count()} cores"


def _commit() -> str:
    """This checkout's commit (short), "+changes" when its files differ from it; "unknown" outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    except OSError:
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def with_runs(run: Json, path: Path) -> Json:
    """``run`` with ``runs``: the runs kept in ``path`` (a file without them is one run), this one last.

    A kept run of the same commit and load is replaced by this one.
    """
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        kept = {}
    previous = kept.get("runs", [kept] if kept else []) if isinstance(kept, dict) else []
    same = (run.get("commit"), run.get("load_processes"))
    runs = [r for r in previous if isinstance(r, dict) and (r.get("commit"), r.get("load_processes")) != same]
    return {**run, "runs": [*runs, run]}


def _spin(stop: Any) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def _ms(xs: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(xs) * 1000, q)), 1)


async def _call(ws: Any, msg: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps(msg))
    while True:
        reply = json.loads(await ws.recv())
        if reply["type"] in ("search_results", "error") or msg["type"] == "status":
            return dict(reply)


async def _searches(ws: Any, seconds: float | None, until: Any, out: list[float], empty: list[str]) -> None:
    """One search every 0.3 s for ``seconds``, or until ``until()`` is true."""
    i = 0
    start = time.monotonic()
    while (seconds is not None and time.monotonic() - start < seconds) or (seconds is None and not await until()):
        q = QUESTIONS[i % len(QUESTIONS)]
        t = time.perf_counter()
        reply = await _call(ws, {"type": "search", "query": q, "k": 5, "threshold": 0})
        out.append(time.perf_counter() - t)
        if reply["type"] != "search_results" or not reply["results"]:
            empty.append(q)
        i += 1
        await asyncio.sleep(0.3)


async def _run(url: str, served: Path, otel_files: list[Path]) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None) as ws:
        first = json.loads(await ws.recv())
        while (await _call(ws, {"type": "status"}))["state"] != "ready":
            await asyncio.sleep(1)
        quiet: list[float] = []
        empty: list[str] = []
        await _searches(ws, 30, None, quiet, empty)

        for f in otel_files:  # the long update: hundreds of new files
            dest = served / "otel" / f.relative_to(DATA / "markdown_otel_docs")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
        during: list[float] = []
        edits: list[float] = []
        hugo = sorted(p for p in served.rglob("*.md") if "otel" not in p.parts)

        async def indexing(conn: Any = ws) -> bool:
            st = await _call(conn, {"type": "status"})
            return "indexing" in st

        async def edit_loop() -> None:
            await asyncio.sleep(5)
            async with connect(url, max_size=None) as own:  # its own: one recv at a time per connection
                await own.recv()
                await _edits(own)

        async def _edits(own: Any) -> None:
            n = 0
            while await indexing(own):
                word = f"zqxv{n}vermilion"
                target = hugo[(n * 37) % len(hugo)]
                with open(target, "a") as f:
                    f.write(f"\n\nThe {word} setting is documented here.\n")
                t = time.monotonic()
                async with connect(url, max_size=None) as probe:
                    await probe.recv()
                    while True:
                        r = await _call(
                            probe, {"type": "search", "query": word, "k": 1, "mode": "bm25", "threshold": 0}
                        )
                        if r.get("results") and r["results"][0]["path"] == str(target):
                            break
                        await asyncio.sleep(0.1)
                edits.append(time.monotonic() - t)
                n += 1
                await asyncio.sleep(20)

        async def done() -> bool:
            return not await indexing()

        t0 = time.monotonic()
        while not await indexing():  # the watcher has seen the copy
            await asyncio.sleep(0.2)
        editor = asyncio.ensure_future(edit_loop())
        await _searches(ws, None, done, during, empty)
        reload_s = time.monotonic() - t0
        await editor
    return {"first_status": first["message"], "quiet": quiet, "during": during, "edits": edits,
            "empty": empty, "reload_s": reload_s}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--otel-files", type=int, default=0, help="how many OpenTelemetry docs to add (0: all)")
    ap.add_argument("--load", type=int, default=0, help="busy processes running meanwhile (another job)")
    ap.add_argument("--json", type=Path, default=OUT / "index_changes.json", help="the figures file (runs kept)")
    args = ap.parse_args()
    otel = sorted((DATA / "markdown_otel_docs").rglob("*.md"))
    otel = otel[: args.otel_files] if args.otel_files else otel
    work = Path(tempfile.mkdtemp(prefix="mdrag-index-changes-"))
    served = work / "docs"
    shutil.copytree(DATA / "markdown_hugo_docs", served)
    port = _free_port()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)  # this checkout's mdrag
    env = {**os.environ, "MDRAG_HOME": str(work / "home"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
    log = open(work / "serve.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "mdrag", "serve", str(served), "--port", str(port)], env=env, stdout=log, stderr=log
    )
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(args.load)]
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                time.sleep(0.5)
        for h in hogs:
            h.start()
        r = asyncio.run(_run(f"ws://127.0.0.1:{port}", served, otel))
    finally:
        stop.set()
        for h in hogs:
            h.join()
        server.terminate()
        server.wait(60)
        log.close()
    q, d = r["quiet"], r["during"]
    out = {
        "machine": _cpu(),
        "otel_files": len(otel),
        "load_processes": args.load,
        "quiet": {"n": len(q), "p50_ms": _ms(q, 50), "p95_ms": _ms(q, 95), "max_ms": _ms(q, 100)},
        "during_indexing": {"n": len(d), "p50_ms": _ms(d, 50), "p95_ms": _ms(d, 95), "max_ms": _ms(d, 100)},
        "ratio_p50": round(_ms(d, 50) / _ms(q, 50), 2),
        "ratio_p95": round(_ms(d, 95) / _ms(q, 95), 2),
        "edit_to_searchable_s": [round(e, 2) for e in r["edits"]],
        "empty_answers": len(r["empty"]),
        "reload_s": round(r["reload_s"], 1),
    }
    out["commit"], out["date"] = _commit(), time.strftime("%Y-%m-%d")
    print(json.dumps(out, indent=2))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(with_runs(out, args.json), indent=2))
    shutil.rmtree(work, ignore_errors=True)  # kept, with the server's log, when the run fails


# -- in the report (benchmarks/report.py) --------------------------------------


def section_index_changes(data: Data) -> list[str]:
    r = data.get("index_changes")
    lines = ["## The Q&A server while its index changes", ""]
    lines += prose("index_changes", cmd_index_changes=command(data, "index_changes"))
    if not r:
        return lines + [not_measured("index_changes", data), ""]
    quiet, during = r.get("quiet") or {}, r.get("during_indexing") or {}
    edits = r.get("edit_to_searchable_s") or []

    def row(label: str, fig: Json) -> list[Any]:
        return [label, fint(fig.get("n")), fms(fig.get("p50_ms")), fms(fig.get("p95_ms")), fms(fig.get("max_ms"))]

    lines += table(
        ["searches", "n", "p50", "p95", "max"], [row("quiet (baseline)", quiet), row("during indexing", during)]
    )
    lines += [
        f"Ratio during / quiet: p50 {fratio(r.get('ratio_p50'))}, p95 {fratio(r.get('ratio_p95'))} (target 2x). "
        f"Empty answers: {fint(r.get('empty_answers'))}. Reload of {fint(r.get('otel_files'))} files: "
        f"{fsec(r.get('reload_s'))}. Edit to searchable: "
        + (", ".join(fsec(e) for e in edits) or "no edit made")
        + f" (target 5 s). Busy processes beside it: {fint(r.get('load_processes'))}. Machine: "
        + str(r.get("machine") or "not recorded (the header's)")
        + ".",
        "",
    ]
    runs = [x for x in r.get("runs") or [] if isinstance(x, dict)]
    if len(runs) > 1:
        lines += runs_table(runs)
    return lines


def runs_table(runs: list[Json]) -> list[str]:
    """Every run the JSON file keeps, oldest first: the latest one alone does not show a change's effect."""
    rows = []
    for x in runs:
        q, d = x.get("quiet") or {}, x.get("during_indexing") or {}
        edits = [num(e) for e in x.get("edit_to_searchable_s") or []]
        edits = [e for e in edits if e is not None]
        rows.append(
            [
                f"{x.get('commit', 'commit not recorded')}, load {fint(x.get('load_processes'))}"
                + (f" ({x['date']})" if x.get("date") else ""),
                f"{fnum(q.get('p50_ms'), 1)} / {fnum(q.get('p95_ms'), 1)} ms",
                f"{fnum(d.get('p50_ms'), 1)} / {fnum(d.get('p95_ms'), 1)} ms",
                f"{fratio(x.get('ratio_p50'))} / {fratio(x.get('ratio_p95'))}",
                fsec(x.get("reload_s")),
                f"{fsec(min(edits))} to {fsec(max(edits))}" if edits else "no edit made",
                fint(x.get("empty_answers")),
            ]
        )
    head = ["run (commit, busy processes)", "quiet p50 / p95", "during indexing p50 / p95", "ratio p50 / p95"]
    return [
        f"Every run kept in the file ({len(runs)}, oldest first; each replaces the one of its commit and load):",
        "",
        *table([*head, "reload", "edit to searchable", "empty answers"], rows),
    ]


BENCHMARK = Benchmark(
    # mdrag serve while it indexes 300 otel docs dropped into the served Hugo docs
    steps=(Step("index_changes", 90, ("--otel-files", "300"), ("quiet", "during_indexing", "edit_to_searchable_s")),),
    sections=(Section("The Q&A server while its index changes", 60, section_index_changes),),
)


if __name__ == "__main__":
    main()
