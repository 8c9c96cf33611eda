"""Routes parse, authorise, call the store or manager of their concern and shape the answer: no
route module builds a query (queries live next to the concern that owns them)."""

from __future__ import annotations

import ast
from pathlib import Path

ROUTES = Path(__file__).resolve().parents[2] / "app" / "api" / "routes"
ALLOWED = {"sqlalchemy.exc", "sqlalchemy.ext.asyncio"}  # catching errors, typing a session


def test_no_route_module_imports_query_building() -> None:
    offenders = []
    for module in sorted(ROUTES.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name.split(".")[0] == "sqlalchemy" and name not in ALLOWED:
                    offenders.append(f"{module.name}: {name}")
    assert offenders == []
