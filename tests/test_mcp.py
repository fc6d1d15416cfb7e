"""The MCP server, driven by the MCP SDK's own client over a real stdio transport.

Each test starts ``python -c "from mdrag.frontends.mcp import run_stdio; run_stdio()"`` in a
project folder holding ``.knowledge/config.yaml``, as an assistant would, and
talks to it with ``mcp.ClientSession`` over ``mcp.client.stdio.stdio_client``.
One test writes raw bytes to the server's stdin (malformed JSON-RPC); the
refresh logic is also checked in process (``mcp.Client(server)``) with a small
deterministic embedder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client, types

import mdrag
from mdrag.frontends.mcp import KnowledgeTools
from mdrag.knowledge import MAX_KEYWORDS, KnowledgeBase
from mdrag.knowledge.docsets import docset_index, index_name, update_docset_index

ROOT = Path(__file__).resolve().parents[1]
SERVE = "from mdrag.frontends.mcp import run_stdio; run_stdio()"
TEMPLATE = (
    "Search for '{keywords}' in folder {local_path}. Use your normal text search tools to do this. "
    "If the search results don't help you, try to find '{generalized_keywords}'. "
    "If this still doesn't help, ask the user to rephrase it."
)
CONFIG = """\
docsets:
  - id: react
    name: React
    version: "18.2"
    aliases: [reactjs]
  - id: hugo
    name: Hugo
    version: "0.150"
    aliases: [gohugo]
"""


def make_project(tmp_path: Path, config: str | None = CONFIG) -> Path:
    project = tmp_path / "project"
    (project / ".knowledge").mkdir(parents=True)
    if config is not None:
        (project / ".knowledge" / "config.yaml").write_text(config, encoding="utf-8")
    return project


def react_docs(tmp_path: Path) -> tuple[KnowledgeBase, Path]:
    """A project whose react docset's folder holds two pages (hooks.md, state.md); its knowledge base and folder."""
    kb = KnowledgeBase(make_project(tmp_path))
    local = Path(kb.resolve("react").local_path)
    local.mkdir(parents=True)
    (local / "hooks.md").write_text("# Hooks\n\nuseEffect runs after render.\n\n## Cleanup\n\nReturn a function.\n")
    (local / "state.md").write_text("# State\n\nuseState keeps a value between renders.\n")
    return kb, local


def server_env(home: Path) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}


@asynccontextmanager
async def connect(cwd: Path, home: Path, errlog: Path) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with a new server process."""
    params = StdioServerParameters(command=sys.executable, args=["-c", SERVE], cwd=cwd, env=server_env(home))
    with open(errlog, "a", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def ok(result: types.CallToolResult) -> str:
    assert not result.is_error, text(result)
    return text(result)


def error(result: types.CallToolResult) -> str:
    assert result.is_error, text(result)
    return text(result)


async def docsets(session: ClientSession) -> dict[str, dict[str, Any]]:
    listed = json.loads(ok(await session.call_tool("list_docsets", {})))
    return {d["id"]: d for d in listed["docsets"]}


@pytest.mark.anyio
async def test_tools_listed_with_schemas(tmp_path: Path, mdrag_home: Path) -> None:
    project = make_project(tmp_path)
    with anyio.fail_after(60):
        async with connect(project, mdrag_home, tmp_path / "err.log") as s:
            assert s.server_info is not None
            assert (s.server_info.name, s.server_info.version) == ("agentic-knowledge", mdrag.__version__)
            tools = {t.name: t for t in (await s.list_tools()).tools}
    assert set(tools) == {"search_docs", "list_docsets", "search", "get", "multi_get", "status"}
    for t in tools.values():
        assert t.description and len(t.description) > 80
        assert t.input_schema["type"] == "object"
    sd = tools["search_docs"].input_schema
    assert sd["required"] == ["docset", "keywords", "generalized_keywords"]
    assert sd["properties"]["docset"]["type"] == "string"
    for key in ("keywords", "generalized_keywords"):
        prop = sd["properties"][key]
        assert (prop["type"], prop["items"]["type"], prop["minItems"]) == ("array", "string", 1)
        assert prop["maxItems"] == MAX_KEYWORDS
        assert prop["description"]
    assert "list_docsets" in tools["search_docs"].description and "grep" in tools["search_docs"].description
    assert "first" in tools["list_docsets"].description
    sq = tools["search"].input_schema
    assert sq["required"] == ["query"]
    assert (sq["properties"]["k"]["type"], sq["properties"]["k"]["default"]) == ("integer", 5)
    assert "search_docs" in tools["search"].description


@pytest.mark.anyio
async def test_list_docsets_and_search_docs_text(tmp_path: Path, mdrag_home: Path) -> None:
    project = make_project(tmp_path)
    with anyio.fail_after(60):
        async with connect(project, mdrag_home, tmp_path / "err.log") as s:
            listed = await docsets(s)
            react = listed["react"]
            args = {"docset": "react", "keywords": ["useEffect", "cleanup"], "generalized_keywords": ["hooks"]}
            instructions = ok(await s.call_tool("search_docs", args))
            by_alias = ok(await s.call_tool("search_docs", {**args, "docset": "reactjs"}))
    assert set(listed) == {"react", "hugo"}
    assert (react["name"], react["version"], react["aliases"]) == ("React", "18.2", ["reactjs"])
    local = react["local_path"]
    assert local.endswith("/react-18.2/") and "\\" not in local and Path(local).is_absolute()
    assert Path(local).resolve() == (project / ".knowledge" / "docs" / "react-18.2").resolve()
    assert instructions == TEMPLATE.format(
        keywords="useEffect, cleanup", local_path=local, generalized_keywords="hooks"
    )
    assert by_alias == instructions


@pytest.mark.anyio
async def test_no_docsets_is_an_empty_list(tmp_path: Path, mdrag_home: Path) -> None:
    project = make_project(tmp_path, "docsets: []\n")
    with anyio.fail_after(60):
        async with connect(project, mdrag_home, tmp_path / "err.log") as s:
            assert json.loads(ok(await s.call_tool("list_docsets", {}))) == {"docsets": []}
            found = json.loads(ok(await s.call_tool("search", {"query": "anything"})))
    assert found["results"] == []


@pytest.mark.anyio
async def test_errors_are_tool_errors(tmp_path: Path, mdrag_home: Path) -> None:
    project = make_project(tmp_path)
    good = {"docset": "react", "keywords": ["hooks"], "generalized_keywords": ["state"]}
    with anyio.fail_after(60):
        async with connect(project, mdrag_home, tmp_path / "err.log") as s:
            unknown = error(await s.call_tool("search_docs", {**good, "docset": "vue"}))
            bad_chars = error(await s.call_tool("search_docs", {**good, "docset": "../../etc/passwd"}))
            empty = error(await s.call_tool("search_docs", {**good, "keywords": []}))
            blank = error(await s.call_tool("search_docs", {**good, "keywords": [""]}))
            many = error(await s.call_tool("search_docs", {**good, "keywords": [f"k{i}" for i in range(1000)]}))
            not_strings = error(await s.call_tool("search_docs", {**good, "keywords": [1, 2]}))
            missing = error(await s.call_tool("search_docs", {"docset": "react", "keywords": ["x"]}))
            bad_k = error(await s.call_tool("search", {"query": "x", "docset": "react", "k": 0}))
            no_folder = error(await s.call_tool("search", {"query": "x", "docset": "react"}))
            search_unknown = error(await s.call_tool("search", {"query": "x", "docset": "vue"}))
            with pytest.raises(MCPError) as exc_info:
                await s.call_tool("no_such_tool", {})
            # the session still works after every error
            assert "react" in await docsets(s)
    assert "vue" in unknown and "react" in unknown and "hugo" in unknown
    assert "react" in search_unknown and "hugo" in search_unknown
    assert "../../etc/passwd" in bad_chars
    assert "keyword" in empty.lower() and "keyword" in blank.lower()
    assert "keyword" in many.lower()
    assert "keywords" in not_strings and "array of strings" in not_strings
    assert "generalized_keywords" in missing
    assert "'k'" in bad_k
    assert "Create it and put the documentation there" in no_folder and "react-18.2" in no_folder
    assert exc_info.value.code == types.METHOD_NOT_FOUND == -32601
    assert "no_such_tool" in exc_info.value.message and "search_docs" in exc_info.value.message


def test_malformed_json_rpc_gets_a_parse_error(tmp_path: Path, mdrag_home: Path) -> None:
    project = make_project(tmp_path)
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": types.LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    lines = [
        b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list"',  # cut short: not JSON
        b"\xff\xfe not even text",
        b'{"hello": "world"}',  # JSON, but not JSON-RPC
        json.dumps(initialize).encode(),
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}',
        b'{"jsonrpc": "2.0", "id": 3, "method": "ping"}',
        # JSON, but a string in it is not UTF-8: refused, not read with U+FFFD in place of the bytes
        b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", '
        b'"params": {"name": "list_docsets", "arguments": {"x": "\xff"}}}',
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=project,
        env={**os.environ, **server_env(mdrag_home)},
    )
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(b"\n".join(lines) + b"\n")
        proc.stdin.flush()
        replies = [json.loads(proc.stdout.readline()) for _ in range(7)]  # the server keeps going
        proc.stdin.close()
        assert proc.wait() == 0  # and stops at the end of its input
        stderr = proc.stderr.read()
    finally:
        watchdog.cancel()
        proc.kill()
    errors = [r for r in replies if r.get("id") is None]
    assert [e["error"]["code"] for e in errors] == [-32700, -32700, -32600, -32700]
    assert all(e["jsonrpc"] == "2.0" and "Parse error" in e["error"]["message"] for e in errors[:2])
    assert "not UTF-8" in errors[3]["error"]["message"] and 4 not in {r.get("id") for r in replies}
    by_id = {r["id"]: r for r in replies if r.get("id") is not None}
    assert by_id[1]["result"]["serverInfo"]["name"] == "agentic-knowledge"
    assert by_id[2]["error"]["code"] == -32601
    assert by_id[3]["result"] == {}
    assert b"Parse error" in stderr  # logged on stderr; stdout holds only the protocol


@pytest.mark.anyio
async def test_config_changes_are_picked_up(tmp_path: Path, mdrag_home: Path) -> None:
    project = make_project(tmp_path)
    config = project / ".knowledge" / "config.yaml"
    with anyio.fail_after(60):
        async with connect(project, mdrag_home, tmp_path / "err.log") as s:
            assert set(await docsets(s)) == {"react", "hugo"}
            config.write_text(CONFIG + '  - id: vue\n    name: Vue\n    version: "3.4"\n', encoding="utf-8")
            assert set(await docsets(s)) == {"react", "hugo", "vue"}
            args = {"docset": "vue", "keywords": ["ref"], "generalized_keywords": ["reactivity"]}
            assert "/vue-3.4/" in ok(await s.call_tool("search_docs", args))
            config.write_text("docsets: [\n  - id: broken\n", encoding="utf-8")
            broken = error(await s.call_tool("list_docsets", {}))
            config.write_text(CONFIG, encoding="utf-8")
            assert set(await docsets(s)) == {"react", "hugo"}
    assert "line" in broken.lower()


@pytest.mark.anyio
async def test_no_config_is_a_tool_error(tmp_path: Path, mdrag_home: Path) -> None:
    project = make_project(tmp_path, config=None)
    args = {"docset": "react", "keywords": ["hooks"], "generalized_keywords": ["state"]}
    with anyio.fail_after(60):
        async with connect(project, mdrag_home, tmp_path / "err.log") as s:
            listed = error(await s.call_tool("list_docsets", {}))
            instructions = error(await s.call_tool("search_docs", args))
            found = error(await s.call_tool("search", {"query": "hooks"}))
            # a config created while the server runs is used by the next call
            (project / ".knowledge" / "config.yaml").write_text(CONFIG, encoding="utf-8")
            assert "react" in await docsets(s)
    for message in (listed, instructions, found):
        assert ".knowledge/config.yaml" in message


def test_index_names(tmp_path: Path) -> None:
    """Each docset has its own index: ids that differ only in punctuation or case no longer share one,
    nor does one id in two projects (each project's update took the other's folder out)."""
    ids = ["react-dom", "react.dom", "react_dom", "React_dom", "x" * 64, "x" * 63 + "y", "1st"]
    project, other = tmp_path / "project", tmp_path / "other"
    names = [index_name(i, project) for i in ids]
    assert len(set(names)) == len(ids), names
    assert names[0].startswith("docset_react_dom_") and len(names[0]) == len("docset_react_dom_") + 8
    assert index_name("react-dom", project) == names[0]  # stable: the same docset finds its index again
    assert index_name("react-dom", tmp_path / "." / "project") == names[0]  # the folder, however written
    assert index_name("react-dom", other) != names[0]
    from mdrag.config import load_config

    for name in names:
        assert len(name) <= 64
        load_config({"index": name})  # accepted by mdrag's index-name rule


# -- search over mdrag's index ---------------------------------------------------


def copy_hugo_subset(shared_data: Path, dest: Path) -> list[str]:
    """~40 Hugo pages: the template pages (with templates/shortcode.md), the shortcodes, some content pages."""
    src = shared_data / "markdown_hugo_docs" / "content" / "en"
    picked = sorted(src.glob("templates/*.md")) + sorted(src.glob("shortcodes/*.md"))
    cm = sorted(src.glob("content-management/*.md"))
    picked += [p for p in cm if p.name == "shortcodes.md"] + [p for p in cm if p.name != "shortcodes.md"][:13]
    for p in picked:
        target = dest / p.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, target)
    return [p.relative_to(src).as_posix() for p in picked]


async def search_when_indexed(session: ClientSession, args: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """Call `search` until the docset's index is built: its answer, and the answers before (indexing in progress)."""
    waiting = []
    while True:
        found = json.loads(ok(await session.call_tool("search", args)))
        if "indexing" not in found and "partial" not in found:  # built whole
            return found, waiting
        waiting.append(found)
        await anyio.sleep(0.5)


@pytest.mark.slow
@pytest.mark.anyio
async def test_search_hugo_docs(tmp_path: Path, mdrag_home: Path, shared_data: Path) -> None:
    project = make_project(tmp_path)
    question = {"query": "How do I create a custom shortcode?", "docset": "hugo", "k": 5}
    err = tmp_path / "err.log"
    with anyio.fail_after(600):
        async with connect(project, mdrag_home, err) as s:
            local = Path((await docsets(s))["hugo"]["local_path"])
            files = copy_hugo_subset(shared_data, local)
            assert len(files) == 40 and "templates/shortcode.md" in files
            first, waiting = await search_when_indexed(s, question)
            second = json.loads(ok(await s.call_tool("search", question)))
            # search over every docset: react has no folder and is skipped, hugo answers
            everywhere = json.loads(ok(await s.call_tool("search", {"query": question["query"]})))
            # search_docs now adds ranked sections from the open index, once the lookup fits its budget or,
            # on a busy machine, once the lookup it started in the background is done (asked again until then)
            args = {"docset": "hugo", "keywords": ["custom shortcode"], "generalized_keywords": ["templates"]}
            for _ in range(1200):
                hinted = ok(await s.call_tool("search_docs", args))
                if "Top sections" in hinted:
                    break
                await anyio.sleep(0.1)
        # a new server process on the same home searches the index at once, and re-embeds nothing
        async with connect(project, mdrag_home, err) as s:
            restarted = json.loads(ok(await s.call_tool("search", question)))
            while restarted["indexed"]["hugo"]["age_s"] is None:  # until the update started with the server ends
                await anyio.sleep(0.2)
                restarted = json.loads(ok(await s.call_tool("search", question)))

    for answer in waiting:  # the index was being built: no results yet, and a pointer to search_docs; or, once
        # its first step is committed, results from the files indexed so far, saying so
        if "partial" in answer:
            assert answer["partial"]["hugo"]["files_total"] == 40 and "results come from those" in answer["note"]
        else:
            assert answer["results"] == [] and "search_docs" in answer["note"]
            assert answer["indexing"]["hugo"]["files_total"] in (None, 40)
    ranked = [r["rel_path"] for r in first["results"]]
    assert "templates/shortcode.md" in ranked, ranked
    assert len(ranked) == 5
    top = first["results"][0]
    assert set(top) >= {"docset", "text", "path", "rel_path", "heading_path", "score"}
    assert top["docset"] == "hugo" and Path(top["path"]).is_file() and top["text"]
    scores = [r["score"] for r in first["results"]]
    assert scores == sorted(scores, reverse=True) and all(0 < x <= 1 for x in scores)

    state = first["indexed"]["hugo"]
    assert state["index"] == index_name("hugo", project)
    assert state["chunks_embedded"] == state["chunks_total"] > 40
    # A new docset index goes to the default store, FAISS (store.backend auto), not the Milvus docsets file.
    assert (mdrag_home / "cache" / "faiss" / f"{state['index']}.sqlite").is_file()
    assert not (mdrag_home / "cache" / "docsets.db").exists()

    assert second["results"] == first["results"]
    assert second["indexed"]["hugo"]["refreshed"] is False

    assert [r["rel_path"] for r in everywhere["results"]] == ranked
    assert "react" in everywhere["skipped"] and "Create it" in everywhere["skipped"]["react"]

    expected = TEMPLATE.format(
        keywords="custom shortcode", local_path=f"{local.as_posix()}/", generalized_keywords="templates"
    )
    assert hinted.startswith(expected + "\n\nTop sections from mdrag's index:\n"), hinted
    lines = hinted.split("Top sections from mdrag's index:\n")[1].splitlines()
    assert 1 <= len(lines) <= 3 and all(line.startswith("- ") and "(score 0." in line for line in lines)
    assert any("shortcode" in line for line in lines)

    again = restarted["indexed"]["hugo"]
    assert again["chunks_embedded"] == 0 and again["chunks_total"] == state["chunks_total"]
    assert [r["rel_path"] for r in restarted["results"]] == ranked


# -- in process: refresh and incremental updates --------------------------------


@pytest.mark.anyio
async def test_refresh_embeds_only_changes(
    tmp_path: Path, mdrag_home: Path, hash_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With refresh_interval=0 every `search` refreshes the index (and waits for it): only changed files
    are embedded."""
    from mcp import Client

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.0\n")  # the user's settings apply
    kb, local = react_docs(tmp_path)
    question = {"query": "useEffect cleanup function", "docset": "react"}
    tools = KnowledgeTools(kb, refresh_interval=0, search_wait=60)
    with anyio.fail_after(120):
        async with Client(tools.server()) as client:
            first = json.loads(ok(await client.call_tool("search", question)))
            unchanged = json.loads(ok(await client.call_tool("search", question)))
            (local / "state.md").write_text("# State\n\nuseState keeps a value. useReducer for complex state.\n")
            changed = json.loads(ok(await client.call_tool("search", question)))
            (local / "state.md").unlink()
            removed = json.loads(ok(await client.call_tool("search", question)))
            shutil.rmtree(local)
            gone = error(await client.call_tool("search", question))
    assert first["indexed"]["react"]["chunks_total"] == 3 and first["indexed"]["react"]["refreshed"]
    assert first["results"][0]["rel_path"] == "hooks.md"
    assert unchanged["indexed"]["react"]["refreshed"] and unchanged["indexed"]["react"]["chunks_embedded"] == 0
    assert changed["indexed"]["react"]["chunks_embedded"] == 1
    assert removed["indexed"]["react"]["chunks_deleted"] == 1 and removed["indexed"]["react"]["chunks_total"] == 2
    assert "no files yet" in gone and "Create it" in gone
    chunks = [t for t in hash_embedder.embedded if t != question["query"]]
    assert len(chunks) == 3 + 1  # the first index, then the changed file only


@pytest.mark.anyio
async def test_search_answers_while_the_index_is_built(
    tmp_path: Path, mdrag_home: Path, hash_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server starts building a new docset's index when it starts: `search` does not wait for it but
    says how far it is (files done / total) and points to search_docs; a client that asks for progress
    notifications gets them while `search` waits; once built, `search` gives results."""
    from mcp import Client

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    embedding, go_on = threading.Event(), threading.Event()
    embed_batch = hash_embedder.embed_batch

    def held(texts: list[str]) -> Any:  # the build waits here until the test lets it go on
        embedding.set()
        go_on.wait(60)
        return embed_batch(texts)

    monkeypatch.setattr(hash_embedder, "embed_batch", held)
    (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.0\n")
    kb, local = react_docs(tmp_path)
    question = {"query": "useEffect cleanup function", "docset": "react"}
    tools = KnowledgeTools(kb, search_wait=0)
    notified: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        notified.append((done, total, message))
        go_on.set()

    with anyio.fail_after(120):
        async with Client(tools.server()) as client:
            assert await anyio.to_thread.run_sync(embedding.wait, 60)  # started with the server, now held
            building = json.loads(ok(await client.call_tool("search", question)))
            everywhere = json.loads(ok(await client.call_tool("search", {"query": question["query"]})))
            tools.search_wait = 60
            found = json.loads(ok(await client.call_tool("search", question, progress_callback=progress)))
    assert building["results"] == [] and building["indexed"] == {}
    assert building["indexing"] == {"react": {"state": "indexing", "files_done": 0, "files_total": 2}}
    note = building["note"]
    assert "indexing in progress" in note and "react (0 of 2 files done)" in note and "search_docs" in note
    assert everywhere["indexing"] == building["indexing"] and "hugo" in everywhere["skipped"]
    assert notified and notified[0][:2] == (0, 2) and "0 of 2 files" in str(notified[0][2])
    assert "indexing" not in found and found["results"][0]["rel_path"] == "hooks.md"
    assert found["indexed"]["react"]["refreshed"] and found["indexed"]["react"]["chunks_total"] == 3


def test_docsets_with_one_slug_have_their_own_index(
    tmp_path: Path, mdrag_home: Path, hash_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """react-dom and react.dom shared the index docset_react_dom, so each update deleted the other's
    chunks. Each now has its own; the shared old index gives each docset's folder up as that docset is
    indexed anew, and is deleted when it holds nothing else."""
    from mdrag.config import load_config
    from mdrag.index import Index
    from mdrag.knowledge.docsets import docset_index, update_docset_index

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.0\n")
    project = make_project(tmp_path, "docsets:\n  - id: react-dom\n  - id: react.dom\n")
    kb = KnowledgeBase(project)
    dash, dot = kb.resolve("react-dom"), kb.resolve("react.dom")
    for ds, word in ((dash, "hydration"), (dot, "portals")):
        Path(ds.local_path).mkdir(parents=True)
        (Path(ds.local_path) / f"{word}.md").write_text(f"# {word.title()}\n\nAll about {word}.\n")
    folders = [str(Path(d.local_path).resolve()) for d in (dash, dot)]
    # As an earlier mdrag left it: in the Milvus Lite docsets file, its store then.
    docsets_db = str(mdrag_home / "cache" / "docsets.db")
    old = load_config({"index": "docset_react_dom", "milvus_uri": docsets_db, "store.backend": "milvus"})
    with Index(old) as shared:
        shared.update(folders)

    with docset_index("react-dom", project) as index:
        update_docset_index(index, dash)
    with Index(old) as shared:
        assert shared.folders == [folders[1]]  # react.dom's folder stays until it has its own index
    with docset_index("react.dom", project) as index:
        update_docset_index(index, dot)
        assert not old.manifest_path("docset_react_dom").exists()
    with Index(old) as shared:
        assert not shared.store.open(create=False), "its collection was dropped from the docsets file"
    for ds, word in ((dash, "hydration"), (dot, "portals")):
        with docset_index(ds.id, project) as index:
            assert index.folders == [str(Path(ds.local_path).resolve())]
            assert [r.rel_path for r in index.search(f"all about {word}", k=5)] == [f"{word}.md"]


@pytest.mark.anyio
async def test_knowledge_commands_build_the_index(
    tmp_path: Path, mdrag_home: Path, hash_embedder: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`mdrag knowledge init` and `refresh` build and update the docset's index, so the MCP server
    searches it from its first call."""
    from mcp import Client

    from mdrag.frontends.cli import main

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.0\n")
    project = make_project(tmp_path)
    monkeypatch.chdir(project)
    kb = KnowledgeBase(project)
    local = Path(kb.resolve("react").local_path)
    local.mkdir(parents=True)
    (local / "hooks.md").write_text("# Hooks\n\nuseEffect runs after render.\n")
    assert main(["knowledge", "init", "react", "-q"]) == 0
    init_out = capsys.readouterr().out
    (local / "state.md").write_text("# State\n\nuseState keeps a value between renders.\n")
    assert main(["knowledge", "refresh", "--json"]) == 0  # every docset: hugo has no folder yet
    refreshed = json.loads(capsys.readouterr().out)
    assert main(["knowledge", "init", "hugo"]) == 1  # named: its missing folder is an error
    missing = capsys.readouterr().out

    assert f"react: index {index_name('react', project)}: files 1 added, 0 changed, 0 removed" in init_out
    react = refreshed["react"]
    assert react["sources"] == [] and react["index"]["added"] == 1 and react["index"]["chunks_total"] == 2
    assert "index" not in refreshed["hugo"] and "Create it and put the documentation there" in refreshed["hugo"]["note"]
    assert "hugo: index not updated: docset 'hugo' has no files yet" in missing
    assert "knowledge init hugo" not in missing, "no web sources: `init` (which just failed) cannot fill the folder"
    tools = KnowledgeTools(kb, search_wait=0)
    with anyio.fail_after(60):
        async with Client(tools.server()) as client:
            found = json.loads(ok(await client.call_tool("search", {"query": "useState value", "docset": "react"})))
    assert "indexing" not in found and found["results"][0]["rel_path"] == "state.md"


@pytest.mark.anyio
async def test_the_store_flag_picks_the_docsets_backend(tmp_path: Path, mdrag_home: Path) -> None:
    """`mdrag knowledge init --store faiss` builds the docset's index in the FAISS store, and
    `mdrag mcp --store faiss` searches it there (the flag applies, not only MDRAG_STORE)."""
    kb, local = react_docs(tmp_path)
    project = kb.config().root.parent
    cli = [sys.executable, "-m", "mdrag"]
    env = {**os.environ, **server_env(mdrag_home)}
    init = subprocess.run(
        [*cli, "knowledge", "init", "react", "-q", "--store", "faiss"],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    name = index_name("react", project)
    assert (mdrag_home / "cache" / "faiss" / f"{name}.sqlite").is_file()
    assert not (mdrag_home / "cache" / "docsets.db").exists(), "nothing went to the Milvus docsets store"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mdrag", "mcp", "--store", "faiss"], cwd=project, env=server_env(mdrag_home)
    )
    with anyio.fail_after(300), open(tmp_path / "err.log", "a", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            found = json.loads(ok(await session.call_tool("search", {"query": "useEffect cleanup", "docset": "react"})))
    assert "indexing" not in found, "the index init built is searched at once"
    assert found["indexed"]["react"]["chunks_total"] == 3 and found["results"][0]["rel_path"] == "hooks.md"
    assert not (mdrag_home / "cache" / "docsets.db").exists()


@pytest.mark.anyio
async def test_tool_arguments_checked_in_process(tmp_path: Path, mdrag_home: Path) -> None:
    """Called in process (no JSON on the way), the tools check their arguments themselves and say what
    to change: lone surrogates, a 5,000-digit k, a query over 4,000 characters."""
    from mcp import Client

    tools = KnowledgeTools(KnowledgeBase(make_project(tmp_path)))
    good = {"docset": "react", "keywords": ["hooks"], "generalized_keywords": ["state"]}
    with anyio.fail_after(60):
        async with Client(tools.server()) as client:
            keyword = error(await client.call_tool("search_docs", {**good, "keywords": ["a", "\udc00"]}))
            query = error(await client.call_tool("search", {"query": "hooks \ud800", "docset": "react"}))
            huge_k = error(await client.call_tool("search", {"query": "hooks", "k": 10**5000}))
            long_query = error(await client.call_tool("search", {"query": "q" * 4001, "docset": "react"}))
            at_limit = error(await client.call_tool("search", {"query": "q" * 4000, "docset": "react"}))
    assert "'keywords[1]'" in keyword and "surrogate" in keyword and '"\\udc00"' in keyword
    assert "'query'" in query and "surrogate" in query
    assert "'k'" in huge_k and "5001 digits" in huge_k and "set_int_max_str_digits" not in huge_k
    assert "too long (4001 characters, at most 4000)" in long_query
    assert "no files yet" in at_limit  # 4,000 characters are taken: the docset's missing folder is the error


@pytest.mark.anyio
async def test_an_embedding_api_that_does_not_answer_does_not_hold_the_server(
    tmp_path: Path, mdrag_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API embedder learns its vectors' size from its first answer. While the API gives none, the
    server still starts and answers list_docsets, search_docs and (with an "indexing" note) search:
    making a docset's index asks the embedder nothing."""
    from mcp import Client

    from tests.conftest import HashEmbedder

    asked, released, answered_api = threading.Event(), threading.Event(), threading.Event()

    class Unanswered(HashEmbedder):
        @property
        def dimension(self) -> int:  # as OpenAIEmbedder: one request, which here gets no answer until released
            asked.set()
            released.wait(60)
            answered_api.set()
            return super().dimension

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: Unanswered())
    kb, _ = react_docs(tmp_path)
    tools = KnowledgeTools(kb, search_wait=0)
    answered: dict[str, Any] = {}
    hint = {"docset": "react", "keywords": ["hooks"], "generalized_keywords": ["react"]}
    with anyio.fail_after(120):
        async with Client(tools.server()) as client:
            try:  # released before the server stops: it waits for its update
                answered["list"] = json.loads(ok(await client.call_tool("list_docsets", {})))
                answered["hint"] = ok(await client.call_tool("search_docs", hint))
                answered["search"] = json.loads(ok(await client.call_tool("search", {"query": "x", "docset": "react"})))
                answered["still_held"] = not answered_api.is_set()
            finally:
                released.set()
    assert answered["still_held"] and asked.is_set(), "the update asked the API, in its worker thread"
    assert [d["id"] for d in answered["list"]["docsets"]] == ["react", "hugo"]
    assert "Search for 'hooks'" in answered["hint"]
    assert answered["search"]["results"] == [] and answered["search"]["indexing"]["react"]["state"] == "scanning"


@pytest.mark.anyio
async def test_search_results_from_a_pdf_name_their_page(
    tmp_path: Path, mdrag_home: Path, shared_data: Path, hash_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An assistant cites a PDF by its page, as `mdrag search` does; text files keep their lines."""
    from mcp import Client

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.0\n")
    kb, local = react_docs(tmp_path)
    pdf = shared_data / "pdf_pypdf_resources" / "resources" / "Seige_of_Vicksburg_Sample_OCR.pdf"
    shutil.copy(pdf, local / pdf.name)
    tools = KnowledgeTools(kb, search_wait=60)
    with anyio.fail_after(120):
        async with Client(tools.server()) as client:
            found = json.loads(ok(await client.call_tool("search", {"query": "Vicksburg", "docset": "react", "k": 40})))
    pages = [r for r in found["results"] if r["rel_path"] == pdf.name]
    texts = [r for r in found["results"] if r["rel_path"].endswith(".md")]
    assert pages and all(isinstance(r["page"], int) and r["page"] >= 1 for r in pages)
    assert "line_start" not in pages[0]
    assert texts and all("page" not in r and r["line_start"] >= 1 for r in texts)
    from pypdf import PdfReader

    words = set(PdfReader(pdf).pages[pages[0]["page"] - 1].extract_text().split())
    assert set(pages[0]["text"].split()[-5:]) <= words, "the text is on the page named"


@pytest.mark.anyio
async def test_no_result_above_the_threshold_says_so(
    tmp_path: Path, mdrag_home: Path, hash_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty list alone reads as "the docs say nothing": the answer says that nothing passed the
    threshold and what to try; a search with results has no note."""
    from mcp import Client

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    kb, _ = react_docs(tmp_path)
    tools = KnowledgeTools(kb, search_wait=60)
    with anyio.fail_after(120):
        async with Client(tools.server()) as client:
            empty = json.loads(ok(await client.call_tool("search", {"query": "zebra xylophone", "docset": "react"})))
            found = json.loads(ok(await client.call_tool("search", {"query": "useEffect runs", "docset": "react"})))
    assert empty["results"] == [] and "indexing" not in empty
    assert "search.threshold 0.35" in empty["note"] and "search_docs" in empty["note"]
    assert found["results"] and "note" not in found


@pytest.mark.anyio
async def test_no_result_while_an_update_runs_says_indexing_not_nothing_found(
    tmp_path: Path, mdrag_home: Path, hash_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index that answers while an update of it runs (a new file, or another server's first build):
    an empty list is not final, so the answer says that indexing is in progress."""
    from mcp import Client

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    kb, local = react_docs(tmp_path)
    tools = KnowledgeTools(kb, refresh_interval=0, search_wait=60)
    go_on = threading.Event()
    embed_batch = hash_embedder.embed_batch

    def held(texts: list[str]) -> Any:  # the new file's chunk waits here; queries go through
        if any("Effects" in t for t in texts):
            go_on.wait(60)
        return embed_batch(texts)

    question = {"query": "zorblax transmogrifier", "docset": "react"}
    with anyio.fail_after(120):
        async with Client(tools.server()) as client:
            try:
                ok(await client.call_tool("search", question))  # the first build, finished
                (local / "effects.md").write_text("# Effects\n\nThe zorblax transmogrifier.\n")
                monkeypatch.setattr(hash_embedder, "embed_batch", held)
                tools.search_wait = 0
                during = json.loads(ok(await client.call_tool("search", question)))  # the update cannot end yet
            finally:
                go_on.set()
            tools.search_wait = 60
            after = json.loads(ok(await client.call_tool("search", question)))
    assert during["results"] == [] and during["indexing"]["react"]["state"] in ("scanning", "indexing")
    assert "indexing in progress" in during["note"] and "threshold" not in during["note"]
    assert [r["rel_path"] for r in after["results"]][:1] == ["effects.md"]


@pytest.mark.anyio
async def test_search_of_a_docset_that_another_process_builds_says_how_far_that_build_is(
    tmp_path: Path, mdrag_home: Path, hash_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mdrag knowledge init` builds a docset's index while the server runs (the server's own update waits
    for it): `search` answers "indexing", with that build's files done and to do, not an error; once the
    build is committed, its results."""
    from mcp import Client

    from mdrag.index import Index
    from tests.conftest import HashEmbedder

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.0\n")
    kb, _ = react_docs(tmp_path)
    ds = kb.resolve("react")
    embedding, go_on = threading.Event(), threading.Event()
    embed_batch = hash_embedder.embed_batch

    def held(texts: list[str]) -> Any:  # the other build waits here until the test lets it go on
        embedding.set()
        go_on.wait(60)
        return embed_batch(texts)

    other = Index(docset_index("react", kb.config().root.parent).config, embedder=HashEmbedder())
    other.embedder.embed_batch = held  # type: ignore[method-assign]
    build = threading.Thread(target=update_docset_index, args=(other, ds))
    build.start()
    question = {"query": "useEffect cleanup function", "docset": "react"}
    tools = KnowledgeTools(kb, search_wait=0)
    try:
        assert await anyio.to_thread.run_sync(embedding.wait, 60)
        with anyio.fail_after(120):
            async with Client(tools.server()) as client:
                try:
                    during = json.loads(ok(await client.call_tool("search", question)))
                finally:
                    go_on.set()
                await anyio.to_thread.run_sync(build.join, 60)
                tools.search_wait = 60
                after = json.loads(ok(await client.call_tool("search", question)))
    finally:
        go_on.set()
        build.join(60)
        other.close()
    assert during["results"] == [] and during["indexing"] == {
        "react": {"state": "indexing", "files_done": 0, "files_total": 2}
    }, during
    assert "react (0 of 2 files done)" in during["note"]
    assert "indexing" not in after and after["results"][0]["rel_path"] == "hooks.md"
