"""The index's folder set: a missing, empty or unreadable folder never deletes what was indexed there;
`mdrag index DIR` adds, plain `mdrag index` updates them all, `mdrag remove DIR` takes one out.
Also which files a scan selects: .gitignore, include/exclude, size limit, symbolic links, unsupported files."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.errors import ConfigError
from mdrag.frontends.cli import main
from mdrag.index import Index
from mdrag.ingest.manifest import Manifest
from tests.conftest import HashEmbedder
from tests.test_indexer import _consistent


def _folder(path: Path, word: str, n: int = 3) -> Path:
    path.mkdir(parents=True)
    for i in range(n):
        (path / f"{word}{i}.md").write_text(f"# {word.title()} {i}\n\nAll about {word} number {i}.\n")
    return path


def _index(**overrides: object) -> Index:
    return Index(load_config({"index": "folders", **overrides}), embedder=HashEmbedder())


def _paths(idx: Index, query: str) -> set[str]:
    return {Path(r.path).parent.name for r in idx.search(query, k=50, threshold=0)}


def test_a_missing_folder_never_deletes_its_chunks(tmp_path: Path) -> None:
    a, b = _folder(tmp_path / "alpha", "alpha"), _folder(tmp_path / "beta", "beta")
    with _index() as idx:
        first = idx.update([a, b])
        assert first.folders == [str(a), str(b)]
        s = idx.update([tmp_path / "typo"])  # a typo: a warning, nothing deleted
        assert (s.deleted, s.chunks_deleted, s.chunks_total) == (0, 0, first.chunks_total)
        assert any("typo" in w and "does not exist" in w for w in s.warnings)
        assert s.folders == [str(a), str(b)], "a folder that does not exist is not added"
        shutil.rmtree(b)  # an unmounted disk
        s = idx.update()
        assert (s.deleted, s.kept, s.chunks_total) == (0, 3, first.chunks_total)
        assert any(str(b) in w and "mdrag remove" in w for w in s.warnings)
        assert s.missing_folders == [str(b)]
        assert _paths(idx, "beta number") >= {"beta"}, "its chunks are still searchable"
        b.mkdir()  # mounted again, but empty: still kept
        s = idx.update()
        assert (s.deleted, s.chunks_total) == (0, first.chunks_total)
        _consistent(idx)


def test_index_dir_adds_and_keeps_the_others_and_plain_index_updates_all(tmp_path: Path) -> None:
    a, b = _folder(tmp_path / "alpha", "alpha"), _folder(tmp_path / "beta", "beta")
    with _index() as idx:
        idx.update([a])
        s = idx.update([b])
        assert s.added == 3 and s.deleted == 0 and s.folders == [str(a), str(b)]
        (a / "alpha0.md").write_text("# Alpha 0\n\nRewritten alpha text.\n")
        (b / "beta1.md").unlink()
        s = idx.update()  # no folder: every folder of the index
        assert (s.modified, s.deleted) == (1, 1)
        assert _paths(idx, "alpha beta number") == {"alpha", "beta"}
        _consistent(idx)


def test_remove_takes_a_folder_out_even_when_it_is_gone(tmp_path: Path) -> None:
    a, b = _folder(tmp_path / "alpha", "alpha"), _folder(tmp_path / "beta", "beta")
    with _index() as idx:
        total = idx.update([a, b]).chunks_total
        shutil.rmtree(b)
        with pytest.raises(ConfigError, match="not a folder of index 'folders'; its folders are: .*alpha"):
            idx.remove([tmp_path / "gamma"])
        s = idx.remove([b])
        assert s.removed_folders == [str(b)] and s.deleted == 3 and s.folders == [str(a)]
        assert 0 < s.chunks_total < total and s.chunks_deleted == total - s.chunks_total
        assert _paths(idx, "alpha beta number") == {"alpha"}
        _consistent(idx)
        assert idx.update().folders == [str(a)]


@pytest.mark.parametrize("backend", ["milvus", "faiss"])
def test_a_removal_interrupted_after_its_manifest_save_is_finished_by_the_next_run(
    tmp_path: Path, backend: str
) -> None:
    a, b = _folder(tmp_path / "alpha", "alpha"), _folder(tmp_path / "beta", "beta")
    with _index(**{"store.backend": backend}) as idx:
        idx.update([a, b])
    with _index() as idx:
        assert idx.backend == backend, "store.backend auto finds the index where it was built"

        def crash(*args: object, **kwargs: object) -> None:
            raise KeyboardInterrupt  # the process dies before the chunks are deleted

        store_class = type(idx.store)
        real = store_class.delete_ids
        store_class.delete_ids = crash  # type: ignore[method-assign]
        try:
            with pytest.raises(KeyboardInterrupt):
                idx.remove([b])
        finally:
            store_class.delete_ids = real  # type: ignore[method-assign]
    with _index() as idx:
        s = idx.update()
        assert s.repaired and s.folders == [str(a)]
        assert {Path(p).parent.name for p in idx.store.id_paths().values()} == {"alpha"}
        _consistent(idx)


def test_an_unreadable_subfolder_is_reported_and_its_files_kept(tmp_path: Path, monkeypatch) -> None:
    a = _folder(tmp_path / "alpha", "alpha")
    secret = _folder(a / "secret", "secret")
    with _index() as idx:
        total = idx.update([a]).chunks_total
        real = os.scandir

        def scandir(path: object = ".") -> object:  # what the walk meets when it may not list a folder
            if str(path) == str(secret):
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "scandir", scandir)
        s = idx.update()
        assert any(str(secret) in w and "Permission denied" in w for w in s.warnings)
        assert (s.deleted, s.kept, s.chunks_total) == (0, 3, total)


def test_gitignore_include_exclude_size_links_and_unsupported(tmp_path: Path) -> None:
    root = _folder(tmp_path / "docs", "page")
    (root / ".gitignore").write_text("build/\n*.tmp.md\n!keep.tmp.md\n")
    _folder(root / "build", "built")
    (root / "scratch.tmp.md").write_text("# Scratch\n\nIgnored.\n")
    (root / "keep.tmp.md").write_text("# Keep\n\nNegated in .gitignore: indexed.\n")
    _folder(root / "drafts", "draft")
    (root / "notes.odt").write_bytes(b"PK\x03\x04")  # no parser
    (root / "image.png").write_bytes(b"\x89PNG")
    (root / "big.md").write_text("# Big\n\n" + "word " * 60_000)  # ~0.3 MB
    outside = _folder(tmp_path / "outside", "outside")
    (root / "link.md").symlink_to(outside / "outside0.md")
    (root / "inner-link.md").symlink_to(root / "page0.md")
    with _index(**{"index.exclude": ["drafts/"], "index.max_file_mb": 0.1}) as idx:
        s = idx.update([root])
        names = {Path(p).name for p in idx.store.id_paths().values()}
        # the link inside the folder is indexed; page0.md, the same bytes, is recorded as its copy
        assert names == {"page1.md", "page2.md", "keep.tmp.md", "inner-link.md"}
        assert s.copies == 1
        skipped = {Path(p).name: reason for p, reason in s.skipped_files}
        assert "over the 0.1 MB limit (setting index.max_file_mb)" in skipped["big.md"]
        assert "outside the indexed folder" in skipped["link.md"]
        assert s.excluded == 1  # scratch.tmp.md; build/ and drafts/ are pruned as folders, not walked
        assert s.unsupported == {".png": 1, ".odt": 1}
    with _index(**{"index.exclude": ["drafts/"], "index.max_file_mb": 0.1}) as idx:
        again = idx.update([root])  # nothing changed (answered without opening the store): still reported
        assert not idx._opened, "the store was not opened"
        assert {Path(p).name for p, _ in again.skipped_files} == {"big.md", "link.md"} and again.skipped == 2
    with _index(**{"index.gitignore": False, "index.include": ["build/**"]}) as idx:
        s = idx.update([root])
        assert {Path(p).name for p in idx.store.id_paths().values()} == {"built0.md", "built1.md", "built2.md"}


@contextmanager
def _readers(*fifos: Path) -> Iterator[list[Path]]:
    """For the block, the FIFOs that something opened to read: each such reader gets end of file at once
    (the FIFO is opened to write and closed), rather than waiting for a writer for ever."""
    opened: list[Path] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.05):
            for fifo in fifos:
                try:
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # fails (ENXIO) while no one reads it
                except OSError:
                    continue
                os.close(fd)
                opened.append(fifo)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield opened
    finally:
        stop.set()
        watcher.join()


def test_fifos_and_sockets_are_skipped_with_the_reason_and_never_opened(tmp_path: Path) -> None:
    """Opening a FIFO waits for a writer: a FIFO (or a socket) under a Markdown name is listed as skipped,
    and the run goes on; one that replaces an indexed file takes its chunks out."""
    root = _folder(tmp_path / "docs", "page")
    (root / "pipe.md").write_text("# Pipe\n\nA regular file for now.\n")
    with _index() as idx:
        assert idx.update([root]).added == 4
    (root / "pipe.md").unlink()
    os.mkfifo(root / "pipe.md")
    os.mkfifo(root / ".gitignore")  # read by the scan: never opened either
    with socket.socket(socket.AF_UNIX) as sock, _readers(root / "pipe.md", root / ".gitignore") as opened:
        sock.bind(str(root / "sock.md"))
        with _index() as idx:
            s = idx.update([root])
            assert dict(s.skipped_files) == {
                str(root / "pipe.md"): "not a regular file (a FIFO)",
                str(root / "sock.md"): "not a regular file (a socket)",
            }
            assert (s.skipped, s.deleted, s.unchanged) == (2, 0, 3)
            assert {Path(p).name for p in idx.store.id_paths().values()} == {"page0.md", "page1.md", "page2.md"}
            again = idx.update([root])  # nothing changed: still listed
            assert dict(again.skipped_files) == dict(s.skipped_files) and again.added == 0
            _consistent(idx)
    assert opened == [], "no FIFO was opened"


def test_the_cli_keeps_folders_and_removes_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("mdrag.index.Index.__init__.__defaults__", (None, HashEmbedder()))
    a, b = _folder(tmp_path / "glossary", "glossary"), _folder(tmp_path / "notes", "notes")
    monkeypatch.chdir(tmp_path)  # no ./markdown here

    errors: list[str] = []

    def run(*argv: str, code: int = 0) -> dict:
        assert main([*argv, "--json", "-q"]) == code
        out, err = capsys.readouterr()
        errors.append(err)
        return json.loads(out)

    total = run("index", str(a), str(b))["chunks_total"]
    s = run("index", "missing", code=1)  # a folder named but not found is an error, and loses nothing
    assert (s["deleted"], s["chunks_total"]) == (0, total)
    assert "not found, so not indexed: missing." in errors[-1]
    s = run("index")
    assert (s["deleted"], s["chunks_total"], s["folders"]) == (0, total, [str(a), str(b)])
    s = run("remove", str(b))
    assert s["folders"] == [str(a)] and s["deleted"] == 3
    assert main(["remove", str(b)]) == 2
    assert "is not a folder of index" in capsys.readouterr().err


def test_a_change_that_rechunks_everything_keeps_every_folder(tmp_path: Path) -> None:
    a, b = _folder(tmp_path / "alpha", "alpha"), _folder(tmp_path / "beta", "beta")
    with _index() as idx:
        idx.update([a, b])
    with _index(**{"chunk.size": 500}) as idx:  # chunk settings changed, and only beta is named
        s = idx.update([b])
        assert s.rebuild == "chunk settings changed" and s.folders == [str(a), str(b)]
        assert _paths(idx, "alpha beta number") == {"alpha", "beta"}
        s = idx.update([b], rebuild=True)
        assert s.folders == [str(a), str(b)] and s.added == 6
        _consistent(idx)


def test_binary_and_legacy_encoded_files_are_reported_in_the_summary(tmp_path: Path) -> None:
    root = _folder(tmp_path / "docs", "page", 1)
    shutil.copy("/bin/ls" if Path("/bin/ls").exists() else __file__, root / "binary.md")
    (root / "noise.md").write_bytes(os.urandom(200_000))
    (root / "latin.md").write_bytes("# Genève\n\nLa ville de Genève est au bord du lac Léman.\n".encode("latin-1"))
    (root / "wide.md").write_bytes("# Zürich\n\nÜber die Stadt Zürich.\n".encode("utf-16"))
    with _index() as idx:
        s = idx.update([root])
        skipped = {Path(p).name: reason for p, reason in s.skipped_files}
        assert set(skipped) == {"binary.md", "noise.md"} and all("binary content" in r for r in skipped.values())
        assert {Path(p).name: e for p, e in s.decoded.items()} == {"latin.md": "cp1252", "wide.md": "utf_16"}
        texts = " ".join(r.text for r in idx.search("Genève Zürich lac", k=10, threshold=0))
        assert "Genève" in texts and "Zürich" in texts


def test_a_file_that_never_finishes_parsing_is_skipped_and_the_run_goes_on(tmp_path: Path) -> None:
    """A real HTML parse stopped by the time limit (a page so deep it takes minutes: here the limit is tiny)."""
    root = _folder(tmp_path / "docs", "page", 2)
    depth = 20_000
    (root / "deep.html").write_text("<html><body>" + "<div><b>b</b>x" * depth + "</div>" * depth + "</body></html>")
    with _index(**{"index.parse_timeout": 0.5}) as idx:
        s = idx.update([root])
        assert s.added == 2 and s.skipped == 1
        assert [(Path(p).name, r) for p, r in s.skipped_files] == [
            ("deep.html", "parsing took longer than 0.5 s (setting index.parse_timeout): skipped")
        ]
        assert _paths(idx, "page number") == {"docs"}
        _consistent(idx)

        # Not parsed again while unchanged: each run would wait out the time limit again (two minutes by
        # default), and so would the server at each save. It says so, and it is tried again on a change.
        again = idx.update([root])
        assert (again.added, again.unchanged, again.skipped) == (0, 2, 1)
        assert again.skipped_files[0][1].endswith(
            "(as at an earlier run, the file unchanged since: tried again when it changes, or with --rebuild)"
        )
        manifest = Manifest.load(idx.manifest_path)
        assert manifest is not None and list(manifest.skipped) == [str(root / "deep.html")]
    with _index(**{"index.parse_timeout": 0.6}) as idx:  # another limit may let it through: tried again
        retried = idx.update([root])
        assert retried.skipped_files == [
            (str(root / "deep.html"), "parsing took longer than 0.6 s (setting index.parse_timeout): skipped")
        ]
        (root / "deep.html").write_text("<html><body><p>A shallow page now.</p></body></html>")
        fixed = idx.update([root])
        assert (fixed.added, fixed.skipped) == (1, 0) and _paths(idx, "shallow page") >= {"docs"}
        manifest = Manifest.load(idx.manifest_path)
        assert manifest is not None and manifest.skipped == {}
        _consistent(idx)


def test_a_file_skipped_for_time_is_counted_and_listed_once_in_a_run_of_several_steps(
    tmp_path: Path, mdrag_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mdrag index` commits in steps: a later step finds the file an earlier one skipped in the manifest,
    and must not count it, nor list it "as at an earlier run", a second time."""
    root = _folder(tmp_path / "docs", "page", 2)
    depth = 20_000
    for i in range(3):
        (root / f"deep{i}.html").write_text("<html><body>" + "<div><b>b</b>x" * depth + "</div>" * depth)
    (mdrag_home / "config.yaml").write_text("index:\n  parse_timeout: 0.5\n")
    monkeypatch.setattr("mdrag.index.Index.__init__.__defaults__", (None, HashEmbedder()))
    monkeypatch.setattr("mdrag.frontends.cli.indexing._STEP_S", 0.01)  # a step per file: each pauses at once
    code = main(["index", str(root), "--index", "steps", "--json", "-q"])
    out, err = capsys.readouterr()
    assert code == 0, err
    s = json.loads(out)
    deep = sorted(str(root / f"deep{i}.html") for i in range(3))
    assert s["skipped"] == 3 and sorted(f["path"] for f in s["skipped_files"]) == deep, s
    assert not any("as at an earlier run" in f["reason"] for f in s["skipped_files"]), s


def test_a_change_that_rechunks_everything_waits_for_a_missing_folder(tmp_path: Path) -> None:
    from mdrag.errors import MdragError

    a, b = _folder(tmp_path / "alpha", "alpha"), _folder(tmp_path / "beta", "beta")
    with _index() as idx:
        total = idx.update([a, b]).chunks_total
    shutil.move(b, tmp_path / "unmounted")
    with _index(**{"chunk.size": 500}) as idx:
        for rebuild in (False, True):
            with pytest.raises(MdragError, match=f"chunk settings changed|--rebuild.*{b}|{b}.*mdrag remove"):
                idx.update(rebuild=rebuild)
        assert idx.status().chunks == total, "nothing was deleted"
    shutil.move(tmp_path / "unmounted", b)
    with _index(**{"chunk.size": 500}) as idx:
        s = idx.update()
        assert s.rebuild == "chunk settings changed" and s.folders == [str(a), str(b)]
        _consistent(idx)


def test_a_folder_named_but_not_found_is_an_error_the_others_are_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("mdrag.index.Index.__init__.__defaults__", (None, HashEmbedder()))
    a = _folder(tmp_path / "glossary", "glossary")
    monkeypatch.chdir(tmp_path)

    assert main(["index", str(a), "notse", "-q"]) == 1  # a typo beside a real folder
    out, err = capsys.readouterr()
    assert "folders: " + str(a) in out and "3 added" in out
    assert "not found, so not indexed: notse." in err and str(a) not in err
    assert main(["index", str(a), "-q"]) == 0  # all found: no error
    capsys.readouterr()

    # `mdrag serve` is refused before it starts, and touches nothing
    assert main(["serve", "notse", "--port", "1"]) == 1
    assert "not found: notse. Check the path; nothing was started." in capsys.readouterr().err
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["folders"] == [str(a)]


def test_mdrag_index_counts_the_files_of_a_missing_folder_as_kept_every_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The warning said "its 3 indexed files are kept" while the summary counted none: a run with nothing
    # else to do ends early, and that path left `kept` at 0
    monkeypatch.setattr("mdrag.index.Index.__init__.__defaults__", (None, HashEmbedder()))
    a, b = _folder(tmp_path / "glossary", "glossary"), _folder(tmp_path / "notes", "notes")
    monkeypatch.chdir(tmp_path)
    assert main(["index", str(a), str(b), "-q"]) == 0
    capsys.readouterr()
    shutil.rmtree(b)  # an unmounted disk
    for _ in range(2):  # the first run records the state; the second has nothing else to do
        assert main(["index", "--json", "-q"]) == 0
        s = json.loads(capsys.readouterr().out)
        assert (s["kept"], s["deleted"], s["unchanged"]) == (3, 0, 3)
    assert main(["index"]) == 0
    assert "3 kept (folder missing or unreadable)" in capsys.readouterr().out
