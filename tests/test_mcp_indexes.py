"""`mdrag mcp --index NAME`: the user's own indexes over MCP, from any working directory, kept current while
the server runs; the search filters, the status tool, the documents as resources, and the client
configurations of docs/mcp.md started exactly as written.

The servers are real processes started as an assistant starts them (working directory ``/``), driven by the
official SDK's client over stdio; the indexes are built with the real model by `mdrag index`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client, types

from tests.test_mcp import ROOT, error, ok, react_docs

MDRAG = [sys.executable, "-m", "mdrag"]
WAIT = 300  # seconds a test may take to start a server and build a small index on a busy machine


def env(home: Path) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}


def notes_folder(tmp_path: Path) -> Path:
    """A small notes folder: two guides (one tagged), a reference page."""
    notes = tmp_path / "notes"
    (notes / "guides").mkdir(parents=True)
    (notes / "reference").mkdir()
    (notes / "guides" / "backup.md").write_text(
        "---\ntags: [ops, storage]\n---\n# Backups\n\nRun restic every night to back up the photo library "
        "to the NAS.\n\n## Restore\n\nRestore a snapshot with restic restore latest.\n",
        encoding="utf-8",
    )
    (notes / "guides" / "garden.md").write_text(
        "# Garden\n\nWater the tomatoes every morning in July; the basil needs shade after noon.\n",
        encoding="utf-8",
    )
    (notes / "reference" / "backup-settings.md").write_text(
        "# Backup settings\n\nThe restic repository lives on the NAS; the password is in the keychain.\n",
        encoding="utf-8",
    )
    return notes


def index(folder: Path, name: str, home: Path) -> None:
    """`mdrag index FOLDER --index NAME`, as a user runs it."""
    done = subprocess.run(
        [*MDRAG, "index", str(folder), "--index", name, "-q"], env=env(home), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


@asynccontextmanager
async def serving(
    args: Sequence[str],
    home: Path,
    errlog: Path,
    command: str = sys.executable,
    extra_env: dict[str, str] | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with `mdrag mcp ARGS` started in ``/``."""
    argv = list(args) if command != sys.executable else ["-m", "mdrag", *args]
    params = StdioServerParameters(command=command, args=argv, cwd="/", env={**env(home), **(extra_env or {})})
    with open(errlog, "a", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def search(session: ClientSession, **args: Any) -> dict[str, Any]:
    return json.loads(ok(await session.call_tool("search", args)))


async def searched_when_ready(session: ClientSession, **args: Any) -> dict[str, Any]:
    """``search`` once the index's startup update has run (asked again while it reports indexing)."""
    while True:
        found = await search(session, **args)
        if "indexing" not in found and "partial" not in found:  # built whole
            return found
        await anyio.sleep(0.3)


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_index_served_from_root_is_searched_and_kept_current(tmp_path: Path, mdrag_home: Path) -> None:
    notes = notes_folder(tmp_path)
    index(notes, "notes", mdrag_home)
    err = tmp_path / "err.log"
    with anyio.fail_after(WAIT):
        async with serving(["mcp", "--index", "notes"], mdrag_home, err) as s:
            listed = {t.name: t for t in (await s.list_tools()).tools}
            first = await searched_when_ready(s, query="how do I back up my photos", k=3)
            # a file edited while the server runs: found by a later search (the keeper watches the folder)
            (notes / "guides" / "garden.md").write_text(
                "# Garden\n\nThe quince tree wants pruning in February, before the buds swell.\n", encoding="utf-8"
            )
            edited_at = time.monotonic()
            while True:
                found = await search(s, query="when to prune the quince tree", k=1)
                if found["results"] and "quince" in found["results"][0]["text"]:
                    break
                await anyio.sleep(0.2)
            seen_after = time.monotonic() - edited_at
            # a new file too
            (notes / "reference" / "bikes.md").write_text(
                "# Bicycles\n\nPump the tyres of the cargo bike to 3.5 bar.\n", encoding="utf-8"
            )
            while not (found := await search(s, query="tyre pressure of the cargo bike", k=1))["results"] or (
                found["results"][0]["rel_path"] != "reference/bikes.md"
            ):
                await anyio.sleep(0.2)
            status = json.loads(ok(await s.call_tool("status", {})))
    print(f"an edited file was found by search {seen_after:.1f} s after it was written")
    assert set(listed) == {"search", "get", "multi_get", "status"}  # no docset tools: no project here
    assert listed["search"].input_schema["properties"]["index"]["enum"] == ["notes"]
    top = first["results"][0]
    assert top["index"] == "notes" and top["rel_path"] == "guides/backup.md" and top["ref"] == "guides/backup.md"
    assert Path(top["path"]).is_file() and "restic" in top["text"]
    assert "notes" in first["indexed"]
    (entry,) = status["indexes"]
    assert entry["index"] == "notes" and entry["state"] == "ready" and entry["files"] == 4
    assert entry["folders"] == [str(notes.resolve())] and entry["chunks"] >= 4 and entry["last_indexed"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_search_filters_get_and_resources_of_an_index(tmp_path: Path, mdrag_home: Path) -> None:
    notes = notes_folder(tmp_path)
    index(notes, "notes", mdrag_home)
    other = tmp_path / "other"
    other.mkdir()
    (other / "cooking.md").write_text("# Bread\n\nBake the sourdough at 230 degrees for 40 minutes.\n")
    index(other, "kitchen", mdrag_home)
    err = tmp_path / "err.log"
    with anyio.fail_after(WAIT):
        async with serving(["mcp", "--index", "notes", "--index", "kitchen"], mdrag_home, err) as s:
            everywhere = await searched_when_ready(s, query="restic backup", k=10)
            kitchen = await searched_when_ready(s, query="how long to bake bread", index="kitchen", k=3)
            by_path = await search(s, query="restic backup", index="notes", path="reference/", k=10)
            by_tag = await search(s, query="restic backup", index="notes", tags=["ops"], k=10)
            by_bm25 = await search(s, query="sourdough", mode="bm25", k=3)
            wrong_mode = error(await s.call_tool("search", {"query": "x", "mode": "fuzzy"}))
            unnamed = error(await s.call_tool("get", {"ref": "guides/backup.md"}))
            got = json.loads(ok(await s.call_tool("get", {"index": "notes", "ref": "guides/backup.md"})))
            templates = (await s.list_resource_templates()).resource_templates
            listed = (await s.list_resources()).resources
            uri = next(r.uri for r in listed if str(r.uri).endswith("guides/backup.md"))
            read = (await s.read_resource(uri)).contents
            with pytest.raises(MCPError) as missing:
                await s.read_resource("mdrag://index/notes/no/such.md")
            statuses = json.loads(ok(await s.call_tool("status", {"index": "kitchen"})))["indexes"]
    assert {r["index"] for r in everywhere["results"]} <= {"notes", "kitchen"}
    assert everywhere["results"] and everywhere["results"][0]["index"] == "notes"
    assert kitchen["results"][0]["rel_path"] == "cooking.md" and kitchen["results"][0]["index"] == "kitchen"
    assert by_path["results"] and {r["rel_path"] for r in by_path["results"]} == {"reference/backup-settings.md"}
    assert by_tag["results"] and {r["rel_path"] for r in by_tag["results"]} == {"guides/backup.md"}
    assert by_bm25["results"][0]["rel_path"] == "cooking.md"
    assert "mode" in wrong_mode and "hybrid" in wrong_mode
    assert "index" in unnamed and "notes" in unnamed and "kitchen" in unnamed
    assert got["index"] == "notes" and "restic restore latest" in got["documents"][0]["text"]
    assert {t.uri_template for t in templates} == {"mdrag://index/{index}/{+path}"}
    uris = {str(r.uri) for r in listed}
    assert uris == {
        "mdrag://index/notes/guides/backup.md",
        "mdrag://index/notes/guides/garden.md",
        "mdrag://index/notes/reference/backup-settings.md",
        "mdrag://index/kitchen/cooking.md",
    }
    assert len(read) == 1 and isinstance(read[0], types.TextResourceContents)
    assert read[0].text == got["documents"][0]["text"] and read[0].mime_type == "text/markdown"
    assert missing.value.error.code == -32002
    assert [s["index"] for s in statuses] == ["kitchen"] and statuses[0]["files"] == 1


@pytest.mark.slow
@pytest.mark.anyio
async def test_resources_are_paged(tmp_path: Path, mdrag_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """resources/list pages with nextCursor; the pages together list every document once."""
    import mcp

    from mdrag.config import load_config
    from mdrag.frontends.mcp import resources
    from mdrag.frontends.mcp.tools import KnowledgeTools
    from mdrag.index.served import ServedIndexes

    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(7):
        (folder / f"page{i}.md").write_text(f"# Page {i}\n\nText of page {i}.\n")
    index(folder, "many", mdrag_home)
    monkeypatch.setattr(resources, "PAGE_SIZE", 3)
    tools = KnowledgeTools(None, indexes=ServedIndexes(["many"], load_config()))
    seen: list[str] = []
    pages = 0
    with anyio.fail_after(WAIT):
        async with mcp.Client(tools.server()) as client:
            cursor = None
            while True:
                page = await client.list_resources(cursor=cursor)
                pages += 1
                seen += [str(r.uri) for r in page.resources]
                cursor = page.next_cursor
                if cursor is None:
                    break
    assert pages == 3
    assert sorted(seen) == sorted(f"mdrag://index/many/page{i}.md" for i in range(7))


@pytest.mark.slow
@pytest.mark.anyio
async def test_search_docs_gives_sections_after_a_call_that_came_too_late(tmp_path: Path) -> None:
    """A search_docs call whose time budget is spent before its lookup could start (budget 0: every call is
    late) leaves the lookup running; a later call gets the ranked sections, and so do calls with other words."""
    from mdrag.frontends.mcp.tools import KnowledgeTools

    kb, _ = react_docs(tmp_path)
    tools = KnowledgeTools(kb, hint_budget=0.0)
    args = {"docset": "react", "keywords": ["useEffect cleanup"], "generalized_keywords": ["hooks"]}
    other = {**args, "keywords": ["useState value"]}
    with anyio.fail_after(WAIT):
        async with tools.running():
            (entry,) = tools.indexes.opened() if tools.indexes else ()
            assert await anyio.to_thread.run_sync(entry.wait, WAIT)
            first = ok(await tools.call("search_docs", args))
            while "Top sections" not in (later := ok(await tools.call("search_docs", args))):
                await anyio.sleep(0.05)
            while "Top sections" not in (again := ok(await tools.call("search_docs", other))):
                await anyio.sleep(0.05)
    assert "Top sections" not in first  # too late to wait for its own lookup
    assert "hooks.md" in later.split("Top sections", 1)[1]
    assert "state.md" in again.split("Top sections", 1)[1]


@pytest.mark.anyio
async def test_no_index_and_no_project_names_both_ways(tmp_path: Path, mdrag_home: Path) -> None:
    with anyio.fail_after(WAIT):
        async with serving(["mcp"], mdrag_home, tmp_path / "err.log") as s:
            refused = error(await s.call_tool("search", {"query": "anything"}))
    assert "no .knowledge/config.yaml found in /" in refused
    assert "--index NAME" in refused and "--project DIR" in refused and "MDRAG_PROJECT" in refused
    assert "--index NAME" in (tmp_path / "err.log").read_text()  # said at start too, in the client's log


def test_unknown_index_and_missing_project_stop_the_server_at_once(tmp_path: Path, mdrag_home: Path) -> None:
    index_run = subprocess.run(
        [*MDRAG, "mcp", "--index", "nope"], env=env(mdrag_home), capture_output=True, text=True, cwd="/", timeout=120
    )
    project_run = subprocess.run(
        [*MDRAG, "mcp", "--project", str(tmp_path)], env=env(mdrag_home), capture_output=True, text=True, timeout=120
    )
    assert index_run.returncode != 0 and "no index named 'nope'" in index_run.stderr
    assert "mdrag index DIR --index nope" in index_run.stderr
    assert project_run.returncode != 0 and "no .knowledge/config.yaml found" in project_run.stderr


# -- the client configurations of docs/mcp.md ----------------------------------------------------------------

DOCS = ROOT / "docs" / "mcp.md"
PROJECT_PLACEHOLDER = "/path/to/your/project"


def snippets() -> list[tuple[str, dict[str, Any]]]:
    """Every server entry of the JSON snippets under "Registering the server with your MCP client", by the
    client (the ### heading) it is for."""
    section = DOCS.read_text(encoding="utf-8").split("## Registering the server with your MCP client", 1)[1]
    section = section.split("\n## ", 1)[0]
    found = []
    for part in section.split("\n### ")[1:]:
        client = part.split("\n", 1)[0].strip()
        for block in re.findall(r"```json\n([\s\S]*?)```", part):
            data = json.loads(block)  # valid JSON as written: no comments
            found += [(client, entry) for entry in (data.get("mcpServers") or data["servers"]).values()]
    return found


def test_every_client_has_a_snippet_for_an_index_and_a_project() -> None:
    found = snippets()
    clients = {title for title, _ in found}
    assert {"Claude Desktop", "Claude Code", "Cursor", "VS Code"} <= clients, clients
    for client in ("Claude Desktop", "Claude Code", "Cursor", "VS Code"):
        ways = [e["args"] for title, e in found if title == client]
        assert any("--index" in a for a in ways) and any("--project" in a for a in ways), (client, ways)


@pytest.mark.slow
@pytest.mark.anyio
async def test_each_snippet_starts_a_server_that_answers(tmp_path: Path, mdrag_home: Path) -> None:
    notes = notes_folder(tmp_path)
    index(notes, "notes", mdrag_home)
    project = tmp_path / "project"
    (project / ".knowledge" / "docs").mkdir(parents=True)
    (project / ".knowledge" / "config.yaml").write_text("docsets:\n  - id: guide\n    local_path: ./docs\n")
    (project / ".knowledge" / "docs" / "install.md").write_text(
        "# Install\n\nInstall the widget with `widget setup --fast`.\n"
    )
    mdrag_command = str(Path(sys.executable).parent / "mdrag")
    answered = []
    for client, entry in snippets():
        assert entry["command"] == "mdrag" and entry.get("type", "stdio") == "stdio"
        args = [a.replace(PROJECT_PLACEHOLDER, str(project)) for a in entry["args"]]
        query = "back up photos" if "--index" in args else "how do I install the widget"
        with anyio.fail_after(WAIT):
            async with serving(args, mdrag_home, tmp_path / "err.log", mdrag_command, entry.get("env")) as s:
                found = await searched_when_ready(s, query=query, k=1)
        assert found["results"], (client, entry, found)
        answered.append((client, found["results"][0]["rel_path"]))
    assert ("VS Code", "install.md") in answered and ("Claude Desktop", "guides/backup.md") in answered


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_project_named_by_the_environment_is_served_from_root(tmp_path: Path, mdrag_home: Path) -> None:
    """MDRAG_PROJECT names the project when the assistant starts the server elsewhere; search's filters and
    status apply to docsets as to indexes."""
    project = tmp_path / "project"
    docs = project / ".knowledge" / "docs"
    (docs / "setup").mkdir(parents=True)
    (docs / "ops").mkdir()
    (project / ".knowledge" / "config.yaml").write_text("docsets:\n  - id: guide\n    local_path: ./docs\n")
    (docs / "setup" / "install.md").write_text("---\ntags: [start]\n---\n# Install\n\nRun `widget setup` first.\n")
    (docs / "ops" / "upgrade.md").write_text("# Upgrade\n\nRun `widget setup --upgrade` to move to a new version.\n")
    with anyio.fail_after(WAIT):
        async with serving(["mcp"], mdrag_home, tmp_path / "err.log", extra_env={"MDRAG_PROJECT": str(project)}) as s:
            listed = json.loads(ok(await s.call_tool("list_docsets", {})))["docsets"]
            everything = await searched_when_ready(s, query="widget setup", k=5)
            under_ops = await search(s, query="widget setup", docset="guide", path="ops/", k=5)
            tagged = await search(s, query="widget setup", tags="start", k=5)
            status = json.loads(ok(await s.call_tool("status", {"docset": "guide"})))["indexes"]
    assert [d["id"] for d in listed] == ["guide"]
    assert {r["rel_path"] for r in everything["results"]} == {"setup/install.md", "ops/upgrade.md"}
    assert [r["rel_path"] for r in under_ops["results"]] == ["ops/upgrade.md"]
    assert [r["rel_path"] for r in tagged["results"]] == ["setup/install.md"]
    assert status[0]["docset"] == "guide" and status[0]["files"] == 2 and status[0]["state"] == "ready"


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_search_of_an_index_that_holds_part_of_its_files_says_so(tmp_path: Path, mdrag_home: Path) -> None:
    """A first build stopped after its first step: MCP answers from the files it holds, and says how many."""
    import threading

    import mcp

    from mdrag.config import load_config
    from mdrag.frontends.mcp.tools import KnowledgeTools
    from mdrag.index import Index
    from mdrag.index.served import ServedIndexes

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(1, 9):
        (docs / f"p{i}.md").write_text(f"# Page {i}\n\nThe widget number {i} spins at {i}00 rpm.\n")
    paused = threading.Event()
    paused.set()  # the build commits its first step, then stops
    with Index(load_config({"index": "part"})) as index:
        first = index.update([docs], pause=paused, batch_chunks=2)
    assert first.remaining > 0
    served = ServedIndexes(["part"], load_config())
    served._gate.acquire()  # another index's update holds the CPU: this one's waits, the index stays partial
    try:
        with anyio.fail_after(WAIT):
            async with mcp.Client(KnowledgeTools(None, indexes=served).server()) as client:
                found = json.loads(ok(await client.call_tool("search", {"query": "how fast does the widget spin"})))
    finally:
        served._gate.release()
    assert found["results"] and found["partial"]["part"]["files_done"] == first.added
    assert f"{first.added} of 8 files" in found["note"] and "results come from those" in found["note"]
