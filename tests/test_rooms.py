"""The house's rooms import one way: no loop between packages, drawing and the math at the floor, the artefact
pipeline on top. Every import counts, also those inside functions and under TYPE_CHECKING.

A room is a top-level package (theory, sims, plots, figures, benchmarks), a sub-package of fl or lab (fl/methods,
lab/records, ...) or a module directly in one of them (fl/engine, lab/cost, ...): the rooms of
../shared/tools/rooms.py, plus plots and the lab (which that tool does not scan).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("theory", "sims", "fl", "lab", "plots", "figures", "benchmarks")


def room_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return "/".join(parts[:2]) if parts[0] in ("fl", "lab") else parts[0]


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imported(files: dict[str, Path], whole_from: bool) -> Iterator[tuple[str, Path, int, str, str]]:
    """(module, its file, line, name, our module that name falls in) for every absolute import in ``files`` of one
    of them. ``from X import a`` names X and X.a where ``whole_from``, else X.a where that is a module and X where
    it is not (a function, a class)."""
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                inner = [f"{node.module}.{alias.name}" for alias in node.names]
                names = [node.module, *inner] if whole_from else [n if n in files else node.module for n in inner]
            else:
                continue
            for name in names:
                parts = name.split(".")
                owner = next((".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in files),
                             None)  # fmt: skip
                if owner is not None:
                    yield module, path, node.lineno, name, owner


def imports() -> dict[tuple[str, str], list[str]]:
    """(room, room) -> ["file:line module", ...] for every import of one room by another."""
    files, edges = modules(), defaultdict(list)
    for _, path, line, name, owner in imported(files, whole_from=True):
        if (src := room_of(path)) != (dst := room_of(files[owner])):
            edges[src, dst].append(f"{path.relative_to(ROOT)}:{line} {name}")
    return edges


def loops(edges) -> list[list[str]]:
    """The rooms that reach themselves through imports, grouped by the loop they sit on."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    reach = {}
    for start in list(graph):
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        reach[start] = seen
    cyclic = sorted(r for r in reach if r in reach[r])
    groups = {frozenset(r2 for r2 in cyclic if r2 in reach[r] and r in reach[r2]) for r in cyclic}
    return sorted(sorted(g) for g in groups)


def test_no_import_loop_between_rooms():
    edges = imports()
    found = loops(edges)
    detail = [
        f"{a} -> {b}: {where[0]}" for a, b in edges for g in found if a in g and b in g for where in [edges[a, b]]
    ]
    assert not found, f"import loop(s) {found}:\n" + "\n".join(detail)


def module_imports() -> dict[tuple[str, str], list[str]]:
    """(module, module) -> ["file:line", ...] for every import of one of our modules by another: ``from X import a``
    is an import of the module X.a where there is one, else of X. A module's own packages (``fl.data`` for
    ``fl.data.custom``) are left out: Python runs them before the module whatever it imports."""
    edges = defaultdict(list)
    for src, path, line, _, dst in imported(modules(), whole_from=False):
        if dst != src and not src.startswith(f"{dst}."):
            edges[src, dst].append(f"{path.relative_to(ROOT)}:{line}")
    return edges


def test_no_modules_import_each_other_in_a_circle():
    """Inside a room too, imports flow one way (a circle is read in any order only by luck: the function-level
    import that hides one still runs the whole circle)."""
    edges = module_imports()
    found = loops(edges)
    detail = [f"{a} -> {b}: {w[0]}" for a, b in edges for g in found if a in g and b in g for w in [edges[a, b]]]
    assert not found, f"modules importing each other in a circle {found}:\n" + "\n".join(detail)


def test_the_loop_finder_finds_a_loop():
    assert loops({("a", "b"): [], ("b", "c"): [], ("c", "a"): [], ("c", "d"): []}) == [["a", "b", "c"]]
    assert loops({("a", "b"): [], ("b", "c"): []}) == []


def test_floors_import_nothing_of_ours():
    """Drawing (plots) and the math (theory) stand on nothing of ours."""
    for (src, dst), where in imports().items():
        assert src not in ("plots", "theory"), f"{src} imports {dst}: {where}"


def test_only_the_top_imports_the_entry_points():
    """fl.run, fl.sweep and the simulators' CLIs are imported only from above them: the artefact pipeline, the
    benchmarks, fl's own CLIs (fl.sweep, its fleet, fl.remeasure and the Flower app drive fl.run) and the run records
    (lab.records reads what fl.run writes with fl.run's own readers)."""
    top = {"figures", "benchmarks", "fl/sweep", "fl/fleet", "fl/remeasure", "fl/flower", "lab/records"}
    for (src, dst), where in imports().items():
        entry = dst in ("fl/run", "fl/sweep") or any(".__main__" in w.split()[1] for w in where)
        assert not entry or src in top, f"{src} imports the entry point {dst}: {where}"


def test_the_records_are_a_room_of_their_own_that_never_imports_figures():
    """The run ledger, its check and the lease intake (lab/records): figures reads them, they never import figures,
    and no module of them imports another in a circle (keys, volumes <- check <- ledger <- lease)."""
    edges = imports()
    assert ("figures", "lab/records") in edges
    assert not [dst for src, dst in edges if src == "lab/records" and dst == "figures"]
    order = {"keys": 0, "volumes": 0, "check": 1, "ledger": 2, "lease": 3}
    for name, rank in order.items():
        tree = ast.parse((ROOT / "lab" / "records" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lab.records."):
                assert order[node.module.split(".")[-1]] < rank, f"lab.records.{name} imports {node.module}"
