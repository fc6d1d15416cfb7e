"""A real `mdrag serve` on part of the OpenTelemetry docs: citations that match `sources`, and `search`
options (mode, collapse) and an explicit `--server` honoured through the server.

The index is built once for the module (the default embedder); each test starts its own `mdrag serve`
process on it, and talks to it as a user would (WebSocket, `mdrag search --server`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.citations import ask_all, citation_problems, mdrag_env, prompt_sources, questions, serving
from mdrag.config import load_config
from mdrag.index import Index
from tests.conftest import SHARED_DATA
from tests.fake_llm import LLM

pytestmark = pytest.mark.slow  # the real model in a server process

REPO = Path(__file__).resolve().parents[1]
OTEL_DOCS = SHARED_DATA / "markdown_otel_docs" / "content" / "en" / "docs"
SUBSET = ("languages/sdk-configuration", "concepts", "collector/scaling.md", "collector/quick-start.md")


@pytest.fixture(scope="module")
def otel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(MDRAG_HOME, docs folder): a copy of part of the otel docs, indexed with the default embedder."""
    if not OTEL_DOCS.is_dir():
        pytest.skip(f"the OpenTelemetry docs are not at {OTEL_DOCS} (see shared/data/README.md)")
    base = tmp_path_factory.mktemp("otel")
    docs, home = base / "docs", base / "home"
    for rel in SUBSET:
        src, dst = OTEL_DOCS / rel, docs / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, dst) if src.is_dir() else shutil.copy(src, dst)
    home.mkdir()
    # A page's several sections each take a place (search.per_page 0, not the default 1): the answers cite several
    # passages of one file, whose numbering these tests read; and the server's rankings differ by collapse.
    (home / "config.yaml").write_text("search:\n  per_page: 0\n")
    with Index(load_config(home=home)) as index:
        index.update([docs])
    return home, docs


def _ask_all(url: str) -> list[tuple[str, str, list[str]]]:
    """(question, answer, sources) for every question of benchmarks/data/otel_citation_questions.txt."""
    qs = questions()
    return [(q, text, sources) for q, (text, sources) in zip(qs, ask_all(url, qs), strict=True)]


def test_extractive_and_llm_answers_cite_n_as_sources_n_minus_1(
    otel: tuple[Path, Path], llm: LLM, tmp_path: Path
) -> None:
    """Over 20 questions: each quote [n] of the extractive answer, and each source block [n] of the LLM's
    prompt, names sources[n-1]; every source is quoted, and numbers run 1, 2, ... once each."""
    home, docs = otel
    root = docs.resolve()
    with serving(docs, home, tmp_path / "extractive.log", wait_s=300) as url:
        extractive = _ask_all(url)
    answered = [(q, text, sources) for q, text, sources in extractive if sources]
    assert len(answered) >= 10, "most questions are about these pages: the check must see answers"
    for q, text, sources in answered:
        assert citation_problems(text, sources, root) == [], q
    # The example reported: five quotes from one file, under one number, and that file alone as the source.
    q, text, sources = extractive[0]
    assert q == "How do I configure the OTLP exporter endpoint?"
    assert sources == [str(root / "languages/sdk-configuration/otlp-exporter.md")] and text.count("\n[1] ") == 1

    with serving(docs, home, tmp_path / "llm.log", wait_s=300, MARKDOWN_QA_API_BASE_URL=llm.base_url) as url:
        with_llm = _ask_all(url)
    prompts = [r["body"]["messages"][-1]["content"] for r in llm.script.requests]
    assert len(prompts) == sum(bool(s) for _, _, s in with_llm) >= 10
    asked = iter(prompts)
    for q, text, sources in with_llm:
        if sources:
            prompt = next(asked)
            assert prompt.rstrip().endswith(q) and text == "Hello, world [1]."
            assert citation_problems(prompt_sources(prompt), sources, root) == [], q


def _search(home: Path, *argv: str) -> list[dict[str, object]]:
    p = subprocess.run(
        [sys.executable, "-m", "mdrag", "search", *argv, "--json"],
        env=mdrag_env(home),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return list(json.loads(p.stdout))


def test_search_mode_and_collapse_through_an_explicit_server(otel: tuple[Path, Path], tmp_path: Path) -> None:
    """`mdrag search --mode M --collapse C --server URL` from a home with no index: the server's ranking for
    that mode and collapse, equal to the local Index.search; `mdrag status --server URL` asks that server."""
    home, docs = otel
    query = "resource attributes"  # "resource detectors" ranks the same by collapse since tables keep their header
    with Index(load_config(home=home)) as index:
        local = {
            (mode, collapse): [r.chunk_id for r in index.search(query, mode=mode, collapse=collapse)]
            for mode in ("dense", "hybrid")
            for collapse in ("section", "none")
        }
    assert local["dense", "section"] != local["hybrid", "section"], "a query whose rankings differ by mode"
    assert local["dense", "section"] != local["dense", "none"], "a query whose rankings differ by collapse"
    elsewhere = tmp_path / "empty-home"  # no index, no config: only the server can answer
    elsewhere.mkdir()
    with serving(docs, home, tmp_path / "serve.log", wait_s=300) as url:
        for (mode, collapse), ids in local.items():
            found = _search(elsewhere, query, "--mode", mode, "--collapse", collapse, "--server", url)
            assert [r["chunk_id"] for r in found] == ids, (mode, collapse)
        p = subprocess.run(
            [sys.executable, "-m", "mdrag", "status", "--server", url, "--json"],
            env=mdrag_env(elsewhere),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
        status = json.loads(p.stdout)
        assert status["served_by"] == url and status["state"] == "ready" and status["chunks"] > 0
    assert not any(elsewhere.iterdir()), "the local index was not opened"
