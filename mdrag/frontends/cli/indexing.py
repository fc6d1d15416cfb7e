"""`mdrag index` and `mdrag remove`, with the indexing progress bar."""

from __future__ import annotations

import argparse
import functools
import json
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.frontends.cli.output import _name, _safe

if TYPE_CHECKING:
    from mdrag.ingest.progress import IndexProgress


class _IndexBar:
    """The progress bar of an indexing run on stderr (tqdm), drawn from the run's
    :class:`~mdrag.ingest.progress.IndexProgress`: chunks written out of the chunks the run
    will write, with the files read and the stage it is in.

    The total is known once every file is read; until then it is estimated from the
    files read so far (their chunks per file, times the files to read), shown with
    a ``~``. It appears once a run has taken a second: quick runs print nothing. A
    thread draws it again every second, so that its clock moves while the run waits
    (for the model to load, for a slow file, for the store to save).
    """

    _TICK_S = 1.0

    def __init__(self, shown: bool = True) -> None:
        self._shown = shown
        self._bar: Any = None  # tqdm, made at the first event
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> _IndexBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.close()

    def __call__(self, p: IndexProgress) -> None:
        if not self._shown:
            return
        if self._bar is None:
            self._bar = _make_bar()
            self._ticker = threading.Thread(target=self._tick, name="mdrag-progress", daemon=True)
            self._ticker.start()
        bar = self._bar
        bar.total, bar.estimated = _chunks_in_all(p)
        bar.set_description_str(p.stage, refresh=False)
        bar.set_postfix_str(f"files {p.files_read}/{p.files_total} read", refresh=False)
        bar.update(p.chunks_done - bar.n)  # draws, at most every 0.2 s

    def _tick(self) -> None:
        while not self._stop.wait(self._TICK_S):
            if time.time() - self._bar.start_t >= self._bar.delay:
                self._bar.refresh()


def _chunks_in_all(p: IndexProgress) -> tuple[int, bool]:
    """The chunks the run will write, and whether that is an estimate: the files left to read are
    taken to have as many chunks each as the files read so far."""
    left = p.files_total - p.files_read
    if left <= 0 or p.stage == "saving":
        return p.chunks_known, False
    if not p.files_read:
        return 0, True
    return p.chunks_known + round(left * p.chunks_known / p.files_read), True


def _make_bar() -> Any:
    from tqdm import tqdm

    class Bar(tqdm):  # type: ignore[type-arg]
        estimated = False  # the total is an estimate: shown with a ~ (? while no file is read)

        @property
        def format_dict(self) -> dict[str, Any]:
            shown = str(self.total) if not self.estimated else f"~{self.total}" if self.total else "?"
            return {**super().format_dict, "shown_total": shown}

    return Bar(
        total=0,
        unit="chunk",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{shown_total} chunks "
        "[{elapsed}<{remaining}, {rate_fmt}{postfix}]",
        leave=False,
        delay=1.0,
        mininterval=0.2,
        miniters=0,  # every event may draw (at most every mininterval), whatever its step
        smoothing=0.1,  # the rate over the last ~10 draws: each round of the embedder starts with its short texts
        file=sys.stderr,
    )


#: An `mdrag index` run commits at least this often. Longer than the server's steps (keeper.STEP_S, with rounds
#: of keeper.BATCH_CHUNKS, so that its searches wait little): each step scans the folders again and starts a
#: parse worker, and the pipeline's rounds of 512 chunks pad their texts less; no search waits on the CLI.
_STEP_S = 30.0


class _Steps:
    """An `mdrag index` run committed as it goes, as the server's updates are (:mod:`mdrag.ingest.keeper`):
    every ``_STEP_S`` the run commits what it embedded and goes on, so that a run stopped (Ctrl+C, a crash)
    keeps it. The first Ctrl+C ends the step that runs (it commits what was embedded) and stops there; a
    second stops at once (what the last step committed is kept, the next run repairs the rest)."""

    def __init__(self) -> None:
        self.pause = threading.Event()  # the step that runs commits what it wrote and returns
        self.cancel = threading.Event()  # the run stops before its next file, without committing
        self.interrupted = False  # Ctrl+C was pressed: no step after the one that runs

    def run(self, index: Any, args: argparse.Namespace, bar: _IndexBar) -> Any:
        from mdrag.ingest.keeper import add_step

        so_far, rebuild = None, args.rebuild
        while True:
            timer = threading.Timer(_STEP_S, self.pause.set)
            timer.daemon = True
            timer.start()
            try:
                how = {"rebuild": rebuild, "progress": bar, "pause": self.pause, "cancel": self.cancel}
                step = self._wait(functools.partial(index.update, args.folders or None, **how))
            finally:
                timer.cancel()
                self.pause.clear()
            so_far, rebuild = add_step(so_far, step), False
            if not step.remaining or self.interrupted:
                return so_far

    def _wait(self, update: Any) -> Any:
        """Run ``update`` in a thread, the main thread taking Ctrl+C: the first pauses it, the second cancels it."""
        out: list[Any] = []
        ended = threading.Event()  # not Thread.is_alive: a join that Ctrl+C interrupted may make it False early

        def target() -> None:
            try:
                out.append(update())
            except BaseException as e:  # raised again in the main thread
                out.append(e)
            finally:
                ended.set()

        worker = threading.Thread(target=target, name="mdrag-index")
        worker.start()
        while not ended.is_set():
            try:
                ended.wait(0.2)
            except KeyboardInterrupt:
                if self.interrupted:
                    self.cancel.set()
                    print("mdrag: stopping now", file=sys.stderr)
                    continue
                self.interrupted = True
                self.pause.set()
                print(
                    "mdrag: interrupted: saving what was embedded (Ctrl+C again to stop at once; "
                    "the next `mdrag index` then repairs and goes on)",
                    file=sys.stderr,
                )
        worker.join()
        if isinstance(out[0], BaseException):
            raise out[0]
        return out[0]


def _cmd_index(args: argparse.Namespace, index: Any) -> int:
    steps = _Steps()
    with _IndexBar(shown=not args.quiet) as bar:
        summary = steps.run(index, args, bar)
    if steps.interrupted and summary.remaining:
        print(
            f"mdrag: interrupted: kept {summary.chunks_total} chunks ({summary.remaining} of the files to index "
            "left); the next `mdrag index` goes on from there",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2))
    else:
        s = summary
        if s.rebuild:
            print(f"full re-index: {s.rebuild}")
        if s.waited_s:
            print(f"waited {s.waited_s:.1f} s for another mdrag run on this index: what it indexed is not done again")
        if s.repaired:
            print("repaired the index: an interrupted run, or damage that its store or `status --verify` found")
        print(
            f"files: {s.added} added, {s.modified} modified, {s.deleted} deleted, "
            f"{s.unchanged} unchanged"
            + (f" ({s.touched} touched, already embedded)" if s.touched else "")
            + f", {s.skipped} skipped"
            + (f" ({s.parser_errors} by a parser error: -vv logs the traceback)" if s.parser_errors else "")
            + (f", {s.kept} kept (folder missing or unreadable)" if s.kept else "")
            + (f", {s.excluded} excluded" if s.excluded else "")
        )
        if s.unsupported:
            n = sum(s.unsupported.values())
            kinds = ", ".join(f"{ext} {count}" for ext, count in s.unsupported.items())
            print(f"not indexed: {n} files with no parser ({kinds}; -v lists them)")
        for path, encoding in s.decoded.items():
            print(f"decoded {_name(path)} as {_name(encoding)}")
        _print_chunks(s)
        for path, reason in s.skipped_files:
            print(f"skipped {_name(path)}: {_safe(reason)}")
        print(f"folders: {', '.join(s.folders) or '-'}")
        print(f"done in {s.seconds:.2f} s")
    if steps.interrupted and summary.remaining:
        return 130
    return _missing_given(args.folders, summary.missing_folders)


def _missing_given(given: list[str] | None, missing: list[str]) -> int:
    """1, with an error, when a folder named on the command line was not found or is a file (the rest is
    indexed)."""
    from mdrag.ingest.scan import not_a_folder

    named = [f for f in given or () if str(Path(f).expanduser().resolve()) in missing]
    if not named:
        return 0
    files = [f for f in named if Path(f).expanduser().is_file()]
    gone = [f for f in named if f not in files]
    if gone:
        print(
            _safe(
                f"mdrag: error: not found, so not indexed: {', '.join(gone)}. "
                "Check the path; the index is unchanged for it."
            ),
            file=sys.stderr,
        )
    for f in files:
        print(_safe(f"mdrag: error: not indexed: {not_a_folder(f)}. The index is unchanged for it."), file=sys.stderr)
    return 1


def _print_chunks(s: Any) -> None:
    print(
        f"chunks: {s.chunks_embedded} embedded, {s.chunks_reused} already embedded, "
        f"{s.chunks_deleted} deleted, {s.chunks_total} in the index"
    )


def _cmd_remove(args: argparse.Namespace, index: Any) -> int:
    summary = index.remove(args.folders)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2))
        return 0
    print(f"removed {', '.join(summary.removed_folders)}: {summary.deleted} files")
    _print_chunks(summary)
    print(f"folders: {', '.join(summary.folders) or '-'}")
    return 0
