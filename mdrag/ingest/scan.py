"""Which files of the indexed folders are indexed: selection, limits, and what was left out why.

``scan`` walks each folder once and sorts what it finds:

- indexed: a supported extension, not hidden, not in ``node_modules`` or
  ``__pycache__``, not ignored by a ``.gitignore`` inside the folder (with
  ``gitignore``), matching ``include`` when it is set and not ``exclude``
  (gitignore-style patterns relative to the folder, as pathspec reads them);
- skipped, with a reason: larger than ``max_file_bytes``, a symbolic link
  whose target lies outside the folder (never followed: an index holds only
  what is under its folders), or not a regular file (a FIFO, a socket, a
  device: never opened, as opening a FIFO waits for a writer);
- counted: unsupported extensions (listed in the log at info level),
  excluded files, symbolic links to folders (not followed);
- a folder that is missing, empty, or holds subfolders that cannot be listed
  is reported, and the indexer keeps what it had indexed there.
"""

from __future__ import annotations

import logging
import os
import stat
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mdrag.parsers import supported_extensions

if TYPE_CHECKING:  # imported when a folder has a .gitignore, or patterns are set
    from pathspec import GitIgnoreSpec

__all__ = ["ScanOptions", "ScanResult", "not_a_folder", "scan"]

log = logging.getLogger(__name__)

_SKIP_DIRS = {"node_modules", "__pycache__"}

# What a file that is not a regular file is, by its stat mode.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


@dataclass(frozen=True)
class ScanOptions:
    """What ``scan`` selects (settings ``index.include``, ``.exclude``, ``.gitignore``, ``.max_file_mb``)."""

    include: tuple[str, ...] = ()  # gitignore-style patterns: when set, only matching files are indexed
    exclude: tuple[str, ...] = ()  # gitignore-style patterns: matching files and folders are left out
    gitignore: bool = True  # honour .gitignore files inside the indexed folders
    max_file_bytes: int | None = None  # larger files are skipped with a reason


@dataclass
class ScanResult:
    """What one scan found; paths are absolute."""

    files: dict[str, tuple[str, str, int, int]] = field(default_factory=dict)  # path -> (root, rel, mtime_ns, size)
    skipped: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (root, reason)
    missing: list[str] = field(default_factory=list)  # roots that do not exist (or are not folders)
    empty: list[str] = field(default_factory=list)  # roots with no supported file
    unreadable: list[str] = field(default_factory=list)  # folders that could not be listed
    unsupported: Counter[str] = field(default_factory=Counter)  # extension -> files with no parser
    excluded: int = 0  # files left out by .gitignore, include or exclude
    warnings: list[str] = field(default_factory=list)

    def complete(self, root: str) -> bool:
        """Whether ``root`` was listed whole: only then may files missing under it count as deleted."""
        return root not in self.missing and root not in self.empty and not self.unreadable_under(root)

    def unreadable_under(self, root: str) -> list[str]:
        return [d for d in self.unreadable if d == root or d.startswith(root.rstrip("/") + "/")]

    def kept(self, path: str) -> bool:
        """Whether ``path`` lies in a folder that could not be listed (so its absence says nothing)."""
        return any(path.startswith(d.rstrip("/") + "/") for d in self.unreadable)

    def warn(self, msg: str) -> None:
        log.warning("%s", msg)
        self.warnings.append(msg)


class _Ignore:
    """The .gitignore files met on the way down, deepest last; git's rule: the deepest match decides."""

    def __init__(self) -> None:
        self.specs: list[tuple[str, GitIgnoreSpec]] = []  # (folder relative to the root, "" or "a/b/", spec)

    def load(self, folder: Path, rel: str) -> None:
        path = folder / ".gitignore"
        if not path.is_file():  # a FIFO would block the read
            return
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return
        import pathspec

        self.specs.append((rel, pathspec.GitIgnoreSpec.from_lines(lines)))

    def drop_below(self, rel: str) -> None:
        """Forget the specs of folders the walk has left (``rel`` is the folder now listed)."""
        self.specs = [(d, s) for d, s in self.specs if rel.startswith(d)]

    def ignored(self, rel: str) -> bool:
        for base, spec in reversed(self.specs):
            if rel.startswith(base):
                result = spec.check_file(rel[len(base) :])
                if result.include is not None:
                    return bool(result.include)
        return False


def _spec(patterns: Sequence[str]) -> GitIgnoreSpec | None:
    if not patterns:
        return None
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(list(patterns))


def not_a_folder(path: str | Path) -> str | None:
    """Why ``path`` cannot be indexed, as the start of a sentence, or None when it is a folder: it does
    not exist, or it is a file (mdrag indexes folders: the sentence names the file's folder to give)."""
    p = Path(path).expanduser()
    if p.is_dir():
        return None
    if p.is_file():
        return (
            f"{path} is a file, not a folder (mdrag indexes folders: give its folder, {p.resolve().parent}; "
            "`index.include` can limit that to some of its files)"
        )
    return f"{path} is not a folder" if p.exists() or p.is_symlink() else f"folder {path} does not exist"


def scan(folders: Sequence[str | Path], options: ScanOptions | None = None) -> ScanResult:
    """Walk ``folders`` (resolved, in order) and sort what is there; a file under two belongs to the first."""
    opts = options or ScanOptions()
    exts = tuple(supported_extensions())
    include, exclude = _spec(opts.include), _spec(opts.exclude)
    out = ScanResult()
    for folder in folders:
        root = str(Path(folder).expanduser().resolve())
        why = not_a_folder(folder)
        if why is not None:
            out.missing.append(root)
            out.warn(f"{why}: skipped")
            continue
        before = len(out.files)
        ignore = _Ignore()

        def unreadable(e: OSError, root: str = root) -> None:
            where = e.filename or root
            out.unreadable.append(str(where))
            out.warn(f"cannot read folder {where} ({e.strerror or e}): what was indexed there is kept")

        for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
            rel_dir = os.path.relpath(dirpath, root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
            if opts.gitignore:
                ignore.drop_below(rel_dir)
                if ".gitignore" in filenames:
                    ignore.load(Path(dirpath), rel_dir)
            keep = []
            for d in sorted(dirnames):
                rel = f"{rel_dir}{d}/"
                if d.startswith(".") or d in _SKIP_DIRS:
                    continue
                if os.path.islink(os.path.join(dirpath, d)):
                    log.info("not followed: %s is a symbolic link to a folder", os.path.join(dirpath, d))
                    continue
                if (exclude is not None and exclude.match_file(rel)) or (opts.gitignore and ignore.ignored(rel)):
                    continue
                keep.append(d)
            dirnames[:] = keep
            for name in sorted(filenames):
                if name.startswith("."):
                    continue
                path = os.path.join(dirpath, name)
                rel = rel_dir + name
                if not name.lower().endswith(exts):
                    out.unsupported[Path(name).suffix.lower() or "no extension"] += 1
                    log.info("not indexed (no parser for its extension): %s", path)
                    continue
                if (
                    (include is not None and not include.match_file(rel))
                    or (exclude is not None and exclude.match_file(rel))
                    or (opts.gitignore and ignore.ignored(rel))
                ):
                    out.excluded += 1
                    continue
                if path in out.files or path in out.skipped:
                    continue
                reason = _unsafe_link(path, root)
                try:
                    st = os.stat(path)
                except OSError as e:
                    out.skipped[path] = (root, reason or f"cannot read: {e.strerror or e}")
                    continue
                if not reason and not stat.S_ISREG(st.st_mode):
                    reason = f"not a regular file ({_kind(st.st_mode)})"
                if not reason and opts.max_file_bytes is not None and st.st_size > opts.max_file_bytes:
                    reason = (
                        f"{st.st_size / 2**20:.3g} MB, over the {opts.max_file_bytes / 2**20:.3g} MB limit "
                        "(setting index.max_file_mb)"
                    )
                if reason:
                    out.skipped[path] = (root, reason)
                    continue
                out.files[path] = (root, rel, st.st_mtime_ns, st.st_size)
        if len(out.files) == before and not any(r == root for r, _ in out.skipped.values()):
            out.empty.append(root)
            out.warn(f"folder {folder} has no supported files ({', '.join(exts)})")
    return out


def _kind(mode: int) -> str:
    """What a file that is not a regular file is: "a FIFO", "a socket", ..."""
    return next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")


def _unsafe_link(path: str, root: str) -> str | None:
    """A reason to skip ``path`` when it is a symbolic link leading outside ``root``."""
    if not os.path.islink(path):
        return None
    target = os.path.realpath(path)
    if target == root or target.startswith(root.rstrip("/") + "/"):
        return None
    return f"symbolic link to {target}, outside the indexed folder: not followed"
