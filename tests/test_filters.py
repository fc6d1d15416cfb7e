"""Filter literals are quoted by one function, and hold against a real Milvus Lite."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from mdrag.errors import ConfigError
from mdrag.retrieval.search import build_filter
from mdrag.store.milvus import filters as f


def expr(filters: dict[str, Any]) -> str:
    """The Milvus expression of a search's filters: the neutral Filter, translated."""
    return f.to_expr(build_filter(filters))


def test_quote_escapes_quotes_backslashes_and_line_breaks() -> None:
    assert f.quote("plain") == '"plain"'
    assert f.quote('a"b') == '"a\\"b"'
    assert f.quote("a\\b") == '"a\\\\b"'
    assert f.quote("it's") == '"it\'s"'
    assert f.quote("a\nb\rc\td") == '"a\\nb\\rc\td"'
    with pytest.raises(TypeError):
        f.quote(3)  # type: ignore[arg-type]


def test_like_prefix_escapes_wildcards() -> None:
    assert f.like_prefix("path", "a_b%") == 'path like "a\\\\_b\\\\%%"'
    with pytest.raises(ConfigError, match="backslash"):
        f.like_prefix("path", "a\\b")


def test_field_names_are_checked() -> None:
    with pytest.raises(ValueError):
        f.eq("path or 1", "x")


def test_build_filter_rejects_unknown_keys_and_wrong_types() -> None:
    with pytest.raises(ConfigError, match="path_prefix"):
        build_filter({"nope": 1})
    for bad, words in [
        ({"tags": 5}, "tags must be a tag or a list"),
        ({"tags": ["a", 1]}, "tags must be a tag or a list"),
        ({"tags": {"a": 1}}, "tags must be a tag or a list"),
        ({"path_prefix": 5}, "path_prefix must be a string"),
        ({"root": ["/a"]}, "root must be a string"),
    ]:
        with pytest.raises(ConfigError, match=words):
            build_filter(bad)


def _collection(path: Path, rows: list[dict[str, Any]]) -> Any:
    """A real Milvus Lite collection with the fields filters use."""
    from pymilvus import DataType, MilvusClient

    c = MilvusClient(str(path))
    s = MilvusClient.create_schema(auto_id=False)
    s.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    for name in ("path", "rel_path", "root"):
        s.add_field(name, DataType.VARCHAR, max_length=512)
    s.add_field("metadata", DataType.JSON)
    s.add_field("vector", DataType.FLOAT_VECTOR, dim=2)
    ip = c.prepare_index_params()
    ip.add_index("vector", index_type="AUTOINDEX", metric_type="COSINE")
    c.create_collection("t", schema=s, index_params=ip)
    c.insert("t", [{"id": str(i), "vector": [1.0, float(i)], **r} for i, r in enumerate(rows)])
    c.flush("t")
    return c


# Characters that are legal in a path and awkward in an expression: every control character but NUL,
# quotes, backslash, LIKE wildcards, Unicode line separators, a byte-order mark, an emoji.
AWKWARD = [chr(i) for i in [*range(1, 32), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, 0xFEFF]]
AWKWARD += ['"', "'", "\\", "%", "_", "é", "\U0001f600", "\\n", '\\"', "{p}"]


def test_awkward_characters_match_literally_in_milvus_lite(tmp_path: Path) -> None:
    """A value with a line break (legal in a path) matches its file, not a Milvus parse error."""
    rows = [
        {"path": f"/d/a{ch}b/f.md", "rel_path": f"a{ch}b/f.md", "root": f"/d{ch}", "metadata": {"tags": [f"t{ch}"]}}
        for ch in AWKWARD
    ]
    c = _collection(tmp_path / "f.db", rows)

    def matches(expr: str) -> list[str]:
        return sorted(r["rel_path"] for r in c.query("t", filter=expr, output_fields=["rel_path"]))

    for ch in AWKWARD:
        want = [f"a{ch}b/f.md"]
        assert matches(f.eq("rel_path", f"a{ch}b/f.md")) == want, repr(ch)
        assert matches(expr({"tags": f"t{ch}"})) == want, repr(ch)
        assert matches(expr({"root": f"/d{ch}"})) == want, repr(ch)
        if "\\" in ch:
            with pytest.raises(ConfigError, match="backslash"):
                expr({"path_prefix": f"a{ch}"})
        else:
            assert matches(expr({"path_prefix": f"a{ch}b/"})) == want, repr(ch)
            assert matches(expr({"path_prefix": f"/d/a{ch}"})) == want, repr(ch)
    c.close()


def _hostile_values(n: int, seed: int = 13) -> list[str]:
    """Filter values that try to end the literal and add a condition, in many spellings."""
    pieces = [
        '"',
        "'",
        "\\",
        '\\"',
        "\n",
        "\r",
        "\t",
        "\u2028",
        " or ",
        " || ",
        " and ",
        "true",
        "1 == 1",
        "(",
        ")",
        "[",
        "]",
        "%",
        "_",
        "#",
        "--",
        "/*",
        "{p}",
        "not ",
        'rel_path != ""',
        'json_contains(metadata["tags"], "x")',
        'root like "%"',
        "😀",
        "a",
        "plain/",
        "x",
    ]
    templates = [
        'x" or rel_path != "',
        "x' or rel_path != '",
        'x\\" or true or \\"',
        'x\n" or true or "',
        'x\r" || true || "',
        '%" or path like "%',
        'a") or (true',
        'x"]) or json_contains(metadata["tags"], "x',
        *("x", "/r", "plain/", "a\nb/", 'q"uote/', "a_"),  # values that do match some rows
    ]
    rng = random.Random(seed)
    values = list(templates)
    while len(values) < n:
        values.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 6))))
    return values


def test_no_hostile_filter_value_widens_the_results(tmp_path: Path) -> None:
    """Each value matches exactly the rows that hold it literally, or is refused: never more."""
    texts = ["plain/v.md", "a_b/x.md", 'q"uote/w.md', "x/y.md", "a\nb/n.md", "a\nb/c.md"]
    rows = [{"path": "/r/" + t, "rel_path": t, "root": "/r", "metadata": {"tags": ["x", t]}} for t in texts]
    c = _collection(tmp_path / "h.db", rows)

    def matches(expr: str) -> list[str]:
        return sorted(r["rel_path"] for r in c.query("t", filter=expr, output_fields=["rel_path"]))

    values = _hostile_values(200)
    checked = refused = found = 0
    for value in values:
        literal = {
            "path_prefix": [
                t for t in texts if ("/r/" + t if value[:1] == "/" else t).startswith(value.removeprefix("./"))
            ],
            "tags": [t for t in texts if value in ("x", t)],
            "root": texts if value == "/r" else [],
        }
        for key, want in literal.items():
            if not value:
                continue
            try:
                where = expr({key: value})
            except ConfigError:  # a NUL, or a backslash in a path prefix: refused, not guessed
                refused += 1
                continue
            assert matches(where) == sorted(want), (key, value)
            neutral = build_filter({key: value})  # the reference semantics every backend keeps
            assert sorted(r["rel_path"] for r in rows if neutral and neutral.matches(r)) == sorted(want), (key, value)
            checked += 1
            found += bool(want)
    assert checked >= 500 and refused < checked / 4 and found >= 5, (checked, refused, found)
    c.close()


def test_filters_match_literally_in_milvus_lite(tmp_path) -> None:
    from pymilvus import DataType, MilvusClient

    c = MilvusClient(str(tmp_path / "f.db"))
    s = MilvusClient.create_schema(auto_id=False)
    s.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    s.add_field("rel_path", DataType.VARCHAR, max_length=512)
    s.add_field("metadata", DataType.JSON)
    s.add_field("vector", DataType.FLOAT_VECTOR, dim=2)
    ip = c.prepare_index_params()
    ip.add_index("vector", index_type="AUTOINDEX", metric_type="COSINE")
    c.create_collection("t", schema=s, index_params=ip)
    paths = ["a_b/x.md", "axb/y.md", "a%b/z.md", 'q"uote/w.md', "it's/u.md", "plain/v.md"]
    c.insert(
        "t",
        [
            {"id": str(i), "rel_path": p, "metadata": {"tags": ['say "hi"'] if i == 3 else ["x"]}, "vector": [1.0, i]}
            for i, p in enumerate(paths)
        ],
    )
    c.flush("t")

    def matches(expr: str) -> list[str]:
        return sorted(r["rel_path"] for r in c.query("t", filter=expr, output_fields=["rel_path"]))

    assert matches(expr({"path_prefix": "a_b/"})) == ["a_b/x.md"]
    assert matches(expr({"path_prefix": "a%b"})) == ["a%b/z.md"]
    assert matches(expr({"path_prefix": 'q"uote'})) == ['q"uote/w.md']
    assert matches(expr({"path_prefix": "it's"})) == ["it's/u.md"]
    # An injection attempt is just a prefix that matches nothing.
    assert matches(expr({"path_prefix": 'x" or rel_path != "'})) == []
    assert matches(expr({"tags": 'say "hi"'})) == ['q"uote/w.md']
    assert matches(f.in_("rel_path", ["plain/v.md", "axb/y.md"])) == ["axb/y.md", "plain/v.md"]
    assert len(matches(expr({"tags": ["x"]}))) == 5
    c.close()
