"""The fixed knobs: limits and policies that are not settings, each with the reason for its value.

A value a user may want to change is a setting (:mod:`mdrag.config`); a value
here is fixed by a protocol, a library's limit or a measurement (the figures
live in ``benchmarks/RESULTS.md``). Modules import what they use from here,
so that one fact is written once.
"""

from __future__ import annotations

# --- what a client may send (WebSocket and MCP alike) ---

MAX_QUESTION_CHARS = 4000  # longer questions (and filter values) are refused, not truncated

# --- indexing ---

# --- search and answers ---

# The word check of mdrag.relevance needs this many chunks: a smaller index's vocabulary says little
# about what it covers (in the 15 chunks of examples/docs, "when" and "happen" are in none).
MIN_CHUNKS = 200
# The things a question names must be in one of this many first results, unless the best result's
# cosine reaches NAMED_SURE: both picked on the OpenTelemetry and Hugo question sets
# (benchmarks/refusal.py says what was tuned where).
NAMED_TOP = 3
NAMED_SURE = 0.65
MAX_SOURCE_CHARS = 12_000  # characters of passages put in an answer's prompt, which must fit the chat model's context
MAX_EXTRACTIVE = 5  # passages quoted by an extractive answer (no LLM)
MAX_ERROR_BODY = 64 * 1024  # bytes of an LLM or embedding API's error response quoted from: its message, not a page

# --- stores ---

# --- MCP ---

# --- server ---

# A message over server.max_message_bytes (at most 1 MiB) is answered with an error and the connection
# stays open; the server must hold a message to answer it, so one over this ceiling closes it (1009).
MESSAGE_CEILING_BYTES = 16 << 20
