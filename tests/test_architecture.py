"""docs/architecture.md's example front end, run as written: its two modules, its command registered beside
the others, and a search through it over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import re
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from mdrag.config import load_config
from mdrag.frontends.cli import build_parser
from mdrag.index import Index
from tests.conftest import HashEmbedder

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def _example_modules() -> dict[str, str]:
    """Module name -> source of each Python block of the document that starts with its file's path."""
    blocks = re.findall(r"```python\n# (mdrag/[\w/]+)\.py\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    return {path.replace("/", "."): source for path, source in blocks}


@pytest.fixture
def example() -> Iterator[dict[str, ModuleType]]:
    """The example's modules, importable under their names while the test runs."""
    made = {}
    for name, source in _example_modules().items():
        module = ModuleType(name)
        module.__file__ = str(DOC)
        sys.modules[name] = made[name] = module
        exec(compile(source, f"{DOC}:{name}", "exec"), module.__dict__)  # noqa: S102 - the document's own code
    yield made
    for name in made:
        sys.modules.pop(name, None)


def test_the_example_front_end_is_a_module_its_command_and_one_line(
    example: dict[str, ModuleType], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert set(example) == {"mdrag.frontends.jsonhttp", "mdrag.frontends.cli.jsonhttp"}
    # its command, declared beside the function that runs it: added to the parser by its register alone
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    example["mdrag.frontends.cli.jsonhttp"].register(commands)
    args = parser.parse_args(["json-http", "--port", "8811", "--index", "t"])
    assert args.run is example["mdrag.frontends.cli.jsonhttp"]._serve and args.port == 8811
    # the front end over a real index
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Rotation\n\nRotate the API keys every ninety days with `keys rotate`.\n")
    (docs / "b.md").write_text("# Backups\n\nBackups run nightly and are kept for a week.\n")
    monkeypatch.setenv("MDRAG_HOME", str(tmp_path / "home"))
    with Index(load_config({"index": "t", "search.threshold": 0}), embedder=HashEmbedder()) as index:
        index.update([docs])
        server = example["mdrag.frontends.jsonhttp"].make_server(index, port=0)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            base = f"http://127.0.0.1:{server.server_address[1]}"
            with urllib.request.urlopen(f"{base}/search?q=rotate+api+keys", timeout=30) as reply:
                found = json.loads(reply.read())
            assert found and found[0]["rel_path"] == "a.md" and "ninety days" in found[0]["text"]
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{base}/search?q=", timeout=30)
            assert refused.value.code == 400
        finally:
            server.shutdown()
            server.server_close()
