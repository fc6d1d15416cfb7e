"""`mdrag index`'s progress bar as drawn on stderr: it moves while the run is quiet,
shows an estimated total until every file is read, and an honest remaining time once chunks are written;
log lines go above it, and when stderr is not a terminal it prints plain lines."""

from __future__ import annotations

import io
import logging
import re
import sys
import time

import pytest

from mdrag.frontends.cli.indexing import _IndexBar
from mdrag.ingest.progress import ChunkEstimate, IndexProgress, ProgressCounter

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
    with _IndexBar(terminal=True) as bar:
        # 2 of 10 files read, 20 chunks known: about 100 chunks in all, none written yet
        bar(
            IndexProgress(
                "reading", 0, files_total=10, files_read=2, chunks_done=0, chunks_known=20, chunks_expected=100
            )
        )
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
        bar(
            IndexProgress(
                "reading", 0, files_total=10, files_read=2, chunks_done=0, chunks_known=20, chunks_expected=100
            )
        )
        time.sleep(1.5)
    assert out.getvalue() == ""


def test_the_total_is_estimated_from_the_bytes_parsed_of_each_kind_of_file() -> None:
    """The CommonMark spec (205 kB of text, 1,178 chunks) read first, then HTML pages (28 MB, 5 chunks each) made
    the estimate ~139,390 chunks: its chunks times the files left, for a run of 3,687. The bytes
    left of each kind of file hold as many chunks a byte as those of that kind parsed; the files of a kind none
    of which is parsed yet, as many chunks each as the files parsed."""
    pages = [(f"/d/p{i}/page.html", 100_000 + i) for i in range(261)]
    estimate = ChunkEstimate(263, [("/d/spec.txt", 205_000), ("/d/spec2.txt", 206_000), *pages])
    assert estimate.chunks() == 0  # nothing parsed: nothing to go by
    estimate.parsed("/d/spec.txt", 1178)
    assert estimate.chunks() == 1178 + round(206_000 * 1178 / 205_000 + 261 * 1178)  # no page parsed yet
    estimate.parsed("/d/spec2.txt", 1180)
    estimate.parsed("/d/p0/page.html", 5)  # one page parsed: the others hold as many chunks a byte
    left = sum(size for _, size in pages[1:])
    assert estimate.chunks() == 1178 + 1180 + 5 + round(left * 5 / 100_000)  # 3,665 (3,663 in all)
    for path, _ in pages[1:]:
        estimate.parsed(path, 5)
    assert estimate.chunks() == 1178 + 1180 + 5 * 261  # every file parsed: the count
    # a file whose size is not known (one the scan skipped): as many chunks a file as those of its kind
    estimate = ChunkEstimate(4, [("/d/a.md", 100), ("/d/b.md", 100)])
    estimate.parsed("/d/skipped.pdf", 0)
    estimate.parsed("/d/a.md", 10)
    assert estimate.chunks() == 10 + 10 + 0


def test_the_estimate_counts_the_files_parsed_ahead_of_the_embedder() -> None:
    """The first file's chunks were being embedded for a minute, and no other file counted meanwhile, though
    the parse runs ahead: the files parsed count in the estimate at the next report."""
    told: list[IndexProgress] = []
    counter = ProgressCounter(3, told.append, [("/d/big.md", 10_000), ("/d/a.md", 1_000), ("/d/b.md", 1_000)])
    counter.parsed("/d/big.md", 100)
    counter.read(100)
    counter.parsed("/d/a.md", 1)  # parsed by the parse thread while the first file's chunks are embedded
    counter.parsed("/d/b.md", 1)
    counter.wrote(10)
    assert (told[-1].files_read, told[-1].chunks_known, told[-1].chunks_expected) == (1, 100, 102)


def test_log_lines_are_printed_above_the_bar_not_over_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A warning logged while the bar was drawn was written after its frame, on its line
    (``...files 37/994 read]mdrag: WARNING: ...``): it goes on a line of its own, the bar below."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    handler = logging.StreamHandler(sys.stderr)  # as the command line's: on stderr
    handler.setFormatter(logging.Formatter("mdrag: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with _IndexBar(terminal=True) as bar:
            bar(
                IndexProgress(
                    "reading", 0, files_total=10, files_read=2, chunks_done=0, chunks_known=20, chunks_expected=100
                )
            )
            _wait_for(out, r"files 2/10 read")
            logging.getLogger("mdrag.test").warning("a file could not be read")
            drawn = _frames(out).index("mdrag: WARNING: a file could not be read")  # a whole line of its own
            _wait_for(out, r"files 2/10 read", after=drawn + 1)  # and the bar drawn again below it
    finally:
        root.removeHandler(handler)
    assert handler.stream is out  # given back its stream when the bar is gone
    assert not any("read]mdrag" in frame for frame in _frames(out))


def test_without_a_terminal_the_progress_is_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """When stderr is not a terminal (a log file, CI), the bar wrote its frames there all the same (12.5 KB for a
    321-chunk run): it writes a plain line now and then instead, and no frame."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(_IndexBar, "_LINE_S", 0.2)
    with _IndexBar() as bar:  # stderr is a StringIO: not a terminal
        bar(
            IndexProgress(
                "reading", 0, files_total=10, files_read=2, chunks_done=0, chunks_known=20, chunks_expected=100
            )
        )
        _wait_for(out, r"^mdrag: reading: 0/~100 chunks \[00:0\d<\?, \?chunk/s, files 2/10 read\]$")
        bar(IndexProgress("embedding", files_done=2, files_total=10, files_read=10, chunks_done=30, chunks_known=90))
        _wait_for(out, r"^mdrag: embedding: 30/90 chunks")
    text = out.getvalue()
    assert "\r" not in text and "|" not in text and text.endswith("\n")
    assert all(line.startswith("mdrag: ") for line in text.splitlines()), text


def test_the_bar_goes_on_across_the_steps_of_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """An `mdrag index` run commits every 30 s and goes on in a new step: the bar went back from 448 chunks to
    64 (and to files 1/262) at each step; it goes on from what the earlier steps wrote."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(_IndexBar, "_LINE_S", 0.2)
    with _IndexBar() as bar:
        bar(IndexProgress("embedding", 0, 263, files_read=1, chunks_done=448, chunks_known=1178, chunks_expected=5587))
        bar(IndexProgress("saving", 1, 263, files_read=1, chunks_done=1178, chunks_known=1178, chunks_expected=5587))
        bar.next_step()  # the step committed its one file: the next reads the 262 left
        bar(IndexProgress("reading", 0, 262, files_read=0, chunks_done=0, chunks_known=0))  # no estimate yet
        assert (bar._bar.n, bar._bar.total) == (1178, 5587)  # the last one stands
        bar(IndexProgress("embedding", 0, 262, files_read=1, chunks_done=64, chunks_known=1180, chunks_expected=4410))
        line = _wait_for(out, r"^mdrag: embedding: ")
    assert "1242/~5588 chunks" in line and "files 2/263 read" in line, line
