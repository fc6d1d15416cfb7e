"""The "no relevant information" rule (mdrag.retrieval.relevance) and the index's term statistics."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.embedding.base import Embedder
from mdrag.index import Index
from mdrag.knobs import MIN_CHUNKS, NAMED_SURE, NAMED_TOP
from mdrag.retrieval.relevance import TermStats, missing_names, names, refuse, unknown_share
from mdrag.stemming import stemmer
from mdrag.types import SearchResult
from tests.conftest import HashEmbedder

CHUNKS = [
    "configur the collector pipelin with receiv and export",
    "the collector export trace to jaeger",
    "sampl trace in the collector",
]


def _result(score: float, text: str = "t", rel_path: str = "a.md") -> SearchResult:
    return SearchResult(text=text, path="/d/" + rel_path, rel_path=rel_path, score=score, heading_path=[], chunk_id="x")


def test_words_no_chunk_holds_carry_the_unknown_share() -> None:
    stats = TermStats(CHUNKS, stemmer())
    assert unknown_share("configure the collector pipeline", stats) == 0.0
    # "Nagios" is in no chunk: most of the question's weight; "the" and "collector" (in every chunk) weigh little
    share = unknown_share("the collector and Nagios", stats)
    assert share > 0.5
    assert unknown_share("the collector and Nagios", stats) > unknown_share("the collector, jaeger and Nagios", stats)
    assert unknown_share("?!", stats) == 1.0


def test_an_unknown_everyday_word_weighs_half_a_term_or_a_capitalised_word_all() -> None:
    stats = TermStats(CHUNKS, stemmer())
    # "plainly" is an ordinary English word in no chunk: a passage that answers may put it otherwise
    everyday = unknown_share("export traces to jaeger plainly", stats)
    assert 0 < everyday < unknown_share("export traces to jaeger plainly", stats, ordinary=1.0)
    # a term ("zabbix") or a word capitalised as a name ("Quartz", after the first word) weighs all its idf
    assert unknown_share("export traces to zabbix", stats) == unknown_share("export traces to zabbix", stats, 1.0)
    quartz = "export traces to jaeger with Quartz"
    assert unknown_share(quartz, stats) == unknown_share(quartz, stats, ordinary=1.0)
    assert unknown_share("export traces to jaeger with quartz", stats) < unknown_share(quartz, stats)
    # a question in Title Case names nothing this way
    title = "Export Traces To Jaeger With Quartz"
    assert unknown_share(title, stats) < unknown_share(title, stats, ordinary=1.0)


def test_refuse_on_a_weak_best_score_or_on_unknown_words() -> None:
    stats = TermStats(CHUNKS * (MIN_CHUNKS // len(CHUNKS) + 1), stemmer())  # the same shares, enough chunks
    strong = [_result(0.3), _result(0.7)]  # the best score counts, not the first result's
    assert not refuse("export traces to jaeger", strong, stats, min_score=0.45, max_unknown=0.2)
    assert refuse("export traces to jaeger", [_result(0.4)], stats, min_score=0.45, max_unknown=0.2)
    assert refuse("export traces to Zabbix", strong, stats, min_score=0.45, max_unknown=0.2)
    assert not refuse("export traces to Zabbix", strong, stats, min_score=0.45, max_unknown=1.0)
    assert refuse("export traces to jaeger", [], stats, min_score=0, max_unknown=1.0)


def test_a_small_index_does_not_refuse_for_words_it_lacks() -> None:
    # 15 chunks (the sample docs) lack everyday words ("when", "happen"): they say nothing about coverage
    stats = TermStats(CHUNKS * 5, stemmer())
    assert unknown_share("what happens when the collector exports traces?", stats) > 0.2
    assert not refuse("what happens when the collector exports traces?", [_result(0.6)], stats, 0.44, 0.2)


def test_refuse_when_a_named_thing_the_index_holds_is_in_none_of_the_first_results() -> None:
    # The index names Istio and Envoy (a blog post in passing), but what was found is about JSON logs:
    # no unknown word, a fair cosine, and still nothing that answers "Istio's Envoy sidecars".
    stem = stemmer()
    texts = ("How do I make sidecars write access logs in JSON?", "Istio and Envoy in a mesh", "JSON log format")
    stats = TermStats([stem(t) for t in texts], stem)
    question = "How do I make Istio's Envoy sidecars write access logs in JSON format?"
    found = [_result(0.55, "Write access logs in JSON format."), _result(0.5, "The JSON log format.")]
    assert unknown_share(question, stats) < 0.2  # the word rule alone answers
    assert missing_names(question, found, stats) == {"istio", "envoy"}
    assert refuse(question, found, stats, min_score=0.44, max_unknown=0.2)
    # named in the first results (the file path counts too): answered
    named = [_result(0.55, "Write access logs in JSON format.", "mesh/istio-envoy.md"), *found]
    assert not missing_names(question, named, stats)
    assert not refuse(question, named, stats, min_score=0.44, max_unknown=0.2)
    # only the first NAMED_TOP results count
    late = [*([found[0]] * NAMED_TOP), named[0]]
    assert refuse(question, late, stats, min_score=0.44, max_unknown=0.2)
    # a strong best result is answered whatever it names; the first word and lower-case words are not names
    assert not refuse(question, [_result(NAMED_SURE, found[0].text)], stats, min_score=0.44, max_unknown=0.2)
    assert not missing_names("Istio: how do I make envoy sidecars write logs?", found, stats)


def _stats_of(files: list[Path]) -> TermStats:
    stem = stemmer()
    return TermStats([stem(f.read_text(encoding="utf-8")) for f in files], stem)


def test_names_are_runs_of_capitalised_words_that_are_not_ordinary_words() -> None:
    assert names("How do I make Istio's Envoy sidecars write access logs in JSON format?") == ["Istio's Envoy", "JSON"]
    # several words together are a name even when each is an ordinary word
    assert names("Which settings go in the New Relic Python agent's newrelic.ini file?") == ["New Relic Python"]
    # one ordinary word is not, however written; a word's parts that are ordinary words are dropped
    assert names("reading time estimate is way off for my Japanese and Chinese posts") == []
    assert names("does hugo support GitHub-style > [!NOTE] / [!WARNING] callouts?") == ["GitHub"]
    assert names("Grafana dashboards from InfluxDB") == ["InfluxDB"]  # the first word starts the sentence
    assert names("How Do I Configure The OTLP Exporter Endpoint?") == []  # Title Case names nothing


def test_an_ordinary_word_the_passages_put_otherwise_does_not_refuse(shared_data: Path) -> None:
    # Hugo's answer speaks of "CJK languages"; its glossary names Chinese and Japanese. Taken for names,
    # the two words were missing from the answer and the question was refused.
    hugo = shared_data / "markdown_hugo_docs" / "content" / "en"
    answer = hugo / "methods" / "page" / "ReadingTime.md"
    stats = _stats_of([answer, hugo / "quick-reference" / "glossary" / "cjk.md", hugo / "tools" / "search.md"])
    question = "reading time estimate is way off for my Japanese and Chinese posts"
    assert stats.df.get(stats.prepare("Japanese")) and stats.df.get(stats.prepare("Chinese"))
    found = [_result(0.59, answer.read_text(encoding="utf-8"), "methods/page/ReadingTime.md")]  # its measured cosine
    assert not missing_names(question, found, stats)
    assert not refuse(question, found, stats, min_score=0.44, max_unknown=0.2)


def test_a_name_of_ordinary_words_missing_from_the_results_refuses_a_fair_score(shared_data: Path) -> None:
    # The otel blog mentions New Relic in passing; the Python pages found do not: not answered, though the
    # best cosine (0.62 measured) is fair.
    otel = shared_data / "markdown_otel_docs" / "content" / "en"
    python = otel / "docs" / "languages" / "python"
    files = [otel / "blog" / "2023" / "end-user-q-and-a-01.md", python / "getting-started.md", python / "exporters.md"]
    stats = _stats_of(files)
    question = "Which settings go in the New Relic Python agent's newrelic.ini file?"
    found = [_result(0.62, f.read_text(encoding="utf-8"), f.name) for f in files[1:]]
    assert missing_names(question, found, stats) == {"relic"}  # "new" is in them, "Relic" nowhere
    assert refuse(question, found, stats, min_score=0.44, max_unknown=0.2)
    assert not refuse(question, [_result(NAMED_SURE, found[0].text)], stats, min_score=0.44, max_unknown=0.2)


def test_a_question_in_title_case_is_not_checked_for_names(shared_data: Path) -> None:
    page = shared_data / "markdown_otel_docs" / "content" / "en" / "docs" / "languages" / "sdk-configuration"
    answer = page / "otlp-exporter.md"
    stats = _stats_of([answer, page / "general.md"])
    found = [_result(0.55, answer.read_text(encoding="utf-8"), "otlp-exporter.md")]
    question = "OTLP Exporter Endpoint: Which Variable Sets It?"
    which = stats.prepare("Which")
    assert stats.df.get(which) and which not in stats.words(found[0].text)  # "Which" would be a name missing there
    assert not refuse(question, found, stats, min_score=0.44, max_unknown=0.2)


def test_term_stats_follow_the_index_after_an_update(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Collector\n\nThe collector exports traces.\n")
    with Index(load_config({"index": "r" + os.urandom(4).hex()}), embedder=HashEmbedder()) as index:
        index.update([docs])
        stats = index.term_stats()
        assert stats.n == 1 and stats.df[stats.prepare("traces")] == 1 and not stats.df.get("zanzibarquux")
        assert index.term_stats() is stats  # counted once per committed state
        (docs / "b.md").write_text("# Later\n\nThe zanzibarquux setting lives here.\n")
        index.update([docs])
        after = index.term_stats()
        assert after.n == 2 and after.df["zanzibarquux"] == 1


def test_max_unknown_must_be_a_share() -> None:
    from mdrag.errors import ConfigError

    with pytest.raises(ConfigError, match="answer.max_unknown must be between 0 and 1"):
        load_config({"answer.max_unknown": 1.5})


def test_the_readme_demo_question_is_answered_from_the_sample_docs(minilm: Embedder) -> None:
    # examples/demo.sh asks this of examples/docs: the README promises an answer, not a refusal
    config = load_config({"index": "demo" + os.urandom(4).hex()})
    with Index(config, embedder=minilm) as idx:
        idx.update([Path(__file__).resolve().parents[1] / "examples" / "docs"])
        question = "What happens when indexing is interrupted?"
        results = idx.search(question)
        assert results and results[0].rel_path == "guides/incremental-indexing.md"
        stats = idx.term_stats()
        assert not refuse(question, results, stats, config["answer.min_score"], config["answer.max_unknown"])


def test_a_result_holding_every_word_of_the_question_is_not_refused_for_its_cosine(shared_data: Path) -> None:
    # Hugo's settings table names removePathAccents in one row of a long page: the row's chunk scores a
    # cosine of about 0.2 (measured), far below the floor, and the search keeps it as an exact match
    page = shared_data / "markdown_hugo_docs" / "content" / "en" / "configuration" / "all.md"
    other = shared_data / "markdown_hugo_docs" / "content" / "en" / "configuration" / "imaging.md"
    stats = _stats_of([page, other])
    text = page.read_text(encoding="utf-8")
    assert "removePathAccents" in text
    found = [_result(0.2, text, "configuration/all.md")]
    assert not refuse("removePathAccents setting", found, stats, min_score=0.44, max_unknown=0.2)
    # a word the result lacks, or an exact match below the first NAMED_TOP results: the floor refuses
    assert refuse("removePathAccents webp setting", found, stats, min_score=0.44, max_unknown=0.2)
    weak = [_result(0.3, "imaging options", "imaging.md")] * NAMED_TOP + found
    assert refuse("removePathAccents setting", weak, stats, min_score=0.44, max_unknown=0.2)


@pytest.mark.slow
def test_the_rule_on_a_real_glossary_refuses_off_subject_and_unknown_terms_answers_everyday_words(
    minilm: Embedder, shared_data: Path
) -> None:
    # The CNCF glossary (about 320 chunks: enough for the word check) with the real model and the default settings.
    config = load_config({"index": "cncf" + os.urandom(4).hex()})
    with Index(config, embedder=minilm) as idx:
        idx.update([shared_data / "markdown_cncf_glossary"])
        stats = idx.term_stats()
        assert stats.n >= MIN_CHUNKS

        def refused(question: str, **kw: float) -> bool:
            results = idx.search(question)
            return refuse(question, results, stats, config["answer.min_score"], config["answer.max_unknown"], **kw)

        assert refused("How do I bake sourdough bread at home?")  # off the subject: nothing scores
        assert not refused("what is a service mesh")
        # a term the glossary never uses, next to its subject: the passages found cannot answer it
        assert refused("what is a service mesh used with redis")
        # everyday words the glossary does not use ("explained", "plainly") weigh less than a term: answered,
        # where weighing them as terms refused it
        everyday = "what does a service mesh do for my microservices, explained plainly"
        assert not refused(everyday)
        assert refused(everyday, ordinary=1.0)
