"""Parsers that misbehave, for the tests of mdrag.parsers.worker.

They live at module level in an importable module so that they pickle by
reference: the worker's child process imports this module to run them, as it
would a third-party parser found through an entry point.
"""

from __future__ import annotations

import logging
import os
import re
import signal
from pathlib import Path

from mdrag.types import Block, Document, Section

logger = logging.getLogger(__name__)


def _started(path: str) -> None:
    """Leave ``<path>.started`` so that a test knows the parse has begun."""
    Path(path + ".started").touch()


def plain(data: bytes, path: str) -> Document:
    """A well-behaved parser: the file's text in one section."""
    return Document(path=path, sections=[Section([], 0, [Block(data.decode())])], title="plain")


def buggy(data: bytes, path: str) -> Document:
    """A parser with a bug: a TypeError on every file."""
    return Document(path=path, sections=[Section([], 0, [Block(data.decode() + 1)])])  # type: ignore[operator]


def forever(data: bytes, path: str) -> Document:
    """Loops in Python for ever (the GIL is released now and then)."""
    _started(path)
    while True:
        pass


def forever_holding_gil(data: bytes, path: str) -> Document:
    """A regular expression that backtracks for ages: C code that never releases the GIL."""
    _started(path)
    re.match(r"(a+)+$", "a" * 64 + "b")
    raise AssertionError("the regular expression finished")


def hog(data: bytes, path: str) -> Document:
    """Allocates 64 MB after 64 MB; refuses to start with no address-space limit set."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft > 8 * 2**30:
        raise RuntimeError(f"refusing to allocate without bound under an address-space limit of {soft}")
    held = []
    while True:
        held.append(bytearray(64 * 2**20))


def die(data: bytes, path: str) -> Document:
    """Kills its own process with the signal named in the file (e.g. ``SIGKILL``)."""
    os.kill(os.getpid(), signal.Signals[data.decode().strip()])
    raise AssertionError("still alive after the signal")


def noisy(data: bytes, path: str) -> Document:
    """Logs a warning naming the file, then parses like :func:`plain`."""
    logger.warning("noisy parser read %d bytes from %s", len(data), path)
    return plain(data, path)


_kept: list[bytes] = []  # what keep() holds on to, for the life of the process


def keep(data: bytes, path: str) -> Document:
    """Holds on to as many MB as the file's text says (written, so resident), then parses like :func:`plain`."""
    _kept.append(b"x" * (int(data) * 2**20))
    return plain(data, path)
