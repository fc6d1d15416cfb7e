"""`mdrag index` and `mdrag remove`, with the indexing progress bar."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.frontends.cli.opening import local_index
from mdrag.frontends.cli.output import safe_name, safe_text
from mdrag.frontends.cli.parser import common_flags, overrides, setting_flag

if TYPE_CHECKING:
    from mdrag.frontends.cli.parser import Commands
    from mdrag.index import Index
    from mdrag.ingest.progress import IndexProgress
    from mdrag.ingest.summary import IndexSummary


def register(commands: Commands) -> None:
    """Declare `mdrag index` and `mdrag remove`."""
    p = commands.add_parser(
        "index",
        help="add or update folders in the index (incrementally)",
        epilog="example: mdrag index ./docs ./notes   (later, plain `mdrag index` updates both; only changes are "
        "re-embedded)",
    )
    p.add_argument(
        "folders",
        nargs="*",
        metavar="DIR",
        help="folders to add or update; the index's other folders are kept (default: all of the index's "
        "folders; for a new index, setting folders, ./markdown)",
    )
    p.add_argument("--rebuild", action="store_true", help="drop the index and build it again")
    setting_flag(p, "chunk.size")
    setting_flag(p, "chunk.overlap")
    setting_flag(p, "embedding.precision")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    common_flags(p)
    p.set_defaults(run=_index)

    p = commands.add_parser(
        "remove",
        help="take folders out of the index",
        epilog="example: mdrag remove ./notes   (its chunks leave the index; the files stay on disk)",
    )
    p.add_argument("folders", nargs="+", metavar="DIR", help="folders of the index to remove (they need not exist)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    common_flags(p)
    p.set_defaults(run=_remove)


def _index(args: argparse.Namespace) -> int:
    """`mdrag index`, under the index's writers' lock."""
    from mdrag.config import load_config

    with local_index(load_config(overrides(args)), writing=True) as index:
        return _index_into(args, index)


def _remove(args: argparse.Namespace) -> int:
    """`mdrag remove`, under the index's writers' lock."""
    from mdrag.config import load_config

    with local_index(load_config(overrides(args)), writing=True) as index:
        return _remove_from(args, index)


class _IndexBar:
    """The progress of an indexing run on stderr, drawn from the run's
    :class:`~mdrag.ingest.progress.IndexProgress`: chunks written out of the chunks the run
    will write, with the files read and the stage it is in.

    The total is known once every file is read; until then it is estimated (:func:`_chunks_in_all`),
    shown with a ``~``. On a terminal it is a bar (tqdm) that appears once a run has taken a second
    (quick runs print nothing), drawn again every second so that its clock moves while the run waits
    (for the model to load, for a slow file, for the store to save); log lines and messages are printed
    above it, never over it. When stderr is not a terminal (a log file, CI), it is a plain line every
    ``_LINE_S`` instead of a bar's frames.
    """

    _TICK_S = 1.0
    _LINE_S = 10.0  # seconds between two lines when stderr is not a terminal

    def __init__(self, shown: bool = True, terminal: bool | None = None) -> None:
        self._shown = shown
        self._terminal = sys.stderr.isatty() if terminal is None else terminal  # a bar, or plain lines
        self._bar: Any = None  # tqdm, made at the first event
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._moved: list[tuple[logging.StreamHandler[Any], Any]] = []  # log handlers writing above the bar
        self._before = (0, 0)  # chunks and files the run's earlier steps wrote (see next_step)
        self._last: IndexProgress | None = None  # what the step that runs told last

    def __enter__(self) -> _IndexBar:
        if self._shown and self._terminal:
            above = _AboveBar(self)
            for handler in logging.getLogger().handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr:
                    self._moved.append((handler, handler.setStream(above)))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.close()
        for handler, stream in self._moved:
            handler.setStream(stream)

    def __call__(self, p: IndexProgress) -> None:
        if not self._shown:
            return
        if self._bar is None:
            self._bar = _make_bar(self._terminal)
            self._ticker = threading.Thread(target=self._tick, name="mdrag-progress", daemon=True)
            self._ticker.start()
        self._last = p
        chunks, files = self._before
        bar = self._bar
        total, estimated = _chunks_in_all(p)
        if total or not estimated or not bar.total:  # a step that has no estimate yet keeps the last one
            bar.total, bar.estimated = chunks + total, estimated
        bar.set_description_str(p.stage, refresh=False)
        bar.set_postfix_str(f"files {files + p.files_read}/{files + p.files_total} read", refresh=False)
        bar.update(chunks + p.chunks_done - bar.n)  # draws, at most every 0.2 s (on a terminal)

    def next_step(self) -> None:
        """The run goes on in another step (an `mdrag index` run commits as it goes: :class:`_Steps`): what
        the steps so far wrote counts, so that the bar goes on from there, not from 0."""
        if self._last is not None:
            chunks, files = self._before
            self._before = (chunks + self._last.chunks_done, files + self._last.files_done)
            self._last = None

    def say(self, line: str) -> None:
        """Print ``line`` on stderr: above the bar, when one is drawn."""
        if self._bar is not None and self._terminal:
            self._bar.write(line, file=sys.stderr)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def _tick(self) -> None:
        every = self._TICK_S if self._terminal else self._LINE_S
        while not self._stop.wait(every):
            if time.time() - self._bar.start_t < self._bar.delay:
                continue
            if self._terminal:
                self._bar.refresh()
            else:
                self.say(f"mdrag: {self._bar}")


class _AboveBar:
    """A log handler's stream while a bar is drawn: each whole line is printed above the bar."""

    def __init__(self, bar: _IndexBar) -> None:
        self._bar = bar  # whose say() prints a line above it
        self._part = ""  # the text of a line not ended yet (a log record's text comes before its "\n")

    def write(self, text: str) -> None:
        *lines, self._part = (self._part + text).split("\n")
        for line in lines:
            self._bar.say(line)

    def flush(self) -> None:
        pass


def _chunks_in_all(p: IndexProgress) -> tuple[int, bool]:
    """The chunks the run will write, and whether that is an estimate (until every file is read: see
    :class:`~mdrag.ingest.progress.ProgressCounter`; a step that pauses leaves files to the next)."""
    if p.files_read >= p.files_total:
        return p.chunks_known, False
    return p.chunks_expected, True


class _Unseen:
    """Where a bar that is not drawn writes its frames (stderr is not a terminal): nowhere."""

    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


def _make_bar(terminal: bool) -> Any:
    """The tqdm bar, drawn on stderr when it is a terminal; else drawn nowhere, its text (:class:`_IndexBar`
    prints it as a line now and then) without the bar itself."""
    from tqdm import tqdm

    class Bar(tqdm):  # type: ignore[misc]  # tqdm has no type information here: a subclass of Any
        estimated = False  # the total is an estimate: shown with a ~ (? while no file is read)

        @property
        def format_dict(self) -> dict[str, Any]:
            shown = str(self.total) if not self.estimated else f"~{self.total}" if self.total else "?"
            return {**super().format_dict, "shown_total": shown}

    counts = "{n_fmt}/{shown_total} chunks [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
    return Bar(
        total=0,
        unit="chunk",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| " + counts if terminal else "{desc}: " + counts,
        leave=False,
        delay=1.0,
        mininterval=0.2,
        miniters=0,  # every event may draw (at most every mininterval), whatever its step
        smoothing=0.1,  # the rate over the last ~10 draws: each round of the embedder starts with its short texts
        file=sys.stderr if terminal else _Unseen(),
    )


#: An `mdrag index` run commits at least this often. Longer than the server's steps (keeper.STEP_S, with rounds
#: of keeper.BATCH_CHUNKS, so that its searches wait little): each step scans the folders again and starts a
#: parse worker, and the pipeline's rounds of 512 chunks pad their texts less; no search waits on the CLI.
_STEP_S = 30.0


class _Steps:
    """An `mdrag index` run committed as it goes, as the server's updates are (:mod:`mdrag.index.keeper`):
    every ``_STEP_S`` (a first build: every few seconds, so that searches answer from it as it grows) the run
    commits what it embedded and goes on, so that a run stopped (Ctrl+C, a crash) keeps it. The first Ctrl+C
    stops embedding at the embedder's next batch, commits the files whose chunks are written and stops there; a
    second stops at once (what the last step committed is kept, the next run repairs the rest)."""

    def __init__(self) -> None:
        self.pause = threading.Event()  # the step that runs commits what it wrote and returns
        self.stop = threading.Event()  # the same, and the embedder stops at its next batch (Ctrl+C)
        self.cancel = threading.Event()  # the run stops before its next file, without committing
        self.interrupted = False  # Ctrl+C was pressed: no step after the one that runs

    def run(self, index: Index, args: argparse.Namespace, bar: _IndexBar) -> IndexSummary:
        from mdrag.index.keeper import add_step

        so_far, rebuild = None, args.rebuild
        with self._taking_ctrl_c(bar.say):
            while True:
                timer = threading.Timer(_STEP_S, self.pause.set)
                timer.daemon = True
                timer.start()
                try:
                    how = {"rebuild": rebuild, "progress": bar, "pause": self.pause, "cancel": self.cancel}
                    step = self._wait(functools.partial(index.update, args.folders or None, stop=self.stop, **how))
                finally:
                    timer.cancel()
                    self.pause.clear()
                so_far, rebuild = add_step(so_far, step), False
                bar.next_step()
                if not step.remaining or self.interrupted:
                    return so_far

    @contextlib.contextmanager
    def _taking_ctrl_c(self, say: Callable[[str], None]) -> Iterator[None]:
        """Ctrl+C, for the block, sets the run's events (:meth:`_interrupt`) rather than raising where it lands
        (between two steps too); in the main thread only, where signals are handled."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        before = signal.signal(signal.SIGINT, lambda *_: self._interrupt(say))
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, before)

    def _interrupt(self, say: Callable[[str], None]) -> None:
        """Ctrl+C: the first stops the embedder at its next batch and ends the step that runs (it commits what
        was embedded), the second cancels it; each says so with ``say``."""
        if self.interrupted:
            self.cancel.set()
            say("mdrag: stopping now")
            return
        self.interrupted = True
        self.stop.set()
        self.pause.set()
        say(
            "mdrag: interrupted: saving what was embedded (Ctrl+C again to stop at once; "
            "the next `mdrag index` then repairs and goes on)"
        )

    def _wait(self, update: Callable[[], IndexSummary]) -> IndexSummary:
        """Run ``update`` in a thread while the main thread waits (taking Ctrl+C: :meth:`_taking_ctrl_c`)."""
        out: list[IndexSummary | BaseException] = []
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
        while not ended.wait(0.2):
            pass
        worker.join()
        if isinstance(out[0], BaseException):
            raise out[0]
        return out[0]


def _index_into(args: argparse.Namespace, index: Index) -> int:
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
        from mdrag.ingest.summary import NEW_INDEX

        s = summary
        if s.rebuild == NEW_INDEX:
            print("new index")
        elif s.rebuild:
            print(f"full re-index: {s.rebuild}")
        if s.waited_s:
            print(f"waited {s.waited_s:.1f} s for another mdrag run on this index: what it indexed is not done again")
        if s.repaired:
            print("repaired the index: an interrupted run, or damage that its store or `status --verify` found")
        print(
            f"files: {s.added} added, {s.modified} modified"
            + (f" ({s.copies} of these the same as another file: indexed once)" if s.copies else "")
            + f", {s.deleted} deleted, "
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
            print(f"decoded {safe_name(path)} as {safe_name(encoding)}")
        _print_chunks(s)
        for path, reason in s.skipped_files:
            print(f"skipped {safe_name(path)}: {safe_text(reason)}")
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
            safe_text(
                f"mdrag: error: not found, so not indexed: {', '.join(gone)}. "
                "Check the path; the index is unchanged for it."
            ),
            file=sys.stderr,
        )
    for f in files:
        print(
            safe_text(f"mdrag: error: not indexed: {not_a_folder(f)}. The index is unchanged for it."), file=sys.stderr
        )
    return 1


def _print_chunks(s: IndexSummary) -> None:
    print(
        f"chunks: {s.chunks_embedded} embedded, {s.chunks_reused} already embedded, "
        f"{s.chunks_deleted} deleted, {s.chunks_total} in the index"
    )


def _remove_from(args: argparse.Namespace, index: Index) -> int:
    summary = index.remove(args.folders)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2))
        return 0
    print(f"removed {', '.join(summary.removed_folders)}: {summary.deleted} files")
    _print_chunks(summary)
    print(f"folders: {', '.join(summary.folders) or '-'}")
    return 0
