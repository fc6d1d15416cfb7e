"""`mdrag serve` under load: latency to stream_start and to the first chunk,
50 concurrent clients x 20 queries, and the server's memory.

The server runs as its own process (`mdrag serve`), answering from an index
built beforehand (the Hugo docs, from `hugo_index.py --keep`), with an instant
stand-in LLM on loopback (the OpenAI streaming format, five tokens, no delay),
or with `--no-llm` none (the extractive answer). Questions: 10 of ours and the
Hugo QA questions, 90 in all, so 1,000 queries ask each about 11 times.
Baseline in the same run: `Index.search` in process on the same questions,
the retrieval floor under every answer.

    python benchmarks/server_load.py --home benchmarks/out/hugo-home [--clients 50 --queries 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from render import command, dig, div, fint, fmb, fms, fnum, fratio, fsec, not_measured, prose, table  # noqa: E402
from steps import HOME, NA, Benchmark, Data, Section, Step  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUESTIONS = [
    "How do I create a custom shortcode?",
    "how do I define a custom output format",
    "configure pagination page size",
    "deploy to GitHub Pages",
    "what is a taxonomy",
    "image processing resize in page bundle",
    "menu configuration in front matter",
    "syntax highlighting code block options",
    "multilingual site language configuration",
    "sort pages by date descending",
]


# and the Hugo QA questions: mostly distinct questions, as users ask them (no cache serves a repeat)
QUESTIONS += [
    json.loads(line)["question"]
    for line in (ROOT / "benchmarks" / "data" / "hugo_qa.jsonl").read_text().splitlines()
    if line.strip()
]

ERRORS: list[str] = []  # error messages received, to report


def pct(xs: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(xs) * 1000, q)), 2)


def spread(xs: list[float]) -> dict[str, float]:
    """p50 and p95 in milliseconds."""
    return {"p50": pct(xs, 50), "p95": pct(xs, 95)}


def start_llm() -> tuple[str, object]:
    from tests.fake_llm import FakeServer, Handler, Script

    server = FakeServer(("127.0.0.1", 0), Handler)
    server.script = Script(tokens=["An ", "instant ", "answer ", "[1]", "."])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1", server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def one_query(ws: object, question: str) -> tuple[float, float, float, bool]:
    """Seconds to stream_start, to the first chunk, to stream_end; whether it succeeded."""
    t0 = time.perf_counter()
    await ws.send(json.dumps({"type": "query", "question": question}))  # type: ignore[attr-defined]
    t_start = t_first = None
    while True:
        msg = json.loads(await ws.recv())  # type: ignore[attr-defined]
        now = time.perf_counter() - t0
        if msg["type"] == "stream_start":
            t_start = now
        elif msg["type"] == "stream_chunk" and t_first is None:
            t_first = now
        elif msg["type"] == "stream_end":
            return t_start or now, t_first or now, now, True
        elif msg["type"] == "error":
            ERRORS.append(msg["message"])
            return now, now, now, False


async def client(url: str, n: int, offset: int, out: list[tuple[float, float, float, bool]]) -> None:
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None) as ws:
        await ws.recv()  # status on connect
        for i in range(n):
            out.append(await one_query(ws, QUESTIONS[(offset + i) % len(QUESTIONS)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, required=True, help="an mdrag home with a built index")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--no-llm", action="store_true", help="no LLM configured: the server answers with its extractive answer"
    )
    args = ap.parse_args()
    os.environ["MDRAG_HOME"] = str(args.home.resolve())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    # Baseline: retrieval alone, in process, before the server takes the index.
    from mdrag.config import load_config
    from mdrag.index import Index
    from mdrag.store import resolve_backend

    index = Index(load_config())
    index.search(QUESTIONS[0])
    base = []
    for _ in range(5):
        for q in QUESTIONS:
            t = time.perf_counter()
            index.search(q)
            base.append(time.perf_counter() - t)
    index.close()

    llm: Any = None
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARKDOWN_QA_API_")}
    if not args.no_llm:
        llm_url, llm = start_llm()
        env.update(MARKDOWN_QA_API_BASE_URL=llm_url, MARKDOWN_QA_API_KEY="bench")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mdrag", "serve", "--port", str(port), "-q"],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"ws://127.0.0.1:{port}"
    try:
        t_boot = time.perf_counter()

        async def ready() -> float:
            from websockets.asyncio.client import connect

            while True:
                try:
                    async with connect(url) as ws:
                        if json.loads(await ws.recv())["state"] != "loading":
                            return time.perf_counter() - t_boot
                except OSError:
                    pass
                await asyncio.sleep(0.1)

        boot_s = asyncio.run(ready())
        idle_rss = rss_mb(proc.pid)[0]

        sequential: list[tuple[float, float, float, bool]] = []
        asyncio.run(client(url, 100, 0, sequential))

        loaded: list[tuple[float, float, float, bool]] = []

        async def load() -> float:
            t = time.perf_counter()
            await asyncio.gather(*(client(url, args.queries, i, loaded) for i in range(args.clients)))
            return time.perf_counter() - t

        load_s = asyncio.run(load())
        rss, peak = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
        if llm is not None:
            llm.shutdown()

    ok = [r for r in loaded if r[3]]
    out = {
        "llm": "none (extractive answers)" if args.no_llm else "instant stand-in on loopback",
        "store": resolve_backend(load_config())[0],
        "server_ready_s": round(boot_s, 2),
        "sequential": {
            "to_stream_start_ms": spread([r[0] for r in sequential]),
            "to_first_chunk_ms": spread([r[1] for r in sequential]),
            "to_stream_end_ms": spread([r[2] for r in sequential]),
        },
        "baseline_in_process_search_ms": spread(base),
        "load": {
            "clients": args.clients,
            "queries_each": args.queries,
            "total": len(loaded),
            "errors": len(loaded) - len(ok),
            "seconds": round(load_s, 2),
            "queries_per_s": round(len(loaded) / load_s, 1),
            "to_first_chunk_ms": spread([r[1] for r in ok]),
            "to_stream_end_ms": spread([r[2] for r in ok]),
        },
        "server_rss_mb": {"idle": round(idle_rss), "after_load": round(rss), "peak": round(peak)},
    }
    s = out["sequential"]
    print(f"server ready from a cached index in {out['server_ready_s']} s")
    print(
        f"one client, 100 queries: stream_start p50 {s['to_stream_start_ms']['p50']} ms "
        f"p95 {s['to_stream_start_ms']['p95']} ms; first chunk p50 {s['to_first_chunk_ms']['p50']} ms "
        f"p95 {s['to_first_chunk_ms']['p95']} ms"
    )
    b = out["baseline_in_process_search_ms"]
    print(
        f"baseline in-process search p50 {b['p50']} ms p95 {b['p95']} ms; "
        f"ratio first chunk / search p50: {s['to_first_chunk_ms']['p50'] / b['p50']:.2f}"
    )
    ld = out["load"]
    print(
        f"{ld['clients']} clients x {ld['queries_each']} queries: {ld['errors']} errors, "
        f"{ld['queries_per_s']} queries/s, "
        f"first chunk p50 {ld['to_first_chunk_ms']['p50']} ms p95 {ld['to_first_chunk_ms']['p95']} ms, "
        f"end p95 {ld['to_stream_end_ms']['p95']} ms"
    )
    print(f"server memory: {out['server_rss_mb']}")
    for e in sorted(set(ERRORS)):
        print(f"error x{ERRORS.count(e)}: {e}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


# -- in the report (benchmarks/report.py) --------------------------------------


def section_server(data: Data) -> list[str]:
    s = data.get("server_load")
    lines = ["## Q&A server", ""]
    lines += prose("server", cmd_server_load=command(data, "server_load"))
    if not s:
        return lines + [not_measured("server_load", data), ""]
    base = s.get("baseline_in_process_search_ms") or {}
    seq = s.get("sequential") or {}
    load = s.get("load") or {}
    rss = s.get("server_rss_mb") or {}

    def lat(label: str, fig: Any, with_base: bool = True) -> list[str]:
        return [
            label,
            fms(dig(fig, "p50")),
            fms(dig(fig, "p95")),
            f"p50 {fms(base.get('p50'))}, p95 {fms(base.get('p95'))}" if with_base else NA,
            fratio(div(dig(fig, "p50"), base.get("p50"))) if with_base else NA,
        ]

    rows = [
        ["server ready from the cached index", fsec(s.get("server_ready_s")), NA, NA, NA],
        lat("one client: query → `stream_start`", seq.get("to_stream_start_ms")),
        lat("one client: query → first `stream_chunk`", seq.get("to_first_chunk_ms")),
        lat("one client: query → `stream_end`", seq.get("to_stream_end_ms")),
        [
            f"load: {fint(load.get('clients'))} clients × {fint(load.get('queries_each'))} questions",
            f"{fint(load.get('errors'))} errors of {fint(load.get('total'))}",
            f"{fnum(load.get('queries_per_s'), 1)} questions/s",
            f"in {fsec(load.get('seconds'))}",
            NA,
        ],
        lat("load: query → first `stream_chunk`", load.get("to_first_chunk_ms"), with_base=False),
        lat("load: query → `stream_end`", load.get("to_stream_end_ms"), with_base=False),
        [
            "server RSS: idle / after the load / peak",
            f"{fmb(rss.get('idle'))} / {fmb(rss.get('after_load'))} / {fmb(rss.get('peak'))}",
            NA,
            NA,
            NA,
        ],
    ]
    lines += table(["figure", "p50 (or value)", "p95", "baseline (same run)", "ratio p50"], rows)
    return lines


BENCHMARK = Benchmark(
    steps=(Step("server_load", 80, ("--home", str(HOME)), ("sequential", "load", "server_rss_mb")),),
    sections=(Section("Q&A server", 50, section_server),),
)


if __name__ == "__main__":
    main()
