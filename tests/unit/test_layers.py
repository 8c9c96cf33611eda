"""The import contracts in pyproject.toml (`[tool.importlinter]`) hold: imports point one way,
from `app.cli` down to `app.core`, and the shared vocabulary imports nothing of ours."""

from __future__ import annotations

from pathlib import Path

import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # lint-imports reads ./pyproject.toml
    assert lint_imports(no_cache=True, no_logo=True) == 0, "an import contract is broken (above)"
