"""Reading a package's own imports from its source, for the structure tests (nothing is
imported: a module that fails to import is still read)."""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["circles", "module_imports", "sibling_imports"]


def sibling_imports(path: Path) -> set[str]:
    """The sibling modules ``path`` imports (``from . import _x``, ``from ._x import y``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found.update(alias.name for alias in node.names)
            else:
                found.add(node.module.split(".")[0])
    return found



def module_imports(package: Path) -> dict[str, set[str]]:
    """Every module of the package at ``package`` (a folder), by dotted name, and the modules
    of the same package it imports, anywhere in the file (under ``if TYPE_CHECKING:`` and
    inside functions too). ``from P import a`` is an edge to the module ``P.a`` when there is
    one, else to ``P`` (its ``__init__``): the name came from there. A module's imports of its
    own enclosing packages on the way to a sibling (``from .. import errors``) count only as
    the sibling."""
    root = package.parent
    files: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name in files)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    stem = base[: len(base) - node.level + 1]
                    prefix = ".".join(stem + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                for alias in node.names:
                    target = f"{prefix}.{alias.name}"
                    found.add(target if target in files else prefix)
        graph[name] = {target for target in found if target in files and target != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of more than one
    module (Tarjan's, iterative), each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return sorted(out)
