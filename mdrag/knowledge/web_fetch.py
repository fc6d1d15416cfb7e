"""One polite, bounded HTTP GET for the website crawler: address checks, size and time limits, Retry-After.

A config file may come from a project a user has just cloned, so a host that resolves to a loopback,
private, link-local or otherwise non-public address is refused unless the config sets
``allow_local_web: true``. Redirects are not followed here: the crawler checks each target's scope.
"""

from __future__ import annotations

import http.client
import ipaddress
import logging
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from mdrag.version import __version__

__all__ = ["USER_AGENT", "FetchError", "Response", "check_address", "fetch"]

log = logging.getLogger(__name__)

USER_AGENT = f"mdrag/{__version__} (docset crawler; +https://github.com/mdrag/mdrag)"
MAX_RETRY_AFTER = 60.0  # seconds: a longer Retry-After ends the page instead of stalling the crawl


class FetchError(Exception):
    """A page could not be fetched; the message says why (it is logged and the crawl goes on)."""


@dataclass
class Response:
    """What a GET returned: status, lower-cased headers and at most the size limit of body."""

    url: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def check_address(host: str, port: int, allow_local: bool) -> None:
    """Raise FetchError when ``host`` resolves to a non-public address and ``allow_local`` is off."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise FetchError(f"cannot resolve {host}: {exc}; check the url and your connection") from exc
    if allow_local:
        return
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not ip.is_global or ip.is_multicast:
            raise FetchError(
                f"{host} resolves to {ip}, a loopback, private or reserved address, which is refused unless "
                "the config sets `allow_local_web: true`"
            )


def fetch(
    url: str,
    *,
    allow_local: bool,
    timeout: float,
    max_bytes: int,
    headers: dict[str, str] | None = None,
) -> Response:
    """GET ``url`` once (one retry after a 429/503 with a short Retry-After); redirects come back as responses.

    Raises FetchError for an unsupported scheme, a refused address, a timeout, a
    connection error or a body over ``max_bytes``.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"{url}: only http and https URLs are crawled")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    check_address(parts.hostname, port, allow_local)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sent = {"User-Agent": USER_AGENT, "Accept": "text/html, text/markdown;q=0.9, text/plain;q=0.5", **(headers or {})}
    for attempt in (0, 1):
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.hostname, port, timeout=timeout)
        else:
            conn = http.client.HTTPConnection(parts.hostname, port, timeout=timeout)
        try:
            conn.request("GET", target, headers=sent)
            resp = conn.getresponse()
            got = {k.lower(): v for k, v in resp.getheaders()}
            declared = got.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise FetchError(f"{url}: {declared} bytes, over the {max_bytes}-byte page limit")
            body = resp.read(max_bytes + 1)
            if len(body) > max_bytes:
                raise FetchError(f"{url}: over the {max_bytes}-byte page limit")
        except TimeoutError as exc:
            raise FetchError(f"{url}: no answer within {timeout:.0f} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise FetchError(f"{url}: {type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()
        if resp.status in (429, 503) and attempt == 0:
            wait = _retry_after(got.get("retry-after"))
            if wait is not None and wait <= MAX_RETRY_AFTER:
                log.info("%s answered %s; retrying after %.0f s as asked", url, resp.status, wait)
                time.sleep(wait)
                continue
        return Response(url, resp.status, got, body)
    raise AssertionError("unreachable")  # pragma: no cover


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
