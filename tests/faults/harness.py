"""What the fault tests share: a corpus, the kill driver, and the check that an index is whole."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from mdrag.config import load_config
from mdrag.embedding.base import Embedder
from mdrag.index import Index
from mdrag.ingest.manifest import Manifest
from tests.conftest import HashEmbedder

REPO = Path(__file__).resolve().parents[2]

#: One record per fault trial, for the summary line and benchmarks/out/faults.json (see conftest.py).
TRIALS: list[dict[str, Any]] = []
SPENT: dict[str, float] = {}  # node id -> seconds from its setup to its teardown, tests in tests/faults/
#: One record per damage case (tests/faults/test_damage_served.py): store, damage, passed, seconds.
DAMAGE: list[dict[str, Any]] = []


class MiniLMIdentity(HashEmbedder):
    """Opens an index the real model wrote, to check its chunks without loading the model (it embeds nothing)."""

    model_id = "sentence-transformers/all-MiniLM-L6-v2"

    def __init__(self) -> None:
        super().__init__(dim=384)


def corpus(dest: Path, shared_data: Path, n: int = 80, step: int = 1) -> Path:
    """Every ``step``-th of the Hugo docs' Markdown files, ``n`` at most, copied under ``dest``."""
    base = shared_data / "markdown_hugo_docs"
    for p in sorted(base.rglob("*.md"))[::step][:n]:
        target = dest / p.relative_to(base)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, target)
    return dest


def mutate(root: Path, round_: int) -> None:
    """Give the next run work to do: edit some files, add one, delete one."""
    files = sorted(root.rglob("*.md"))
    for p in files[round_::9][:8]:
        p.write_text(p.read_text() + f"\n\n## Round {round_}\n\nEdited in round {round_} of the crash test.\n")
    (root / f"new-{round_}.md").write_text(f"# New {round_}\n\nA page added before round {round_}.\n")
    files[-1 - round_].unlink()


def wait_until_writing(proc: subprocess.Popen[Any], manifest: Path, timeout: float = 60) -> None:
    """Until the run has marked the manifest dirty (it writes to the store from then on), or ends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        m = Manifest.load(manifest) if manifest.exists() else None
        if m is not None and m.dirty:
            return
        time.sleep(0.01)


def env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of an mdrag subprocess: this checkout first on the path, its own home."""
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "MDRAG_HOME": str(home), "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", **extra}


def driver(folder: Path, home: Path, *args: str) -> list[str]:
    """The command line of a driver run (see tests/faults/driver.py); run it with ``env(home)``."""
    return [sys.executable, "-m", "tests.faults.driver", str(folder), *args]


def run_driver(
    folder: Path, home: Path, *args: str, timeout: float = 300, store: str = "milvus"
) -> tuple[int, dict[str, Any] | None, str]:
    """Run the driver to its end on this store backend: (return code, its JSON report or None when killed, stderr)."""
    p = subprocess.run(
        driver(folder, home, *args),
        env=env(home, MDRAG_STORE=store),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    report = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode >= 0 and p.stdout.strip() else None
    return p.returncode, report, p.stderr


def mdrag(home: Path, *argv: str, timeout: float = 300, **popen: Any) -> subprocess.CompletedProcess[str]:
    """Run the real `python -m mdrag ...` of this checkout with ``home`` as MDRAG_HOME."""
    cmd = [sys.executable, "-m", "mdrag", *argv]
    popen.setdefault("capture_output", True)
    return subprocess.run(cmd, env=env(home), cwd=REPO, text=True, timeout=timeout, **popen)


def assert_clear_error(p: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 1, nothing on stdout, and one last `mdrag: error:` line that says what happened."""
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.stdout == "", "no result, not even an empty one"
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("mdrag: error:") and all(w in last for w in words), p.stderr


def distinctive_words(home: Path, index: str, store: str = "milvus") -> dict[str, str]:
    """For each file of an index: a word of its chunks whose stem no other file's chunks have."""
    from mdrag.stemming import stemmer
    from mdrag.store.base import Filter

    stem = stemmer()
    idx = Index(load_config({"index": index, "store.backend": store}, home=home), embedder=HashEmbedder())
    try:
        n = idx.status().chunks  # opens the store
        # Every row, through the store interface: a filtered search is exact, and every path starts with "/".
        rows = idx.store.search(HashEmbedder().embed_query("any"), n, where=Filter(path_prefix="/"))
        assert len(rows) == n, f"a filtered search for all {n} rows returned {len(rows)}"
    finally:
        idx.close()
    stems_of: dict[str, set[str]] = defaultdict(set)
    words_of: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        embed_text = f"{r.context}\n\n{r.text}" if r.context else r.text  # Chunk.embed_text
        stems_of[r.path].update(stem(embed_text).split())  # the words BM25 ranks
        words_of[r.path].update(w for w in re.findall(r"[a-z]{6,}", r.text.lower()))
    seen: dict[str, int] = defaultdict(int)
    for stems in stems_of.values():
        for s in stems:
            seen[s] += 1
    out = {}
    for path, words in words_of.items():
        unique = sorted(w for w in words if seen.get(stem(w), 0) == 1 and stem(w) in stems_of[path])
        if unique:
            out[path] = unique[0]
    return out


def verify(
    home: Path,
    root: Path,
    index: str,
    expected: dict[str, list[str]] | None = None,
    words: dict[str, str] | None = None,
    embedder: Embedder | None = None,
    store: str | None = None,
) -> dict[str, list[str]]:
    """Assert that the index is whole; return each file's chunk ids.

    Whole: the manifest is clean; the store has no duplicate (its count is the
    number of distinct ids) and no orphan (its ids are the manifest's); the
    manifest lists every Markdown and HTML file in ``root``; with ``expected`` (what this returned
    for a fresh index of the same files), every file has exactly those chunks;
    with ``words`` (path -> a word only that file has), a search for each word
    finds its file. ``embedder`` (default: a HashEmbedder) must have the identity of the one that wrote it;
    ``store``: the store backend (default: the one the home's settings pick for the index).
    """
    config = load_config({"index": index, **({"store.backend": store} if store else {})}, home=home)
    idx = Index(config, embedder=embedder or HashEmbedder())
    try:
        m = Manifest.load(idx.manifest_path)
        assert m is not None and not m.dirty, "the manifest is clean"
        st = idx.status()
        ids = idx.store.all_ids()
        assert st.chunks == idx.store.count() == len(ids), f"no duplicate: {st.chunks} rows, {len(ids)} ids"
        assert ids == m.chunk_ids(), (
            f"no orphan and nothing missing: {len(ids - m.chunk_ids())} in the store only, "
            f"{len(m.chunk_ids() - ids)} in the manifest only"
        )
        on_disk = {str(p) for p in root.resolve().rglob("*") if p.suffix in (".md", ".html")}
        assert set(m.files) == on_disk, f"files: {sorted(set(m.files) ^ on_disk)[:5]}"
        # a copy of another file (mdrag.ingest.copies) has no chunks: it is compared by the file it names
        chunks = {p: s.chunks if s.copy_of is None else [f"copy of {s.copy_of}"] for p, s in m.files.items()}
        if expected is not None:
            wrong = sorted(p for p in expected if chunks.get(p) != expected[p])
            assert not wrong, f"{len(wrong)} files lack the chunks of a fresh index, e.g. {wrong[:3]}"
        for path, word in (words or {}).items():
            hits = idx.search(word, k=10, threshold=0.0, mode="bm25", collapse="file")
            hit = next((h for h in hits if h.path == path), None)
            assert hit is not None, f"a search for {word!r} finds {path}"
            copies = sorted(p for p, s in m.files.items() if s.copy_of == path)
            assert sorted(p for p, _ in hit.copies) == copies, f"{path}'s result lists its copies"
        return chunks
    finally:
        idx.close()


def summary(terminalreporter: Any) -> None:
    """The fault suite's lines at the end of the pytest output, and benchmarks/out/faults.json."""
    if not TRIALS and not DAMAGE:
        return
    passed = sum(t["passed"] for t in TRIALS)
    repairs = sorted(t["repair_s"] for t in TRIALS if "repair_s" in t)
    figures: dict[str, Any] = {
        "trials": len(TRIALS),
        "passed": passed,
        "seed": TRIALS[0]["seed"] if TRIALS else None,
        "repair_p50_s": round(statistics.median(repairs), 3) if repairs else None,
        "repair_max_s": max(repairs) if repairs else None,
        "suite_s": round(sum(SPENT.values()), 1),  # every test in tests/faults/, set-up included
        "runs": TRIALS,
        "damage_cases": len(DAMAGE),
        "damage_passed": sum(bool(d["passed"]) for d in DAMAGE),
        "damage": DAMAGE,
    }
    if TRIALS:
        line = f"fault suite: {len(TRIALS)} trials, {passed} passed"
        if repairs:
            line += f", repair p50 {figures['repair_p50_s']:.2f} s, max {figures['repair_max_s']:.2f} s"
        line += f" (seed {figures['seed']}; tests/faults/ ran {figures['suite_s']:.0f} s)"
        terminalreporter.write_line(line)
    if DAMAGE:
        terminalreporter.write_line(f"fault suite: {damage_line(DAMAGE)}")
    out = REPO / "benchmarks" / "out" / "faults.json"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(figures, indent=2) + "\n")
    except OSError as e:  # a read-only checkout: the line above is enough
        terminalreporter.write_line(f"fault suite: cannot write {out}: {e}")
    else:
        terminalreporter.write_line(f"fault suite: figures in {Path(out).relative_to(REPO)}")


def damage_line(cases: list[dict[str, Any]]) -> str:
    """The damage cases' count, by store: "damage: 8 of 8 cases said, never served and repaired (faiss 4
    of 4, milvus 4 of 4)"."""
    stores: dict[str, list[bool]] = defaultdict(list)
    for d in cases:
        stores[str(d.get("store"))].append(bool(d.get("passed")))
    by = ", ".join(f"{s} {sum(ok)} of {len(ok)}" for s, ok in sorted(stores.items()))
    passed = sum(bool(d.get("passed")) for d in cases)
    return f"damage: {passed} of {len(cases)} cases said, never served and repaired ({by})"
