"""How documents are cut: the ``chunk.*`` settings, stored in the manifest."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from mdrag.chunking.langchain import splitter_class
from mdrag.errors import ConfigError

__all__ = ["ChunkSettings"]


@dataclass(frozen=True)
class ChunkSettings:
    """How documents are cut. Stored in the manifest: a change means a re-chunk."""

    size: int = 1000
    overlap: int = 200
    unit: Literal["chars", "tokens"] = "chars"
    # What is embedded (and BM25-indexed) before each chunk's text: nothing, the
    # "title > heading path" trail, or the trail plus, on a file's first chunk,
    # its frontmatter topics (description, tags, keywords...).
    context: Literal["none", "headings", "frontmatter"] = "frontmatter"
    # The file's folder and file names, as words, lead that header (not with "none").
    # Off by default: it lowers hybrid nDCG@10 on the Hugo questions (benchmarks/RESULTS.md).
    path_words: bool = False
    # Who cuts: this module (by headings, fitted to the model's window) or LangChain's
    # MarkdownTextSplitter, as md-qa does (mdrag/chunking/langchain.py).
    strategy: Literal["headings", "langchain"] = "headings"

    def __post_init__(self) -> None:
        if self.size < 50:
            raise ConfigError(f"chunk.size must be at least 50, got {self.size}")
        if not 0 <= self.overlap < self.size // 2 + 1:
            raise ConfigError(
                f"chunk.overlap must be between 0 and half of chunk.size ({self.size}), got {self.overlap}"
            )
        if self.unit not in ("chars", "tokens"):
            raise ConfigError(f"chunk.unit must be 'chars' or 'tokens', got {self.unit!r}")
        if self.context not in ("none", "headings", "frontmatter"):
            raise ConfigError(f"chunk.context must be 'none', 'headings' or 'frontmatter', got {self.context!r}")
        if self.strategy not in ("headings", "langchain"):
            raise ConfigError(f"chunk.strategy must be 'headings' or 'langchain', got {self.strategy!r}")
        if self.strategy == "langchain":
            splitter_class()  # installed, or a ConfigError before any file is read

    def as_dict(self) -> dict[str, Any]:
        """The settings as the manifest records them; ``strategy`` only when not the default,
        so that indexes built before it existed are not chunked again."""
        d = asdict(self)
        if self.strategy == "headings":
            del d["strategy"]
        return d
