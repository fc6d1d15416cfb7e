"""The ONNX embedder: the packaged MiniLM exported once, run by onnxruntime without torch."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime)")

from mdrag.embedding import onnx, onnx_files  # noqa: E402
from mdrag.embedding.local import DEFAULT_MODEL, LocalEmbedder  # noqa: E402
from mdrag.embedding.onnx import (  # noqa: E402
    OnnxEmbedder,
    OpenVinoEmbedder,
    export_onnx,
    onnx_available,
    onnx_model_path,
    openvino_available,
)
from mdrag.embedding.priority import NICE, run_yielding  # noqa: E402
from mdrag.errors import EmbeddingError  # noqa: E402
from mdrag.fileio import file_sha256  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

TEXTS = [
    "How do I install the tool on Linux?",
    "Installing on Linux",
    "Chocolate cake recipe",
    "",
    "a",
    "Hugo",
    "What is a taxonomy?",
    "Configure pagination: set `pagerSize = 10` in hugo.toml.",
    "## Front matter\n\nThe `date`, `title` and `draft` fields are read from YAML, TOML or JSON.",
    "Ünïcödé çafé naïve résumé",
    "日本語のテキストと中文文本",
    "Emoji 🎉🚀 and symbols ∑ ∫ ≤ ≥",
    "{{ range .Pages }}{{ .Title }}{{ end }}",
    "def f(x):\n    return x ** 2  # squares\n",
    "SELECT * FROM pages WHERE draft = false ORDER BY date DESC;",
    "https://gohugo.io/content-management/front-matter/#fields",
    "   leading and trailing whitespace   ",
    "UPPER CASE TEXT SHOUTING ABOUT BUILD ERRORS",
    "The quick brown fox jumps over the lazy dog.",
    "Deploy to GitHub Pages with a workflow that runs hugo --minify.",
    "Image processing: resize, fill and fit images in a page bundle.",
    "multilingual site: languages.en.weight = 1; languages.fr.weight = 2",
    "\t\ttabs\tand\nnewlines\n\n\n",
    "1234567890 3.14159 2e-10 0xFF",
    "<div class='note'>HTML <b>inside</b> markdown</div>",
    "Render hooks override how links, images and headings are rendered.",
    "word " * 20,
    "Shortcodes are simple snippets inside content files calling built-in or custom templates. " * 4,
    # Longer than the 256-token window: both backends must truncate the same way.
    "Hugo builds static sites from Markdown content, templates and configuration files quickly. " * 40,
    "antidisestablishmentarianism supercalifragilisticexpialidocious " * 30,
]


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding the export of the packaged model, made once per run."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    OnnxEmbedder(cache_dir=cache).embed(["warm up"])
    return cache


@pytest.fixture(scope="session")
def onnx_embedder(onnx_cache: Path) -> OnnxEmbedder:
    return OnnxEmbedder(cache_dir=onnx_cache)


needs_openvino = pytest.mark.skipif(not openvino_available(), reason="openvino is not installed (pip install openvino)")
RUNTIMES = ["onnx", pytest.param("openvino", marks=needs_openvino)]
CLASSES = {"onnx": "OnnxEmbedder", "openvino": "OpenVinoEmbedder"}


@pytest.fixture(scope="session")
def openvino_embedder(onnx_cache: Path) -> OnnxEmbedder:
    return OpenVinoEmbedder(cache_dir=onnx_cache)


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_available() -> None:
    assert onnx_available()
    assert isinstance(openvino_available(), bool)


@pytest.mark.parametrize("runtime_module", ["onnxruntime", pytest.param("openvino", marks=needs_openvino)])
def test_a_runtime_that_cannot_be_imported_says_what_to_do(
    runtime_module: str, onnx_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed (so `auto` picks it) but broken: a clear error, and no pointless export again."""
    import importlib

    real_import = importlib.import_module

    def broken(name: str, package: str | None = None) -> object:
        if name == runtime_module:
            raise ImportError("libopenblas.so.0: cannot open shared object file")  # found, but will not load
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", broken)
    exports: list[object] = []
    monkeypatch.setattr(onnx, "export_onnx", lambda *a: exports.append(a))
    monkeypatch.setattr(onnx, "prepare_onnx", lambda *a: exports.append(a))
    cls = OpenVinoEmbedder if runtime_module == "openvino" else OnnxEmbedder
    embedder = cls(cache_dir=onnx_cache, threads=7)  # a thread count no other test uses: a new session
    message = rf"{runtime_module} is installed but cannot be imported.*embedding.backend"
    with pytest.raises(EmbeddingError, match=message):
        embedder.embed(["hello"])
    assert exports == []


@needs_openvino
def test_openvino_is_used_without_its_telemetry(onnx_cache: Path, tmp_path: Path) -> None:
    """`import openvino` alone sends a usage event (a forked process, a client id in ~/intel) from its model
    converter; mdrag's imports neither the converter nor the telemetry, which a later import still finds."""
    code = (
        "import sys; from pathlib import Path; from mdrag.embedding.onnx import OpenVinoEmbedder\n"
        f"OpenVinoEmbedder(cache_dir=Path({str(onnx_cache)!r})).embed(['hello'])\n"
        "print('openvino.tools.ovc' in sys.modules, 'openvino_telemetry' in sys.modules,"
        " sys.modules.get('openvino.tools.ovc', 1) is not None)\n"
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("CI", None)  # OpenVINO stays quiet in CI: test the default
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True"], "neither the converter nor telemetry imported"
    assert not (home / "intel").exists(), "no OpenVINO client id or stats written"


def test_identity_window_and_counts_match_the_torch_backend(tmp_path: Path, mdrag_home: Path) -> None:
    assert OnnxEmbedder().cache_dir == mdrag_home / "cache"
    cache = tmp_path / "cache"
    e, t = OnnxEmbedder(cache_dir=cache), LocalEmbedder()
    assert e.model_id == t.model_id == DEFAULT_MODEL
    assert OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=cache).model_id == DEFAULT_MODEL
    assert e.identity == t.identity == {"model": DEFAULT_MODEL, "dimension": 384}
    assert e.max_tokens == t.max_tokens == 256
    assert e.count_tokens(TEXTS) == t.count_tokens(TEXTS)
    assert max(e.count_tokens(TEXTS)) > 256, "one text must be longer than the window"
    assert e.count_tokens([]) == []
    assert not cache.exists(), "nothing is exported until the first embedding"


def test_cache_path_is_named_and_keyed_by_the_weights(tmp_path: Path) -> None:
    model_dir = LocalEmbedder().model_dir
    p = onnx_model_path(model_dir, tmp_path, "all-MiniLM-L6-v2")
    assert p.name == "model.onnx" and p.parent.parent == tmp_path / "models"
    assert p.parent.name.startswith("all-MiniLM-L6-v2-")
    assert onnx_model_path(model_dir, tmp_path, "all-MiniLM-L6-v2") == p

    other = tmp_path / "other-model"
    other.mkdir()
    (other / "config.json").write_text((model_dir / "config.json").read_text().replace("384", "385"))
    assert onnx_model_path(other, tmp_path).parent.name.startswith("other-model-")
    assert onnx_model_path(other, tmp_path).parent.name.split("-")[-1] != p.parent.name.split("-")[-1]


def test_export_without_torch_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(EmbeddingError, match=r"pip install .*'mdrag-docs\[torch\]'.*embedding\.backend=torch"):
        export_onnx(LocalEmbedder().model_dir, tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()


def test_pipelines_with_more_than_pooling_are_refused(tmp_path: Path) -> None:
    src = LocalEmbedder().model_dir
    model = tmp_path / "with-dense"
    model.mkdir()
    shutil.copy(src / "config.json", model / "config.json")
    modules = json.loads((src / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (model / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(EmbeddingError, match=r"Dense.*embedding\.backend=torch"):
        OnnxEmbedder(str(model), cache_dir=tmp_path)


@pytest.mark.slow
def test_export_is_cached_with_its_checksum(onnx_cache: Path, onnx_embedder: OnnxEmbedder) -> None:
    path = onnx_embedder.onnx_path
    assert path.is_file() and path.is_relative_to(onnx_cache / "models")
    assert (path.parent / "model.onnx.sha256").read_text().split()[0] == file_sha256(path)
    assert not [f for f in path.parent.iterdir() if f.name.startswith(".")], "no temp files left"
    assert OnnxEmbedder(cache_dir=onnx_cache).session is onnx_embedder.session, "one session per process and file"


@pytest.mark.slow
def test_vectors_match_the_torch_backend(runtime: str, request: pytest.FixtureRequest, minilm) -> None:
    e = request.getfixturevalue(f"{runtime}_embedder")
    got, want = e.embed(TEXTS), minilm.embed(TEXTS)
    assert got.shape == want.shape == (len(TEXTS), 384) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cosines = (got * want).sum(axis=1)
    assert cosines.min() >= 0.9999, [(TEXTS[i][:40], float(c)) for i, c in enumerate(cosines) if c < 0.9999]
    # Padding to the longest text of a batch does not change a vector.
    alone = np.vstack([e.embed([t]) for t in TEXTS[-3:]])
    np.testing.assert_allclose(alone, got[-3:], atol=1e-3 if runtime == "openvino" else 1e-5)
    if runtime == "openvino":  # queries run at full precision: torch's vector, not bf16's
        np.testing.assert_allclose(e.embed_query(TEXTS[0]), want[0], atol=1e-4)
    else:
        np.testing.assert_allclose(e.embed_query(TEXTS[0]), got[0], atol=1e-5)


@needs_openvino
@pytest.mark.slow
def test_openvino_full_precision_matches_onnxruntime(onnx_cache: Path, onnx_embedder: OnnxEmbedder) -> None:
    texts = TEXTS[::4]
    v = OpenVinoEmbedder(cache_dir=onnx_cache, precision="f32").embed(texts)
    np.testing.assert_allclose(v, onnx_embedder.embed(texts), atol=1e-4)


@pytest.mark.slow
def test_a_fresh_process_embeds_without_torch(
    runtime: str, request: pytest.FixtureRequest, onnx_cache: Path, tmp_path: Path
) -> None:
    e = request.getfixturevalue(f"{runtime}_embedder")
    mtime = e.onnx_path.stat().st_mtime_ns
    script = (
        "import json, sys\n"
        f"from mdrag.embedding.onnx import {CLASSES[runtime]}\n"
        f"v = {CLASSES[runtime]}(cache_dir={str(onnx_cache)!r}).embed({TEXTS[:3]!r})\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules)\n"
        "print(json.dumps({'heavy': heavy, 'v': v.tolist()}))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "MDRAG_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"},
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["heavy"] == [], f"imported {out['heavy']} although the export exists"
    np.testing.assert_allclose(np.array(out["v"], dtype=np.float32), e.embed(TEXTS[:3]), atol=1e-5)
    assert e.onnx_path.stat().st_mtime_ns == mtime, "the export was found, not redone"


@pytest.mark.slow
def test_a_corrupt_export_is_redone(onnx_cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(onnx_cache, cache)
    e = OnnxEmbedder(cache_dir=cache)
    path = e.onnx_path
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 4096] = b"\x00" * 4096  # a flipped block in the weights
    path.write_bytes(bytes(data))
    assert not onnx_files.checksum_ok(path)
    with caplog.at_level(logging.WARNING, logger="mdrag.embedding.onnx"):
        v = e.embed(TEXTS[:2])
    assert "does not match its checksum" in caplog.text
    assert onnx_files.checksum_ok(path)
    np.testing.assert_allclose(v, OnnxEmbedder(cache_dir=onnx_cache).embed(TEXTS[:2]), atol=1e-5)


def test_auto_backend_picks_the_fastest_installed_runtime(mdrag_home: Path) -> None:
    from mdrag.config import load_config
    from mdrag.embedding import make_embedder
    from mdrag.embedding.local import LocalEmbedder
    from mdrag.embedding.onnx import OnnxEmbedder, OpenVinoEmbedder, openvino_available

    auto = make_embedder(load_config())
    assert type(auto) is (OpenVinoEmbedder if openvino_available() else OnnxEmbedder)
    assert isinstance(make_embedder(load_config({"embedding.device": "cuda"})), LocalEmbedder)
    assert type(make_embedder(load_config({"embedding.backend": "onnx"}))) is OnnxEmbedder
    assert isinstance(make_embedder(load_config({"embedding.backend": "torch"})), LocalEmbedder)


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a nice value per thread is Linux's")


@linux_only
def test_the_yielding_thread_runs_at_a_lower_priority_and_hands_back_errors() -> None:
    assert run_yielding(_nice) == min(19, _nice() + NICE)
    assert run_yielding(threading.get_native_id) != threading.get_native_id()

    def fails() -> None:
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        run_yielding(fails)


@linux_only
def test_background_runs_the_model_in_the_yielding_thread_on_one_thread_with_the_same_vectors(
    runtime: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = request.getfixturevalue(f"{runtime}_embedder")
    bg = e.background()
    assert bg is e.background() and bg.model_id == e.model_id and bg.threads == 1
    runs: list[tuple[int, int]] = []  # (thread, its nice value) of each model run
    infer = bg._infer

    def spied(feed: dict[str, np.ndarray]) -> np.ndarray:
        runs.append((threading.get_native_id(), _nice()))
        return infer(feed)

    monkeypatch.setattr(bg, "_infer", spied)
    got = bg.embed(TEXTS)
    assert runs and {n for _, n in runs} == {min(19, _nice() + NICE)}
    assert threading.get_native_id() not in {t for t, _ in runs}
    np.testing.assert_allclose(got, e.embed(TEXTS), atol=1e-6)


def test_a_query_runs_on_one_thread_while_the_yielding_thread_works(
    runtime: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = request.getfixturevalue(f"{runtime}_embedder")
    if e.threads == 1:
        pytest.skip("one core: queries run on one thread anyway")
    threads: list[int] = []  # the threads of the model each run used
    infer = type(e)._infer

    def spied(self: OnnxEmbedder, feed: dict[str, np.ndarray]) -> np.ndarray:
        threads.append(self.threads)
        return infer(self, feed)

    monkeypatch.setattr(type(e), "_infer", spied)
    monkeypatch.setattr(onnx, "yielding_busy", lambda: False)
    quiet = e.embed_query(TEXTS[0])
    monkeypatch.setattr(onnx, "yielding_busy", lambda: True)
    busy = e.embed_query(TEXTS[0])
    assert threads == [e.threads, 1]
    np.testing.assert_allclose(busy, quiet, atol=1e-6)


@pytest.mark.slow
def test_a_kept_index_embeds_in_the_yielding_thread_and_stores_the_vectors_mdrag_index_would(
    runtime: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mdrag.config import load_config
    from mdrag.index import Index
    from mdrag.index.keeper import IndexKeeper

    e = request.getfixturevalue(f"{runtime}_embedder")
    docs = tmp_path / "docs"
    docs.mkdir()
    pages = {docs / f"page{i}.md": f"# Page {i}\n\n{text}\n" for i, text in enumerate(TEXTS[6:20])}
    later = list(pages)[7:]  # added once the kept index is built: its first build embeds on every core
    for path, text in pages.items():
        if path not in later:
            path.write_text(text)
    yielded: list[int] = []
    run = onnx.run_yielding

    def counted(fn: Any) -> Any:
        yielded.append(1)
        return run(fn)

    monkeypatch.setattr(onnx, "run_yielding", counted)
    indexes = [Index(load_config({"index": name}), embedder=e) for name in ("plain", "kept")]
    plain, kept = indexes
    try:
        keeper = IndexKeeper(kept, [docs])
        assert keeper.wait(keeper.start(), timeout=120)  # a first build: no search waits on it, every core
        assert not yielded
        for path in later:
            path.write_text(pages[path])
        assert keeper.wait(keeper.request("periodic rescan"), timeout=120)  # a full update, not a few files
        keeper.close()
        assert yielded  # an update of a built index gives way to searches
        yielded.clear()
        plain.update([docs])  # as `mdrag index` does: every core, at the process's priority
        assert not yielded
        assert kept.status().chunks == plain.status().chunks > 0
        for query in ("taxonomy", "front matter fields", "deploy with a workflow"):
            want = [(r.chunk_id, r.score) for r in plain.search(query, k=10, mode="dense")]
            got = [(r.chunk_id, r.score) for r in kept.search(query, k=10, mode="dense")]
            assert [c for c, _ in got] == [c for c, _ in want]
            np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-5)
    finally:
        for index in indexes:
            index.close()


def test_a_models_first_inference_runs_alone(onnx_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two first inferences at once have hung OpenVINO for good: a model's first runs alone
    in the process, the others side by side. Each inference waits (at most a second) for another to join it."""
    monkeypatch.setattr(onnx, "_inferred", set())
    monkeypatch.setattr(onnx, "yielding_busy", lambda: False)  # a query runs on this embedder, not its twin
    e = OnnxEmbedder(cache_dir=onnx_cache, threads=1)
    real = e._infer
    inside: list[int] = []
    lock = threading.Lock()

    def run_together(times: float) -> int:
        """Two queries at once; the most inferences that were inside the model together."""
        meet = threading.Barrier(2, timeout=times)
        most = [0]

        def infer(feed: dict[str, np.ndarray]) -> np.ndarray:
            with lock:
                inside.append(1)
                most[0] = max(most[0], len(inside))
            try:
                meet.wait()
            except threading.BrokenBarrierError:  # the other could not come in
                pass
            try:
                return real(feed)
            finally:
                with lock:
                    inside.pop()

        monkeypatch.setattr(e, "_infer", infer)
        threads = [threading.Thread(target=e.embed_query, args=(q,)) for q in ("first", "second")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads), "an inference hung"
        assert most[0], "the queries did not reach the model"
        return most[0]

    assert run_together(1.0) == 1, "the model's first inference ran beside another"
    assert run_together(30.0) == 2, "later inferences wait for nothing"
