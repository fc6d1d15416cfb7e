"""The embedder registry: each backend the settings can name is one entry, built from the settings."""

from __future__ import annotations

import importlib
import typing

import pytest

from mdrag.config import Settings, load_config
from mdrag.embedding import EMBEDDERS, Embedder, embedder_name, make_embedder
from mdrag.errors import ConfigError


def test_every_backend_the_settings_can_name_is_registered() -> None:
    backends = set(typing.get_args(Settings.model_fields["embedding__backend"].annotation)) - {"auto"}
    providers = set(typing.get_args(Settings.model_fields["embedding__provider"].annotation)) - {"local"}
    assert set(EMBEDDERS) == backends | providers
    for name, target in EMBEDDERS.items():
        module_name, _, class_name = target.partition(":")
        cls = getattr(importlib.import_module(module_name), class_name)
        assert issubclass(cls, Embedder) and callable(cls.from_config), name


def test_explicit_settings_pick_their_embedder() -> None:
    assert embedder_name(load_config({"embedding.backend": "openvino"})) == "openvino"
    assert embedder_name(load_config({"embedding.provider": "openai", "embedding.backend": "onnx"})) == "openai"
    assert embedder_name(load_config({"embedding.device": "cuda"})) == "torch"


def test_openai_without_a_base_url_says_which_setting_to_set() -> None:
    with pytest.raises(ConfigError, match="embedding.base_url"):
        make_embedder(load_config({"embedding.provider": "openai"}))
    e = make_embedder(load_config({"embedding.provider": "openai", "api.base_url": "http://127.0.0.1:9/v1"}))
    assert (e.model_id, e.batch_size) == ("openai:text-embedding-3-small", 32)
