"""The local MiniLM embedder, with the real packaged weights."""

from __future__ import annotations

import numpy as np
import pytest

from mdrag.embedding import local
from mdrag.embedding.local import DEFAULT_MODEL, LocalEmbedder
from mdrag.errors import EmbeddingError
from tests.conftest import HashEmbedder


def test_identity_and_window_without_loading_the_model() -> None:
    e = LocalEmbedder()
    assert e.identity == {"model": DEFAULT_MODEL, "dimension": 384}
    assert e.max_tokens == 256
    long = "word " * 400
    assert e.count_tokens([long])[0] > 400, "the tokenizer does not truncate at 128"
    assert e.count_tokens(["hello world"]) == [4]  # [CLS] hello world [SEP]


def test_unknown_model_never_reaches_for_a_hub() -> None:
    with pytest.raises(EmbeddingError, match="never downloaded"):
        LocalEmbedder("some-org/some-model")


def test_batch_order_is_kept_while_batching_by_length() -> None:
    e = HashEmbedder()
    e.batch_size = 3
    texts = ["a b c d e f", "a", "b c", "x y z w", "q", "long text with many words in it"]
    together = e.embed(texts)
    alone = np.vstack([e.embed([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-6)


def test_batches_group_texts_of_similar_token_count() -> None:
    """Batches are cut by token count, not characters: a batch pads to its longest text."""

    class Recording(LocalEmbedder):
        def embed_batch(self, texts):  # type: ignore[no-untyped-def]
            batches.append([len(t) for t in texts])
            return np.ones((len(texts), self.dimension), dtype=np.float32)

    batches: list[list[int]] = []
    e = Recording()
    e.batch_size = 2
    few = ["internationalization", "characterization"]  # long words, few tokens each
    many = ["a,b,c,d,e,f,g,h,i,j", "1;2;3;4;5;6;7;8;9"]  # shorter strings, many tokens each
    assert max(e.count_tokens(few)) < min(e.count_tokens(many))
    e.embed([many[0], few[0], many[1], few[1]])
    assert sorted(map(sorted, batches)) == sorted(sorted(len(t) for t in g) for g in (few, many))


@pytest.mark.slow
def test_real_vectors_are_normalized_and_meaningful(minilm) -> None:
    v = minilm.embed(["How do I install the tool on Linux?", "Installing on Linux", "Chocolate cake recipe"])
    assert v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
    q = minilm.embed_query("How do I install the tool on Linux?")
    np.testing.assert_allclose(q, v[0], atol=1e-5)


@pytest.mark.slow
def test_model_is_loaded_once_per_process(minilm) -> None:
    minilm.embed(["warm up"])
    other = LocalEmbedder()
    assert other.model is minilm.model
    assert len([k for k in local._models if k[0] == str(minilm.model_dir)]) == 1
