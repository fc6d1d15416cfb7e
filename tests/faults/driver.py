"""An `mdrag index` process that kills itself with SIGKILL at a chosen point.

Run as ``python -m tests.faults.driver FOLDER --index NAME [--phase P --n N --when before|after]``
with ``MDRAG_HOME`` set. It runs the real command line (``mdrag.frontends.cli.main``)
with a :class:`tests.conftest.HashEmbedder`, small batches and a manifest save
after every batch, so that each phase is reached many times. No hook is added
to the library: the driver wraps the library's own functions, and at the
``n``-th call of phase ``P`` it sends itself SIGKILL, before or after the real
call. Phases (:data:`PHASES`):

- ``scan``: ``mdrag.ingest.pipeline.scan``, the folder walk
- ``parse``: ``ParseWorker.parse`` (the indexer's parse thread, waiting on the parse child)
- ``embed``: the embedder's ``embed_batch``
- ``upsert``: the store's ``upsert`` (chunk batches)
- ``commit``: the ``on_commit`` callback ``Index.update`` gives ``Indexer.run``
- ``delete``: the store's ``delete_ids``
- ``end_run``: the store's ``end_run`` (Milvus: flush, segment padding, BM25 rewrites; FAISS: the
  ``.faiss`` file and the SQLite commit)
- ``save``: ``Manifest.save`` (dirty, per batch, before the commit, clean)
- ``faiss_file`` (FAISS only, :data:`BACKEND_PHASES`): ``FaissStore._save_faiss``, inside ``end_run``:
  ``after`` kills with the new ``.faiss`` file in place and SQLite not yet committed

The store is the configured backend's (``store.backend``: ``MDRAG_STORE`` in the environment; ``auto``:
the one :func:`mdrag.store.resolve_backend` picks for the index).

``--counts FILE`` writes how often each phase ran (a run without a fault:
how many kill points each phase has). ``--slow S`` sleeps S seconds in every
``embed_batch`` (for tests that kill at a random time instead). ``--hold FILE``
makes the first ``embed_batch`` (the store is open and the manifest dirty by
then) create ``FILE.held`` and wait until ``FILE`` exists: other commands can
then meet a run in progress, for as long as a test needs; with ``--hold-close``
the run waits so in ``Index.close`` instead (its work done, the store still
open). ``--log`` leaves out
``-q``: the command's warnings go to stderr (a run waiting for another says so). The last line
on stdout is JSON: the command's exit code, its wall time in seconds and its
``--json`` summary.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

PHASES = ("scan", "parse", "embed", "upsert", "commit", "delete", "end_run", "save")
#: Kill points only one backend has: phase -> the store method it wraps.
BACKEND_PHASES = {"milvus": {}, "faiss": {"faiss_file": "_save_faiss"}}
ALL_PHASES = PHASES + tuple(p for extra in BACKEND_PHASES.values() for p in extra)


def phases(backend: str) -> tuple[str, ...]:
    """The kill points of a run on this store backend."""
    return PHASES + tuple(BACKEND_PHASES[backend])


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.faults.driver")
    p.add_argument("folder")
    p.add_argument("--index", default="faults")
    p.add_argument("--phase", choices=ALL_PHASES)
    p.add_argument("--n", type=int, default=1, help="kill at the n-th call of the phase (1 = first)")
    p.add_argument("--when", choices=("before", "after"), default="before")
    p.add_argument("--counts", help="write the calls per phase here (JSON) when the run ends")
    p.add_argument("--slow", type=float, default=0.0, help="seconds to sleep in each embed_batch")
    p.add_argument("--hold", help="wait in the first embed_batch until this file exists (see above)")
    p.add_argument("--hold-close", action="store_true", help="with --hold: wait in Index.close instead")
    p.add_argument("--log", action="store_true", help="show the command's warnings on stderr (no -q)")
    p.add_argument("--batch-chunks", type=int, default=16, help="mdrag.ingest.pipeline._BATCH_CHUNKS")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    import mdrag.index.index
    import mdrag.ingest.manifest
    import mdrag.ingest.pipeline
    from mdrag.config import load_config
    from mdrag.frontends.cli import main as mdrag_main
    from mdrag.store import resolve_backend
    from tests.conftest import HashEmbedder

    calls: Counter[str] = Counter()

    def faulty(phase: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*a: Any, **kw: Any) -> Any:
            calls[phase] += 1
            hit = phase == args.phase and calls[phase] == args.n
            if hit and args.when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            result = real(*a, **kw)
            if hit:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return call

    class Embedder(HashEmbedder):
        def embed_batch(self, texts):  # type: ignore[no-untyped-def]
            if args.hold and not args.hold_close and not self.embedded:
                _hold(args.hold)
            if args.slow:
                time.sleep(args.slow)
            return super().embed_batch(texts)

    Embedder.embed_batch = faulty("embed", Embedder.embed_batch)  # type: ignore[method-assign]
    mdrag.index.index.make_embedder = lambda config: Embedder()
    mdrag.ingest.pipeline.scan = faulty("scan", mdrag.ingest.pipeline.scan)
    from mdrag.parsers.worker import ParseWorker

    ParseWorker.parse = faulty("parse", ParseWorker.parse)  # type: ignore[method-assign]
    backend, _ = resolve_backend(load_config(), args.index)
    from mdrag.store.faiss import FaissStore
    from mdrag.store.milvus import MilvusStore

    Store = {"faiss": FaissStore, "milvus": MilvusStore}[backend]
    for phase, method in {"upsert": "upsert", "delete": "delete_ids", "end_run": "end_run"}.items():
        setattr(Store, method, faulty(phase, getattr(Store, method)))
    for phase, method in BACKEND_PHASES[backend].items():
        setattr(Store, method, faulty(phase, getattr(Store, method)))
    mdrag.ingest.manifest.Manifest.save = faulty("save", mdrag.ingest.manifest.Manifest.save)  # type: ignore[method-assign]
    real_run = mdrag.ingest.pipeline.Indexer.run

    def run(self: mdrag.ingest.pipeline.Indexer, folders: Any, events: Any = None, **kw: Any) -> Any:
        if events is not None and events.on_commit is not None:
            events = dataclasses.replace(events, on_commit=faulty("commit", events.on_commit))
        return real_run(self, folders, events, **kw)

    mdrag.ingest.pipeline.Indexer.run = run  # type: ignore[method-assign]
    if args.hold_close:
        real_close = mdrag.index.Index.close

        def close(self: mdrag.index.Index) -> None:
            _hold(args.hold)
            real_close(self)

        mdrag.index.Index.close = close  # type: ignore[method-assign]
    mdrag.ingest.pipeline._BATCH_CHUNKS = args.batch_chunks
    # A first build commits in steps (a few rounds each, never by the clock: a run's kill points are counted
    # once and must be the same in every run), each a commit that a kill may land around.
    mdrag.ingest.pipeline._GROW_BATCH = (args.batch_chunks, args.batch_chunks)
    mdrag.ingest.pipeline._GROW_CHUNKS = 3 * args.batch_chunks
    mdrag.ingest.pipeline._GROW_S = float("inf")
    mdrag.ingest.pipeline._GROW_SHARE = 0.0
    mdrag.ingest.pipeline._SAVE_EVERY_S = 0.0  # a manifest save after every batch: more points to kill at

    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = mdrag_main(["index", args.folder, "--index", args.index, "--json", *([] if args.log else ["-q"])])
    seconds = time.perf_counter() - t0
    if args.counts:
        with open(args.counts, "w") as f:
            json.dump(dict(calls), f)
    summary = json.loads(out.getvalue()) if code == 0 else None
    print(json.dumps({"code": code, "seconds": round(seconds, 3), "summary": summary}))
    return code


def _hold(release: str, timeout: float = 600) -> None:
    with open(release + ".held", "w"):
        pass
    deadline = time.monotonic() + timeout
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())
