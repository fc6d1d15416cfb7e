"""Trailing comments per 100 lines of code in a package (a comment after code on the same line).

Lines of code are the lines of statements, docstrings (a statement that is a string alone) left out.
Printed: the figure for the package, then the modules with the most trailing comments.

    python benchmarks/comment_density.py [mdrag] [--top 15]
"""

from __future__ import annotations

import argparse
import io
import tokenize
from pathlib import Path

_LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def count(source: str) -> tuple[int, int]:
    """Return (lines of code, trailing comments) for one module's source."""
    code_lines: set[int] = set()
    statement: list[tokenize.TokenInfo] = []
    comments: list[int] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments.append(tok.start[0])
        elif tok.type == tokenize.NEWLINE:
            if not (len(statement) == 1 and statement[0].type == tokenize.STRING):  # a docstring is not code
                for t in statement:
                    code_lines.update(range(t.start[0], t.end[0] + 1))
            statement = []
        elif tok.type not in _LAYOUT:
            statement.append(tok)
    return len(code_lines), sum(line in code_lines for line in comments)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", default="mdrag")
    parser.add_argument("--top", type=int, default=15, help="modules to list, most trailing comments first")
    args = parser.parse_args()
    rows = []
    for path in sorted(Path(args.package).rglob("*.py")):
        rows.append((path, *count(path.read_text(encoding="utf-8"))))
    code = sum(r[1] for r in rows)
    trailing = sum(r[2] for r in rows)
    print(f"{trailing} trailing comments in {code} lines of code: {100 * trailing / code:.2f} per 100")
    for path, lines, n in sorted(rows, key=lambda r: -r[2])[: args.top]:
        print(f"{n:5d} {100 * n / max(lines, 1):6.2f}/100  {path}")


if __name__ == "__main__":
    main()
