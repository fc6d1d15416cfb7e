"""Files on disk, for every room: written atomically, and named by the sha256 of their bytes."""

from __future__ import annotations

import hashlib
import os
import tempfile
from functools import lru_cache
from pathlib import Path

__all__ = ["bytes_sha256", "file_sha256", "file_sha256_cached", "write_atomic"]


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically: a temp file beside it, fsync, rename.

    A crash leaves the old file or the new one, never half of one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def bytes_sha256(data: bytes) -> str:
    """The hex sha256 of a file's bytes already read: what the manifest records as the file's hash."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    """The hex sha256 of the file at ``path``, read in 1 MiB pieces (OSError when it cannot be read)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(1 << 20):
            digest.update(piece)
    return digest.hexdigest()


def file_sha256_cached(path: Path) -> str:
    """:func:`file_sha256`, read again only when the file's inode, size, mtime or ctime changed since this
    process last read it (a rewrite in place that sets the mtime back still changes the ctime)."""
    st = path.stat()
    return _sha256_of(str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@lru_cache(maxsize=256)
def _sha256_of(path: str, ino: int, size: int, mtime_ns: int, ctime_ns: int) -> str:
    return file_sha256(Path(path))
