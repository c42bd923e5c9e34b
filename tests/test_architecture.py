"""The import wall of DESIGN section 6: the pure layers never import Apache Beam."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "beam_dp"
PURE_LAYERS = ["mechanisms", "scores", "accounting", "summaries", "batching"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", PURE_LAYERS)
def test_pure_layer_sources_do_not_import_beam(layer: str) -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        if any(name == "apache_beam" or name.startswith("apache_beam.") for name in _imports(path))
        or any(
            name.startswith("beam_dp.beam") or name.startswith("beam_dp.io")
            for name in _imports(path)
        )
    ]
    assert offenders == [], f"{layer} must not import apache_beam or the Beam layers"


def test_importing_pure_layers_does_not_load_beam() -> None:
    modules = ", ".join(
        f"beam_dp.{layer}" for layer in PURE_LAYERS if (PACKAGE / layer / "__init__.py").exists()
    )
    code = (
        f"import sys, {modules}\n"
        "assert 'apache_beam' not in sys.modules, 'apache_beam was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
