"""Website sources: pages per second crawled from a loopback site, and the time to a first searchable page.

Serves ../shared/data/html_readability_pages (131 saved pages, their folder listings linking them) with
http.server on 127.0.0.1, crawls it with no politeness delay (what the crawler itself costs; a real site
gets the default 0.5 s between requests), then times `mdrag knowledge init` of a docset whose website source
keeps one page: crawl, parse, embed and index, until a search can find it.

    python benchmarks/web_crawl.py [--max-pages 2000] [--model-cache ~/.mdrag/cache]
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from common import ROOT, seed_model_cache

sys.path.insert(0, str(ROOT))
from mdrag.knowledge.web import WebsiteCrawler  # noqa: E402

PAGES = ROOT.parent / "shared" / "data" / "html_readability_pages"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-pages", type=int, default=2000)
    ap.add_argument("--model-cache", type=Path, help="an MDRAG_HOME/cache holding the ONNX model export")
    args = ap.parse_args()
    if not PAGES.is_dir():
        sys.exit(f"shared data not found at {PAGES}")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(PAGES.parent)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    site = f"http://127.0.0.1:{server.server_address[1]}/{PAGES.name}/"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            crawler = WebsiteCrawler(site, allow_local=True, delay=0, max_pages=args.max_pages)
            result = crawler.crawl(Path(tmp) / "crawl")
            seconds = time.perf_counter() - t
            size = sum(f.stat().st_size for f in (Path(tmp) / "crawl").rglob("*") if f.is_file())
            print(
                f"crawl: {len(result.pages)} pages kept, {len(result.skipped)} skipped, {size / 2**20:.1f} MiB "
                f"in {seconds:.2f} s: {len(result.pages) / seconds:.0f} pages/s, {size / 2**20 / seconds:.1f} MiB/s"
            )
            t = time.perf_counter()
            again = crawler.crawl(Path(tmp) / "crawl", result.pages)
            seconds = time.perf_counter() - t
            print(
                f"refresh (nothing changed): {again.fetched} requests (conditional for kept pages), "
                f"{len(again.changed)} pages rewritten in {seconds:.2f} s"
            )

            home, project = Path(tmp) / "home", Path(tmp) / "project"
            seed_model_cache(home, args.model_cache)
            (project / ".knowledge").mkdir(parents=True)
            (project / ".knowledge" / "config.yaml").write_text(
                "allow_local_web: true\ndocsets:\n  - id: pages\n    web_sources:\n"
                f"      - type: website\n        url: {site}001/source.html\n        max_pages: 1\n"
            )
            env = {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
            t = time.perf_counter()
            argv = [sys.executable, "-m", "mdrag", "knowledge", "init", "pages", "-q"]
            subprocess.run(argv, cwd=project, env=env, check=True, capture_output=True, text=True)
            seconds = time.perf_counter() - t
            print(f"first searchable page (`mdrag knowledge init`, one page, process start included): {seconds:.2f} s")
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
