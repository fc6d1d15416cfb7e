"""The local index as a command opens it: under its writers' lock for a command that writes, with its model
loading ahead for a one-shot search."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.index import Index


@contextlib.contextmanager
def local_index(config: Config, *, writing: bool = False, query: str | None = None) -> Iterator[Index]:
    """The local index that ``config`` names, open for the block and closed after it.

    ``writing``: the block holds the index's writers' lock until its store is closed (a run waiting for this
    one in another process then finds the store free: Milvus Lite lets one process open its file).
    ``query``: a one-shot search's, whose model starts loading now (:func:`_model_loading`).
    """
    from mdrag.index import Index

    index = Index(config)
    loading = _model_loading(index, query) if query is not None else None
    with index.writing() if writing else contextlib.nullcontext(), index, _joined(loading):
        yield index


@contextlib.contextmanager
def _joined(thread: threading.Thread | None) -> Iterator[None]:
    """Wait for ``thread`` at the end of the block: a model runtime still at work in a thread when the
    interpreter exits may abort the process (OpenVINO's does: "terminate called without an active exception")."""
    try:
        yield
    finally:
        if thread is not None:
            thread.join()


def _model_loading(index: Index, query: str) -> threading.Thread | None:
    """For a one-shot `mdrag search`: the thread that loads the index's model from now on, while the rest of
    the search is imported and its store opened (the model's load is most of a search's time); None when the
    index has no manifest (most likely it does not exist: the model is not prepared for an error).

    The thread embeds the query itself, so that it loads just what a query runs (OpenVINO embeds queries
    with a model of its own); the search embeds it again, in a few milliseconds, with the model loaded.
    """
    if not query.strip() or not index.manifest_path.exists():
        return None
    embedder = index.embedder

    def load() -> None:
        try:
            embedder.embed_query(query)
        except Exception:  # noqa: BLE001  # the search's own embedding raises it again, and reports it
            pass

    thread = threading.Thread(target=load, name="mdrag-model", daemon=True)
    thread.start()
    return thread
