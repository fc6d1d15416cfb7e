"""Parse files in a child process that can be stopped: a time limit and a memory cap per file.

A parser stuck on one file (a quadratic path, an endless loop, a file that
needs gigabytes) would stall a whole indexing run, and a Python thread cannot
be stopped. :class:`ParseWorker` keeps one child Python process and sends it
one file at a time; the child reads the file itself, parses it and sends the
:class:`~mdrag.types.Document` back. A file that takes longer than its time
limit gets the child killed (and a fresh one started for the next file); a
parse that needs more memory than the cap fails with MemoryError inside the
child. Either way the caller gets a :class:`~mdrag.errors.ParseError` naming
the reason and goes on with the next file::

    with ParseWorker(max_mb=2048) as worker:
        for path in paths:
            try:
                doc = worker.parse(path, timeout=60)
            except (ParseError, UnsupportedFormatError) as exc:
                log.warning("skipped %s", exc)

The child uses the parent's parser for the file's extension, pickled: the
built-in and entry-point parsers pickle by reference and are imported in the
child. A parser that does not pickle (a local function given to
:func:`~mdrag.parsers.register_parser`) runs in the calling process instead,
with no limit.

The child is started with ``subprocess`` (fork and exec, as the spawn start
method does; never a bare fork, since the parent may hold gRPC threads) and
talks over a socket pair wrapped in :class:`multiprocessing.connection.Connection`.
It exits by itself when the parent dies: a thread waits for its stdin, a pipe
only the parent holds, to close; and while a file is parsed, an interval timer
whose SIGALRM keeps its default action (the kernel ends the process: no Python
code, no GIL needed) ends the child shortly after the file's time limit even
if the parser holds the GIL.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from mdrag.errors import ParseError, ParserCrashError
from mdrag.parsers import Parser, get_parser, parse_file
from mdrag.types import Document

__all__ = ["ParseWorker"]

logger = logging.getLogger(__name__)

_START_TIMEOUT = 60.0  # seconds a new child may take to import mdrag and say it is ready
_GRACE = 2.0  # the child ends itself this long after a file's time limit, should the parent be gone
_RECYCLE_MB = 512  # a child left holding more memory than this (after a big file) is replaced
# Run by the child's interpreter: argv[1] the parent's sys.path as JSON, argv[2] the socket's fd,
# argv[3] the memory cap in MB ("" for none), argv[4] the lowest log level the parent shows.
_BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from mdrag.parsers.worker import _child_main; "
    "_child_main(int(sys.argv[2]), float(sys.argv[3]) if sys.argv[3] else None, int(sys.argv[4]))"
)

# Replies from the child, first item of the tuple.
_OK = "ok"  # ("ok", Document, log records)
_FAILED = "failed"  # ("failed", message, log records): the parser's ParseError, message starts with the path
_CRASHED = "crashed"  # ("crashed", message, log records): ParserCrashError, an unexpected exception in the parser
_MEMORY = "memory"  # ("memory", None, log records): MemoryError while parsing or sending the result
_NO_PARSER = "no-parser"  # ("no-parser", reason, log records): the parser does not unpickle in the child


class ParseWorker:
    """One child process that parses files, with a time limit per file and a memory cap.

    The child starts on first use (or :meth:`start`) and serves every file
    until one times out or kills it; the next file then gets a fresh child.
    Calls are serialized: one file at a time, from any thread.
    """

    def __init__(self, max_mb: float | None = None) -> None:
        """``max_mb``: the most memory (address space, MB) a parse may add to the idle child; None: no cap."""
        if max_mb is not None and max_mb <= 0:
            raise ValueError(f"max_mb must be a positive number of megabytes or None, not {max_mb!r}")
        self.max_mb = max_mb  # shown in the out-of-memory reason, passed to each new child
        self._proc: subprocess.Popen[bytes] | None = None  # the child, None until started or after it is stopped
        self._conn: Connection | None = None  # the parent's end of the socket pair to the child
        self._ready = False  # the child has said it is ready (it imported mdrag and set its limits)
        self._unavailable: str | None = None  # why no child could be started: files are parsed in-process
        self._pickled: dict[int, tuple[Parser, bytes | None]] = {}  # id(parser) -> (parser, pickle or None)
        self._lock = threading.Lock()  # one file at a time: the protocol is request, reply
        self._closing = False  # close() was called: a parse it interrupts says so

    def __enter__(self) -> ParseWorker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The child's process id, or None while no child runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> None:
        """Start the child now rather than at the first file (it imports while the caller works on)."""
        with self._lock:
            self._closing = False
            if self._proc is None and self._unavailable is None:
                self._launch()  # the first parse waits for its hello

    def parse(self, path: str | os.PathLike[str], timeout: float) -> Document:
        """Parse ``path`` in the child; give up ``timeout`` seconds after the child got it.

        Raises UnsupportedFormatError when no parser handles the extension, and
        ParseError whose message starts with the absolute path and gives the
        reason: the parser's own error, the time limit, the memory cap, or the
        child's death.
        """
        if timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        abspath = os.path.abspath(os.fspath(path))
        parser = get_parser(abspath)
        with self._lock:
            self._closing = False
            blob = self._pickle(parser)
            reply = self._request(blob, abspath, timeout) if blob is not None else None
            if reply is None:  # no child can be started here
                return parse_file(abspath, parser=parser)
            kind, value = reply
            if kind == _NO_PARSER:
                self._pickled[id(parser)] = (parser, None)
                logger.debug("parser %r runs in this process, with no time limit: %s", parser, value)
                return parse_file(abspath, parser=parser)
        if kind == _OK:
            parsed: Document = value  # what the child's parse_file returned
            return parsed
        raise ParserCrashError(value) if kind == _CRASHED else ParseError(value)

    def close(self) -> None:
        """Stop the child (it holds no state: it is killed). A later parse starts a fresh one.

        May be called from another thread while a file is parsed: that parse
        then fails with a ParseError saying so.
        """
        self._closing = True
        self._stop()

    def _pickle(self, parser: Parser) -> bytes | None:
        """The parser pickled for the child, or None when it must run in this process."""
        known = self._pickled.get(id(parser))
        if known is not None and known[0] is parser:
            return known[1]
        try:
            blob: bytes | None = pickle.dumps(parser)
        except Exception as exc:
            blob = None
            logger.debug("parser %r does not pickle (%s): its files are parsed in this process, with no time limit",
                         parser, exc)  # fmt: skip
        self._pickled[id(parser)] = (parser, blob)
        return blob

    def _request(self, blob: bytes, abspath: str, timeout: float) -> tuple[str, Any] | None:
        """Send one file to a ready child and wait for its reply, at most ``timeout`` seconds.

        None when no child can be started: the caller parses in its own process.
        """
        for attempt in (1, 2):
            conn = self._connection()
            if conn is None:
                return None
            proc = self._proc
            assert proc is not None
            try:
                conn.send((blob, abspath, timeout))
                break
            except OSError:  # it died since the last file: a fresh child gets this one
                self._stop()
                if attempt == 2:
                    return _FAILED, f"{abspath}: {self._failure(proc, True, 0.0, timeout)}"
        assert conn is not None and proc is not None  # the loop returned or broke with both set
        started = time.monotonic()
        reply: tuple[str, Any, list[logging.LogRecord]] | None = None
        answered = False  # the child sent something or closed the socket before the time limit
        try:
            answered = conn.poll(timeout)
            reply = conn.recv() if answered else None
        except (EOFError, OSError):
            pass
        if reply is None:
            self._stop()  # a child that died is reaped; one still parsing is killed
            return _FAILED, f"{abspath}: {self._failure(proc, answered, time.monotonic() - started, timeout)}"
        kind, value, records = reply
        for record in records:
            target = logging.getLogger(record.name)
            if target.isEnabledFor(record.levelno):
                target.handle(record)
        if kind == _MEMORY:
            self._stop()  # a child that hit MemoryError may be in a bad state: start afresh
            cap = f"over {self.max_mb:g} MB; " if self.max_mb is not None else ""
            return _FAILED, f"{abspath}: the parser ran out of memory ({cap}setting index.max_parse_mb)"
        rss = _resident_mb(proc.pid)
        if rss > _RECYCLE_MB:  # Python seldom gives a big file's memory back to the system: a new child will
            logger.debug("parse worker %d holds %d MB after %s: replacing it", proc.pid, rss, abspath)
            self._stop()
        return kind, value

    def _failure(self, proc: subprocess.Popen[bytes], answered: bool, elapsed: float, timeout: float) -> str:
        """Why the child gave no reply: the time limit, close(), or how the child died."""
        code = proc.returncode
        if self._closing or code is None:  # close() from another thread killed it
            return "the parse worker was closed while it parsed this file"
        if not answered or elapsed >= timeout:
            return f"parsing took longer than {timeout:g} s (setting index.parse_timeout): skipped"
        if code == -signal.SIGKILL:
            return ("the parser process was killed (SIGKILL), most likely by the system's out-of-memory killer; "
                    "setting index.max_parse_mb caps the memory of one parse")  # fmt: skip
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the parser process died of {name} (a crash in the parser or a library it uses)"
        return f"the parser process exited with code {code} while parsing"

    def _connection(self) -> Connection | None:
        """The connection to a live, ready child (started if needed); None when none can be started."""
        if self._proc is not None and self._proc.poll() is not None:
            logger.debug("parse worker %d had exited (code %s): starting a new one", self._proc.pid,
                         self._proc.returncode)  # fmt: skip
            self._stop()
        for attempt in (1, 2):  # a child that dies while it starts gets a second try
            if self._unavailable is not None:
                return None
            if self._proc is None:
                self._launch()
            if self._ready or (self._conn is not None and self._await_ready(last_try=attempt == 2)):
                return self._conn
        return None

    def _launch(self) -> None:
        """Start a child; it imports mdrag, sets its limits and then says it is ready."""
        parent_sock, child_sock = socket.socketpair()
        level = logging.getLogger().getEffectiveLevel()
        max_mb = "" if self.max_mb is None else repr(float(self.max_mb))
        args = [sys.executable, "-c", _BOOT, json.dumps(sys.path), str(child_sock.fileno()), max_mb, str(level)]
        try:
            with child_sock:
                self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, pass_fds=[child_sock.fileno()])
        except (OSError, ValueError) as exc:
            parent_sock.close()
            self._give_up(f"cannot start the parse worker process ({sys.executable or 'no Python executable'}): {exc}")
            return
        self._conn = Connection(parent_sock.detach())
        self._ready = False

    def _await_ready(self, last_try: bool) -> bool:
        """Wait for the new child's hello; on the last try, give up on child processes when none comes."""
        proc, conn = self._proc, self._conn
        assert proc is not None and conn is not None
        answered = False  # it said something, or closed the socket, in time
        try:
            answered = conn.poll(_START_TIMEOUT)
            self._ready = answered and conn.recv() == ("ready", proc.pid)
        except (EOFError, OSError):
            self._ready = False
        if not self._ready:
            self._stop()  # reaped: returncode says how it ended
            why = f"it exited with code {proc.returncode}" if answered else f"it was not ready in {_START_TIMEOUT:g} s"
            reason = f"the parse worker process did not start ({why}; its error output is above)"
            if last_try:
                self._give_up(reason)
            else:
                logger.warning("%s: trying once more", reason)
        return self._ready

    def _give_up(self, reason: str) -> None:
        """Parse every later file in this process: child processes cannot be started here."""
        self._unavailable = reason
        logger.warning("%s: files are parsed in this process, with no time limit or memory cap", reason)

    def _stop(self) -> None:
        """Kill the child, if any, and forget it."""
        proc, conn = self._proc, self._conn
        self._proc, self._conn, self._ready = None, None, False
        if proc is not None:
            proc.kill()
            proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()
        if conn is not None:
            conn.close()


def _resident_mb(pid: int) -> int:
    """Process ``pid``'s resident memory in MB; 0 where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (OSError, ValueError, IndexError):
        return 0


# --- the child ---------------------------------------------------------------


class _Records(logging.Handler):
    """Collects the child's log records, made picklable, for the parent to emit."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []  # since the last reply

    def emit(self, record: logging.LogRecord) -> None:
        try:
            record.msg = record.getMessage()
            record.args = None
            if record.exc_info:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
                record.exc_info = None
            self.records.append(record)
        except Exception:
            self.handleError(record)

    def take(self) -> list[logging.LogRecord]:
        """The records since the last call."""
        taken, self.records = self.records, []
        return taken


def _exit_when_parent_dies() -> None:
    """Block on stdin, a pipe only the parent holds: it ends when the parent exits or dies."""
    while os.read(0, 4096):
        pass
    os._exit(0)


def _limit_memory(max_mb: float | None) -> None:
    """Cap the address space at its current size plus ``max_mb``, where the platform allows."""
    if max_mb is None:
        return
    try:
        import resource
    except ImportError:  # Windows
        logger.debug("no resource module: the parse worker's memory is not capped")
        return
    try:
        with open("/proc/self/statm") as f:
            current = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):  # no /proc (macOS): the cap is max_mb in all
        current = 0
    limit = current + int(max_mb * 2**20)
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    except (ValueError, OSError) as exc:
        logger.debug("cannot cap the parse worker's memory: %s", exc)


def _is_memory_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a MemoryError or was caused by one (parse_file wraps them in ParseError)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, MemoryError):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _serve_one(parsers: dict[bytes, Parser], blob: bytes, abspath: str) -> tuple[str, Any]:
    """Parse one file: the reply's kind and value."""
    parser = parsers.get(blob)
    if parser is None:
        try:
            parser = parsers[blob] = pickle.loads(blob)
        except Exception as exc:
            return _NO_PARSER, f"it cannot be loaded in the parse worker process ({type(exc).__name__}: {exc})"
    try:
        return _OK, parse_file(abspath, parser=parser)
    except MemoryError:
        return _MEMORY, None
    except ParseError as exc:
        if _is_memory_error(exc):
            return _MEMORY, None
        return (_CRASHED if isinstance(exc, ParserCrashError) else _FAILED), str(exc)


def _child_main(fd: int, max_mb: float | None, log_level: int) -> None:
    """The child's loop: receive (parser, path, timeout), reply with a Document or a reason."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    conn = Connection(fd)
    threading.Thread(target=_exit_when_parent_dies, name="mdrag-parent-watch", daemon=True).start()
    handler = _Records()
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel(log_level)
    _limit_memory(max_mb)
    try:
        conn.send(("ready", os.getpid()))
    except OSError:  # the parent is gone already (a server stopped as it started): end quietly
        return
    parsers: dict[bytes, Parser] = {}  # pickled parser -> parser: each is unpickled (imported) once
    while True:
        try:
            blob, abspath, timeout = conn.recv()
        except (EOFError, OSError):  # the parent closed its end, or is gone
            return
        # Should the parent be gone and the parser hold the GIL, the kernel still ends the child.
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # in case a parser installed a handler
        signal.setitimer(signal.ITIMER_REAL, timeout + _GRACE)
        kind, value = _serve_one(parsers, blob, abspath)
        try:
            _reply(conn, abspath, (kind, value, handler.take()))
        except OSError:  # the parent is gone
            return
        signal.setitimer(signal.ITIMER_REAL, 0)


def _reply(conn: Connection, abspath: str, reply: tuple[str, Any, list[logging.LogRecord]]) -> None:
    """Send ``reply``, or the reason it cannot be sent; raises OSError when the parent is gone."""
    try:
        conn.send(reply)
    except MemoryError:
        del reply
        conn.send((_MEMORY, None, []))
    except OSError:
        raise
    except Exception as exc:  # a Document that does not pickle (a third-party parser's metadata)
        conn.send((_FAILED, f"{abspath}: the parsed document cannot be sent back: {type(exc).__name__}: {exc}", []))
