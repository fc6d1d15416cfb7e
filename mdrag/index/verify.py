"""What the last `status --verify` found damaged, kept beside the manifest until an `mdrag index` repairs it."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from mdrag.fileio import write_atomic

__all__ = ["VerifyRecord"]

log = logging.getLogger(__name__)


class VerifyRecord:
    """The file ``<index>.damaged`` beside the manifest: what `status --verify` found, which the next
    update reads (it then checks every row and repairs it)."""

    def __init__(self, manifest_path: Path) -> None:
        self.path = manifest_path.with_suffix(".damaged")  # there until an `mdrag index` has repaired it

    def found(self) -> str | None:
        """What the last `status --verify` recorded (None: nothing; "": a record that cannot be read)."""
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.warning("cannot read %s (%s): repairing as if it said the store is damaged", self.path, e)
            return ""

    def repaired(self, found: str) -> None:
        """A run repaired what `status --verify` found (``found``): forget it, unless a newer one wrote it."""
        if self.found() == found:
            self.path.unlink(missing_ok=True)

    def record(self, damage: list[str]) -> None:
        """`status --verify` found ``damage``: the next `mdrag index` checks every row and repairs it."""
        try:
            write_atomic(self.path, json.dumps({"damaged": damage, "at": time.time()}))
        except OSError as e:
            log.warning(
                "cannot record in %s what `status --verify` found (%s): run `mdrag index --rebuild` to repair it",
                self.path,
                e,
            )
