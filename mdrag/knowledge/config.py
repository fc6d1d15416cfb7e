"""Finding and reading a project's ``.knowledge/config.yaml``: the schema, its checks, and where docsets may live.

Every problem is a :class:`DocsetError` naming the file and saying how to fix it. A docset's folder must lie
inside the project (the folder holding ``.knowledge/``) or inside a folder the user allows in their own mdrag
config; :func:`confine` checks that again before a folder is read or written.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, Field

from mdrag.config import home_dir
from mdrag.errors import DocsetError, KnowledgeConfigError, NoProjectError
from mdrag.knowledge.files import DOC_DIRS, DOC_EXTENSIONS, EXCLUDED_DIRS, EXCLUDED_PREFIXES, MAX_FILE_BYTES
from mdrag.knowledge.git import validate_git_url
from mdrag.knowledge.model import CONTROL, DOCSET_NAME, Docset, KnowledgeConfig, WebSource

__all__ = ["KnowledgeFile", "allowed_folders", "confine", "find_config", "keys_table", "load_knowledge_config"]

log = logging.getLogger(__name__)

_CONFIG_NAMES = ("config.yaml", "config.yml")
_ALLOWED_SETTING = "knowledge.allowed_paths"  # the user's mdrag setting that lets docsets out of their project


class SourceOptions(BaseModel):
    """A web source's ``options``: another place for its ``branch`` and ``paths``."""

    branch: str | None = Field(None, description="as the source's `branch`")
    paths: list[str] = Field([], description="as the source's `paths`")


# What a source without `paths` copies (mdrag.knowledge.files.select_files), said from its own constants.
_SMART = (
    f"README*, {'/'.join(sorted(DOC_EXTENSIONS))} files and everything under "
    f"{', '.join(d + '/' for d in sorted(DOC_DIRS))}; not {'*, '.join(EXCLUDED_PREFIXES)}*, files over "
    f"{MAX_FILE_BYTES // 2**20} MB or binary ones, nor anything under "
    f"{', '.join(sorted(EXCLUDED_DIRS - {'.git'}))}"
)


class SourceSpec(BaseModel):
    """One ``web_sources`` entry of a docset."""

    type: Literal["git_repo", "website"] = Field(description="the kind of source: `git_repo` or `website`")
    url: str = Field(
        description="the repository (https, ssh or `git@host:path`; local ones need `allow_local_git`), or for "
        "`website` the start page (http/https; pages under its folder are crawled)"
    )
    max_pages: int | None = Field(None, description="`website`: the most pages kept (default 2000)")
    branch: str | None = Field(None, description="the branch to copy (default: the remote's default branch)")
    paths: list[str] = Field([], description="files or folders of the repository to copy (default: " + _SMART + ")")
    options: SourceOptions | None = Field(None, description="`branch` and `paths` may be given here instead")


class DocsetSpec(BaseModel):
    """One docset of ``docsets:``; in the mapping form, its key is the ``id``."""

    id: str = Field(description="the docset's name: 1-64 letters, digits, '.', '_' or '-'")
    name: str | None = Field(None, description="display name (default: the id)")
    version: str | None = Field(None, description='e.g. "18.2"; part of the default folder name')
    aliases: list[str] = Field([], description="other names the docset answers to")
    local_path: str | None = Field(
        None,
        description="its folder, relative to the .knowledge folder (default: `docsets/<id>` with web sources, "
        "else `<docs_root>/<id>-<version>`)",
    )
    template: str | None = Field(None, description="its own instructions template (default: the file's `template`)")
    web_sources: list[SourceSpec] = Field([], description="where `mdrag knowledge init` downloads it from")
    description: str | None = Field(None, description="one line that `list_docsets` shows")


class KnowledgeFile(BaseModel):
    """The top level of ``.knowledge/config.yaml``."""

    docsets: list[DocsetSpec] | dict[str, DocsetSpec] = Field(
        description="a list of docsets, or a mapping of id -> settings (`docsets: []` is allowed)"
    )
    docs_root: str | None = Field(
        None,
        description="where docsets without `local_path` or web sources live, relative to the .knowledge folder "
        "(default: its `docs` folder)",
    )
    allow_local_git: bool = Field(False, description="allow local paths and `file://` URLs as git sources")
    allow_local_web: bool = Field(False, description="allow website sources on loopback or private addresses")
    template: str | None = Field(
        None,
        description="instructions template of `search_docs` (`{keywords}`, `{generalized_keywords}`, "
        "`{local_path}`, `{docset}`, `{version}`)",
    )


#: Each part of the file, by where it sits (``docsets[]``: each item of ``docsets``).
_SCHEMA: dict[str, type[BaseModel]] = {
    "": KnowledgeFile,
    "docsets[].": DocsetSpec,
    "docsets[].web_sources[].": SourceSpec,
    "docsets[].web_sources[].options.": SourceOptions,
}
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")  # becomes part of a folder name
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)[^\s\x00-\x1f\x7f~^:?*\[\\]{1,255}$")


def find_config(start: Path | None = None) -> Path:
    """The nearest ``.knowledge/config.yaml`` (or ``.yml``) from ``start`` upward; no global fallback."""
    here = Path(start if start is not None else Path.cwd()).expanduser().absolute()
    if here.is_file():
        here = here.parent
    for folder in (here, *here.parents):
        found = [folder / ".knowledge" / name for name in _CONFIG_NAMES if (folder / ".knowledge" / name).is_file()]
        if len(found) > 1:
            log.warning("using %s; %s is ignored: merge it into %s and delete it", found[0], found[1], found[0].name)
        if found:
            return found[0]
    raise NoProjectError(
        f"no .knowledge/config.yaml found in {here} or any parent folder; "
        "create .knowledge/config.yaml in your project with a `docsets:` section (see docs/mcp.md)"
    )


def load_knowledge_config(path: Path, allowed_outside: Iterable[str | Path] = ()) -> KnowledgeConfig:
    """Read and validate a config file; every problem is a DocsetError naming the file.

    A docset's folder must lie inside the project (the folder holding ``.knowledge/``), links resolved, or
    inside one of ``allowed_outside``: folders the user allows (``knowledge.allowed_paths`` in their mdrag
    config, which a project cannot write); each docset read from there is logged as a warning.
    """
    path = Path(path)
    allowed = allowed_folders(allowed_outside)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise KnowledgeConfigError(
            f"cannot read {path}: {reason} (file access error); check that the file exists, is readable and is UTF-8"
        ) from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise KnowledgeConfigError(
            f"{path}: invalid YAML{where}: {problem}; fix the syntax (indentation, colons, quotes)"
        ) from e
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise KnowledgeConfigError(f"{path}: the top level must be a mapping with a `docsets:` section")
    _warn_unknown(data, KnowledgeFile, path)
    if "docsets" not in data:
        raise KnowledgeConfigError(
            f"{path}: the required `docsets` section is missing; add one, e.g.\n"
            'docsets:\n  - id: react\n    version: "18.2"\n(an empty list `docsets: []` is allowed)'
        )
    root = path.parent
    allow_local = _opt_bool(data, "allow_local_git", str(path), KnowledgeFile.model_fields["allow_local_git"].default)
    allow_web = _opt_bool(data, "allow_local_web", str(path), KnowledgeFile.model_fields["allow_local_web"].default)
    template = _opt_str(data, "template", str(path))
    docs_root = _docs_root(root, _opt_str(data, "docs_root", str(path)))

    raw = data["docsets"]
    entries: list[tuple[Any, Any, str]] = []  # (id, settings, where); `docsets:` with nothing is empty
    if isinstance(raw, Mapping):
        entries = [(k, v if v is not None else {}, f"{path}: docsets.{k}") for k, v in raw.items()]
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            if not isinstance(item, Mapping):
                raise KnowledgeConfigError(f"{path}: docsets[{i}] must be a mapping with an `id`")
            entries.append((item.get("id", item.get("name")), item, f"{path}: docsets[{i}]"))
    elif raw is not None:
        raise KnowledgeConfigError(f"{path}: `docsets` must be a list of docsets or a mapping of id -> settings")

    docsets: list[Docset] = []
    owner: dict[str, str] = {}  # lower-cased id or alias -> docset id
    for ident, spec, where in entries:
        d = _parse_docset(ident, spec, where, root, docs_root, allow_local)
        real = _outside_project(d, root)
        if real is not None and not _allowed(real, allowed):
            raise KnowledgeConfigError(
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
                raise KnowledgeConfigError(
                    f"{path}: {key!r} names more than one docset ({owner[key]} and {d.id}); "
                    "ids and aliases must be unique (case-insensitively)"
                )
            owner[key] = d.id
        docsets.append(d)
    return KnowledgeConfig(path, root, docs_root, tuple(docsets), allow_local, allow_web, template, allowed)


def allowed_folders(folders: Iterable[str | Path]) -> tuple[Path, ...]:
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
    # The .knowledge config format gives the default docs_root as ".knowledge/docs", written from the project folder
    # (the one that holds .knowledge/), and says a relative docs_root is resolved relative to the .knowledge folder.
    # We read the default as "the docs folder inside the .knowledge folder" ({.knowledge}/docs). A relative value
    # that starts with ".knowledge/" (the default written out) is read from the project folder, so writing the
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
        raise KnowledgeConfigError(f"{where}: settings must be a mapping (version, aliases, local_path, ...)")
    if isinstance(ident, int) and not isinstance(ident, bool):
        ident = str(ident)
    if not isinstance(ident, str) or not DOCSET_NAME.match(ident):
        raise KnowledgeConfigError(
            f"{where}: docset id {ident!r} is missing or invalid; use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    where = f"{where} ({ident})"
    _warn_unknown(spec, DocsetSpec, where)
    name = _opt_str(spec, "name", where) or ident
    version = spec.get("version")
    if isinstance(version, bool) or not isinstance(version, (str, int, float, type(None))):
        raise KnowledgeConfigError(f'{where}: version must be a string such as "18.2", got {version!r}')
    version = str(version).strip() if version is not None and str(version).strip() else None
    if version is not None and not _VERSION.match(version):
        raise KnowledgeConfigError(f"{where}: version {version!r} may hold only letters, digits, '.', '_', '+' and '-'")
    aliases = spec.get("aliases") or ()
    if isinstance(aliases, str):
        aliases = (aliases,)
    if not isinstance(aliases, (list, tuple)) or not all(isinstance(a, str) and DOCSET_NAME.match(a) for a in aliases):
        raise KnowledgeConfigError(
            f"{where}: aliases must be a list of names made of letters, digits, '.', '_' and '-'"
        )
    raw_sources = spec.get("web_sources") or []
    if not isinstance(raw_sources, list):
        raise KnowledgeConfigError(f"{where}: web_sources must be a list of sources such as `- type: git_repo`")
    sources = tuple(_parse_source(s, f"{where}: web_sources[{i}]", allow_local) for i, s in enumerate(raw_sources))
    local = _opt_str(spec, "local_path", where)
    if local:
        folder = Path(os.path.normpath(root / Path(local).expanduser()))
    elif sources:
        folder = root / "docsets" / ident  # web sources and no local_path: .knowledge/docsets/<id>/
    else:
        folder = docs_root / (f"{ident}-{version}" if version else ident)  # <docs_root>/<id>-<version>/
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


def confine(d: Docset, cfg: KnowledgeConfig) -> None:
    """Check again, before a docset's folder is read or written, that no link has led it out of the project since."""
    real = _outside_project(d, cfg.root)
    if real is not None and not _allowed(real, cfg.allowed_outside):
        raise KnowledgeConfigError(
            f"docset {d.id!r}: its folder {d.local_path} resolves to {real}, outside the project folder "
            f"{cfg.root.parent}; remove the symbolic link that leads there, or, if you trust it, {_how_to_allow(real)}"
        )


def _parse_source(raw: Any, where: str, allow_local: bool) -> WebSource:
    if not isinstance(raw, Mapping):
        raise KnowledgeConfigError(f"{where}: a web source must be a mapping such as {{type: git_repo, url: ...}}")
    _warn_unknown(raw, SourceSpec, where)
    kind = raw.get("type")
    if kind == "website":
        return _parse_website(raw, where)
    if kind != "git_repo":
        raise KnowledgeConfigError(f"{where}: unsupported web source type {kind!r}; supported types: git_repo, website")
    url = raw.get("url")
    if not isinstance(url, str) or not url:
        raise KnowledgeConfigError(f"{where}: `url` is required, e.g. https://github.com/owner/repo.git")
    options = raw.get("options") or {}
    if not isinstance(options, Mapping):
        raise KnowledgeConfigError(f"{where}: options must be a mapping (branch, paths)")
    _warn_unknown(options, SourceOptions, f"{where}: options")
    branch = raw.get("branch", options.get("branch"))
    if branch is not None and (not isinstance(branch, str) or not _BRANCH.match(branch)):
        raise KnowledgeConfigError(f"{where}: branch {branch!r} is not a valid branch name")
    paths = raw.get("paths", options.get("paths")) or ()
    if isinstance(paths, str):
        paths = (paths,)
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) and p.strip() for p in paths):
        raise KnowledgeConfigError(f"{where}: paths must be a list of files or folders in the repository, e.g. [docs/]")
    try:
        validate_git_url(url, allow_local, must_exist=False)
    except DocsetError as e:
        raise KnowledgeConfigError(f"{where}: {e}") from None
    return WebSource("git_repo", url, branch, tuple(paths))


def _parse_website(raw: Mapping[Any, Any], where: str) -> WebSource:
    url = raw.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or CONTROL.search(str(url)):
        raise KnowledgeConfigError(
            f"{where}: a website `url` must be an http:// or https:// page, e.g. https://docs.example.com/guide/"
        )
    max_pages = raw.get("max_pages")
    if max_pages is not None and (isinstance(max_pages, bool) or not isinstance(max_pages, int) or max_pages < 1):
        raise KnowledgeConfigError(f"{where}: max_pages must be a positive whole number, e.g. 500")
    return WebSource("website", str(url), max_pages=max_pages)


def _warn_unknown(spec: Mapping[Any, Any], schema: type[BaseModel], where: object) -> None:
    """Warn about each key ``schema`` does not know, with the known key it most likely meant."""
    for key in spec.keys() - schema.model_fields.keys():
        close = difflib.get_close_matches(str(key), schema.model_fields, n=1, cutoff=0.6)
        log.warning("%s: ignoring unknown key %r%s", where, key, f" (did you mean {close[0]!r}?)" if close else "")


def keys_table() -> str:
    """docs/mcp.md's table of ``.knowledge/config.yaml`` keys, in Markdown, made from the schema models above."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for prefix, model in _SCHEMA.items():
        for name, f in model.model_fields.items():
            default = "required" if f.is_required() else "unset" if f.default is None else f"`{json.dumps(f.default)}`"
            rows.append(f"| `{prefix}{name}` | {default} | {f.description} |")
    return "\n".join(rows) + "\n"


def _opt_bool(spec: Mapping[Any, Any], key: str, where: str, default: bool) -> bool:
    value = spec.get(key, default)
    if not isinstance(value, bool):
        raise KnowledgeConfigError(f"{where}: {key} must be true or false, got {value!r}")
    return value


def _opt_str(spec: Mapping[Any, Any], key: str, where: str) -> str | None:
    value = spec.get(key)
    if value is not None and not isinstance(value, str):
        raise KnowledgeConfigError(f"{where}: {key} must be a string, got {value!r}")
    return value


def _posix_dir(p: Path) -> str:
    return p.as_posix().rstrip("/") + "/"
