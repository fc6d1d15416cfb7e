"""Settings: command-line flags > config file > environment > defaults.

The config file is ``$MDRAG_HOME/config.yaml`` or ``config.toml`` (home
defaults to ``~/.md-qa``). Keys are nested sections; flags and code give them
as dotted names (``chunk.size``). Every value is checked against its type and
an invalid one is reported with its key. See README.md for every setting.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdrag.errors import ConfigError

__all__ = ["DEFAULTS", "ENV_VARS", "Config", "home_dir", "load_config"]

log = logging.getLogger(__name__)

#: Every setting, by dotted key: (type, default). ``None`` defaults are "unset".
DEFAULTS: dict[str, tuple[type | tuple[type, ...], Any]] = {
    "index": (str, "default"),
    "folders": (list, ["./markdown"]),  # for an index with no folders yet; when set, always added
    "index.include": (list, []),  # gitignore-style patterns: only matching files are indexed (empty: all)
    "index.exclude": (list, []),  # gitignore-style patterns: files and folders left out
    "index.gitignore": (bool, True),  # honour .gitignore files inside the indexed folders
    "index.max_file_mb": ((int, float), 20),  # larger files are skipped with a reason (0: no limit)
    "index.parse_timeout": ((int, float), 120),  # seconds one file may take to parse, then it is skipped
    "index.max_parse_mb": ((int, float), 2048),  # memory one file's parse may take, then it is skipped (0: no cap)
    "milvus_uri": (str, None),  # default: $MDRAG_HOME/cache/milvus.db (Milvus Lite)
    "milvus_token": (str, None),
    "store.backend": (str, "milvus"),  # milvus | faiss: where chunks and vectors are kept (mdrag.store)
    "api.base_url": (str, None),  # shared by llm and embedding when theirs are unset
    "api.api_key": (str, None),
    "embedding.provider": (str, "local"),  # local | openai
    "embedding.model": (str, None),  # local: all-MiniLM-L6-v2; openai: text-embedding-3-small
    "embedding.base_url": (str, None),
    "embedding.api_key": (str, None),
    "embedding.batch_size": (int, 32),
    "embedding.device": (str, "cpu"),
    "embedding.backend": (str, "auto"),  # auto | torch | onnx | openvino (local models)
    "chunk.size": (int, 1000),
    "chunk.overlap": (int, 200),
    "chunk.unit": (str, "chars"),  # chars | tokens
    "chunk.context": (str, "frontmatter"),  # none | headings | frontmatter: header embedded with each chunk
    "chunk.path_words": (bool, False),  # the file's folder and file names lead that header
    "search.k": (int, 10),
    "search.threshold": ((int, float), 0.35),
    "search.mode": (str, "hybrid"),  # dense | bm25 | hybrid (see README "Search modes")
    "search.fusion": (str, "weighted"),  # weighted | rrf (hybrid mode): see mdrag/fusion.py
    "search.dense_weight": ((int, float), 0.5),  # weighted fusion: share of the dense score
    "search.stemming": (bool, True),  # stem BM25 text and queries (English); a change re-indexes
    "search.collapse": (str, "section"),  # none | section | file: best chunk per section or file
    "llm.base_url": (str, None),
    "llm.api_key": (str, None),
    "llm.model": (str, "qwen-flash"),
    "llm.timeout": ((int, float), 60),
    "answer.min_score": ((int, float), 0.44),  # best score below this: "no relevant information", no LLM call
    "answer.max_unknown": ((int, float), 0.2),  # share of a question's weight on words the index lacks: above, refuse
    "server.host": (str, "127.0.0.1"),
    "server.port": (int, 8765),
    "server.reload_interval": (int, 300),
    "server.token": (str, None),  # required when server.host is not a loopback address
    "server.allowed_origins": (list, []),  # browser origins allowed besides loopback pages
    "server.max_message_bytes": (int, 65536),
    "server.max_pending": (int, 8),  # requests waiting on one connection
    "knowledge.allowed_paths": (list, []),  # folders outside a project that its docsets may be read from
}

#: md-qa environment variables and the settings they provide.
ENV_VARS = {
    "MARKDOWN_QA_API_BASE_URL": "api.base_url",
    "MARKDOWN_QA_API_KEY": "api.api_key",
    "MARKDOWN_QA_EMBEDDING_MODEL": "embedding.model",
    "MARKDOWN_QA_LLM_MODEL": "llm.model",
    "MARKDOWN_QA_EMBEDDING_PROVIDER": "embedding.provider",
    "MARKDOWN_QA_MILVUS_URI": "milvus_uri",
    "MARKDOWN_QA_INDEX": "index",
    "MDRAG_STORE": "store.backend",
}

_INDEX_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")  # also a collection and a file name
_CHOICES = {
    "embedding.provider": ("local", "openai"),
    "chunk.unit": ("chars", "tokens"),
    "chunk.context": ("none", "headings", "frontmatter"),
    "search.mode": ("dense", "bm25", "hybrid"),
    "embedding.backend": ("auto", "torch", "onnx", "openvino"),
    "search.fusion": ("rrf", "weighted"),
    "search.collapse": ("none", "section", "file"),
    "store.backend": ("milvus", "faiss"),
}
_FRACTIONS = ("search.threshold", "search.dense_weight", "answer.min_score", "answer.max_unknown")
_SECRETS = {"milvus_token", "api.api_key", "embedding.api_key", "llm.api_key", "server.token"}


def home_dir() -> Path:
    """``$MDRAG_HOME``, or ``~/.md-qa``: config file and cache live here."""
    env = os.environ.get("MDRAG_HOME")
    return Path(env).expanduser() if env else Path.home() / ".md-qa"


@dataclass
class Config:
    """Resolved settings, read with ``config["chunk.size"]`` or the helpers below."""

    values: dict[str, Any]
    home: Path
    sources: dict[str, str] = field(default_factory=dict)  # key -> "flag" | "file" | "env" | "default"
    file: Path | None = None  # the config file that was read, if any

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    @property
    def milvus_uri(self) -> str:
        return self.values["milvus_uri"] or str(self.cache_dir / "milvus.db")

    def manifest_path(self, index: str | None = None) -> Path:
        return self.cache_dir / "manifests" / f"{index or self.values['index']}.json"

    def redacted(self) -> dict[str, Any]:
        """Values safe to print or log: secrets show only whether they are set."""
        return {k: ("***" if k in _SECRETS and v else v) for k, v in self.values.items()}

    def with_overrides(self, overrides: Mapping[str, Any]) -> Config:
        values = dict(self.values)
        sources = dict(self.sources)
        for k, v in _check(overrides, "flag").items():
            values[k] = v
            sources[k] = "flag"
        return Config(values, self.home, sources, self.file)


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if key == "index" and isinstance(v, Mapping):  # `index: {name: docs, max_file_mb: 50}`
            for sub, value in _flatten(v, "index.").items():
                out["index" if sub == "index.name" else sub] = value
            continue
        if isinstance(v, Mapping) and key not in DEFAULTS:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _check(values: Mapping[str, Any], origin: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in DEFAULTS:
            if origin == "flag":
                raise ConfigError(f"unknown setting {key!r}")
            log.warning("ignoring unknown setting %r in the %s", key, origin)
            continue
        if value is None:
            continue
        typ, _ = DEFAULTS[key]
        if typ is list and isinstance(value, str):
            value = [value]
        from_text = origin in ("environment", "flag")
        if typ is int and isinstance(value, str) and from_text:
            try:
                value = int(value)
            except ValueError:
                raise ConfigError(f"{key} must be an integer, got {value!r} (from the {origin})") from None
        if typ == (int, float) and isinstance(value, str) and from_text:
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{key} must be a number, got {value!r} (from the {origin})") from None
        if typ is bool and isinstance(value, str) and from_text:
            if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ConfigError(f"{key} must be true or false, got {value!r} (from the {origin})")
            value = value.lower() in ("1", "true", "yes", "on")
        if typ is bool and not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r} (from the {origin})")
        if typ is not bool and (isinstance(value, bool) or not isinstance(value, typ)):
            names = "number" if typ == (int, float) else getattr(typ, "__name__", str(typ))
            raise ConfigError(f"{key} must be a {names}, got {value!r} (from the {origin})")
        value = _range_check(key, value, origin)
        out[key] = value
    return out


def _range_check(key: str, value: Any, origin: str) -> Any:
    """Checks beyond the type: allowed values and ranges."""
    typ = DEFAULTS[key][0]
    if typ is list and not all(isinstance(x, str) for x in value):
        raise ConfigError(f"{key} must be a list of strings, got {value!r} (from the {origin})")
    if key == "index" and not _INDEX_NAME.match(value):
        raise ConfigError(
            f"index must start with a letter and hold only letters, digits and '_' (64 at most), "
            f"got {value!r} (from the {origin})"
        )
    if key in _CHOICES and value not in _CHOICES[key]:
        raise ConfigError(f"{key} must be one of {', '.join(_CHOICES[key])}, got {value!r} (from the {origin})")
    if key in _FRACTIONS and not 0 <= value <= 1:
        raise ConfigError(f"{key} must be between 0 and 1, got {value!r} (from the {origin})")
    if key in ("server.port",) and not 0 <= value <= 65535:
        raise ConfigError(f"server.port must be between 0 and 65535, got {value!r} (from the {origin})")
    if key in ("embedding.batch_size", "search.k", "server.reload_interval", "server.max_pending") and value < 1:
        raise ConfigError(f"{key} must be at least 1, got {value!r} (from the {origin})")
    if key == "index.parse_timeout" and not value > 0:
        raise ConfigError(f"{key} must be more than 0, got {value!r} (from the {origin})")
    if key in ("index.max_file_mb", "index.max_parse_mb") and value < 0:
        raise ConfigError(f"{key} must be 0 (no limit) or more, got {value!r} (from the {origin})")
    if key in ("llm.timeout",) and not value > 0:
        raise ConfigError(f"{key} must be more than 0, got {value!r} (from the {origin})")
    if key == "server.max_message_bytes" and not 1024 <= value <= (1 << 20):
        raise ConfigError(f"{key} must be between 1024 and 1048576, got {value!r} (from the {origin})")
    if key == "knowledge.allowed_paths":
        return [_absolute_folder(key, p, origin) for p in value]
    return value


def _absolute_folder(key: str, value: str, origin: str) -> str:
    """``value`` with ``~`` expanded and every link resolved; a relative folder is refused (relative to what?)."""
    p = Path(value).expanduser()
    if not p.is_absolute():
        raise ConfigError(
            f"{key} must list absolute folders (or ones starting with ~), got {value!r} (from the {origin}); "
            "write the full path, e.g. ~/docs/react"
        )
    return str(p.resolve())


def _read_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    try:
        if path.suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]

            data: Any = tomllib.loads(raw)
        else:
            import yaml

            data = yaml.safe_load(raw)
    except Exception as e:  # yaml.YAMLError / tomllib.TOMLDecodeError carry the line
        raise ConfigError(f"config file {path} is not valid: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {path} must hold a mapping of settings, not {type(data).__name__}")
    return _flatten(data)


def load_config(overrides: Mapping[str, Any] | None = None, home: Path | None = None) -> Config:
    """Resolve every setting; ``overrides`` are dotted keys from flags or code."""
    home = home or home_dir()
    values = {k: default for k, (_, default) in DEFAULTS.items()}
    sources = dict.fromkeys(values, "default")
    env = {key: os.environ[var] for var, key in ENV_VARS.items() if os.environ.get(var)}
    file = next((p for p in (home / "config.yaml", home / "config.yml", home / "config.toml") if p.is_file()), None)
    layers = [("env", env)]
    if file is not None:
        layers.append(("file", _read_file(file)))
    for origin, layer in layers:
        for k, v in _check(layer, "config file " + str(file) if origin == "file" else "environment").items():
            values[k] = v
            sources[k] = origin
    cfg = Config(values, home, sources, file)
    return cfg.with_overrides(overrides or {})
