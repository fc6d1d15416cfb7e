"""MCP tool latency: search_docs and list_docsets (targets: 10 ms and 5 ms once the config is loaded), and
the `search` tool on the Hugo docs.

Figures:

- search_docs and list_docsets in process (``KnowledgeTools.call``, the
  ``tools/call`` handler without the protocol), p50/p95 over 1,000 calls
  after the config is loaded;
- the same over the stdio transport, through the MCP SDK's client
  (``stdio_client`` + ``ClientSession``), 200 calls each;
- the `search` tool over stdio on the Hugo docs as a local docset, whose
  folder appears after the latency figures (the server started without it,
  so nothing is indexed): the first call's answer (it must come within a few
  seconds, saying the index is being built), the time until the background
  build gives results, then 50 warm queries p50/p95; search_docs while the
  index is open (ranked sections within the budget); the first `search` after
  a restart (nothing re-embedded).

Baselines in the same run: a bare ``kb.instructions(...)`` call for the tool
latencies, and ``Index.search`` in process on the same index and queries for
the `search` tool. ``--limit-files N`` indexes only N Hugo pages (a quick
check; the full corpus embeds ~3,600 chunks, ~80 s on 2 cores).

    python benchmarks/mcp_latency.py [--limit-files 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from render import command, dig, div, fint, fms, fnum, fratio, fsec, not_measured, num, prose, table  # noqa: E402
from steps import NA, Benchmark, Data, Json, Section, Step  # noqa: E402

from benchmarks.hugo_index import QUERIES as HUGO_QUERIES  # noqa: E402 - after the path

HUGO = ROOT.parent / "shared" / "data" / "markdown_hugo_docs" / "content" / "en"
SERVE = "from mdrag.frontends.mcp import run_stdio; run_stdio()"
QUERIES = ["How do I create a custom shortcode?", *HUGO_QUERIES[:19]]
SEARCH_DOCS = {
    "docset": "hugo",
    "keywords": ["custom shortcode", "shortcode template"],
    "generalized_keywords": ["templates"],
}


def ms(xs: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(xs) * 1000, q)), 3)


def spread(xs: list[float]) -> dict[str, float]:
    """p50 and p95 in milliseconds."""
    return {"p50": ms(xs, 50), "p95": ms(xs, 95), "n": len(xs)}


def show(label: str, fig: dict[str, Any], base: dict[str, Any] | None = None, limit: float | None = None) -> None:
    line = f"{label:<52} p50 {fig['p50']:>9.3f} ms  p95 {fig['p95']:>9.3f} ms"
    if base is not None:
        fig["ratio_p50"] = round(fig["p50"] / base["p50"], 2) if base["p50"] else None
        line += f"  x{fig['ratio_p50']} of baseline p50 {base['p50']:.3f} ms"
    if limit is not None:
        fig["limit_ms"] = limit
        fig["within_limit_p95"] = fig["p95"] <= limit
        line += f"  (limit {limit:g} ms: {'ok' if fig['p95'] <= limit else 'OVER'})"
    print(line, flush=True)


def timed_sync(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


async def timed(fn: Callable[[], Awaitable[object]], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
    return out


def make_project(tmp: Path) -> tuple[Path, Path]:
    """A project with a `hugo` docset whose folder (inside the project) does not exist yet (see :func:`fill`)."""
    project = tmp / "project"
    docs = project / "hugo"
    (project / ".knowledge").mkdir(parents=True)
    (project / ".knowledge" / "config.yaml").write_text(
        "docsets:\n"
        "  - id: hugo\n    name: Hugo\n    version: '0.150'\n    aliases: [gohugo]\n"
        f"    local_path: {docs.as_posix()}\n"
        "  - id: react\n    name: React\n    version: '18.2'\n"
    )
    return project, docs


def fill(docs: Path, limit_files: int | None) -> int:
    """Copy the Hugo pages (all, or ``limit_files`` of them) into the docset's folder; returns how many."""
    pages = sorted(HUGO.rglob("*.md"))
    if limit_files:
        first = HUGO / "templates" / "shortcode.md"  # the page the first query is about
        pages = [first] + [p for p in pages if p != first][: limit_files - 1]
    for p in pages:
        (docs / p.relative_to(HUGO)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, docs / p.relative_to(HUGO))
    return len(pages)


def in_process(project: Path, n: int) -> dict[str, Any]:
    from mdrag.frontends.mcp import KnowledgeTools
    from mdrag.knowledge import KnowledgeBase

    kb = KnowledgeBase(project)
    kb.config()  # the targets count from after the config load
    out: dict[str, Any] = {}
    base = spread(
        timed_sync(
            lambda: kb.instructions(
                SEARCH_DOCS["docset"], SEARCH_DOCS["keywords"], SEARCH_DOCS["generalized_keywords"]
            ),
            n,
        )
    )
    out["baseline_kb_instructions_ms"] = base
    show("baseline: kb.instructions() in process", base)
    out["kb_list_docsets_ms"] = spread(timed_sync(kb.list_docsets, n))
    show("kb.list_docsets() in process", out["kb_list_docsets_ms"], base)
    tools = KnowledgeTools(kb)

    async def run() -> None:
        result = await tools.call("search_docs", SEARCH_DOCS)
        assert not result.is_error, result
        out["search_docs_ms"] = spread(await timed(lambda: tools.call("search_docs", SEARCH_DOCS), n))
        out["list_docsets_ms"] = spread(await timed(lambda: tools.call("list_docsets", {}), n))

    anyio.run(run)
    show("search_docs, in process (tools/call handler)", out["search_docs_ms"], base, 10)
    show("list_docsets, in process (tools/call handler)", out["list_docsets_ms"], base, 5)
    return out


def server_params(project: Path, home: Path) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-c", SERVE],
        cwd=project,
        env={"MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)},
    )


def text_of(result: Any) -> str:
    if result.is_error:
        raise SystemExit(f"tool error: {result.content[0].text}")
    return str(result.content[0].text)


async def over_stdio(
    project: Path, home: Path, n: int, docs: Path | None, limit_files: int | None, base: dict[str, Any]
) -> dict[str, Any]:
    """The figures over stdio; with ``docs``, the Hugo pages go there after the latency figures and
    the `search` tool is measured on them."""
    from mcp import ClientSession, stdio_client

    out: dict[str, Any] = {}
    params = server_params(project, home)
    with open(home / "server.log", "a") as err:
        t = time.perf_counter()
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            out["startup_initialize_ms"] = round((time.perf_counter() - t) * 1000, 1)
            for _ in range(10):  # warm-up
                text_of(await s.call_tool("search_docs", SEARCH_DOCS))
                text_of(await s.call_tool("list_docsets", {}))
            out["search_docs_ms"] = spread(await timed(lambda: s.call_tool("search_docs", SEARCH_DOCS), n))
            out["list_docsets_ms"] = spread(await timed(lambda: s.call_tool("list_docsets", {}), n))
            show("search_docs, over stdio (SDK client)", out["search_docs_ms"], base, 10)
            show("list_docsets, over stdio (SDK client)", out["list_docsets_ms"], base, 5)
            if docs is None:
                return out

            out["hugo_files"] = fill(docs, limit_files)
            question = {"query": QUERIES[0], "docset": "hugo", "k": 5}
            t = time.perf_counter()
            first = json.loads(text_of(await s.call_tool("search", question)))
            answered = time.perf_counter() - t
            got = first
            while "indexing" in got:
                await anyio.sleep(1.0)
                got = json.loads(text_of(await s.call_tool("search", question)))
            built = time.perf_counter() - t
            state = got["indexed"]["hugo"]
            out["search_first_call"] = {
                "wall_s": round(answered, 2),
                "indexing": (first.get("indexing") or {}).get("hugo"),
                "results": len(first["results"]),
            }
            out["search_index_built"] = {
                "wall_s": round(built, 2),
                "chunks_embedded": state["chunks_embedded"],
                "chunks_total": state["chunks_total"],
                "update_s": state["seconds"],
                "chunks_per_s": round(state["chunks_embedded"] / state["seconds"], 1) if state["seconds"] else None,
                "top5": [r["rel_path"] for r in got["results"]],
            }
            print(
                f"{'search, first call (no index yet)':<52} answered in {answered:.2f} s: "
                f"{first.get('indexing') or len(first['results'])}",
                flush=True,
            )
            print(
                f"{'search, results once the index is built':<52} {built:.2f} s: {state['chunks_embedded']} chunks "
                f"embedded of {state['chunks_total']} in {state['seconds']:.1f} s; top 5: "
                f"{out['search_index_built']['top5']}",
                flush=True,
            )
            queries = [QUERIES[i % len(QUERIES)] for i in range(50)]
            it = iter(queries)
            warm = await timed(lambda: s.call_tool("search", {"query": next(it), "docset": "hugo", "k": 5}), 50)
            out["search_warm_ms"] = spread(warm)

            hinted = 0
            times = []
            for i in range(n):
                args = {**SEARCH_DOCS, "keywords": [QUERIES[i % len(QUERIES)]]}
                t = time.perf_counter()
                got_text = text_of(await s.call_tool("search_docs", args))
                times.append(time.perf_counter() - t)
                hinted += "Top sections from mdrag's index" in got_text
            out["search_docs_index_open_ms"] = spread(times)
            out["search_docs_index_open_ms"]["with_sections"] = hinted
    return out


def search_baseline(home: Path, project: Path) -> dict[str, Any]:
    """Index.search in process on the index the server built (after it exited: Milvus Lite is one process's)."""
    os.environ["MDRAG_HOME"] = str(home)
    from mdrag.knowledge.docsets import docset_index

    index = docset_index("hugo", project)
    for q in QUERIES[:5]:  # warm-up
        index.search(q, k=5)
    queries = [QUERIES[i % len(QUERIES)] for i in range(50)]
    it = iter(queries)
    fig = spread(timed_sync(lambda: index.search(next(it), k=5), 50))
    index.close()
    return fig


async def restart(project: Path, home: Path) -> dict[str, Any]:
    from mcp import ClientSession, stdio_client

    params = server_params(project, home)
    with open(home / "server.log", "a") as err:
        t = time.perf_counter()
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            question = {"query": QUERIES[0], "docset": "hugo", "k": 5}
            got = json.loads(text_of(await s.call_tool("search", question)))
            wall = time.perf_counter() - t
            assert got["results"], got  # the index from before is searched at once
            while got["indexed"]["hugo"]["age_s"] is None:  # the update the server started with
                await anyio.sleep(0.2)
                got = json.loads(text_of(await s.call_tool("search", question)))
    state = got["indexed"]["hugo"]
    return {"wall_s": round(wall, 2), "chunks_embedded": state["chunks_embedded"], "update_s": state["seconds"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--limit-files", type=int, help="index only this many Hugo pages (a quick check)")
    ap.add_argument("--calls", type=int, default=1000, help="in-process calls per tool")
    ap.add_argument("--stdio-calls", type=int, default=200, help="calls per tool over stdio")
    ap.add_argument("--no-search", action="store_true", help="skip the `search` tool (no model, no index)")
    args = ap.parse_args()
    if not HUGO.is_dir():
        raise SystemExit(f"the Hugo docs are missing: {HUGO}")

    out: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        home = tmp / "home"
        home.mkdir()
        os.environ["MDRAG_HOME"] = str(home)
        project, docs = make_project(tmp)
        out["in_process"] = in_process(project, args.calls)
        base = out["in_process"]["baseline_kb_instructions_ms"]
        folder = None if args.no_search else docs
        out["stdio"] = anyio.run(over_stdio, project, home, args.stdio_calls, folder, args.limit_files, base)
        if not args.no_search:
            out["hugo_files"] = out["stdio"].pop("hugo_files")
            s = out["stdio"]
            out["index_search_in_process_ms"] = search_baseline(home, project)
            show("baseline: Index.search in process, k=5", out["index_search_in_process_ms"])
            show("search, warm, over stdio, k=5", s["search_warm_ms"], out["index_search_in_process_ms"])
            show("search_docs over stdio, docset index open", s["search_docs_index_open_ms"], base, 10)
            print(
                f"{'':<52} {s['search_docs_index_open_ms']['with_sections']} of {args.stdio_calls} "
                "calls carried ranked sections",
                flush=True,
            )
            out["restart_first_search"] = r = anyio.run(restart, project, home)
            print(
                f"{'search, first call after a restart':<52} {r['wall_s']:.2f} s (model load included), "
                f"{r['chunks_embedded']} chunks embedded, update {r['update_s']:.2f} s",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


# -- in the report (benchmarks/report.py) --------------------------------------


def section_mcp(data: Data) -> list[str]:
    m = data.get("mcp_latency")
    lines = ["## MCP server", ""]
    lines += prose("mcp", cmd_mcp_latency=command(data, "mcp_latency"))
    if not m:
        return lines + [not_measured("mcp_latency", data), ""]
    ip, st = m.get("in_process") or {}, m.get("stdio") or {}
    base = ip.get("baseline_kb_instructions_ms") or {}
    sbase = m.get("index_search_in_process_ms") or {}

    def row(label: str, fig: Any, b: Json | None, bname: str) -> list[str]:
        if not isinstance(fig, dict):
            return [label, NA, NA, NA, NA, NA, NA]
        limit = fig.get("limit_ms")
        ok = fig.get("within_limit_p95")
        return [
            label,
            fms(fig.get("p50")),
            fms(fig.get("p95")),
            fint(fig.get("n")),
            f"{bname} {fms(b.get('p50'))}" if b else NA,
            fratio(
                fig.get("ratio_p50") if fig.get("ratio_p50") is not None else div(fig.get("p50"), (b or {}).get("p50")),
                1,
            ),
            f"{limit:g} ms: {'ok' if ok else 'OVER'}" if num(limit) is not None else NA,
        ]

    rows = [
        row("baseline: `kb.instructions()`, in process", base, None, ""),
        row("`kb.list_docsets()`, in process", ip.get("kb_list_docsets_ms"), base, "kb.instructions"),
        row("`search_docs`, in process", ip.get("search_docs_ms"), base, "kb.instructions"),
        row("`list_docsets`, in process", ip.get("list_docsets_ms"), base, "kb.instructions"),
        row("`search_docs` over stdio", st.get("search_docs_ms"), base, "kb.instructions"),
        row("`list_docsets` over stdio", st.get("list_docsets_ms"), base, "kb.instructions"),
        row(
            "`search_docs` over stdio, docset index open", st.get("search_docs_index_open_ms"), base, "kb.instructions"
        ),
        row("`search` over stdio, Hugo docset, warm, k=5", st.get("search_warm_ms"), sbase, "Index.search"),
        row("baseline: `Index.search` in process, k=5", sbase, None, ""),
    ]
    lines += table(["figure", "p50", "p95", "calls", "baseline", "ratio p50", "limit (p95)"], rows)
    first, built = st.get("search_first_call") or {}, st.get("search_index_built") or {}
    again = m.get("restart_first_search") or {}
    progress = first.get("indexing") or {}
    lines += [
        f"{fint(m.get('hugo_files'))} Hugo files, Python {m.get('python', NA)}, {m.get('cpus', NA)} CPUs. "
        f"Server start to `initialize` done: {fms(st.get('startup_initialize_ms'))}. "
        f"First `search` on the docset with no index: answered in {fsec(first.get('wall_s'))} (limit 15 s) with "
        f"{fint(first.get('results'))} results and the indexing progress ({progress.get('state', NA)}, "
        f"{fint(progress.get('files_done'))} of {fint(progress.get('files_total'))} files). Results once the "
        f"background build finished: {fsec(built.get('wall_s'))} after that call, "
        f"{fint(built.get('chunks_embedded'))} of {fint(built.get('chunks_total'))} chunks embedded "
        f"({fnum(built.get('chunks_per_s'), 1)} chunks/s). "
        f"First `search` after a restart: {fsec(again.get('wall_s'))}, {fint(again.get('chunks_embedded'))} chunks "
        f"embedded (update {fsec(again.get('update_s'))}). `search_docs` with the index open carried ranked "
        f"sections in {fint(dig(st, 'search_docs_index_open_ms', 'with_sections'))} of "
        f"{fint(dig(st, 'search_docs_index_open_ms', 'n'))} calls.",
        "",
    ]
    return lines


BENCHMARK = Benchmark(
    steps=(Step("mcp_latency", 100, (), ("in_process", "stdio"), ("cpus", "python")),),
    sections=(Section("MCP server", 70, section_mcp),),
)


if __name__ == "__main__":
    main()
