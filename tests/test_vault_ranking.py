"""Notes vaults' links in ranking (mdrag.retrieval.linked, ``search.link_boost``): the notes the best candidates
link to move up a little, on the Obsidian Tasks vault (../shared/data, read in place) as on made-up rows; a
corpus without links ranks as it did, its links never read."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.retrieval.linked import lift
from mdrag.store.base import Hit
from tests.conftest import SHARED_DATA, HashEmbedder

VAULT = SHARED_DATA / "notes_vault_obsidian-tasks"


def _row(note: str, score: float, links: list[str] | None = None, chunk: int = 0) -> Hit:
    metadata: dict[str, Any] = {} if links is None else {"links": links}
    path = f"/v/{note}.md"
    return Hit(f"{note}{chunk}", "", "", path, path[3:], "/v", [], 0, chunk, 0, 0, 0, "", metadata, 0.5, score)


def _resolve(source: str, target: str) -> str | None:
    return f"/v/{target}.md" if target != "Missing" else None


def _ids(rows: list[Hit]) -> list[str]:
    return [r.id for r in rows]


# -- the lift, on made-up candidates ----------------------------------------------------------------------


def test_the_best_candidate_of_a_linked_note_moves_up_by_its_share() -> None:
    """Scores 1.0 .. 0.0 (range 1): the first candidate links to "B", whose best chunk (0.5) gains 0.2 x 1
    and passes the two above it; B's second chunk, and every other row, stays where it was."""
    rows = [
        _row("A", 1.0, ["B", "Missing"]),
        _row("C", 0.8),
        _row("D", 0.6),
        _row("B", 0.5),
        _row("B", 0.45, chunk=1),
        _row("E", 0.0),
    ]
    lifted = lift(rows, 0.2, lambda: _resolve)
    assert _ids(lifted) == ["A0", "C0", "B0", "D0", "B1", "E0"]
    assert lifted[2].rank_score == pytest.approx(0.7)
    assert [r.rank_score for r in lifted if r.id != "B0"] == [1.0, 0.8, 0.6, 0.45, 0.0]  # none else changed


def test_a_weaker_source_lends_less_and_only_the_first_three_lend() -> None:
    """The third candidate (0.5 in a range of 1) lends half the weight; the fourth lends nothing."""
    rows = [_row("A", 1.0), _row("C", 0.9), _row("D", 0.5, ["F"]), _row("G", 0.4, ["H"])]
    rows += [_row("F", 0.3), _row("H", 0.0)]
    lifted = lift(rows, 0.4, lambda: _resolve)
    assert next(r for r in lifted if r.id == "F0").rank_score == pytest.approx(0.3 + 0.4 * 0.5)
    assert _ids(lifted) == ["A0", "C0", "D0", "F0", "G0", "H0"]
    assert next(r for r in lifted if r.id == "H0").rank_score == 0.0
    shown = lift(rows, 0.4, lambda: _resolve, shown=lambda r: r.id != "A0")  # a row not shown lends nothing
    assert next(r for r in shown if r.id == "H0").rank_score == pytest.approx(0.4 * 0.4)


def test_nothing_moves_without_links_a_weight_or_a_resolver() -> None:
    def never() -> None:
        raise AssertionError("the links were read for candidates that have none")

    plain = [_row("A", 9.0), _row("B", 4.0), _row("C", 1.0)]  # no "links" metadata: not a vault note
    assert lift(plain, 1.0, never) is plain
    linked = [_row("A", 9.0, ["C"]), _row("B", 4.0), _row("C", 1.0)]
    assert lift(linked, 0.0, never) is linked
    assert lift(linked, 1.0, lambda: None) is linked  # an index without a manifest
    assert lift([_row("A", 9.0, ["A"]), _row("B", 4.0)], 1.0, lambda: _resolve)[0].rank_score == 9.0  # itself
    assert _ids(lift(linked, 1.0, lambda: _resolve)) == ["A0", "C0", "B0"]  # 1 + 8 x 1 > 4


# -- on the vault ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """The whole vault, read in place (the FAISS store, the suite's hash embedder); searched in BM25 mode,
    which the hash embedder leaves as MiniLM's index has it."""
    if not VAULT.is_dir():
        pytest.skip(f"the shared vault is absent: {VAULT}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MDRAG_HOME", str(tmp_path_factory.mktemp("vault-ranking")))
        config = load_config({"index": "v" + os.urandom(4).hex(), "store.backend": "faiss"})
        idx = Index(config, embedder=HashEmbedder(max_tokens=256))
        idx.update([VAULT])
        yield idx
        idx.close()


def _notes(idx: Index, query: str, boost: float, k: int = 5) -> list[str]:
    # live settings, as a server applies them; the notes of the first k chunks (a note may hold several)
    idx.config = idx.config.with_overrides({"search.link_boost": boost, "search.per_page": 0})
    return list(dict.fromkeys(h.rel_path for h in idx.search(query, mode="bm25", k=k)))


def test_a_note_linked_from_the_best_hit_is_found(indexed: Index) -> None:
    """The question names the modal; its answer is in the Tasks API note, which the modal's note links to
    ("The Tasks API Interface allows this modal to be used ... by other plugins"). Read as Obsidian shows it,
    the API note's "[[QuickAdd#Launching the Create task modal via QuickAdd|...]]" no longer says the words
    twice, and BM25 alone ranks it past the first five notes."""
    query = "how can a script or another plugin open the create task modal?"
    assert _notes(indexed, query, 0.0)[0] == "Editing/Create or edit Task.md"
    # not among the first ten results without the links; among them with the default weight (6th since tables'
    # headers travel with their rows, which moved the vault's chunks; 5th at weight 0.3)
    assert "Advanced/Tasks Api.md" not in _notes(indexed, query, 0.0, k=10)
    assert "Advanced/Tasks Api.md" in _notes(indexed, query, 0.2, k=10)
    assert indexed.config["search.link_boost"] == 0.2 == load_config()["search.link_boost"]  # the default


def test_a_corpus_without_links_ranks_as_it_did(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain Markdown carries no links: every result is the same, score for score, whatever the weight, and
    the index's notes are never read."""
    monkeypatch.setenv("MDRAG_HOME", str(tmp_path))
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, topic in enumerate(["backup", "restore", "schedule", "retention", "encryption", "snapshots"]):
        (docs / f"{topic}.md").write_text(f"# {topic.title()}\n\nHow the {topic} works, see Backup {i}.\n")
    read: list[object] = []
    monkeypatch.setattr("mdrag.index.index.notes_at", lambda *a: read.append(a))
    config = load_config({"index": "p" + os.urandom(4).hex(), "store.backend": "faiss", "search.threshold": 0})
    with Index(config, embedder=HashEmbedder()) as idx:
        idx.update([docs])
        for mode in ("dense", "bm25", "hybrid"):
            idx.config = config.with_overrides({"search.link_boost": 0})
            off = [r.to_dict() for r in idx.search("how the backup works", mode=mode)]
            idx.config = config.with_overrides({"search.link_boost": 1})
            assert [r.to_dict() for r in idx.search("how the backup works", mode=mode)] == off and len(off) == 6
    assert not read
