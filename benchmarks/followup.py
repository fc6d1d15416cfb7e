"""Follow-up questions: retrieval of a conversation's second turn, alone, joined, rewritten.

Each pair of benchmarks/data/followup_qa.jsonl is two turns over one corpus (the Hugo docs, the
OpenTelemetry docs, the CNCF glossary): a first question, then a follow-up that means nothing alone
("and how do I nest them?"), each with its gold files, and ``standalone``: the follow-up written out as
a user would ask it alone. The pairs were written from the files, before anything here measured them.

Every query is one search as the Q&A server runs it (default settings: hybrid, ``search.k``,
``search.threshold``, ``search.collapse``); a pair counts as found when one of its gold files is among the
first 5 distinct files (Hit@5; MRR@5: one over that rank). Four queries per pair:

- alone: the follow-up as typed, what mdrag searched for before follow-ups were carried (the baseline);
- joined: ``mdrag.answering.followup.joined_query``, the heuristic without an LLM (the follow-up and the
  previous question together);
- rewrite: ``search_query`` with an LLM configured, the path a server with ``llm.base_url`` takes. The LLM
  is a stand-in: a real OpenAI-compatible HTTP server on 127.0.0.1, started here, whose completion is the
  pair's ``standalone`` text (hand-written, as a good LLM would rewrite). So this row measures the rewrite
  path with an ideal rewrite: an upper bound for an LLM's rewrites, not any model's quality (though even
  a good rewrite can drop a word of the first question that the joined query keeps). A rewrite that
  did not come back as sent (the path fell back to the heuristic) is counted and shown;
- first turn: the first question alone on its own gold, a reference: what a question that stands alone gets
  on the same corpus and ranking (a ceiling in spirit, though a follow-up's gold can be easier to find).

The history carries the first question only (``Turn(question)``, no answer: the pairs hold none).

Each corpus is indexed on first use under ``--home`` (one MDRAG_HOME, one index per corpus) and reused
after; ``--reuse CORPUS HOME`` reads another step's index instead (its default index, when it holds chunks).

    python benchmarks/followup.py --home /tmp/fupbench-home --json /tmp/followup.json
    python benchmarks/followup.py --home DIR --corpus cncf   # one corpus
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from render import command, dig, fint, fnum, fpct, fratio, machine, not_measured, num, prose, table  # noqa: E402
from steps import HOME, OUT, Benchmark, Data, Section, Step  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
QA = HERE / "data" / "followup_qa.jsonl"
CORPORA = {"hugo": "markdown_hugo_docs", "otel": "markdown_otel_docs", "cncf": "markdown_cncf_glossary"}
NAMES = {"hugo": "Hugo docs", "otel": "OpenTelemetry docs", "cncf": "CNCF glossary"}
VARIANTS = ("alone", "joined", "rewrite", "first")  # in the order of the report's rows
TOP = 5  # Hit@5 and MRR@5: the first 5 distinct files


class StandIn(ThreadingHTTPServer):
    """An OpenAI-compatible chat completions server on loopback whose completion is ``reply``."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.reply = ""  # the completion of the next requests: the pair being measured's standalone query
        self.expect = ""  # the follow-up the next request should carry
        self.requests = 0  # chat completion requests served
        self.carried = 0  # of them, those whose messages held the follow-up

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StandIn

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        text = " ".join(str(m.get("content", "")) for m in body.get("messages") or [])
        self.server.requests += 1
        self.server.carried += self.server.expect in text
        reply = self.server.reply
        if body.get("stream"):
            events = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": reply}, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ]
            payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
            ctype = "text/event-stream"
        else:
            message = {"role": "assistant", "content": reply}
            payload = json.dumps({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).encode()
            ctype = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _same(rel_path: str, gold: str) -> bool:
    """A hit's path relative to its indexed folder against a gold path relative to the corpus."""
    return rel_path == gold or gold.endswith("/" + rel_path) or rel_path.endswith("/" + gold)


def rank(files: list[str], gold: list[str]) -> int | None:
    """The 1-based rank of the first gold file among the distinct ``files``, None when absent."""
    return next((i for i, f in enumerate(files, 1) if any(_same(f, g) for g in gold)), None)


def found(r: int | None) -> bool:
    """Whether a rank counts for Hit@5."""
    return r is not None and r <= TOP


def summary(ranks: list[int | None]) -> dict[str, float | int]:
    hits = [r for r in ranks if r is not None and r <= TOP]
    return {
        "n": len(ranks),
        "hit@5": len(hits) / len(ranks) if ranks else 0.0,
        "mrr@5": sum(1 / r for r in hits) / len(ranks) if ranks else 0.0,
    }


def open_index(corpus: str, home: Path, reuse: dict[str, Path]) -> tuple[Any, str]:
    """The corpus's index: the reused home's default index when it holds chunks, else ``home``'s index
    named after the corpus, built from ../shared/data on first use."""
    from mdrag.config import load_config
    from mdrag.index import Index

    if corpus in reuse and reuse[corpus].is_dir():
        index = Index(load_config(home=reuse[corpus]))
        if index.status().chunks:
            return index, f"{reuse[corpus]} (default index, reused)"
        index.close()
    index = Index(load_config({"index": corpus}, home=home))
    if not index.status().chunks:
        docs = DATA / CORPORA[corpus]
        t = time.perf_counter()
        done = index.update([docs])
        print(f"indexed {docs}: {done.chunks_total} chunks in {time.perf_counter() - t:.0f} s")
    return index, f"{home} (index {corpus})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, required=True, help="MDRAG_HOME: each corpus's index, built on first use")
    ap.add_argument(
        "--reuse", nargs=2, action="append", default=[], metavar=("CORPUS", "HOME"), help="read another home's index"
    )
    ap.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="only these corpora (default: all)")
    ap.add_argument("--qa", type=Path, default=QA, help="the pairs (default: benchmarks/data/followup_qa.jsonl)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    reuse = {}
    for corpus, home in args.reuse:
        if corpus not in CORPORA:
            ap.error(f"--reuse {corpus} {home}: the corpus is one of {', '.join(CORPORA)}")
        reuse[corpus] = Path(home)
    os.environ["MDRAG_HOME"] = str(args.home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mdrag.answering.followup import Turn, joined_query, search_query
    from mdrag.config import load_config

    pairs = [json.loads(line) for line in args.qa.read_text(encoding="utf-8").splitlines() if line.strip()]
    corpora = [c for c in CORPORA if c in (args.corpus or CORPORA) and any(p["corpus"] == c for p in pairs)]
    stand_in = StandIn()
    threading.Thread(target=stand_in.serve_forever, daemon=True).start()
    llm = load_config({"llm.base_url": stand_in.base_url, "llm.api_key": "not-a-key", "llm.model": "stand-in"})
    rows, indexes, mode = [], {}, None
    try:
        for corpus in corpora:
            index, where = open_index(corpus, args.home, reuse)
            mode = index.config["search.mode"]
            indexes[corpus] = {"index": where, "chunks": index.status().chunks}
            index.search("warm up the model and the store", k=1)

            def files(query: str, index: Any = index) -> list[str]:
                return list(dict.fromkeys(r.rel_path for r in index.search(query)))  # as the server searches

            for p in (p for p in pairs if p["corpus"] == corpus):
                first, follow = p["turns"]
                history = [Turn(first["question"])]
                stand_in.reply, stand_in.expect = p["standalone"], follow["question"]
                queries = {
                    "alone": follow["question"],
                    "joined": joined_query(follow["question"], history),
                    "rewrite": search_query(follow["question"], history, llm),
                    "first": first["question"],
                }
                row: dict[str, Any] = {"id": p["id"], "corpus": corpus, "queries": queries, "ranks": {}, "top": {}}
                for v, q in queries.items():
                    ranked = files(q)
                    row["ranks"][v] = rank(ranked, first["gold"] if v == "first" else follow["gold"])
                    row["top"][v] = ranked[:3]
                row["rewrite_as_sent"] = queries["rewrite"] == p["standalone"]
                rows.append(row)
            index.close()
    finally:
        stand_in.shutdown()

    def by(variant: str, corpus: str | None = None) -> dict[str, float | int]:
        return summary([r["ranks"][variant] for r in rows if corpus in (None, r["corpus"])])

    out: dict[str, Any] = {
        "qa": args.qa.name,
        "pairs": len(rows),
        "mode": mode,
        "variants": {v: by(v) for v in VARIANTS},
        # the pairs whose follow-up alone misses its gold (no gold file in the top 5): the ones a carried
        # conversation is for; on the others the follow-up's own words were enough
        "alone_missed": {v: summary([r["ranks"][v] for r in rows if not found(r["ranks"]["alone"])]) for v in VARIANTS},
        "corpora": {c: {"name": NAMES[c], **indexes[c], **{v: by(v, c) for v in VARIANTS}} for c in corpora},
        "rewrite_requests": stand_in.requests,
        "rewrite_carried_question": stand_in.carried,
        "rewrite_fell_back": sum(not r["rewrite_as_sent"] for r in rows),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": machine(),
        "questions": rows,
    }
    base = out["variants"]["alone"]
    print(f"{len(rows)} follow-up pairs ({args.qa.name}), search mode {mode}, Hit@5 / MRR@5 of the follow-up's gold:")
    print(f"{'query':<34} {'all':>13} " + " ".join(f"{c:>13}" for c in corpora) + f" {'Hit@5 / alone':>14}")
    labels = {
        "alone": "follow-up alone (baseline)",
        "joined": "joined with the previous question",
        "rewrite": "rewrite (ideal, stand-in LLM)",
        "first": "first turn on its own gold",
    }
    for v in VARIANTS:
        cells = [out["variants"][v], *(out["corpora"][c][v] for c in corpora)]
        ratio = out["variants"][v]["hit@5"] / base["hit@5"] if base["hit@5"] else float("nan")
        print(
            f"{labels[v]:<34} " + " ".join(f"{c['hit@5']:>6.3f}/{c['mrr@5']:.3f}" for c in cells) + f" {ratio:>13.2f}x"
        )
    hard = out["alone_missed"]
    print(
        f"on the {hard['alone']['n']} pairs whose follow-up alone misses: joined Hit@5 {hard['joined']['hit@5']:.3f}, "
        f"rewrite {hard['rewrite']['hit@5']:.3f}, first turn {hard['first']['hit@5']:.3f}"
    )
    print(
        f"rewrite path: {stand_in.requests} requests to the stand-in, {stand_in.carried} carried the follow-up, "
        f"{out['rewrite_fell_back']} fell back to the heuristic"
    )
    for r in rows:
        missed = [v for v in ("joined", "rewrite") if not found(r["ranks"][v])]
        if missed:
            print(f"  {r['id']} missed by {', '.join(missed)}: {r['queries']['alone']!r}")
            for v in missed:
                print(f"      {v}: {r['queries'][v]!r} -> {', '.join(r['top'][v]) or 'no result'}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


# -- in the report (benchmarks/report.py) --------------------------------------

TITLE = "Follow-up questions (two-turn conversations)"
ROWS = (
    ("alone", "the follow-up alone (before: what mdrag searched)"),
    ("joined", "joined with the previous question (no LLM: `joined_query`)"),
    ("rewrite", "rewritten (LLM configured: `search_query`; ideal hand-written rewrite from a loopback stand-in)"),
    ("first", "reference: the first turn alone, on its own gold"),
)


def section_followup(data: Data) -> list[str]:
    f = data.get("followup")
    lines = [f"### {TITLE}", ""]
    if not f:
        return lines + [not_measured("followup", data), ""]
    corpora = list(f.get("corpora") or {})
    lines += prose("followup", cmd=command(data, "followup"), pairs=fint(f.get("pairs")), mode=f.get("mode"))
    base = num(dig(f, "variants", "alone", "hit@5"))
    rows = []
    for key, label in ROWS:
        hit = num(dig(f, "variants", key, "hit@5"))
        rows.append(
            [
                label,
                fpct(hit),
                fnum(dig(f, "variants", key, "mrr@5"), 3),
                fratio(hit / base if hit is not None and base else None),
                fpct(dig(f, "alone_missed", key, "hit@5")),
                *(fpct(dig(f, "corpora", c, key, "hit@5")) for c in corpora),
            ]
        )
    heads = [f"{dig(f, 'corpora', c, 'name')} ({fint(dig(f, 'corpora', c, 'alone', 'n'))} pairs)" for c in corpora]
    hard = f"Hit@5 where the follow-up alone misses ({fint(dig(f, 'alone_missed', 'alone', 'n'))} pairs)"
    lines += table(["search query", "Hit@5", "MRR@5", "Hit@5 / alone", hard, *heads], rows)
    lines += [
        f"The rewrite path sent {f.get('rewrite_requests')} requests to the stand-in "
        f"({f.get('rewrite_carried_question')} carried the follow-up); "
        f"{f.get('rewrite_fell_back')} rewrites fell back to the heuristic. Machine: {f.get('machine')}.",
        "",
    ]
    missed = [
        (q, [v for v in ("joined", "rewrite") if not found(dig(q, "ranks", v))])
        for q in f.get("questions") or []
        if isinstance(q, dict)
    ]
    missed = [(q, vs) for q, vs in missed if vs]
    if missed:
        lines += ["Pairs whose gold the joined query or the rewrite leaves out of the top 5 (its first files):", ""]
        for q, vs in missed:
            tops = "; ".join(f"{v}: {', '.join(f'`{p}`' for p in dig(q, 'top', v) or []) or 'none'}" for v in vs)
            lines.append(
                f'- {q.get("id")} "{dig(q, "queries", "alone")}" (gold rank alone: '
                f"{dig(q, 'ranks', 'alone') or 'none'}): {tops}"
            )
        lines.append("")
    return lines


BENCHMARK = Benchmark(
    # reuses the refusal steps' indexes (run before it) when they are there, else builds its own
    steps=(
        Step(
            "followup",
            240,
            (
                "--home",
                str(OUT / "followup-home"),
                *("--reuse", "hugo", str(HOME)),
                *("--reuse", "otel", str(OUT / "refusal-otel")),
                *("--reuse", "cncf", str(OUT / "refusal-cncf")),
            ),
            ("pairs", "variants", "corpora", "rewrite_fell_back"),
            ("cpus",),
        ),
    ),
    sections=(Section(TITLE, 35, section_followup, under="Retrieval quality"),),
)


if __name__ == "__main__":
    main()
