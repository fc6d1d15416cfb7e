"""Tests for mdrag.parsers.worker: parsing in a child process with a time limit and a memory cap.

The misbehaving parsers live in tests/slow_parsers.py (importable, so the
child runs them); the well-behaved files are the real ones in ../shared/data.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mdrag.parsers as parsers
from mdrag.config import load_config
from mdrag.errors import ParseError, ParserCrashError, UnsupportedFormatError
from mdrag.index import Index
from mdrag.parsers import parse_file, register_parser
from mdrag.parsers.worker import _RECYCLE_MB, ParseWorker
from mdrag.types import Document
from tests import slow_parsers

REPO = Path(__file__).resolve().parents[1]
LONG = 300.0  # seconds: a time limit no well-behaved file reaches, even on a loaded machine
TIMEOUT_REASON = "parsing took longer than 1 s (setting index.parse_timeout): skipped"

linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc and RLIMIT_AS")


@pytest.fixture
def worker() -> Iterator[ParseWorker]:
    with ParseWorker(max_mb=2048) as w:
        yield w


def _write(folder: Path, name: str, text: str = "some text") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited: every one of its threads (the leader shows "Z" while the
    others still exit, and only then can its parent reap it); a zombie nobody reaped counts as exited."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except (FileNotFoundError, ProcessLookupError):
        return True
    for task in tasks:
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state not in ("Z", "X"):
            return False
    return True


def _kill_and_wait(pid: int) -> None:
    """SIGKILL ``pid`` and wait until it is dead: a child dying just as a file is sent gets the blame for it."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not _gone(pid):
        assert time.monotonic() < deadline, f"process {pid} survived SIGKILL for 60 s"
        time.sleep(0.01)


def _shared_files(shared_data: Path) -> list[Path]:
    md = sorted((shared_data / "markdown_hugo_docs").rglob("*.md"))[:40]
    pdf = sorted((shared_data / "pdf_py-pdf_sample-files").rglob("*.pdf"))
    docx = sorted((shared_data / "docx_python-docx").rglob("*.docx"))[:10]
    html = sorted((shared_data / "html_readability_pages").rglob("source.html"))[:5]
    return md + pdf + docx + html


def test_same_documents_and_errors_as_in_process(shared_data: Path, worker: ParseWorker) -> None:
    files = _shared_files(shared_data)
    assert len(files) > 60
    pids = set()
    failures = 0
    for path in files:
        try:
            expected: Document | str = parse_file(path)
        except ParseError as exc:
            expected = str(exc)
            failures += 1
        try:
            got: Document | str = worker.parse(path, LONG)
        except ParseError as exc:
            got = str(exc)
        assert got == expected, path
        pids.add(worker.pid)
    assert failures > 0  # the encrypted and broken PDFs: their messages came through unchanged
    assert len(pids) == 1 and None not in pids  # one child served every file


@pytest.mark.usefixtures("registry")
@pytest.mark.parametrize("endless", [slow_parsers.forever, slow_parsers.forever_holding_gil])
def test_endless_parser_is_skipped_and_the_next_file_parses(
    tmp_path: Path, worker: ParseWorker, shared_data: Path, endless: parsers.Parser
) -> None:
    register_parser([".loop"], endless)
    register_parser([".plain"], slow_parsers.plain)
    worker.start()
    first = worker.pid
    assert first is not None
    loop = _write(tmp_path, "stuck.loop")
    with pytest.raises(ParseError) as info:
        worker.parse(loop, timeout=1)
    assert str(info.value) == f"{loop}: {TIMEOUT_REASON}"
    assert (tmp_path / "stuck.loop.started").exists()  # it did run in the child
    assert _gone(first)
    doc = worker.parse(_write(tmp_path, "next.plain", "after the loop"), timeout=LONG)
    assert doc.sections[0].text == "after the loop"
    assert worker.pid not in (None, first)
    md = next((shared_data / "markdown_hugo_docs").rglob("*.md"))
    assert worker.parse(md, LONG) == parse_file(md)


@linux_only
@pytest.mark.usefixtures("registry")
def test_memory_cap_stops_a_parser_that_allocates_without_bound(tmp_path: Path) -> None:
    register_parser([".hog"], slow_parsers.hog)
    register_parser([".plain"], slow_parsers.plain)
    hog = _write(tmp_path, "big.hog")
    with ParseWorker(max_mb=256) as worker:
        with pytest.raises(ParseError) as info:
            worker.parse(hog, timeout=LONG)
        assert str(info.value) == f"{hog}: the parser ran out of memory (over 256 MB; setting index.max_parse_mb)"
        assert worker.parse(_write(tmp_path, "small.plain"), timeout=LONG).title == "plain"


@linux_only
@pytest.mark.usefixtures("registry")
@pytest.mark.parametrize(
    ("sig", "reason"),
    [
        ("SIGKILL", "the parser process was killed (SIGKILL), most likely by the system's out-of-memory killer"),
        ("SIGSEGV", "the parser process died of SIGSEGV (a crash in the parser or a library it uses)"),
    ],
)
def test_a_child_killed_by_a_signal_is_reported_and_replaced(
    tmp_path: Path, worker: ParseWorker, sig: str, reason: str
) -> None:
    register_parser([".die"], slow_parsers.die)
    register_parser([".plain"], slow_parsers.plain)
    victim = _write(tmp_path, "victim.die", sig)
    with pytest.raises(ParseError) as info:
        worker.parse(victim, timeout=LONG)
    assert str(info.value).startswith(f"{victim}: {reason}")
    assert worker.parse(_write(tmp_path, "after.plain"), timeout=LONG).title == "plain"


@linux_only
@pytest.mark.usefixtures("registry")
def test_a_child_that_died_between_files_is_replaced_before_the_next(tmp_path: Path, worker: ParseWorker) -> None:
    register_parser([".plain"], slow_parsers.plain)
    worker.parse(_write(tmp_path, "a.plain"), timeout=LONG)
    first = worker.pid
    assert first is not None
    _kill_and_wait(first)
    assert worker.parse(_write(tmp_path, "b.plain"), timeout=LONG).title == "plain"
    assert worker.pid not in (None, first)


def _flaky_python(folder: Path, failures: int) -> str:
    """A stand-in for sys.executable whose first ``failures`` runs exit with code 3."""
    script = folder / "flaky-python"
    script.write_text(
        "#!/bin/sh\n"
        f'n=$(ls "{folder}" | grep -c "^failed-")\n'
        f'if [ "$n" -lt {failures} ]; then touch "{folder}/failed-$n"; exit 3; fi\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    script.chmod(0o755)
    return str(script)


@linux_only
@pytest.mark.usefixtures("registry")
def test_a_child_that_fails_to_start_gets_a_second_try(
    tmp_path: Path, worker: ParseWorker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    register_parser([".plain"], slow_parsers.plain)
    monkeypatch.setattr(sys, "executable", _flaky_python(tmp_path, failures=1))
    assert worker.parse(_write(tmp_path, "a.plain"), timeout=LONG).title == "plain"
    assert worker.pid is not None  # parsed in the second child
    assert [r.getMessage() for r in caplog.records if r.name == "mdrag.parsers.worker"] == [
        "the parse worker process did not start (it exited with code 3; its error output is above): trying once more"
    ]


@linux_only
@pytest.mark.usefixtures("registry")
def test_when_no_child_starts_files_are_parsed_in_this_process(
    tmp_path: Path, worker: ParseWorker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    register_parser([".plain"], slow_parsers.plain)
    monkeypatch.setattr(sys, "executable", _flaky_python(tmp_path, failures=3))
    for name in ("a.plain", "b.plain"):
        assert worker.parse(_write(tmp_path, name), timeout=LONG).title == "plain"
    assert worker.pid is None
    assert len(list(tmp_path.glob("failed-*"))) == 2  # two tries, then none for the second file
    warnings = [r.getMessage() for r in caplog.records if r.name == "mdrag.parsers.worker"]
    assert len(warnings) == 2 and warnings[1].endswith(
        "(it exited with code 3; its error output is above): "
        "files are parsed in this process, with no time limit or memory cap"
    )


@linux_only
@pytest.mark.usefixtures("registry")
def test_a_child_left_holding_much_memory_is_replaced(tmp_path: Path, worker: ParseWorker) -> None:
    register_parser([".keep"], slow_parsers.keep)
    worker.parse(_write(tmp_path, "small.keep", "1"), timeout=LONG)
    first = worker.pid
    assert first is not None  # 1 MB held: the child stays
    worker.parse(_write(tmp_path, "big.keep", str(_RECYCLE_MB + 64)), timeout=LONG)
    assert worker.pid is None and _gone(first)
    assert worker.parse(_write(tmp_path, "again.keep", "1"), timeout=LONG).title == "plain"
    assert worker.pid not in (None, first)


def test_errors_that_need_no_child(tmp_path: Path, worker: ParseWorker) -> None:
    with pytest.raises(UnsupportedFormatError, match="no parser for"):
        worker.parse(tmp_path / "archive.xyz", timeout=LONG)
    assert worker.pid is None  # not started for a file no parser takes
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        worker.parse(tmp_path / "a.md", timeout=0)
    missing = tmp_path / "missing.md"
    with pytest.raises(ParseError, match="cannot read file") as info:
        worker.parse(missing, timeout=LONG)
    assert str(info.value).startswith(f"{missing}: ")


@pytest.mark.usefixtures("registry")
def test_a_local_parser_runs_in_this_process(
    tmp_path: Path, worker: ParseWorker, caplog: pytest.LogCaptureFixture
) -> None:
    def local(data: bytes, path: str) -> Document:
        return Document(path=path, sections=[], title=f"local in {os.getpid()}")

    register_parser([".loc"], local)
    caplog.set_level(logging.DEBUG, logger="mdrag.parsers.worker")
    for name in ("a.loc", "b.loc"):
        assert worker.parse(_write(tmp_path, name), timeout=LONG).title == f"local in {os.getpid()}"
    assert worker.pid is None  # no child was needed
    why = [r for r in caplog.records if "does not pickle" in r.getMessage()]
    assert len(why) == 1 and "local" in why[0].getMessage()


@pytest.mark.usefixtures("registry")
def test_a_parser_the_child_cannot_import_runs_in_this_process(
    tmp_path: Path, worker: ParseWorker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    module = types.ModuleType("mdrag_only_in_the_parent")

    def parse(data: bytes, path: str) -> Document:
        return Document(path=path, sections=[], title=f"parsed in {os.getpid()}")

    parse.__module__, parse.__qualname__ = module.__name__, "parse"
    module.parse = parse
    monkeypatch.setitem(sys.modules, module.__name__, module)  # pickles by reference, but only here
    register_parser([".only"], parse)
    caplog.set_level(logging.DEBUG, logger="mdrag.parsers.worker")
    for name in ("a.only", "b.only"):
        assert worker.parse(_write(tmp_path, name), timeout=LONG).title == f"parsed in {os.getpid()}"
    why = [r.getMessage() for r in caplog.records if "runs in this process" in r.getMessage()]
    assert len(why) == 1 and "ModuleNotFoundError" in why[0]


@pytest.mark.usefixtures("registry")
def test_the_childs_log_records_reach_this_process(
    tmp_path: Path, worker: ParseWorker, caplog: pytest.LogCaptureFixture
) -> None:
    register_parser([".noisy"], slow_parsers.noisy)
    path = _write(tmp_path, "loud.noisy", "12345")
    with caplog.at_level(logging.WARNING):
        worker.parse(path, timeout=LONG)
    records = [r for r in caplog.records if r.name == "tests.slow_parsers"]
    assert [r.getMessage() for r in records] == [f"noisy parser read 5 bytes from {path}"]
    assert records[0].process == worker.pid != os.getpid()


def test_close_stops_the_child(tmp_path: Path, shared_data: Path) -> None:
    md = next((shared_data / "markdown_hugo_docs").rglob("*.md"))
    worker = ParseWorker()
    with worker:
        worker.parse(md, LONG)
        pid = worker.pid
        assert pid is not None
    assert worker.pid is None and _gone(pid)


_DRIVER = """
import sys
from pathlib import Path
from mdrag.parsers import register_parser
from mdrag.parsers.worker import _RECYCLE_MB, ParseWorker
from tests import slow_parsers

register_parser([".loop"], getattr(slow_parsers, sys.argv[1]))
worker = ParseWorker()
worker.start()
print(worker.pid, flush=True)
worker.parse(sys.argv[2], timeout=float(sys.argv[3]))
"""


@linux_only
@pytest.mark.parametrize(("parser", "timeout"), [("forever", 3600), ("forever_holding_gil", 5)])
def test_kill_9_of_the_parent_leaves_no_child(tmp_path: Path, parser: str, timeout: int) -> None:
    """While the child parses, the parent is killed: the child must end by itself.

    A child running Python code notices its stdin close; one stuck in C code
    holding the GIL is ended by its SIGALRM timer, ``timeout`` + 2 s later.
    """
    loop = _write(tmp_path, "stuck.loop")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, parser, str(loop), str(timeout)], cwd=REPO, env=env, stdout=subprocess.PIPE
    )
    try:
        assert driver.stdout is not None
        child = int(driver.stdout.readline())
        deadline = time.monotonic() + 120
        while not (tmp_path / "stuck.loop.started").exists():  # the child is inside the parser
            assert driver.poll() is None and time.monotonic() < deadline, "the child never started parsing"
            time.sleep(0.05)
        assert "mdrag.parsers.worker" in Path(f"/proc/{child}/cmdline").read_text()
    finally:
        driver.kill()
        driver.wait()
    deadline = time.monotonic() + 120
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not _gone(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail(f"the worker's child {child} outlived its parent by 120 s")


# --- a parser's bug is a skipped file, counted apart, with its traceback at debug level ----


def _crash_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mdrag.parsers" and "unexpected exception" in r.getMessage()]


@pytest.mark.usefixtures("registry")
def test_a_parser_bug_is_a_parser_crash_with_its_traceback_at_debug_level(
    tmp_path: Path, worker: ParseWorker, caplog: pytest.LogCaptureFixture
) -> None:
    register_parser([".bug"], slow_parsers.buggy)
    caplog.set_level(logging.DEBUG)
    path = _write(tmp_path, "a.bug")
    for parse in (lambda: parse_file(path), lambda: worker.parse(path, timeout=LONG)):
        caplog.clear()
        with pytest.raises(ParserCrashError) as info:
            parse()
        assert str(info.value).startswith(f"{path}: unexpected TypeError in the parser: ")
        (record,) = _crash_records(caplog)
        assert record.levelno == logging.DEBUG
        traceback = record.exc_text or logging.Formatter().formatException(record.exc_info)  # type: ignore[arg-type]
        assert "in buggy" in traceback and "TypeError" in traceback  # the child's traceback came through
    register_parser([".plain"], slow_parsers.plain)
    assert worker.parse(_write(tmp_path, "b.plain", "fine"), timeout=LONG).sections[0].text == "fine"


@pytest.mark.usefixtures("registry")
def test_the_index_summary_counts_parser_bugs_apart_from_bad_files(tmp_path: Path, hash_embedder: Any) -> None:
    register_parser([".bug"], slow_parsers.buggy)
    docs = tmp_path / "docs"
    docs.mkdir()
    _write(docs, "crash.bug")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")  # bad input: a plain skip
    (docs / "fine.md").write_text("# Fine\n\nThis file parses.\n")
    with Index(load_config({"index": "bugs"}), embedder=hash_embedder) as idx:
        summary = idx.update([docs])
    assert summary.added == 1 and summary.skipped == 2
    assert summary.parser_errors == 1
    reasons = dict(summary.skipped_files)
    assert reasons[str(docs / "crash.bug")].startswith("unexpected TypeError in the parser")
    assert reasons[str(docs / "broken.pdf")].startswith("not a readable PDF")


def test_a_child_whose_parent_has_gone_ends_quietly() -> None:
    """`mdrag mcp` closed a second after it started: its parse worker's child found the socket closed
    and printed `BrokenPipeError` with a traceback. It ends quietly, exit 0."""
    import json
    import socket

    from mdrag.parsers.worker import _BOOT

    for closed_before_ready in (True, False):
        parent, child = socket.socketpair()
        if closed_before_ready:
            parent.close()
        args = [sys.executable, "-c", _BOOT, json.dumps(sys.path), str(child.fileno()), "", str(logging.WARNING)]
        with child:
            proc = subprocess.Popen(
                args, stdin=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=[child.fileno()], text=True
            )
        if not closed_before_ready:
            parent.recv(4096)  # its "ready"
            parent.shutdown(socket.SHUT_RDWR)
            parent.close()
        proc.wait(timeout=120)  # its stdin still open: it ends because its socket is closed
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.close()
        err = proc.stderr.read()
        assert proc.returncode == 0 and "Traceback" not in err and "Error" not in err, (closed_before_ready, err)


def test_a_file_whose_chunking_passes_the_time_limit_is_skipped_and_the_others_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunking ran outside the parse limits, so one big file held up the whole run. Chunking
    has the same limit; here its clock is the tokenizer's work: each text counted moves it a second on."""
    from mdrag.chunking import deadline
    from tests.conftest import HashEmbedder

    counted = [0]

    class Tokenizer(HashEmbedder):
        def count_tokens(self, texts: Any) -> list[int]:
            counted[0] += len(texts)
            return super().count_tokens(texts)

    monkeypatch.setattr(deadline, "_clock", lambda: float(counted[0]))
    docs = tmp_path / "docs"
    docs.mkdir()
    line = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt."
    _write(docs, "big.txt", "".join(f"{i} {line}\n" for i in range(20_000)))  # 2 MB, one paragraph
    _write(docs, "fine.md", "# Fine\n\nThis file chunks in time.\n")
    _write(docs, "notes.txt", "Notes\n\nA short text file.\n")
    config = load_config({"index": "big", "index.parse_timeout": 100})
    with Index(config, embedder=Tokenizer(max_tokens=256)) as idx:
        summary = idx.update([docs])
        assert summary.added == 2 and summary.skipped == 1
        assert dict(summary.skipped_files) == {
            str(docs / "big.txt"): "chunking took longer than 100 s (setting index.parse_timeout): skipped"
        }
        assert idx.search("chunks in time")[0].rel_path == "fine.md"


@linux_only
def test_a_file_whose_chunking_would_pass_the_memory_limit_is_skipped_and_the_others_indexed(tmp_path: Path) -> None:
    """Chunking ran outside the parse's memory cap. 300,000 one-letter lines (0.6 MB) parse within
    32 MB, but chunking them needs more (about 170 bytes a line): the file is skipped, with its path and the
    setting, before it is chunked, and the run goes on."""
    import tracemalloc

    from mdrag.chunking import chunk_document
    from tests.conftest import HashEmbedder

    docs = tmp_path / "docs"
    docs.mkdir()
    _write(docs, "lines.txt", "a\n" * 300_000)  # one paragraph
    _write(docs, "fine.md", "# Fine\n\nThis file chunks within its memory.\n")
    _write(docs, "notes.txt", "Notes\n\nA short text file.\n")
    embedder = HashEmbedder(max_tokens=256)
    tracemalloc.start()  # what chunking it would take: more than the limit, so the skip is no false alarm
    chunk_document(parse_file(docs / "lines.txt"), str(docs), "lines.txt", None, embedder.count_tokens, 256)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak > 32 * 2**20
    config = load_config({"index": "mem", "index.max_parse_mb": 32, "index.parse_timeout": LONG})
    with Index(config, embedder=embedder) as idx:
        summary = idx.update([docs])
        assert summary.added == 2 and summary.skipped == 1, summary
        ((path, reason),) = summary.skipped_files
        assert path == str(docs / "lines.txt")
        assert reason.startswith("chunking it would need about ") and "MB of memory, more than the 32 MB" in reason
        assert reason.endswith("(setting index.max_parse_mb): skipped")
        assert idx.search("chunks within its memory")[0].rel_path == "fine.md"
