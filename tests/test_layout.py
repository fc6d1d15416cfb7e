"""The layout holds: no import cycle, no import from a lower room into an upper one, no module too long,
and the core loads no front end.

docs/architecture.md describes the layout these tests guard. Imports are read
from the source (every ``import`` in a file counts, including those inside a
function or under ``TYPE_CHECKING``), so a cycle cannot hide from them.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mdrag"
MAX_LINES = 1000  # a backstop only: modules are split by job, not by length; functions have the cap below
MAX_FUNCTION_LINES = 80  # a function longer than this is more than one step: split it, or name it below
MAX_PARAMETERS = 8  # more, and the state travels as arguments: an object (a run, a reader) holds it instead
#: The functions allowed over MAX_PARAMETERS, each with what it waits for: a new one must take fewer.
MANY_PARAMETERS: dict[str, str] = {}
#: The functions allowed over MAX_FUNCTION_LINES, each with why it is one piece (or, "to split", what it
#: waits for): a new long function must be split or named here.
LONG_FUNCTIONS = {
    "mdrag.knowledge.web.WebsiteCrawler.crawl": "to split: the crawl loop, one page's fetch, checks and storage",
    "mdrag.retrieval.search.search": "the search pipeline in order: candidates, fusion, boosts, rerank, cut",
    "mdrag.embedding.onnx_build.build_model": "the BERT graph written node by node, in the model's own order",
    "mdrag.frontends.cli.serving.run_ask": "to split: one question and the prompt loop",
    "mdrag.knowledge.files.sync": "to split: a docset folder's copy, checks and removals",
    "mdrag.embedding.onnx_files.export_onnx": "torch's export and its check against torch, one guarded block",
    "mdrag.knowledge.config.load_knowledge_config": "to split: reading, then each docset's checks",
    "mdrag.index.index.Index.update": "to split: the run's setup, its progress record and its steps",
}
FRONT_ENDS = "mdrag.frontends"  # the CLI, the WebSocket server and client, the web page, the MCP server
#: The rooms from the ground up (docs/architecture.md): a module imports from its own room and the rooms
#: below it, never from one above. "ground" is every module at the top of mdrag (errors, types, settings,
#: config, fileio ...); the others are mdrag's packages.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ground",),
    ("parsers", "chunking", "embedding", "store"),
    ("ingest",),
    ("retrieval",),
    ("answering",),
    ("index",),
    ("knowledge",),
    ("frontends",),
)
#: In the front ends' room: the public API (``import mdrag``, which a front end may use as any user
#: does) and ``python -m mdrag``.
WITH_FRONT_ENDS = ("mdrag", "mdrag.__main__")


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """The mdrag modules that module ``name`` imports anywhere in its source."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in names:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name) for name in MODULES}


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(GRAPH)))
    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle_even_inside_functions_or_under_type_checking() -> None:
    assert _cycles() == []


def test_the_cycle_finder_sees_a_cycle_hidden_in_a_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: one import back, wherever it is written, makes a cycle."""
    a = "mdrag.config"
    b = min(GRAPH[a])
    monkeypatch.setitem(GRAPH, b, GRAPH[b] | {a})
    assert any({a, b} <= set(c) for c in _cycles())


def _level(name: str) -> int:
    """The layer of module ``name`` (its room's index in LAYERS)."""
    if name in WITH_FRONT_ENDS:
        return len(LAYERS) - 1
    parts = name.split(".")
    is_package = MODULES[name].name == "__init__.py" or len(parts) > 2
    room = parts[1] if is_package else "ground"
    return next(i for i, rooms in enumerate(LAYERS) if room in rooms)


def _upward() -> list[str]:
    """Each import from a lower room into an upper one, as ``importer -> imported``."""
    return sorted(f"{a} -> {b}" for a, targets in GRAPH.items() for b in targets if _level(b) > _level(a))


def test_every_room_has_its_place_in_the_layers() -> None:
    rooms = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert rooms == {room for layer in LAYERS for room in layer} - {"ground"}


def test_no_room_imports_one_above_it() -> None:
    """Dependencies point inward: nothing in a lower room imports an upper one (counting imports inside
    functions and under ``TYPE_CHECKING``)."""
    assert _upward() == []


def test_the_layer_check_sees_an_upward_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a store importing the manifest (as two once did) goes up a room."""
    monkeypatch.setitem(GRAPH, "mdrag.store.faiss.index", GRAPH["mdrag.store.faiss.index"] | {"mdrag.ingest.manifest"})
    assert _upward() == ["mdrag.store.faiss.index -> mdrag.ingest.manifest"]


def test_no_module_is_longer_than_the_house_allows() -> None:
    lengths = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    assert {n: k for n, k in lengths.items() if k > MAX_LINES} == {}


def _function_nodes() -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method of the package by its dotted name."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found[f"{prefix}.{child.name}"] = child
                walk(child, f"{prefix}.{child.name}")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}.{child.name}")

    for name, path in MODULES.items():
        walk(ast.parse(path.read_text(encoding="utf-8")), name)
    return found


def _functions() -> dict[str, int]:
    """Every function and method of the package by its dotted name, with its length in lines."""
    return {name: (f.end_lineno or f.lineno) - f.lineno + 1 for name, f in _function_nodes().items()}


def _parameters(f: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The parameters a caller may pass to ``f``: every one (``*args`` and ``**kwargs`` too), but a method's
    ``self`` or ``cls``."""
    a = f.args
    names = [p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def test_no_function_takes_more_parameters_than_the_house_allows() -> None:
    many = {name for name, f in _function_nodes().items() if len(_parameters(f)) > MAX_PARAMETERS}
    assert many - set(MANY_PARAMETERS) == set(), "their state travels as arguments: let an object hold it"
    assert set(MANY_PARAMETERS) - many == set(), "no longer too many: take them out of MANY_PARAMETERS"


def test_the_parameter_count_sees_every_kind() -> None:
    f = ast.parse("class C:\n    def m(self, a, /, b, *c, d, **e): ...").body[0].body[0]  # type: ignore[attr-defined]
    assert _parameters(f) == ["a", "b", "d", "c", "e"]


def test_no_function_is_longer_than_the_house_allows_unless_named_with_its_reason() -> None:
    lengths = _functions()
    long = {n for n, k in lengths.items() if k > MAX_FUNCTION_LINES}
    assert long - set(LONG_FUNCTIONS) == set(), "split these, or name them in LONG_FUNCTIONS with the reason"
    assert set(LONG_FUNCTIONS) - long == set(), "no longer long: take them out of LONG_FUNCTIONS"


def test_the_core_imports_no_front_end() -> None:
    """Front ends import the core, never the reverse (docs/architecture.md)."""

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in GRAPH[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    core = [n for n in MODULES if not (n == FRONT_ENDS or n.startswith(FRONT_ENDS + "."))]
    assert FRONT_ENDS in MODULES
    assert {n: sorted(f for f in reaches(n) if f.startswith(FRONT_ENDS)) for n in core if n != "mdrag.__main__"} == {
        n: [] for n in core if n != "mdrag.__main__"
    }


#: Where a reference a newcomer cannot follow is refused: the code, the tests, the benchmarks, their
#: report's templates and figures, the README and the docs. A tracker's issue number or a spec's
#: requirement number ("REQ-" and a number) is not in the repository to read: the text states the rule
#: itself, and issue numbers go in commit messages and CHANGELOG.md.
UNREADABLE_REFERENCE = re.compile(r"\bREQ-\d|\b[Ii]ssues? #?\d")
REFERENCE_FREE = (
    *("mdrag/**/*.py", "tests/**/*.py", "benchmarks/*.py", "benchmarks/templates/*.md", "benchmarks/RESULTS.md"),
    *("README.md", "docs/*.md"),
)  # not benchmarks/out/


def _unreadable_references() -> list[str]:
    root = PACKAGE.parent
    found = []
    for pattern in REFERENCE_FREE:
        for path in sorted(root.glob(pattern)):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if UNREADABLE_REFERENCE.search(line):
                    found.append(f"{path.relative_to(root).as_posix()}:{number}: {line.strip()}")
    return found


def test_no_issue_or_requirement_numbers_in_code_tests_benchmarks_or_docs() -> None:
    """Say what the rule is where it applies, not which issue or requirement asked for it."""
    assert _unreadable_references() == []


def test_the_reference_check_sees_one() -> None:
    for line in ("# the 10 ms budget (REQ-" + "9)", '"""Issue ' + '37 point 8: ..."""', "see issues " + "26 and 37"):
        assert UNREADABLE_REFERENCE.search(line), line
    assert not UNREADABLE_REFERENCE.search("an issue of the tracker; a REQUEST; tissue 3")
