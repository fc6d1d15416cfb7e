"""Embedder for any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

Works with OpenAI itself and with servers that speak the same format (vLLM,
llama.cpp, Ollama's ``/v1``, LiteLLM, text-embeddings-inference ...). Requests
go through the official ``openai`` client, which retries and times them out;
the answers are checked here, strictly, since not every server is OpenAI.

The API key is sent in the ``Authorization`` header and nowhere else: it never
appears in a log record, an exception message or ``repr()``, and it is not
forwarded when a server answers with a redirect (redirects are refused).
``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` from the environment are not used.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import httpx2
import numpy as np
import openai

from mdrag.embedding.base import Embedder, EmbedderBackend
from mdrag.errors import ConfigError, EmbeddingError
from mdrag.httperrors import NO_KEY, auth_headers, server_message
from mdrag.knobs import MAX_ERROR_BODY
from mdrag.redact import redact, redact_url

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = ["OpenAIEmbedder"]

logger = logging.getLogger(__name__)

DIMENSION_PROBE = "dimension probe"  # text embedded to learn the dimension
RETRIED_4XX = frozenset({408, 409, 429})  # the openai client retries these and every 5xx
QUERY_TIMEOUT_S = 10.0  # a search's query waits at most this long for one answer
QUERY_RETRIES = 1  # and makes at most this many further requests: a search fails in about 20 s, not minutes


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
        max_retries: further attempts after a 408, 409, 429, 5xx, connection
            error or timeout (so at most ``max_retries + 1`` requests per
            batch); the openai client waits 0.5 s, then twice as long each
            time (at most 8 s), or what the server's ``Retry-After`` says.
        dimension: the vector length if known; otherwise learned from the
            first response.

    Raises:
        EmbeddingError: when a setting is invalid.
    """

    @classmethod
    def from_config(cls, config: Config) -> OpenAIEmbedder:
        """The embedder of ``embedding.*`` (``api.*`` where those are unset)."""
        base_url = config.effective("embedding.base_url")
        if not base_url:
            raise ConfigError(
                "embedding.provider is 'openai' but no base URL is set: set embedding.base_url "
                "or MARKDOWN_QA_API_BASE_URL"
            )
        return cls(
            base_url,
            api_key=config.effective("embedding.api_key"),
            model=config.effective("embedding.model"),
            batch_size=max(config["embedding.batch_size"], 1),
            timeout=float(config["embedding.timeout"]),
            max_retries=int(config["embedding.max_retries"]),
        )

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str = "text-embedding-3-small",
        batch_size: int = 64,
        timeout: float = 60.0,
        max_retries: int = 5,
        dimension: int | None = None,
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
        # Secret; only ever given to the openai client, which writes it into the Authorization header.
        self._api_key: str | None = api_key or None
        # Vector length: given, or learned from the first response (None until then).
        self._dimension: int | None = dimension
        # This thread's request: attempts so far and why the last one failed (for the retry warnings).
        self._attempt: threading.local = threading.local()
        # Retries, timeouts and typed errors; redirects refused (a POST must not move, nor the key with it).
        self._client: openai.OpenAI = openai.OpenAI(
            base_url=base_url.rstrip("/"),
            api_key=self._api_key or NO_KEY,
            timeout=timeout,
            max_retries=max_retries,
            http_client=httpx2.Client(
                follow_redirects=False,
                event_hooks={"request": [self._on_request], "response": [self._on_response]},
            ),
        )

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

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query; returns a (dimension,) vector.

        A search waits for it: at most QUERY_TIMEOUT_S per answer (or embedding.timeout, when shorter) and
        QUERY_RETRIES further requests (or embedding.max_retries), where indexing may wait minutes.
        """
        self._attempt.query = True
        try:
            vector: np.ndarray = self.embed([text])[0]
            return vector
        finally:
            self._attempt.query = False

    @cached_property
    def _query_client(self) -> openai.OpenAI:
        """The client of :meth:`embed_query`: the same connection pool, a search's time budget."""
        return self._client.with_options(
            timeout=min(self.timeout, QUERY_TIMEOUT_S), max_retries=min(self.max_retries, QUERY_RETRIES)
        )

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
        payload = self._post(texts)
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

    def _post(self, texts: list[str]) -> bytes:
        """POST the texts (the openai client retries); returns the body of a 2xx answer."""
        query = getattr(self._attempt, "query", False)
        client = self._query_client if query else self._client
        self._attempt.count = 0
        self._attempt.failure = ""
        self._attempt.retries = client.max_retries
        try:
            raw = client.embeddings.with_raw_response.create(
                model=self.model,
                input=texts,
                encoding_format="float",
                extra_headers=auth_headers(self._api_key),
            )
            return raw.http_response.content
        except openai.APIStatusError as exc:
            status = exc.status_code
            detail = server_message(exc.response.content[:MAX_ERROR_BODY], self._api_key)
            if status in (401, 403):
                raise EmbeddingError(
                    f"{self.url} rejected the API key (HTTP {status}): set embedding.api_key or MARKDOWN_QA_API_KEY"
                ) from None
            if status not in RETRIED_4XX and status < 500:
                raise EmbeddingError(self._client_error(status, detail, exc.response)) from None
            last = f"HTTP {status}" + (f": {detail}" if detail else "")
        except openai.APIConnectionError as exc:  # timeouts included
            last = _describe_connection_error(exc)
        attempts = max(self._attempt.count, 1)
        more = (
            f"; a search waits at most {client.timeout:g} s per attempt"
            if query
            else ", or raise embedding.max_retries or embedding.timeout if it is overloaded"
        )
        raise EmbeddingError(
            f"embedding endpoint {self.url} still failing after {attempts} attempt"
            f"{'s' if attempts != 1 else ''} (last error: {last}): check that the "
            f"server is running and embedding.base_url is right{more}"
        )

    def _on_request(self, request: httpx2.Request) -> None:
        """Event hook before each attempt: count it, and warn when it retries a failed one."""
        self._attempt.count += 1  # set to 0 by _post, in this same thread
        retry = self._attempt.count - 1
        if retry:
            logger.warning(
                "Embedding request to %s failed (%s); retry %d of %d",
                self.url,
                self._attempt.failure or "no answer: the connection failed or timed out",
                retry,
                self._attempt.retries,
            )
        self._attempt.failure = ""

    def _on_response(self, response: httpx2.Response) -> None:
        """Event hook after each answer: remember why it failed, for the retry's warning."""
        if not response.is_success:
            response.read()
            detail = server_message(response.content[:MAX_ERROR_BODY], self._api_key)
            self._attempt.failure = f"HTTP {response.status_code}" + (f": {detail}" if detail else "")

    def _client_error(self, status: int, detail: str, response: httpx2.Response) -> str:
        """Message for a non-retryable HTTP error."""
        msg = f"{self.url} refused the request (HTTP {status})"
        if detail:
            msg += f": {detail}"
        if 300 <= status < 400:
            location = redact_url(redact(response.headers.get("Location") or "", self._api_key))
            return f"{msg}: it redirects to {location or 'another URL'}; set embedding.base_url to the final URL"
        if status == 404:
            return f"{msg}: check embedding.base_url (it usually ends in /v1) and embedding.model"
        return f"{msg}: check embedding.model and the input"

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
            text = redact(payload[:4096].decode("utf-8", "replace"), self._api_key)
            snippet = " ".join(text[:80].split())  # redacted before it is cut
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


def _describe_connection_error(exc: openai.APIConnectionError) -> str:
    """A short reason for a failure before any HTTP status arrived."""
    if isinstance(exc, openai.APITimeoutError):
        return "timed out"
    cause: BaseException | None = exc.__cause__
    seen = 0
    while cause is not None and seen < 10:  # the OS error is a few links down the chain
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    reason = exc.__cause__ or exc
    return f"connection error: {str(reason) or type(reason).__name__}"


#: This embedder, as the ``mdrag.embedders`` entry point ``openai`` registers it (pyproject.toml).
EMBEDDER = EmbedderBackend(name="openai", embedder=OpenAIEmbedder.from_config)
