"""Secrets out of what users and logs see: the one place mdrag redacts URLs and keys."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["redact", "redact_url"]

_SECRET_PARAMS = frozenset({"token", "access_token", "api_key", "apikey", "key", "password", "secret"})


def redact_url(url: str) -> str:
    """``url`` for messages: any ``user:password@`` part (often a token) and secret query values become ``***``."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rsplit("@", 1)[1] if "@" in parts.netloc else parts.netloc
        netloc = f"***@{host}" if "@" in parts.netloc else host
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            query = urlencode([(k, "***" if k.lower() in _SECRET_PARAMS else v) for k, v in pairs], safe="*")
    except ValueError:
        return "<invalid URL>"
    if netloc == parts.netloc and query == parts.query:  # nothing hidden: as written ("toy:///a" stays whole)
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with every non-empty secret (an API key, a token) replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
