"""Who may use a server of mdrag's: the rules the WebSocket server (`mdrag serve`) and the MCP server over
HTTP (`mdrag mcp --http`) share. No I/O.

- :func:`check_bind`: an address other than loopback needs a token (``server.token``).
- :func:`origin_allowed`: a browser page may connect from a loopback origin or one listed in
  ``server.allowed_origins``; any other origin is refused (against DNS rebinding and cross-site pages), and
  so is a header that is not exactly one origin (``scheme://host[:port]``: two listed, a path, spaces).
- :func:`token_problem`: the token comes as ``Authorization: Bearer …`` or ``?token=``, compared in
  constant time; a request without one and a request with a wrong one are told apart
  (:data:`TOKEN_REFUSALS`).
- :func:`repeated_header`: a request that sends ``Host``, ``Origin``, ``Sec-Fetch-Site`` or ``Authorization``
  more than once is refused whatever the values (:func:`repeated_refusal`): one check could read one value and
  another part of the server the other (an allowed origin first, another site's second).
- :func:`cannot_listen`: what a server that could not listen tells the user to change.
"""

from __future__ import annotations

import errno
import hmac
import re
from collections.abc import Iterable, Sequence
from http import HTTPStatus
from typing import Literal
from urllib.parse import parse_qs, urlsplit

from mdrag.errors import ConfigError, MdragError
from mdrag.frontends.protocol import is_loopback

__all__ = [
    "SINGLE_HEADERS",
    "TOKEN_REFUSALS",
    "cannot_listen",
    "check_bind",
    "origin_allowed",
    "repeated_header",
    "repeated_refusal",
    "token_problem",
]

# One serialized origin (RFC 6454): scheme "://" host [":" port], nothing else: no space (a list of
# origins), no path, query, fragment or user name.
_ONE_ORIGIN = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?:\[[0-9A-Fa-f:.]+\]|[^\s/?#@\[\]:,]+)(?::[0-9]{1,5})?")


def check_bind(host: str, token: str | None) -> None:
    """Refuse (ConfigError) to listen on ``host`` when it reaches beyond this machine and no token is set."""
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"binding to {host} exposes your documents to the network: set a token with "
            "--token (setting server.token), or bind to 127.0.0.1"
        )


def origin_allowed(origin: str, allowed: Sequence[str]) -> bool:
    """Whether a request with this ``Origin`` header may be served: a loopback page, or one of ``allowed``.

    The header must be exactly one origin: a list of several (``http://127.0.0.1:1 https://evil.example``),
    which a browser never sends for a page of its own, is refused whatever it starts with."""
    if not _ONE_ORIGIN.fullmatch(origin):
        return False
    if origin in allowed:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and is_loopback(parts.hostname or "")


#: The headers a request may send at most once, each with the status of the refusal of a request that sends
#: it twice: the origin checks cannot tell which page sent it (403); several Hosts or tokens are a malformed
#: request (400: RFC 9110 for Host, RFC 6750 for a token sent twice).
SINGLE_HEADERS = {
    "origin": HTTPStatus.FORBIDDEN,
    "sec-fetch-site": HTTPStatus.FORBIDDEN,
    "host": HTTPStatus.BAD_REQUEST,
    "authorization": HTTPStatus.BAD_REQUEST,
}


def repeated_header(names: Iterable[str]) -> str | None:
    """The first of :data:`SINGLE_HEADERS` (lower case) that a request's header ``names``, one per header line
    as it was sent, hold more than once; None when each comes once at most."""
    seen: set[str] = set()
    for name in names:
        key = name.lower()
        if key in SINGLE_HEADERS:
            if key in seen:
                return key
            seen.add(key)
    return None


def repeated_refusal(name: str) -> tuple[HTTPStatus, str]:
    """The status and message of the refusal of a request that sends the header ``name`` (from
    :func:`repeated_header`) more than once."""
    shown = "-".join(part.capitalize() for part in name.split("-"))
    return SINGLE_HEADERS[name], f"The request sends several {shown} headers: send one."


#: What a server says (HTTP 401) to a request without its token, and to one with a wrong token.
TOKEN_REFUSALS = {
    "missing": "This server needs a token, and none was sent: send it as Authorization: Bearer <token>.",
    "wrong": "The token sent is wrong: send the valid token (the server's server.token).",
}


def token_problem(authorization: str | None, target: str, token: str) -> Literal["missing", "wrong"] | None:
    """What is wrong with the token of a request (None: it carries ``token``): in its ``Authorization:
    Bearer`` header, or else in the ``token`` query parameter of its ``target`` (the path and query it
    asked for); "missing" when it sends none, "wrong" when it sends another."""
    auth = authorization or ""
    if auth.lower().startswith("bearer "):
        given = auth[7:].strip()
    else:
        given = parse_qs(urlsplit(target).query).get("token", [""])[0]
    if hmac.compare_digest(given.encode(), token.encode()):
        return None
    return "wrong" if given else "missing"


def cannot_listen(e: OSError, host: str, port: int, command: str, port_setting: str) -> MdragError:
    """The error of ``command`` (`mdrag serve`, `mdrag mcp --http`) that could not listen on ``host``:``port``:
    the port taken by another program, or an address that is not this machine's."""
    hint = (
        f"another program (another `{command}`?) listens there: pick another port with --port"
        if e.errno == errno.EADDRINUSE
        else f"check server.host (--host) and {port_setting} (--port)"
    )
    return MdragError(f"cannot listen on {host}:{port} ({e.strerror or e}): {hint}")
