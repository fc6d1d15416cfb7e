"""What several benchmarks share: where the data is, running `mdrag`, and the model cache.

Standard library only: llamaindex_compare.py also imports it in LlamaIndex's own virtualenv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HUGO = ROOT.parent / "shared" / "data" / "markdown_hugo_docs"
QA = ROOT / "benchmarks" / "data" / "hugo_qa.jsonl"


def mdrag_cli(home: Path, *args: str) -> tuple[float, str]:
    """Run `python -m mdrag ARGS` with MDRAG_HOME=home, as a user would; (wall seconds, stdout)."""
    env = {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "mdrag", *args], env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - t, p.stdout


def seed_model_cache(home: Path, cache: Path | None) -> None:
    """Copy an existing ONNX export into ``home``: the export is a one-time cost, measured by embedders.py."""
    if cache is not None and (cache / "models").is_dir():
        shutil.copytree(cache / "models", home / "cache" / "models", dirs_exist_ok=True)
