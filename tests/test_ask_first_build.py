"""`mdrag ask` and its client against a real `mdrag serve` building its first index: the progress is shown as
it comes, the client waits while it moves and gives up, saying how far it got, once it stops.

The index's first build is held by the test at each step of its progress (files written): an Index whose
``update`` waits on a semaphore before it reports more files done; everything else is the real server.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from mdrag.config import Config, load_config
from mdrag.errors import MdragError
from mdrag.frontends.cli.serving import run_ask
from mdrag.frontends.client import Client
from mdrag.frontends.server import QAServer
from mdrag.index import Index
from mdrag.ingest.progress import IndexProgress
from tests.conftest import HashEmbedder

FILES = 12  # eight long sections each: the build writes them a few files at a time


class HeldIndex(Index):
    """An index whose updates wait for one permit of ``steps`` before each report of more files done."""

    def __init__(self, config: Config, steps: threading.Semaphore) -> None:
        super().__init__(config, embedder=HashEmbedder())
        self.steps = steps  # released by the test: one per step of the build

    def update(self, *args: Any, progress: Callable[[IndexProgress], None] | None = None, **how: Any) -> Any:
        done = 0

        def held(p: IndexProgress) -> None:
            nonlocal done
            if p.files_done > done:
                done = p.files_done
                self.steps.acquire()
            if progress is not None:
                progress(p)

        return super().update(*args, progress=held, **how)


def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(FILES):
        parts = [f"## Part {j}\n\n" + " ".join(f"word{k} feature{i}" for k in range(120)) for j in range(8)]
        (root / f"page{i}.md").write_text(f"# Page {i}\n\nPage {i} explains feature{i}.\n\n" + "\n\n".join(parts))
    return root


@contextlib.asynccontextmanager
async def building(tmp_path: Path, steps: threading.Semaphore) -> AsyncIterator[QAServer]:
    """A server whose first build of :func:`docs` goes on as the test releases ``steps``."""
    config = load_config({"index": "b" + os.urandom(4).hex(), "server.port": 0, "search.threshold": 0})
    server = QAServer(config, [docs(tmp_path)], overrides={"server.port": 0}, index=HeldIndex(config, steps))
    await server.start()
    try:
        yield server
    finally:
        steps.release(100)  # whatever the test left held
        await server.stop()


def pace(steps: threading.Semaphore, every_s: float, stop: threading.Event) -> threading.Thread:
    """A thread that lets the build take one step every ``every_s`` seconds until ``stop``."""

    def run() -> None:
        while not stop.wait(every_s):
            steps.release()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_ask_shows_the_first_builds_progress_as_it_comes_then_answers(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    steps, stop = threading.Semaphore(0), threading.Event()

    async def scenario() -> int:
        async with building(tmp_path, steps) as server:
            pace(steps, 1.5, stop)  # a step lasts longer than the client's 1 s between tries
            try:
                return await asyncio.to_thread(run_ask, "feature3", server.url, out, err)
            finally:
                stop.set()

    assert asyncio.run(scenario()) == 0, err.getvalue()
    said = err.getvalue()
    shown = [
        int(n) for n in re.findall(r"^mdrag: the server is loading the index: (\d+) of 12 files indexed$", said, re.M)
    ]
    assert shown and shown == sorted(set(shown)), said  # as it came, each step once
    assert "page3.md" in out.getvalue(), out.getvalue()


def test_the_client_waits_past_its_timeout_while_the_build_moves(tmp_path: Path) -> None:
    # each step comes within the timeout (4 s), all of them after it: a client that gave up at its timeout,
    # however far the build had moved, failed here
    lines: list[str] = []
    steps, stop = threading.Semaphore(0), threading.Event()

    async def scenario() -> tuple[dict[str, Any], float]:
        async with building(tmp_path, steps) as server:

            def search() -> tuple[dict[str, Any], float]:
                with Client(server.url, timeout=4, progress=lines.append) as client:
                    client.retry_delay = 0.1
                    t = time.monotonic()
                    pace(steps, 1.5, stop)
                    found = client.request({"type": "search", "query": "feature3"})
                    return found, time.monotonic() - t

            try:
                return await asyncio.to_thread(search)
            finally:
                stop.set()

    found, waited = asyncio.run(scenario())
    assert found["type"] == "search_results" and found["results"], found
    assert waited > 4, "the build was quicker than the client's timeout: nothing was shown"
    counts = [int(line.split()[0]) for line in lines if line.endswith(" of 12 files indexed")]
    # the answer may come before the last count is said (the server answers once a step is committed)
    assert len(counts) >= 3 and counts == sorted(set(counts)) and counts[-1] <= FILES, lines


def test_the_client_gives_up_once_the_build_stops_moving_saying_how_far_it_got(tmp_path: Path) -> None:
    steps = threading.Semaphore(1)  # one step, then the build is held
    lines: list[str] = []

    async def scenario() -> str:
        async with building(tmp_path, steps) as server:
            deadline = time.monotonic() + 120
            while server.keeper is None or not (server.keeper.state.indexing or (0,))[0]:  # its one step taken
                assert time.monotonic() < deadline, "the build took no step"
                await asyncio.sleep(0.05)

            def ask() -> str:
                with Client(server.url, timeout=1, progress=lines.append) as client:
                    client.retry_delay = 0.1
                    with pytest.raises(MdragError) as refused:
                        client.ask("feature3", lambda _: None)
                    return str(refused.value)

            return await asyncio.to_thread(ask)

    said = asyncio.run(scenario())
    assert re.fullmatch(r"(\d+) of 12 files indexed", lines[-1]) and lines[-1] != "0 of 12 files indexed", lines
    assert said == f"the server is still loading the index ({lines[-1]}, no progress in 1 s); try again shortly"
