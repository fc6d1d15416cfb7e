"""What a docset folder records about its loaded sources (``.agentic-metadata.json``), the last failure of
each source (``.knowledge/docsets/.agentic-failures.json``), and ``.knowledge/.gitignore``.

A metadata or failures file that cannot be read or does not match the expected shape is logged and treated as
empty; it is written again, atomically, on the next load.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from mdrag.fileio import write_atomic
from mdrag.knowledge.model import DRIVE
from mdrag.pageurls import METADATA_FILE  # defined where the page URLs are read back, which is light

__all__ = [
    "FAILURES_FILE",
    "METADATA_FILE",
    "ensure_gitignore",
    "read_failures",
    "read_metadata",
    "record_failure",
    "write_metadata",
]

log = logging.getLogger(__name__)

#: In ``.knowledge/docsets/`` (ignored by git, as ``ensure_gitignore`` writes): a source that never loaded has
#: no docset folder to record its failure in.
FAILURES_FILE = ".agentic-failures.json"


_MISSING = object()  # what _read_json gives for a file that is missing or unreadable


def _read_json(path: Path, what: str) -> Any:
    """The JSON in ``path``; ``_MISSING`` when there is none, or it cannot be read (logged: ``what`` it is)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return _MISSING
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable %s %s (%s); it is rewritten on the next load", what, path, e)
        return _MISSING


def read_metadata(folder: Path) -> dict[str, dict[str, Any]]:
    """The per-source entries of ``folder/.agentic-metadata.json``; {} when missing, corrupt or invalid."""
    path = Path(folder) / METADATA_FILE
    data = _read_json(path, "metadata")
    if data is _MISSING:
        return {}
    problem = _metadata_problem(data)
    if problem:
        log.warning("ignoring invalid metadata %s (%s); it is rewritten on the next load", path, problem)
        return {}
    return dict(data["sources"])


def _metadata_problem(data: Any) -> str | None:
    if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("sources"), dict):
        return 'expected {"version": 1, "sources": {...}}'
    for url, e in data["sources"].items():
        if not isinstance(e, dict):
            return f"entry {url!r} is not an object"
        files, hashes = e.get("files"), e.setdefault("hashes", {})
        if not isinstance(files, list) or not all(_safe_rel(f) for f in files):
            return f"entry {url!r}: files must be a list of relative paths"
        if not isinstance(hashes, dict) or not all(isinstance(v, str) for v in hashes.values()):
            return f"entry {url!r}: hashes must map paths to sha256 strings"
        for key in ("last_fetched", "content_hash", "commit"):
            if not isinstance(e.get(key), (str, type(None))):
                return f"entry {url!r}: {key} must be a string"
    return None


def _safe_rel(p: Any) -> bool:
    if not isinstance(p, str) or not p or "\0" in p or "\\" in p:
        return False
    pure = PurePosixPath(p)
    return not pure.is_absolute() and ".." not in pure.parts and not DRIVE.match(p)


def write_metadata(folder: Path, sources: dict[str, dict[str, Any]]) -> None:
    text = json.dumps({"version": 1, "sources": sources}, indent=2, sort_keys=True) + "\n"
    write_atomic(folder / METADATA_FILE, text)


def ensure_gitignore(root: Path) -> None:
    """``.knowledge/.gitignore`` lists ``docsets/`` (loaded sources are not committed)."""
    path = root / ".gitignore"
    if path.is_symlink():
        log.warning("%s is a symbolic link, so it is not written through; add `docsets/` to it yourself", path)
        return
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if any(line.strip() in ("docsets/", "docsets", "/docsets/", "/docsets") for line in text.splitlines()):
        return
    if text and not text.endswith("\n"):
        text += "\n"
    path.write_text(text + "docsets/\n", encoding="utf-8")


def read_failures(root: Path) -> dict[str, dict[str, dict[str, str]]]:
    """The last failure of each source that failed since it last loaded: docset id -> source URL (as
    configured) -> {"error": what went wrong, "failed_at": when, ISO 8601}; {} when none, or unreadable."""
    path = Path(root) / "docsets" / FAILURES_FILE
    data = _read_json(path, "record of failures")
    if data is _MISSING:
        return {}
    failures = data.get("docsets") if isinstance(data, dict) and data.get("version") == 1 else None
    if not isinstance(failures, dict) or not all(map(_failures_of_docset, failures.values())):
        log.warning(
            'ignoring invalid %s (expected {"version": 1, "docsets": {...}}); it is rewritten on the next load', path
        )
        return {}
    return failures


def _failures_of_docset(by_url: Any) -> bool:
    """Whether ``by_url`` is one docset's entry of the failures file: URL -> {"error": ..., "failed_at": ...}."""
    return isinstance(by_url, dict) and all(
        isinstance(f, dict) and isinstance(f.get("error"), str) and isinstance(f.get("failed_at"), str)
        for f in by_url.values()
    )


def record_failure(root: Path, docset: str, url: str, error: str | None) -> None:
    """Record that loading ``url`` of ``docset`` failed with ``error`` just now; None: it loaded (its failure
    is forgotten). ``root``: the ``.knowledge`` folder."""
    failures = read_failures(root)
    by_url = failures.setdefault(docset, {})
    if error is None:
        if by_url.pop(url, None) is None:
            return  # nothing recorded: nothing to write
    else:
        by_url[url] = {"error": error, "failed_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    failures = {d: u for d, u in failures.items() if u}
    path = Path(root) / "docsets" / FAILURES_FILE
    if not path.parent.resolve().is_relative_to(Path(root).resolve()):
        log.warning("%s leads outside %s, so the last failure is not recorded there", path.parent, root)
        return
    if not failures:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"version": 1, "docsets": failures}, indent=2, sort_keys=True) + "\n")
