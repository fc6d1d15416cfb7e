"""Embedder for any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

Works with OpenAI itself and with servers that speak the same format (vLLM,
llama.cpp, Ollama's ``/v1``, LiteLLM, text-embeddings-inference ...). Only the
standard library is used for HTTP.

The API key is sent in the ``Authorization`` header and nowhere else: it never
appears in a log record, an exception message or ``repr()``, and it is not
forwarded when a server answers with a redirect (redirects are refused).
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np

from mdrag.embedding.base import Embedder
from mdrag.errors import EmbeddingError
from mdrag.httperrors import server_message

__all__ = ["OpenAIEmbedder"]

logger = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})  # worth another try
MAX_DELAY = 30.0  # seconds; no single wait between retries is longer
DIMENSION_PROBE = "dimension probe"  # text embedded to learn the dimension

_sleep = time.sleep  # indirection so tests can record the waits


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: urllib would turn the POST into a GET and drop the body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class OpenAIEmbedder(Embedder):
    """Embeds texts with an OpenAI-compatible embeddings endpoint.

    >>> e = OpenAIEmbedder("http://127.0.0.1:8000/v1", model="bge-small")  # doctest: +SKIP
    >>> e.embed(["hello", "world"]).shape  # doctest: +SKIP
    (2, 384)

    Args:
        base_url: the API root, e.g. ``"https://api.openai.com/v1"``; the
            embedder posts to ``{base_url}/embeddings``.
        api_key: sent as ``Authorization: Bearer <key>`` when given.
        model: the model name the server expects.
        batch_size: texts per request.
        timeout: seconds to wait for one response.
        max_retries: further attempts after a 429, 5xx, connection error or
            timeout (so at most ``max_retries + 1`` requests per batch).
        dimension: the vector length if known; otherwise learned from the
            first response.
        backoff: first wait between retries in seconds, doubled each time
            (a numeric ``Retry-After`` header wins); no wait exceeds 30 s.

    Raises:
        EmbeddingError: when a setting is invalid.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str = "text-embedding-3-small",
        batch_size: int = 64,
        timeout: float = 60.0,
        max_retries: int = 5,
        dimension: int | None = None,
        backoff: float = 0.5,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url or "")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise EmbeddingError(
                f"embedding.base_url must be an http:// or https:// URL such as "
                f"'http://127.0.0.1:8000/v1', got {base_url!r}: set embedding.base_url"
            )
        if not model:
            raise EmbeddingError("embedding.model is empty: set it to the server's model name")
        if batch_size < 1:
            raise EmbeddingError(f"embedding.batch_size must be at least 1, got {batch_size}")
        if not timeout > 0:
            raise EmbeddingError(f"embedding.timeout must be positive, got {timeout}")
        if max_retries < 0:
            raise EmbeddingError(f"embedding.max_retries must be 0 or more, got {max_retries}")
        if not backoff >= 0:
            raise EmbeddingError(f"embedding.backoff must be 0 or more, got {backoff}")
        if dimension is not None and dimension < 1:
            raise EmbeddingError(f"embedding.dimension must be at least 1, got {dimension}")

        # Where requests go; shown in error messages (it never holds the key).
        self.url: str = base_url.rstrip("/") + "/embeddings"
        # The model name sent in each request body.
        self.model: str = model
        # Recorded with the index; the prefix keeps it apart from local model ids.
        self.model_id: str = f"openai:{model}"
        # Texts per request; the base class's embed() splits input by it.
        self.batch_size: int = batch_size
        # Seconds to wait for one response before counting it as a failure.
        self.timeout: float = timeout
        # Extra attempts after a retryable failure before giving up.
        self.max_retries: int = max_retries
        # First wait between retries in seconds; doubled on each further retry.
        self.backoff: float = backoff
        # Secret; only ever written into the Authorization header.
        self._api_key: str | None = api_key or None
        # Vector length: given, or learned from the first response (None until then).
        self._dimension: int | None = dimension
        # Our own opener: proxies read from the environment now, redirects refused.
        self._opener: urllib.request.OpenerDirector = urllib.request.build_opener(_NoRedirect)

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"OpenAIEmbedder(url={self.url!r}, model={self.model!r}, api_key={key})"

    @property
    def dimension(self) -> int:
        """Length of each vector; embeds a short probe text if not yet known."""
        if self._dimension is None:
            self.embed_batch([DIMENSION_PROBE])
        assert self._dimension is not None  # set by embed_batch or it raised
        return self._dimension

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in one request; returns an (n, dimension) float32 array.

        The vectors are returned as the server sent them; ``embed()`` normalizes.

        Raises:
            EmbeddingError: the server could not be reached, refused the
                request, or sent a response that is not a valid embeddings list.
        """
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        body = json.dumps({"model": self.model, "input": texts}).encode("utf-8")
        payload = self._post(body)
        vectors = self._parse(payload, len(texts))
        if self._dimension is None:
            self._dimension = vectors.shape[1]
        elif vectors.shape[1] != self._dimension:
            raise EmbeddingError(
                f"{self.url} returned vectors of dimension {vectors.shape[1]}, expected "
                f"{self._dimension}: check embedding.model and embedding.dimension"
            )
        return vectors

    # -- HTTP -----------------------------------------------------------------

    def _request(self, body: bytes) -> urllib.request.Request:
        req = urllib.request.Request(self.url, data=body, method="POST")
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        req.add_header("User-Agent", "mdrag")
        if self._api_key:
            # Unredirected: never copied onto a request to another URL.
            req.add_unredirected_header("Authorization", f"Bearer {self._api_key}")
        return req

    def _post(self, body: bytes) -> bytes:
        """POST with retries; returns the response body of a 2xx answer."""
        attempts = self.max_retries + 1
        last = ""
        for attempt in range(attempts):
            retry_after: float | None = None
            try:
                with self._opener.open(self._request(body), timeout=self.timeout) as resp:
                    return bytes(resp.read())
            except urllib.error.HTTPError as exc:
                status = exc.code
                detail = self._server_message(exc)
                exc.close()
                if status in (401, 403):
                    raise EmbeddingError(
                        f"{self.url} rejected the API key (HTTP {status}): set embedding.api_key or MARKDOWN_QA_API_KEY"
                    ) from None
                if status not in RETRY_STATUSES:
                    raise EmbeddingError(self._client_error(status, detail, exc)) from None
                last = f"HTTP {status}" + (f": {detail}" if detail else "")
                retry_after = _parse_retry_after(exc.headers.get("Retry-After"))
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                last = _describe_connection_error(exc)
            if attempt + 1 >= attempts:
                break
            delay = retry_after if retry_after is not None else self.backoff * 2**attempt
            delay = min(delay, MAX_DELAY)
            logger.warning(
                "Embedding request to %s failed (%s); retrying in %.2f s (retry %d of %d)",
                self.url,
                last,
                delay,
                attempt + 1,
                self.max_retries,
            )
            _sleep(delay)
        raise EmbeddingError(
            f"embedding endpoint {self.url} still failing after {attempts} attempt"
            f"{'s' if attempts != 1 else ''} (last error: {last}): check that the "
            f"server is running and embedding.base_url is right, or raise "
            f"embedding.max_retries if it is overloaded"
        )

    def _client_error(self, status: int, detail: str, exc: urllib.error.HTTPError) -> str:
        """Message for a non-retryable HTTP error."""
        msg = f"{self.url} refused the request (HTTP {status})"
        if detail:
            msg += f": {detail}"
        if 300 <= status < 400:
            location = self._redact(exc.headers.get("Location") or "")
            return f"{msg}: it redirects to {location or 'another URL'}; set embedding.base_url to the final URL"
        if status == 404:
            return f"{msg}: check embedding.base_url (it usually ends in /v1) and embedding.model"
        return f"{msg}: check embedding.model and the input"

    def _server_message(self, exc: urllib.error.HTTPError) -> str:
        """The server's error text, from ``{"error": {"message": ...}}`` or the raw body."""
        try:
            raw = exc.read(64 * 1024)
        except (OSError, http.client.HTTPException):
            return ""
        return server_message(raw, self._redact)

    def _redact(self, text: str) -> str:
        """Remove the API key should a server echo it back."""
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return text

    # -- response ---------------------------------------------------------------

    def _parse(self, payload: bytes, n: int) -> np.ndarray:
        """Check an embeddings response and return its vectors in input order."""

        def bad(what: str) -> EmbeddingError:
            return EmbeddingError(
                f"{self.url} sent a malformed embeddings response ({what}): check that "
                f"embedding.base_url points at an OpenAI-compatible /v1 API"
            )

        try:
            doc = json.loads(payload)
        except ValueError:
            snippet = " ".join(self._redact(payload[:80].decode("utf-8", "replace")).split())
            raise bad(f"not JSON: {snippet!r}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
            raise bad("no 'data' list")
        data: list[Any] = doc["data"]
        if len(data) != n:
            raise bad(f"{len(data)} embeddings for {n} texts")
        rows: list[Any] = [None] * n
        for pos, item in enumerate(data):
            if not isinstance(item, dict) or "embedding" not in item:
                raise bad(f"item {pos} has no 'embedding'")
            index = item.get("index", pos)
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
                raise bad(f"item {pos} has index {index!r}, expected 0 to {n - 1}")
            if rows[index] is not None:
                raise bad(f"index {index} appears twice")
            rows[index] = item["embedding"]
        lengths = {len(r) if isinstance(r, list) else -1 for r in rows}
        if -1 in lengths:
            raise bad("an 'embedding' is not a list of numbers")
        if len(lengths) != 1:
            raise bad(f"vectors of different lengths {sorted(lengths)}")
        if 0 in lengths:
            raise bad("empty vectors")
        try:
            vectors = np.array(rows, dtype=np.float32)
        except (TypeError, ValueError):
            raise bad("an 'embedding' is not a list of numbers") from None
        if not np.isfinite(vectors).all():
            raise bad("non-finite values")
        return vectors


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds from a numeric ``Retry-After`` header; None if absent or a date."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def _describe_connection_error(exc: BaseException) -> str:
    """A short reason for a failure before any HTTP status arrived."""
    reason: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return "timed out"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    text = str(reason) or type(reason).__name__
    return f"connection error: {text}"
