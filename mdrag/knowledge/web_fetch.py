"""One polite, bounded HTTP GET for the website crawler: address checks, size and time limits, Retry-After.

A config file may come from a project a user has just cloned, so a host that resolves to a loopback,
private, link-local or otherwise non-public address is refused unless the config sets
``allow_local_web: true``; the connection goes to the address checked, not to what a second lookup of the
host answers (DNS rebinding). Redirects are not followed here: the crawler checks each target's scope.
"""

from __future__ import annotations

import http.client
import ipaddress
import logging
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit, urlunsplit

from mdrag.version import __version__

__all__ = ["USER_AGENT", "FetchError", "Response", "browser_url", "check_address", "fetch"]

log = logging.getLogger(__name__)

USER_AGENT = f"mdrag/{__version__} (docset crawler; +https://github.com/mdrag/mdrag)"
MAX_RETRY_AFTER = 60.0  # seconds: a longer Retry-After ends the page instead of stalling the crawl
#: IPv6 ranges whose last 32 bits are an IPv4 address a gateway may reach (NAT64, IPv4-compatible)
_CARRY_IPV4 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("::/96"))


_URL_SAFE = "/%:@!$&'()*+,;=-._~"  # kept as they are in a path: RFC 3986's pchar, and escapes already made


def browser_url(url: str) -> str:
    """``url`` as a browser sends it: characters a URL cannot hold as they are (non-ASCII, spaces, quotes) in
    its path and query percent-encoded as UTF-8, a non-ASCII host name in IDNA; escapes already made stay."""
    parts = urlsplit(url.strip())
    netloc = parts.netloc
    if not netloc.isascii() and parts.hostname:
        try:
            host = parts.hostname.encode("idna").decode("ascii")
        except UnicodeError:  # not a name IDNA can write: left as it is, and refused when it is resolved
            host = parts.hostname
        auth = netloc.rpartition("@")[0]
        netloc = (auth + "@" if auth else "") + host + (f":{parts.port}" if parts.port else "")
    path = quote(parts.path, safe=_URL_SAFE)
    query = quote(parts.query, safe=_URL_SAFE + "?")
    return urlunsplit((parts.scheme, netloc, path, query, quote(parts.fragment, safe=_URL_SAFE + "?")))


class FetchError(Exception):
    """A page could not be fetched; the message says why (it is logged and the crawl goes on)."""


@dataclass
class Response:
    """What a GET returned: status, lower-cased headers and at most the size limit of body."""

    url: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def check_address(host: str, port: int, allow_local: bool) -> list[str]:
    """The addresses ``host`` resolves to, which the connection is then made to (never resolved again).

    Raises FetchError when it resolves to none, or to a non-public address and ``allow_local`` is off; an
    IPv6 address that carries an IPv4 one (mapped, 6to4, NAT64, compatible) is judged by that one too.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise FetchError(f"cannot resolve {host}: {exc}; check the url and your connection") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise FetchError(f"cannot resolve {host}: no address; check the url and your connection")
    for address in addresses if not allow_local else ():
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if not _public(ip):
            raise FetchError(
                f"{host} resolves to {ip}, a loopback, private or reserved address, which is refused unless "
                "the config sets `allow_local_web: true`"
            )
    return addresses


def _public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if not ip.is_global or ip.is_multicast:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and any(ip in net for net in _CARRY_IPV4):
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return _public(embedded)
    return True


class _Pinned(http.client.HTTPConnection):
    """An HTTP connection to the checked ``addresses`` (tried in turn), never to what the host resolves to later."""

    def __init__(self, host: str, port: int, addresses: list[str], timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.addresses = addresses  # what check_address let through: a second lookup could answer otherwise

    def connect(self) -> None:
        self.sock = self.raw = _connect(self.addresses, self.port, self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    """An HTTPS connection to the checked ``addresses``; the certificate and SNI are still the host name's."""

    def __init__(self, host: str, port: int, addresses: list[str], timeout: float) -> None:
        self.tls = ssl.create_default_context()  # verifies the certificate against the host name
        self.tls.set_alpn_protocols(["http/1.1"])
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.addresses = addresses  # what check_address let through: a second lookup could answer otherwise

    def connect(self) -> None:
        self.raw = _connect(self.addresses, self.port, self.timeout)
        self.sock = self.tls.wrap_socket(self.raw, server_hostname=self.host)


def _connect(addresses: list[str], port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to the first of ``addresses`` that answers (as socket.create_connection tries them)."""
    error: OSError = OSError("no address to connect to")
    for address in addresses:
        try:
            return socket.create_connection((address, port), timeout)
        except OSError as exc:
            error = exc
    raise error


def fetch(
    url: str,
    *,
    allow_local: bool,
    timeout: float,
    max_bytes: int,
    headers: dict[str, str] | None = None,
) -> Response:
    """GET ``url`` once (one retry after a 429/503 with a short Retry-After); redirects come back as responses.

    ``timeout`` bounds each request whole (connecting, the headers, the body), not only each read: a server
    that sends one byte a second is cut at ``timeout``. Raises FetchError for an unsupported scheme, a refused
    address, a timeout, a connection error or a body over ``max_bytes``.
    """
    url = browser_url(url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"{url}: only http and https URLs are crawled")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    addresses = check_address(parts.hostname, port, allow_local)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sent = {"User-Agent": USER_AGENT, "Accept": "text/html, text/markdown;q=0.9, text/plain;q=0.5", **(headers or {})}
    for attempt in (0, 1):
        conn = (_PinnedTLS if parts.scheme == "https" else _Pinned)(parts.hostname, port, addresses, timeout)
        cut = threading.Event()  # set when the request ran out of time and its connection was cut
        timer = threading.Timer(timeout, _cut, (conn, cut))
        timer.daemon = True
        timer.start()
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
            if cut.is_set():
                raise OSError("cut")
        except TimeoutError as exc:
            raise FetchError(f"{url}: no answer within {timeout:g} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            if cut.is_set():
                why = f"no answer within {timeout:g} s (the whole page must arrive in that time)"
                raise FetchError(f"{url}: {why}") from exc
            raise FetchError(f"{url}: {type(exc).__name__}: {exc}") from exc
        finally:
            timer.cancel()
            conn.close()
        if resp.status in (429, 503) and attempt == 0:
            wait = _retry_after(got.get("retry-after"))
            if wait is not None and wait <= MAX_RETRY_AFTER:
                log.info("%s answered %s; retrying after %.0f s as asked", url, resp.status, wait)
                time.sleep(wait)
                continue
        return Response(url, resp.status, got, body)
    raise AssertionError("unreachable")  # pragma: no cover


def _cut(conn: _Pinned | _PinnedTLS, cut: threading.Event) -> None:
    """End a request that ran out of time: its socket is shut, so the read under way returns at once (the
    connection's own ``sock`` is None once a response that closes the connection took it over)."""
    cut.set()
    sock = getattr(conn, "raw", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed
            pass


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
