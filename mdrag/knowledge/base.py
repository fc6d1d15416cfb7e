"""The knowledge base front ends use: the cached config, docset lookup, instructions, and loading web sources.

``KnowledgeBase`` finds the project's config (from the working folder upward, never a global file), caches it
until the file changes, resolves docset names and fills in the instruction template. ``init_docset``,
``refresh`` and ``status`` load a docset's git sources through :class:`GitRepoLoader` and report on them.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mdrag.errors import DocsetError
from mdrag.knowledge.config import allowed_folders, confine, find_config, load_knowledge_config
from mdrag.knowledge.files import unsearchable
from mdrag.knowledge.git import GitRepoLoader
from mdrag.knowledge.metadata import ensure_gitignore, read_failures, read_metadata, record_failure
from mdrag.knowledge.model import CONTROL, DOCSET_NAME, Docset, KnowledgeConfig, Progress, SourceResult
from mdrag.knowledge.web_source import WebsiteLoader
from mdrag.redact import redact_url

__all__ = ["DEFAULT_TEMPLATE", "MAX_KEYWORDS", "KnowledgeBase", "init_docset", "refresh", "status"]

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = (
    "Search for '{keywords}' in folder {local_path}. Use your normal text search tools to do this. "
    "If the search results don't help you, try to find '{generalized_keywords}'. "
    "If this still doesn't help, ask the user to rephrase it."
)
MAX_KEYWORDS = 20  # per array
MAX_KEYWORD_CHARS = 200
_VARIABLES = re.compile(r"\{(keywords|generalized_keywords|local_path|docset|version)\}")


class KnowledgeBase:
    """Cached config: reloaded when the file's (mtime_ns, ctime_ns, size, inode) changes.

    One ``os.stat`` per call decides, so a change is seen on the next call. If
    the changed file is invalid, every call raises its error (the stale config
    is not served) until it is fixed.
    ``allowed_outside``: folders outside the project that docsets may be read
    from, as :func:`load_knowledge_config` takes them (front ends pass the user's
    ``knowledge.allowed_paths``).
    """

    def __init__(
        self, start: Path | None = None, path: Path | None = None, allowed_outside: Iterable[str | Path] = ()
    ) -> None:
        self._start = Path(start) if start is not None else Path.cwd()  # where discovery begins
        self._path = Path(path) if path is not None else None  # an explicit config file: no discovery
        self._allowed = allowed_folders(allowed_outside)
        self._found: Path | None = None  # the discovered config file
        self._key: tuple[Any, ...] | None = None  # stat identity of the file behind _config / _error
        self._config: KnowledgeConfig | None = None  # valid for _key
        self._error: str | None = None  # the load error for _key, raised again without re-reading
        self._keys: dict[str, Docset] = {}  # lower-cased id and aliases -> docset
        self._names: dict[str, list[Docset]] = {}  # lower-cased display names -> docsets

    def config(self) -> KnowledgeConfig:
        path = self._path or self._found or find_config(self._start)
        try:
            st = os.stat(path)
        except OSError as e:
            if self._path is None and self._found is not None:  # moved or deleted: search again
                self._found = None
                return self.config()
            raise DocsetError(f"cannot read {path}: {e.strerror} (file access error); check that it exists") from e
        if self._path is None:
            self._found = path
        key = (str(path), st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        if key == self._key:
            if self._error is not None:
                raise DocsetError(self._error)
            assert self._config is not None
            return self._config
        self._key = key
        try:
            cfg = load_knowledge_config(path, self._allowed)
        except DocsetError as e:
            self._config, self._error = None, str(e)
            raise
        self._config, self._error = cfg, None
        self._keys = {k.lower(): d for d in cfg.docsets for k in (d.id, *d.aliases)}
        self._names = {}
        for d in cfg.docsets:
            self._names.setdefault(d.name.lower(), []).append(d)
        log.debug("loaded %s: %d docsets", path, len(cfg.docsets))
        return cfg

    def list_docsets(self) -> list[dict[str, Any]]:
        return [d.to_dict() for d in self.config().docsets]

    def resolve(self, name: str) -> Docset:
        """A docset by id, alias or display name, case-insensitively; its folder is checked to be in the project."""
        cfg = self.config()
        d = self._find(cfg, name)
        confine(d, cfg)
        return d

    def _find(self, cfg: KnowledgeConfig, name: str) -> Docset:
        if not isinstance(name, str):
            raise DocsetError(f"docset must be a string, got {type(name).__name__}; call list_docsets for names")
        key = name.strip().lower()
        if key in self._keys:
            return self._keys[key]
        named = self._names.get(key, [])
        if len(named) == 1:
            return named[0]
        if named:
            ids = ", ".join(d.id for d in named)
            raise DocsetError(f"docset name {name!r} matches several docsets ({ids}); use one of these ids")
        shown = name if len(name) <= 80 else name[:77] + "..."
        if not DOCSET_NAME.match(name.strip()):
            raise DocsetError(
                f"invalid docset name {shown!r}: use 1-64 letters, digits, '.', '_' or '-', "
                f"starting with a letter or digit; {_available(cfg)}"
            )
        raise DocsetError(f"unknown docset {shown!r}; {_available(cfg)}")

    def instructions(self, docset: str, keywords: list[str] | str, generalized_keywords: list[str] | str) -> str:
        """Navigation instructions for an AI assistant: the docset's template with the variables filled in."""
        d = self.resolve(docset)
        words = _check_keywords(keywords, "keywords")
        general = _check_keywords(generalized_keywords, "generalized_keywords")
        cfg = self._config or self.config()
        template = d.template or cfg.template or DEFAULT_TEMPLATE
        values = {
            "keywords": ", ".join(words),
            "generalized_keywords": ", ".join(general),
            "local_path": d.local_path,
            "docset": d.id,
            "version": d.version or "",
        }
        return _VARIABLES.sub(lambda m: values[m.group(1)], template)


def _available(cfg: KnowledgeConfig) -> str:
    if not cfg.docsets:
        return f"no docsets are configured; add them to the `docsets` section of {cfg.path}"
    names = [d.id + (f" (aliases: {', '.join(d.aliases)})" if d.aliases else "") for d in cfg.docsets]
    return "available docsets: " + ", ".join(names)


def _check_keywords(value: Any, field_name: str) -> list[str]:
    example = f'e.g. {field_name}: ["useState", "state hook"]'
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise DocsetError(f"{field_name} must be a list of strings, {example}")
    if not value:
        raise DocsetError(f"{field_name} must not be empty: give at least one search term, {example}")
    if len(value) > MAX_KEYWORDS:
        raise DocsetError(f"too many {field_name} ({len(value)}); give at most {MAX_KEYWORDS}, the most specific first")
    out = []
    for i, word in enumerate(value):
        if not isinstance(word, str) or not word.strip():
            raise DocsetError(f"{field_name}[{i}] must be a non-empty string; remove it or give a search term")
        word = word.strip()
        if len(word) > MAX_KEYWORD_CHARS:
            raise DocsetError(f"{field_name}[{i}] is longer than {MAX_KEYWORD_CHARS} characters; shorten it")
        if CONTROL.search(word):
            raise DocsetError(f"{field_name}[{i}] contains control characters (such as newlines); remove them")
        out.append(word)
    return out


def init_docset(kb: KnowledgeBase, docset: str, progress: Progress | None = None) -> list[SourceResult]:
    """Load every web source of one docset; a failing source gets ok=False and does not stop the others."""
    cfg = kb.config()
    d = kb.resolve(docset)
    if not d.web_sources:
        raise DocsetError(
            f"docset {d.id!r} has no web_sources, so there is nothing to load; its files are read from {d.local_path}"
        )
    return _load_docset(cfg, d, progress)


def refresh(
    kb: KnowledgeBase, docset: str | None = None, progress: Progress | None = None
) -> dict[str, list[SourceResult]]:
    """Reload the web sources of one docset, or of every docset that has some (``docset=None``)."""
    if docset is not None:
        d = kb.resolve(docset)
        return {d.id: init_docset(kb, d.id, progress)}
    cfg = kb.config()
    return {d.id: _load_docset(cfg, d, progress) for d in cfg.docsets if d.web_sources}


def status(kb: KnowledgeBase) -> list[dict[str, Any]]:
    """One row per web source: id, url, branch, local_path, last_fetched, content_hash, files (a count), commit,
    unsearchable (of its files, those no parser reads: extension -> count), and ``last_error`` with ``failed_at``
    when its last load failed (both None when it loaded last time, or was never tried), ``skipped`` (a website's
    pages its last crawl did not keep: URL -> why); and one per docset
    with no web sources (url None: its folder is filled by hand), whose ``folder_exists`` says whether its
    folder is there."""
    cfg = kb.config()
    failures = read_failures(cfg.root)
    rows = []
    for d in cfg.docsets:
        if not d.web_sources:
            rows.append(_local_row(d))
            continue
        meta = read_metadata(Path(d.local_path))
        for s in d.web_sources:
            e = meta.get(s.url, {})
            failed = failures.get(d.id, {}).get(s.url, {})
            listed = e.get("files", [])
            row: dict[str, Any] = {"id": d.id, "url": redact_url(s.url), "branch": s.branch, "local_path": d.local_path}
            row.update(last_fetched=e.get("last_fetched"), content_hash=e.get("content_hash"))
            row.update(files=len(listed), commit=e.get("commit"), unsearchable=unsearchable(listed))
            row.update(last_error=failed.get("error"), failed_at=failed.get("failed_at"))
            row.update(skipped=e.get("skipped", {}))  # a website's pages its last crawl did not keep, with why
            rows.append({**row, "folder_exists": Path(d.local_path).is_dir()})
    return rows


def _local_row(d: Docset) -> dict[str, Any]:
    """:func:`status`'s row for a docset with no web sources: its folder, filled by hand, and the files there
    (those no parser reads among them, as for a web source); the web source's fields are None."""
    from mdrag.ingest.scan import scan

    folder = Path(d.local_path)
    found = scan([folder]) if folder.is_dir() else None
    kinds = dict(found.unsupported.most_common()) if found is not None else {}
    row: dict[str, Any] = {"id": d.id, "url": None, "branch": None, "local_path": d.local_path}
    row.update(last_fetched=None, content_hash=None, files=len(found.files) + sum(kinds.values()) if found else 0)
    row.update(commit=None, unsearchable=kinds, last_error=None, failed_at=None, skipped={})
    row.update(folder_exists=found is not None)
    return row


def _load_docset(cfg: KnowledgeConfig, d: Docset, progress: Progress | None) -> list[SourceResult]:
    confine(d, cfg)
    ensure_gitignore(cfg.root)
    loader = GitRepoLoader()
    results = []
    for i, source in enumerate(d.web_sources, 1):
        shown = redact_url(source.url)
        if progress is not None:  # one line a source (git's own progress goes to the log, at debug level)
            branch = f" (branch {source.branch})" if source.branch else ""
            verb = "crawling" if source.type == "website" else "cloning"
            progress(f"{d.id}: source {i}/{len(d.web_sources)}: {verb} {shown}{branch}")
        # The result says what failed, or needs attention, to the front end, which shows it: the log has details.
        try:
            if source.type == "website":
                result = WebsiteLoader().load(source, Path(d.local_path), cfg.allow_local_web)
            else:
                result = loader.load(source, Path(d.local_path), cfg.allow_local_git, base=cfg.root)
        except DocsetError as e:
            log.info("%s: source %s failed: %s", d.id, shown, e)
            result = SourceResult(url=shown, ok=False, error=str(e))
        except OSError as e:
            log.info("%s: source %s failed", d.id, shown, exc_info=True)
            result = SourceResult(url=shown, ok=False, error=f"storage error: {e}; check free space and permissions")
        except Exception as e:  # a bug must not stop the other sources; the traceback goes to the log
            log.exception("%s: source %s failed", d.id, shown)
            result = SourceResult(url=shown, ok=False, error=f"unexpected error: {e}")
        if result.warning:
            log.info("%s: %s: %s", d.id, shown, result.warning)
        try:
            record_failure(cfg.root, d.id, source.url, result.error)  # for `status`; None: it loaded
        except OSError as e:
            log.warning("%s: could not record how loading %s went, for `status`: %s", d.id, shown, e)
        results.append(result)
    return results
