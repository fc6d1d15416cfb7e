"""Docsets: the project's ``.knowledge/config.yaml``, instructions for AI assistants, and git web sources.

A docset is a named folder of documentation. ``KnowledgeBase`` finds the
project's config (from the working folder upward, never a global file), caches
it until the file changes, resolves docset names and fills in the instruction
template. ``GitRepoLoader`` is the one place that decides which files of a git
repository become part of a docset; ``init_docset``, ``refresh`` and
``status`` drive it and keep ``.agentic-metadata.json`` in each docset folder.

Nothing here prints or parses a command line: progress goes to a callback,
details to ``logging``, and every failure is a :class:`DocsetError` whose text
says what to do next.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml

from mdrag.config import home_dir
from mdrag.errors import DocsetError
from mdrag.manifest import write_atomic

__all__ = [
    "DEFAULT_TEMPLATE",
    "DOCSET_NAME",
    "MAX_KEYWORDS",
    "METADATA_FILE",
    "Docset",
    "GitRepoLoader",
    "KnowledgeBase",
    "KnowledgeConfig",
    "Selection",
    "SourceResult",
    "WebSource",
    "find_config",
    "init_docset",
    "load_config",
    "refresh",
    "status",
    "validate_git_url",
]

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

DEFAULT_TEMPLATE = (
    "Search for '{keywords}' in folder {local_path}. Use your normal text search tools to do this. "
    "If the search results don't help you, try to find '{generalized_keywords}'. "
    "If this still doesn't help, ask the user to rephrase it."
)
MAX_KEYWORDS = 20  # per array
MAX_KEYWORD_CHARS = 200
DOCSET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
METADATA_FILE = ".agentic-metadata.json"
MIN_FREE_BYTES = 100 * 1024 * 1024  # checked on the clone's and the docset's filesystems before cloning
GIT_TIMEOUT = 300.0  # seconds for one clone
MAX_FILE_BYTES = 1024 * 1024  # the smart filter skips larger files (REQ-18)

_CONFIG_NAMES = ("config.yaml", "config.yml")
_TOP_KEYS = {"docsets", "docs_root", "allow_local_git", "template"}
_DOCSET_KEYS = {"id", "name", "version", "aliases", "local_path", "template", "web_sources", "description"}
_ALLOWED_SETTING = "knowledge.allowed_paths"  # the user's mdrag setting that lets docsets out of their project
_SOURCE_KEYS = {"type", "url", "branch", "paths", "options"}
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")  # becomes part of a folder name
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)[^\s\x00-\x1f\x7f~^:?*\[\\]{1,255}$")
_VARIABLES = re.compile(r"\{(keywords|generalized_keywords|local_path|docset|version)\}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# Smart content filter (REQ-18): names are compared case-insensitively.
DOC_EXTENSIONS = frozenset({".md", ".mdx", ".rst", ".txt"})
DOC_DIRS = frozenset({"docs", "documentation", "guides", "examples", "tutorials"})
EXCLUDED_DIRS = frozenset({"node_modules", "vendor", ".git", "build", "dist", "target", ".cache", "src", "lib"})
EXCLUDED_PREFIXES = ("CHANGELOG", "LICENSE", "CONTRIBUTING", "AUTHORS", "CODE_OF_CONDUCT")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class WebSource:
    """One ``web_sources`` entry of a docset."""

    type: str  # only "git_repo" so far
    url: str  # as written in the config; also the key in the metadata file
    branch: str | None = None  # None: the remote's default branch
    paths: tuple[str, ...] = ()  # explicit files/folders; empty: the smart filter


@dataclass(frozen=True)
class Docset:
    """A configured documentation set."""

    id: str
    name: str  # display name; defaults to the id
    version: str | None
    aliases: tuple[str, ...]
    local_path: str  # absolute, forward slashes, trailing "/"
    template: str | None = None  # overrides the config's and the default template
    web_sources: tuple[WebSource, ...] = ()
    description: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary, as list_docsets returns it."""
        d: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "version": self.version,
            "aliases": list(self.aliases),
            "local_path": self.local_path,
        }
        if self.description is not None:
            d["description"] = self.description
        return d


@dataclass(frozen=True)
class KnowledgeConfig:
    """A parsed ``.knowledge/config.yaml``."""

    path: Path  # the config file
    root: Path  # the folder that holds it (.knowledge)
    docs_root: Path
    docsets: tuple[Docset, ...]
    allow_local_git: bool = False  # local paths and file:// URLs as git sources (tests, mirrors)
    template: str | None = None  # default template for docsets without their own
    allowed_outside: tuple[Path, ...] = ()  # resolved folders outside the project that docsets may read (user's)


@dataclass
class SourceResult:
    """What loading one web source did."""

    url: str  # credentials, if any, are hidden
    ok: bool
    files: list[str] = field(default_factory=list)  # every selected file, repo-relative
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    content_hash: str | None = None
    error: str | None = None
    warning: str | None = None
    refused: list[str] = field(default_factory=list)  # links in the repository that lead out of it, not followed


@dataclass
class Selection:
    """The files of a clone that become part of a docset, and what was refused on the way."""

    files: list[str]  # sorted repo-relative posix paths
    refused: list[str] = field(default_factory=list)  # sorted: symbolic links met that lead out of the clone


# --------------------------------------------------------------------------- config


def find_config(start: Path | None = None) -> Path:
    """The nearest ``.knowledge/config.yaml`` (or ``.yml``) from ``start`` upward; no global fallback."""
    here = Path(start if start is not None else Path.cwd()).expanduser().absolute()
    if here.is_file():
        here = here.parent
    for folder in (here, *here.parents):
        for name in _CONFIG_NAMES:
            candidate = folder / ".knowledge" / name
            if candidate.is_file():
                return candidate
    raise DocsetError(
        f"no .knowledge/config.yaml found in {here} or any parent folder; "
        "create .knowledge/config.yaml in your project with a `docsets:` section (see README)"
    )


def load_config(path: Path, allowed_outside: Iterable[str | Path] = ()) -> KnowledgeConfig:
    """Read and validate a config file; every problem is a DocsetError naming the file.

    A docset's folder must lie inside the project (the folder holding ``.knowledge/``), links resolved, or
    inside one of ``allowed_outside``: folders the user allows (``knowledge.allowed_paths`` in their mdrag
    config, which a project cannot write); each docset read from there is logged as a warning.
    """
    path = Path(path)
    allowed = _allowed_folders(allowed_outside)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise DocsetError(
            f"cannot read {path}: {reason} (file access error); check that the file exists, is readable and is UTF-8"
        ) from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise DocsetError(
            f"{path}: invalid YAML{where}: {problem}; fix the syntax (indentation, colons, quotes)"
        ) from e
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise DocsetError(f"{path}: the top level must be a mapping with a `docsets:` section")
    _ignore_unknown(data, _TOP_KEYS, path)
    if "docsets" not in data:
        raise DocsetError(
            f"{path}: the required `docsets` section is missing; add one, e.g.\n"
            'docsets:\n  - id: react\n    version: "18.2"\n(an empty list `docsets: []` is allowed)'
        )
    root = path.parent
    allow_local = _opt_bool(data, "allow_local_git", str(path), False)
    template = _opt_str(data, "template", str(path))
    docs_root = _docs_root(root, _opt_str(data, "docs_root", str(path)))

    raw = data["docsets"]
    entries: list[tuple[Any, Any, str]] = []  # (id, settings, where); `docsets:` with nothing is empty
    if isinstance(raw, Mapping):
        entries = [(k, v if v is not None else {}, f"{path}: docsets.{k}") for k, v in raw.items()]
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            if not isinstance(item, Mapping):
                raise DocsetError(f"{path}: docsets[{i}] must be a mapping with an `id`")
            entries.append((item.get("id", item.get("name")), item, f"{path}: docsets[{i}]"))
    elif raw is not None:
        raise DocsetError(f"{path}: `docsets` must be a list of docsets or a mapping of id -> settings")

    docsets: list[Docset] = []
    owner: dict[str, str] = {}  # lower-cased id or alias -> docset id
    for ident, spec, where in entries:
        d = _parse_docset(ident, spec, where, root, docs_root, allow_local)
        real = _outside_project(d, root)
        if real is not None and not _allowed(real, allowed):
            raise DocsetError(
                f"{where} ({d.id}): its folder {d.local_path} is outside the project folder {root.parent} "
                f"(it resolves to {real}); move the documentation into the project, or, if you trust it, "
                f"{_how_to_allow(real)}"
            )
        if real is not None:
            log.warning(
                "docset %s reads %s, outside the project folder %s, because %s in your mdrag config allows %s",
                d.id,
                real,
                root.parent,
                _ALLOWED_SETTING,
                next(a for a in allowed if real.is_relative_to(a)),
            )
        for key in dict.fromkeys(k.lower() for k in (d.id, *d.aliases)):  # an alias may repeat its own id
            if key in owner:
                raise DocsetError(
                    f"{path}: {key!r} names more than one docset ({owner[key]} and {d.id}); "
                    "ids and aliases must be unique (case-insensitively)"
                )
            owner[key] = d.id
        docsets.append(d)
    return KnowledgeConfig(path, root, docs_root, tuple(docsets), allow_local, template, allowed)


def _allowed_folders(folders: Iterable[str | Path]) -> tuple[Path, ...]:
    if isinstance(folders, (str, Path)):  # one folder, not its characters
        folders = [folders]
    return tuple(Path(f).expanduser().resolve() for f in folders)


def _allowed(real: Path, allowed: Sequence[Path]) -> bool:
    return any(real.is_relative_to(a) for a in allowed)


def _how_to_allow(real: Path) -> str:
    return (
        f"add {real} (or a folder holding it) to `{_ALLOWED_SETTING}` in your own mdrag config "
        f"({home_dir() / 'config.yaml'}), e.g.\nknowledge:\n  allowed_paths: [{json.dumps(str(real))}]\n"
        "A project's .knowledge/config.yaml cannot allow this: a cloned project could point it anywhere"
    )


def _docs_root(root: Path, value: str | None) -> Path:
    # REQ-5 gives the default docs_root as ".knowledge/docs", written from the project folder (the one that
    # holds .knowledge/), and says a relative docs_root is resolved relative to the .knowledge folder. We read
    # the default as "the docs folder inside the .knowledge folder" ({.knowledge}/docs). A relative value that
    # starts with ".knowledge/" (the default written out) is read from the project folder, so writing the
    # documented default explicitly gives the same folder instead of .knowledge/.knowledge/docs.
    if value is None:
        return root / "docs"
    p = Path(value).expanduser()
    if p.is_absolute():
        return Path(os.path.normpath(p))
    base = root.parent if p.parts and p.parts[0] == root.name == ".knowledge" else root
    return Path(os.path.normpath(base / p))


def _parse_docset(ident: Any, spec: Any, where: str, root: Path, docs_root: Path, allow_local: bool) -> Docset:
    if not isinstance(spec, Mapping):
        raise DocsetError(f"{where}: settings must be a mapping (version, aliases, local_path, ...)")
    if isinstance(ident, int) and not isinstance(ident, bool):
        ident = str(ident)
    if not isinstance(ident, str) or not DOCSET_NAME.match(ident):
        raise DocsetError(
            f"{where}: docset id {ident!r} is missing or invalid; use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    where = f"{where} ({ident})"
    _ignore_unknown(spec, _DOCSET_KEYS, where)
    name = _opt_str(spec, "name", where) or ident
    version = spec.get("version")
    if isinstance(version, bool) or not isinstance(version, (str, int, float, type(None))):
        raise DocsetError(f'{where}: version must be a string such as "18.2", got {version!r}')
    version = str(version).strip() if version is not None and str(version).strip() else None
    if version is not None and not _VERSION.match(version):
        raise DocsetError(f"{where}: version {version!r} may hold only letters, digits, '.', '_', '+' and '-'")
    aliases = spec.get("aliases") or ()
    if isinstance(aliases, str):
        aliases = (aliases,)
    if not isinstance(aliases, (list, tuple)) or not all(isinstance(a, str) and DOCSET_NAME.match(a) for a in aliases):
        raise DocsetError(f"{where}: aliases must be a list of names made of letters, digits, '.', '_' and '-'")
    raw_sources = spec.get("web_sources") or []
    if not isinstance(raw_sources, list):
        raise DocsetError(f"{where}: web_sources must be a list of sources such as `- type: git_repo`")
    sources = tuple(_parse_source(s, f"{where}: web_sources[{i}]", allow_local) for i, s in enumerate(raw_sources))
    local = _opt_str(spec, "local_path", where)
    if local:
        folder = Path(os.path.normpath(root / Path(local).expanduser()))
    elif sources:
        folder = root / "docsets" / ident  # REQ-11
    else:
        folder = docs_root / (f"{ident}-{version}" if version else ident)  # REQ-2, REQ-5
    template, description = _opt_str(spec, "template", where), _opt_str(spec, "description", where)
    return Docset(ident, name, version, tuple(aliases), _posix_dir(folder), template, sources, description)


def _outside_project(d: Docset, root: Path) -> Path | None:
    """The docset folder with every link resolved, when that is outside the project (the folder holding ``root``).

    A folder whose links cannot be resolved (a loop) counts as outside, as written.
    """
    try:
        real = Path(d.local_path).resolve()
    except (OSError, RuntimeError):  # RuntimeError: a link loop (Python < 3.13)
        return Path(d.local_path)
    return None if real.is_relative_to(root.parent.resolve()) else real


def _confine(d: Docset, cfg: KnowledgeConfig) -> None:
    """Check again, before a docset's folder is read or written, that no link has led it out of the project since."""
    real = _outside_project(d, cfg.root)
    if real is not None and not _allowed(real, cfg.allowed_outside):
        raise DocsetError(
            f"docset {d.id!r}: its folder {d.local_path} resolves to {real}, outside the project folder "
            f"{cfg.root.parent}; remove the symbolic link that leads there, or, if you trust it, {_how_to_allow(real)}"
        )


def _parse_source(raw: Any, where: str, allow_local: bool) -> WebSource:
    if not isinstance(raw, Mapping):
        raise DocsetError(f"{where}: a web source must be a mapping such as {{type: git_repo, url: ...}}")
    _ignore_unknown(raw, _SOURCE_KEYS, where)
    kind = raw.get("type")
    if kind != "git_repo":
        raise DocsetError(f"{where}: unsupported web source type {kind!r}; supported types: git_repo")
    url = raw.get("url")
    if not isinstance(url, str) or not url:
        raise DocsetError(f"{where}: `url` is required, e.g. https://github.com/owner/repo.git")
    options = raw.get("options") or {}
    if not isinstance(options, Mapping):
        raise DocsetError(f"{where}: options must be a mapping (branch, paths)")
    branch = raw.get("branch", options.get("branch"))
    if branch is not None and (not isinstance(branch, str) or not _BRANCH.match(branch)):
        raise DocsetError(f"{where}: branch {branch!r} is not a valid branch name")
    paths = raw.get("paths", options.get("paths")) or ()
    if isinstance(paths, str):
        paths = (paths,)
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) and p.strip() for p in paths):
        raise DocsetError(f"{where}: paths must be a list of files or folders in the repository, e.g. [docs/]")
    try:
        validate_git_url(url, allow_local, must_exist=False)
    except DocsetError as e:
        raise DocsetError(f"{where}: {e}") from None
    return WebSource("git_repo", url, branch, tuple(paths))


def _ignore_unknown(spec: Mapping[Any, Any], known: set[str], where: object) -> None:
    for key in spec.keys() - known:
        log.debug("%s: ignoring unknown key %r", where, key)


def _opt_bool(spec: Mapping[Any, Any], key: str, where: str, default: bool) -> bool:
    value = spec.get(key, default)
    if not isinstance(value, bool):
        raise DocsetError(f"{where}: {key} must be true or false, got {value!r}")
    return value


def _opt_str(spec: Mapping[Any, Any], key: str, where: str) -> str | None:
    value = spec.get(key)
    if value is not None and not isinstance(value, str):
        raise DocsetError(f"{where}: {key} must be a string, got {value!r}")
    return value


def _posix_dir(p: Path) -> str:
    return p.as_posix().rstrip("/") + "/"


# --------------------------------------------------------------------------- knowledge base


class KnowledgeBase:
    """Cached config: reloaded when the file's (mtime_ns, ctime_ns, size, inode) changes.

    One ``os.stat`` per call decides, so a change is seen on the next call. If
    the changed file is invalid, every call raises its error (the stale config
    is not served) until it is fixed; ``last_good`` keeps the last valid one.
    ``allowed_outside``: folders outside the project that docsets may be read
    from, as :func:`load_config` takes them (front ends pass the user's
    ``knowledge.allowed_paths``).
    """

    def __init__(
        self, start: Path | None = None, path: Path | None = None, allowed_outside: Iterable[str | Path] = ()
    ) -> None:
        self._start = Path(start) if start is not None else Path.cwd()  # where discovery begins
        self._path = Path(path) if path is not None else None  # an explicit config file: no discovery
        self._allowed = _allowed_folders(allowed_outside)
        self._found: Path | None = None  # the discovered config file
        self._key: tuple[Any, ...] | None = None  # stat identity of the file behind _config / _error
        self._config: KnowledgeConfig | None = None  # valid for _key
        self._error: str | None = None  # the load error for _key, raised again without re-reading
        self._keys: dict[str, Docset] = {}  # lower-cased id and aliases -> docset
        self._names: dict[str, list[Docset]] = {}  # lower-cased display names -> docsets
        self.last_good: KnowledgeConfig | None = None  # the last config that loaded without errors

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
            cfg = load_config(path, self._allowed)
        except DocsetError as e:
            self._config, self._error = None, str(e)
            raise
        self._config, self._error, self.last_good = cfg, None, cfg
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
        _confine(d, cfg)
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
                "starting with a letter or digit; call list_docsets to see the configured docsets"
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
        if _CONTROL.search(word):
            raise DocsetError(f"{field_name}[{i}] contains control characters (such as newlines); remove them")
        out.append(word)
    return out


# --------------------------------------------------------------------------- git sources

_TRANSPORT = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP = re.compile(r"^(?:[A-Za-z0-9._~+-]+@)?(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):(?!//)(\S+)$")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_REMOTE_SCHEMES = ("https", "http", "ssh", "git")


def validate_git_url(url: str, allow_local: bool, *, must_exist: bool = True, base: Path | None = None) -> str:
    """Check a git source URL; return it unchanged or raise DocsetError explaining the rule.

    Accepted: https://, http://, ssh://, git:// and scp-like ``user@host:path``. Local
    paths and file:// URLs only with ``allow_local`` (then, with ``must_exist``, the
    path must exist; a relative one is read from ``base``). Transport helpers
    (``ext::`` and any ``<transport>::``), a leading ``-``, whitespace and control
    characters are always refused: they would let a config file run commands.
    """
    rule = "use https://host/owner/repo.git, ssh://host/repo.git, git://host/repo.git or user@host:owner/repo.git"
    if not isinstance(url, str) or not url:
        raise DocsetError(f"the git URL is empty; {rule}")
    if url.startswith("-"):
        raise DocsetError(f"git URL {url!r} must not start with '-' (it would be read as a git option); {rule}")
    if any(c.isspace() for c in url) or _CONTROL.search(url):
        raise DocsetError(f"git URL {url!r} must not contain spaces or control characters; {rule}")
    if _TRANSPORT.match(url):
        raise DocsetError(f"git URL {_redact(url)!r} uses a '<transport>::' helper, which can run commands; {rule}")
    local: str | None = None
    m = _SCHEME.match(url)
    if m:
        scheme = m.group(1).lower()
        if scheme == "file":
            local = unquote(urlsplit(url).path)
        elif scheme in _REMOTE_SCHEMES:
            parts = urlsplit(url)
            host = parts.hostname or ""
            if not host or host.startswith("-") or (parts.username or "").startswith("-"):
                raise DocsetError(f"git URL {_redact(url)!r} has no valid host name; {rule}")
        else:
            raise DocsetError(f"git URL scheme {scheme!r} is not supported; {rule}")
    elif _DRIVE.match(url) or not _SCP.match(url):
        local = url
    if local is not None:
        if not allow_local:
            raise DocsetError(
                f"git URL {url!r} is a local path or file:// URL, which is refused unless the config sets "
                f"`allow_local_git: true`; {rule}"
            )
        if must_exist:
            p = Path(local).expanduser()
            if not p.is_absolute() and base is not None:
                p = base / p
            if not p.exists():
                raise DocsetError(f"local git repository {p} does not exist; check the url in the config")
    return url


def _redact(url: str) -> str:
    """The URL for messages: http(s) user info (often a token) and any password become ***."""
    url = re.sub(r"^(https?://)[^/@]+@", r"\1***@", url, flags=re.IGNORECASE)
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/@:]*):[^/@]*@", r"\1:***@", url)


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    env.update(GIT_TERMINAL_PROMPT="0", GCM_INTERACTIVE="never", LC_ALL="C", LANGUAGE="C")
    return env


def _git_options(allow_local: bool) -> list[str]:
    opts = ["-c", "protocol.ext.allow=never"]
    return opts if allow_local else [*opts, "-c", "protocol.file.allow=never"]


# Substrings of git's stderr (LC_ALL=C) that tell why a clone failed.
_AUTH_HINTS = (
    "authentication failed|could not read username|could not read password|permission denied|terminal prompts disabled"
    "|access denied|invalid username or password|returned error: 401|returned error: 403"
).split("|")
_NETWORK_HINTS = (
    "could not resolve host|temporary failure in name resolution|connection refused|connection timed out"
    "|connection reset|network is unreachable|no route to host|failed to connect|operation timed out|early eof"
).split("|")
_NOT_FOUND_HINTS = ("does not appear to be a git repository", "repository not found", "not found", "does not exist")


class GitRepoLoader:
    """Clones git sources and selects their files: the single source of truth for content selection."""

    def select_files(self, repo_dir: Path, paths: Sequence[str] = ()) -> Selection:
        """Exactly ``paths`` (folders recursively), or the smart filter; nothing whose target is outside the clone.

        An entry of ``paths`` that is absolute, holds '..' or .git, or leads out of the clone through a symbolic
        link raises DocsetError. Symbolic links met inside folders are not followed; those that lead out of the
        clone (or into its .git) are listed in ``refused``.
        """
        repo_dir = Path(repo_dir)
        real = repo_dir.resolve()
        chosen: set[str] = set()
        refused: set[str] = set()
        if paths:
            for raw in paths:
                rel = _repo_path(raw)
                target = repo_dir / rel
                if _in_clone(target, real) is None:
                    raise DocsetError(
                        f"path {raw!r} is refused: a symbolic link leads it outside the repository (or round a "
                        "loop); list the repository's own files or folders instead"
                    )
                if not target.exists():
                    raise DocsetError(f"path {raw!r} not found in the repository; {_top_level(repo_dir)}")
                if target.is_file():
                    chosen.add(rel)
                else:
                    chosen.update(self._walk(repo_dir, real, target, False, refused))
        else:
            chosen.update(self._walk(repo_dir, real, repo_dir, True, refused))
        chosen.discard(METADATA_FILE)  # the docset folder's own metadata file
        if not chosen:
            log.warning("%s", _empty_warning(paths))
        return Selection(sorted(chosen), sorted(refused))

    def _walk(self, repo_dir: Path, real: Path, top: Path, smart: bool, refused: set[str]) -> list[str]:
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

    def load(
        self,
        source: WebSource,
        dest: Path,
        allow_local: bool,
        progress: Progress | None = None,
        *,
        base: Path | None = None,
    ) -> SourceResult:
        """Clone ``source``, copy its selected files into ``dest`` and update the metadata there.

        Only new and changed files are written (unchanged ones keep their mtime),
        files this source created before and no longer selects are removed.
        Raises DocsetError with a user-facing message on any failure; ``dest``
        is untouched when the clone fails. ``base`` resolves relative local URLs.
        """
        url = validate_git_url(source.url, allow_local, base=base)
        dest = Path(dest)
        _check_space(dest, url)
        with tempfile.TemporaryDirectory(prefix="mdrag-clone-", ignore_cleanup_errors=True) as tmp:
            _check_space(Path(tmp), url)
            repo = Path(tmp) / "repo"
            self._clone(source, repo, allow_local, base, progress)
            selection = self.select_files(repo, source.paths)
            commit = _run(["git", "-C", str(repo), "rev-parse", "HEAD"], None, 30)
            head = commit.stdout.strip() if commit.returncode == 0 else None
            return self._sync(source, repo, selection, dest, head, progress)

    def _clone(
        self, source: WebSource, repo: Path, allow_local: bool, base: Path | None, progress: Progress | None
    ) -> None:
        shown = _redact(source.url)
        argv = ["git", *_git_options(allow_local), "clone", "--depth", "1", "--single-branch", "--no-tags"]
        if source.branch:
            argv.append(f"--branch={source.branch}")
        if progress is not None:
            argv.append("--progress")
            progress(f"cloning {shown}" + (f" (branch {source.branch})" if source.branch else ""))
        argv += ["--", source.url, str(repo)]
        code, err = _run_streaming(argv, base, progress)
        if code == 0:
            return
        log.warning("git clone of %s failed (exit %s):\n%s", shown, code, err)
        low = err.lower()
        if source.branch and "remote branch" in low and "not found" in low:
            branches = self.remote_branches(source.url, allow_local, base)
            listed = ", ".join(branches) if branches else "(the branches could not be listed)"
            raise DocsetError(
                f"branch {source.branch!r} not found in {shown}; available: {listed}. Fix `branch` in the config"
            )
        if any(h in low for h in _AUTH_HINTS):
            raise DocsetError(
                f"authentication failed for {shown}: check your Git credentials (credential helper, SSH key "
                "or access token) and that you can access the repository"
            )
        if any(h in low for h in _NETWORK_HINTS):
            raise DocsetError(f"cannot reach {shown}: check your internet connection, then retry")
        if any(h in low for h in _NOT_FOUND_HINTS):
            raise DocsetError(f"no git repository found at {shown}: check the url in the config")
        fatal = [line for line in err.splitlines() if line.startswith(("fatal:", "error:"))]
        detail = (fatal or err.splitlines() or [f"exit code {code}"])[-1]
        raise DocsetError(f"git clone of {shown} failed: {detail}")

    def remote_branches(self, url: str, allow_local: bool = False, base: Path | None = None) -> list[str]:
        """Branch names of a remote (``git ls-remote --heads``); [] when they cannot be listed."""
        try:
            proc = _run(["git", *_git_options(allow_local), "ls-remote", "--heads", "--", url], base, 60)
        except DocsetError:
            return []
        if proc.returncode != 0:
            return []
        refs = (line.split("\t", 1)[-1] for line in proc.stdout.splitlines())
        return sorted(r.removeprefix("refs/heads/") for r in refs if r.startswith("refs/heads/"))

    def _sync(
        self,
        source: WebSource,
        repo: Path,
        selection: Selection,
        dest: Path,
        commit: str | None,
        progress: Progress | None,
    ) -> SourceResult:
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
        hashes = {rel: _sha256(src) for rel, src in sources.items()}
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
        _write_metadata(dest, meta)
        warnings = []
        if not files:
            warnings.append(_empty_warning(source.paths))
        if selection.refused:
            shown = ", ".join(selection.refused[:10]) + (", ..." if len(selection.refused) > 10 else "")
            warnings.append(
                f"refused {len(selection.refused)} symbolic links that lead outside the repository (not followed): "
                + shown
            )
        shared = sorted(set(files) & others.keys())
        if shared:
            warnings.append(
                f"{len(shared)} files (e.g. {shared[0]}) are also provided by another source; last one wins"
            )
        if progress is not None:
            progress(
                f"{_redact(source.url)}: {len(files)} files, {len(added)} added, {len(changed)} changed, "
                f"{len(removed)} removed"
            )
        warning = "; ".join(warnings) or None
        return SourceResult(
            _redact(source.url), True, files, added, changed, removed, content_hash, None, warning, selection.refused
        )


def _is_doc_file(p: Path, rel: str) -> bool:
    """The smart filter of REQ-18 for one file (its folders were filtered by the walk)."""
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
    if rel.startswith("/") or _DRIVE.match(rel):
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


def _run(argv: list[str], cwd: Path | None, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, cwd=cwd, env=_git_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError as e:
        raise DocsetError("git is not installed or not on PATH; install Git and retry") from e
    except subprocess.TimeoutExpired as e:
        raise DocsetError(f"git timed out after {timeout:.0f} s; check your internet connection, then retry") from e


def _run_streaming(argv: list[str], cwd: Path | None, progress: Progress | None) -> tuple[int, str]:
    """Run git, passing its progress lines ("Receiving objects:  42% ...") to ``progress`` on the calling thread.

    Returns the exit code and stderr without the progress lines; a timer kills git after GIT_TIMEOUT.
    """
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=_git_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
    except FileNotFoundError as e:
        raise DocsetError("git is not installed or not on PATH; install Git and retry") from e
    assert proc.stderr is not None
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        proc.kill()

    timer = threading.Timer(GIT_TIMEOUT, expire)
    timer.daemon = True
    timer.start()
    lines: list[str] = []
    buf = b""
    try:
        while chunk := os.read(proc.stderr.fileno(), 4096):
            *parts, buf = re.split(rb"[\r\n]", buf + chunk)  # git redraws progress lines with \r
            for line in (part.decode("utf-8", "replace").strip() for part in parts):
                if line and "%" not in line:
                    lines.append(line)
                elif line and progress is not None:
                    progress(line)
    except BaseException:
        proc.kill()
        raise
    finally:
        timer.cancel()
        code = proc.wait()
        proc.stderr.close()
    if expired.is_set():
        raise DocsetError(f"git timed out after {GIT_TIMEOUT:.0f} s; check your internet connection, then retry")
    if buf.strip():
        lines.append(buf.decode("utf-8", "replace").strip())
    return code, "\n".join(lines)


def _check_space(path: Path, url: str) -> None:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if free < MIN_FREE_BYTES:
        raise DocsetError(
            f"storage error: only {free // 2**20} MB free on {existing}; at least {MIN_FREE_BYTES // 2**20} MB "
            f"are needed before loading {_redact(url)}. Free some disk space, then retry"
        )


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


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


# --------------------------------------------------------------------------- metadata


def read_metadata(folder: Path) -> dict[str, dict[str, Any]]:
    """The per-source entries of ``folder/.agentic-metadata.json``; {} when missing, corrupt or invalid."""
    path = Path(folder) / METADATA_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable metadata %s (%s); it is rewritten on the next load", path, e)
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
    return not pure.is_absolute() and ".." not in pure.parts and not _DRIVE.match(p)


def _write_metadata(folder: Path, sources: dict[str, dict[str, Any]]) -> None:
    text = json.dumps({"version": 1, "sources": sources}, indent=2, sort_keys=True) + "\n"
    write_atomic(folder / METADATA_FILE, text)


def _ensure_gitignore(root: Path) -> None:
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


# --------------------------------------------------------------------------- operations


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
    """One row per web source: id, url, branch, local_path, last_fetched, content_hash, files (a count), commit."""
    rows = []
    for d in kb.config().docsets:
        if not d.web_sources:
            continue
        meta = read_metadata(Path(d.local_path))
        for s in d.web_sources:
            e = meta.get(s.url, {})
            row = {"id": d.id, "url": _redact(s.url), "branch": s.branch, "local_path": d.local_path}
            row.update(last_fetched=e.get("last_fetched"), content_hash=e.get("content_hash"))
            rows.append({**row, "files": len(e.get("files", [])), "commit": e.get("commit")})
    return rows


def _load_docset(cfg: KnowledgeConfig, d: Docset, progress: Progress | None) -> list[SourceResult]:
    _confine(d, cfg)
    _ensure_gitignore(cfg.root)
    loader = GitRepoLoader()
    results = []
    for i, source in enumerate(d.web_sources, 1):
        shown = _redact(source.url)
        if progress is not None:
            progress(f"{d.id}: source {i}/{len(d.web_sources)}: {shown}")
        try:
            result = loader.load(source, Path(d.local_path), cfg.allow_local_git, progress, base=cfg.root)
        except DocsetError as e:
            log.warning("%s: source %s failed: %s", d.id, shown, e)
            result = SourceResult(url=shown, ok=False, error=str(e))
        except OSError as e:
            log.warning("%s: source %s failed", d.id, shown, exc_info=True)
            result = SourceResult(url=shown, ok=False, error=f"storage error: {e}; check free space and permissions")
        except Exception as e:  # a bug must not stop the other sources; the traceback goes to the log
            log.exception("%s: source %s failed", d.id, shown)
            result = SourceResult(url=shown, ok=False, error=f"unexpected error: {e}")
        if result.warning:
            log.warning("%s: %s: %s", d.id, shown, result.warning)
        results.append(result)
    return results
