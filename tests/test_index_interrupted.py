"""Ctrl+C of `mdrag index` keeps what it embedded: the CLI commits as it goes, as the
server does, and the first Ctrl+C commits what the run embedded before it stops."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.ingest.manifest import Manifest

ROOT = Path(__file__).resolve().parent.parent


def _mdrag(home: Path, *argv: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "mdrag", *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
    )


class _Err:
    """A run's stderr, read as it comes (its progress bar is drawn there): ``embedded`` is set once the bar
    counts a chunk embedded."""

    def __init__(self, run: subprocess.Popen[bytes]) -> None:
        self.text = ""
        self.embedded = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(run,), daemon=True)
        self._thread.start()

    def _read(self, run: subprocess.Popen[bytes]) -> None:
        assert run.stderr is not None
        while piece := os.read(run.stderr.fileno(), 4096):
            self.text += piece.decode(errors="replace")
            if any(int(n) > 0 for n in re.findall(r"embedding:.*?\| (\d+)/~?\d+ chunks", self.text[-4000:])):
                self.embedded.set()

    def all(self) -> str:
        self._thread.join(600)
        return self.text


def test_ctrl_c_keeps_what_was_embedded_and_the_next_run_goes_on(
    tmp_path: Path, shared_data: Path, mdrag_home: Path
) -> None:
    # More chunks than one round of `mdrag index` (512: a pause is heeded between rounds), so that the
    # interrupt, sent once chunks are being embedded, leaves work for the next run.
    corpus = shared_data / "markdown_hugo_docs" / "content" / "en" / "functions"
    models = Path(load_config().cache_dir / "models")
    home = tmp_path / "home"
    (home / "cache").mkdir(parents=True)
    if models.is_dir():  # the model as the tests' home has it, when it is there (no download)
        shutil.copytree(models, home / "cache" / "models")

    run = _mdrag(home, "index", str(corpus))
    err = _Err(run)
    while not err.embedded.wait(0.05) and run.poll() is None:
        pass  # the model loads, the files are read: the interrupt comes once chunks are being embedded
    run.send_signal(signal.SIGINT)
    run.wait(600)
    said = err.all()
    if run.returncode == 0:  # the interrupt came as its last chunks were written: it finished
        pytest.skip("`mdrag index` finished before the interrupt could stop it")
    assert run.returncode == 130, said[-3000:]
    kept = [line for line in said.splitlines() if "kept" in line]
    assert kept and "the next `mdrag index` goes on from there" in kept[-1], said[-3000:]

    again = _mdrag(home, "index", "--json")
    out, errs = again.communicate(timeout=600)
    assert again.returncode == 0, errs[-3000:]
    summary = json.loads(out)
    assert summary["rebuild"] is None
    assert 0 < summary["chunks_embedded"] < summary["chunks_total"]  # not all embedded again

    with Index(load_config({}, home=home)) as index:
        index._open(create=False)
        resumed = index.store.all_ids()
        assert index.status().chunks == len(resumed)
    with Index(load_config({}, home=mdrag_home)) as clean:
        clean.update([corpus])
        assert clean.store.all_ids() == resumed  # the same index as a clean build


def test_ctrl_c_during_a_growing_first_build_keeps_its_steps_and_the_next_run_embeds_only_the_rest(
    tmp_path: Path, shared_data: Path, mdrag_home: Path
) -> None:
    # The first Ctrl+C stops the embedder at its next batch (not at the end of a round of chunks), commits the
    # files whose chunks are written, and says how many chunks were kept; the next run embeds none of them.
    corpus = shared_data / "markdown_hugo_docs" / "content" / "en" / "functions"
    home = tmp_path / "home"
    manifest = home / "cache" / "manifests" / "default.json"
    run = _mdrag(home, "index", str(corpus))
    err = _Err(run)
    deadline = time.monotonic() + 600
    while run.poll() is None and time.monotonic() < deadline:  # the first step commits: the build is partial
        m = Manifest.load(manifest) if manifest.exists() else None
        if m is not None and m.partial:
            break
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    run.wait(600)
    said = err.all()
    if run.returncode == 0:  # the interrupt came as its last chunks were written: it finished
        pytest.skip("`mdrag index` finished before the interrupt could stop it")
    assert run.returncode == 130, said[-3000:]
    line = [line for line in said.splitlines() if "kept" in line][-1]
    kept = int(re.search(r"kept (\d+) chunks", line).group(1))  # type: ignore[union-attr]
    m = Manifest.load(manifest)
    assert m is not None and not m.dirty and m.chunk_count == kept > 0 and m.partial, said[-3000:]

    again = _mdrag(home, "index", "--json")
    out, errs = again.communicate(timeout=600)
    assert again.returncode == 0, errs[-3000:]
    summary = json.loads(out)
    assert summary["chunks_embedded"] + summary["chunks_reused"] == summary["chunks_total"] - kept, summary
    m = Manifest.load(manifest)
    assert m is not None and m.partial is None and not m.dirty
