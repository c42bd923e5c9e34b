"""The jobs use only beam_dp's public surface: no private module, no pure layer's internals."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"
NOT_YET: set[str] = set()


def _beam_dp_imports(path: Path) -> list[str]:
    modules = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.append(node.module)
        elif isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
    return [module for module in modules if module.split(".")[0] == "beam_dp"]


@pytest.mark.parametrize(
    "path",
    sorted(p for p in PIPELINES.glob("*.py") if p.name not in NOT_YET),
    ids=lambda p: p.name,
)
def test_jobs_import_no_private_module_of_beam_dp(path: Path) -> None:
    for module in _beam_dp_imports(path):
        parts = module.split(".")
        assert not any(part.startswith("_") for part in parts), f"{path.name} imports {module}"
        assert parts[:2] not in (["beam_dp", "batching"], ["beam_dp", "summaries"]), (
            f"{path.name} imports {module}: a pure layer's internals, not the public surface"
        )
