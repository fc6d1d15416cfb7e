"""Values a client sent, as error messages name them: short, and never the whole of a long one. No I/O.

Both front ends that take JSON from a client use it: the WebSocket protocol
(:mod:`mdrag.frontends.protocol`) and the MCP tools (:mod:`mdrag.frontends.mcp`), neither of which
imports the other.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["LONE_SURROGATE", "describe"]

LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # half of a UTF-16 pair: Python reads it from JSON, UTF-8 cannot hold it


def describe(value: Any) -> str:
    """A short description of a JSON value sent by a client, safe to put in an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if -(10**20) < value < 10**20:
            return str(value)
        digits = int(value.bit_length() * 0.30103) + 1  # str() of a huge integer is slow, and refused past 4,300
        return f"an integer of about {digits} digits (more than 20 digits)"
    if isinstance(value, float):
        return json.dumps(value)  # NaN, Infinity as JSON writes them
    if isinstance(value, str):
        if not value.strip():
            return "an empty string" if not value else "a blank string"
        if len(value) > 40:
            return f"a string of {len(value)} characters"
        return json.dumps(value, ensure_ascii=bool(LONE_SURROGATE.search(value)))  # a lone surrogate escaped
    if isinstance(value, list):
        return f"a list of {len(value)} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
