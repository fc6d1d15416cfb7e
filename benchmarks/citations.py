"""Citations that match their sources: `[n]` in an answer names `stream_end.sources[n-1]`.

    python benchmarks/citations.py [--docs DIR] [--home DIR] [--model-cache DIR]

Through a real `mdrag serve` on the OpenTelemetry docs, for each question of
benchmarks/data/otel_citation_questions.txt: the extractive answer (no LLM
configured), and the prompt an LLM is given (a stand-in OpenAI-compatible
server on loopback records it). Each `[n] path` block must name
`sources[n-1]`, numbered 1, 2, ... with every source present once. The
baseline is the numbering of earlier releases, rebuilt from the same search
results: quotes numbered by chunk, sources the files of all results. Writes
benchmarks/out/citations.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # render and steps, also when imported as benchmarks.citations

from render import command, fint, not_measured, num, prose, table, verdict  # noqa: E402
from steps import MODELS, NA, Benchmark, Data, Row, Section, Step, Target  # noqa: E402

from benchmarks.common import ROOT, seed_model_cache  # noqa: E402 - after the path

OUT = ROOT / "benchmarks" / "out"
OTEL = ROOT.parent / "shared" / "data" / "markdown_otel_docs"
QUESTIONS = ROOT / "benchmarks" / "data" / "otel_citation_questions.txt"
MAX_EXTRACTIVE = 5  # passages the extractive answer quoted in that numbering (mdrag.knobs.MAX_EXTRACTIVE)

# A numbered source as the answer and the prompt show it: "[n] path relative to the indexed folder".
_CITED = re.compile(r"^\[(\d+)\] (.+)$", re.MULTILINE)


def questions() -> list[str]:
    return [q.strip() for q in QUESTIONS.read_text(encoding="utf-8").splitlines() if q.strip()]


def citation_problems(text: str, sources: list[str], root: Path) -> list[str]:
    """What is wrong with the numbered sources in ``text`` (an answer, or a prompt's sources), [] if nothing:
    the blocks must be [1], [2], ... one per source, and ``[n] title`` must name ``sources[n-1]``."""
    cited = [(int(n), title.strip()) for n, title in _CITED.findall(text)]
    problems = []
    if [n for n, _ in cited] != list(range(1, len(sources) + 1)):
        problems.append(f"numbers {[n for n, _ in cited]} for {len(sources)} sources")
    for n, title in cited:
        if not 1 <= n <= len(sources) or sources[n - 1] != str(root / title):
            problems.append(f"[{n}] {title} is not sources[{n - 1}]")
    return problems


def old_numbering_problems(results: list[dict[str, Any]]) -> list[str]:
    """The baseline: what the per-chunk numbering gave for these results (quote [n] = result n, sources = files)."""
    sources = list(dict.fromkeys(r["path"] for r in results))
    quoted = results[:MAX_EXTRACTIVE]
    problems = [f"[{n}] {r['rel_path']} is not sources[{n - 1}]" for n, r in enumerate(quoted, 1) if n > len(sources)]
    problems += [
        f"[{n}] {r['rel_path']} is not sources[{n - 1}]"
        for n, r in enumerate(quoted, 1)
        if n <= len(sources) and sources[n - 1] != r["path"]
    ]
    unquoted = set(sources) - {r["path"] for r in quoted}
    problems += [f"source {s} is not quoted" for s in sorted(unquoted)]
    return problems


def mdrag_env(home: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "MDRAG_HOME": str(home), "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", **extra}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(folder: Path, home: Path, log: Path, wait_s: float = 1800, **env: str) -> Iterator[str]:
    """A real `mdrag serve FOLDER` process; yields its URL once its index is ready."""
    from mdrag.frontends.client import Client, ServerUnavailableError

    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    with open(log, "wb") as out:
        cmd = [sys.executable, "-m", "mdrag", "serve", str(folder), "--port", str(port)]
        proc = subprocess.Popen(cmd, env=mdrag_env(home, **env), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"mdrag serve exited: {log.read_text(errors='replace')[-2000:]}")
                try:
                    with Client(url, open_timeout=2) as client:
                        if client.request({"type": "status"}).get("state") == "ready":
                            break
                except ServerUnavailableError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"mdrag serve did not get ready within {wait_s:g} s")
                time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def ask_all(url: str, qs: list[str]) -> list[tuple[str, list[str]]]:
    """Each question's answer text and sources, through one connection."""
    from mdrag.frontends.client import Client

    answers = []
    with Client(url, timeout=120) as client:
        for q in qs:
            pieces: list[str] = []
            sources = client.ask(q, pieces.append)
            answers.append(("".join(pieces), sources))
    return answers


@contextmanager
def recording_llm() -> Iterator[tuple[str, Any]]:
    """The tests' stand-in OpenAI-compatible server on loopback; yields its base URL and its script."""
    from tests.fake_llm import FakeServer, Handler, Script

    server = FakeServer(("127.0.0.1", 0), Handler)
    server.script = Script()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", server.script
    finally:
        server.script.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def prompt_sources(prompt: str) -> str:
    """The sources part of a prompt's user message (before the question)."""
    return prompt.rsplit("\n\nQuestion: ", 1)[0]


def check(folder: Path, home: Path, qs: list[str]) -> dict[str, Any]:
    """Every question through `mdrag serve FOLDER`: extractive answers, then LLM prompts; the figures."""
    from mdrag.frontends.client import Client

    root = folder.resolve()
    rows: list[dict[str, Any]] = [{"question": q} for q in qs]
    with serving(folder, home, home / "serve-extractive.log") as url:
        for row, (text, sources) in zip(rows, ask_all(url, qs), strict=True):
            row["extractive"] = {"sources": len(sources), "problems": citation_problems(text, sources, root)}
            row["answered"] = bool(sources)
        with Client(url, timeout=120) as client:
            for row in rows:
                results = client.request({"type": "search", "query": row["question"]})["results"]
                row["baseline"] = {"results": len(results), "problems": old_numbering_problems(results)}
    with (
        recording_llm() as (base_url, script),
        serving(folder, home, home / "serve-llm.log", MARKDOWN_QA_API_BASE_URL=base_url) as url,
    ):
        answers = ask_all(url, qs)
        prompts = [r["body"]["messages"][-1]["content"] for r in script.requests]
        for row, (_text, sources) in zip(rows, answers, strict=True):
            prompt = next((p for p in prompts if p.rstrip().endswith(row["question"])), "")
            problems = citation_problems(prompt_sources(prompt), sources, root) if sources else []
            if sources and not prompt:
                problems.append("the LLM was not asked")
            row["llm"] = {"sources": len(sources), "problems": problems}
    answered = [r for r in rows if r["answered"]]
    return {
        "folder": str(root),
        "questions": len(rows),
        "answered": len(answered),
        "extractive_mismatched": sum(bool(r["extractive"]["problems"]) for r in rows),
        "llm_mismatched": sum(bool(r["llm"]["problems"]) for r in rows),
        "baseline_mismatched": sum(bool(r["baseline"]["problems"]) for r in answered),
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=Path, default=OTEL, help="the folder to serve")
    ap.add_argument("--home", type=Path, default=OUT / "citations-home", help="MDRAG_HOME, kept for later runs")
    ap.add_argument("--model-cache", type=Path, help="an MDRAG_HOME/cache holding the model export to copy")
    ap.add_argument("--json", type=Path, default=OUT / "citations.json", help="where the figures go")
    args = ap.parse_args()
    if not args.docs.is_dir():
        sys.exit(f"no documents at {args.docs} (see shared/data/README.md)")
    args.home.mkdir(parents=True, exist_ok=True)
    seed_model_cache(args.home, args.model_cache)
    t = time.perf_counter()
    result = check(args.docs, args.home, questions())
    result["seconds"] = round(time.perf_counter() - t, 1)
    for row in result["rows"]:
        bad = row["extractive"]["problems"] + row["llm"]["problems"]
        print(f"{'ok ' if not bad else 'BAD'} {row['question']}: {row['extractive']['sources']} sources", end="")
        print(f"; {'; '.join(bad)}" if bad else "")
    n = result["questions"]
    print(
        f"{n} questions, {result['answered']} answered: [n] = sources[n-1] broken in "
        f"{result['extractive_mismatched']} extractive answers and {result['llm_mismatched']} LLM prompts "
        f"(baseline, numbered by chunk: {result['baseline_mismatched']} of {result['answered']})"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


# -- in the report (benchmarks/report.py) --------------------------------------


def t_citations(data: Data) -> list[Row]:
    name = "answers cite [n] = stream_end.sources[n-1], extractive and LLM, over 20 otel questions"
    ci = data.get("citations")
    if not ci:
        return [Row(name, not_measured("citations", data))]
    asked, answered = num(ci.get("questions")), num(ci.get("answered"))
    ext, llm, base = num(ci.get("extractive_mismatched")), num(ci.get("llm_mismatched")), ci.get("baseline_mismatched")
    ok = None if None in (asked, ext, llm) else asked >= 20 and ext == 0 and llm == 0
    return [
        Row(
            name,
            f"{fint(ext)} extractive and {fint(llm)} LLM answers mismatched, of {fint(asked)} questions "
            f"({fint(answered)} answered)",
            f"numbered by chunk (earlier releases): {fint(base)} of {fint(answered)} mismatched",
            NA,
            verdict(ok),
        )
    ]


def section_citations(data: Data) -> list[str]:
    ci = data.get("citations")
    lines = ["## Citations that match their sources", ""]
    lines += prose("citations", cmd_citations=command(data, "citations"))
    if not ci:
        return lines + [not_measured("citations", data), ""]
    lines += table(
        ["questions", "answered", "extractive mismatched", "LLM prompts mismatched", "baseline mismatched"],
        [
            [
                fint(ci.get("questions")),
                fint(ci.get("answered")),
                fint(ci.get("extractive_mismatched")),
                fint(ci.get("llm_mismatched")),
                fint(ci.get("baseline_mismatched")),
            ]
        ],
    )
    return lines


BENCHMARK = Benchmark(
    steps=(
        Step(
            "citations",
            180,
            ("--model-cache", str(MODELS)),
            ("questions", "answered", "extractive_mismatched", "llm_mismatched", "baseline_mismatched"),
        ),
    ),
    sections=(Section("Citations that match their sources", 130, section_citations),),
    targets=(Target(120, t_citations),),
)


if __name__ == "__main__":
    main()
