"""Counts a CI test reports: a line at the end of the pytest output, and benchmarks/out/<name>.json.

``report(request.config, "ws_fuzz", figures, line)`` prints ``line`` in pytest's
terminal summary and writes ``figures`` to benchmarks/out/ws_fuzz.json, where
benchmarks/hostile.py reads them for benchmarks/RESULTS.md. Reports under one
name in one run are merged: a parametrized test gives each parameter a key. Under
pytest-xdist (``-n``) each worker hands its reports to the controller when it
ends (:func:`handed_over`, :func:`take_over`), which prints and writes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


class _Figures:
    """One name's figures and lines, written when pytest prints its summary."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.figures: dict[str, Any] = {}
        self.lines: list[str] = []

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for line in self.lines:
            terminalreporter.write_line(line)
        out = REPO / "benchmarks" / "out" / f"{self.name}.json"
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(self.figures, indent=2) + "\n")
        except OSError as e:  # a read-only checkout: the lines above are enough
            terminalreporter.write_line(f"{self.name}: cannot write {out}: {e}")
        else:
            terminalreporter.write_line(f"{self.name}: figures in {out.relative_to(REPO)}")


def _plugin(config: pytest.Config, name: str) -> _Figures:
    plugin = config.pluginmanager.get_plugin(f"mdrag-figures-{name}")
    if plugin is None:
        plugin = _Figures(name)
        config.pluginmanager.register(plugin, f"mdrag-figures-{name}")
    return plugin


def report(config: pytest.Config, name: str, figures: dict[str, Any], line: str) -> None:
    """Print ``line`` at the end of this pytest run and write ``figures`` to benchmarks/out/<name>.json."""
    plugin = _plugin(config, name)
    plugin.figures.update(figures)
    plugin.lines.append(line)


def handed_over(config: pytest.Config) -> dict[str, Any]:
    """This xdist worker's reports, by name, for the controller (plain data: it crosses a channel)."""
    return {
        plugin.name: {"figures": plugin.figures, "lines": plugin.lines}
        for _, plugin in config.pluginmanager.list_name_plugin()
        if isinstance(plugin, _Figures)
    }


def take_over(config: pytest.Config, reports: dict[str, Any]) -> None:
    """In the xdist controller: a worker's :func:`handed_over` reports join this run's."""
    for name, got in reports.items():
        plugin = _plugin(config, name)
        plugin.figures.update(got["figures"])
        plugin.lines.extend(got["lines"])
