"""The import wall of DESIGN section 6: the pure layers never import Apache Beam."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "beam_dp"
PURE_LAYERS = ["mechanisms", "scores", "accounting", "summaries", "batching", "report"]


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


# ------------------------------------------------------------------------ the import graph


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _edges(name: str) -> set[str]:
    """The beam_dp modules ``name`` imports, anywhere in it (``TYPE_CHECKING`` and function
    bodies included): ``from package import module`` is an edge to the module, ``from package
    import name`` one to the package."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in MODULES else base)
    return (found & MODULES.keys()) - {name}


GRAPH = {name: _edges(name) for name in MODULES}


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in GRAPH[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return components


def test_no_import_cycle_anywhere_in_beam_dp() -> None:
    assert _cycles() == [], "modules that import each other (TYPE_CHECKING imports count too)"


def test_the_import_graph_sees_type_checking_imports_and_submodules() -> None:
    # The two forms a cycle hides in (the old beam/plan.py <-> plan_graph.py and
    # ledger/_runs.py <-> store.py were TYPE_CHECKING imports) are edges of the graph.
    assert "beam_dp.beam._graph" in GRAPH["beam_dp.beam._grid"]  # under TYPE_CHECKING
    assert "beam_dp.ledger._runs" in GRAPH["beam_dp.ledger.store"]  # from package import mod


BEAM = "beam_dp.beam"
CORE = {name for name in MODULES if name.startswith(f"{BEAM}._")}
FAMILIES = {name for name in MODULES if name.startswith(f"{BEAM}.")} - CORE
#: TopCandidates.Globally(candidates=None, key_selection=KeySelection(...)) composes DP key
#: selection: the one edge between two families (docs/architecture.md); the selection family's
#: combiners are a module of their own.
FAMILY_EDGES = {
    ("beam_dp.beam.selection", "beam_dp.beam.key_selection"),
    ("beam_dp.beam.selection", "beam_dp.beam.selection_combiners"),
}


def test_the_beam_layer_is_families_over_a_private_core() -> None:
    assert CORE and FAMILIES
    for name in sorted(CORE):
        assert not GRAPH[name] & FAMILIES, f"the core module {name} imports a family"
    for name in sorted(FAMILIES):
        others = {edge for edge in GRAPH[name] & FAMILIES if (name, edge) not in FAMILY_EDGES}
        assert not others, f"the family {name} imports another family: {sorted(others)}"


def test_a_quantile_reader_opens_the_family_file_and_two_core_files() -> None:
    assert GRAPH["beam_dp.beam.quantiles"] & (CORE | FAMILIES) == {
        "beam_dp.beam._transform",
        "beam_dp.beam._grid",
    }


def test_no_module_of_the_beam_layer_is_a_second_door_to_a_name() -> None:
    # Every name a Beam-layer module exports is defined there (the public door of the library
    # is beam_dp's __all__).
    for name in sorted(CORE | FAMILIES):
        tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
        defined: set[str] = set()
        exported: list[str] = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if targets == ["__all__"]:
                    exported = list(ast.literal_eval(node.value))
                defined.update(targets)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                defined.add(node.target.id)
        assert not set(exported) - defined, f"{name} exports {sorted(set(exported) - defined)}"
