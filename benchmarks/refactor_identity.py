"""Does a refactor keep mdrag's behaviour? Build and evaluate two commits on the same corpora and compare bytes.

For each commit (a throw-away worktree under ``--work``, made with ``git worktree add --detach``) and the store
given, every corpus the chosen sets ask about is indexed from nothing (``mdrag index DIR --store STORE``) and every
set evaluated (``mdrag eval SET --mode all --json``), each in a process of that commit's code (PYTHONPATH set to its
worktree). Then, per set, the two commits' outputs are compared byte for byte:

- ``eval``: the JSON that ``mdrag eval --mode all --json`` prints;
- ``dense``/``bm25``/``hybrid``: every search the evaluation ran in that mode, with its full result list (every
  field of every result, attached sections included), as JSON lines;
- ``rows``: every stored chunk of the corpus's index (id, file, heading path, lines, content hash, the sha256 of
  its text, context, BM25 text and vector), read from the FAISS store's SQLite file or the Milvus Lite collection.

Embedding is the cost on a small machine, so each process embeds through a cache: the default local model's
``embed`` and ``embed_query`` are wrapped, in the child process only, to look each text up in one SQLite file of
vectors (``--work``/vectors.sqlite) and to embed only the texts it lacks. Everything else (the model's tokenizer
and window, which decide the chunks; the index run; the stores; the search) is the commit's own code with the
default settings. A text is embedded once over all commits and stores, and the two commits of a comparison read
the same vector for the same text (OpenVINO's bf16 vectors of a text depend slightly on the batch it rode in).

Outputs are kept under ``--work``/out/<commit>-<store>/ and reused by a later run (delete them to redo).

    python benchmarks/refactor_identity.py BASE TIP --store faiss --sets pool cncf gitdoc
    python benchmarks/refactor_identity.py BASE TIP --store milvus  # every set
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CORPORA = ROOT.parent / "corpora"
SETS = ROOT / "benchmarks" / "data"
MADE = Path("made")  # a corpus made from ../shared/data under --work (the CommonMark spec, the web pages' sources)
MODES = ("dense", "bm25", "hybrid")
MODEL_LINK = shutil.ignore_patterns("models")  # a home's link to the model files, made by home_for

#: Each group of sets: (index name, corpus folder) and the sets asked of it, in the order a short run covers them.
GROUPS: dict[str, tuple[tuple[str, Path, tuple[str, ...]], ...]] = {
    "pool": (
        ("starlette", CORPORA / "starlette-docs", ("pool_starlette_tune", "pool_starlette_test")),
        ("flask", CORPORA / "flask-docs", ("pool_flask_tune", "pool_flask_test")),
        ("zsh", CORPORA / "zsh-html", ("pool_zsh_tune", "pool_zsh_test")),
    ),
    "cncf": (("cncf", DATA / "markdown_cncf_glossary", ("cncf_qa",)),),
    "gitdoc": (("gitdoc", CORPORA / "git-doc-html", ("gitdoc_qa",)),),
    "html": (("html", MADE, ("html_qa", "html_keyword_qa")),),
    "commonmark": (("commonmark", MADE, ("commonmark_qa",)),),
    "vault": (("vault", DATA / "notes_vault_obsidian-tasks", ("vault_qa", "vault_heldout_qa")),),
    "hugo": (("hugo", DATA / "markdown_hugo_docs", ("hugo_qa", "hugo_keyword_qa", "hugo_detail_qa")),),
    "otel": (
        (
            "otel",
            DATA / "markdown_otel_docs",
            ("otel_qa", "otel_keyword_qa", "otel_detail_qa", "otel_retrieval_qa"),
        ),
    ),
}

# -- the child process: the commit's own `mdrag`, with cached vectors and the searches recorded ----------------


class VectorCache:
    """Vectors by (kind, embedder, text) in one SQLite file that several processes share."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, timeout=600, isolation_level=None, check_same_thread=False)
        self.lock = threading.Lock()  # the index run embeds in a thread of its own
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS v (key TEXT PRIMARY KEY, vec BLOB NOT NULL)")

    @staticmethod
    def key(kind: str, embedder: object, text: str) -> str:
        """What decides a vector: documents and queries apart (OpenVINO embeds queries at f32), the model."""
        who = [type(embedder).__qualname__] + [
            str(getattr(embedder, name, None)) for name in ("model", "precision", "int8")
        ]
        return hashlib.sha256("\0".join([kind, *who, text]).encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, keys: list[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for s in range(0, len(keys), 500):
            part = keys[s : s + 500]
            marks = ",".join("?" * len(part))
            with self.lock:
                found.update(self.db.execute(f"SELECT key, vec FROM v WHERE key IN ({marks})", part).fetchall())
        return found

    def put(self, pairs: Iterable[tuple[str, bytes]]) -> None:
        """Store vectors; one already there (another process's) stays, and :meth:`get` then gives that one."""
        rows = list(pairs)
        with self.lock:
            self.db.executemany("INSERT OR IGNORE INTO v (key, vec) VALUES (?, ?)", rows)


def _cache_embedders(cache: VectorCache) -> None:
    """Wrap the local embedders' ``embed`` and ``embed_query`` so that each text is embedded once, ever."""
    import numpy as np

    from mdrag.embedding import onnx

    def cached_embed(original: Callable[..., Any]) -> Callable[..., Any]:
        def embed(self: Any, texts: Any, progress: Callable[[int], None] | None = None) -> Any:
            texts = list(texts)
            if not texts:
                return original(self, texts, progress)
            keys = [cache.key("document", self, t) for t in texts]
            found = cache.get(sorted(set(keys)))
            missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in found}
            if missing:
                vectors = original(self, list(missing.values()), None)
                cache.put((k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in zip(missing, vectors, strict=True))
                found.update(cache.get(list(missing)))
            if progress is not None:
                progress(len(texts))
            return np.stack([np.frombuffer(found[k], dtype=np.float32) for k in keys])

        return embed

    def cached_query(original: Callable[..., Any]) -> Callable[..., Any]:
        def embed_query(self: Any, text: str) -> Any:
            key = cache.key("query", self, text)
            found = cache.get([key])
            if key not in found:
                cache.put([(key, np.asarray(original(self, text), dtype=np.float32).tobytes())])
                found = cache.get([key])
            return np.frombuffer(found[key], dtype=np.float32).copy()

        return embed_query

    for cls in (onnx.OnnxEmbedder, onnx.OpenVinoEmbedder):
        if "embed" in cls.__dict__:
            cls.embed = cached_embed(cls.__dict__["embed"])
        if "embed_query" in cls.__dict__:
            cls.embed_query = cached_query(cls.__dict__["embed_query"])


def _record_searches(path: Path) -> None:
    """Write every search `mdrag eval` runs, with its full results, to ``path`` as JSON lines."""
    import dataclasses

    from mdrag.retrieval import evaluate as ev

    original = ev.evaluate
    out = path.open("w", encoding="utf-8")

    def evaluate(search: Callable[..., Any], questions: Any, *args: Any, **kwargs: Any) -> Any:
        def recorded(query: str, **options: Any) -> Any:
            results = search(query, **options)
            rows = [dataclasses.asdict(r) for r in results]
            out.write(json.dumps({**options, "query": query, "results": rows}, default=str) + "\n")
            out.flush()
            return results

        return original(recorded, questions, *args, **kwargs)

    ev.evaluate = evaluate  # type: ignore[assignment]


def worker(vectors: Path, record: Path | None, argv: list[str]) -> int:
    """Run ``mdrag ARGV`` from the tree on PYTHONPATH, through the vector cache (and recording the searches)."""
    import mdrag

    tree = Path(os.environ["PYTHONPATH"].split(os.pathsep)[0]).resolve()
    if not Path(mdrag.__file__).resolve().is_relative_to(tree):
        raise SystemExit(f"mdrag came from {mdrag.__file__}, not from {tree}")
    _cache_embedders(VectorCache(vectors))
    if record is not None:
        _record_searches(record)
    from mdrag.frontends.cli import main

    return main(argv)


# -- the driver: worktrees, homes, index, eval, compare ----------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def worktree(work: Path, sha: str) -> Path:
    """The commit's throw-away worktree (made once)."""
    tree = work / sha
    if not tree.exists():
        _git("worktree", "add", "--detach", str(tree), sha)
    return tree


def home_for(work: Path, tag: str) -> Path:
    """A fresh MDRAG_HOME for one commit and store, its model folder linked to one folder of the model's files
    (written by the first run that needs them)."""
    models = work / "models"
    models.mkdir(parents=True, exist_ok=True)
    home = work / "homes" / tag
    (home / "cache").mkdir(parents=True, exist_ok=True)
    if not (home / "cache" / "models").exists():
        (home / "cache" / "models").symlink_to(models)
    return home


def run_mdrag(tree: Path, home: Path, work: Path, argv: list[str], log: Path, record: Path | None = None) -> str:
    """``mdrag ARGV`` of the commit in ``tree`` (niced, through the vector cache); its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MDRAG_", "MARKDOWN_QA_"))}
    env.update(MDRAG_HOME=str(home), PYTHONPATH=str(tree), HF_HUB_OFFLINE="1")
    cmd = ["nice", "-n", "10", sys.executable, str(Path(__file__).resolve()), "--worker", str(work / "vectors.sqlite")]
    if record is not None:
        cmd += ["--record", str(record)]
    with log.open("a", encoding="utf-8") as err:
        err.write(f"$ mdrag {' '.join(argv)}\n")
        err.flush()
        p = subprocess.run([*cmd, "--", *argv], cwd=tree, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    if p.returncode != 0:
        raise SystemExit(f"mdrag {' '.join(argv)} at {tree.name} failed ({p.returncode}): see {log}")
    return p.stdout


def faiss_rows(home: Path, name: str) -> list[dict[str, Any]]:
    db = sqlite3.connect(f"file:{home / 'cache' / 'faiss' / name}.sqlite?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    return [dict(r) for r in db.execute("SELECT * FROM chunks ORDER BY n")]


def milvus_rows(home: Path, name: str) -> list[dict[str, Any]]:
    from pymilvus import MilvusClient

    client = MilvusClient(uri=str(home / "cache" / "milvus.db"))
    try:
        fields = [f["name"] for f in client.describe_collection(f"mdrag_{name}")["fields"] if f["name"] != "sparse"]
        client.load_collection(f"mdrag_{name}")
        rows = client.query(f"mdrag_{name}", filter='id != ""', output_fields=fields, limit=16384)
    finally:
        client.close()
    if len(rows) >= 16384:
        raise SystemExit(f"mdrag_{name} holds more rows than one query reads")
    return sorted(rows, key=lambda r: r["id"])


def _digest(value: Any) -> str:
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
    elif isinstance(value, bytes):
        data = value
    else:  # Milvus gives a vector as a list of floats: as float32 bytes, as FAISS keeps it
        import numpy as np

        data = np.asarray(value, dtype=np.float32).tobytes()
    return hashlib.sha256(data).hexdigest()


def chunk_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One JSON line per stored chunk: its place in full, its texts and vector as sha256, sorted by id."""
    out = []
    for row in sorted(rows, key=lambda r: r["id"]):
        plain = {k: row[k] for k in ("id", "rel_path", "level", "position", "page", "line_start", "line_end")}
        plain["content_hash"] = row["content_hash"]
        for k in ("headings", "metadata"):
            value = row[k]
            plain[k] = json.loads(value) if isinstance(value, str) else value
        for k in ("text", "context", "bm25_text", "vector"):
            plain[k] = _digest(row[k])
        out.append(json.dumps(plain, sort_keys=True))
    return out


def corpus_folder(work: Path, name: str, folder: Path) -> Path:
    """The folder indexed for a corpus: its own, or for ``MADE`` the one benchmarks/precision.py makes from
    ../shared/data under ``work`` (the same files every benchmark indexes for it)."""
    if folder != MADE:
        return folder
    from precision import CORPORA as MADE_FROM
    from precision import DATA as SHARED
    from precision import documents

    return documents(name, work) if (SHARED / MADE_FROM[name][0]).exists() else SHARED / MADE_FROM[name][0]


def build_and_eval(
    work: Path, sha: str, store: str, groups: list[str], again: str = "", on: Path | None = None
) -> Path:
    """Index each corpus of ``groups`` and evaluate its sets at commit ``sha`` (what is not done yet).

    ``again`` names a second run of the same commit (its own home and outputs). With ``on`` (another run's home),
    nothing is indexed: the sets are evaluated on a copy of that home's indexes.
    """
    tree = worktree(work, sha)
    tag = f"{sha[:12]}-{store}{again}"
    home = home_for(work, tag)
    out = work / "out" / tag
    out.mkdir(parents=True, exist_ok=True)
    log = out / "stderr.log"
    for group in groups:
        for name, given, sets in GROUPS[group]:
            folder = corpus_folder(work, name, given)
            if not folder.is_dir():
                print(f"{tag}: {name}: no corpus at {folder}, its sets skipped: {', '.join(sets)}", flush=True)
                continue
            rows = out / f"{name}.rows.jsonl"
            to_eval = [qa for qa in sets if not (out / f"{qa}.json").exists()]
            if to_eval and not (home / "cache" / "manifests" / f"{name}.json").exists():
                rows.unlink(missing_ok=True)  # an earlier run's outputs, its index gone: built again
            if not rows.exists():
                if on is not None:
                    shutil.copytree(on, home, symlinks=True, dirs_exist_ok=True, ignore=MODEL_LINK)
                else:
                    argv = ["index", str(folder), "--index", name, "--store", store, "-q"]
                    (out / f"{name}.index.txt").write_text(run_mdrag(tree, home, work, argv, log), encoding="utf-8")
                # in a process of its own: Milvus Lite's server ends with it, and lets the next command open the file
                cmd = [sys.executable, str(Path(__file__).resolve()), "--rows", store, str(home), name, str(rows)]
                subprocess.run(cmd, check=True)
            for qa in to_eval:
                argv = ["eval", str(SETS / f"{qa}.jsonl"), "--index", name, "--store", store, "--mode", "all", "--json"]
                result = run_mdrag(tree, home, work, argv, log, record=out / f"{qa}.searches.jsonl")
                (out / f"{qa}.json").write_text(result, encoding="utf-8")
            print(f"{tag}: {name} done", flush=True)
    return out


def first_difference(a: list[str], b: list[str]) -> str:
    """'identical', or where two lists of lines part first."""
    if a == b:
        return "identical"
    for n, (x, y) in enumerate(zip(a, b, strict=False), 1):
        if x != y:
            return f"different at line {n}:\n  - {x[:600]}\n  + {y[:600]}"
    return f"different: {len(a)} lines against {len(b)}"


def _lines(path: Path, mode: str | None = None) -> list[str]:
    if not path.exists():
        return [f"(missing: {path})"]
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if mode is None or json.loads(line).get("mode") == mode]


def compare(work: Path, before: Path, after: Path, groups: list[str]) -> list[dict[str, str]]:
    """Per corpus and set: the stored chunks, the eval JSON and each mode's searches, identical or not."""
    table = []
    for group in groups:
        for name, given, sets in GROUPS[group]:
            if not corpus_folder(work, name, given).is_dir():
                table.append({"set": name, "part": "all", "result": "skipped: no corpus"})
                continue
            rows = first_difference(_lines(before / f"{name}.rows.jsonl"), _lines(after / f"{name}.rows.jsonl"))
            table.append({"set": name, "part": "rows", "result": rows})
            for qa in sets:
                table.append(
                    {
                        "set": qa,
                        "part": "eval",
                        "result": first_difference(_lines(before / f"{qa}.json"), _lines(after / f"{qa}.json")),
                    }
                )
                for mode in MODES:
                    a, b = (_lines(d / f"{qa}.searches.jsonl", mode) for d in (before, after))
                    table.append({"set": qa, "part": mode, "result": first_difference(a, b) + f" ({len(a)} searches)"})
    return table


def summary_table(paths: list[Path]) -> str:
    """A Markdown table of saved comparisons (``--json``): a row per set or corpus, a column per commit pair and store.

    A cell is "same" when every part compared (a corpus's stored chunks; a set's eval JSON and its searches in
    each mode) is byte-identical, else the parts that differ; then what the pair's ``--on-base`` comparison found
    and, for a second build (``--again``), what it found.
    """
    cells: dict[tuple[str, str, str], list[str]] = {}
    columns: list[str] = []
    order: list[str] = []
    for path in paths:
        saved = json.loads(path.read_text(encoding="utf-8"))
        how = saved.get("how", "built")
        column = f"{saved['base'][:7]}..{saved['tip'][:7]} {saved['store']}"
        if how == "again":
            column = f"{saved['base'][:7]} built twice, {saved['store']}"
        if column not in columns:
            columns.append(column)
        for row in saved["table"]:
            name = row["set"] if row["part"] != "rows" else f"{row['set']} (chunks)"
            if name not in order:
                order.append(name)
            differs = cells.setdefault((name, column, how), [])
            if not row["result"].startswith("identical"):
                differs.append(row["part"] if not row["result"].startswith("skipped") else "skipped")
    lines = ["| set | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name in order:
        row = []
        for c in columns:
            built = cells.get((name, c, "built"), cells.get((name, c, "again")))
            cell = "not run" if built is None else ", ".join(built) or "same"
            on_base = cells.get((name, c, "on-base"))
            if built and on_base is not None:
                cell += "; on the base's index: " + (", ".join(on_base) or "same")
            row.append(cell)
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--table":
        print(summary_table([Path(p) for p in sys.argv[2:]]))
        return
    if len(sys.argv) == 6 and sys.argv[1] == "--rows":
        store, home, name, out = sys.argv[2:]
        read = faiss_rows if store == "faiss" else milvus_rows
        Path(out).write_text("".join(line + "\n" for line in chunk_lines(read(Path(home), name))), encoding="utf-8")
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        wp = argparse.ArgumentParser()
        wp.add_argument("--worker", type=Path, required=True)
        wp.add_argument("--record", type=Path)
        wp.add_argument("argv", nargs=argparse.REMAINDER)
        w = wp.parse_args()
        raise SystemExit(worker(w.worker, w.record, [a for a in w.argv if a != "--"]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="the commit before the change")
    ap.add_argument("tip", help="the commit after it")
    ap.add_argument("--store", choices=("faiss", "milvus"), default="faiss")
    ap.add_argument("--sets", nargs="*", choices=list(GROUPS), default=list(GROUPS), help="groups of sets")
    ap.add_argument("--work", type=Path, default=Path("/tmp/i53e"), help="worktrees, homes, vectors and outputs")
    ap.add_argument("--json", type=Path, help="write the comparison here too")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--again", action="store_true", help="compare BASE with a second run of BASE (TIP unused)")
    how.add_argument(
        "--on-base", action="store_true", help="evaluate TIP on a copy of BASE's indexes (the search alone)"
    )
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    base, tip = _git("rev-parse", args.base), _git("rev-parse", args.tip)
    before = build_and_eval(args.work, base, args.store, args.sets)
    if args.again:
        after = build_and_eval(args.work, base, args.store, args.sets, again="-again")
    elif args.on_base:
        on = args.work / "homes" / before.name
        after = build_and_eval(args.work, tip, args.store, args.sets, again=f"-on-{base[:12]}", on=on)
    else:
        after = build_and_eval(args.work, tip, args.store, args.sets)
    dirs = [before, after]
    how = "again" if args.again else "on-base" if args.on_base else "built"
    table = compare(args.work, dirs[0], dirs[1], args.sets)
    for row in table:
        print(f"{base[:7]}..{tip[:7]} {args.store:6} {row['set']:22} {row['part']:6} {row['result']}")
    if args.json:
        args.json.write_text(
            json.dumps({"base": base, "tip": tip, "store": args.store, "how": how, "table": table}, indent=1)
        )


if __name__ == "__main__":
    main()
