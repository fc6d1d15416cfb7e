"""The index keeper keeps an index current by itself (mdrag.index.watching): it watches the index's folders
(an edited, a new, a deleted file; a folder another process adds), rescans them periodically, and stops its
threads when closed. The config watcher calls back when the config file changes.

Real files, a real watch (watchfiles) and a real store; each wait polls up to a generous bound, with no
timing assertion.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index, IndexKeeper
from mdrag.index.watching import ConfigWatcher

BOUND = 60  # seconds a change may take to be seen on a loaded machine: only stops a hang


@pytest.fixture
def index() -> Iterator[Index]:
    from tests.conftest import HashEmbedder

    idx = Index(load_config({"index": "w" + os.urandom(4).hex()}), embedder=HashEmbedder())
    yield idx
    idx.close()


def _page(root: Path, name: str, word: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / name
    path.write_text(f"# {word.title()}\n\nThe {word} page tells of {word}.\n")
    return path


def _found(index: Index, word: str) -> set[str]:
    """The files whose indexed text holds ``word``."""
    return {r.rel_path for r in index.search(word, 10, threshold=0) if word in r.text}


def _until(check: Callable[[], bool], why: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        assert time.monotonic() < deadline, why
        time.sleep(0.2)


def _threads(index: Index) -> list[str]:
    """The keeper's watch and rescan threads still alive (named for the index)."""
    return [t.name for t in threading.enumerate() if t.name.endswith(f"-{index.name}") and t.is_alive()]


def test_a_watching_keeper_indexes_edited_new_and_deleted_files(tmp_path: Path, index: Index) -> None:
    root = tmp_path / "docs"
    edited = _page(root, "edited.md", "apple")
    gone = _page(root, "gone.md", "banana")
    with IndexKeeper(index, [root], watch=True) as keeper:  # as docs/python.md shows it
        keeper.wait(timeout=BOUND)
        assert _found(index, "banana") == {"gone.md"}
        assert keeper.wait_watching([root], BOUND), "the watch is in place"
        assert keeper.watching == (str(root.resolve()),)

        edited.write_text("# Apple\n\nThe apple page now tells of quinces.\n")
        _until(lambda: _found(index, "quinces") == {"edited.md"}, "an edited file is indexed again")
        _page(root / "sub", "new.md", "cherry")
        _until(lambda: _found(index, "cherry") == {"sub/new.md"}, "a new file is indexed")
        gone.unlink()
        _until(lambda: _found(index, "banana") == set(), "a deleted file leaves the index")
        assert keeper.state.state == "ready" and keeper.state.files == 2
    assert _threads(index) == [], "leaving the block closes the keeper"


def test_a_folder_another_process_adds_is_watched(tmp_path: Path, index: Index) -> None:
    a, c = tmp_path / "a", tmp_path / "c"
    _page(a, "alpha.md", "alpha")
    _page(c, "charlie.md", "charlie")
    keeper = IndexKeeper(index, [a], watch=True)
    try:
        keeper.wait(keeper.start(), BOUND)
        assert keeper.wait_watching([a], BOUND)
        other = Index(index.config, embedder=index.embedder)  # as `mdrag index C` from another shell
        try:
            other.update([c])
        finally:
            other.close()
        keeper.wait(keeper.request("an update"), BOUND)  # any update takes C in
        assert keeper.state.folders == [str(a.resolve()), str(c.resolve())]
        assert keeper.wait_watching([a, c], BOUND), "the added folder is watched"
        _page(c, "delta.md", "delta")
        _until(lambda: _found(index, "delta") == {"delta.md"}, "a file saved in the added folder is indexed")
    finally:
        keeper.close()


def test_a_rescan_interval_set_while_the_keeper_runs_applies(tmp_path: Path, index: Index) -> None:
    """No watch: a file saved meanwhile is read by the periodic rescan, whose interval may change live."""
    root = tmp_path / "docs"
    _page(root, "one.md", "one")
    keeper = IndexKeeper(index, [root])
    try:
        keeper.wait(keeper.start(), BOUND)
        assert keeper.rescan_interval is None and keeper.watching is None
        _page(root, "two.md", "zeppelin")
        keeper.rescan_interval = 0.5
        _until(lambda: _found(index, "zeppelin") == {"two.md"}, "the rescan reads the new file")
    finally:
        keeper.close()


def test_close_stops_the_watch_and_rescan_threads(tmp_path: Path, index: Index) -> None:
    root = tmp_path / "docs"
    _page(root, "one.md", "one")
    keeper = IndexKeeper(index, [root], watch=True, rescan_interval=3600)
    keeper.wait(keeper.start(), BOUND)
    assert keeper.wait_watching([root], BOUND)
    assert sorted(_threads(index)) == [f"mdrag-rescan-{index.name}", f"mdrag-watch-{index.name}"]
    keeper.close()
    assert _threads(index) == [], "no watch or rescan thread is left"
    assert keeper.watching is None and not keeper.wait_watching(timeout=0)


def test_the_config_watcher_sees_a_file_in_a_home_made_late_and_each_change(tmp_path: Path) -> None:
    """A first start: the home does not exist yet; a config file in it once it is made counts, and so does
    each later change."""
    home = tmp_path / "home"
    calls: list[int] = []
    watcher = ConfigWatcher(home, lambda: calls.append(1))
    watcher.start()
    try:
        home.mkdir()
        (home / "config.yaml").write_text("search:\n  k: 3\n")
        _until(lambda: len(calls) >= 1, "the config file in the late home is seen")
        assert watcher.wait_watching(BOUND)
        seen = len(calls)
        (home / "notes.txt").write_text("not a config file\n")
        (home / "config.yaml").write_text("search:\n  k: 4\n")
        _until(lambda: len(calls) > seen, "a change to the config file is seen")
    finally:
        watcher.close()
    assert not any(t.name == "mdrag-config-watch" and t.is_alive() for t in threading.enumerate())
