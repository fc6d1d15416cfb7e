"""What the report's sections are written with: formatting of figures, tables, prose templates.

Every benchmark script's report functions (its ``BENCHMARK``'s sections, targets and plots) use these;
benchmarks/report.py puts them together. The prose of a section lives in ``templates/<name>.md``
(:func:`prose`), its figures' formatting here.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from steps import NA, Data, Json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TEMPLATES = HERE / "templates"  # the sections' prose, Markdown with {placeholders}

# embedder class recorded by hugo_index.py / scifact.py -> backend name in embedders.json
EMBEDDER_BACKEND = {"OnnxEmbedder": "onnx", "OpenVinoEmbedder": "openvino", "LocalEmbedder": "torch"}
MODES = ("dense", "bm25", "hybrid")

PLOT_SIZE = (8.0, 4.8)  # inches; at 150 dpi: 1200 px, readable scaled to 800 px
PLOT_DPI = 150


def show_path(p: str | Path) -> str:
    """A path relative to the project root when it lies inside it."""
    s = str(p)
    if not s.startswith("/"):
        return s
    try:
        return Path(s).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return s


def setting(key: str) -> Any:
    """mdrag's default for a setting (mdrag.settings.DEFAULTS: key -> (type, default)); None if unknown."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        from mdrag.settings import DEFAULTS
    except Exception:
        return None
    entry = DEFAULTS.get(key)
    return entry[1] if entry else None


def dig(obj: Any, *path: str | int) -> Any:
    """obj[path[0]][path[1]]..., None where any step is missing."""
    for key in path:
        if isinstance(obj, dict):
            obj = obj.get(key) if isinstance(key, str) else obj.get(str(key))
        elif isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
            obj = obj[key]
        else:
            return None
    return obj


def num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x):
        return None
    return float(x)


def who(obj: Json | None) -> str:
    """The embedder a run used, as its JSON records it."""
    obj = obj or {}
    backend = obj.get("backend")
    return str(obj.get("embedder") or (f"backend {backend}" if backend else "embedder not recorded"))


def div(a: Any, b: Any) -> float | None:
    a, b = num(a), num(b)
    return a / b if a is not None and b else None


def div_sub(a: Any, b: Any) -> float | None:
    a, b = num(a), num(b)
    return None if a is None or b is None else a - b


# -- formatting ---------------------------------------------------------------


def fnum(x: Any, digits: int = 2) -> str:
    v = num(x)
    return NA if v is None else f"{v:,.{digits}f}"


def fint(x: Any) -> str:
    v = num(x)
    return NA if v is None else f"{v:,.0f}"


def fms(x: Any) -> str:
    """Milliseconds with as many decimals as the size needs."""
    v = num(x)
    if v is None:
        return NA
    digits = 3 if v < 1 else 2 if v < 10 else 1 if v < 100 else 0
    return f"{v:,.{digits}f} ms"


def fsec(x: Any) -> str:
    v = num(x)
    if v is None:
        return NA
    digits = 3 if v < 0.1 else 2 if v < 10 else 1 if v < 1000 else 0
    return f"{v:,.{digits}f} s"


def fratio(x: Any, digits: int = 2) -> str:
    v = num(x)
    return NA if v is None else f"{v:,.{digits}f}x"


def fpct(x: Any, digits: int = 1) -> str:
    v = num(x)
    return NA if v is None else f"{100 * v:.{digits}f}%"


def fdelta(x: Any, digits: int = 3) -> str:
    v = num(x)
    return NA if v is None else f"{v:+.{digits}f}"


def fmb(x: Any) -> str:
    v = num(x)
    return NA if v is None else f"{v:,.0f} MB"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    def cell(x: Any) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines + [""]


def not_measured(step: str, data: Data | None = None, *more: str) -> str:
    """The line for figures whose JSON file(s) are missing or unreadable."""
    steps = [step, *more]
    whys = [(s, data.problems.get(s)) for s in steps] if data else []
    extra = "".join(f"; {s}.json: {why}" for s, why in whys if why and why != "no file")
    return f"not measured in this run (`python benchmarks/run.py --only {','.join(steps)}`){extra}"


def command(data: Data, step: str) -> str:
    """The step's command as run.py runs it (less its --json), paths relative to the project."""
    return f"`python benchmarks/{' '.join(show_path(a) for a in data.suite.command(step))}`"


def guarded(title: str, build: Callable[[], list[str]], level: int = 2) -> list[str]:
    """``build()``, or the section's heading and why it could not be rendered: a report never stops on odd data."""
    try:
        return build()
    except Exception as exc:
        head = [f"{'#' * level} {title}", ""] if level else []
        return [*head, f"*Could not be rendered from the JSON: {type(exc).__name__}: {exc}*", ""]


def prose(name: str, template: str | None = None, **values: Any) -> list[str]:
    """The paragraphs of ``templates/<name>.md`` (or of ``template``), its ``{placeholders}`` filled from ``values``.

    ``template``: the text itself, for a benchmark that keeps its prose in its own file (its docstring, say)
    rather than in a template. Paragraphs are separated by blank lines; each becomes one line of the report,
    then a blank one.
    """
    if template is None:
        template = (TEMPLATES / f"{name}.md").read_text(encoding="utf-8")
    text = template.format(**values)
    lines: list[str] = []
    for paragraph in text.strip().split("\n\n"):
        lines += [" ".join(paragraph.split("\n")), ""]
    return lines


def machine() -> str:
    model, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    ram = NA
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 2**20:.1f} GiB RAM"
                break
    except (OSError, ValueError, IndexError):
        pass
    isa = []
    if flags:
        isa.append("AVX-512" if "avx512f" in flags else "no AVX-512")
        if "avx512_bf16" in flags or "amx_bf16" in flags:
            isa.append("bf16 (" + ", ".join(f for f in ("avx512_bf16", "amx_bf16") if f in flags) + ")")
    gpu = Path("/proc/driver/nvidia/gpus").exists() or shutil.which("nvidia-smi") is not None
    parts = [model, f"{os.cpu_count()} CPU cores", ram, *isa, "an NVIDIA GPU present (not used)" if gpu else "no GPU"]
    return ", ".join(parts)


def verdict(ok: bool | None) -> str:
    return NA if ok is None else "**PASS**" if ok else "**FAIL**"


def default_backend(data: Data) -> tuple[str | None, str]:
    """The backend mdrag picked by default (hugo.json, else scifact.json), and where that was read."""
    for step in ("hugo", "scifact"):
        obj = data.get(step)
        if not obj:
            continue
        emb = obj.get("embedder")
        if emb in EMBEDDER_BACKEND:
            return EMBEDDER_BACKEND[emb], f"{step}.json: {emb}"
        if obj.get("backend") not in (None, "auto"):
            return str(obj["backend"]), f"{step}.json: backend {obj['backend']}"
    return None, ""


def scifact_metric(obj: Json, mode: str, metric: str = "ndcg@10") -> float | None:
    v = num(dig(obj, "modes", mode, metric))
    if v is None and mode == "dense":
        v = num(dig(obj, "mdrag_dense", metric))
    return v


def quantile(xs: Sequence[float], q: float) -> float | None:
    """Linear-interpolation quantile of sorted ``xs`` (numpy's default)."""
    if not xs:
        return None
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def save(fig: Any, path: Path) -> bool:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)
    return True
