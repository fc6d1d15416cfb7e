"""Filter literals are quoted by one function, and hold against a real Milvus Lite."""

from __future__ import annotations

import pytest

from mdrag.errors import ConfigError
from mdrag.search import build_filter
from mdrag.store import filters as f


def test_quote_escapes_quotes_and_backslashes() -> None:
    assert f.quote("plain") == '"plain"'
    assert f.quote('a"b') == '"a\\"b"'
    assert f.quote("a\\b") == '"a\\\\b"'
    assert f.quote("it's") == '"it\'s"'
    with pytest.raises(TypeError):
        f.quote(3)  # type: ignore[arg-type]


def test_like_prefix_escapes_wildcards() -> None:
    assert f.like_prefix("path", "a_b%") == 'path like "a\\\\_b\\\\%%"'
    with pytest.raises(ConfigError, match="backslash"):
        f.like_prefix("path", "a\\b")


def test_field_names_are_checked() -> None:
    with pytest.raises(ValueError):
        f.eq("path or 1", "x")


def test_build_filter_rejects_unknown_keys() -> None:
    with pytest.raises(ConfigError, match="path_prefix"):
        build_filter({"nope": 1})


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

    assert matches(build_filter({"path_prefix": "a_b/"})) == ["a_b/x.md"]
    assert matches(build_filter({"path_prefix": "a%b"})) == ["a%b/z.md"]
    assert matches(build_filter({"path_prefix": 'q"uote'})) == ['q"uote/w.md']
    assert matches(build_filter({"path_prefix": "it's"})) == ["it's/u.md"]
    # An injection attempt is just a prefix that matches nothing.
    assert matches(build_filter({"path_prefix": 'x" or rel_path != "'})) == []
    assert matches(build_filter({"tags": 'say "hi"'})) == ['q"uote/w.md']
    assert matches(f.in_("rel_path", ["plain/v.md", "axb/y.md"])) == ["axb/y.md", "plain/v.md"]
    assert len(matches(build_filter({"tags": ["x"]}))) == 5
    c.close()
