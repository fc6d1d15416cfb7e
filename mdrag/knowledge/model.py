"""The values docsets are made of: a parsed config, its docsets and web sources, and what loading a source did.

Also the name patterns more than one module of the package checks against.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CONTROL",
    "DOCSET_NAME",
    "DRIVE",
    "Docset",
    "KnowledgeConfig",
    "Progress",
    "Selection",
    "SourceResult",
    "WebSource",
]

Progress = Callable[[str], None]

DOCSET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
DRIVE = re.compile(r"^[A-Za-z]:[\\/]")  # a Windows drive: an absolute path, wherever a relative one is expected


@dataclass(frozen=True)
class WebSource:
    """One ``web_sources`` entry of a docset."""

    type: str  # "git_repo" or "website"
    url: str  # as written in the config; also the key in the metadata file
    branch: str | None = None  # None: the remote's default branch
    paths: tuple[str, ...] = ()  # explicit files/folders; empty: the smart filter
    max_pages: int | None = None  # website: pages kept at most (None: the crawler's default)


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
    allow_local_web: bool = False  # website sources on loopback or private addresses (tests, intranets)
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
    unsearchable: dict[str, int] = field(default_factory=dict)  # extension -> files with no parser (not indexed)


@dataclass
class Selection:
    """The files of a clone that become part of a docset, and what was refused on the way."""

    files: list[str]  # sorted repo-relative posix paths
    refused: list[str] = field(default_factory=list)  # sorted: symbolic links met that lead out of the clone
