"""The package stays one a newcomer can change (issue 40): no module of ``grader/`` over 500 lines,
and no import circle between its modules.  Every import statement counts, wherever it stands (under
``TYPE_CHECKING``, inside a function): a circle of types or of lazy imports is still two modules that
change together.  Read from the source alone (``ast``), nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 500


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (a name imported from a module is that module)."""
    root = package.parent
    modules = {module_name(p, root): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                named.update(
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                )
        graph[name] = set()
        for target in named:
            while target and target not in modules:  # grader.pack.Case -> grader.pack
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import graph's strongly connected parts of two modules or more (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def too_long(package: Path) -> dict[str, int]:
    lengths = {str(p.relative_to(package.parent)): len(p.read_text().splitlines()) for p in package.rglob("*.py")}
    return {name: n for name, n in sorted(lengths.items()) if n > MAX_LINES}


def test_no_module_of_the_grader_is_over_500_lines() -> None:
    assert too_long(ROOT / "grader") == {}


def test_no_two_modules_of_the_grader_import_each_other_even_through_others() -> None:
    assert circles(import_graph(ROOT / "grader")) == []


def test_a_circle_through_a_type_only_or_a_lazy_import_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from .c import g\n")
    (package / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import X\n"
    )
    (package / "d.py").write_text("import pkg.a\n")
    assert circles(import_graph(package)) == [["pkg.a", "pkg.sub.b", "pkg.sub.c"]]
    (package / "sub" / "c.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert circles(import_graph(package)) == []
    assert too_long(package) == {"pkg/sub/c.py": MAX_LINES + 1}
