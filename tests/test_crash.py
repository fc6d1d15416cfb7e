"""kill -9 at any point of an indexing run leaves an index that the next run repairs:
no duplicate and no orphan chunks, nothing missing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.manifest import Manifest
from tests.conftest import HashEmbedder

REPO = Path(__file__).resolve().parents[1]

# A real indexing process: small batches and a slow embedder, so kills land mid-run.
DRIVER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {repo!r})
    import mdrag.indexer
    from mdrag.config import load_config
    from mdrag.index import Index
    from tests.conftest import HashEmbedder

    mdrag.indexer._BATCH_CHUNKS = 16
    mdrag.indexer._SAVE_EVERY_S = 0.0
    class Slow(HashEmbedder):
        def embed_batch(self, texts):
            time.sleep(0.1)
            return super().embed_batch(texts)
    Index(load_config({{"index": "crash"}}), embedder=Slow()).update([sys.argv[1]])
    print("finished")
    """
)


def _corpus(tmp_path: Path, shared_data: Path, n: int = 80) -> Path:
    root = tmp_path / "docs"
    src = sorted((shared_data / "markdown_hugo_docs").rglob("*.md"))[:n]
    for p in src:
        dest = root / p.relative_to(shared_data / "markdown_hugo_docs")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dest)
    return root


def _check(home: Path, root: Path) -> set[str]:
    idx = Index(load_config({"index": "crash"}, home=home), embedder=HashEmbedder())
    s = idx.update([root])
    m = Manifest.load(idx.manifest_path)
    assert m is not None and not m.dirty
    ids = idx.store.all_ids()
    assert ids == m.chunk_ids(), "no orphans, nothing missing"
    assert idx.store.count() == len(ids) == s.chunks_total, "no duplicates"
    assert len(m.files) == sum(1 for _ in root.rglob("*.md"))
    idx.close()
    return ids


def _mutate(root: Path, round_: int) -> None:
    """Give the next run work to do: edit some files, add one, delete one."""
    files = sorted(root.rglob("*.md"))
    for p in files[round_::9][:8]:
        p.write_text(p.read_text() + f"\n\n## Round {round_}\n\nEdited in round {round_} of the crash test.\n")
    (root / f"new-{round_}.md").write_text(f"# New {round_}\n\nA page added before round {round_}.\n")
    files[-1 - round_].unlink()


def _wait_until_writing(proc: subprocess.Popen, manifest: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        m = Manifest.load(manifest) if manifest.exists() else None
        if m is not None and m.dirty:
            return
        time.sleep(0.01)


@pytest.mark.slow
def test_kill_9_at_many_points_then_repair(tmp_path: Path, shared_data: Path, mdrag_home: Path) -> None:
    import random

    rng = random.Random(7)
    root = _corpus(tmp_path, shared_data)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(repo=str(REPO)))
    env = {**os.environ, "MDRAG_HOME": str(mdrag_home)}
    manifest = mdrag_home / "cache" / "manifests" / "crash.json"
    kills = 0
    for round_ in range(8):
        if round_:
            _mutate(root, round_)
        proc = subprocess.Popen([sys.executable, str(script), str(root)], env=env, stdout=subprocess.PIPE)
        _wait_until_writing(proc, manifest)
        time.sleep(rng.uniform(0.0, 0.5))  # somewhere in parse / embed / upsert / delete / save
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    assert kills >= 5, "the kills must land while indexing runs"
    repaired = _check(mdrag_home, root)
    # The same corpus indexed cleanly gives exactly the same chunks.
    clean_home = tmp_path / "clean-home"
    assert _check(clean_home, root) == repaired


@pytest.mark.slow
def test_kill_9_of_the_real_cli_with_the_real_model(tmp_path: Path, shared_data: Path, mdrag_home: Path) -> None:
    root = _corpus(tmp_path, shared_data, 40)
    env = {**os.environ, "MDRAG_HOME": str(mdrag_home), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "mdrag", "index", str(root), "--index", "crash", "-q"]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stderr=subprocess.PIPE)
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
    done = subprocess.run(cmd[:-1] + ["--json"], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert '"repaired": true' in done.stdout
    from mdrag.embedding.local import LocalEmbedder

    idx = Index(load_config({"index": "crash"}), embedder=LocalEmbedder())
    m = Manifest.load(idx.manifest_path)
    assert m is not None and idx.status()["chunks"] == m.chunk_count > 0
    assert idx.store.all_ids() == m.chunk_ids()
    idx.close()
