"""The fixed knobs: limits and policies that are not settings, each with the reason for its value.

A value a user may want to change is a setting (:mod:`mdrag.config`); a value
here is fixed by a protocol, a library's limit or a measurement (the figures
live in ``benchmarks/RESULTS.md``). Modules import what they use from here,
so that one fact is written once.
"""

from __future__ import annotations

# --- what a client may send (WebSocket and MCP alike) ---

MAX_QUESTION_CHARS = 4000  # longer questions (and filter values) are refused, not truncated
# The earlier turns a follow-up question may carry (mdrag.answering.followup): a query message with more
# is refused, a Python caller's history is cut to its newest turns, and the page and `mdrag ask` send only
# these. The rewrite reads the turns to resolve "it" and "that", which the last few turns settle; more
# would only make every message and prompt bigger. A previous answer is read from its beginning, which
# says what it was about; the total keeps a full query message well under server.max_message_bytes.
MAX_HISTORY_TURNS = 6
MAX_HISTORY_ANSWER_CHARS = 1000  # of each previous answer
MAX_HISTORY_CHARS = 8000  # of all the turns' questions and answers together

# --- indexing ---

# --- search and answers ---

# The word check of mdrag.retrieval.relevance needs this many chunks: a smaller index's vocabulary says little
# about what it covers (in the 15 chunks of examples/docs, "when" and "happen" are in none).
MIN_CHUNKS = 200
# The things a question names must be in one of this many first results, unless the best result's
# cosine reaches NAMED_SURE: both picked on the OpenTelemetry and Hugo question sets
# (benchmarks/refusal.py says what was tuned where).
NAMED_TOP = 3
NAMED_SURE = 0.65
# What an unknown word that is an ordinary English word weighs in the word check (mdrag.retrieval.relevance),
# as a share of its idf; a term the index lacks weighs all of it. Picked on the ranking pool's tuning halves and the
# older question sets (benchmarks/RESULTS.md, "Refusal on the ranking pool"; 0.4 and 0.5 differ by one question).
ORDINARY_UNKNOWN = 0.5
# Notes vaults (mdrag.retrieval.linked): the best candidates of a search whose links lift the notes they link to.
# On the vault question set, 1 source lowered the link questions' BM25 MRR@5 (0.705 to 0.621 at weight 0.2) where 3
# raised it (0.758), and 5 ranked as 3 did (RESULTS.md, "Notes vault questions"): past the first few hits, a hit's
# links are its own subject's, not the question's.
LINK_SOURCES = 3
MAX_SOURCE_CHARS = 12_000  # characters of passages put in an answer's prompt, which must fit the chat model's context
MAX_EXTRACTIVE = 5  # passages quoted by an extractive answer (no LLM)
MAX_ERROR_BODY = 64 * 1024  # bytes of an LLM or embedding API's error response quoted from: its message, not a page
# Bytes of a reranker's answer read (mdrag.retrieval.rerank): scores for rerank.top_n (at most 200) documents,
# even with each document's text echoed back (Jina and Cohere may), fit well within it.
MAX_RERANK_ANSWER = 4 * 2**20
# Most characters one `get` (mdrag.retrieval.documents) returns, all documents together: an agent's tool output
# goes into its context, and MCP clients cut long outputs (Claude Code at 25,000 tokens by default, about 4
# characters each); past it, the answer says how to ask for less (a line range, a section, fewer files).
GET_MAX_CHARS = 80_000
# Most documents one `get` names (a list or a glob): each is read and parsed, and an agent that wants more
# files than this wants `search`, or a narrower glob.
GET_MAX_FILES = 50
# Rewriting a follow-up into a standalone search query (mdrag.answering.followup) is one short completion
# before the search: a model that has not written it in this time is overloaded or still loading, and the
# heuristic query (the previous question joined to the follow-up) is ready at once, so waiting longer
# would only delay the answer. A query is a line of words: a longer reply is not one (it is refused).
REWRITE_TIMEOUT_S = 10.0
REWRITE_MAX_TOKENS = 96
REWRITE_MAX_CHARS = 400

# --- stores ---

# Most rows one store search or query returns: Milvus refuses a search's limit (topk) and a query's
# window past 16,384; the search core asks no store for more, so every backend returns the same lists.
STORE_MAX_ROWS = 16384

# --- MCP ---

# MCP watches no files: a docset's index is brought up to date when a `search` finds it older than this, so
# the interval bounds how stale an answer is after the docs change (`mdrag knowledge refresh`, an edit), and
# an update of an unchanged folder is a scan. The WebSocket server refreshes every `server.reload_interval`
# (300 s), but that is only a backstop behind its file watcher, which reacts within seconds.
MCP_REFRESH_INTERVAL_S = 30.0
MCP_SEARCH_WAIT_S = 3.0  # an assistant's tool call answers in seconds: then `search` answers with what is ready
MCP_HINT_BUDGET_S = 0.006  # search_docs answers within 10 ms of its call: the ranked sections get what is left
MCP_HINT_SECTIONS = 3  # starting points appended to search_docs: its answer is the instructions, not these
MCP_DEFAULT_K = 5  # passages `search` returns when the call does not say (the tool's schema advertises it)
MCP_MAX_K = 50  # the most passages `search` returns: more would fill the assistant's context, not inform it
MCP_MAX_MESSAGE_BYTES = 16 * 2**20  # a longer line from the client is refused unread: MCP's messages are small
MCP_MAX_DEPTH = 32  # JSON nesting a message may have: MCP's own messages use a few levels, a parser's stack more
MCP_CHECK_INLINE_CHARS = 2**16  # a longer line is checked in a worker thread, not holding up other requests
MCP_PROGRESS_EVERY_S = 0.5  # how often a waiting `search` looks at the update's progress (for notifications)
MCP_HINT_CACHE_SIZE = 256  # (index, keywords) -> ranked sections kept, so search_docs' next call has them at once
MCP_HTTP_PATH = "/mcp"  # the endpoint of `mdrag mcp --http`: the path the MCP SDK's servers and examples use
MCP_HTTP_STOP_S = 3  # on stop, open HTTP streams (a client's GET stream never ends) get this long, then are cut
# An idle connection is kept longer than a client keeps its own (httpx: 5 s): the client closes it first. At
# uvicorn's 5 s, a request sent just as the server closed the connection was lost without a reply.
MCP_HTTP_KEEP_ALIVE_S = 75
# `mdrag mcp --http` serves this many requests (POSTs) at once, in the order they came; another waits for its
# turn up to MCP_HTTP_QUEUE_S, then is refused with 503 and Retry-After: a clear "busy", well before a client's
# own timeout (the MCP SDK's: 30 s) would give up on a silent server. 200 sessions at once on 2 busy cores:
# benchmarks/mcp_sessions.py.
MCP_HTTP_MAX_REQUESTS = 16
MCP_HTTP_QUEUE_S = 15.0
MCP_HTTP_RETRY_AFTER_S = 2  # what a refused client is told to wait before it tries again

# --- server ---

# A message over server.max_message_bytes (at most 1 MiB) is answered with an error and the connection
# stays open; the server must hold a message to answer it, so one over this ceiling closes it (1009).
MESSAGE_CEILING_BYTES = 16 << 20
