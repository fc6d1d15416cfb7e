#!/usr/bin/env bash
# The README's demo: index the sample docs, search them, then ask the Q&A server.
# The answer is extractive (the best passages, cited) unless an LLM is configured
# (llm.base_url or MARKDOWN_QA_API_BASE_URL).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
export MDRAG_HOME=${MDRAG_HOME:-.mdrag-demo} HF_HUB_OFFLINE=1
PORT=${PORT:-18765}

"$BIN/mdrag" index examples/docs
"$BIN/mdrag" search "how do I change the chunk size?" -k 3
"$BIN/mdrag" status

"$BIN/mdrag" serve examples/docs --port "$PORT" -q &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
# Wait until the server listens (it loads the index first), then ask it.
"$BIN/python" - "$PORT" <<'PY'
import socket, sys, time
deadline = time.time() + 120
while time.time() < deadline:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        break
    except OSError:
        time.sleep(0.3)
PY
"$BIN/mdrag" ask "What happens when indexing is interrupted?" --server "ws://127.0.0.1:$PORT"
