"""The settings in effect: command-line flags > config file > environment > defaults.

The config file is ``$MDRAG_HOME/config.yaml`` or ``config.toml`` (home
defaults to ``~/.md-qa``). Keys are nested sections; flags and code give them
as dotted names (``chunk.size``). Every setting is declared once, in
:mod:`mdrag.settings`: this module reads the values, checks them against that
declaration, and says where each came from. A value of the type declared is
checked here (:func:`_plain`); any other by the settings' pydantic model
(:func:`mdrag.settings.model`, built then), which converts it or says what is wrong.
"""

from __future__ import annotations

import copy
import difflib
import logging
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin

from mdrag import settings
from mdrag.errors import ConfigError
from mdrag.redact import redact_url
from mdrag.settings import (
    DEFAULT_EMBEDDING_MODELS,
    INHERITS,
    After,
    Before,
    bounds,
    choices,
    declared_extra,
    model,
)

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

__all__ = ["CONFIG_FILES", "Config", "config_file", "home_dir", "load_config"]

log = logging.getLogger(__name__)

CONFIG_FILES = ("config.yaml", "config.yml", "config.toml")  # in $MDRAG_HOME; the first that exists is read


def _safe(key: str, value: Any) -> Any:
    if key in settings.SECRETS and value:
        return "***"
    return redact_url(value) if isinstance(value, str) and "://" in value else value  # user:password@host


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
        """The value set for ``key`` (``None``: unset); :meth:`effective` gives the value in effect."""
        return self.values[key]

    def effective(self, key: str) -> Any:
        """The value in effect for ``key``: the one set, or, when unset or empty, what it falls back to: another
        setting's value (:data:`INHERITS`), the model of ``embedding.provider``
        (:data:`DEFAULT_EMBEDDING_MODELS`), or the file under the cache folder it declares (``cache_file``: a
        store backend's file, as Milvus Lite's). The program
        reads inherited settings here, and `mdrag config` shows them from here."""
        value = self.values[key]
        if value is not None and value != "":  # an empty text is unset, as it always was
            return value
        if key in INHERITS:
            return self.values[INHERITS[key]]
        if key == "embedding.model":
            return DEFAULT_EMBEDDING_MODELS.get(self.values["embedding.provider"])  # another provider: its own
        if file := declared_extra(key, "cache_file"):
            return str(self.cache_dir / file)
        return None

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    def manifest_path(self, index: str | None = None) -> Path:
        return self.cache_dir / "manifests" / f"{index or self.values['index']}.json"

    def explain(self) -> dict[str, dict[str, Any]]:
        """Each setting's value in effect (:meth:`effective`), safe to print, and where it came from: its
        ``source`` (default, file, environment or flag), with the ``file`` or the environment ``variable``
        it was read from; an unset setting that takes another's value (:data:`INHERITS`) has the source
        ``inherited`` and names that setting (``from``); a default that depends on another setting names
        it (``depends_on``).
        """
        out = {key: self._origin(key) for key in self.values}
        for key, row in out.items():
            if row["source"] == "default" and key in INHERITS:
                out[key] = {"source": "inherited", "from": INHERITS[key]}
            elif row["source"] == "default" and key == "embedding.model":
                row["depends_on"] = "embedding.provider"
        return {key: {"value": _safe(key, self.effective(key)), **row} for key, row in out.items()}

    def _origin(self, key: str) -> dict[str, Any]:
        """Where the value set for ``key`` came from, as :meth:`explain` shows it."""
        source = self.sources.get(key, "default")
        if source == "env":
            return {"source": "environment", "variable": next(var for var, k in settings.ENV_VARS.items() if k == key)}
        if source == "file":
            return {"source": "file", "file": str(self.file)}
        return {"source": source}

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
        if isinstance(v, Mapping) and key not in settings.DEFAULTS:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _check(values: Mapping[str, Any], origin: str, strict: bool = False) -> dict[str, Any]:
    """``values`` (dotted keys) checked and converted; an unknown key is an error from a flag, else a warning.

    Text from the environment or a flag is converted (``"800"``, ``"off"``); with ``strict`` (a file's values:
    YAML and TOML have numbers and booleans) values must have their type already.
    """
    known: dict[str, Any] = {}
    for key, value in values.items():
        if key not in settings.FIELDS:
            hint = _closest(key)
            if origin == "flag":
                raise ConfigError(f"unknown setting {key!r}" + (f"; did you mean {hint!r}?" if hint else ""))
            log.warning(
                "ignoring unknown setting %r in the %s%s", key, origin, f" (did you mean {hint!r}?)" if hint else ""
            )
        elif value is not None:
            known[key] = value
    plain = {key: _plain(key, value) for key, value in known.items()}
    if all(value is not _UNSURE for value in plain.values()):
        return plain
    from pydantic import ValidationError

    try:
        checked = model().model_validate(known, strict=strict)
    except ValidationError as e:
        raise ConfigError("; ".join(_explain(err, known, origin) for err in _first_per_key(e))) from None
    dumped = checked.model_dump(by_alias=True)
    return {key: dumped[key] for key in known}


_UNSURE = object()  # what _plain() gives for a value it leaves to the settings' pydantic model


class _Unsure(Exception):
    """A value whose check _plain() leaves to the settings' pydantic model."""


def _plain(key: str, value: Any) -> Any:
    """``value`` of setting ``key`` checked as the settings' pydantic model checks it, and as it gives it back,
    where that takes no more than its type, its markers and its bounds: a value of the type declared already
    (what a config file, most variables and the command line's flags give), within its bounds; else
    ``_UNSURE``: the model (built for it, which costs a tenth of a second of imports) checks it, converts it
    (``"800"``, ``"off"`` from a variable) or says what is wrong with it."""
    try:
        value = _plain_of(settings.FIELDS[key].declared, value)
    except Exception:  # noqa: BLE001  # _Unsure, or a marker's check that failed: the model says it
        return _UNSURE
    checks = bounds(key)
    below = ("ge" in checks and value < checks["ge"]) or ("gt" in checks and value <= checks["gt"])
    if below or ("le" in checks and value > checks["le"]):
        return _UNSURE
    return value


def _plain_of(declared: Any, value: Any) -> Any:
    """``value`` as type ``declared`` (Annotated's :class:`Before` and :class:`After` applied); raises
    _Unsure where the type is not one of the plain ones or the value not exactly of it (a subclass, text
    to convert, a number that is not finite)."""
    origin = get_origin(declared)
    if origin is Annotated:
        base, *marks = get_args(declared)
        for mark in marks:
            value = mark.fn(value) if isinstance(mark, Before) else value
        value = _plain_of(base, value)
        for mark in marks:
            value = mark.fn(value) if isinstance(mark, After) else value
        return value
    if declared in (str, int, bool) and type(value) is declared:
        return value
    if declared == str | None and (value is None or type(value) is str):
        return value
    if declared == int | float and type(value) in (int, float) and math.isfinite(value):
        return value
    if origin is Literal and type(value) is str and value in get_args(declared):
        return value
    if origin is list and type(value) is list:
        return [_plain_of(get_args(declared)[0], item) for item in value]
    raise _Unsure(declared)


def _first_per_key(e: ValidationError) -> list[ErrorDetails]:
    first: dict[Any, ErrorDetails] = {}
    for err in e.errors():
        first.setdefault(err["loc"][0], err)
    return list(first.values())


def _explain(err: ErrorDetails, values: Mapping[str, Any], origin: str) -> str:
    """One failed check as a sentence: the key, what it must be, what it got and where from."""
    key = str(err["loc"][0])
    got = values[key]
    if err["type"] == "mdrag":  # our own check: the message says it, about the one item of a list it is about
        if isinstance(got, list) and len(err["loc"]) > 1:
            got = got[int(err["loc"][1])]
        hint = (err.get("ctx") or {}).get("hint")
        return f"{key} {err['msg']}, got {got!r} (from the {origin})" + (f"; {hint}" if hint else "")
    if err["type"] in ("greater_than", "greater_than_equal", "less_than_equal"):
        return f"{key} must be {_bounds(key)}, got {got!r} (from the {origin})"
    return f"{key} must be {_kind(key)}, got {got!r} (from the {origin})"


def _kind(key: str) -> str:
    ann = settings.FIELDS[key].annotation
    values = choices(key)
    if values is not None:
        return "one of " + ", ".join(values)
    if get_origin(ann) is list:
        return "a list of strings"
    kinds = {bool: "true or false", int: "an integer", int | float: "a number"}
    return next((text for typ, text in kinds.items() if ann == typ), "a string")


def _bounds(key: str) -> str:
    b = bounds(key)
    ge, gt, le = b.get("ge"), b.get("gt"), b.get("le")
    if le is not None:
        return f"between {ge} and {le}"
    if gt is not None:
        return f"more than {gt}"
    return "0 or more" if ge == 0 else f"at least {ge}"


def _closest(key: str) -> str | None:
    """The known setting ``key`` was most likely meant to be (a typo), if any is close."""
    match = difflib.get_close_matches(key, settings.FIELDS, n=1, cutoff=0.6)
    return match[0] if match else None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    try:
        if path.suffix == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:
                import tomli as tomllib

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


def config_file(home: Path) -> Path | None:
    """The config file in ``home`` that is read: the first of config.yaml, config.yml, config.toml that exists.

    When more than one exists, a warning says which one is used and that the others are ignored.
    """
    found = [home / name for name in CONFIG_FILES if (home / name).is_file()]
    if len(found) > 1:
        log.warning(
            "using the config file %s; %s ignored: merge its settings into %s and delete it",
            found[0],
            " and ".join(str(p) for p in found[1:]) + (" is" if len(found) == 2 else " are"),
            found[0].name,
        )
    return found[0] if found else None


def load_config(overrides: Mapping[str, Any] | None = None, home: Path | None = None) -> Config:
    """Resolve every setting; ``overrides`` are dotted keys from flags or code."""
    home = home or home_dir()
    values = {k: copy.deepcopy(default) for k, (_, default) in settings.DEFAULTS.items()}
    sources = dict.fromkeys(values, "default")
    layers = [
        ("env", f"environment variable {var}", {key: os.environ[var]})
        for var, key in settings.ENV_VARS.items()
        if os.environ.get(var)
    ]
    file = config_file(home)
    if file is not None:
        layers.append(("file", f"config file {file}", _read_file(file)))
    for source, origin, layer in layers:
        for k, v in _check(layer, origin, strict=source == "file").items():
            values[k] = v
            sources[k] = source
    cfg = Config(values, home, sources, file)
    return cfg.with_overrides(overrides or {})
