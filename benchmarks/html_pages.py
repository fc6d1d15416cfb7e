"""HTML pages as the index gets them: repeated blocks in chunks, the biggest page, and the text kept per page.

For every ``*.html`` page under each corpus folder given (default: ../shared/data/html_readability_pages and
every other HTML page under ../shared/data; add ../corpora/git-doc-html after
``sh benchmarks/fetch_html_manual.sh``), the page is parsed and chunked as `mdrag index` does (default chunk
settings, sizes in characters: no embedder is loaded; the blocks the folder's pages repeat left out as the
index run leaves them, mdrag.ingest.boilerplate, and the passages a few pages repeat kept on one of them,
mdrag.ingest.passages, unless ``--keep-repeated``), and four figures are measured:

- boilerplate: the share of chunks made only of blocks (paragraphs, lines) that occur on more than 5% of the
  corpus's pages (and on at least 3): taglines, footers, "last modified" lines, crumbs;
- biggest page: the page holding the most chunks, and its share of them;
- kept: per page, the share of its visible text (the whole page as the parser reads it with
  ``main_content=False``: menus in ``nav``, ``footer`` and hidden parts already out, and less the repeated
  blocks above) whose word tokens reach its chunks (tokens as multisets, ``\\w+`` lower-cased), or a passage
  another page keeps for it (named with it in results); the mean, the median and the pages under 80%;
- NAME lines: of the pages with a section headed NAME (an asciidoc manual page's one-line summary, "git-var -
  Show a Git logical variable"), those whose NAME line is in their chunks.

With ``--under SHARE``, every page keeping less than SHARE of its visible text is listed with the share kept and
what was left out: its largest runs of visible lines whose words do not reach its chunks (words, first words).

    python benchmarks/html_pages.py [FOLDER ...] [--json OUT] [--keep-repeated] [--under SHARE]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mdrag.chunking import chunk_document  # noqa: E402
from mdrag.ingest import boilerplate  # noqa: E402
from mdrag.ingest.manifest import PagePrints  # noqa: E402
from mdrag.parsers.html import parse  # noqa: E402
from mdrag.types import Block, Document, Section  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
TOKEN = re.compile(r"\w+")
SHARE, AT_LEAST = 0.05, 3  # a block on more than 5% of the pages, and on 3 at least, is boilerplate
LOW = 0.8


def _key(line: str) -> str:
    """A block as compared across pages: digits (dates, counts) do not make it another block."""
    return re.sub(r"\d+", "0", " ".join(line.split()).lower())


def _one(block: Block) -> Document:
    return Document("", [Section([], 1, [block])])


def _lines(doc: Document) -> list[str]:
    out = []
    for section in doc.sections:
        if section.level and section.heading_path:
            out.append(section.heading_path[-1])
        out.extend(line for line in section.text.splitlines() if line.strip())
    return out


def dropped_runs(lines: list[str], got: Counter, largest: int = 3) -> list[tuple[int, str]]:
    """The largest runs of consecutive lines whose words mostly do not reach the chunks: (words, first words).

    ``got`` is the multiset of the page's chunk tokens; each line takes its tokens from it in page order, and a
    line that finds under half of its tokens there counts as left out."""
    left = Counter(got)
    runs: list[tuple[int, str]] = []
    size, start = 0, ""
    for line in lines + [""]:
        tokens = TOKEN.findall(line.lower())
        found = Counter(tokens) & left
        left -= found
        if tokens and sum(found.values()) < len(tokens) / 2:
            size, start = size + len(tokens), start or " ".join(line.split()[:12])
        elif size or not line:
            if size:
                runs.append((size, start))
            size, start = 0, ""
    return sorted(runs, key=lambda r: -r[0])[:largest]


def measure(folder: Path, keep_repeated: bool = False, low: float = LOW) -> dict:
    """The figures of one corpus folder (see the module docstring)."""
    pages = sorted(folder.rglob("*.html"))
    if folder.resolve() == SHARED.resolve():  # the HTML under ../shared/data outside the readability test pages
        pages = [p for p in pages if "html_readability_pages" not in p.parts]
    whole: dict[str, list[str]] = {}
    docs: dict[str, Document] = {}
    names: dict[str, str] = {}  # a manual page's NAME line ("git-var - Show a Git logical variable")
    for page in pages:
        rel = page.relative_to(folder).as_posix()
        data = page.read_bytes()
        everything = parse(data, rel, main_content=False)
        whole[rel] = _lines(everything)
        if name := next((s.text for s in everything.sections if s.heading_path[-1:] == ["NAME"]), ""):
            names[rel] = " ".join(name.split())
        docs[rel] = parse(data, rel)
    prints = {
        rel: PagePrints(
            str(folder),
            rel,
            0,
            0,
            boilerplate.fingerprints(d),
            boilerplate.passage_prints(d),
            boilerplate.own_prints(d),
        )
        for rel, d in docs.items()
    }
    drops, keepers = ({}, {}) if keep_repeated else boilerplate.decide(prints)
    chunks: dict[str, list[str]] = {}
    for rel, doc in docs.items():
        doc = boilerplate.strip(doc, drops.get(rel, ()))
        chunks[rel] = [c.text for c in chunk_document(doc, str(folder), rel)]
    seen = Counter(k for lines in whole.values() for k in {_key(line) for line in lines})
    limit = max(AT_LEAST - 1, SHARE * len(pages))
    repeated = {k for k, n in seen.items() if n > limit}
    all_chunks = [(rel, text) for rel, texts in chunks.items() for text in texts]

    def is_boilerplate(text: str) -> bool:
        lines = [_key(line) for line in text.splitlines() if line.strip() and not line.startswith("```")]
        return bool(lines) and all(k in repeated for k in lines)

    boiler = [(rel, text) for rel, text in all_chunks if is_boilerplate(text)]
    # the words of the passages left out of a page for another that keeps them (and names this page with them)
    left_for = {(rel, fp) for held in keepers.values() for fp, holders in held.items() for rel in holders}
    elsewhere: dict[str, Counter] = {rel: Counter() for rel in docs}
    for rel, doc in docs.items():
        for block in (b for section in doc.sections for b in section.blocks):
            if any((rel, fp) in left_for for fp in boilerplate.fingerprints(_one(block))):
                elsewhere[rel].update(TOKEN.findall(block.text.lower()))
    per_page = Counter(rel for rel, _ in all_chunks)
    kept: dict[str, float] = {}
    left_out: dict[str, list[tuple[int, str]]] = {}
    for rel, lines in whole.items():
        visible = Counter(t for line in lines if _key(line) not in repeated for t in TOKEN.findall(line.lower()))
        if sum(visible.values()) < 20:
            continue  # a page with (almost) no text of its own
        got = Counter(t for text in chunks[rel] for t in TOKEN.findall(text.lower())) + elsewhere[rel]
        kept[rel] = sum((visible & got).values()) / sum(visible.values())
        if kept[rel] < low:
            left_out[rel] = dropped_runs([line for line in lines if _key(line) not in repeated], got)
    biggest = per_page.most_common(1)[0] if per_page else ("", 0)
    name_lost = sorted(rel for rel, name in names.items() if name not in " ".join(" ".join(chunks[rel]).split()))
    return {
        "folder": str(folder),
        "pages": len(pages),
        "chunks": len(all_chunks),
        "pages_with_blocks_left_out": len(drops),
        "blocks_left_out": sum(len(d) for d in drops.values()),
        "passages_left_out": sum(len(pages) for held in keepers.values() for pages in held.values()),
        "passage_keepers": len(keepers),
        "boilerplate_chunks": len(boiler),
        "boilerplate_share": round(len(boiler) / max(1, len(all_chunks)), 4),
        "boilerplate_examples": Counter(text[:80] for _, text in boiler).most_common(5),
        "biggest_page": biggest[0],
        "biggest_share": round(biggest[1] / max(1, len(all_chunks)), 4),
        "kept_mean": round(statistics.mean(kept.values()), 4) if kept else None,
        "kept_median": round(statistics.median(kept.values()), 4) if kept else None,
        "kept_low": sorted(((rel, round(v, 3)) for rel, v in kept.items() if v < low), key=lambda x: x[1]),
        "kept": {rel: round(v, 4) for rel, v in sorted(kept.items())},
        "left_out": left_out,
        "name_pages": len(names),
        "name_lost": name_lost,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*", type=Path, default=[SHARED / "html_readability_pages", SHARED])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep-repeated", action="store_true", help="chunk as before the repeated blocks were left out")
    ap.add_argument("--under", type=float, metavar="SHARE", help="list every page keeping less than SHARE of its text")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    low = LOW if args.under is None else args.under
    results = [measure(folder, args.keep_repeated, low) for folder in args.folders]
    for r in results:
        print(
            f"{r['folder']}: {r['pages']} pages, {r['chunks']} chunks ({r['blocks_left_out']} repeated blocks left "
            f"out of {r['pages_with_blocks_left_out']} pages; {r['passages_left_out']} passages left out, kept on "
            f"{r['passage_keepers']} pages); boilerplate {r['boilerplate_chunks']} "
            f"({r['boilerplate_share']:.2%}); biggest page {r['biggest_page']} {r['biggest_share']:.2%}; "
            f"kept mean {r['kept_mean']}, median {r['kept_median']}, {len(r['kept_low'])} pages under {low:.0%}"
        )
        for rel, v in r["kept_low"]:
            print(f"    {v:.3f} {rel}")
            if args.under is not None:
                for words, start in r["left_out"][rel]:
                    print(f"        left out, {words} words: {start!r}")
        for text, n in r["boilerplate_examples"]:
            print(f"    boilerplate x{n}: {text!r}")
        if r["name_pages"]:
            kept_names = r["name_pages"] - len(r["name_lost"])
            print(f"    NAME line in the chunks of {kept_names} of {r['name_pages']} pages with a NAME section")
            for rel in r["name_lost"]:
                print(f"        lost: {rel}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
