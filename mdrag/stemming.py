"""English stemming for full-text (BM25) search.

Milvus Lite's analyzers are only ``standard`` and ``jieba`` (no ``english``),
so with ``search.stemming`` mdrag stems both the indexed BM25 text and the
query itself (PyStemmer's Snowball English stemmer): "configuring" and
"configuration" then meet at "configur".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from mdrag.errors import ConfigError

__all__ = ["stemmer"]

_WORD = re.compile(r"\w+", re.UNICODE)


@lru_cache(maxsize=1)
def stemmer() -> Callable[[str], str]:
    """A function that lowercases, splits into words and stems them, joined by spaces."""
    try:
        import Stemmer
    except ImportError as e:
        raise ConfigError("search.stemming needs PyStemmer: run `pip install PyStemmer`") from e
    english = Stemmer.Stemmer("english")

    def stem(text: str) -> str:
        return " ".join(english.stemWords(_WORD.findall(text.lower())))

    return stem
