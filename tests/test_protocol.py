"""`frontends.protocol.parse`, no sockets: every frame is a request or a ProtocolError that says what to change."""

from __future__ import annotations

import json

import pytest

from mdrag.errors import ProtocolError
from mdrag.frontends.protocol import (
    Filters,
    QueryRequest,
    SearchRequest,
    StatusRequest,
    error,
    parse,
    reply,
    request_id,
    stream_chunk,
)


def test_valid_messages_become_requests() -> None:
    assert parse('{"type": "status"}') == StatusRequest()
    assert parse(b'{"type": "query", "question": "  How? ", "index": "docs"}') == QueryRequest(
        question="How?", index="docs"
    )
    req = parse(
        json.dumps(
            {
                "type": "search",
                "query": "setup",
                "k": 5,
                "threshold": 0,
                "filters": {"path_prefix": "guides/", "tags": ["a", "b"], "root": "/srv/docs"},
            }
        )
    )
    assert req == SearchRequest(
        query="setup", k=5, threshold=0.0, filters=Filters(path_prefix="guides/", tags=["a", "b"], root="/srv/docs")
    )
    # Optional fields may be null or absent; what `mdrag search` sends through a server is accepted.
    assert parse('{"type": "search", "query": "x", "k": null, "threshold": 1, "filters": {}}') == SearchRequest(
        query="x", threshold=1.0, filters=Filters()
    )
    assert parse('{"type": "search", "query": "x", "filters": {"tags": "one"}}').filters == Filters(tags="one")


def test_a_request_id_is_taken_and_repeated_by_its_replies() -> None:
    assert parse('{"type": "query", "question": "How?", "id": "q-1"}') == QueryRequest(question="How?", id="q-1")
    assert parse('{"type": "search", "query": "x", "id": 7}').id == 7
    assert parse('{"type": "status", "id": -9007199254740991}').id == -(2**53 - 1)
    assert parse('{"type": "status", "id": null}').id is None
    assert reply(stream_chunk("a"), "q-1") == {"type": "stream_chunk", "id": "q-1", "chunk": "a"}
    assert reply(stream_chunk("a"), None) == {"type": "stream_chunk", "chunk": "a"}
    # a request the server refuses still has its id told, when it is a valid one
    assert request_id('{"type": "search", "id": "s2", "query": "x", "treshold": 0.5}') == "s2"
    assert request_id(b'{"type": "bogus", "id": 3}') == 3
    for frame in ('{"type": "status", "id": true}', "[1]", "{not json", '{"id": [1]}', b"\xff", '{"type": "status"}'):
        assert request_id(frame) is None, frame
    # an error that ends an answer carries the sources it was made from
    assert error("cut short", ["/a.md"], [{"path": "/a.md"}]) == {
        "type": "error",
        "message": "cut short",
        "sources": ["/a.md"],
        "locations": [{"path": "/a.md"}],
    }
    assert error("refused") == {"type": "error", "message": "refused"}


NESTED = [
    "[" * 1000 + "]" * 1000,
    '{"a":' * 1000 + "1" + "}" * 1000,
    "[" * 100_000,
    '{"type": "search", "query": "x", "filters": {"tags": ' + "[" * 5000 + "]" * 5000 + "}}",
    '{"type": "query", "question": "x", "extra": ' + '{"a": [' * 3000 + "]}" * 3000 + "}",
]


@pytest.mark.parametrize("frame", NESTED, ids=["arrays", "objects", "unclosed", "in-filters", "in-extra-field"])
def test_deeply_nested_json_is_an_error_not_a_crash(frame: str) -> None:
    with pytest.raises(ProtocolError, match="invalid JSON: recursion limit exceeded"):
        parse(frame)


BAD = [
    # (message, the words the error must contain)
    ({"type": "search", "query": "x", "filters": {"tags": 5}}, ['"tags" must be a tag or a list', "not 5"]),
    ({"type": "search", "query": "x", "filters": {"tags": ["a", 1]}}, ['"tags"', "item 2 is 1"]),
    ({"type": "search", "query": "x", "filters": {"tags": [str(i) for i in range(101)]}}, ["101 items"]),
    ({"type": "search", "query": "x", "filters": {"path_prefix": ["a"]}}, ['"path_prefix"', "a list"]),
    ({"type": "search", "query": "x", "filters": {"root": {}}}, ['"root"', "an object"]),
    ({"type": "search", "query": "x", "filters": {"root": "/" + "d" * 5000}}, ['"root" is too long (5001']),
    ({"type": "search", "query": "x", "filters": {"nope": "a"}}, ['unknown filter "nope"', "path_prefix, tags, root"]),
    ({"type": "search", "query": "x", "filters": []}, ['"filters" must be an object']),
    ({"type": "search", "query": "x", "filters": "tags=a"}, ['"filters" must be an object']),
    ({"type": "search", "query": "x", "k": True}, ['"k" must be an integer from 1 to 100, not true']),
    ({"type": "search", "query": "x", "k": 5.0}, ['"k" must be an integer', "not 5.0"]),
    ({"type": "search", "query": "x", "k": "5"}, ['"k" must be an integer', 'not "5"']),
    ({"type": "search", "query": "x", "k": 0}, ['"k" must be an integer from 1 to 100, not 0']),
    ({"type": "search", "query": "x", "k": 10**300}, ['"k"', "more than 20 digits"]),
    ({"type": "search", "query": "x", "threshold": False}, ['"threshold" must be a number from 0 to 1, not false']),
    ({"type": "search", "query": "x", "threshold": 1.5}, ['"threshold"', "not 1.5"]),
    ({"type": "search", "query": "x", "threshold": "0.5"}, ['"threshold"']),
    (
        {"type": "search", "query": "x", "tresholt": 0.5},
        ['unknown field "tresholt" in a "search" message', "threshold"],
    ),
    ({"type": "query", "question": "x", "filters": {}}, ['unknown field "filters" in a "query" message']),
    ({"type": "status", "verbose": True}, ['unknown field "verbose" in a "status" message: use id']),
    ({"type": "status", "id": True}, ['"id" must be a string of at most 200 characters or an integer', "not true"]),
    ({"type": "status", "id": 1.5}, ['"id" must be', "not 1.5"]),
    ({"type": "status", "id": [1]}, ['"id" must be', "a list of 1 item"]),
    ({"type": "status", "id": "x" * 201}, ['"id" must be', "a string of 201 characters"]),
    ({"type": "status", "id": 2**53}, ['"id" must be', "an integer from -9007199254740991 to 9007199254740991"]),
    ({"type": "query", "question": ["x"]}, ['"question" must be a non-empty string', "a list of 1 item"]),
    ({"type": "query", "question": "   "}, ['"question" must be a non-empty string', "blank"]),
    ({"type": "query", "question": "x" * 5000}, ['"question" is too long (5000 characters, at most 4000)']),
    ({"type": "query", "question": "x", "index": ""}, ['"index" must be an index name']),
    ({"type": "query", "question": "x", "index": 7}, ['"index" must be an index name', "not 7"]),
    ({"type": "query"}, ['a "query" message needs a "question" field']),
    ({"type": "search", "question": "x"}, ['a "search" message needs a "query" field']),
    ({"type": "ask", "question": "x"}, ['unknown message type "ask": use one of query, search, status']),
    ({"type": 5}, ["unknown message type 5"]),
    ({"question": "x"}, ['a message needs a "type" field']),
    ([1, 2], ['a message must be a JSON object with a "type" field, not a list of 2 items']),
    ("status", ["must be a JSON object", 'not "status"']),
]


@pytest.mark.parametrize("message, words", BAD, ids=[str(i) for i in range(len(BAD))])
def test_wrong_fields_say_which_and_what_to_send(message: object, words: list[str]) -> None:
    with pytest.raises(ProtocolError) as e:
        parse(json.dumps(message))
    for w in words:
        assert w in str(e.value), (message, str(e.value))
    assert len(str(e.value)) < 300, "the error never echoes a long value"


RAW = [
    # Frames json.dumps would not write: the parser's own checks.
    ('{"type": "query", "question": "\\ud800"}', ["invalid JSON", "surrogate", "valid Unicode"]),
    ('{"type": "query", "question": "a\\udc00b"}', ["invalid JSON", "valid Unicode"]),
    ('{"type": "search", "query": "x", "k": ' + "9" * 5000 + "}", ["invalid JSON: number out of range"]),
    ('{"type": "search", "query": "x", "threshold": NaN}', ['"threshold" must be a number from 0 to 1, not NaN']),
    ('{"type": "search", "query": "x", "threshold": Infinity}', ['"threshold"', "not Infinity"]),
    ('{"type": "search", "query": "x", "k": -Infinity}', ['"k" must be an integer', "not -Infinity"]),
    ('{"type": "query", "question": "a\tb"}', ["invalid JSON: control character"]),
    ('{"type": "status"} {"type": "status"}', ["invalid JSON: trailing characters"]),
    ("{not json", ["invalid JSON"]),
    ("", ["invalid JSON"]),
    (b'{"type": "query", "question": "\xff"}', ["messages must be UTF-8 JSON text"]),
]


@pytest.mark.parametrize("frame, words", RAW, ids=[str(i) for i in range(len(RAW))])
def test_frames_that_are_not_plain_json(frame: str | bytes, words: list[str]) -> None:
    with pytest.raises(ProtocolError) as e:
        parse(frame)
    for w in words:
        assert w in str(e.value), (frame[:60], str(e.value))
    assert "set_int_max_str_digits" not in str(e.value)
