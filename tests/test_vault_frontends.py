"""Notes vaults through the front ends: the WebSocket server (search results with links, answers without raw
``[[links]]``) and the MCP server (search, get by a note's name with its links and backlinks), on notes of the
Obsidian Tasks documentation vault (../shared/data, copied into a temporary folder)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from mdrag.config import load_config
from mdrag.knowledge import KnowledgeBase
from tests.conftest import SHARED_DATA, HashEmbedder
from tests.fake_llm import LLM
from tests.test_mcp import error, ok
from tests.test_server import ask, opened, recv, serving

VAULT = SHARED_DATA / "notes_vault_obsidian-tasks"
NOTES = ("Queries/Backlinks.md", "Queries/Layout.md", "How To/How to style backlinks.md", "Advanced/Styling.md")
pytestmark = pytest.mark.skipif(not VAULT.is_dir(), reason=f"the shared vault is absent: {VAULT}")


def _copy(to: Path) -> Path:
    """The four notes that link to one another, under their vault folders."""
    for rel in NOTES:
        (to / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(VAULT / rel, to / rel)
    return to


def test_the_server_returns_links_and_answers_without_raw_links(tmp_path: Path, llm: LLM) -> None:
    root = _copy(tmp_path / "vault")
    assert "[[" in (root / "Queries/Backlinks.md").read_text(encoding="utf-8")  # the note as written links
    llm.script.tokens = ["Use ", "the layout option [1]."]

    async def scenario() -> None:
        config = load_config(
            {"index": "v" + os.urandom(4).hex(), "server.port": 0, "llm.base_url": llm.base_url, "llm.api_key": "k"}
            | {"search.per_page": 0}  # every chunk of the four notes, the ones whose links are read among them
        )
        async with serving(config, [root], HashEmbedder()) as server:
            ws = await opened(server)
            await ws.send(json.dumps({"type": "search", "query": "hide backlinks", "k": 10, "threshold": 0}))
            reply: dict[str, Any] = await recv(ws)
            assert reply["type"] == "search_results"
            by_path = {r["ref"]: r for r in reply["results"]}
            backlinks = by_path["Queries/Backlinks.md"]["metadata"]
            assert "How To/How to style backlinks.md" in backlinks["backlinks"]
            assert any(r["metadata"].get("links") for r in reply["results"])
            assert not any("[[" in r["text"] for r in reply["results"])
            await ws.send(json.dumps({"type": "search", "query": "x", "filters": {"tags": ["css"]}, "threshold": 0}))
            tagged = await recv(ws)
            assert {r["ref"] for r in tagged["results"]} == {"How To/How to style backlinks.md", "Advanced/Styling.md"}
            _, sources, _ = await ask(ws, "How do I hide the backlinks?")
            assert sources
            prompt = llm.script.requests[0]["body"]["messages"][-1]["content"]
            assert "Backlink" in prompt and "[[" not in prompt  # the sources the LLM reads: links as their text
            await ws.close()

    asyncio.run(scenario())


@pytest.mark.anyio
async def test_mcp_search_and_get_a_note_by_name_with_its_links(tmp_path: Path, mdrag_home: Path) -> None:
    from mcp import Client

    from mdrag.frontends.mcp import KnowledgeTools

    project = tmp_path / "project"
    (project / ".knowledge").mkdir(parents=True)
    (project / ".knowledge" / "config.yaml").write_text("docsets:\n  - id: notes\n    local_path: ../vault\n")
    _copy(project / "vault")
    tools = KnowledgeTools(KnowledgeBase(project))
    with anyio.fail_after(300):
        async with Client(tools.server()) as client:
            found: dict[str, Any] = {}
            # the first call starts the docset's index: asked until it is built whole and its links are read
            while not any(
                "How To/How to style backlinks.md" in r.get("backlinks", []) for r in found.get("results", [])
            ):
                found = json.loads(ok(await client.call_tool("search", {"query": "backlinks", "docset": "notes"})))
                await anyio.sleep(0.2)
            assert "partial" not in found and "indexing" not in found
            got = json.loads(ok(await client.call_tool("get", {"docset": "notes", "ref": "Backlink", "links": True})))
            plain = json.loads(ok(await client.call_tool("get", {"docset": "notes", "ref": "Backlinks"})))
            refused = error(await client.call_tool("get", {"docset": "notes", "ref": "Backlinks", "links": "yes"}))
    [doc] = got["documents"]  # by an alias of Queries/Backlinks.md
    assert doc["rel_path"] == "Queries/Backlinks.md" and "[[" in doc["text"]  # get reads the file as it is
    assert {"note": "Layout", "rel_path": "Queries/Layout.md"} in doc["links"]
    assert "How To/How to style backlinks.md" in doc["backlinks"]
    assert "links" not in plain["documents"][0]  # only when asked for
    assert "'links' must be true or false" in refused
