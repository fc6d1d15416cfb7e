"""What an OpenAI-compatible API is sent, and what it said when it refused a request, made fit to show.

Shared by the embedding client and the chat client: both send the headers of
:func:`auth_headers` through the openai client, and quote the server's own
error message (OpenAI's ``{"error": {"message": ...}}``, FastAPI's
``{"detail": ...}``, or plain text), with secrets removed, on one line.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from mdrag.redact import redact

if TYPE_CHECKING:
    import openai  # imported by auth_headers only: a search that quotes a reranker's error needs none of it

__all__ = ["MAX_SERVER_MESSAGE", "NO_KEY", "auth_headers", "one_line", "server_message"]

NO_KEY = "no-key"  # the openai client needs a key; auth_headers(None) keeps it from being sent

MAX_SERVER_MESSAGE = 300  # characters of a server's error text we quote


def auth_headers(api_key: str | None) -> dict[str, str | openai.Omit]:
    """Headers for each request's ``extra_headers``: the settings' key, or none.

    They keep what the environment holds for other tools (``OPENAI_API_KEY``,
    an ``Authorization`` in ``OPENAI_CUSTOM_HEADERS``, ``OPENAI_ORG_ID``,
    ``OPENAI_PROJECT_ID``) from reaching mdrag's servers.
    """
    import openai  # only its callers (the chat and embedding clients) load the SDK

    return {
        "Authorization": f"Bearer {api_key}" if api_key else openai.Omit(),
        "OpenAI-Organization": openai.Omit(),
        "OpenAI-Project": openai.Omit(),
    }


def server_message(raw: bytes, *secrets: str | None) -> str:
    """The error text in a response body: one line, ``secrets`` (API keys) redacted, at most 300 characters."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            text = err if isinstance(err, str) else json.dumps(err)
    return one_line(text, *secrets)


def one_line(text: str, *secrets: str | None) -> str:
    """A server's error text fit to quote: one line, ``secrets`` redacted, at most 300 characters."""
    text = " ".join(redact(text, *secrets).split())
    if len(text) > MAX_SERVER_MESSAGE:
        text = text[: MAX_SERVER_MESSAGE - 3] + "..."
    return text
