"""The fault test of serving: `mdrag serve` answers a steady stream of searches while its index changes.

The server runs as its own process (`mdrag serve DIR`, the real MiniLM model, the FAISS store, a private
home) over 40 CNCF glossary pages. One connection sends one search after another for the whole test, each
question in turn, in dense and in hybrid mode, while:

- rebuild: another process runs `mdrag index --rebuild` on the same index;
- reload: 250 small Hugo pages are copied into the served folder (a long update, committed in steps);
- edits: meanwhile, three of the served pages get a sentence with a made-up word each, one after the
  other, and a BM25 search for the word is repeated until it finds the page (the seconds are printed);
- settled: the reload is over.

Every answer is judged against the committed states it may come from. The glossary pages that are not
edited ("stable") are in every committed state, and a dense score depends on the chunk and the question
only, so a dense top 5 of any committed state holds the best stable chunks, in the order a full index
ranks them, and chunks of added or edited pages beside them: a stable chunk skipped, or fewer than 5
results, is a partial index. A rebuild changes no content, so until the reload a hybrid top 5 is the
full index's. Errors, empty result lists and partial answers are counted per phase and printed; the test
asserts there are none, and that each edit became searchable. No time is asserted (CI machines are busy):
``DEADLINE_S`` only keeps a broken server from hanging the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mdrag.config import load_config
from mdrag.ingest.manifest import Manifest
from tests.conftest import listening
from tests.figures import report

pytestmark = pytest.mark.slow  # the real model, in real processes

REPO = Path(__file__).resolve().parents[1]
INDEX = "faults"
K = 5
BASE_FILES = 40  # CNCF glossary pages served from the start
ADDED_FILES = 250  # small Hugo pages copied in: the long reload
EDITS = 3
DEADLINE_S = 120.0  # for each wait: only against a hang, never asserted as a time
PACE_S = 0.05  # between two searches of the stream
QUESTIONS = [
    "what is a container",
    "blue green deployment",
    "how does a canary release work",
    "chaos engineering experiments",
    "automatic scaling of an application",
    "continuous integration of code changes",
]
MODES = ("dense", "hybrid")


@dataclass
class Expected:
    """What a full index answers, and which chunks an answer may hold besides."""

    stable: dict[str, list[str]]  # question -> chunk ids of the stable pages, best first (dense)
    hybrid: dict[str, set[str]]  # question -> the hybrid top K of the full index
    edited: set[str]  # paths of the pages that get edited
    added: str  # the folder the reload copies pages into (a path prefix)


@dataclass
class Tally:
    """Every answer of the stream, per phase."""

    phase: str = "start"
    answered: Counter[str] = field(default_factory=Counter)
    bad: Counter[tuple[str, str]] = field(default_factory=Counter)  # (phase, "empty" | "partial" | "error")
    during: Counter[str] = field(default_factory=Counter)  # answers sent while the index was being written
    failures: list[str] = field(default_factory=list)  # the first few bad answers, told
    writing: bool = False  # the rebuild's manifest is dirty, or the server's status says it is indexing
    committed: list[int] = field(default_factory=list)  # the files of each committed state seen during the reload

    def record(self, mode: str, query: str, verdict: tuple[str, str] | None) -> None:
        self.answered[self.phase] += 1
        if self.writing:
            self.during[self.phase] += 1
        if verdict is not None:
            self.bad[self.phase, verdict[0]] += 1
            if len(self.failures) < 20:
                self.failures.append(f"{self.phase}, {mode} {query!r}: {verdict[0]}: {verdict[1]}")


def _judge(reply: dict[str, Any], mode: str, query: str, check_hybrid: bool, exp: Expected) -> tuple[str, str] | None:
    """None for a whole answer, else ("error" | "empty" | "partial", why)."""
    if reply["type"] == "error":
        return "error", reply.get("message", "")
    if reply["type"] != "search_results":  # a status: the server says it is not ready
        return "error", f"a {reply['type']} message: {reply.get('message')}"
    results = reply["results"]
    if not results:
        return "empty", "no results"
    if len(results) < K:
        return "partial", f"{len(results)} results of {K}: {[r['rel_path'] for r in results]}"
    ids = [r["chunk_id"] for r in results]
    if mode == "dense":
        ranking = exp.stable[query]
        shown = [i for i in ids if i in set(ranking)]
        for r in results:
            if r["chunk_id"] not in shown and r["path"] not in exp.edited and not r["path"].startswith(exp.added):
                return "partial", f"{r['rel_path']} chunk {r['chunk_id'][:8]}: from no committed state"
        if set(shown) != set(ranking[: len(shown)]):
            missing = [i[:8] for i in ranking[: len(shown)] if i not in shown]
            return "partial", f"stable chunks {missing} are missing from {[r['rel_path'] for r in results]}"
    elif check_hybrid and set(ids) != exp.hybrid[query]:
        return "partial", f"top {K} {[r['rel_path'] for r in results]} is not the full index's"
    return None


async def _call(ws: Any, msg: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps(msg))
    return dict(json.loads(await ws.recv()))


def _search(query: str, mode: str, k: int = K) -> dict[str, Any]:
    return {"type": "search", "query": query, "k": k, "threshold": 0, "mode": mode, "collapse": "none"}


async def _poll(what: Any, why: str, every: float = 0.1) -> Any:
    """Await ``what()`` until it returns something true (returned), for at most DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while not (got := await what()):
        if time.monotonic() > deadline:
            pytest.fail(f"{why} did not happen within {DEADLINE_S:g} s")
        await asyncio.sleep(every)
    return got


@contextmanager
def _serving(home: Path, served: Path) -> Iterator[str]:
    """`mdrag serve served` in its own process, with this home; yields its WebSocket address."""
    env = _env(home)

    def argv(port: int) -> list[str]:
        exe = [sys.executable, "-m", "mdrag", "serve", str(served), "--index", INDEX, "--port", str(port), "-v"]
        return ["env", *(f"{k}={env[k]}" for k in ("MDRAG_HOME", "PYTHONPATH", "HF_HUB_OFFLINE")), *exe]

    def exited(tail: str) -> None:
        pytest.fail(f"mdrag serve exited: {tail}")

    with listening(argv, home / "serve.log", DEADLINE_S, exited) as port:
        yield f"ws://127.0.0.1:{port}"


def _env(home: Path) -> dict[str, str]:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "MDRAG_HOME": str(home), "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}


def test_searches_stay_whole_while_the_index_changes(
    request: pytest.FixtureRequest, tmp_path: Path, mdrag_home: Path, shared_data: Path
) -> None:
    glossary = sorted((shared_data / "markdown_cncf_glossary" / "content" / "en").glob("[a-z]*.md"))
    hugo = sorted(p for p in (shared_data / "markdown_hugo_docs" / "content").rglob("*.md") if p.stat().st_size < 2048)
    assert len(glossary) >= BASE_FILES and len(hugo) >= ADDED_FILES
    served = tmp_path.resolve() / "docs"
    served.mkdir()
    for f in glossary[:BASE_FILES]:
        shutil.copyfile(f, served / f.name)
    targets = [served / glossary[i].name for i in (3, 17, 31)][:EDITS]
    added = served / "added"
    (mdrag_home / "config.yaml").write_text(json.dumps({"store": {"backend": "faiss"}}))
    manifest = load_config({"index": INDEX}).manifest_path(INDEX)
    tally = Tally()
    edits: list[tuple[str, float, str]] = []  # (page, seconds until searchable, what the server was doing)
    rebuild_out: list[str] = []

    async def scenario(url: str) -> None:
        from websockets.asyncio.client import connect

        async with connect(url, max_size=None) as ws, connect(url, max_size=None) as watch:
            await ws.recv()  # the greeting status
            await watch.recv()

            async def settled() -> dict[str, Any] | None:
                st = await _call(watch, {"type": "status"})
                return st if st["state"] == "ready" and "indexing" not in st else None

            st = await _poll(settled, "the first build")
            assert st["files"] == BASE_FILES, st
            stable, hybrid = {}, {}
            edited = {str(t) for t in targets}
            for q in QUESTIONS:
                ranked = (await _call(ws, _search(q, "dense", k=50)))["results"]
                stable[q] = [r["chunk_id"] for r in ranked if r["path"] not in edited]
                top = (await _call(ws, _search(q, "hybrid")))["results"]
                assert len(stable[q]) > K and len(top) == K, (q, ranked, top)
                hybrid[q] = {r["chunk_id"] for r in top}
            exp = Expected(stable, hybrid, edited, str(added) + os.sep)

            stop = asyncio.Event()
            tasks: list[asyncio.Future[None]] = []

            async def until(what: Any, why: str, every: float = 0.1) -> Any:
                """_poll, which stops should the stream or the monitor have failed (a closed connection)."""

                async def checked() -> Any:
                    for t in tasks:
                        if t.done():
                            t.result()  # raises what stopped it
                            pytest.fail("the search stream stopped")
                    return await what()

                return await _poll(checked, why, every)

            async def answered(phase: str, n: int) -> bool:
                return tally.answered[phase] >= n

            async def stream() -> None:
                i = 0
                while not stop.is_set():
                    q, mode = QUESTIONS[i // 2 % len(QUESTIONS)], MODES[i % 2]
                    reply = await _call(ws, _search(q, mode))
                    tally.record(mode, q, _judge(reply, mode, q, tally.phase in ("quiet", "rebuild"), exp))
                    i += 1
                    await asyncio.sleep(PACE_S)

            async def monitor() -> None:  # whether the index is being written, for the "during" counts
                async with connect(url, max_size=None) as own:
                    await own.recv()
                    while not stop.is_set():
                        if tally.phase == "rebuild":
                            m = Manifest.load(manifest)
                            tally.writing = m is not None and m.dirty
                        else:
                            st = await _call(own, {"type": "status"})
                            tally.writing = "indexing" in st
                            if tally.phase == "reload" and st["files"] not in tally.committed:
                                tally.committed.append(st["files"])
                        await asyncio.sleep(0.05)

            tasks += [asyncio.ensure_future(stream()), asyncio.ensure_future(monitor())]
            try:
                tally.phase = "quiet"
                await until(lambda: answered("quiet", 2 * len(QUESTIONS)), "the first searches")

                tally.phase = "rebuild"  # (a) another process rebuilds the index the server serves
                proc = await asyncio.create_subprocess_exec(
                    *(sys.executable, "-m", "mdrag", "index", "--rebuild", "--index", INDEX),
                    env=_env(mdrag_home),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                )
                try:
                    out, _ = await asyncio.wait_for(proc.communicate(), DEADLINE_S)
                except asyncio.TimeoutError:
                    proc.kill()
                    pytest.fail(f"`mdrag index --rebuild` did not end within {DEADLINE_S:g} s")
                rebuild_out.append(out.decode(errors="replace"))
                assert proc.returncode == 0, rebuild_out[0][-3000:]
                assert "full re-index" in rebuild_out[0], rebuild_out[0][-3000:]

                tally.phase = "reload"  # (b) hundreds of pages copied in: a long update
                for f in hugo[:ADDED_FILES]:
                    dest = added / f.relative_to(shared_data / "markdown_hugo_docs" / "content")
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(f, dest)

                async def indexing() -> bool:
                    st = await _call(watch, {"type": "status"})
                    return "indexing" in st or st["files"] == BASE_FILES + ADDED_FILES

                await until(indexing, "the reload's start")
                async with connect(url, max_size=None) as probe:  # (c) edits, while the reload runs
                    await probe.recv()
                    for n, target in enumerate(targets):
                        edits.append(await _edit(probe, target, f"zqxv{n}vermilion", tally))

                async def reloaded() -> bool:
                    st = await settled()
                    return st is not None and st["files"] == BASE_FILES + ADDED_FILES

                await until(reloaded, "the end of the reload")
                tally.phase = "settled"
                await until(lambda: answered("settled", 2 * len(QUESTIONS)), "the last searches")
                for n, target in enumerate(targets):  # the reload's later steps kept each edit
                    r = await _call(watch, _search(f"zqxv{n}vermilion", "bm25", k=1))
                    assert r["results"] and r["results"][0]["path"] == str(target), (target, r)
            finally:
                stop.set()
                await asyncio.gather(*tasks)

    try:
        with _serving(mdrag_home, served) as url:
            asyncio.run(scenario(url))
    finally:
        _report(request.config, tally, edits, rebuild_out, mdrag_home / "serve.log")
    bad = sum(tally.bad.values())
    assert not bad, f"{bad} bad answers: {dict(tally.bad)}\n" + "\n".join(tally.failures)
    assert tally.during["rebuild"] and tally.during["reload"], "the searches did not meet the index being written"
    assert len(edits) == EDITS


async def _edit(probe: Any, target: Path, word: str, tally: Tally) -> tuple[str, float, str]:
    """Append a sentence with ``word`` to ``target``; search for it until the page is found."""
    with open(target, "a") as f:
        f.write(f"\n\nThe {word} setting is documented here.\n")
    t = time.monotonic()

    async def found() -> bool:
        r = await _call(probe, _search(word, "bm25", k=1))
        if r["type"] != "search_results":
            tally.record("bm25", word, ("error", f"{r['type']}: {r.get('message')}"))
        return bool(r.get("results")) and r["results"][0]["path"] == str(target)

    await _poll(found, f"an edit of {target.name} becoming searchable", every=0.05)
    seconds = time.monotonic() - t
    st = await _call(probe, {"type": "status"})
    doing = st.get("indexing")
    return target.name, seconds, f"reload at {doing['files_done']} of {doing['files_total']}" if doing else "idle"


def _report(
    config: pytest.Config, tally: Tally, edits: list[tuple[str, float, str]], rebuild_out: list[str], log: Path
) -> None:
    """The counts, at the end of the pytest output (and benchmarks/out/serving_faults.json); the details
    (shown with a failure, or with ``-s``)."""
    phases = ("quiet", "rebuild", "reload", "settled")
    figures = {
        phase: {"answered": tally.answered[phase], "during_writes": tally.during[phase]}
        | {kind: tally.bad[phase, kind] for kind in ("empty", "partial", "error")}
        for phase in phases
    } | {"edit_to_searchable_s": [round(seconds, 2) for _, seconds, _ in edits]}
    bad = sum(tally.bad.values())
    line = (
        f"serving faults: {sum(tally.answered.values())} searches while the index changed "
        f"({', '.join(f'{p} {tally.answered[p]}' for p in phases)}), {bad} empty, partial or failed; "
        f"edits searchable after {', '.join(f'{s:.1f}' for _, s, _ in edits) or '-'} s"
    )
    report(config, "serving_faults", figures, line)
    print(f"\nsearches per phase (K={K}; 'during': sent while the index was being written):")
    for phase in ("quiet", "rebuild", "reload", "settled"):
        bad = {kind: tally.bad[phase, kind] for kind in ("empty", "partial", "error")}
        print(f"  {phase:8} answered {tally.answered[phase]:4} (during {tally.during[phase]:4})", bad)
    print(f"  committed states seen during the reload (files): {tally.committed}")
    for name, seconds, doing in edits:
        print(f"  edit of {name}: searchable after {seconds:.2f} s (then: {doing})")
    for line in tally.failures:
        print("  BAD", line)
    if rebuild_out:
        print("  rebuild:", " | ".join(rebuild_out[0].strip().splitlines()[-4:]))
    if tally.failures or len(edits) < EDITS:
        print(log.read_text(errors="replace")[-4000:] if log.exists() else "(no server log)")
