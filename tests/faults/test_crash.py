"""kill -9 at any point of an indexing run leaves an index that the next run repairs:
no duplicate and no orphan chunks, nothing missing."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.ingest.manifest import Manifest
from tests.faults.harness import REPO, corpus, driver, env, mutate, run_driver, verify, wait_until_writing


@pytest.mark.slow
@pytest.mark.parametrize("store", ["milvus", "faiss"])
def test_kill_9_at_many_points_then_repair(tmp_path: Path, shared_data: Path, mdrag_home: Path, store: str) -> None:
    import random

    rng = random.Random(7)
    root = corpus(tmp_path / "docs", shared_data)
    manifest = mdrag_home / "cache" / "manifests" / "crash.json"
    kills = 0
    for round_ in range(8):
        if round_:
            mutate(root, round_)
        # A slow embedder (0.1 s a batch), so that kills land mid-run.
        cmd = driver(root, mdrag_home, "--index", "crash", "--slow", "0.1")
        proc = subprocess.Popen(cmd, env=env(mdrag_home, MDRAG_STORE=store), cwd=REPO, stdout=subprocess.PIPE)
        wait_until_writing(proc, manifest)
        time.sleep(rng.uniform(0.0, 0.5))  # somewhere in parse / embed / upsert / delete / save
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    assert kills >= 5, "the kills must land while indexing runs"
    code, report, err = run_driver(root, mdrag_home, "--index", "crash", store=store)
    assert code == 0 and report is not None, err
    repaired = verify(mdrag_home, root, "crash", store=store)
    # The same corpus indexed cleanly gives exactly the same chunks.
    clean_home = tmp_path / "clean-home"
    assert run_driver(root, clean_home, "--index", "crash", store=store)[0] == 0
    assert verify(clean_home, root, "crash", store=store) == repaired


@pytest.mark.slow
def test_kill_9_of_the_real_cli_with_the_real_model(tmp_path: Path, shared_data: Path, mdrag_home: Path) -> None:
    root = corpus(tmp_path / "docs", shared_data, 40)
    cmd = [sys.executable, "-m", "mdrag", "index", str(root), "--index", "crash", "-q"]
    proc = subprocess.Popen(cmd, env=env(mdrag_home), cwd=REPO, stderr=subprocess.PIPE)
    manifest = mdrag_home / "cache" / "manifests" / "crash.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # kill while it embeds and writes
        m = Manifest.load(manifest) if manifest.exists() else None
        if m is not None and m.dirty:
            time.sleep(1.5)
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.kill()
    proc.wait()
    done = subprocess.run(
        cmd[:-1] + ["--json"], env=env(mdrag_home), cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert '"repaired": true' in done.stdout
    from mdrag.embedding.local import LocalEmbedder

    idx = Index(load_config({"index": "crash"}), embedder=LocalEmbedder())
    m = Manifest.load(idx.manifest_path)
    assert m is not None and idx.status().chunks == m.chunk_count > 0
    assert idx.store.all_ids() == m.chunk_ids()
    idx.close()
