"""Tables in chunks: how many chunks are only a table's header row, end with it, or hold rows without it.

Parses and chunks (as `mdrag index` does, with the default embedder's tokenizer and window; nothing
is embedded) the OpenTelemetry docs (Markdown) and the git HTML manual, and counts, per corpus:

- tables (table blocks of two rows or more), and those whose rows fall in more than one chunk;
- ``header_alone``: chunks whose text is only a table's header (its first row, and in Markdown its
  delimiter row ``| --- |``, whole or cut);
- ``header_ends``: chunks that end with a table's header, its rows in the next chunk (``header_alone``
  among them);
- ``rows_without_header``: chunks holding rows of a table but not its header row.

Lines are compared with runs of spaces and of dashes shortened, so a table written out compactly in a
chunk matches its padded source. Run it on another checkout's ``mdrag`` (``PYTHONPATH=...``) for a
baseline.

    python benchmarks/table_chunks.py [--json out.json] [--corpus otel|git-html ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

from common import ROOT

CORPORA = {
    "otel": (ROOT.parent / "shared" / "data" / "markdown_otel_docs", "*.md"),
    "git-html": (ROOT.parent / "corpora" / "git-doc-html", "*.html"),
}
_DELIMITER = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-*:?\s*)*\|?$")  # a Markdown table's delimiter row, or part of one
_EXAMPLES = 5


def _norm(line: str) -> str:
    return re.sub(r"-{3,}", "---", " ".join(line.split()))


def _lines(text: str) -> list[str]:
    return [n for n in (_norm(x) for x in text.split("\n")) if n]


def _header(rows: list[str]) -> list[str]:
    """A table's header lines: its first row, and its delimiter row when it has one."""
    return rows[:2] if len(rows) > 1 and _DELIMITER.match(rows[1]) else rows[:1]


def measure(folder: Path, pattern: str) -> dict:
    from mdrag.chunking import ChunkSettings, chunk_document
    from mdrag.config import load_config
    from mdrag.index import make_embedder
    from mdrag.parsers import parse_file

    config = load_config()
    embedder = make_embedder(config)
    settings = ChunkSettings.from_config(config)
    files = sorted(folder.rglob(pattern))
    counts = dict.fromkeys(("chunks", "tables", "tables_cut", "header_alone", "header_ends", "rows_without_header"), 0)
    examples: dict[str, list[str]] = {"header_alone": [], "header_ends": [], "rows_without_header": []}
    t = time.perf_counter()
    for path in files:
        rel = path.relative_to(folder).as_posix()
        try:
            doc = parse_file(path)
        except Exception:  # a file the parser skips is skipped by the indexer too
            continue
        chunks = chunk_document(doc, str(folder), rel, settings, embedder.count_tokens, embedder.max_tokens)
        counts["chunks"] += len(chunks)
        held = [(tuple(ch.heading_path), _lines(ch.text), ch) for ch in chunks]
        for section in doc.sections:
            for block in section.blocks:
                rows = _lines(block.text)
                if block.kind != "table" or len(rows) < 2:
                    continue
                counts["tables"] += 1
                head = _header(rows)
                body = set(rows[len(head) :])
                under = tuple(section.heading_path) or ((doc.title or "").strip(),)  # text before a first heading
                mine = [
                    (lines, ch)
                    for path, lines, ch in held
                    if path in (under, ()) and (head[0] in lines or body & set(lines))
                ]
                with_rows = [(lines, ch) for lines, ch in mine if body & set(lines)]
                counts["tables_cut"] += len(with_rows) > 1
                for lines, ch in mine:
                    kinds = []
                    if all(x == head[0] or _DELIMITER.match(x) for x in lines):
                        kinds.append("header_alone")
                    if head[0] in lines:
                        tail = lines[lines.index(head[0]) + 1 :]
                        if all(_DELIMITER.match(x) for x in tail):
                            kinds.append("header_ends")
                    elif body & set(lines):
                        kinds.append("rows_without_header")
                    for kind in kinds:
                        counts[kind] += 1
                        if len(examples[kind]) < _EXAMPLES:
                            examples[kind].append(f"{rel}:{ch.line_start} {ch.text[:80]!r}")
    return {**counts, "files": len(files), "seconds": round(time.perf_counter() - t, 1), "examples": examples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="only these (default: all found)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import mdrag

    out: dict = {"mdrag": str(Path(mdrag.__file__).parent), "corpora": {}}
    for name in args.corpus or CORPORA:
        folder, pattern = CORPORA[name]
        if not folder.is_dir():
            print(f"{name}: {folder} not found, skipped")
            continue
        f = out["corpora"][name] = measure(folder, pattern)
        print(
            f"{name}: {f['files']} files, {f['chunks']} chunks, {f['tables']} tables ({f['tables_cut']} cut); "
            f"header alone {f['header_alone']}, header ends a chunk {f['header_ends']}, "
            f"rows without their header {f['rows_without_header']}"
        )
        for kind, xs in f["examples"].items():
            for x in xs:
                print(f"    {kind}: {x}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
