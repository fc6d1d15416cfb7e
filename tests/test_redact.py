"""mdrag.redact: what messages and logs may show of a URL or a text holding a key."""

from __future__ import annotations

import pytest

from mdrag.redact import redact, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:hunter2@example.com/x?y=1", "https://***@example.com/x?y=1"),
        ("https://ghp_abc123@github.com/o/r.git", "https://***@github.com/o/r.git"),
        ("ws://127.0.0.1:8765/?token=s3cret&x=1", "ws://127.0.0.1:8765/?token=***&x=1"),
        ("http://h/v1?api_key=k&API_KEY=k2", "http://h/v1?api_key=***&API_KEY=***"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://[::1", "<invalid URL>"),
        ("toy:///home/me/cache/toy/default", "toy:///home/me/cache/toy/default"),  # no host: kept as written
        ("file:///srv/x?token=t", "file:///srv/x?token=***"),
    ],
)
def test_redact_url_hides_user_info_and_secret_parameters(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_replaces_every_secret_and_ignores_empty_ones() -> None:
    assert redact("key sk-1 echoed: sk-1, tok", "sk-1", None, "", "tok") == "key *** echoed: ***, ***"
