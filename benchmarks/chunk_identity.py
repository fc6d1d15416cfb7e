"""Every chunk of real corpora as one line of JSON: compare two runs' outputs to check a change to chunking.

For each file of the corpora, parsed and chunked with the default settings
(without an embedder, and with the default model's token counter and window,
as ``mdrag index`` does), one line per chunk: file, position, id, content
hash, line span, heading path and the text's sha256. Run it before and after
a change and compare the files (``cmp``); the last line counts files and chunks.

    python benchmarks/chunk_identity.py --out before.jsonl [--corpus markdown_hugo_docs ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mdrag.chunking import ChunkSettings, chunk_document  # noqa: E402
from mdrag.config import load_config  # noqa: E402
from mdrag.embedding import make_embedder  # noqa: E402
from mdrag.errors import MdragError  # noqa: E402
from mdrag.parsers import parse_file, supported_extensions  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
CORPORA = ("markdown_hugo_docs", "markdown_otel_docs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--corpus", nargs="*", default=list(CORPORA), help="folders under shared/data")
    args = ap.parse_args()
    embedder = make_embedder(load_config())
    exts = set(supported_extensions())
    files = chunks = 0
    with args.out.open("w", encoding="utf-8") as out:
        for corpus in args.corpus:
            root = DATA / corpus
            for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in exts):
                rel = path.relative_to(root).as_posix()
                try:
                    doc = parse_file(path)
                except MdragError as exc:
                    out.write(json.dumps({"file": f"{corpus}/{rel}", "error": str(exc)}) + "\n")
                    continue
                files += 1
                for mode, kwargs in (
                    ("chars", {}),
                    ("window", {"count_tokens": embedder.count_tokens, "max_tokens": embedder.max_tokens}),
                    (
                        "tokens",
                        {
                            "settings": ChunkSettings(size=256, overlap=50, unit="tokens"),
                            "count_tokens": embedder.count_tokens,
                            "max_tokens": embedder.max_tokens,
                        },
                    ),
                ):
                    for c in chunk_document(doc, str(root), rel, **kwargs):  # type: ignore[arg-type]
                        chunks += 1
                        row = {
                            "file": f"{corpus}/{rel}",
                            "mode": mode,
                            "pos": c.position,
                            "id": c.id,
                            "hash": c.content_hash,
                            "lines": [c.line_start, c.line_end],
                            "path": c.heading_path,
                            "text": hashlib.sha256(c.text.encode("utf-8", "surrogatepass")).hexdigest(),
                        }
                        out.write(json.dumps(row) + "\n")
        out.write(json.dumps({"files": files, "chunks": chunks}) + "\n")
    print(f"{files} files, {chunks} chunks -> {args.out}")


if __name__ == "__main__":
    main()
