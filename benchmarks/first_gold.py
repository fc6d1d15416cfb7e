"""How soon a first build makes the files a question set asks about searchable: the seconds from the start of `mdrag
index DIR` on a fresh home (the model's files copied in: their download and export are not counted) until 25 %, 50 %
and all of the set's gold files are searchable, and the chunks committed by then (which the machine's load moves
only where the build's steps end), polling the index's manifest every 0.2 s (a file is searchable once all its
chunks are among those committed: what searches read).

Each ``--checkout NAME=DIR`` is run in turn on the same corpus: compare a checkout of this code with one of the
code before a change of the build's order (``git archive COMMIT | tar -x -C DIR``). The load average is said at
the start and the end of each run: the figures are the machine's as it was.

    python benchmarks/first_gold.py [--corpus DIR] [--qa FILE] [--checkout NAME=DIR ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from first_answer import OTEL, fresh_home, model_files  # noqa: E402

from mdrag.ingest.manifest import Manifest  # noqa: E402
from mdrag.retrieval.evaluate import load_questions  # noqa: E402

QA = ROOT / "benchmarks" / "data" / "otel_qa.jsonl"
POLL_S = 0.2
LIMIT_S = 3600.0  # a build that takes longer is given up
SHARES = (0.25, 0.5, 1.0)


def searchable(manifest: Path) -> tuple[set[str], int]:
    """The files (relative paths) whose chunks are all committed, as the manifest says now, and the chunks."""
    m = Manifest.load(manifest) if manifest.is_file() else None
    if m is None:
        return set(), 0
    ids = m.visible()[0]
    return {f.rel_path for f in m.files.values() if f.chunks and ids.issuperset(f.chunks)}, len(ids)


def load() -> float:
    return round(os.getloadavg()[0], 1)


def run(checkout: Path, home: Path, folder: Path, gold: set[str], stop_at: float = 1.0) -> dict[str, Any]:
    """`mdrag index FOLDER` from ``checkout`` on ``home``, its manifest polled until the run ends, or is stopped
    once ``stop_at`` of the gold files are searchable."""
    env = {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-m", "mdrag", "index", str(folder), "-q", "--json"]
    out: dict[str, Any] = {"checkout": str(checkout), "load_start": load(), "first_file_s": None}
    got: dict[float, tuple[float, int]] = {}  # share of the gold files -> (seconds, chunks committed) when reached
    t0 = time.monotonic()
    # Run in the checkout: `python -m` puts the working folder ahead of PYTHONPATH.
    proc = subprocess.Popen(argv, env=env, cwd=checkout, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    manifests = home / "cache" / "manifests"
    while time.monotonic() - t0 < LIMIT_S:
        ended = proc.poll() is not None  # read the manifest once more after the end
        now = round(time.monotonic() - t0, 2)
        files, chunks = searchable(manifests / "default.json")
        if files and out["first_file_s"] is None:
            out["first_file_s"] = now
        for share in SHARES:
            if share not in got and len(files & gold) >= share * len(gold):
                got[share] = (now, chunks)
        if ended:
            break
        if stop_at in got:
            proc.terminate()
            out["stopped_at"] = stop_at
            break
        time.sleep(POLL_S)
    stdout, _ = proc.communicate(timeout=LIMIT_S)
    out["build_s"] = round(time.monotonic() - t0, 2) if "stopped_at" not in out else None
    out["load_end"] = load()
    summary = json.loads(stdout) if proc.returncode == 0 and stdout.strip() else {}
    out["exit"], out["chunks"], out["files"] = proc.returncode, summary.get("chunks_total"), summary.get("added")
    out["gold_s"] = {f"{round(share * 100)}%": got[share][0] if share in got else None for share in SHARES}
    out["gold_chunks"] = {f"{round(share * 100)}%": got[share][1] if share in got else None for share in SHARES}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=OTEL, help="the folder to index (default: the OpenTelemetry docs)")
    ap.add_argument("--qa", type=Path, default=QA, help="the question set whose gold files are watched")
    ap.add_argument(
        "--checkout",
        action="append",
        default=[],
        help="NAME=DIR: a checkout of mdrag to run (repeat to compare; default: this one)",
    )
    ap.add_argument(
        "--stop-at",
        type=float,
        choices=SHARES,
        default=1.0,
        help="stop each run once this share of the gold files is searchable",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    checkouts = [c.split("=", 1) for c in args.checkout] or [["this", str(ROOT)]]
    gold = {g for q in load_questions(args.qa) for g in q.gold}
    folder = args.corpus.resolve()
    missing = sorted(g for g in gold if not (folder / g).is_file())
    if missing:
        sys.exit(f"{len(missing)} gold files of {args.qa} are not in {folder}, e.g. {missing[0]}")
    out: dict[str, Any] = {"corpus": str(args.corpus), "qa": str(args.qa), "gold_files": len(gold)}
    out["cpus"], out["python"], out["runs"] = os.cpu_count(), sys.version.split()[0], {}
    print(f"corpus: {args.corpus}; {len(gold)} gold files of {args.qa.name}", flush=True)
    base = Path(tempfile.mkdtemp(prefix="mdrag-first-gold-"))
    try:
        models = model_files(base)
        for name, checkout in checkouts:
            home = fresh_home(base, f"home-{name}", models)
            r = out["runs"][name] = run(Path(checkout).resolve(), home, folder, gold, args.stop_at)
            shares = ", ".join(f"{k} after {v} s ({r['gold_chunks'][k]} chunks)" for k, v in r["gold_s"].items())
            print(
                f"{name}: first file searchable after {r['first_file_s']} s; gold files searchable: {shares}; "
                f"build done after {r['build_s']} s ({r['chunks']} chunks, exit {r['exit']}); "
                f"load average {r['load_start']} at the start, {r['load_end']} at the end",
                flush=True,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
