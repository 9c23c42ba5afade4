"""The FL library's functions stay small enough to read at once (issue #67): none in ``fl/`` is longer than 80 lines
or takes more than 10 parameters (``self`` and ``cls`` not counted)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES, MAX_PARAMETERS = 80, 10


def functions(folder: Path) -> Iterator[tuple[Path, str, int, int]]:
    """(file, name, lines, parameters) of every function and method under ``folder``."""
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                named = [*a.posonlyargs, *a.args, *a.kwonlyargs]
                count = len(named) + (a.vararg is not None) + (a.kwarg is not None)
                count -= bool(named) and named[0].arg in ("self", "cls")
                yield path, node.name, node.end_lineno - node.lineno + 1, count


def test_no_function_in_fl_is_longer_than_80_lines_or_takes_more_than_10_parameters():
    found = [f"{path.relative_to(ROOT)}: {name} ({lines} lines, {count} parameters)"
             for path, name, lines, count in functions(ROOT / "fl")
             if lines > MAX_LINES or count > MAX_PARAMETERS]  # fmt: skip
    assert not found, "\n".join(found)


def test_the_count_sees_long_functions_and_many_parameters(tmp_path):
    body = "    x = 1\n" * 90
    (tmp_path / "m.py").write_text(
        f"class A:\n    def f(self, a, b):\n        pass\n\n\ndef g(*args, k=1, **kw):\n{body}"
    )
    counted = {name: (lines, count) for _, name, lines, count in functions(tmp_path)}
    assert counted == {"f": (2, 2), "g": (91, 3)}
