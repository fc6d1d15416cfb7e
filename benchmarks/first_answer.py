"""The first answer of a first build: how long a user waits, on a folder never indexed, for the first
non-empty answer, while the build goes on.

Two runs, each from a fresh home (the model's files, exported once beforehand, are copied in: its download
and export are not counted), on {corpus}:

- `mdrag serve DIR`, with a WebSocket client that asks a question every second (a `query`, answered
  extractively: no LLM is set): the seconds from the server's start to the first answer with sources, and to
  the end of the build (its status no longer says it indexes);
- `mdrag index DIR`, with `mdrag search QUESTION` run in a second process every second: the seconds from the
  start of the index run to the first search that returns results, and to the end of the run.

Each answer made from part of the files says so (the reply's `partial`, the search's line on stderr): the
figures count the answers that did. The command: {cmd}.

    python benchmarks/first_answer.py [--corpus DIR] [--limit-files N] [--question Q] [--until-first] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from render import command, fint, fsec, not_measured, prose, table  # noqa: E402
from steps import Benchmark, Data, Section, Step  # noqa: E402

OTEL = ROOT.parent / "shared" / "data" / "markdown_otel_docs"
QUESTION = "What is OpenTelemetry?"
EVERY_S = 1.0  # a question a second
LIMIT_S = 3600.0  # a build that takes longer is given up


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def model_files(base: Path) -> Path:
    """The model's files as a first run in a new home leaves them (exported for the runtime `auto` picks):
    an index of one small file is built in a scratch home, whose ``cache/models`` is returned."""
    home, docs = base / "model-home", base / "model-docs"
    docs.mkdir(parents=True)
    (docs / "a.md").write_text("# A\n\nA page.\n")
    argv = [sys.executable, "-m", "mdrag", "index", str(docs), "-q"]
    subprocess.run(argv, env=_env(home), check=True, stdout=subprocess.DEVNULL)
    return home / "cache" / "models"


def fresh_home(base: Path, name: str, models: Path) -> Path:
    """An empty mdrag home, with the model's files copied in."""
    home = base / name
    (home / "cache").mkdir(parents=True)
    if models.is_dir():
        shutil.copytree(models, home / "cache" / "models")
    return home


def corpus_of(source: Path, limit: int | None, base: Path) -> tuple[Path, int]:
    """The folder to index (the first ``limit`` Markdown files of ``source``, copied, when given) and its files."""
    files = sorted(p for p in source.rglob("*") if p.suffix in (".md", ".mdx") and p.is_file())
    if limit is None:
        return source, len(files)
    folder = base / "corpus"
    for p in files[:limit]:
        dest = folder / p.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dest)
    return folder, min(limit, len(files))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _serve_run(
    url: str, question: str, server: subprocess.Popen[bytes], until_first: bool = False
) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    t0 = time.monotonic()
    ws = None
    while ws is None:  # the server binds its port before its index is ready
        if server.poll() is not None or time.monotonic() - t0 > LIMIT_S:
            raise RuntimeError(f"`mdrag serve` ended (exit {server.poll()}) before it took a connection")
        try:
            ws = await connect(url, open_timeout=5)
        except OSError:
            await asyncio.sleep(0.2)
    out: dict[str, Any] = {"questions": 0, "answers": 0, "partial_answers": 0, "first_answer_s": None}
    async with ws:
        await ws.recv()  # the status on connect
        n = 0
        while time.monotonic() - t0 < LIMIT_S:
            asked = time.monotonic()
            n += 1
            await ws.send(json.dumps({"type": "query", "question": question, "id": n}))
            out["questions"] += 1
            while True:  # this question's reply: a status (not ready), an error, or the answer's end
                msg = json.loads(await ws.recv())
                if msg.get("id") == n and msg["type"] in ("status", "error", "stream_end"):
                    break
            if msg["type"] == "stream_end" and msg.get("sources"):
                out["answers"] += 1
                out["partial_answers"] += "partial" in msg
                if out["first_answer_s"] is None:
                    out["first_answer_s"] = round(time.monotonic() - t0, 2)
                    out["first_answer_partial"] = msg.get("partial")
                    out["first_answer_sources"] = msg["sources"]
                    if until_first:
                        return out
            await ws.send(json.dumps({"type": "status", "id": f"s{n}"}))
            status = json.loads(await ws.recv())
            while status.get("id") != f"s{n}":
                status = json.loads(await ws.recv())
            if status["state"] == "ready" and "indexing" not in status:
                out["build_s"] = round(time.monotonic() - t0, 2)
                out["files"], out["chunks"] = status["files"], status["chunks"]
                return out
            await asyncio.sleep(max(0.0, EVERY_S - (time.monotonic() - asked)))
    raise RuntimeError(f"the server's build took longer than {LIMIT_S:g} s")


def serve_run(home: Path, folder: Path, question: str, until_first: bool = False) -> dict[str, Any]:
    """`mdrag serve DIR` on a fresh home, asked a question every second until its build is done (``until_first``:
    until its first answer)."""
    port = free_port()
    argv = [sys.executable, "-m", "mdrag", "serve", str(folder), "--port", str(port), "-q"]
    server = subprocess.Popen(argv, env=_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        load = os.getloadavg()[0]
        out = asyncio.run(_serve_run(f"ws://127.0.0.1:{port}", question, server, until_first))
        return {**out, "load_start": round(load, 1), "load_end": round(os.getloadavg()[0], 1)}
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(60)
        if server.poll() is None:
            server.kill()


def cli_run(home: Path, folder: Path, question: str, until_first: bool = False) -> dict[str, Any]:
    """`mdrag index DIR` on a fresh home, with `mdrag search` in a second process every second (``until_first``:
    the index run is stopped at the first results)."""
    env = _env(home)
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    run = subprocess.Popen(
        [sys.executable, "-m", "mdrag", "index", str(folder), "-q", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    out: dict[str, Any] = {"searches": 0, "found": 0, "partial_found": 0, "first_results_s": None}
    while run.poll() is None and time.monotonic() - t0 < LIMIT_S:
        asked = time.monotonic()
        search = subprocess.run(
            [sys.executable, "-m", "mdrag", "search", question, "-k", "3", "--json"],
            env=env,
            capture_output=True,
            text=True,
        )
        out["searches"] += 1
        results = json.loads(search.stdout) if search.returncode == 0 and search.stdout.strip() else []
        if results:
            out["found"] += 1
            partial = "results come from those" in search.stderr
            out["partial_found"] += partial
            if out["first_results_s"] is None:
                out["first_results_s"] = round(time.monotonic() - t0, 2)
                out["first_results_partial"] = partial
                if until_first:
                    run.terminate()
                    break
        time.sleep(max(0.0, EVERY_S - (time.monotonic() - asked)))
    stdout, _ = run.communicate(timeout=LIMIT_S)
    if not until_first:
        out["build_s"] = round(time.monotonic() - t0, 2)
    summary = json.loads(stdout) if run.returncode == 0 else {}
    out["exit"], out["chunks"] = run.returncode, summary.get("chunks_total")
    return {**out, "load_start": round(load, 1), "load_end": round(os.getloadavg()[0], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=OTEL, help="the folder to index (default: the OpenTelemetry docs)")
    ap.add_argument("--limit-files", type=int, help="index only the first N Markdown files (a quick check)")
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--only", choices=("serve", "cli"), help="one of the two runs")
    ap.add_argument(
        "--until-first", action="store_true", help="stop each run at its first answer (the build is not waited for)"
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mdrag-first-answer-"))
    try:
        folder, files = corpus_of(args.corpus.resolve(), args.limit_files, base)
        out: dict[str, Any] = {
            "corpus": str(args.corpus),
            "limit_files": args.limit_files,
            "files": files,
            "question": args.question,
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        }
        print(f"corpus: {args.corpus} ({files} files); question: {args.question!r}", flush=True)
        models = model_files(base)
        if args.only in (None, "serve"):
            s = serve_run(fresh_home(base, "serve-home", models), folder, args.question, args.until_first)
            out["serve"] = s
            print(
                f"mdrag serve: first answer after {s['first_answer_s']} s; build done after {s.get('build_s')} s "
                f"({s['answers']} answers to {s['questions']} questions, {s['partial_answers']} said partial; "
                f"load average {s['load_start']} at the start, {s['load_end']} at the end)",
                flush=True,
            )
        if args.only in (None, "cli"):
            out["cli"] = c = cli_run(fresh_home(base, "cli-home", models), folder, args.question, args.until_first)
            print(
                f"mdrag index + mdrag search: first results after {c['first_results_s']} s; index done after "
                f"{c.get('build_s')} s ({c['found']} of {c['searches']} searches found results, {c['partial_found']} "
                f"said partial; load average {c['load_start']} at the start, {c['load_end']} at the end)",
                flush=True,
            )
        if args.json:
            args.json.write_text(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- in the report (benchmarks/report.py) --------------------------------------


def section_first_answer(data: Data) -> list[str]:
    f = data.get("first_answer")
    corpus = f"{f.get('corpus')} ({fint(f.get('files'))} files)" if f else "the OpenTelemetry docs"
    lines = ["## The first answer of a first build", ""]
    lines += prose("first_answer", __doc__.split("\n\n    python")[0], corpus=corpus, cmd=command(data, "first_answer"))
    if not f:
        return lines + [not_measured("first_answer", data), ""]
    s, c = f.get("serve") or {}, f.get("cli") or {}
    rows = [
        [
            "`mdrag serve`, a question a second over the WebSocket",
            fsec(s.get("first_answer_s")),
            fsec(s.get("build_s")),
            f"{fint(s.get('partial_answers'))} of {fint(s.get('answers'))}",
        ],
        [
            "`mdrag index`, `mdrag search` in a second process every second",
            fsec(c.get("first_results_s")),
            fsec(c.get("build_s")),
            f"{fint(c.get('partial_found'))} of {fint(c.get('found'))}",
        ],
    ]
    return lines + table(["run", "first answer", "whole build", "answers that said partial"], rows) + [""]


BENCHMARK = Benchmark(
    steps=(Step("first_answer", 97, (), ("serve", "cli"), ("cpus", "python")),),
    sections=(Section("The first answer of a first build", 55, section_first_answer),),
)


if __name__ == "__main__":
    main()
