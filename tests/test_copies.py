"""Files of one index with the same bytes are chunked and embedded once, and shown once with every path:
on the FAISS store and on a Milvus Lite file, through a run that changes which file stands for the others,
and read again by a new process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.ingest.copies import plan_copies
from mdrag.ingest.manifest import FileState, Manifest
from mdrag.ingest.scan import ScanResult
from mdrag.retrieval.shown import result_fields
from tests.conftest import HashEmbedder

PAGE = "# Tuning\n\nSet the flux capacitor to 1.21 gigawatts before the quarterly calibration.\n"
OTHER = "# Other\n\nNothing about capacitors: bread, butter and jam.\n"
QUERY = "flux capacitor gigawatts calibration"


@pytest.fixture(params=["faiss", "lite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The FAISS store, or a Milvus Lite file."""
    if request.param == "faiss":
        return {"store.backend": "faiss"}
    return {"store.backend": "milvus", "milvus_uri": str(tmp_path / "store" / "milvus.db")}


def _corpus(tmp_path: Path) -> Path:
    """a/page.md and b/page.md the same bytes, c/other.md another text."""
    root = tmp_path / "docs"
    for folder, text in (("a", PAGE), ("b", PAGE), ("c", OTHER)):
        (root / folder).mkdir(parents=True)
        (root / folder / ("other.md" if folder == "c" else "page.md")).write_text(text)
    return root


def _index(engine: dict[str, str]) -> Index:
    return Index(load_config({"index": "copies" + os.urandom(3).hex(), **engine}), embedder=HashEmbedder())


def _hits(idx: Index, **filters: str) -> list[dict]:
    return [result_fields(r) for r in idx.search(QUERY, k=5, threshold=0, filters=filters or None)]


def _whole(idx: Index) -> Manifest:
    """The manifest, clean, its chunks exactly the store's; each copy names an original of its bytes."""
    m = Manifest.load(idx.manifest_path)
    assert m is not None and not m.dirty
    assert idx.store.all_ids() == m.chunk_ids() and idx.store.count() == m.chunk_count
    for state in m.files.values():
        if state.copy_of is not None:
            assert not state.chunks and m.files[state.copy_of].hash == state.hash
    return m


@pytest.mark.slow
def test_identical_files_are_indexed_once_and_listed_together(tmp_path: Path, engine: dict[str, str]) -> None:
    root = _corpus(tmp_path)
    a, b = str(root / "a" / "page.md"), str(root / "b" / "page.md")
    with _index(engine) as idx:
        s = idx.update([root])
        assert (s.added, s.copies) == (3, 1)
        m = _whole(idx)
        assert m.files[b].copy_of == a and m.files[a].copy_of is None
        assert idx.store.count() == len(m.files[a].chunks) + len(m.files[str(root / "c" / "other.md")].chunks)

        hits = [h for h in _hits(idx) if "flux capacitor" in h["text"]]
        assert len(hits) == 1, "the text is shown once"
        assert hits[0]["rel_path"] == "a/page.md" and [c["rel_path"] for c in hits[0]["copies"]] == ["b/page.md"]

        # a filter on the copy's folder finds its text, under its own path, the original listed with it
        only_b = _hits(idx, path_prefix="b/")
        assert [h["rel_path"] for h in only_b] == ["b/page.md"]
        assert [c["rel_path"] for c in only_b[0]["copies"]] == ["a/page.md"]
        assert [h["rel_path"] for h in _hits(idx, path_prefix=str(root / "b"))] == ["b/page.md"]
        assert [h["rel_path"] for h in _hits(idx, path_prefix="c/")] == ["c/other.md"]

        # `get` of the copy reads its own file
        assert idx.get("b/page.md").parts[0].text == PAGE

        # the original deleted: the copy is indexed under its own path in the same run
        os.unlink(a)
        s = idx.update([root])
        assert (s.deleted, s.added) == (1, 1)
        m = _whole(idx)
        assert m.files[b].copy_of is None and m.files[b].chunks
        hits = [h for h in _hits(idx) if "flux capacitor" in h["text"]]
        assert [(h["rel_path"], h["copies"]) for h in hits] == [("b/page.md", [])]


@pytest.mark.slow
def test_an_edited_copy_or_original_gets_chunks_of_its_own(tmp_path: Path, engine: dict[str, str]) -> None:
    root = _corpus(tmp_path)
    (root / "d").mkdir()
    (root / "d" / "page.md").write_text(PAGE)  # a second copy
    a, b, d = (str(root / f / "page.md") for f in "abd")
    with _index(engine) as idx:
        assert idx.update([root]).copies == 2
        Path(b).write_text(PAGE + "\nAlso check the temporal displacement.\n")  # a copy edited
        s = idx.update([root])
        assert s.modified == 1 and s.copies == 0
        m = _whole(idx)
        assert m.files[b].copy_of is None and m.files[b].chunks and m.files[d].copy_of == a
        hits = _hits(idx)
        assert "temporal displacement" in next(h["text"] for h in hits if h["rel_path"] == "b/page.md")

        Path(a).write_text(OTHER)  # the original edited: now a copy of c/other.md; d stands for itself
        s = idx.update([root])
        m = _whole(idx)
        assert m.files[a].copy_of == str(root / "c" / "other.md") and m.files[d].copy_of is None
        assert m.files[d].chunks and s.copies == 1
        flux = [h for h in _hits(idx) if "flux capacitor" in h["text"]]
        assert {h["rel_path"] for h in flux} == {"b/page.md", "d/page.md"}
        assert all(h["copies"] == [] for h in flux)

        # a copy made of a file indexed earlier: recorded, nothing embedded
        (root / "e").mkdir()
        (root / "e" / "page.md").write_text(PAGE)
        before = idx.store.count()
        s = idx.update([root])
        assert (s.added, s.copies, s.chunks_embedded) == (1, 1, 0) and idx.store.count() == before
        assert _whole(idx).files[str(root / "e" / "page.md")].copy_of == d


@pytest.mark.slow
def test_a_new_process_reads_the_copies(tmp_path: Path, mdrag_home: Path) -> None:
    """`mdrag index` and `mdrag search --json` in processes of their own, with the real model."""
    root = _corpus(tmp_path)
    env = {**os.environ, "MDRAG_HOME": str(mdrag_home), "PYTHONPATH": str(Path(__file__).parents[1])}

    def mdrag(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "mdrag", *args], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    assert "1 of these the same as another file" in mdrag("index", str(root))
    results = json.loads(mdrag("search", "--json", "--threshold", "0", QUERY))
    flux = [r for r in results if "flux capacitor" in r["text"]]
    assert [(r["rel_path"], [c["ref"] for c in r["copies"]]) for r in flux] == [("a/page.md", ["b/page.md"])]
    text = mdrag("search", "--threshold", "0", QUERY)
    assert "the same as: b/page.md" in text
    only_b = json.loads(mdrag("search", "--json", "--threshold", "0", "--path", "b/", QUERY))
    assert [(r["rel_path"], [c["ref"] for c in r["copies"]]) for r in only_b] == [("b/page.md", ["a/page.md"])]
    assert PAGE in mdrag("get", "b/page.md")


def _state(path: str, size: int, h: str, chunks: list[str] | None = None, copy_of: str | None = None) -> FileState:
    return FileState("/r", path.removeprefix("/r/"), 1, size, h, list(chunks or []), copy_of=copy_of)


def test_plan_copies_keeps_an_indexed_original_and_hashes_only_same_sizes() -> None:
    files = {"/r/a.md": _state("/r/a.md", 5, "H", ["c1"])}
    sizes = [("/r/b.md", 5), ("/r/c.md", 5), ("/r/d.md", 7)]
    found = ScanResult(files={p: ("/r", p[3:], 2, size) for p, size in sizes})
    hashed: list[str] = []

    def hash_of(path: str) -> str:
        hashed.append(path)
        return "H"

    todo, plan = plan_copies(files, [("/r/b.md", None), ("/r/c.md", None), ("/r/d.md", None)], [], found, hash_of)
    assert todo == [("/r/d.md", None)] and plan.now == {"/r/b.md": "/r/a.md", "/r/c.md": "/r/a.md"}
    assert sorted(hashed) == ["/r/b.md", "/r/c.md"], "a file of a size no other has is not read"

    # the original edited: its copies are released and form a group of their own, the first path kept
    files = {"/r/a.md": _state("/r/a.md", 5, "H", ["c1"]), "/r/b.md": _state("/r/b.md", 5, "H", copy_of="/r/a.md"),
             "/r/c.md": _state("/r/c.md", 5, "H", copy_of="/r/a.md")}  # fmt: skip
    found = ScanResult(files={p: ("/r", p[3:], 1, 5) for p in files})
    todo, plan = plan_copies(files, [("/r/a.md", None)], [], found, lambda p: "G" if p == "/r/a.md" else "H")
    assert todo == [("/r/a.md", None), ("/r/b.md", None)] and plan.after == {"/r/b.md": ["/r/c.md"]}
    assert set(files) == {"/r/a.md"}, "the released copies are out of the manifest until recorded again"

    # an indexed file that the run skips (its chunks go) is no original for a new file of its bytes
    files = {"/r/a.md": _state("/r/a.md", 5, "H", ["c1"])}
    found = ScanResult(files={"/r/b.md": ("/r", "b.md", 1, 5)}, skipped={"/r/a.md": ("/r", "too big")})
    todo = [("/r/a.md", "too big"), ("/r/b.md", None)]
    assert plan_copies(files, todo, [], found, lambda p: "H")[0] == todo


def test_a_manifest_of_the_earlier_version_loads(tmp_path: Path) -> None:
    m = Manifest("i", "uri", {"model": "x"}, {})
    m.files["/r/a.md"] = _state("/r/a.md", 1, "h", ["c"])
    m.files["/r/b.md"] = _state("/r/b.md", 1, "h", copy_of="/r/a.md")
    d = m.to_json()
    assert "copy_of" not in d["files"]["/r/a.md"] and d["files"]["/r/b.md"]["copy_of"] == "/r/a.md"
    old = {**d, "version": 1, "files": {"/r/a.md": d["files"]["/r/a.md"]}}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(old))
    loaded = Manifest.load(path)
    assert loaded is not None and loaded.files["/r/a.md"].copy_of is None
    m.save(path)
    again = Manifest.load(path)
    assert again is not None and again.version == 2 and again.files["/r/b.md"].copy_of == "/r/a.md"


@pytest.mark.slow
def test_the_websocket_server_lists_copies_in_results_and_sources(tmp_path: Path) -> None:
    """A search reply's results and an answer's ``locations`` (and `mdrag ask`'s sources line) carry the copies."""
    import asyncio

    from mdrag.frontends.client import _sources
    from tests.test_server import _config, opened, recv, serving

    root = _corpus(tmp_path)

    async def scenario() -> tuple[dict, dict]:
        async with serving(_config(), [root]) as server:
            ws = await opened(server)
            await ws.send(json.dumps({"type": "search", "query": QUERY, "k": 5, "threshold": 0}))
            found = await recv(ws)
            await ws.send(json.dumps({"type": "query", "question": QUERY}))
            while (end := await recv(ws))["type"] not in ("stream_end", "error"):
                pass
            await ws.close()
            return found, end

    found, end = asyncio.run(scenario())
    flux = [r for r in found["results"] if "flux capacitor" in r["text"]]
    assert [(r["rel_path"], [c["ref"] for c in r["copies"]]) for r in flux] == [("a/page.md", ["b/page.md"])]
    assert end["type"] == "stream_end", end
    page = next(loc for loc in end["locations"] if loc["ref"] == "a/page.md")
    assert page["copies"] == ["b/page.md"]
    assert f"{root / 'a' / 'page.md'} (the same as b/page.md)" in _sources(end)


@pytest.mark.slow
def test_mcp_search_lists_copies_and_its_path_filter_finds_a_copy(tmp_path: Path, mdrag_home: Path) -> None:
    import anyio

    from tests.test_mcp_indexes import WAIT, index, search, searched_when_ready, serving

    root = _corpus(tmp_path)
    index(root, "dups", mdrag_home)

    async def scenario() -> tuple[dict, dict]:
        with anyio.fail_after(WAIT):
            async with serving(["mcp", "--index", "dups"], mdrag_home, tmp_path / "err.log") as s:
                everywhere = await searched_when_ready(s, query=QUERY, k=5)
                only_b = await search(s, query=QUERY, index="dups", path="b/", k=5)
                return everywhere, only_b

    everywhere, only_b = anyio.run(scenario)
    flux = [r for r in everywhere["results"] if "flux capacitor" in r["text"]]
    assert [(r["rel_path"], r["copies"]) for r in flux] == [("a/page.md", [{"ref": "b/page.md"}])]
    assert [(r["rel_path"], r["copies"]) for r in only_b["results"]] == [("b/page.md", [{"ref": "a/page.md"}])]
    assert all("copies" not in r for r in everywhere["results"] if "flux capacitor" not in r["text"])


def test_removing_the_folder_of_an_original_leaves_its_copies_to_the_next_run(tmp_path: Path) -> None:
    root = _corpus(tmp_path)
    a, b = root / "a", root / "b"
    with _index({"store.backend": "faiss"}) as idx:
        idx.update([a, b])
        s = idx.remove([a])
        assert any("the next `mdrag index`" in w for w in s.warnings)
        assert str(b / "page.md") not in Manifest.load(idx.manifest_path).files
        s = idx.update()
        assert s.added == 1 and s.copies == 0
        m = _whole(idx)
        assert m.files[str(b / "page.md")].chunks
        assert [h["path"] for h in _hits(idx) if "flux capacitor" in h["text"]] == [str(b / "page.md")]
