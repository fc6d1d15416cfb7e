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

# --- stores ---

# Most rows one store search or query returns: Milvus refuses a search's limit (topk) and a query's
# window past 16,384; the search core asks no store for more, so every backend returns the same lists.
STORE_MAX_ROWS = 16384

# --- MCP ---

# --- server ---
