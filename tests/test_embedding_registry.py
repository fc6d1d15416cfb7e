"""The embedder registry: each backend the settings can name is one entry, built from the settings."""

from __future__ import annotations

import pytest

from mdrag.config import load_config
from mdrag.embedding import EmbedderBackend, embedder_name, embedders, make_embedder
from mdrag.errors import ConfigError
from mdrag.settings import choices


def test_every_backend_the_settings_can_name_is_registered() -> None:
    backends = set(choices("embedding.backend") or []) - {"auto"}
    providers = set(choices("embedding.provider") or []) - {"local"}
    assert set(embedders()) == backends | providers
    for name, declared in embedders().items():
        assert isinstance(declared, EmbedderBackend) and callable(declared.embedder), name


def test_explicit_settings_pick_their_embedder() -> None:
    assert embedder_name(load_config({"embedding.backend": "openvino"})) == "openvino"
    assert embedder_name(load_config({"embedding.provider": "openai", "embedding.backend": "onnx"})) == "openai"
    assert embedder_name(load_config({"embedding.device": "cuda"})) == "torch"


def test_openai_without_a_base_url_says_which_setting_to_set() -> None:
    with pytest.raises(ConfigError, match="embedding.base_url"):
        make_embedder(load_config({"embedding.provider": "openai"}))
    e = make_embedder(load_config({"embedding.provider": "openai", "api.base_url": "http://127.0.0.1:9/v1"}))
    assert (e.model_id, e.batch_size) == ("openai:text-embedding-3-small", 32)
