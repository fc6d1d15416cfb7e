"""`mdrag index`'s progress bar as drawn on stderr (issue 28 point 13): it moves while the run is quiet,
shows an estimated total until every file is read, and an honest remaining time once chunks are written."""

from __future__ import annotations

import io
import re
import sys
import time

import pytest

from mdrag.frontends.cli.indexing import _IndexBar
from mdrag.ingest.progress import IndexProgress

_FRAME = re.compile(r"[\r\n]")


def _frames(out: io.StringIO) -> list[str]:
    return [f.strip() for f in _FRAME.split(out.getvalue()) if f.strip()]


def _wait_for(out: io.StringIO, pattern: str, after: int = 0, limit_s: float = 60.0) -> str:
    """The first frame past the ``after`` first ones that matches ``pattern`` (the limit only stops a hang)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for frame in _frames(out)[after:]:
            if re.search(pattern, frame):
                return frame
        time.sleep(0.05)
    raise AssertionError(f"no frame matching {pattern!r}; drawn: {_frames(out)[-5:]}")


def test_the_bar_moves_while_the_run_is_quiet_and_estimates_its_total(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    with _IndexBar() as bar:
        # 2 of 10 files read, 20 chunks known: about 100 chunks in all, none written yet
        bar(IndexProgress("reading", files_done=0, files_total=10, files_read=2, chunks_done=0, chunks_known=20))
        first = _wait_for(out, r"~100 chunks")  # drawn once the run has taken a second
        assert "files 2/10 read" in first and first.startswith("reading")
        # no event comes: the ticker draws again, and the clock moves
        drawn = len(_frames(out))
        later = _wait_for(out, r"\[00:0[2-9]", after=drawn)
        assert "~100 chunks" in later
        bar(IndexProgress("embedding", files_done=2, files_total=10, files_read=10, chunks_done=30, chunks_known=90))
        known = _wait_for(out, r"30/90 chunks")  # every file read: the total is known, no ~
        assert "~" not in known and known.startswith("embedding")
        # chunks are being written at a rate: the remaining time is a time, not "?"
        remaining = re.search(r"<([^,]+),", known)
        assert remaining and re.fullmatch(r"\d\d:\d\d", remaining.group(1)), known


def test_a_quiet_bar_draws_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    with _IndexBar(shown=False) as bar:
        bar(IndexProgress("reading", files_done=0, files_total=10, files_read=2, chunks_done=0, chunks_known=20))
        time.sleep(1.5)
    assert out.getvalue() == ""
