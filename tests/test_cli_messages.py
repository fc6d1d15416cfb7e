"""What `mdrag config`, `index` and `status` say when a value is inherited, a file is given for a folder,
or the index was built with another embedder (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mdrag.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_config_prints_inherited_values_and_where_they_come_from(
    mdrag_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MARKDOWN_QA_API_BASE_URL", "http://user:pw@127.0.0.1:9/v1")
    monkeypatch.setenv("MARKDOWN_QA_API_KEY", "sk-very-secret")
    code, out, _ = _run(capsys, "config")
    assert code == 0 and "sk-very-secret" not in out and "pw@" not in out
    lines = {line.split()[0]: line for line in out.splitlines() if not line.startswith("#")}
    assert lines["llm.base_url"].endswith('"http://***@127.0.0.1:9/v1"  # from api.base_url (MARKDOWN_QA_API_BASE_URL)')
    assert lines["embedding.api_key"].endswith('"***"  # from api.api_key (MARKDOWN_QA_API_KEY)')
    assert lines["embedding.model"].endswith(
        '"sentence-transformers/all-MiniLM-L6-v2"  # default for embedding.provider local'
    )
    assert lines["milvus_uri"].endswith(f'"{mdrag_home / "cache" / "milvus.db"}"  # default')
    monkeypatch.delenv("MARKDOWN_QA_API_BASE_URL")
    lines = {line.split()[0]: line for line in _run(capsys, "config")[1].splitlines() if not line.startswith("#")}
    assert lines["llm.base_url"].endswith("null  # from api.base_url")
