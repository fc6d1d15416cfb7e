"""Settings: flags > file > environment > defaults; invalid values name their key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.errors import ConfigError
from mdrag.settings import DEFAULTS, ENV_VARS, Settings, settings_table


def test_defaults(mdrag_home: Path) -> None:
    c = load_config()
    assert c["index"] == "default" and c["chunk.size"] == 1000 and c["chunk.overlap"] == 200
    assert c["llm.model"] == "qwen-flash" and c["server.port"] == 8765 and c["server.reload_interval"] == 300
    assert c.effective("milvus_uri") == str(mdrag_home / "cache" / "milvus.db")
    assert c.manifest_path().parent == mdrag_home / "cache" / "manifests"


def test_precedence_flags_over_file_over_env(mdrag_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARKDOWN_QA_LLM_MODEL", "from-env")
    monkeypatch.setenv("MARKDOWN_QA_API_BASE_URL", "http://env:1/v1")
    assert load_config()["llm.model"] == "from-env"
    (mdrag_home / "config.yaml").write_text("llm:\n  model: from-file\nchunk:\n  size: 800\n")
    c = load_config()
    assert c["llm.model"] == "from-file" and c.sources["llm.model"] == "file"
    assert c["api.base_url"] == "http://env:1/v1" and c.sources["api.base_url"] == "env"
    c = load_config({"llm.model": "from-flag"})
    assert c["llm.model"] == "from-flag" and c["chunk.size"] == 800


def test_booleans(mdrag_home: Path) -> None:
    (mdrag_home / "config.yaml").write_text("search:\n  stemming: true\n")
    assert load_config()["search.stemming"] is True
    assert load_config({"search.stemming": "off"})["search.stemming"] is False


def test_toml_file(mdrag_home: Path) -> None:
    (mdrag_home / "config.toml").write_text('index = "notes"\n[search]\nthreshold = 0.5\n')
    c = load_config()
    assert c["index"] == "notes" and c["search.threshold"] == 0.5


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("chunk:\n  size: big\n", "chunk.size"),
        ("search:\n  threshold: 3\n", "search.threshold"),
        ("embedding:\n  provider: cloud\n", "embedding.provider"),
        ("folders: 3\n", "folders"),
        ("server:\n  port: 70000\n", "server.port"),
        ("index: ../../etc/x\n", "index"),
        ("search:\n  stemming: maybe\n", "search.stemming"),
        ("chunk:\n  size: '800'\n", "chunk.size"),  # a file's number is written as one
        ("chunk:\n  size: true\n", "chunk.size"),
    ],
)
def test_invalid_values_name_their_key(mdrag_home: Path, text: str, key: str) -> None:
    (mdrag_home / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config()


def test_chunk_bounds_are_the_settings_and_checked_when_the_config_is_read(mdrag_home: Path) -> None:
    from mdrag.chunking import ChunkSettings

    (mdrag_home / "config.yaml").write_text("chunk:\n  size: 40\n")
    with pytest.raises(ConfigError, match=r"chunk\.size must be at least 50, got 40 \(from the config file"):
        load_config()  # not first when an index is opened
    with pytest.raises(ConfigError, match=r"chunk\.size must be at least 50, got 40$"):
        ChunkSettings(size=40)  # the same bound, from the same declaration
    (mdrag_home / "config.yaml").unlink()
    config = load_config({"chunk.size": 500, "chunk.unit": "tokens", "chunk.context": "headings"})
    assert ChunkSettings.from_config(config) == ChunkSettings(size=500, unit="tokens", context="headings")
    assert {f"chunk.{k}": v for k, v in vars(ChunkSettings()).items()} == {
        k: v for k, v in load_config().values.items() if k.startswith("chunk.")
    }


def test_invalid_yaml_names_the_file_and_line(mdrag_home: Path) -> None:
    (mdrag_home / "config.yaml").write_text("chunk:\n  size: [1,\n")
    with pytest.raises(ConfigError, match=r"(?s)config.yaml.*line 3"):
        load_config()


def test_invalid_env_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARKDOWN_QA_EMBEDDING_PROVIDER", "nope")
    with pytest.raises(ConfigError, match="embedding.provider.*environment"):
        load_config()


def test_unknown_keys_are_warned_not_fatal(mdrag_home: Path, caplog) -> None:
    (mdrag_home / "config.yaml").write_text("colour: blue\nchunk:\n  size: 900\n")
    assert load_config()["chunk.size"] == 900
    assert "colour" in caplog.text
    with pytest.raises(ConfigError, match="unknown setting"):
        load_config({"colour": "red"})


def test_knowledge_allowed_paths_are_absolute_resolved_folders(
    mdrag_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "docs").mkdir()
    (tmp_path / "latest").symlink_to(tmp_path / "docs")
    (mdrag_home / "config.yaml").write_text(f"knowledge:\n  allowed_paths: ['~/docs', '{tmp_path}/latest/']\n")
    assert load_config()["knowledge.allowed_paths"] == [str((tmp_path / "docs").resolve())] * 2
    (mdrag_home / "config.yaml").write_text("knowledge:\n  allowed_paths: docs\n")
    with pytest.raises(ConfigError, match=r"knowledge.allowed_paths must list absolute folders .*'docs'"):
        load_config()


CONFIGURATION_PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_every_setting_is_documented() -> None:
    page = CONFIGURATION_PAGE.read_text()
    missing = [k for k in DEFAULTS if f"| `{k}` |" not in page]
    assert not missing, f"settings missing from docs/configuration.md: {missing}"


def test_docs_settings_table_is_the_generated_one() -> None:
    """docs/configuration.md's table is `mdrag config --markdown`'s: change a setting's default or help, then
    regenerate it."""
    page = CONFIGURATION_PAGE.read_text()
    start = page.index("<!-- settings table:")
    block = page[page.index("\n", start) + 1 : page.index("<!-- end of settings table -->")]
    assert block == settings_table(), (
        "docs/configuration.md's settings table is stale: paste `mdrag config --markdown` over it"
    )


def test_the_help_of_a_backend_setting_names_the_backends_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store registered by a plugin is listed in store.backend's help as mdrag's own are (by name: it has no
    line of help here), in `mdrag config --markdown` and `--help` alike."""
    from mdrag import plugins

    names = plugins.names
    monkeypatch.setattr(plugins, "names", lambda group: names(group) + ["lance"] * (group == plugins.STORES))
    row = next(line for line in settings_table().splitlines() if line.startswith("| `store.backend` |"))
    assert "kept: `faiss` (an in-memory FAISS index and SQLite under the cache folder), `milvus` (" in row
    assert "`milvus_uri`), `lance`, or `auto`: " in row


def test_every_setting_has_help_and_its_environment_variable_is_documented() -> None:
    assert all(f.description for f in Settings.model_fields.values())
    table = settings_table()
    for var, key in ENV_VARS.items():
        assert f"| `{key}` |" in table and f"(`{var}`)" in table


def test_unknown_keys_suggest_the_closest_known_one(mdrag_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    (mdrag_home / "config.yaml").write_text("chunk:\n  sise: 900\n")
    assert load_config()["chunk.size"] == 1000
    [record] = [r for r in caplog.records if "chunk.sise" in r.getMessage()]
    assert record.levelname == "WARNING"
    assert str(mdrag_home / "config.yaml") in record.getMessage() and "'chunk.size'" in record.getMessage()
    with pytest.raises(ConfigError, match=r"unknown setting 'search\.treshold'; did you mean 'search\.threshold'"):
        load_config({"search.treshold": 0.5})


def test_two_config_files_say_which_one_is_read(mdrag_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    (mdrag_home / "config.yaml").write_text("chunk:\n  size: 800\n")
    (mdrag_home / "config.toml").write_text("[chunk]\nsize = 700\n")
    c = load_config()
    assert c["chunk.size"] == 800 and c.file == mdrag_home / "config.yaml"
    [record] = [r for r in caplog.records if "config.toml" in r.getMessage()]
    assert record.levelname == "WARNING" and "ignored" in record.getMessage()
    assert f"using the config file {mdrag_home / 'config.yaml'}" in record.getMessage()


def test_explain_says_where_each_value_came_from(mdrag_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARKDOWN_QA_LLM_MODEL", "from-env")
    monkeypatch.setenv("MARKDOWN_QA_API_KEY", "sk-very-secret")
    monkeypatch.setenv("MARKDOWN_QA_API_BASE_URL", "http://user:pw@llm.example/v1")
    (mdrag_home / "config.yaml").write_text("chunk:\n  size: 800\n")
    rows = load_config({"search.k": "3"}).explain()
    assert rows["chunk.size"] == {"value": 800, "source": "file", "file": str(mdrag_home / "config.yaml")}
    assert rows["llm.model"] == {"value": "from-env", "source": "environment", "variable": "MARKDOWN_QA_LLM_MODEL"}
    assert rows["search.k"] == {"value": 3, "source": "flag"}
    assert rows["chunk.overlap"] == {"value": 200, "source": "default"}
    assert rows["api.api_key"]["value"] == "***" and "pw" not in rows["api.base_url"]["value"]
    assert rows.keys() == DEFAULTS.keys()


def test_inherited_values_are_shown_as_in_effect(mdrag_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`llm.base_url` unset takes `api.base_url`, `embedding.model` the provider's model, `milvus_uri` the
    cache's file: `explain` (what `mdrag config` prints) shows those values, from where the program reads them."""
    from mdrag.answering.ask import llm_settings
    from mdrag.embedding import make_embedder

    monkeypatch.setenv("MARKDOWN_QA_API_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MARKDOWN_QA_API_KEY", "sk-very-secret")
    c = load_config()
    rows = c.explain()
    assert rows["llm.base_url"] == {"value": "http://127.0.0.1:9/v1", "source": "inherited", "from": "api.base_url"}
    assert rows["llm.api_key"] == {"value": "***", "source": "inherited", "from": "api.api_key"}
    assert rows["embedding.base_url"]["value"] == llm_settings(c).base_url == c.effective("llm.base_url")
    assert llm_settings(c).api_key == c.effective("embedding.api_key") == "sk-very-secret"
    assert rows["milvus_uri"] == {"value": str(mdrag_home / "cache" / "milvus.db"), "source": "default"}
    local = rows["embedding.model"]
    assert local == {"value": make_embedder(c).model_id, "source": "default", "depends_on": "embedding.provider"}
    openai = load_config({"embedding.provider": "openai"})
    assert openai.explain()["embedding.model"]["value"] == make_embedder(openai).model != local["value"]
    own = load_config({"milvus_uri": "http://127.0.0.1:19530"})
    assert own.explain()["milvus_uri"] == {"value": "http://127.0.0.1:19530", "source": "flag"}
    (mdrag_home / "config.yaml").write_text("llm:\n  base_url: http://127.0.0.1:8/v1\n")
    c = load_config()
    assert c.explain()["llm.base_url"]["source"] == "file" and llm_settings(c).base_url == "http://127.0.0.1:8/v1"
    assert c.explain()["embedding.base_url"]["value"] == "http://127.0.0.1:9/v1"


_SAMPLES = [  # values of the types the settings declare, and of others, in and out of their bounds
    *(default for _, default in DEFAULTS.values()),
    "docs",
    "",
    "800",
    "off",
    "auto",
    "onnx",
    "faiss",
    "passage",
    "~/docs",
    "../x",
    0,
    1,
    -1,
    5,
    70000,
    0.5,
    3.0,
    float("inf"),
    True,
    False,
    None,
    ["a", "b"],
    ["/abs/folder"],
    [1],
]


@pytest.mark.parametrize("key", sorted(DEFAULTS))
def test_values_checked_without_the_model_are_what_the_model_gives(key: str) -> None:
    """A value the plain checks take (a config file's, a variable's, a flag's) is the value the settings'
    pydantic model gives back, in a file's strict mode and otherwise; any other is left to the model."""
    from pydantic import ValidationError

    from mdrag.config import _UNSURE, _plain
    from mdrag.settings import model

    taken = 0
    for value in _SAMPLES:
        plain = _plain(key, value)
        if plain is _UNSURE:
            continue
        taken += 1
        for strict in (True, False):
            try:
                checked = model().model_validate({key: value}, strict=strict).model_dump(by_alias=True)[key]
            except ValidationError as e:
                raise AssertionError(f"{key}: {value!r} taken without the model, which refuses it: {e}") from e
            assert checked == plain and type(checked) is type(plain), (key, value, strict)
    assert taken, f"no value of {key} is taken without the model"


def test_reading_the_settings_imports_no_pydantic(mdrag_home: Path) -> None:
    """A config file of valid values, variables and flags are read without pydantic (a tenth of a second of a
    one-shot command); an invalid value is still reported, by the model."""
    import subprocess
    import sys

    (mdrag_home / "config.yaml").write_text("embedding:\n  backend: onnx\nsearch:\n  k: 5\nfolders: ~/docs\n")
    code = (
        "import sys; from mdrag.config import load_config; c = load_config({'search.threshold': 0.2}); "
        "print(c['search.k'], c['search.threshold'], c['index'], 'pydantic' in sys.modules)"
    )
    env = {**os.environ, "MDRAG_HOME": str(mdrag_home), "MARKDOWN_QA_INDEX": "notes"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["5", "0.2", "notes", "False"]
    (mdrag_home / "config.yaml").write_text("search:\n  k: 0\n")
    with pytest.raises(ConfigError, match=r"search\.k must be at least 1, got 0 \(from the config file"):
        load_config()
