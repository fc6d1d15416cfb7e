"""Settings: command-line flags > config file > environment > defaults.

The config file is ``$MDRAG_HOME/config.yaml`` or ``config.toml`` (home
defaults to ``~/.md-qa``). Keys are nested sections; flags and code give them
as dotted names (``chunk.size``). :class:`Settings` describes every setting
once: its type, default, checks and help text (the README's settings table is
made from it: ``mdrag config --markdown``). A setting is one field there.
"""

from __future__ import annotations

import copy
import difflib
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import annotated_types
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from mdrag.errors import ConfigError
from mdrag.redact import redact_url

__all__ = [
    "DEFAULTS",
    "DEFAULT_EMBEDDING_MODELS",
    "ENV_VARS",
    "INHERITS",
    "Config",
    "Settings",
    "home_dir",
    "load_config",
    "settings_table",
]

log = logging.getLogger(__name__)

_INDEX_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")  # also a collection and a file name
_CONFIG_FILES = ("config.yaml", "config.yml", "config.toml")  # in $MDRAG_HOME; the first that exists is read


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):  # YAML `size: yes`: True is an int to Python, not to a user
        raise ValueError("a boolean is not a number")
    return value


def _listify(value: Any) -> Any:
    return [value] if isinstance(value, str) else value  # `folders: ./docs` is a list of one


def _index_name(value: str) -> str:
    if not _INDEX_NAME.match(value):
        raise PydanticCustomError(
            "mdrag", "must start with a letter and hold only letters, digits and '_' (64 at most)"
        )
    return value


def _absolute_folder(value: str) -> str:
    """``value`` with ``~`` expanded and every link resolved; a relative folder is refused (relative to what?)."""
    p = Path(value).expanduser()
    if not p.is_absolute():
        raise PydanticCustomError(
            "mdrag",
            "must list absolute folders (or ones starting with ~)",
            {"hint": "write the full path, e.g. ~/docs/react"},
        )
    return str(p.resolve())


Int = Annotated[int, BeforeValidator(_not_bool)]
Number = Annotated[int | float, BeforeValidator(_not_bool)]
StrList = Annotated[list[str], BeforeValidator(_listify)]
IndexName = Annotated[str, AfterValidator(_index_name)]
FolderList = Annotated[list[Annotated[str, AfterValidator(_absolute_folder)]], BeforeValidator(_listify)]


def setting(
    default: Any, help: str, *, env: str | None = None, shown: str | None = None, secret: bool = False, **checks: Any
) -> Any:
    """One setting's field: its default, one line of help, and optionally its environment variable, how the
    README shows a ``None`` default (``shown``), whether it is a secret, and range checks (``ge``, ``gt``, ``le``).
    """
    extra = {"env": env, "shown": shown, "secret": secret or None}
    return Field(
        default, description=help, json_schema_extra={k: v for k, v in extra.items() if v is not None}, **checks
    )


class Settings(BaseModel):
    """Every mdrag setting. A field ``section__name`` is the setting ``section.name``; ``None`` is "unset"."""

    model_config = ConfigDict(alias_generator=lambda name: name.replace("__", "."), frozen=True)

    index: IndexName = setting(
        "default",
        "index name (its FAISS store `<name>.sqlite`, or its Milvus collection `mdrag_<name>`)",
        env="MARKDOWN_QA_INDEX",
    )
    folders: StrList = setting(
        ["./markdown"],
        "folders `mdrag index` adds when none are given: the default only for an index that has no "
        "folders yet; a value you set is always added",
    )
    index__include: StrList = setting(
        [],
        "gitignore-style patterns relative to each folder: when set, only matching files are indexed "
        '(e.g. `["docs/**", "*.md"]`)',
    )
    index__exclude: StrList = setting(
        [],
        'gitignore-style patterns: matching files and folders are left out (e.g. `["drafts/", "*.draft.md"]`)',
    )
    index__gitignore: bool = setting(
        True,
        "honour `.gitignore` files inside the indexed folders",
    )
    index__max_file_mb: Number = setting(
        20,
        "files larger than this are skipped with a reason (`0`: no limit)",
        ge=0,
    )
    index__parse_timeout: Number = setting(
        120,
        "seconds one file may take to parse; files are parsed in a child process, which is stopped then, "
        "and the file is skipped with the reason",
        gt=0,
    )
    index__max_parse_mb: Number = setting(
        2048,
        "memory (MB) one file's parse may use in that process, then the file is skipped with the reason (`0`: no cap)",
        ge=0,
    )
    milvus_uri: str | None = setting(
        None,
        "a Milvus Lite file, or `http://host:19530` for a Milvus server (which `store.backend` `auto` then uses)",
        env="MARKDOWN_QA_MILVUS_URI",
        shown="`$MDRAG_HOME/cache/milvus.db`",
    )
    milvus_token: str | None = setting(
        None,
        "credentials for a Milvus server (`user:password` or a token)",
        secret=True,
        shown="unset",
    )
    store__backend: Literal["auto", "milvus", "faiss"] = setting(
        "auto",
        "where chunks and vectors are kept: `faiss` (an in-memory FAISS index and SQLite under the cache "
        "folder), `milvus` (a Milvus Lite file, or a server by `milvus_uri`), or `auto`: `milvus` when "
        "`milvus_uri` is a server, or for an index already in the Milvus Lite file; `faiss` otherwise "
        '(see "Two stores")',
        env="MDRAG_STORE",
    )
    api__base_url: str | None = setting(
        None,
        "OpenAI-compatible API base URL shared by `embedding` and `llm`",
        env="MARKDOWN_QA_API_BASE_URL",
        shown="unset",
    )
    api__api_key: str | None = setting(
        None,
        "its API key; never logged",
        env="MARKDOWN_QA_API_KEY",
        secret=True,
        shown="unset",
    )
    embedding__provider: Literal["local", "openai"] = setting(
        "local",
        "`local` (sentence-transformers) or `openai` (an OpenAI-compatible `/v1/embeddings`)",
        env="MARKDOWN_QA_EMBEDDING_PROVIDER",
    )
    embedding__model: str | None = setting(
        None,
        "model name; for `local`, the packaged MiniLM or a local model folder",
        env="MARKDOWN_QA_EMBEDDING_MODEL",
        shown="all-MiniLM-L6-v2 / `text-embedding-3-small`",
    )
    embedding__base_url: str | None = setting(
        None,
        "embedding endpoint, when it differs from the LLM's",
        shown="`api.base_url`",
    )
    embedding__api_key: str | None = setting(
        None,
        "its key",
        secret=True,
        shown="`api.api_key`",
    )
    embedding__batch_size: Int = setting(
        32,
        "texts per model call",
        ge=1,
    )
    embedding__timeout: Number = setting(
        60,
        "seconds to wait for one answer of the embedding API (`openai`); a search's query waits at most 10",
        gt=0,
    )
    embedding__max_retries: Int = setting(
        5,
        "further requests to the embedding API after a failed one (408, 409, 429, 5xx, no answer) while indexing; a "
        "search's query makes at most one",
        ge=0,
    )
    embedding__device: str = setting(
        "cpu",
        "torch device for the local model",
    )
    embedding__backend: Literal["auto", "torch", "onnx", "openvino"] = setting(
        "auto",
        "how the local model runs: `onnx` (onnxruntime on an ONNX export made once with torch and cached "
        "under `$MDRAG_HOME/cache/models/`, no torch at query time), `torch` (sentence-transformers), "
        "`openvino` (OpenVINO on the same export; bf16 on CPUs that have it: the embedder alone about "
        "3.4x torch's speed, a full index of the Hugo docs 2.8x faster; imported with its usage telemetry"
        " off); `auto` picks `openvino`, then `onnx`, whichever is installed (`torch` when "
        "`embedding.device` is not `cpu`). All give the same vectors (cosine >= 0.9999 to torch), so an "
        "index works with any of them",
    )
    chunk__size: Int = setting(
        1000,
        "chunk size, in `chunk.unit`s",
    )
    chunk__overlap: Int = setting(
        200,
        "text shared by neighbouring chunks of one section",
    )
    chunk__unit: Literal["chars", "tokens"] = setting(
        "chars",
        "`chars`, or `tokens` (the embedder's word pieces)",
    )
    chunk__context: Literal["none", "headings", "frontmatter"] = setting(
        "frontmatter",
        'the header embedded and BM25-indexed with each chunk: `none`, `headings` ("title > heading '
        "path\"), or `frontmatter` (the same, plus the file's description, summary, tags, topics, keywords"
        ' and llm_hints on its first chunk); a change re-indexes. See "Chunking"',
    )
    chunk__path_words: bool = setting(
        False,
        "lead that header with the file's folder and file names as words (`content/en/docs/zero-"
        'code/java/agent/disable.md`: "zero code java agent disable"); off by default, it lowered hybrid '
        "nDCG@10 on the Hugo questions; a change re-indexes",
    )
    chunk__strategy: Literal["headings", "langchain"] = setting(
        "headings",
        "how sections become chunks: `headings` (by headings, to the model's window) or `langchain` "
        "(md-qa's MarkdownTextSplitter, `chunk.size`/`chunk.overlap` in `chunk.unit`s, 1000/200 characters by "
        "default; needs `pip install 'mdrag[langchain]'`); a change re-indexes",
    )
    search__k: Int = setting(
        10,
        "results per query",
        ge=1,
    )
    search__threshold: Number = setting(
        0.35,
        'minimum score; see "Relevance threshold" below',
        ge=0,
        le=1,
    )
    search__mode: Literal["dense", "bm25", "hybrid"] = setting(
        "hybrid",
        '`hybrid` (dense and BM25, fused), `dense` (MiniLM cosine) or `bm25` (full-text BM25); see "Search modes"',
    )
    search__fusion: Literal["rrf", "weighted"] = setting(
        "weighted",
        "how hybrid fuses the two rankings: `weighted` (each list's scores min-max normalised, then mixed"
        " by `search.dense_weight`; a clear first place in one list stays near the top) or `rrf` "
        "(reciprocal rank, k=60)",
    )
    search__dense_weight: Number = setting(
        0.5,
        "with `weighted` fusion: the dense side's share",
        ge=0,
        le=1,
    )
    search__stemming: bool = setting(
        True,
        "stem the BM25 text and queries (English Snowball, PyStemmer); a change re-indexes",
    )
    search__collapse: Literal["none", "section", "file"] = setting(
        "section",
        "keep only the best chunk of each `section` or each `file`, or `none`",
    )
    llm__base_url: str | None = setting(
        None,
        "chat completions endpoint (for the Q&A server)",
        shown="`api.base_url`",
    )
    llm__api_key: str | None = setting(
        None,
        "its key",
        secret=True,
        shown="`api.api_key`",
    )
    llm__model: str = setting(
        "qwen-flash",
        "chat model",
        env="MARKDOWN_QA_LLM_MODEL",
    )
    llm__timeout: Number = setting(
        60,
        "seconds to wait for the chat model before the answer becomes an error",
        gt=0,
    )
    answer__judge: Literal["llm", "scores"] = setting(
        "llm",
        "who decides that the documents do not answer: `llm`, when one is configured, reads the passages and "
        "says so (only a question with no result is refused before it); `scores`, and any answer without an "
        'LLM: `answer.min_score` and `answer.max_unknown`; see "Relevance threshold"',
    )
    answer__min_score: Number = setting(
        0.44,
        'with no LLM to judge (see `answer.judge`), answers are "no relevant information" when the best '
        'result scores lower; see "Relevance threshold"',
        ge=0,
        le=1,
    )
    answer__max_unknown: Number = setting(
        0.2,
        "... and when more than this share of the question's weight (idf) is on words that no chunk of "
        'the index holds; `1` turns it off; see "Relevance threshold"',
        ge=0,
        le=1,
    )
    server__host: str = setting(
        "127.0.0.1",
        "Q&A server address; anything but loopback needs `server.token`",
    )
    server__port: Int = setting(
        8765,
        "Q&A server port (`0`: a free one)",
        ge=0,
        le=65535,
    )
    server__reload_interval: Int = setting(
        300,
        "seconds between rescans in the Q&A server (the file watcher reacts sooner)",
        ge=1,
    )
    server__token: str | None = setting(
        None,
        "a token clients must send (`Authorization: Bearer …` or `?token=`); never logged",
        secret=True,
        shown="unset",
    )
    server__allowed_origins: StrList = setting(
        [],
        'browser origins allowed besides loopback pages, e.g. `["https://intranet.example"]`',
    )
    server__max_message_bytes: Int = setting(
        65536,
        "largest message a client may send (at most 1 MiB); larger ones get an error reply, and over 16 "
        "MiB the connection closes",
        ge=1024,
        le=1 << 20,
    )
    server__max_pending: Int = setting(
        8,
        "requests that may wait on one connection",
        ge=1,
    )
    knowledge__allowed_paths: FolderList = setting(
        [],
        "absolute folders (`~` allowed) outside a project that its docsets may be read from, e.g. "
        '`["~/docs"]`; each use is logged as a warning; `mdrag mcp` reads it when it starts. A project\'s '
        'own `.knowledge/config.yaml` cannot allow this (see "Documentation sets for AI assistants")',
    )


_FIELDS = {f.alias or name: f for name, f in Settings.model_fields.items()}


def _extra(key: str, name: str) -> Any:
    extra = _FIELDS[key].json_schema_extra
    return extra.get(name) if isinstance(extra, dict) else None


#: Every setting, by dotted key: (type, default). ``None`` defaults are "unset".
DEFAULTS: dict[str, tuple[Any, Any]] = {k: (f.annotation, f.default) for k, f in _FIELDS.items()}

#: md-qa environment variables and the settings they provide.
ENV_VARS: dict[str, str] = {_extra(k, "env"): k for k in _FIELDS if _extra(k, "env")}

#: Settings that, left unset, take the value of another: the shared API settings.
INHERITS: dict[str, str] = {
    "embedding.base_url": "api.base_url",
    "embedding.api_key": "api.api_key",
    "llm.base_url": "api.base_url",
    "llm.api_key": "api.api_key",
}

#: The embedding model of each ``embedding.provider`` when ``embedding.model`` is unset.
DEFAULT_EMBEDDING_MODELS: dict[str, str] = {
    "local": "sentence-transformers/all-MiniLM-L6-v2",
    "openai": "text-embedding-3-small",
}

_SECRETS = frozenset(k for k in _FIELDS if _extra(k, "secret"))


def _safe(key: str, value: Any) -> Any:
    if key in _SECRETS and value:
        return "***"
    return redact_url(value) if isinstance(value, str) and "://" in value else value  # user:password@host


def settings_table() -> str:
    """The README's settings table in Markdown: each setting, its default and its help, from :class:`Settings`."""
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for key, f in _FIELDS.items():
        default = f.default if isinstance(f.default, str) else json.dumps(f.default)
        env = _extra(key, "env")
        meaning = f"{f.description} (`{env}`)" if env else f.description
        rows.append(f"| `{key}` | {_extra(key, 'shown') or f'`{default}`'} | {meaning} |")
    return "\n".join(rows) + "\n"


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
        (:data:`DEFAULT_EMBEDDING_MODELS`), or the Milvus Lite file under the cache folder. The program
        reads inherited settings here, and `mdrag config` shows them from here."""
        value = self.values[key]
        if value is not None and value != "":  # an empty text is unset, as it always was
            return value
        if key in INHERITS:
            return self.values[INHERITS[key]]
        if key == "embedding.model":
            return DEFAULT_EMBEDDING_MODELS[self.values["embedding.provider"]]
        if key == "milvus_uri":
            return str(self.cache_dir / "milvus.db")
        return None

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    @property
    def milvus_uri(self) -> str:
        """The Milvus Lite file or server URI in effect (``milvus_uri``, or the file under the cache folder)."""
        uri: str = self.effective("milvus_uri")
        return uri

    def manifest_path(self, index: str | None = None) -> Path:
        return self.cache_dir / "manifests" / f"{index or self.values['index']}.json"

    def redacted(self) -> dict[str, Any]:
        """Values safe to print or log: secrets show only whether they are set."""
        return {k: _safe(k, v) for k, v in self.values.items()}

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
            return {"source": "environment", "variable": next(var for var, k in ENV_VARS.items() if k == key)}
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
        if isinstance(v, Mapping) and key not in DEFAULTS:
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
        if key not in _FIELDS:
            hint = _closest(key)
            if origin == "flag":
                raise ConfigError(f"unknown setting {key!r}" + (f"; did you mean {hint!r}?" if hint else ""))
            log.warning(
                "ignoring unknown setting %r in the %s%s", key, origin, f" (did you mean {hint!r}?)" if hint else ""
            )
        elif value is not None:
            known[key] = value
    try:
        checked = Settings.model_validate(known, strict=strict)
    except ValidationError as e:
        raise ConfigError("; ".join(_explain(err, known, origin) for err in _first_per_key(e))) from None
    dumped = checked.model_dump(by_alias=True)
    return {key: dumped[key] for key in known}


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
    ann = _FIELDS[key].annotation
    if get_origin(ann) is Literal:
        return "one of " + ", ".join(get_args(ann))
    if get_origin(ann) is list:
        return "a list of strings"
    kinds = {bool: "true or false", int: "an integer", int | float: "a number"}
    return next((text for typ, text in kinds.items() if ann == typ), "a string")


def _bounds(key: str) -> str:
    meta = _FIELDS[key].metadata
    ge = next((m.ge for m in meta if isinstance(m, annotated_types.Ge)), None)
    gt = next((m.gt for m in meta if isinstance(m, annotated_types.Gt)), None)
    le = next((m.le for m in meta if isinstance(m, annotated_types.Le)), None)
    if le is not None:
        return f"between {ge} and {le}"
    if gt is not None:
        return f"more than {gt}"
    return "0 or more" if ge == 0 else f"at least {ge}"


def _closest(key: str) -> str | None:
    """The known setting ``key`` was most likely meant to be (a typo), if any is close."""
    match = difflib.get_close_matches(key, _FIELDS, n=1, cutoff=0.6)
    return match[0] if match else None


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


def config_file(home: Path) -> Path | None:
    """The config file in ``home`` that is read: the first of config.yaml, config.yml, config.toml that exists.

    When more than one exists, a warning says which one is used and that the others are ignored.
    """
    found = [home / name for name in _CONFIG_FILES if (home / name).is_file()]
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
    values = {k: copy.deepcopy(default) for k, (_, default) in DEFAULTS.items()}
    sources = dict.fromkeys(values, "default")
    layers = [
        ("env", f"environment variable {var}", {key: os.environ[var]})
        for var, key in ENV_VARS.items()
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
