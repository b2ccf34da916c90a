"""Reading a package's own imports from its source, for the structure tests (nothing is
imported: a module that fails to import is still read)."""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["sibling_imports"]


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

