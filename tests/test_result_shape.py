"""One shape for a search result in every front end (mdrag.retrieval.shown.result_fields), its ``score`` the
one that ordered the list, and one wording for a search that found nothing: `mdrag search` (text and --json),
the WebSocket server (a real server on 127.0.0.1 and a real client) and MCP's ``search`` (the SDK's in-process
client over a docset of a project), the same folder of documents behind each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

from mdrag.config import load_config
from mdrag.frontends.cli import main
from mdrag.frontends.server import QAServer
from mdrag.knowledge import KnowledgeBase
from mdrag.retrieval.shown import no_results, result_fields
from mdrag.types import SearchResult
from tests.test_mcp import ok

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "docs"
# A hybrid search of examples/docs whose fused order is not its cosine order: the first result (BM25's first)
# has a lower cosine than the second (the dense list's first).
QUERY = "index only changed files"
NOTHING = "zebra crossing quantum chromodynamics"  # no passage of examples/docs reaches the threshold
INDEX = "shape"


def _result(**fields: Any) -> SearchResult:
    given: dict[str, Any] = {
        "text": "Run the installer.",
        "path": "/docs/a/guide.md",
        "rel_path": "guide.md",
        "score": 0.52,
        "heading_path": ["Guide", "Install"],
        "chunk_id": "c1",
        "line_start": 3,
        "line_end": 9,
        "rank_score": 0.91,
        "dense_rank": 2,
        "bm25_rank": 1,
    }
    return SearchResult(**{**given, **fields})


def test_a_result_shows_the_score_that_ordered_it_and_the_cosine_beside_it() -> None:
    fields = result_fields(_result(metadata={"links": ["b.md"], "backlinks": ["c.md"], "tags": ["x"]}))
    assert fields["score"] == 0.91 and fields["cosine"] == 0.52  # the fused score; before, score was the cosine
    assert fields["ref"] == "guide.md" and fields["url"] is None and fields["heading"] == "Guide > Install"
    assert (fields["line_start"], fields["line_end"], fields["page"]) == (3, 9, None)
    assert (fields["links"], fields["backlinks"]) == (["b.md"], ["c.md"])
    reranked = result_fields(_result(rerank_score=4.5), shared={"guide.md"})
    assert reranked["score"] == 4.5 and reranked["rank_score"] == 0.91  # the reranker's score ordered it
    assert reranked["ref"] == "/docs/a/guide.md"  # a relative path two folders share: get takes the absolute one
    assert result_fields(_result(rank_score=None))["score"] == 0.52  # no ranking score given: the cosine


def test_no_results_says_the_threshold_and_the_filters() -> None:
    assert "(search.threshold 0.35," in no_results(0.35) and "filters" not in no_results(0.35)
    assert no_results(0.4, filtered=True).startswith("no results: no passage of the files the filters let through")
    assert "threshold" not in no_results(0.0) and "threshold" not in no_results(None)


def _column(text: str) -> list[float]:
    """The score column of `mdrag search`'s text output."""
    return [float(line.split()[1]) for line in text.splitlines() if line[:4].strip().rstrip(".").isdigit()]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


async def _websocket(docs: Path, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    """The replies of a real `mdrag serve` (the CLI's index) to ``messages``, one at a time."""
    overrides = {"server.port": 0, "index": INDEX}
    server = QAServer(load_config(overrides), [docs], overrides=overrides)
    await server.start()
    replies = []
    try:
        with anyio.fail_after(300):
            await server.ready.wait()
            async with connect(server.url) as ws:
                assert json.loads(await ws.recv())["type"] == "status"
                for message in messages:
                    await ws.send(json.dumps(message))
                    replies.append(json.loads(await ws.recv()))
    finally:
        await server.stop()
    return replies


async def _mcp(project: Path, *calls: dict[str, Any]) -> list[dict[str, Any]]:
    """MCP ``search``'s answers to ``calls``, once the docset's index is built."""
    from mcp import Client

    from mdrag.frontends.mcp import KnowledgeTools

    answers = []
    with anyio.fail_after(300):
        async with Client(KnowledgeTools(KnowledgeBase(project)).server()) as client:
            for call in calls:
                found: dict[str, Any] = {"indexing": True}
                while (
                    "indexing" in found or "partial" in found or not found["indexed"]
                ):  # the first call starts the docset's index
                    found = json.loads(ok(await client.call_tool("search", call)))
                    await anyio.sleep(0.2)
                answers.append(found)
    return answers


def _decreasing(scores: list[float]) -> bool:
    return scores == sorted(scores, reverse=True)


@pytest.mark.slow
@pytest.mark.anyio
async def test_one_query_through_every_front_end_gives_the_same_result_in_the_order_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    docs = project / "docs"
    shutil.copytree(EXAMPLES, docs)
    (project / ".knowledge").mkdir()
    (project / ".knowledge" / "config.yaml").write_text("docsets:\n  - id: docs\n    local_path: ../docs\n")

    assert main(["index", str(docs), "--index", INDEX, "-q"]) == 0
    capsys.readouterr()
    cli = json.loads(_cli(capsys, "search", QUERY, "-k", "5", "--index", INDEX, "--json"))
    column = _column(_cli(capsys, "search", QUERY, "-k", "5", "--index", INDEX))
    cli_none = _cli(capsys, "search", NOTHING, "--index", INDEX)
    ws, ws_none = await _websocket(
        docs, {"type": "search", "query": QUERY, "k": 5}, {"type": "search", "query": NOTHING}
    )
    mcp, mcp_none = await _mcp(
        project, {"query": QUERY, "docset": "docs", "k": 5}, {"query": NOTHING, "docset": "docs"}
    )

    assert 3 <= len(cli) <= 5 and ws["type"] == "search_results"
    # one place per page by default (search.per_page 1), in every front end
    assert len({r["path"] for r in cli}) == len(cli) and len({r["path"] for r in ws["results"]}) == len(cli)
    cosines = [r["cosine"] for r in cli]
    assert not _decreasing(cosines), f"the fused order and the cosine order agree: {cosines}; pick another query"
    # The score each front end shows is the one that ordered its list (it was the cosine: out of order).
    assert _decreasing([r["score"] for r in cli]) and column == [round(r["score"], 3) for r in cli]
    assert _decreasing([r["score"] for r in ws["results"]]) and _decreasing([r["score"] for r in mcp["results"]])
    assert [r["score"] for r in cli] == [r["rank_score"] for r in cli]  # hybrid, no reranker: the fused score

    first, served, tool = cli[0], ws["results"][0], mcp["results"][0]
    assert served == first  # the WebSocket server sends what `mdrag search --json` prints, field by field
    assert set(first) >= {"ref", "url", "path", "rel_path", "heading", "heading_path", "page", "line_start"}
    assert set(first) >= {"line_end", "score", "cosine", "rank_score", "chunk_id", "links", "backlinks", "text"}
    assert tool["docset"] == "docs" and tool["ref"] == first["rel_path"] and Path(tool["path"]).is_file()
    assert {k: v for k, v in tool.items() if k != "docset"} == {k: first[k] for k in tool if k != "docset"}
    assert set(tool) >= {"text", "path", "ref", "heading_path", "score", "cosine", "line_start", "chunk_id"}
    # the docset's own index ranks as the CLI's (MCP merged its results by the cosine, out of the fused order)
    assert [r["chunk_id"] for r in mcp["results"]] == [r["chunk_id"] for r in cli]

    said = no_results(0.35)  # the default threshold, in one wording
    assert cli_none.startswith(said) and ws_none["results"] == [] and ws_none["note"] == said
    assert mcp_none["results"] == [] and mcp_none["note"].startswith(said) and "search_docs" in mcp_none["note"]
