"""BM25's terms: Chinese and Japanese split into character bigrams, every other text as it always was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.embedding.base import Embedder
from mdrag.index import Index
from mdrag.stemming import stemmer, words
from mdrag.store.base import holds_its_bm25

CJK = Path(__file__).resolve().parent / "data" / "cjk"  # six short pages written for this test, and questions


def test_a_cjk_run_becomes_its_character_bigrams() -> None:
    assert words("設定ファイル") == ["設定", "定フ", "ファ", "ァイ", "イル"]
    assert words("中文") == ["中文"] and words("字") == ["字"]  # two characters: one term; one: itself
    assert words("Config 配置文件 file") == ["config", "配置", "置文", "文件", "file"]
    assert words("配置file名") == ["配置", "file", "名"]  # a word that mixes scripts is cut where they meet
    assert words("東京、大阪。") == ["東京", "大阪"]  # CJK punctuation separates words as before
    assert stemmer()("検索の設定を変更する Configuring") == "検索 索の の設 設定 定を を変 変更 更す する configur"
    assert stemmer(split=False)("検索の設定 Configuring") == "検索の設定 configur"  # the form stores held before


def test_text_without_cjk_is_prepared_exactly_as_before(shared_data: Path) -> None:
    """The BM25 text and queries of the English sets do not change by a byte: their figures cannot move."""
    pages = sorted((shared_data / "markdown_cncf_glossary").rglob("*.md"))
    pages += sorted((shared_data / "markdown_hugo_docs").rglob("*.md"))[:300]
    pages += sorted((shared_data / "commonmark").rglob("*.txt"))
    assert len(pages) > 300
    split, whole = stemmer(), stemmer(split=False)
    for page in pages:
        text = page.read_text(encoding="utf-8", errors="replace")
        assert split(text) == whole(text), page
    assert split("Ünïcödé çafé naïve résumé, x² ½") == whole("Ünïcödé çafé naïve résumé, x² ½")
    assert words("한국어 텍스트") == ["한국어", "텍스트"]  # Korean is written with spaces: kept as words


def test_a_store_that_holds_cjk_runs_whole_is_not_called_damaged() -> None:
    """An index written before the split holds its old form until the file changes: not damage."""
    text, context = "設定ファイルの場所", "設定"
    old = stemmer(split=False)(f"{context}\n\n{text}")
    assert holds_its_bm25(old, text, context, stemmer())
    assert not holds_its_bm25("something else", text, context, stemmer())


def _questions() -> list[dict[str, object]]:
    return [json.loads(line) for line in (CJK / "qa.jsonl").read_text(encoding="utf-8").splitlines() if line]


@pytest.mark.parametrize("store", ["faiss", "milvus"])
def test_chinese_and_japanese_questions_find_their_pages_by_bm25(tmp_path: Path, minilm: Embedder, store: str) -> None:
    """Before the split, BM25 found none of the 12 (each page's phrases were single terms); now 11 of 12 in
    the first five, on both stores (the twelfth shares one bigram with its page and falls under the threshold)."""
    settings: dict[str, object] = {"index": "cjk" + os.urandom(3).hex(), "store.backend": store}
    if store == "milvus":
        settings["milvus_uri"] = str(tmp_path / "milvus.db")
    found = []
    with Index(load_config(settings), embedder=minilm) as idx:
        idx.update([CJK])
        for q in _questions():
            ranked = [r.rel_path for r in idx.search(str(q["question"]), mode="bm25")]
            found.append(list(q["gold"])[0] in ranked[:5])  # type: ignore[call-overload]
    assert sum(found) >= 11, found
