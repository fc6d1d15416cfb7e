"""The JSON-RPC lines a client sends to the MCP server: which the SDK may read, and the error that answers
the others. Pure functions: no I/O, no threads (:mod:`mdrag.frontends.mcp.stdio` reads the lines and sends the answers).

The SDK's stdio transport drops a line it cannot parse and takes a request
with an unusable ``id`` for a notification; every line is therefore checked
here first (:func:`check_message`), and one the SDK should not read is answered
per JSON-RPC 2.0 (``-32700`` parse error, ``-32600`` invalid request, ``-32602``
invalid params), with the request's ``id`` when it has a usable one, else
``id: null``; notifications and responses are never answered.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from mcp import types
from pydantic import ValidationError

from mdrag.frontends.mcp.schema import TOOL_NAMES
from mdrag.frontends.received import LONE_SURROGATE
from mdrag.knobs import MCP_MAX_DEPTH

__all__ = ["check_message", "error_reply", "not_utf8_reply", "oversized_reply"]

log = logging.getLogger(__name__)


class _Unusable:
    """A JSON value this server cannot take: NaN or an infinity, or an integer beyond 64 bits."""

    def __init__(self, what: str) -> None:
        self.what = what  # why, as the error message says it


def _parse_int(text: str) -> int | _Unusable:
    digits = len(text.lstrip("-"))
    if digits <= 18:
        return int(text)
    value = int(text) if digits <= 19 else None  # longer ones are not even converted (quadratic)
    if value is not None and -(2**63) <= value < 2**63:
        return value
    return _Unusable(f"an integer of {digits} digits: numbers must fit in 64 bits")


def _parse_constant(text: str) -> _Unusable:
    return _Unusable(f"{text}, which is not a JSON number")


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


def _problem(msg: dict[str, Any]) -> tuple[str, str] | None:
    """The first value of ``msg`` this server cannot take, as (where, what), or None."""
    stack: list[tuple[str, Any, int]] = [("", msg, 0)]
    while stack:
        where, value, depth = stack.pop()
        if depth > MCP_MAX_DEPTH:
            return where, f"nested more than {MCP_MAX_DEPTH} levels deep"
        if isinstance(value, _Unusable):
            return where, value.what
        if isinstance(value, str):
            found = LONE_SURROGATE.search(value)
            if found:
                return where, f"text with a lone surrogate ({json.dumps(found.group())}): send valid Unicode"
        elif isinstance(value, dict):
            for key, item in reversed(value.items()):
                if LONE_SURROGATE.search(key):
                    return where, f"a key with a lone surrogate ({json.dumps(key[:40])}): send valid Unicode"
                name = key if _NAME.fullmatch(key) else json.dumps(key[:40])
                stack.append((f"{where}.{name}" if where else name, item, depth + 1))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item, depth + 1) for i, item in reversed(list(enumerate(value))))
    return None


def _kind(value: Any) -> str:
    """What a JSON value is, for an error message (its text is not repeated)."""
    if isinstance(value, _Unusable):
        return value.what
    if isinstance(value, str):
        return "text with a lone surrogate"
    if isinstance(value, float):
        return f"the number {value!r}"
    return {dict: "an object", list: "an array", bool: "a boolean", int: "an integer", str: "text"}.get(
        type(value), "null"
    )


def error_reply(id_: str | int | None, code: int, message: str) -> types.JSONRPCError:
    """The JSON-RPC error that answers request ``id_`` (None: a line whose ``id`` is unknown)."""
    return types.JSONRPCError(jsonrpc="2.0", id=id_, error=types.ErrorData(code=code, message=message))


def check_message(line: str) -> tuple[bool, types.JSONRPCError | None]:
    """Whether the SDK may read ``line``, and the error reply the client gets instead (None: no reply).

    The SDK's transport drops a line it cannot parse, takes a request whose
    ``id`` is not a string or an integer for a notification, and fails on a
    lone surrogate or an integer of 4,300 digits: such lines are answered here,
    per JSON-RPC 2.0, with the request's ``id`` when it has a usable one. A
    well-formed notification or a response is never answered, only logged.
    """
    if not line.strip():
        return False, None
    try:
        msg = json.loads(line, parse_int=_parse_int, parse_constant=_parse_constant)
    except RecursionError:
        return False, error_reply(None, types.PARSE_ERROR, f"Parse error: nested more than {MCP_MAX_DEPTH} levels deep")
    except ValueError as e:
        where = f" ({e.msg}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
        return False, error_reply(None, types.PARSE_ERROR, f"Parse error: the message is not valid JSON{where}")
    if not isinstance(msg, dict):
        what = "a batch (an array) is not supported: send" if isinstance(msg, list) else "send"
        return False, error_reply(
            None, types.INVALID_REQUEST, f"Invalid Request: {what} one JSON-RPC 2.0 object per line"
        )
    rid = msg.get("id")
    usable = (isinstance(rid, int) and not isinstance(rid, bool)) or (
        isinstance(rid, str) and not LONE_SURROGATE.search(rid)
    )
    is_response = "method" not in msg and ("result" in msg or "error" in msg)
    problem = _problem(msg)
    if is_response:  # the client's answer to a request of the server's
        if usable and msg.get("jsonrpc") == "2.0" and problem is None and _invalid(line) is None:
            return True, None
        log.warning("malformed response from the client, dropped: %s", line[:200])
        return False, None
    reply_id = rid if usable else None
    if "id" in msg and not usable:
        return False, error_reply(
            None, types.INVALID_REQUEST, f'Invalid Request: "id" must be a string or an integer, got {_kind(rid)}'
        )
    if msg.get("jsonrpc") != "2.0":
        return False, error_reply(reply_id, types.INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    method = msg.get("method")
    if method is None:
        return False, error_reply(
            reply_id, types.INVALID_REQUEST, 'Invalid Request: no "method": a request has "method", "id" and "params"'
        )
    if not isinstance(method, str) or not method:
        return False, error_reply(
            reply_id, types.INVALID_REQUEST, 'Invalid Request: "method" must be a non-empty string, e.g. "tools/list"'
        )
    # A request or a notification: what is wrong now is in its content.
    message: str | None
    code, message = types.INVALID_PARAMS, None
    params = msg.get("params")
    if problem is not None:
        if not problem[0].startswith("params"):
            code = types.INVALID_REQUEST
        message = f"{problem[0]} is {problem[1]}"
    elif "params" in msg and not isinstance(params, dict):
        message = f'"params" must be an object, got {_kind(params)}'
    elif method == "tools/call" and isinstance(params, dict) and not isinstance(params.get("name"), str):
        message = f'"params.name" must be a tool name: {", ".join(TOOL_NAMES)}'
    elif method == "tools/call" and isinstance(params, dict) and not isinstance(params.get("arguments", {}), dict):
        message = '"params.arguments" must be an object, e.g. {"query": "..."}'
    else:
        code, message = types.INVALID_REQUEST, _invalid(line)
    if message is None:
        return True, None
    message = ("Invalid params: " if code == types.INVALID_PARAMS else "Invalid Request: ") + message
    if not usable:  # a notification: never answered
        log.warning("malformed notification from the client, dropped: %s", message)
        return False, None
    return False, error_reply(reply_id, code, message)


def _invalid(line: str) -> str | None:
    """Why the SDK refuses ``line`` as a JSON-RPC message, or None when it takes it."""
    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as e:
        first = e.errors()[0] if e.errors() else {"msg": str(e), "loc": ()}
        where = ".".join(str(p) for p in first["loc"][1:]) or "the message"
        return f"{where}: {first['msg']}"
    return None


def oversized_reply(limit: int) -> types.JSONRPCError:
    """The answer to a line longer than ``limit`` bytes, which the transport skips unread."""
    return error_reply(None, types.INVALID_REQUEST, f"Invalid Request: the message is over {limit // 2**20} MiB")


def not_utf8_reply(e: UnicodeDecodeError) -> types.JSONRPCError:
    """The answer to a line that is not UTF-8: JSON-RPC over stdio is UTF-8, and guessing would change the request."""
    return error_reply(
        None,
        types.PARSE_ERROR,
        f"Parse error: not UTF-8 text ({e.reason} at byte {e.start}); JSON-RPC messages are UTF-8 JSON",
    )
