"""An optional reranker: it reorders a search's best fused results before the threshold and the cut to k.

Two kinds, chosen by the ``rerank.*`` settings (:func:`from_config`; neither set: no reranker):

* :class:`HttpReranker` posts to a ``/rerank`` endpoint in the shape that llama.cpp's server, vLLM,
  Jina, Cohere, Infinity and LiteLLM share: ``{"model", "query", "documents", "top_n"}`` answered by
  ``{"results": [{"index", "relevance_score"}, ...]}``. The API key goes in the ``Authorization``
  header and nowhere else (never in a log record or a message); redirects are refused.
* :class:`LocalReranker` runs a sentence-transformers ``CrossEncoder`` from a folder the user gives;
  nothing is downloaded.

The search core (:mod:`mdrag.retrieval.search`) asks :meth:`Reranker.score` once per search for its best
``top_n`` visible rows and puts them first, best reranker score first; the other rows follow in the fused
order. The threshold and ``search.collapse`` then apply as without a reranker, and a result's ``score`` is
still its cosine: reranking only reorders. A reranker that fails in any way (no answer within
``rerank.timeout``, an HTTP error, a malformed answer, a model that will not load) leaves the fused order
with one warning that names it and says why: a search never fails because of its reranker.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.errors import ConfigError
from mdrag.extras import require_extra
from mdrag.httperrors import server_message
from mdrag.knobs import MAX_ERROR_BODY, MAX_RERANK_ANSWER
from mdrag.redact import redact, redact_url
from mdrag.store.base import Hit

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = ["OFF", "HttpReranker", "LocalReranker", "Reranker", "from_config", "reorder"]

logger = logging.getLogger(__name__)

#: Overrides that turn the reranker off (``mdrag eval --rerank`` measures without it too).
OFF: Mapping[str, str] = {"rerank.url": "", "rerank.path": ""}


class _Failed(Exception):
    """Why a reranker gave no scores, in words fit for the warning (no secret in them)."""


class Reranker(ABC):
    """Scores documents against a query; :meth:`score` never raises: a failure is one warning."""

    def __init__(self, shown: str, top_n: int, timeout: float) -> None:
        self.shown = shown  # what the warnings name: the endpoint (redacted) or the model folder
        self.top_n = top_n  # how many of a search's best fused rows it reorders
        self.timeout = timeout  # seconds a search waits for its scores
        self.failures = 0  # searches that kept the fused order because this reranker failed
        self._lock = threading.Lock()  # guards failures (searches run in several threads)

    @abstractmethod
    def _scores(self, query: str, documents: list[str]) -> dict[int, float]:
        """The score of each document by its position in ``documents`` (some may be missing); raises
        :class:`_Failed` or any exception when there are none."""

    def score(self, query: str, rows: Sequence[Hit]) -> dict[str, float]:
        """The reranker's score of each of the first ``top_n`` of ``rows``, by chunk id; empty when it
        failed (logged once, as a warning that names it and the reason)."""
        head = list(rows[: self.top_n])
        if not head:
            return {}
        started = time.monotonic()
        try:
            scores = self._scores(query, [_document(r) for r in head])
        except Exception as e:  # whatever happened, the search goes on in the fused order
            reason = (str(e) if isinstance(e, _Failed) else f"{type(e).__name__}: {e}").rstrip(".")
            with self._lock:
                self.failures += 1
            logger.warning("reranker %s failed: %s; these results keep the fused order", self.shown, reason)
            return {}
        logger.debug("reranker %s scored %d rows in %.3f s", self.shown, len(head), time.monotonic() - started)
        return {head[i].id: s for i, s in scores.items()}


def _document(row: Hit) -> str:
    """What the reranker reads of a chunk: its heading trail (as embedded), then its text."""
    return f"{row.context}\n\n{row.text}" if row.context else row.text


def reorder(rows: Sequence[Hit], scores: Mapping[str, float]) -> list[Hit]:
    """``rows`` with those ``scores`` holds first, highest score first (ties keep the fused order), then
    the others in the fused order."""
    scored = sorted((r for r in rows if r.id in scores), key=lambda r: -scores[r.id])
    return scored + [r for r in rows if r.id not in scores]


class HttpReranker(Reranker):
    """A ``/rerank`` endpoint (see the module's docstring for its shape).

    Args:
        url: the full endpoint, e.g. ``http://127.0.0.1:8080/v1/rerank``.
        model: sent as ``model`` when given (Jina and Cohere need one; llama.cpp ignores it).
        api_key: sent as ``Authorization: Bearer <key>`` when given.
        top_n: rows reordered per search.
        timeout: seconds a search waits for the whole answer.
    """

    def __init__(
        self, url: str, model: str | None = None, api_key: str | None = None, top_n: int = 20, timeout: float = 10.0
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(
                f"rerank.url must be an http:// or https:// URL such as 'http://127.0.0.1:8080/v1/rerank', "
                f"got {redact_url(url)!r}: set rerank.url to the reranker's full /rerank endpoint"
            )
        super().__init__(f"at {redact_url(url)}", top_n, timeout)
        self.url = url  # where requests go (the key is never in it; user:password@ is redacted when shown)
        self.model = model or None  # the model name sent in each request; None: not sent
        self._api_key = api_key or None  # secret: only ever written into the Authorization header
        import httpx2

        # One client per reranker: connections are kept alive between searches; redirects refused (a POST
        # must not move, nor its key with it); every step of a request waits at most `timeout`.
        self._client = httpx2.Client(follow_redirects=False, timeout=timeout)

    def __repr__(self) -> str:
        return f"HttpReranker({self.shown!r}, model={self.model!r}, api_key={'set' if self._api_key else 'none'})"

    def _scores(self, query: str, documents: list[str]) -> dict[int, float]:
        import httpx2

        body: dict[str, Any] = {"query": query, "documents": documents, "top_n": len(documents)}
        if self.model:
            body = {"model": self.model, **body}
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        deadline = time.monotonic() + self.timeout
        try:
            with self._client.stream("POST", self.url, json=body, headers=headers) as response:
                raw = bytearray()
                limit = MAX_RERANK_ANSWER if response.status_code == 200 else MAX_ERROR_BODY
                for piece in response.iter_bytes():
                    raw += piece
                    if time.monotonic() > deadline:
                        raise _Failed(f"no whole answer within {self.timeout:g} s (rerank.timeout)")
                    if len(raw) > limit:
                        raise _Failed(f"its answer is longer than {limit} bytes")
        except httpx2.TimeoutException:
            raise _Failed(f"no answer within {self.timeout:g} s (rerank.timeout)") from None
        except httpx2.HTTPError as e:
            raise _Failed(f"cannot reach it: {redact(str(e) or type(e).__name__, self._api_key)}") from None
        if response.status_code != 200:
            said = server_message(bytes(raw), self._api_key)
            raise _Failed(f"HTTP {response.status_code}" + (f": {said}" if said else ""))
        return _results(bytes(raw), len(documents))


def _results(raw: bytes, count: int) -> dict[int, float]:
    """The scores in a ``/rerank`` answer, by document position; :class:`_Failed` when it is not
    ``{"results": [{"index": i, "relevance_score": s}, ...]}`` with each ``i`` one of the ``count``
    documents sent, at most once."""
    try:
        answer = json.loads(raw)
    except ValueError:
        raise _Failed(f"its answer is not JSON: {raw[:60].decode('utf-8', 'replace')!r}") from None
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list):
        raise _Failed('its answer has no "results" list')
    scores: dict[int, float] = {}
    for n, item in enumerate(results):
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get("relevance_score") if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count or index in scores:
            raise _Failed(f"result {n} names document {index!r}, not one of the {count} sent (or twice)")
        if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
            raise _Failed(f"result {n} has no numeric relevance_score: {score!r}")
        scores[index] = float(score)
    return scores


class LocalReranker(Reranker):
    """A sentence-transformers ``CrossEncoder`` loaded from ``path`` (no download), on ``device``.

    It loads at its first search (that wait is not counted in ``timeout``); each scoring then runs in
    one worker thread, and a search waits at most ``timeout`` for it.
    """

    def __init__(self, path: str, top_n: int = 20, timeout: float = 10.0, device: str = "cpu") -> None:
        folder = Path(path).expanduser()
        if not (folder / "config.json").is_file():
            missing = "does not exist" if not folder.exists() else "holds no model (no config.json)"
            raise ConfigError(
                f"rerank.path {str(folder)!r} {missing}: give the folder of a sentence-transformers "
                f"CrossEncoder model saved on this machine (nothing is downloaded), or unset rerank.path"
            )
        require_extra("torch", f"rerank.path {str(folder)!r} (a local CrossEncoder)", ("sentence_transformers",))
        super().__init__(f"model {folder}", top_n, timeout)
        self.path = folder  # the model's folder
        self.device = device  # torch device it runs on (embedding.device)
        self._model: Any = None  # the CrossEncoder, loaded at the first search
        self._load_error: str | None = None  # why it could not be loaded: not tried again
        self._load_lock = threading.Lock()  # one load, however many searches start at once
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mdrag-rerank")  # the scoring, under a time limit

    def _loaded(self) -> Any:
        with self._load_lock:
            if self._model is None and self._load_error is None:
                try:
                    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bar
                    from sentence_transformers import CrossEncoder

                    self._model = CrossEncoder(str(self.path), device=self.device, local_files_only=True)
                except Exception as e:  # a damaged folder, a missing file: every search says so, none fails
                    self._load_error = f"cannot load it: {type(e).__name__}: {e}"
            if self._load_error is not None:
                raise _Failed(self._load_error)
            return self._model

    def _scores(self, query: str, documents: list[str]) -> dict[int, float]:
        model = self._loaded()
        pending = self._pool.submit(model.predict, [(query, d) for d in documents], show_progress_bar=False)
        try:
            scores = pending.result(timeout=self.timeout)
        except FutureTimeout:
            raise _Failed(f"no scores within {self.timeout:g} s (rerank.timeout)") from None
        return {i: float(s) for i, s in enumerate(scores)}


def from_config(config: Config) -> Reranker | None:
    """The reranker the ``rerank.*`` settings ask for; None when neither ``rerank.url`` nor ``rerank.path``
    is set. ConfigError: both are set, the URL is not http(s), or the folder holds no model."""
    url, path = config["rerank.url"] or None, config["rerank.path"] or None
    top_n, timeout = int(config["rerank.top_n"]), float(config["rerank.timeout"])
    if url and path:
        raise ConfigError(
            "rerank.url and rerank.path are both set: set one, an HTTP reranker or a local CrossEncoder folder"
        )
    if url:
        return HttpReranker(url, config["rerank.model"], config["rerank.api_key"], top_n, timeout)
    if path:
        return LocalReranker(path, top_n, timeout, config["embedding.device"])
    return None
