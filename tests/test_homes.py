"""A home (``MDRAG_HOME``) that was copied or moved is the same index where its files are intact:
nothing is embedded again; what does start a full re-index says why, at WARNING."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index
from tests.conftest import HashEmbedder


def _docs(root: Path) -> Path:
    docs = root / "docs"
    for i in range(6):
        (docs / f"s{i}").mkdir(parents=True, exist_ok=True)
        (docs / f"s{i}" / "page.md").write_text(
            f"# Section {i}\n\nAbout topic {i}: words {i} here.\n\n## More\n\nText.\n"
        )
    return docs


def _index(home: Path, embedder: HashEmbedder | None = None, backend: str = "faiss") -> Index:
    return Index(
        load_config({"index": "moved", "store.backend": backend}, home=home), embedder=embedder or HashEmbedder()
    )


def _built(tmp_path: Path, backend: str = "faiss") -> tuple[Path, Path, set[str]]:
    """A home with an index of a few files, and a copy of it: (home, copy, its chunk ids)."""
    docs, home, copy = _docs(tmp_path), tmp_path / "home-a", tmp_path / "home-b"
    with _index(home, backend=backend) as index:
        first = index.update([docs])
        assert first.chunks_embedded > 0
        ids = index.store.all_ids()
    shutil.copytree(home, copy, symlinks=True)
    return home, copy, ids


@pytest.mark.parametrize("backend", ["faiss", "milvus"])
def test_a_copied_home_is_the_same_index_nothing_is_embedded_again(
    tmp_path: Path, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    if backend == "milvus":
        pytest.importorskip("milvus_lite")
    home, copy, ids = _built(tmp_path, backend)
    embedder = HashEmbedder()
    caplog.set_level(logging.WARNING)
    with _index(copy, embedder, backend) as index:
        assert index.backend == backend
        st = index.status().to_dict()
        assert (st["files"], st["chunks"], st["damage"] if "damage" in st else []) == (6, len(ids), [])
        summary = index.update()
        assert summary.rebuild is None
        assert (summary.chunks_embedded, summary.added, summary.unchanged) == (0, 0, 6)
        assert index.store.all_ids() == ids
        assert summary.chunks_total == len(ids)
        assert embedder.embedded == []
    recorded = json.loads(index.manifest_path.read_text())["store_uri"]
    assert Path(recorded).is_relative_to(copy), recorded  # the manifest records the store's new place
    assert not [r for r in caplog.records if "indexed again" in r.getMessage()]
    with _index(home, backend=backend) as original:  # the original home is untouched
        assert original.update().chunks_embedded == 0


def test_a_full_re_index_says_why_at_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The copy's store is gone: every file is indexed again, and the log says why at the default level."""
    _, copy, ids = _built(tmp_path)
    shutil.rmtree(copy / "cache" / "faiss")
    caplog.set_level(logging.WARNING)
    with _index(copy) as index:
        summary = index.update()
        assert summary.rebuild is not None and "not the one its manifest records" in summary.rebuild
        assert index.store.all_ids() == ids
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("every file is indexed again" in m and "not the one its manifest records" in m for m in said), said


def test_a_copied_home_with_another_model_is_indexed_again_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, copy, _ = _built(tmp_path)

    class Other(HashEmbedder):
        model_id = "test:other-64"

    caplog.set_level(logging.WARNING)
    with _index(copy, Other()) as index:
        summary = index.update()
        assert summary.rebuild is not None and "embedding model changed" in summary.rebuild
        assert summary.chunks_embedded > 0
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("every file is indexed again" in m and "embedding model changed" in m for m in said), said


def test_a_full_re_index_asked_to_pause_keeps_the_committed_index_whole(tmp_path: Path) -> None:
    """A server commits a long update in steps (a pause); a step of a full re-index would commit the files
    done so far and drop the others, which readers see: the pause waits for the run's end instead."""
    import threading

    docs, home = _docs(tmp_path), tmp_path / "home"
    with _index(home) as index:
        index.update([docs])
        ids = index.store.all_ids()
    pause = threading.Event()
    pause.set()  # a step's time is up from the start
    config = load_config({"index": "moved", "store.backend": "faiss", "chunk.size": 900}, home=home)
    with Index(config, embedder=HashEmbedder()) as index:
        summary = index.update(pause=pause, batch_chunks=1)
        assert summary.rebuild == "chunk settings changed"
        assert summary.remaining == 0
        st = index.status().to_dict()
        assert (st["files"], st["interrupted"]) == (6, False)
        assert st["chunks"] == len(index.store.all_ids()) == len(ids)


def test_an_update_asked_to_pause_still_commits_in_steps(tmp_path: Path) -> None:
    """An incremental update (nothing the readers see is dropped) pauses as before."""
    import threading

    docs, home = _docs(tmp_path), tmp_path / "home"
    with _index(home) as index:
        index.update([docs])
        for i in range(4):
            (docs / f"s{i}" / "page.md").write_text(f"# Changed {i}\n\nNew words {i}.\n")
        pause = threading.Event()
        pause.set()
        summary = index.update(pause=pause, batch_chunks=1)
        assert summary.remaining > 0
        assert index.status().files == 6


def test_status_counts_the_committed_files_while_a_full_re_index_runs(tmp_path: Path) -> None:
    """What readers see is whole during a full re-index: so are the files `status` counts."""
    docs, home = _docs(tmp_path), tmp_path / "home"
    with _index(home) as index:
        index.update([docs])
    seen: list[int] = []

    def progress(_: object) -> None:
        with _index(home) as reader:  # another reader of the index, as `mdrag status` would be
            seen.append(reader.status().files)

    config = load_config({"index": "moved", "store.backend": "faiss", "chunk.size": 900}, home=home)
    with Index(config, embedder=HashEmbedder()) as index:
        assert index.update(progress=progress).rebuild == "chunk settings changed"
        assert index.status().files == 6
    assert seen and set(seen) == {6}, seen
