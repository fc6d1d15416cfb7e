"""`Index.status()` is a frozen IndexStatus whose ``to_dict()`` is the JSON `mdrag status --json` prints."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index, IndexStatus
from tests.conftest import HashEmbedder

# The keys of `mdrag status --json`, in their order: scripts read them, so they do not change.
KEYS = [
    "index",
    "backend",
    "backend_reason",
    "store_uri",
    "exists",
    "model",
    "model_mismatch",
    "folders",
    "files",
    "chunks",
    "last_indexed",
    "interrupted",
    "building",
    "damaged",
    "chunking",
    "manifest",
    "manifest_lost",
    "verified",
    "indexing",
    "partial",
]


def test_status_is_a_frozen_value_whose_dict_keeps_the_json_keys(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nThe alpha page.\n\n## More\n\nText about alpha.\n")
    config = load_config({"index": "st", "store.backend": "faiss"}, home=tmp_path / "home")
    with Index(config, embedder=HashEmbedder()) as index:
        empty = index.status()
        assert (empty.exists, empty.files, empty.chunks, empty.last_indexed) == (False, 0, 0, None)
        index.update([docs])
        st = index.status(verify=True)
    assert isinstance(st, IndexStatus)
    d = st.to_dict()
    assert list(d) == KEYS
    assert (d["files"], d["folders"], d["damaged"], d["interrupted"]) == (1, [str(docs.resolve())], None, False)
    assert d["chunks"] == st.chunks > 0 and d["verified"]["checked"]
    assert json.loads(json.dumps(d)) == d, "JSON-ready"
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.chunks = 0  # type: ignore[misc]
