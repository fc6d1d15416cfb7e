"""The machine misbehaves: stdout's reader goes away, MDRAG_HOME is read-only, the disk is full.

Real `python -m mdrag` processes, the real model (its export shared by every
test), the default store (FAISS for a new index); the read-only home and the full
disk on Milvus Lite too. Read-only homes are tested two ways: permissions (chmod
a-w; as root, the process runs without CAP_DAC_OVERRIDE so that permissions
apply to it) and a read-only bind mount (root only). A full disk is an 8 MB
tmpfs (root only).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.harness import REPO, MiniLMIdentity, assert_clear_error, corpus, env, mdrag, verify

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as for any Unix tool whose reader went away


def closed_pipe() -> int:
    """The write end of a pipe whose read end is already closed: every write fails (EPIPE)."""
    r, w = os.pipe()
    os.close(r)
    return w


def test_status_into_a_closed_pipe_exits_quietly(mdrag_home: Path) -> None:
    for argv in (["status"], ["status", "--json"]):
        w = closed_pipe()
        try:
            p = mdrag(mdrag_home, *argv, stdout=w, stderr=subprocess.PIPE, capture_output=False)
        finally:
            os.close(w)
        assert p.returncode == EXIT_BROKEN_PIPE, p.stderr
        assert p.stderr == "", "no traceback, no 'Exception ignored' at exit"


@pytest.fixture
def docs(tmp_path: Path, shared_data: Path) -> Path:
    return corpus(tmp_path / "docs", shared_data, n=12, step=40)


#: The stores a read-only home and a full disk are tried on: the default (``auto``: FAISS for a new
#: index), and Milvus Lite, which searches a read-only folder through a private view of it.
STORES = ["auto", "milvus"]


@pytest.fixture
def backend() -> str:
    """The home's ``store.backend``: the default, unless a test is parametrized over :data:`STORES`."""
    return "auto"


def _set_store(home: Path, backend: str) -> None:
    if backend != "auto":
        with open(home / "config.yaml", "a", encoding="utf-8") as f:
            f.write(f"store:\n  backend: {backend}\n")


@pytest.fixture
def indexed(docs: Path, home: Path, backend: str) -> Path:
    """``home`` with an index of ``docs`` written by the real model, in the ``backend`` store."""
    _set_store(home, backend)
    p = mdrag(home, "index", str(docs), "-q")
    assert p.returncode == 0, p.stderr
    return home


@pytest.mark.slow
def test_search_into_a_closed_pipe_or_head_exits_quietly(indexed: Path) -> None:
    for argv in (
        ["search", "front matter", "-k", "50", "--threshold", "0"],
        ["search", "front matter", "-k", "50", "--threshold", "0", "--json"],
    ):
        w = closed_pipe()
        try:
            p = mdrag(indexed, *argv, stdout=w, stderr=subprocess.PIPE, capture_output=False)
        finally:
            os.close(w)
        assert p.returncode == EXIT_BROKEN_PIPE and p.stderr == "", p.stderr
    # `| head -1`: head may exit before or after mdrag writes everything; either way, quietly.
    search = "-m mdrag search 'front matter' -k 50 --threshold 0 --json"
    cmd = f"set -o pipefail; {shlex.quote(sys.executable)} {search} | head -1"
    sh = subprocess.run(["bash", "-c", cmd], env=env(indexed), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert sh.returncode in (0, EXIT_BROKEN_PIPE) and sh.stdout == "[\n" and sh.stderr == "", sh


# -- a read-only MDRAG_HOME ----------------------------------------------------


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root (links not followed): size and mtime, to show that nothing changed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_size, st.st_mtime_ns)
    return out


def _chmod_tree(root: Path, writable: bool) -> None:
    w = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, ""]:
            p = os.path.join(dirpath, name) if name else dirpath
            if os.path.islink(p):
                continue
            mode = os.lstat(p).st_mode
            os.chmod(p, (mode | stat.S_IWUSR) if writable else (mode & ~w))


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@pytest.fixture(params=["chmod", "mount"])
def read_only(request: pytest.FixtureRequest, indexed: Path) -> Iterator[tuple[Path, list[str]]]:
    """The indexed home made read-only: (home, the prefix that runs a command under it)."""
    prefix: list[str] = []
    if request.param == "chmod":
        if os.geteuid() == 0:  # root ignores permissions: run without CAP_DAC_OVERRIDE
            if not shutil.which("setpriv"):
                pytest.skip("running as root and setpriv (util-linux) is missing: permissions would not apply")
            prefix = ["setpriv", "--bounding-set=-dac_override", "--"]
        _chmod_tree(indexed, writable=False)
        try:
            yield indexed, prefix
        finally:
            _chmod_tree(indexed, writable=True)
        return
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    bound = _mount("--bind", str(indexed), str(indexed))
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bound.stderr.strip()}")
    try:
        ro = _mount("-o", "remount,bind,ro", str(indexed))
        if ro.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {ro.stderr.strip()}")
        yield indexed, prefix
    finally:
        subprocess.run(["umount", "-l", str(indexed)], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("backend", STORES)
def test_search_and_status_work_on_a_read_only_home(
    read_only: tuple[Path, list[str]], docs: Path, tmp_path: Path, backend: str
) -> None:
    home, prefix = read_only
    probe = subprocess.run([*prefix, "touch", str(home / "probe")], capture_output=True)
    assert probe.returncode != 0, "the home is really read-only for the commands below"
    before = _tree(home)
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*prefix, sys.executable, "-m", "mdrag", *argv],
            env=env(home, TMPDIR=str(private_tmp)),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )

    found = run("search", "front matter", "--threshold", "0", "--json")
    assert found.returncode == 0 and "Traceback" not in found.stderr, found.stderr
    assert {r["path"] for r in json.loads(found.stdout)} <= {str(p) for p in docs.rglob("*.md")}
    assert json.loads(found.stdout), "results, not an empty list"
    st = run("status", "--json")
    assert st.returncode == 0 and "Traceback" not in st.stderr, st.stderr
    assert json.loads(st.stdout)["chunks"] > 0 and json.loads(st.stdout)["files"] == 12
    assert json.loads(st.stdout)["backend"] == ("faiss" if backend == "auto" else backend)
    # Indexing needs to write: a clear error. Nothing changed, nothing left behind.
    (docs / "added.md").write_text("# Zeppelins\n\nAirships and their hangars.\n")
    assert_clear_error(run("index", str(docs)), "read-only")
    assert _tree(home) == before
    assert list(private_tmp.iterdir()) == [], "the private view of the store is removed"
    (docs / "added.md").unlink()
    verify(home, docs, "default", embedder=MiniLMIdentity())


@pytest.mark.slow
def test_search_on_a_read_only_home_without_the_model_export_says_what_to_do(indexed: Path) -> None:
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("running as root and setpriv (util-linux) is missing: permissions would not apply")
    prefix = ["setpriv", "--bounding-set=-dac_override", "--"] if os.geteuid() == 0 else []
    (indexed / "cache" / "models").unlink()  # built elsewhere, or the export was deleted
    _chmod_tree(indexed, writable=False)
    try:
        cmd = [*prefix, sys.executable, "-m", "mdrag", "search", "front matter"]
        p = subprocess.run(cmd, env=env(indexed), cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        _chmod_tree(indexed, writable=True)
    assert_clear_error(p, "Cannot write the model's ONNX file", "Run mdrag once where that folder is writable")


@pytest.mark.slow
def test_search_without_the_model_file_writes_it_first(indexed: Path) -> None:
    """The model's file deleted (or a cache cleaned): the next search writes it again from the weights (about
    a second, logged at INFO, so shown with -v) and answers; the search after finds it."""
    from mdrag.config import load_config
    from mdrag.embedding import embedder_name

    runtime = "OpenVINO" if embedder_name(load_config(home=indexed)) == "openvino" else "onnxruntime"
    (indexed / "cache" / "models").unlink()  # this home's link to the model every test shares
    p = mdrag(indexed, "search", "front matter", "--json", "-v")
    assert p.returncode == 0 and json.loads(p.stdout), p.stderr
    models = indexed / "cache" / "models"
    said = (
        f"mdrag: INFO: writing the all-MiniLM-L6-v2 model to {re.escape(str(models))}/all-MiniLM-L6-v2-"
        f"[0-9a-f]+ for the {runtime} runtime \\(once\\)"
    )
    assert re.search(said, p.stderr), p.stderr
    assert list(models.glob("all-MiniLM-L6-v2-*/model.onnx")), "the file is kept for the next command"
    again = mdrag(indexed, "search", "front matter", "--json", "-v")
    assert again.returncode == 0 and "writing the" not in again.stderr, "written once, then found"


# -- a full disk -----------------------------------------------------------------


@pytest.fixture
def small_disk(mdrag_home: Path, model_cache: Path) -> Iterator[Path]:
    """MDRAG_HOME on its own 8 MB tmpfs (root only), with the shared model export linked in."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = _mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mdrag_home))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        (mdrag_home / "cache").mkdir()
        (mdrag_home / "cache" / "models").symlink_to(model_cache)
        yield mdrag_home
    finally:
        subprocess.run(["umount", "-l", str(mdrag_home)], check=True)


def _fill(disk: Path, leave: int) -> Path:
    """Write a file until the disk is full, then free ``leave`` bytes of it."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    os.truncate(filler, max(filler.stat().st_size - leave, 0))
    return filler


@pytest.mark.slow
@pytest.mark.parametrize("backend", STORES)
@pytest.mark.parametrize("left", [0, 64 * 1024], ids=["full-before-the-run", "full-during-the-run"])
def test_index_on_a_full_disk_fails_clearly_then_repairs(
    small_disk: Path, tmp_path: Path, shared_data: Path, left: int, backend: str
) -> None:
    _set_store(small_disk, backend)
    docs = corpus(tmp_path / "docs", shared_data, n=12, step=40)
    p = mdrag(small_disk, "index", str(docs), "-q")
    assert p.returncode == 0, p.stderr
    # New files to index: 40 more chunks than the disk has room for in the second case.
    corpus(docs / "more", shared_data, n=40, step=23)
    filler = _fill(small_disk, left)

    p = mdrag(small_disk, "index", str(docs), "-q")
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("mdrag: error:") and ("space" in last or "full" in last), p.stderr
    assert not list((small_disk / "cache" / "manifests").glob("*.tmp")), "no half-written manifest left"

    filler.unlink()
    p = mdrag(small_disk, "index", str(docs), "--json", "-q")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["added"] + json.loads(p.stdout)["unchanged"] == 52
    verify(small_disk, docs, "default", embedder=MiniLMIdentity())
