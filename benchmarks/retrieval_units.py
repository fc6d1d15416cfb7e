"""Retrieval candidates for one detail on a long page against the baseline, on every question set, in one run.

Each index (otel, hugo, scifact: the FAISS store `mdrag index --store faiss` writes) is read from its
SQLite file (chunk text, heading trail, stored vector, BM25 text) into an in-memory store that the
real ``mdrag.retrieval.search.search`` ranks over, scored by the real ``mdrag.retrieval.evaluate``;
with no candidate it ranks as `mdrag eval` on the FAISS store does. Candidates (``+`` combines them):

- ``udense``: details embedded beside their chunk (each chunk's paragraphs, list items, table rows
  with their header row, sentences of long paragraphs, lines of long code listings; each embedded
  with the chunk's heading header); a chunk's cosine is the best of its own and its details'
  (small-to-big: a detail's hit returns its chunk);
- ``ubm25``: the details BM25-indexed too, each hit mapped to its chunk; ``uboth``: both;
- ``split``: identifiers split for BM25 (snake_case, dotted, kebab and camelCase parts added after
  the word, in the indexed text and in the query);
- ``qlen``, ``qlin``, ``qidf``: hybrid's dense weight decided from the query: 0.3 for four distinct
  words or fewer (``qlen``), 0.2 + 0.05 per word up to the default (``qlin``), lower when the query's
  words are rare in the index (``qidf``: mean IDF over the highest possible).

Every question set of benchmarks/data/ over these corpora (otel_*.jsonl, hugo_*.jsonl) and SciFact
(BEIR test, documents by file stem), every mode: Hit@5, MRR@5, nDCG@10 and each candidate's change
against the baseline of this run, in questions (Hit@5 won and lost) and in figures. A candidate
keeps the rule when no set falls by more than one question (Hit@5) in any mode and SciFact's
nDCG@10 falls in no mode. Costs: extra vectors and BM25 rows, the time to embed the details (a
sample timed beside as many chunks, then scaled to all), and the warm hybrid search p50 of the
in-memory store over the Hugo questions with and without them (not the FAISS store: a ratio only).

    python benchmarks/retrieval_units.py [--home DIR] [--cache DIR] [--candidates udense,split,...] [--json out.json]

``--home``: an mdrag home whose FAISS indexes otel, hugo and scifact are reused (those missing are
indexed there with `mdrag index`); without it, a temporary home. Details' and queries' vectors are
cached under ``<home>/cache/retrieval_units`` (``--cache``), keyed by the text's hash.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import logging
import math
import os
import platform
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import mdrag_cli, seed_model_cache  # noqa: E402
from render import (  # noqa: E402
    MODES,
    command,
    fdelta,
    fint,
    fms,
    fnum,
    fratio,
    fsec,
    machine,
    not_measured,
    prose,
    table,
    verdict,
)
from steps import MODELS, NA, OUT, Benchmark, Data, Row, Section, Step, Target  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
QA_DIR = ROOT / "benchmarks" / "data"
SCIFACT = DATA / "scifact"
FOLDERS = {"otel": DATA / "markdown_otel_docs", "hugo": DATA / "markdown_hugo_docs"}
CORPORA = ("otel", "hugo", "scifact")
CANDIDATES = "split,ubm25,udense,uboth,qlen,qlin,qidf,udense+split,uboth+split,udense+qidf,udense+qlen"
FUSIONS = ("qlen", "qlin", "qidf")
METRICS = ("hit@5", "mrr@5", "ndcg@10")
log = logging.getLogger("retrieval_units")

# -- a chunk's details (measurement code, not mdrag's) ---------------------------

_ITEM = re.compile(r"^\s{0,3}([-*+]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(])")
_TABLE_RULE = re.compile(r"[|:\-\s]+")
LONG = 300  # a paragraph or code listing longer than this (characters) is split further
SHORTEST = 15  # details shorter than this are left out


def details_of(text: str) -> list[str]:
    """A chunk's paragraphs, list items, table rows (each with the header row), sentences of long
    paragraphs and lines of long code listings."""
    out: list[str] = []
    block: list[str] = []  # the lines of the paragraph or list item being read
    code: list[str] = []  # the lines of the code listing being read, fences included
    table_head: str | None = None

    def end_block() -> None:
        if block:
            para = " ".join(s.strip() for s in block)
            block.clear()
            out.extend(_SENTENCE_END.split(para) if len(para) > LONG else [para])

    for line in text.split("\n"):
        s = line.strip()
        if s.startswith(("```", "~~~")):
            end_block()
            if code:
                code.append(line)
                listing = "\n".join(code)
                out.extend(code[1:-1] if len(listing) > LONG else [listing])
                code = []
            else:
                code = [line]
            continue
        if code:
            code.append(line)
            continue
        if s.startswith("|"):
            end_block()
            if table_head is None:
                table_head = s
            elif not _TABLE_RULE.fullmatch(s):
                out.append(f"{table_head}\n{s}")
            continue
        table_head = None
        if not s or _ITEM.match(line):
            end_block()
        if s:
            block.append(s)
    end_block()
    if code:
        out.append("\n".join(code))
    return [d for d in (x.strip() for x in out) if len(d) >= SHORTEST]


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_IDENT = re.compile(r"\b\w*(?:[_.\-]\w+|[a-z0-9][A-Z])\w*\b")


def split_identifiers(text: str) -> str:
    """Each snake_case, dotted, kebab or camelCase identifier followed by its parts."""

    def parts(m: re.Match[str]) -> str:
        word = m.group(0)
        ps = [p for p in re.split(r"[_.\-]+", _CAMEL.sub("_", word)) if p]
        return word if len(ps) <= 1 else f"{word} {' '.join(ps)}"

    return _IDENT.sub(parts, text)


# -- the indexes -----------------------------------------------------------------


@dataclass
class Rows:
    """An index's chunks as its FAISS store keeps them."""

    hits: list[Any]  # mdrag.store.base.Hit, scores 0
    vectors: np.ndarray  # (chunks, dimension) float32, as stored
    bm25_texts: list[str]  # what the store's BM25 ranks (stemmed heading trail and text)


def load_rows(sqlite: Path) -> Rows:
    """The rows of a FAISS store's SQLite file, in the store's order (read-only)."""
    from mdrag.store.base import ROW_FIELDS, Hit

    db = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    hits, vectors, texts = [], [], []
    for r in db.execute(f"SELECT id, {', '.join(ROW_FIELDS)}, bm25_text, vector FROM chunks ORDER BY n"):  # noqa: S608
        row = dict(zip(("id", *ROW_FIELDS), r[:-2]))
        row["headings"], row["metadata"] = json.loads(row["headings"]), json.loads(row["metadata"])
        hits.append(Hit(**row, score=0.0, rank_score=0.0))
        texts.append(r[-2])
        vectors.append(np.frombuffer(r[-1], dtype=np.float32))
    db.close()
    return Rows(hits, np.vstack(vectors), texts)


def write_scifact_docs(folder: Path) -> None:
    """Each SciFact abstract as ``<id>.md``: ``# title`` and its text, as benchmarks/scifact.py writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            (folder / f"{d['_id']}.md").write_text(f"# {d['title']}\n\n{d['text']}\n", encoding="utf-8")


def ensure_index(home: Path, name: str) -> float | None:
    """Index ``name`` with `mdrag index --store faiss` unless ``home`` holds it; the seconds it took, or None."""
    if (home / "cache" / "faiss" / f"{name}.sqlite").is_file():
        return None
    folder = FOLDERS.get(name) or home / "scifact-docs"
    if name == "scifact":
        write_scifact_docs(folder)
    log.info("indexing %s (%s) with mdrag index", name, folder)
    seconds, _ = mdrag_cli(home, "index", str(folder), "--index", name, "--store", "faiss", "--json", "-q")
    return seconds


# -- vectors, cached under the home by the text's hash ----------------------------


class Vectors:
    """The embedder, and the vectors of details and queries it made, kept in ``folder`` by text hash."""

    def __init__(self, folder: Path) -> None:
        from mdrag.config import load_config
        from mdrag.embedding import make_embedder

        self.embedder = make_embedder(load_config())
        slug = re.sub(r"[^\w.-]+", "_", self.embedder.model_id)
        self.folder = folder / slug  # a model's vectors apart from another's
        self.folder.mkdir(parents=True, exist_ok=True)
        self.times_file = self.folder / "embed_times.json"

    def _load(self, name: str) -> dict[str, np.ndarray]:
        path = self.folder / f"{name}.npz"
        if not path.is_file():
            return {}
        with np.load(path) as z:
            return dict(zip(z["keys"].tolist(), z["vecs"]))

    def get(self, texts: Sequence[str], name: str, query: bool = False) -> np.ndarray:
        """Vectors of ``texts`` (``query``: each embedded as a search embeds its query); those missing are
        embedded and the time it took recorded."""
        have = self._load(name)
        keys = [hashlib.sha1(t.encode("utf-8")).hexdigest() for t in texts]
        todo = sorted({k: i for i, k in enumerate(keys) if k not in have}.values())
        if todo:
            log.info("embedding %d texts for %s", len(todo), name)
            t = time.perf_counter()
            if query:
                vecs = np.vstack([self.embedder.embed_query(texts[i]) for i in todo])
            else:
                vecs = self.embedder.embed([texts[i] for i in todo])
            self._record(name, len(todo), time.perf_counter() - t)
            have.update((keys[i], v) for i, v in zip(todo, vecs))
            np.savez(self.folder / f"{name}.npz", keys=np.array(list(have)), vecs=np.vstack(list(have.values())))
        return np.vstack([have[k] for k in keys]).astype(np.float32)

    def _record(self, name: str, count: int, seconds: float) -> None:
        times = json.loads(self.times_file.read_text()) if self.times_file.is_file() else {}
        times.setdefault(name, []).append({"texts": count, "seconds": round(seconds, 2), "cpus": os.cpu_count()})
        self.times_file.write_text(json.dumps(times, indent=1))

    def recorded(self, name: str) -> list[dict[str, Any]]:
        """The embedding runs recorded for ``name`` (each: texts, seconds, cpus)."""
        times = json.loads(self.times_file.read_text()) if self.times_file.is_file() else {}
        return list(times.get(name, []))


# -- the in-memory store -----------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """What a candidate changes: details in the dense list, in BM25, split identifiers, a fusion weight."""

    name: str
    details_dense: bool = False
    details_bm25: bool = False
    split: bool = False
    fusion: str = ""  # one of FUSIONS, or "" (the setting's fixed weight)

    @property
    def store_key(self) -> tuple[bool, bool, bool]:
        return self.details_dense, self.details_bm25, self.split


def parse_candidate(name: str) -> Candidate:
    """``udense+split+qidf`` -> its Candidate; ValueError for an unknown part."""
    c = Candidate(name)
    for part in name.split("+"):
        if part in ("udense", "uboth"):
            c = replace(c, details_dense=True)
        if part in ("ubm25", "uboth"):
            c = replace(c, details_bm25=True)
        if part == "split":
            c = replace(c, split=True)
        if part in FUSIONS:
            c = replace(c, fusion=part)
        if part not in ("udense", "ubm25", "uboth", "split", *FUSIONS, "baseline"):
            raise ValueError(f"unknown candidate part {part!r} in {name!r}")
    return c


class MemStore:
    """An index's rows in memory, ranked as mdrag's stores rank (cosine; BM25 as Milvus scores it), plus a
    candidate's details: each detail row belongs to its chunk, and a chunk's cosine is its best row's."""

    hides = True  # no update runs: nothing is hidden
    has_bm25 = True
    transactional = True

    def __init__(self, rows: Rows, details: list[tuple[int, str]], detail_vectors: np.ndarray | None,
                 details_bm25: bool, split: bool) -> None:  # fmt: skip
        from mdrag.stemming import stemmer
        from mdrag.store.bm25 import Bm25

        stem = stemmer()
        self.prepare_text: Callable[[str], str] = (lambda t: stem(split_identifiers(t))) if split else stem
        self.rows = rows
        self.chunks = len(rows.hits)
        texts = (
            [self.prepare_text(f"{h.context}\n\n{h.text}" if h.context else h.text) for h in rows.hits]
            if split
            else list(rows.bm25_texts)
        )
        self.owner = list(range(self.chunks))  # BM25 row -> its chunk
        if details_bm25:
            texts += [self.prepare_text(t) for _, t in details]
            self.owner += [j for j, _ in details]
        self.bm25 = Bm25()
        self.bm25.add(list(range(len(texts))), texts)
        self.df = Counter(w for t in texts for w in set(self.bm25.tokens(t)))  # for qidf
        self.detail_vectors = detail_vectors  # (details, dimension), in chunk order, or None
        if detail_vectors is not None:
            owners = np.array([j for j, _ in details])
            self.starts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]])  # each chunk's first detail
            self.with_details = owners[self.starts]
            self.first = np.zeros(self.chunks, dtype=np.int64)  # by chunk: its details' rows, first..end
            self.end = np.zeros(self.chunks, dtype=np.int64)
            self.first[self.with_details] = self.starts
            self.end[self.with_details] = np.r_[self.starts[1:], len(owners)]

    def cosines(self, v: np.ndarray) -> np.ndarray:
        """Each chunk's cosine to ``v``: its own, or its best detail's where that is higher."""
        best = self.rows.vectors @ v
        if self.detail_vectors is not None:
            per_chunk = np.maximum.reduceat(self.detail_vectors @ v, self.starts)
            best[self.with_details] = np.maximum(best[self.with_details], per_chunk)
        return best

    def cosines_of(self, v: np.ndarray, chunks: list[int]) -> np.ndarray:
        """:meth:`cosines` of these chunks only (what a store reads for the rows a BM25 search returns)."""
        js = np.array(chunks, dtype=np.int64)
        best = self.rows.vectors[js] @ v
        if self.detail_vectors is not None and len(js):
            lo, hi = self.first[js], self.end[js]
            has = np.flatnonzero(hi > lo)
            if len(has):
                rows = np.concatenate([np.arange(a, b) for a, b in zip(lo[has], hi[has])])
                seg = np.r_[0, np.cumsum(hi[has] - lo[has])[:-1]]
                best[has] = np.maximum(best[has], np.maximum.reduceat(self.detail_vectors[rows] @ v, seg))
        return best

    def search(self, vector: np.ndarray, n: int, where: Any = None, mode: str = "dense", text: str = "",
               hidden: frozenset[str] = frozenset()) -> list[Any]:  # fmt: skip
        v = np.asarray(vector, dtype=np.float32).reshape(-1)
        if mode == "dense":
            best = self.cosines(v)
            order = np.argsort(-best, kind="stable")[:n]
            return [replace(self.rows.hits[i], score=float(best[i]), rank_score=float(best[i])) for i in order]
        query, asked = self.prepare_text(text), n * 4 + 50
        while True:
            found = self.bm25.search(query, asked, None)
            chunks: dict[int, float] = {}  # chunk -> its best row's BM25 score, best first
            for row, score in found:
                chunks.setdefault(self.owner[row], score)
            if len(chunks) >= n or len(found) < asked:
                break
            asked *= 4  # details of one chunk took the places: ask for more rows
        top = list(chunks.items())[:n]
        cos = self.cosines_of(v, [j for j, _ in top])
        return [replace(self.rows.hits[j], score=float(c), rank_score=s) for (j, s), c in zip(top, cos)]

    def dense_weight(self, fusion: str, query: str, default: float) -> float:
        """Hybrid's dense weight for ``query`` under ``fusion`` (one of FUSIONS, or "": ``default``)."""
        words = self.prepare_text(query).split()
        if fusion == "qlen":
            return 0.3 if len(set(words)) <= 4 else default
        if fusion == "qlin":
            return min(default, 0.2 + 0.05 * len(set(words)))
        if fusion == "qidf" and words:
            n = self.bm25.n
            idf = [math.log(1 + (n - self.df[w] + 0.5) / (self.df[w] + 0.5)) for w in words]
            rarity = statistics.fmean(idf) / math.log(1 + n)  # 1: words no row holds
            return max(0.25, min(default, default - 0.5 * (rarity - 0.45)))
        return default


def details(rows: Rows) -> list[tuple[int, str]]:
    """(chunk, embedded text: heading header and detail) of every detail of a chunk that holds more than one."""
    out: list[tuple[int, str]] = []
    for j, h in enumerate(rows.hits):
        ds = details_of(h.text)
        if len(ds) > 1:  # a chunk that is one detail is its own detail
            out += [(j, f"{h.context}\n\n{d}" if h.context else d) for d in ds]
    return out


def build_store(rows: Rows, cand: Candidate, vectors: Vectors, corpus: str) -> tuple[MemStore, dict[str, Any]]:
    """The candidate's store over ``rows``, and what its details cost (rows, vectors, MB at float32)."""
    found = details(rows) if cand.details_dense or cand.details_bm25 else []
    dvecs = vectors.get([t for _, t in found], f"details-{corpus}") if cand.details_dense and found else None
    store = MemStore(rows, found, dvecs, cand.details_bm25, cand.split)
    dim = rows.vectors.shape[1]
    extra = len(found) if cand.details_dense else 0
    cost = {
        "extra_vectors": extra,
        "extra_vector_mb": round(extra * dim * 4 / 1e6, 1),
        "extra_bm25_rows": len(found) if cand.details_bm25 else 0,
    }
    return store, cost


# -- measuring ----------------------------------------------------------------------


def question_sets(corpora: Sequence[str], limit: int | None) -> dict[str, tuple[str, list[Any], str]]:
    """Set name -> (corpus, answerable questions, doc_key): benchmarks/data/<corpus>_*.jsonl, and SciFact."""
    from mdrag.retrieval.evaluate import load_beir, load_questions

    sets: dict[str, tuple[str, list[Any], str]] = {}
    for corpus in corpora:
        if corpus == "scifact":
            qs = load_beir(SCIFACT / "queries.test.tsv", SCIFACT / "qrels" / "test.tsv")
            sets["scifact"] = ("scifact", qs[:limit], "stem")
            continue
        for path in sorted(QA_DIR.glob(f"{corpus}_*.jsonl")):
            qs = [q for q in load_questions(path) if q.gold]
            sets[path.stem] = (corpus, qs[:limit], "path")
    return sets


def measure(store: MemStore, cand: Candidate, questions: list[Any], qvecs: np.ndarray, doc_key: str,
            modes: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """Per mode: the means (mdrag.retrieval.evaluate) and each question's Hit@5 and reciprocal rank."""
    from mdrag.retrieval import search as S
    from mdrag.retrieval.evaluate import evaluate

    vec = {q.text: v for q, v in zip(questions, qvecs)}
    done: dict[tuple[str, str], list[Any]] = {}
    default = S.SearchOptions().dense_weight

    def search(text: str, mode: str) -> list[Any]:
        if (mode, text) not in done:
            weight = store.dense_weight(cand.fusion, text, default)
            options = S.SearchOptions(mode=mode, dense_weight=weight)
            done[mode, text] = S.search(store, _NO_EMBEDDER, text, options, vector=vec[text])  # type: ignore[arg-type]
        return done[mode, text]

    means = evaluate(search, questions, modes, doc_key=doc_key)
    out: dict[str, Any] = {}
    for mode in modes:
        each = [evaluate(search, [q], [mode], doc_key=doc_key)[mode] for q in questions]
        out[mode] = {
            **{m: means[mode][m] for m in METRICS},
            "hits": [int(e["hit@5"]) for e in each],
            "rr": [e["mrr"] for e in each],
        }
    return out


class _NoEmbedder:
    """search() is given each query's vector: it never embeds."""

    def embed_query(self, text: str) -> np.ndarray:
        raise AssertionError("the query's vector is given")


_NO_EMBEDDER = _NoEmbedder()


def compare(base: dict[str, Any], cand: dict[str, Any], ids: list[str]) -> dict[str, Any]:
    """A candidate's figures on one set against the baseline's, per mode: changes in figures and in questions."""
    out = {}
    for mode, b in base.items():
        c = cand[mode]
        won = [i for i, x, y in zip(ids, b["hits"], c["hits"]) if y > x]
        lost = [i for i, x, y in zip(ids, b["hits"], c["hits"]) if y < x]
        out[mode] = {
            **{m: c[m] for m in METRICS},
            **{f"d_{m}": round(c[m] - b[m], 4) for m in METRICS},
            "hits5": sum(c["hits"]),
            "d_hits5": sum(c["hits"]) - sum(b["hits"]),
            "won": won,
            "lost": lost,
            "ranked_higher": sum(y > x for x, y in zip(b["rr"], c["rr"])),
            "ranked_lower": sum(y < x for x, y in zip(b["rr"], c["rr"])),
        }
    return out


def rule(results: dict[str, dict[str, Any]], cand: str) -> dict[str, Any]:
    """The rule: no set loses more than one question at Hit@5 in any mode, SciFact's nDCG@10 in none."""
    why = []
    for name, by_cand in results.items():
        for mode, r in by_cand[cand].items():
            if r["d_hits5"] < -1:
                why.append(f"{name} {mode}: {r['d_hits5']:+d} questions at Hit@5")
            if name == "scifact" and r["d_ndcg@10"] < 0:
                why.append(f"scifact {mode}: nDCG@10 {r['d_ndcg@10']:+.4f}")
    return {"passes": not why, "why": why}


def embed_timing(rows: Rows, details: list[str], vectors: Vectors, sample: int) -> dict[str, Any]:
    """The embedder on ``sample`` details and as many chunks (their embedded text), alternated in halves;
    each rate scaled to all the details and all the chunks. Nothing here is cached."""
    if not details or sample < 2:
        return {}
    rng = random.Random(42)
    chunk_texts = [f"{h.context}\n\n{h.text}" if h.context else h.text for h in rows.hits]
    ds = rng.sample(details, min(sample, len(details)))
    cs = rng.sample(chunk_texts, min(sample, len(chunk_texts)))
    took = {"details": 0.0, "chunks": 0.0}
    for half in (0, 1):
        for kind, texts in (("details", ds), ("chunks", cs)):
            part = texts[half * len(texts) // 2 : (half + 1) * len(texts) // 2]
            t = time.perf_counter()
            vectors.embedder.embed(part)
            took[kind] += time.perf_counter() - t
    all_details = len(details) * took["details"] / len(ds)
    all_chunks = len(chunk_texts) * took["chunks"] / len(cs)
    return {
        "sample": len(ds),
        "details_per_s": len(ds) / took["details"],
        "chunks_per_s": len(cs) / took["chunks"],
        "details_s": all_details,
        "chunks_s": all_chunks,
        "growth": all_details / all_chunks,
    }


def latency(stores: dict[str, tuple[MemStore, Candidate]], questions: list[Any], qvecs: np.ndarray,
            repeat: int) -> dict[str, float]:  # fmt: skip
    """Warm hybrid search p50 (ms) of each store over ``questions``: one pass to warm, then ``repeat``
    passes, the stores taking turns question by question (the machine is shared). Query vectors given."""
    from mdrag.retrieval import search as S

    default = S.SearchOptions().dense_weight
    times: dict[str, list[float]] = {name: [] for name in stores}
    for rnd in range(repeat + 1):
        for q, v in zip(questions, qvecs):
            for name, (store, cand) in stores.items():
                t = time.perf_counter()
                weight = store.dense_weight(cand.fusion, q.text, default)
                S.search(store, _NO_EMBEDDER, q.text, S.SearchOptions(dense_weight=weight), vector=v)  # type: ignore[arg-type]
                if rnd:
                    times[name].append(time.perf_counter() - t)
    return {name: 1000 * statistics.median(ts) for name, ts in times.items()}


def run(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    """Every candidate on every set of ``args.corpora`` against the baseline, and their costs."""
    from mdrag.retrieval.evaluate import unknown_gold

    indexed = {name: ensure_index(home, name) for name in args.corpora}
    vectors = Vectors(args.cache or home / "cache" / "retrieval_units")
    vectors.embedder.embed(["warm up"])
    cands = [parse_candidate(c) for c in args.candidates.split(",") if c]
    sets = question_sets(args.corpora, args.limit)
    out: dict[str, Any] = {
        "embedder": type(vectors.embedder).__name__,
        "model": vectors.embedder.model_id,
        "machine": machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "home": "the mdrag home given with `--home`" if args.home else "a temporary mdrag home",
        "candidates": [c.name for c in cands],
        "indexes": {},
        "sets": {},
        "results": {},
        "cost": {},
    }
    hugo_stores: dict[str, tuple[MemStore, Candidate]] = {}
    for corpus in args.corpora:
        rows = load_rows(home / "cache" / "faiss" / f"{corpus}.sqlite")
        files = {h.rel_path for h in rows.hits}
        out["indexes"][corpus] = {"chunks": len(rows.hits), "files": len(files), "index_s": indexed[corpus]}
        mine = {n: (qs, key) for n, (c, qs, key) in sets.items() if c == corpus}
        qvecs = {n: vectors.get([q.text for q in qs], "queries", query=True) for n, (qs, _) in mine.items()}
        for n, (qs, doc_key) in mine.items():
            out["sets"][n] = {"corpus": corpus, "questions": len(qs), "unknown_gold": unknown_gold(qs, files, doc_key)}
        stores: dict[tuple[bool, bool, bool], tuple[MemStore, dict[str, Any]]] = {}
        fixed: dict[tuple[tuple[bool, bool, bool], str], dict[str, Any]] = {}  # a store's figures, fixed weight
        for cand in [Candidate("baseline"), *cands]:
            key = cand.store_key
            if key not in stores:
                stores[key] = build_store(rows, cand, vectors, corpus)
            store, cost = stores[key]
            out["cost"].setdefault(corpus, {})[cand.name] = cost
            if corpus == "hugo":
                hugo_stores[cand.name] = (store, cand)
            for n, (qs, doc_key) in mine.items():
                t = time.perf_counter()
                if (key, n) not in fixed:
                    fixed[key, n] = measure(store, replace(cand, fusion=""), qs, qvecs[n], doc_key, MODES)
                got = fixed[key, n]
                if cand.fusion:  # only hybrid changes: dense and bm25 are the store's own
                    got = {**got, "hybrid": measure(store, cand, qs, qvecs[n], doc_key, ("hybrid",))["hybrid"]}
                base = fixed[Candidate("baseline").store_key, n]
                out["results"].setdefault(n, {})[cand.name] = compare(base, got, [q.id for q in qs])
                show(n, cand.name, out["results"][n][cand.name], time.perf_counter() - t)
        texts = [t for _, t in details(rows)]
        out["cost"][corpus]["embed"] = {
            "details": len(texts),
            "vector_mb": round(len(texts) * rows.vectors.shape[1] * 4 / 1e6, 1),  # float32
            "timed": embed_timing(rows, texts, vectors, args.time_sample),
            "recorded": vectors.recorded(f"details-{corpus}"),
        }
    out["rule"] = {c.name: rule(out["results"], c.name) for c in cands}
    if hugo_stores:
        qs = [q for c, questions, _ in sets.values() if c == "hugo" for q in questions]
        p50 = latency(hugo_stores, qs, vectors.get([q.text for q in qs], "queries", query=True), args.repeat)
        out["latency"] = {"questions": len(qs), "repeat": args.repeat, "p50_ms": p50}
    return out


def show(name: str, cand: str, figures: dict[str, Any], seconds: float) -> None:
    for mode, r in figures.items():
        print(
            f"{name:<20} {cand:<16} {mode:<6} Hit@5 {r['hit@5']:.3f} {r['d_hit@5']:+.3f} "
            f"({r['d_hits5']:+d}: +{len(r['won'])} -{len(r['lost'])})  MRR@5 {r['mrr@5']:.3f} {r['d_mrr@5']:+.3f}  "
            f"nDCG@10 {r['ndcg@10']:.4f} {r['d_ndcg@10']:+.4f}" + (f"  [{seconds:.0f} s]" if mode == "dense" else ""),
            flush=True,
        )


def summary(out: dict[str, Any]) -> None:
    for cand, r in out["rule"].items():
        print(f"{cand:<16} {'keeps the rule' if r['passes'] else 'breaks the rule: ' + '; '.join(r['why'])}")
    for corpus, costs in out["cost"].items():
        timed = costs["embed"]["timed"]
        if timed:
            print(f"{corpus}: {costs['embed']['details']} details; embedding them ~{timed['details_s']:.0f} s against "
                  f"~{timed['chunks_s']:.0f} s for the chunks ({timed['growth']:.2f}x)")  # fmt: skip
    p50 = (out.get("latency") or {}).get("p50_ms") or {}
    for cand, ms in p50.items():
        print(f"hugo hybrid p50 (in-memory store) {cand:<16} {ms:.2f} ms ({ms / p50['baseline']:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", type=Path, help="an mdrag home to reuse (its indexes otel, hugo, scifact) or fill")
    ap.add_argument("--cache", type=Path, help="vectors of details and queries (default: <home>/cache/retrieval_units)")
    ap.add_argument("--model-cache", type=Path, help="an MDRAG_HOME/cache holding the model export to copy")
    ap.add_argument("--candidates", default=CANDIDATES, help=f"comma-separated (default: {CANDIDATES})")
    ap.add_argument("--corpora", default=",".join(CORPORA), help="comma-separated, of otel, hugo, scifact")
    ap.add_argument("--limit", type=int, help="the first N questions of each set (a quick try)")
    ap.add_argument("--time-sample", type=int, default=512, help="details (and chunks) embedded to time (512)")
    ap.add_argument("--repeat", type=int, default=3, help="timed passes over the Hugo questions (3)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    args.corpora = [c for c in args.corpora.split(",") if c]
    bad = [c for c in args.corpora if c not in CORPORA]
    if bad:
        sys.exit(f"unknown corpus {', '.join(bad)}: use {', '.join(CORPORA)}")
    try:
        [parse_candidate(c) for c in args.candidates.split(",") if c]
    except ValueError as e:
        sys.exit(str(e))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("mdrag").setLevel(logging.WARNING)
    missing = [p for p in (*FOLDERS.values(), SCIFACT) if not p.exists()]
    if missing:
        sys.exit(f"no test data at {', '.join(map(str, missing))}: see shared/data/README.md")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        home = (args.home or Path(tmp) / "home").resolve()
        home.mkdir(parents=True, exist_ok=True)
        seed_model_cache(home, args.model_cache)
        os.environ["MDRAG_HOME"] = str(home)
        t = time.perf_counter()
        out = run(args, home)
        out["seconds"] = round(time.perf_counter() - t)
    summary(out)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


# -- in the report (benchmarks/report.py) --------------------------------------

TITLE = "Retrieval candidates for one detail on a long page"
RISE = 0.10  # the aim: hybrid Hit@5 on the detail sets rises by this much
SLOWER = 1.5  # the most warm hybrid search p50 on the Hugo index may grow


def _detail_sets(r: dict[str, Any]) -> list[str]:
    return [n for n in r.get("results", {}) if "_detail_" in n]


def _change(r: dict[str, Any], metric: str, questions: bool = False) -> str:
    """A candidate's figure and its change; ``questions``: also the net change in Hit@5 questions, those won
    and those lost."""
    moved = r[f"d_{metric}"] != 0 or (questions and (r["won"] or r["lost"]))
    if not moved:
        return fnum(r[metric], 3)
    text = f"{fnum(r[metric], 3)} {fdelta(r[f'd_{metric}'])}"
    return text + (f" ({r['d_hits5']:+d}: +{len(r['won'])} -{len(r['lost'])})" if questions else "")


def _summary_rows(r: dict[str, Any]) -> list[list[str]]:
    detail = _detail_sets(r)
    p50 = (r.get("latency") or {}).get("p50_ms") or {}
    rows = []
    for cand in r.get("candidates", []):
        rule_ = r["rule"][cand]
        why = rule_["why"]
        falls = NA if not why else "; ".join(why[:3]) + (f"; {len(why) - 3} more" if len(why) > 3 else "")
        hybrid = [r["results"][n][cand]["hybrid"] for n in r["results"]]
        won, lost = sum(len(h["won"]) for h in hybrid), sum(len(h["lost"]) for h in hybrid)
        sci = r["results"].get("scifact", {}).get(cand)
        vectors = sum(c.get(cand, {}).get("extra_vectors", 0) for c in r["cost"].values())
        mb = sum(c.get(cand, {}).get("extra_vector_mb", 0) for c in r["cost"].values())
        rows.append(
            [
                f"`{cand}`",
                verdict(rule_["passes"]),
                falls,
                f"+{won} -{lost}",
                *[_change(r["results"][n][cand]["hybrid"], "hit@5", True) for n in detail],
                " / ".join(fdelta(sci[m]["d_ndcg@10"], 4) for m in MODES) if sci else NA,
                f"{fint(vectors)} ({fnum(mb, 0)} MB)" if vectors else "0",
                f"{fms(p50.get(cand))} ({fratio(p50[cand] / p50['baseline'])})" if cand in p50 else NA,
            ]
        )
    return rows


def _cost_rows(r: dict[str, Any]) -> list[list[str]]:
    rows = []
    for corpus, costs in r.get("cost", {}).items():
        idx = r.get("indexes", {}).get(corpus, {})
        count = costs.get("embed", {}).get("details")
        timed = costs.get("embed", {}).get("timed") or {}
        recorded = costs.get("embed", {}).get("recorded") or []
        full = sum(x["seconds"] for x in recorded)
        rows.append(
            [
                corpus,
                fint(idx.get("chunks")),
                fsec(idx.get("index_s")) if idx.get("index_s") else "reused",
                f"{fint(count)} ({fratio(count / idx['chunks'])})" if count and idx.get("chunks") else NA,
                fnum(costs.get("embed", {}).get("vector_mb"), 1) + " MB",
                f"{fnum(timed.get('details_per_s'), 0)} / {fnum(timed.get('chunks_per_s'), 0)}",
                f"{fsec(timed.get('details_s'))} vs {fsec(timed.get('chunks_s'))} ({fratio(timed.get('growth'))})",
                f"{fsec(full)} for {fint(sum(x['texts'] for x in recorded))}" if recorded else "cached before",
            ]
        )
    return rows


def _set_table(r: dict[str, Any], name: str) -> list[str]:
    info = r["sets"][name]
    head = [f"**{name}** ({info['corpus']}, {fint(info['questions'])} questions with gold)", ""]
    if info.get("unknown_gold"):
        head += [f"Gold documents that name no indexed file: {', '.join(info['unknown_gold'])}.", ""]
    rows = []
    for cand, by_mode in r["results"][name].items():
        cells = []
        for mode in MODES:
            cells += [_change(by_mode[mode], m, m == "hit@5") for m in METRICS]
        rows.append([f"`{cand}`", *cells])
    cols = [f"{mode} {label}" for mode in MODES for label in ("Hit@5", "MRR@5", "nDCG@10")]
    return head + table(["candidate", *cols], rows)


def section_units(data: Data) -> list[str]:
    r = data.get("retrieval_units")
    machine_ = r.get("machine", NA) if r else "the machine of the run"
    lines = [f"## {TITLE}", ""]
    lines += prose(
        "retrieval_units",
        cmd=command(data, "retrieval_units"),
        machine=machine_,
        embedder=f"{r.get('embedder', NA)} ({r.get('model', NA)})" if r else "the default embedder",
        home=str(r.get("home")) if r and not str(r.get("home", "")).startswith("/") else "the mdrag home given",
        seconds=fsec(r.get("seconds")) if r else NA,
    )
    if not r:
        return lines + [not_measured("retrieval_units", data), ""]
    detail = _detail_sets(r)
    lines += [
        "Each candidate against the baseline; SciFact: the change of nDCG@10 in dense / bm25 / hybrid; "
        "extra vectors: over the three indexes; p50: warm hybrid search of the in-memory store over "
        f"{fint(dig_latency(r, 'questions'))} Hugo questions, against the baseline's.",
        "",
    ]
    lines += table(
        [
            "candidate",
            "within the rule",
            "what breaks it",
            "hybrid Hit@5, questions won / lost over all sets (SciFact too)",
            *[f"{n}: hybrid Hit@5" for n in detail],
            "SciFact nDCG@10 change",
            "extra vectors",
            "Hugo hybrid p50 (in-memory)",
        ],
        _summary_rows(r),
    )
    lines += [
        "Cost of the details (`udense` adds their vectors; `ubm25` as many BM25 rows and no vectors): "
        "embedding rate on a sample of "
        f"{fint(dig_timed(r))} details and as many chunks, in the same run, and that rate over all of them.",
        "",
    ]
    lines += table(
        [
            "corpus",
            "chunks",
            "index time",
            "details (x chunks)",
            "their vectors (float32)",
            "embedded per second, details / chunks",
            "embedding all, details vs chunks (growth)",
            "details embedded into the cache",
        ],
        _cost_rows(r),
    )
    lines += ["Every figure: the value, its change against the baseline; Hit@5 also the net change in "
              "questions, then the questions found and lost.", ""]  # fmt: skip
    for name in r.get("results", {}):
        lines += _set_table(r, name)
    return lines


def dig_latency(r: dict[str, Any], key: str) -> Any:
    return (r.get("latency") or {}).get(key)


def dig_timed(r: dict[str, Any]) -> Any:
    return next((c["embed"]["timed"].get("sample") for c in r.get("cost", {}).values() if c["embed"]["timed"]), None)


def t_units(data: Data) -> list[Row]:
    """The best candidate within the rule, by its smallest rise on a detail set; and its Hugo p50."""
    r = data.get("retrieval_units")
    name = f"detail questions: a candidate within the rule raises each detail set's hybrid Hit@5 by >= {RISE:g}"
    slow = f"detail questions: that candidate's warm hybrid p50 on Hugo (in-memory store) <= {SLOWER:g}x the baseline's"
    if not r:
        return [Row(name, not_measured("retrieval_units", data)), Row(slow, not_measured("retrieval_units", data))]
    detail = _detail_sets(r)
    passing = [c for c in r.get("candidates", []) if r["rule"][c]["passes"]]
    if not detail or not passing:
        why = "no detail set in benchmarks/data/" if not detail else "no candidate keeps the rule"
        return [Row(name, why, result=verdict(False if detail else None)), Row(slow, NA)]
    rise = {c: min(r["results"][n][c]["hybrid"]["d_hit@5"] for n in detail) for c in passing}
    best = max(passing, key=lambda c: rise[c])
    shown = ", ".join(f"{n} {fdelta(r['results'][n][best]['hybrid']['d_hit@5'])}" for n in detail)
    p50 = dig_latency(r, "p50_ms") or {}
    ratio = p50[best] / p50["baseline"] if best in p50 and p50.get("baseline") else None
    return [
        Row(name, f"`{best}`: {shown}", "baseline of the same run", result=verdict(rise[best] >= RISE)),
        Row(
            slow,
            f"`{best}`: {fms(p50.get(best))}",
            fms(p50.get("baseline")),
            fratio(ratio),
            verdict(None if ratio is None else ratio <= SLOWER),
        ),  # fmt: skip
    ]


BENCHMARK = Benchmark(
    steps=(
        Step(
            "retrieval_units",
            250,
            ("--home", str(OUT / "units-home"), "--model-cache", str(MODELS)),
            ("results", "rule", "cost", "latency"),
            ("cpus", "python"),
        ),
    ),
    sections=(Section(TITLE, 36, section_units),),
    targets=(Target(65, t_units),),
)


if __name__ == "__main__":
    main()
