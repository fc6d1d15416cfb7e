"""Text that mdrag did not write, made safe to print on a terminal.

Its own module, with nothing but :mod:`re`, so that the commands that print
(`mdrag search`, `get`) need not import the WebSocket client to use it.
"""

from __future__ import annotations

import re

__all__ = ["sanitize"]

# Escape sequences first (so their parameters go too), then any control character left.
_ESCAPES = re.compile(
    r"""
      (?:\x1b\[|\x9b) [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]        # CSI: colours, cursor moves, erase
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]) .*? (?:\x07|\x1b\\|\x9c|\Z)  # OSC, DCS, SOS, PM, APC strings
    | \x1b [\x20-\x2f]* [\x30-\x7e]                                  # other escapes: ESC c, ESC 7, ESC ( B
    """,
    re.VERBOSE | re.DOTALL,
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but \t and \n, DEL, C1


def sanitize(text: str) -> str:
    """Remove what could drive the terminal: escape sequences and control characters but newline and tab."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))
