"""The terms of full-text (BM25) search: English stemming, and text written without spaces split into terms.

Milvus Lite's analyzers are only ``standard`` and ``jieba`` (no ``english``),
so with ``search.stemming`` mdrag stems both the indexed BM25 text and the
query itself (PyStemmer's Snowball English stemmer): "configuring" and
"configuration" then meet at "configur".

Chinese and Japanese are written without spaces, and both stores' BM25 (the
FAISS store's own, which splits words as Milvus's ``standard`` analyzer does)
would keep a whole phrase as one term, which no query matches unless it is
the very same phrase. So the stemmer also splits each run of Han or kana
characters into its overlapping character bigrams ("設定ファイル" becomes
"設定 定フ ファ ァイ イル"; a run of one character stays as it is), in the
texts and in the queries alike, so that a query matches the pages that share
its bigrams. Text without such characters comes out exactly as before.
(With ``search.stemming`` off, BM25 reads the text as written: no split.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from mdrag.errors import ConfigError

__all__ = ["stemmer", "words"]

_WORD = re.compile(r"\w+", re.UNICODE)
# Scripts written without spaces between words: CJK ideographs (with extensions and compatibility forms),
# hiragana, katakana (with the prolonged sound mark and half-width forms), and the iteration marks.
_CJK = (
    "\u3005\u3007\u3021-\u3029\u3038-\u303c"  # 々 〇 Hangzhou numerals, 〻 and its kin
    "\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff"  # hiragana, katakana (ー among them), katakana extensions
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs: extension A, unified, compatibility
    "\uff66-\uff9f"  # half-width katakana
    "\U00020000-\U0003134f"  # CJK ideographs: extensions B to G
)
_CJK_RUN = re.compile(f"([{_CJK}]+)")
_HAS_CJK = re.compile(f"[{_CJK}]")


def _bigrams(run: str) -> list[str]:
    return [run] if len(run) < 2 else [run[i : i + 2] for i in range(len(run) - 1)]


def words(text: str) -> list[str]:
    """The words of ``text`` lower-cased, as BM25 reads them (``\\w+``), each run of CJK characters in a word
    split into its character bigrams."""
    found = _WORD.findall(text.lower())
    if not _HAS_CJK.search(text):
        return found
    out: list[str] = []
    for word in found:
        for i, part in enumerate(_CJK_RUN.split(word)):
            if i % 2:  # a CJK run (split's captured groups sit at the odd places)
                out.extend(_bigrams(part))
            elif part:
                out.append(part)
    return out


@lru_cache(maxsize=2)
def stemmer(split: bool = True) -> Callable[[str], str]:
    """A function that lowercases, splits into :func:`words` and stems them, joined by spaces.

    ``split=False``: CJK runs kept whole, as every release before the split did (a store written then
    holds its BM25 texts so).
    """
    try:
        import Stemmer
    except ImportError as e:
        raise ConfigError("search.stemming needs PyStemmer: run `pip install PyStemmer`") from e
    english = Stemmer.Stemmer("english")

    def stem(text: str) -> str:
        return " ".join(english.stemWords(words(text) if split else _WORD.findall(text.lower())))

    return stem
