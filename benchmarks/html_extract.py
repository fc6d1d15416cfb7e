"""HTML main-content extraction: each extractor's text against the article Readability extracts.

On ../shared/data/html_readability_pages (Mozilla Readability's test pages:
``source.html`` is the page, ``expected.html`` the article), for each
extractor and page: token recall (the share of the expected article's word
tokens found in the extractor's text, counted as a multiset), token
precision (the share of the extractor's tokens that are the article's) and
their F1, averaged over the pages; a page with empty output counts 0 for
all three. Tokens: ``\\w+`` runs, lower-cased. Timing: milliseconds per
page, the pages taken in turn by every extractor (load on the machine hits
them alike), one untimed pass first.

Extractors: mdrag's HTML parser reading the whole page (``main_content=False``,
the parser before the extraction: the baseline), mdrag's parser as it is
(readability-lxml picks the article, mdrag keeps its headings, lists,
tables and code), and, where installed, readability-lxml's own summary,
trafilatura and jusText (English stop list) as plain text. mdrag's text is
every section's heading and blocks, as a chunk shows them.

Note: the expected articles are Readability.js's output, so readability-lxml
(a Python port of an older Readability) has a head start here.

    python benchmarks/html_extract.py [--json benchmarks/out/html_extract.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bs4 import BeautifulSoup  # noqa: E402
from render import command, fint, fnum, not_measured, prose, table  # noqa: E402
from steps import Benchmark, Data, Section, Step  # noqa: E402

from mdrag.parsers.html import parse  # noqa: E402
from mdrag.types import Document  # noqa: E402

PAGES = ROOT.parent / "shared" / "data" / "html_readability_pages"
BASELINE = "mdrag, whole page (before)"
TOKEN = re.compile(r"\w+")


def _mdrag_text(doc: Document) -> str:
    """What mdrag indexes of a page: each section's heading, then its blocks."""
    parts = []
    for section in doc.sections:
        if section.level and section.heading_path:
            parts.append(section.heading_path[-1])
        parts.append(section.text)
    return "\n\n".join(parts)


def _html_text(html: str | bytes) -> str:
    return BeautifulSoup(html, "html.parser").get_text(" ")


def extractors() -> dict[str, tuple[Callable[[bytes], str], str | None]]:
    """Name -> (function from page bytes to text, the package version it measures)."""
    found: dict[str, tuple[Callable[[bytes], str], str | None]] = {
        BASELINE: (lambda page: _mdrag_text(parse(page, "page.html", main_content=False)), None),
        "mdrag + readability-lxml (now)": (lambda page: _mdrag_text(parse(page, "page.html")), None),
    }
    try:
        from readability import Document as Readability

        found["readability-lxml, its summary"] = (
            lambda page: _html_text(Readability(page).summary(html_partial=True)),
            version("readability-lxml"),
        )
    except ImportError:
        pass
    try:
        import trafilatura

        found["trafilatura"] = (
            lambda page: trafilatura.extract(page.decode("utf-8", "replace")) or "",
            version("trafilatura"),
        )
    except ImportError:
        pass
    try:
        import justext

        stop = justext.get_stoplist("English")
        found["jusText (English stop list)"] = (
            lambda page: "\n".join(p.text for p in justext.justext(page, stop) if not p.is_boilerplate),
            version("justext"),
        )
    except (ImportError, PackageNotFoundError):
        pass
    return found


def scores(expected: str, got: str) -> tuple[float, float, float]:
    """Token recall, precision and F1 of ``got`` against ``expected`` (multisets of tokens)."""
    want, have = Counter(TOKEN.findall(expected.lower())), Counter(TOKEN.findall(got.lower()))
    common = sum((want & have).values())
    recall = common / sum(want.values()) if want else 0.0
    precision = common / sum(have.values()) if have else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    return recall, precision, f1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("readability").setLevel(logging.CRITICAL)  # its own summary logs failures with tracebacks
    if not PAGES.is_dir():
        sys.exit(f"{PAGES} not found: the readability test pages are in ../shared/data (see its README.md)")
    pages = sorted(p.parent for p in PAGES.glob("*/source.html"))
    found = extractors()
    expected = {p.name: _html_text((p / "expected.html").read_bytes()) for p in pages}
    sources = {p.name: (p / "source.html").read_bytes() for p in pages}
    per: dict[str, list[tuple[float, float, float]]] = {name: [] for name in found}
    seconds = dict.fromkeys(found, 0.0)
    empty = dict.fromkeys(found, 0)
    for extract, _ in found.values():  # untimed: imports, first-use set-up
        extract(sources[pages[0].name])
    for page in pages:
        for name, (extract, _) in found.items():
            t = time.perf_counter()
            try:
                text = extract(sources[page.name])
            except Exception as exc:  # an extractor that fails on a page gives nothing for it
                logging.warning("%s failed on %s: %s", name, page.name, exc)
                text = ""
            seconds[name] += time.perf_counter() - t
            empty[name] += not text.strip()
            per[name].append(scores(expected[page.name], text))
    results: dict[str, Any] = {}
    base_ms = 1000 * seconds[BASELINE] / len(pages)
    for name, (_, package_version) in found.items():
        ms = 1000 * seconds[name] / len(pages)
        results[name] = {
            "recall": statistics.mean(r for r, _, _ in per[name]),
            "precision": statistics.mean(p for _, p, _ in per[name]),
            "f1": statistics.mean(f for _, _, f in per[name]),
            "empty_pages": empty[name],
            "ms_per_page": ms,
            "ms_ratio_to_baseline": ms / base_ms,
            "version": package_version,
        }
        r = results[name]
        print(
            f"{name:34s} recall {r['recall']:.3f}  precision {r['precision']:.3f}  F1 {r['f1']:.3f}  "
            f"empty {r['empty_pages']:3d}  {ms:6.1f} ms/page ({r['ms_ratio_to_baseline']:.2f}x baseline)"
        )
    out = {"pages": len(pages), "baseline": BASELINE, "extractors": results}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))


# -- in the report (benchmarks/report.py) --------------------------------------


def section_html_extract(data: Data) -> list[str]:
    hx = data.get("html_extract")
    lines = ["## HTML extraction", ""]
    lines += prose("html_extract", cmd_html_extract=command(data, "html_extract"))
    if not hx:
        return lines + [not_measured("html_extract", data), ""]
    rows = []
    for name, r in (hx.get("extractors") or {}).items():
        label = name + (f" {r['version']}" if r.get("version") else "")
        rows.append(
            [
                label,
                fnum(r.get("recall"), 3),
                fnum(r.get("precision"), 3),
                fnum(r.get("f1"), 3),
                fint(r.get("empty_pages")),
                f"{fnum(r.get('ms_per_page'), 1)} ({fnum(r.get('ms_ratio_to_baseline'), 2)}x)",
            ]
        )
    lines += table(["extractor", "mean recall", "mean precision", "F1", "pages with empty output", "ms/page"], rows)
    return lines + ["", f"{fint(hx.get('pages'))} pages.", ""]


BENCHMARK = Benchmark(
    steps=(Step("html_extract", 200, (), ("pages", "baseline", "extractors")),),
    sections=(Section("HTML extraction", 150, section_html_extract),),
)


if __name__ == "__main__":
    main()
