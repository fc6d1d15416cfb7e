"""`mdrag eval`: metrics by hand, question files, BEIR files, and the command."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.errors import ConfigError
from mdrag.index import Index
from mdrag.retrieval.evaluate import evaluate, load_beir, load_questions, score_ranking
from tests.conftest import HashEmbedder


def test_score_ranking_by_hand() -> None:
    m = score_ranking(["a", "b", "c"], {"b"})
    assert m["ndcg@10"] == pytest.approx(1 / math.log2(3))
    assert m["mrr"] == 0.5 and m["mrr@5"] == 0.5 and m["hit@5"] == 1.0 and m["recall@10"] == 1.0
    m = score_ranking([f"d{i}" for i in range(20)], {"d7", "missing"})
    assert m["recall@10"] == 0.5 and m["hit@5"] == 0.0 and m["mrr"] == 1 / 8 and m["mrr@5"] == 0.0
    assert score_ranking([], {"a"}) == {"ndcg@10": 0.0, "recall@10": 0.0, "mrr": 0.0, "mrr@5": 0.0, "hit@5": 0.0}


def test_question_files_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "qa.jsonl"
    f.write_text('{"id": "q1", "question": "alpha?", "gold": ["a.md"]}\n\n{"question": "none?", "gold": []}\n')
    qs = load_questions(f)
    assert [q.id for q in qs] == ["q1", "3"] and qs[0].gold == {"a.md"} and not qs[1].gold
    f.write_text('{"gold": ["a.md"]}\n')
    with pytest.raises(ConfigError, match="line 1"):
        load_questions(f)


def test_beir_files(tmp_path: Path) -> None:
    (tmp_path / "q.tsv").write_text("1\tfirst query\n2\tsecond\n")
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n1\td2\t0\n3\td9\t1\n")
    qs = load_beir(tmp_path / "q.tsv", tmp_path / "qrels.tsv")
    assert [(q.id, q.text, set(q.gold)) for q in qs] == [("1", "first query", {"d1"})]


def test_evaluate_an_index(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    for name, words in {"a": "alpha apples", "b": "bravo bananas", "c": "charlie cherries"}.items():
        (docs / "sub" / f"{name}.md").write_text(f"# {name}\n\n{words} orchard\n")
    idx = Index(load_config({"index": "e" + os.urandom(3).hex()}), embedder=HashEmbedder())
    idx.update([docs])
    qs = load_questions_from(tmp_path, [("alpha apples", ["docs/sub/a.md"]), ("bravo bananas", ["sub/b.md"])])
    result = evaluate(idx.search, qs)
    for mode in ("dense", "bm25", "hybrid"):
        assert result[mode]["hit@5"] == 1.0 and result[mode]["mrr"] == 1.0, mode
    assert result["questions"] == 2


def load_questions_from(tmp_path: Path, items: list[tuple[str, list[str]]]) -> list:
    f = tmp_path / "qa.jsonl"
    f.write_text("".join(json.dumps({"question": q, "gold": g}) + "\n" for q, g in items))
    return load_questions(f)


@pytest.mark.slow
def test_the_command_on_the_sample_docs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mdrag.frontends.cli import main

    repo = Path(__file__).resolve().parents[1]
    assert main(["index", str(repo / "examples" / "docs"), "-q", "--json"]) == 0
    capsys.readouterr()
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        json.dumps({"question": "what if indexing is interrupted", "gold": ["guides/incremental-indexing.md"]})
        + "\n"
        + json.dumps({"question": "how do I change the chunk size", "gold": ["configuration.md"]})
        + "\n"
    )
    assert main(["eval", str(qa), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["questions"] == 2 and result["dense"]["hit@5"] == 1.0 and set(result) >= {"bm25", "hybrid"}
    assert result["unknown_gold"] == []
    # a gold path with a typo, and one naming a file by a longer path: only the typo is reported
    with qa.open("a") as f:
        f.write(json.dumps({"question": "how do I start", "gold": ["docs/getting-started.md", "gettin-started.md"]}))
    assert main(["eval", str(qa), "--json", "--mode", "bm25"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["unknown_gold"] == ["gettin-started.md"]
    assert result["search"]["mode"] == "bm25"  # the mode measured, not the setting's (hybrid)
    assert main(["eval", str(qa), "--mode", "dense"]) == 0
    out = capsys.readouterr().out
    assert "nDCG@10" in out and "mode dense," in out and "hybrid" not in out
    assert main(["eval"]) == 2


def test_evaluation_measures_what_the_server_search_message_returns(tmp_path: Path) -> None:
    """Each question's ranking is the results of a `search` message with no options, as `mdrag serve` answers it."""
    import asyncio

    from websockets.asyncio.client import connect

    from mdrag.frontends.server import QAServer

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(16):  # more sections than search.k that share the question's words
        (docs / f"orchard{i}.md").write_text(f"# Orchard {i}\n\nThe orchard grows apple variety {i} and pears.\n")
    config = load_config({"index": "e" + os.urandom(3).hex(), "server.port": 0})
    qs = load_questions_from(tmp_path, [("apple orchard pears", ["orchard3.md"]), ("variety 7 apple", ["orchard7.md"])])

    async def scenario() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        index = Index(config, embedder=HashEmbedder())
        server = QAServer(config, [docs], overrides={"server.port": 0, "index": config["index"]}, index=index)
        await server.start()
        try:
            await asyncio.wait_for(server.ready.wait(), 300)
            assert await asyncio.to_thread(server.keeper.wait, None, 300)  # type: ignore[union-attr]  # built whole
            measured: dict[str, list[str]] = {}

            def search(query: str, **options: object) -> list:
                results = index.search(query, **options)  # type: ignore[arg-type]
                measured[query] = [r.chunk_id for r in results]
                return results

            evaluate(search, qs, modes=(config["search.mode"],))
            served: dict[str, list[str]] = {}
            async with connect(server.url) as ws:
                assert json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] == "status"  # the greeting
                for q in qs:
                    await ws.send(json.dumps({"type": "search", "query": q.text}))
                    reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    served[q.text] = [r["chunk_id"] for r in reply["results"]]
            return measured, served
        finally:
            await server.stop()

    measured, served = asyncio.run(scenario())
    assert served and all(served.values())
    assert measured == served, "mdrag eval ranks exactly what a default search message returns"
