"""Which files of a clone become part of a docset, and copying them into the docset folder.

:func:`select_files` is the one place that decides the selection: the ``paths`` a source lists, or the smart filter
(documentation files by extension, name and folder; no project metadata, build output or source folders, nothing
over 1 MB). :func:`sync` copies the selection into the docset folder, writing only new and changed files and
removing those the source no longer provides. Neither follows a symbolic link out of the clone or out of the docset
folder.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from mdrag.errors import DocsetError
from mdrag.fileio import file_sha256
from mdrag.knowledge.metadata import METADATA_FILE, read_metadata, write_metadata
from mdrag.knowledge.model import DRIVE, Selection, SourceResult, WebSource
from mdrag.parsers import supported_extensions
from mdrag.redact import redact_url

__all__ = [
    "DOC_DIRS",
    "DOC_EXTENSIONS",
    "EXCLUDED_DIRS",
    "EXCLUDED_PREFIXES",
    "select_files",
    "sync",
    "unsearchable",
    "unsearchable_text",
]

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 1024 * 1024  # the smart filter skips larger files

# The smart filter, for a source that lists no paths: documentation files (these extensions, README files,
# files in these folders), without project metadata or the folders below; names compared case-insensitively.
DOC_EXTENSIONS = frozenset({".md", ".mdx", ".rst", ".txt"})
DOC_DIRS = frozenset({"docs", "documentation", "guides", "examples", "tutorials"})
EXCLUDED_DIRS = frozenset({"node_modules", "vendor", ".git", "build", "dist", "target", ".cache", "src", "lib"})
EXCLUDED_PREFIXES = ("CHANGELOG", "LICENSE", "CONTRIBUTING", "AUTHORS", "CODE_OF_CONDUCT")


def select_files(repo_dir: Path, paths: Sequence[str] = ()) -> Selection:
    """Exactly ``paths`` (folders recursively), or the smart filter; nothing whose target is outside the clone.

    Entries of ``paths`` that are absolute, hold '..' or .git, lead out of the clone through a symbolic
    link, or are not in the clone raise one DocsetError that names them all. Symbolic links met inside
    folders are not followed; those that lead out of the clone (or into its .git) are listed in ``refused``.
    An empty selection is not an error: :func:`sync` says so in its result's warning.
    """
    repo_dir = Path(repo_dir)
    real = repo_dir.resolve()
    chosen: set[str] = set()
    refused: set[str] = set()
    problems: list[str] = []  # entries of paths refused, each with why
    missing: list[str] = []  # entries of paths not in the clone
    for raw in paths:
        try:
            rel = _repo_path(raw)
        except DocsetError as e:
            problems.append(str(e))
            continue
        target = repo_dir / rel
        if _in_clone(target, real) is None:
            problems.append(
                f"path {raw!r} is refused: a symbolic link leads it outside the repository (or round a "
                "loop); list the repository's own files or folders instead"
            )
        elif not target.exists():
            missing.append(raw)
        elif target.is_file():
            chosen.add(rel)
        else:
            chosen.update(_walk(repo_dir, real, target, False, refused))
    if missing:
        named = f"path {missing[0]!r}" if len(missing) == 1 else f"paths {', '.join(map(repr, missing))}"
        problems.append(f"{named} not found in the repository; {_top_level(repo_dir)}")
    if problems:
        raise DocsetError("; ".join(problems))
    if not paths:
        chosen.update(_walk(repo_dir, real, repo_dir, True, refused))
    chosen.discard(METADATA_FILE)  # the docset folder's own metadata file
    return Selection(sorted(chosen), sorted(refused))


def unsearchable(files: Iterable[str]) -> dict[str, int]:
    """Of ``files``, those no parser reads, so that a docset's index (the MCP ``search`` tool) never finds
    them: how many of each extension ("no extension" for a name without one), the most first."""
    exts = tuple(supported_extensions())
    kinds = Counter(PurePosixPath(f).suffix.lower() or "no extension" for f in files if not f.lower().endswith(exts))
    return dict(kinds.most_common())


def unsearchable_text(kinds: Mapping[str, int]) -> str:
    """``kinds`` (see :func:`unsearchable`) as the words of a warning."""
    n = sum(kinds.values())
    listed = ", ".join(f"{ext} {count}" for ext, count in kinds.items())
    return (
        f"{n} file{'s' if n != 1 else ''} with no parser ({listed}): copied, but the `search` tool cannot find "
        f"{'them' if n != 1 else 'it'} (`search_docs` points to the folder, where they are)"
    )


def _walk(repo_dir: Path, real: Path, top: Path, smart: bool, refused: set[str]) -> list[str]:
    """The files under ``top``; symbolic links are not followed, and those leading out go to ``refused``."""
    found = []
    for folder, dirs, files in os.walk(top):
        here = Path(folder)
        kept = []
        for d in dirs:
            if d == ".git" or (smart and d.lower() in EXCLUDED_DIRS):
                continue
            if (here / d).is_symlink():
                if _in_clone(here / d, real) is None:
                    refused.add((here / d).relative_to(repo_dir).as_posix())
                continue
            kept.append(d)
        dirs[:] = kept
        for name in files:
            p = here / name
            rel = p.relative_to(repo_dir).as_posix()
            if p.is_symlink():
                if _in_clone(p, real) is None:
                    refused.add(rel)
                continue
            if smart and not _is_doc_file(p, rel):
                continue
            found.append(rel)
    return found


def sync(
    source: WebSource,
    repo: Path,
    selection: Selection,
    dest: Path,
    commit: str | None,
) -> SourceResult:
    """Copy ``selection`` from the clone ``repo`` into ``dest`` and record it in the metadata there.

    Only new and changed files are written (unchanged ones keep their mtime); files this source created before
    and no longer selects are removed, unless another source of the docset provides them. The result's warning
    says what needs the user's attention: nothing selected, links refused, files no parser reads.
    """
    files = selection.files
    real = repo.resolve()
    sources: dict[str, Path] = {}  # copied by resolved path, and only from inside the clone
    for rel in files:
        src = _in_clone(repo / rel, real)
        if src is None:
            raise DocsetError(f"{rel!r} is refused: a symbolic link leads it outside the repository")
        sources[rel] = src
    meta = read_metadata(dest)
    prev = meta.get(source.url, {})
    prev_files = set(prev.get("files", []))
    prev_hashes: dict[str, str] = prev.get("hashes", {})
    others = {f: u for u, e in meta.items() if u != source.url for f in e.get("files", [])}
    hashes = {rel: file_sha256(src) for rel, src in sources.items()}
    stale = sorted(prev_files - set(files))
    added: list[str] = []
    changed: list[str] = []
    dest.mkdir(parents=True, exist_ok=True)
    _check_targets(dest, [*files, *stale])
    for rel in files:
        src, target = sources[rel], dest / rel
        same = rel in prev_files and prev_hashes.get(rel) == hashes[rel]
        if same and target.is_file() and not target.is_symlink() and target.stat().st_size == src.stat().st_size:
            continue  # unchanged: not rewritten, keeps its mtime
        _copy(src, target)
        (changed if rel in prev_files else added).append(rel)
    removed = []
    for rel in stale:
        removed.append(rel)
        if rel in others:
            continue  # another source of this docset provides it now
        target = dest / rel
        if target.is_file() or target.is_symlink():
            target.unlink()
            _prune_empty(target.parent, dest)
    digest = hashlib.sha256()
    for rel in files:
        digest.update(f"{rel}\0{hashes[rel]}\n".encode())
    content_hash = digest.hexdigest()
    meta[source.url] = {
        "last_fetched": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "content_hash": content_hash,
        "files": files,
        "hashes": hashes,
        "commit": commit,
        "branch": source.branch,
    }
    write_metadata(dest, meta)
    warnings = []
    if not files:
        warnings.append(_empty_warning(source.paths))
    if selection.refused:
        shown = ", ".join(selection.refused[:10]) + (", ..." if len(selection.refused) > 10 else "")
        warnings.append(
            f"refused {len(selection.refused)} symbolic links that lead outside the repository (not followed): " + shown
        )
    shared = sorted(set(files) & others.keys())
    if shared:
        warnings.append(f"{len(shared)} files (e.g. {shared[0]}) are also provided by another source; last one wins")
    kinds = unsearchable(files)
    if kinds:
        warnings.append(unsearchable_text(kinds))
    warning = "; ".join(warnings) or None
    return SourceResult(
        redact_url(source.url),
        True,
        files,
        added,
        changed,
        removed,
        content_hash,
        None,
        warning,
        selection.refused,
        kinds,
    )


def _is_doc_file(p: Path, rel: str) -> bool:
    """The smart filter for one file (its folders were filtered by the walk)."""
    name = p.name
    upper = name.upper()
    if upper.startswith(EXCLUDED_PREFIXES):
        return False
    in_doc_dir = any(part.lower() in DOC_DIRS for part in rel.split("/")[:-1])
    if not (p.suffix.lower() in DOC_EXTENSIONS or upper.startswith("README") or in_doc_dir):
        return False
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            return False
        with open(p, "rb") as f:
            return b"\0" not in f.read(8192)
    except OSError:
        return False


def _repo_path(raw: str) -> str:
    """An entry of ``paths`` as a repo-relative posix path ("" for the whole repository); refused ones raise."""
    rel = raw.strip().replace("\\", "/")
    if rel.startswith("/") or DRIVE.match(rel):
        example = re.sub(r"^(?:[A-Za-z]:)?/+", "", rel) or "docs/"
        raise DocsetError(
            f"path {raw!r} is absolute, so it is refused; write it relative to the repository root, e.g. {example!r}"
        )
    pure = PurePosixPath(rel)
    if ".." in pure.parts:
        raise DocsetError(f"path {raw!r} holds '..', so it is refused; write it from the repository root, e.g. docs/")
    if ".git" in pure.parts:
        raise DocsetError(f"path {raw!r} is inside .git, which is never copied; list the repository's own files")
    return "" if pure.as_posix() == "." else pure.as_posix()


def _in_clone(path: Path, real: Path) -> Path | None:
    """``path`` with every link resolved; None when that is outside the clone ``real`` (resolved) or in its .git."""
    try:
        target = path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a link loop (Python < 3.13)
        return None
    return None if not target.is_relative_to(real) or target.is_relative_to(real / ".git") else target


def _check_targets(dest: Path, rels: Sequence[str]) -> None:
    """Refuse to write or remove anything in ``dest`` through a symbolic link that leads out of it."""
    real = dest.resolve()
    for folder in sorted({(dest / rel).parent for rel in rels}):
        try:
            inside = folder.resolve().is_relative_to(real)
        except (OSError, RuntimeError):
            inside = False
        if not inside:
            raise DocsetError(
                f"{folder} is, or passes through, a symbolic link that leads outside the docset folder {dest}; "
                "nothing was written. Remove that link (the docset folder holds only copied files), then retry"
            )


def _empty_warning(paths: Sequence[str]) -> str:
    if paths:
        return "the configured paths hold no files; check `paths` in the config"
    return (
        "no documentation files found by the default filter; configure explicit `paths` (e.g. [docs/]) for this source"
    )


def _top_level(repo_dir: Path) -> str:
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in repo_dir.iterdir() if p.name != ".git")
    return "available top-level paths: " + (", ".join(entries) if entries else "(the repository is empty)")


def _copy(src: Path, target: Path) -> None:
    """Copy with metadata through a temp file, so readers never see half a file.

    The temp file is new (created exclusively, never an existing name or link), and the rename replaces a link
    at ``target`` instead of writing through it.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".mdrag-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out)
        shutil.copystat(src, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _prune_empty(folder: Path, stop: Path) -> None:
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
