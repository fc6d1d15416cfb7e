"""kill -9 of `mdrag index` at seeded points of every phase, then a normal run repairs the index.

Each trial starts from a known state (an empty home and corpus A: a fresh
build; or a clean index of A and corpus B, which edits, adds and deletes
files: an incremental update), runs the driver (tests/faults/driver.py) so
that it kills itself at the n-th call of one phase, before or after the real
call, and then runs `mdrag index` normally. That run must leave exactly the
chunks of a fresh index of the same files, every file searchable.

The kill points are drawn from a seeded generator (``MDRAG_FAULT_SEED``, 0
by default), among the calls a run without a fault makes, so every kill
lands. Every trial's figures go to the summary line and benchmarks/out/faults.json.

Both store backends: on Milvus Lite every pair, more single kills at random
pairs and double kills; on FAISS (a quicker run) every pair of its phases
(its ``.faiss`` file write included) and one double kill.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mdrag.ingest.manifest import Manifest
from tests.faults.driver import phases
from tests.faults.harness import TRIALS, corpus, distinctive_words, run_driver, verify
from tests.test_html_passages import command, manual

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("MDRAG_FAULT_SEED", "0"))
INDEX = "faults"
MODES = ("fresh", "incremental")
BACKENDS = ("milvus", "faiss")
EXTRA = {"milvus": 11, "faiss": 0}  # more single kills, at random pairs
DOUBLE = {"milvus": 2, "faiss": 1}  # a kill, then a kill of the run that repairs it


def _pairs(backend: str) -> list[tuple[str, str]]:
    # A fresh build retires no chunk, so it never calls delete_ids: that pair has no kill point.
    return [(mode, phase) for mode in MODES for phase in phases(backend) if (mode, phase) != ("fresh", "delete")]


@dataclass
class Lab:
    """Fixed paths (the manifest records absolute paths) and the saved states trials start from."""

    backend: str  # store.backend
    docs: Path  # the indexed folder, refilled from a saved corpus before each trial
    home: Path  # MDRAG_HOME, refilled from a saved home before each trial
    saved: Path  # saved corpora and homes
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # mode -> calls per phase, no fault
    expected: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # mode -> a fresh index's chunks
    words: dict[str, dict[str, str]] = field(default_factory=dict)  # mode -> path -> a word only it has

    def restore(self, docs: str, home: str | None) -> None:
        for target, source in ((self.docs, self.saved / docs), (self.home, self.saved / home if home else None)):
            shutil.rmtree(target, ignore_errors=True)
            if source is None:
                target.mkdir()
            else:
                shutil.copytree(source, target, symlinks=True)  # copy2: mtimes as they were

    def save(self, what: Path, name: str) -> None:
        shutil.rmtree(self.saved / name, ignore_errors=True)
        shutil.copytree(what, self.saved / name, symlinks=True)

    def run(self, *args: str) -> tuple[int, dict[str, Any] | None, str]:
        return run_driver(self.docs, self.home, "--index", INDEX, *args, store=self.backend)

    def count(self) -> dict[str, int]:
        """Calls per phase of a run without a fault from the current state (which it changes)."""
        out = self.saved / "counts.json"
        code, _, err = self.run("--counts", str(out))
        assert code == 0, err
        import json

        return dict(json.loads(out.read_text()))


_COPIES = "zz-copies"  # files with the bytes of others (indexed once: mdrag.ingest.copies), sorted after them
_PAGES = "zz-pages"  # HTML pages whose passages a reference page repeats (kept once: mdrag.ingest.passages)


def _add_copies(root: Path) -> None:
    """Corpus A's copies: of a file corpus B edits, of one it deletes (twice), of one it leaves (the copy edited)."""
    files = sorted(p for p in root.rglob("*.md") if _COPIES not in p.parts)
    (root / _COPIES).mkdir()
    for source, name in ((files[5], "of-edited.md"), (files[-1], "of-deleted-1.md"), (files[-1], "of-deleted-2.md")):
        (root / _COPIES / name).write_bytes(source.read_bytes())
    (root / _COPIES / "edited.md").write_bytes(files[6].read_bytes())


def _edit(root: Path) -> None:
    """Corpus B: appended sections, a file whose chunks all shift, two new files, two deleted; of the copies,
    the original of one edited, of two deleted, one copy edited, a new copy of an indexed file and of a new one;
    of the HTML pages, one whose passage the reference repeats deleted, one such passage edited."""
    files = sorted(p for p in root.rglob("*.md") if _COPIES not in p.parts)
    for p in files[1::4]:
        p.write_text(p.read_text() + "\n\n## Later\n\nA section appended between the two states.\n")
    files[2].write_text("# Moved down\n\nEverything below moves by one section.\n\n" + files[2].read_text())
    (root / "new-one.md").write_text("# Xylophones\n\nHow the xylophonist tunes marimbas and glockenspiels.\n")
    (root / "new-two.md").write_text("# Quasars\n\nObserving quasars with a radiotelescope array.\n")
    files[-1].unlink()
    files[-4].unlink()
    copies = root / _COPIES
    (copies / "edited.md").write_text("# Rewritten\n\nA copy no more: reupholstered ottomans.\n")
    (copies / "of-unchanged.md").write_bytes(files[0].read_bytes())
    (copies / "new-one.md").write_bytes((root / "new-one.md").read_bytes())
    (root / _PAGES / "cmd-1.html").unlink()  # its passage is the reference page's alone again
    command(root / _PAGES, 2, edit=" unless the disk is full")  # its passage is its own: the reference's too


@pytest.fixture(scope="module")
def labs(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Callable[[str], Lab]:
    """A backend's Lab, made once per module: its trials restore the saved states they start from. (An
    indirectly parametrized module fixture would be made again for every trial: the trials' other
    parameters give the parametrization function scope.)"""
    made: dict[str, Lab] = {}

    def get(backend: str) -> Lab:
        if backend not in made:
            made[backend] = _make_lab(backend, tmp_path_factory.mktemp(f"faults-{backend}"), shared_data)
        return made[backend]

    return get


def _make_lab(backend: str, base: Path, shared_data: Path) -> Lab:
    lab = Lab(backend=backend, docs=base / "docs", home=base / "home", saved=base / "saved")
    corpus(lab.saved / "docs-fresh", shared_data, n=48, step=20)
    _add_copies(lab.saved / "docs-fresh")
    manual(lab.saved / "docs-fresh" / _PAGES)
    shutil.copytree(lab.saved / "docs-fresh", lab.saved / "docs-incremental")
    _edit(lab.saved / "docs-incremental")

    lab.restore("docs-fresh", None)
    lab.counts["fresh"] = lab.count()
    lab.expected["fresh"] = verify(lab.home, lab.docs, INDEX, store=lab.backend)
    lab.words["fresh"] = distinctive_words(lab.home, INDEX, lab.backend)
    lab.save(lab.home, "home-fresh-built")  # where incremental trials start

    lab.restore("docs-incremental", "home-fresh-built")
    lab.counts["incremental"] = lab.count()
    updated = verify(lab.home, lab.docs, INDEX, store=lab.backend)
    lab.restore("docs-incremental", None)
    assert lab.run()[0] == 0
    lab.expected["incremental"] = verify(lab.home, lab.docs, INDEX, store=lab.backend)
    assert updated == lab.expected["incremental"], "an update without a fault gives the chunks of a fresh index"
    lab.words["incremental"] = distinctive_words(lab.home, INDEX, lab.backend)
    for mode in MODES:
        with_chunks = sum(1 for ids in lab.expected[mode].values() if ids and not ids[0].startswith("copy of "))
        assert len(lab.words[mode]) >= 0.8 * with_chunks, "most files have a word of their own"
    assert lab.counts["incremental"].get("delete", 0) > 0 and lab.counts["fresh"].get("delete", 0) == 0
    return lab


def _trials() -> list[Any]:
    out = []
    for b in BACKENDS:
        pairs = _pairs(b)
        out += [pytest.param(b, f"{mode}-{phase}", mode, [phase], id=f"{b}-{mode}-{phase}") for mode, phase in pairs]
        for i in range(EXTRA[b]):
            mode, phase = random.Random(f"{SEED}:extra:{i}").choice(pairs)
            out.append(pytest.param(b, f"extra-{i}", mode, [phase], id=f"{b}-extra{i}-{mode}-{phase}"))
        for i in range(DOUBLE[b]):
            mode, phase = random.Random(f"{SEED}:double:{i}").choice(pairs)
            name = f"{b}-double{i}-{mode}-{phase}-then-any"
            out.append(pytest.param(b, f"double-{i}", mode, [phase, None], id=name))
    return out


@pytest.mark.parametrize(("backend", "name", "mode", "faults"), _trials())
def test_kill_at_a_point_then_repair(
    labs: Callable[[str], Lab], backend: str, name: str, mode: str, faults: list[str | None]
) -> None:
    lab = labs(backend)
    rng = random.Random(f"{SEED}:{lab.backend}:{name}")
    record: dict[str, Any] = {
        "trial": name, "backend": lab.backend, "mode": mode, "seed": SEED, "faults": [], "passed": False
    }  # fmt: skip
    TRIALS.append(record)
    lab.restore(f"docs-{mode}", None if mode == "fresh" else "home-fresh-built")
    counts = lab.counts[mode]
    for phase in faults:
        if phase is None:  # any phase of the run that repairs the last kill
            scratch = lab.saved / "before-kill"
            lab.save(lab.home, scratch.name)
            counts = lab.count()
            shutil.rmtree(lab.home)
            shutil.copytree(scratch, lab.home, symlinks=True)
            phase = rng.choice(sorted(p for p in phases(lab.backend) if counts.get(p)))
        n, when = rng.randint(1, counts[phase]), rng.choice(("before", "after"))
        lab.save(lab.home, "before-fault")
        for _ in range(4):
            record["faults"].append({"phase": phase, "n": n, "of": counts[phase], "when": when})
            code, _, err = lab.run("--phase", phase, "--n", str(n), "--when", when)
            if code != 0 or n == 1:
                break
            # The run ended before its n-th call of the phase: a first build's steps parse ahead of what they
            # commit, so a run may make fewer calls than the one that counted them. The same point, earlier.
            shutil.rmtree(lab.home)
            shutil.copytree(lab.saved / "before-fault", lab.home, symlinks=True)
            n = (n + 1) // 2
        assert code == -9, f"the kill at call {n} of {phase} ({when}) did not land: exit {code}\n{err[-2000:]}"

    m = Manifest.load(lab.home / "cache" / "manifests" / f"{INDEX}.json")
    left_dirty = m is not None and m.dirty
    t0 = time.perf_counter()
    code, report, err = lab.run()
    record["process_s"] = round(time.perf_counter() - t0, 3)
    assert code == 0 and report is not None, err[-2000:]
    record["repair_s"] = report["seconds"]
    record["repaired"] = report["summary"]["repaired"]
    assert report["summary"]["repaired"] == left_dirty, "the run repairs exactly when the last one left it dirty"
    verify(lab.home, lab.docs, INDEX, lab.expected[mode], lab.words[mode], store=lab.backend)
    record["files"], record["files_searched"] = len(lab.expected[mode]), len(lab.words[mode])
    record["passed"] = True
