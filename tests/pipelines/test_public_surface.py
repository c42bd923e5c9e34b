"""The jobs use only beam_dp's documented modules: ``beam_dp``, the ledger and the jobs' own.

``beam_dp.__all__`` is the one public door of the library (its names load their modules on
first use); :mod:`beam_dp.ledger` is the documented budget ledger and :mod:`beam_dp.jobs` what
the jobs use beyond the library's surface, each with its own ``__all__``. A job that imports
any other module path of beam_dp (``beam_dp.beam.selection``, ``beam_dp.io.schema``, ...)
reaches past those doors; a name only the jobs use is not in ``beam_dp.__all__``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import beam_dp
import beam_dp.jobs
import beam_dp.ledger

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"
#: The public modules a job may import from, with the names each exports.
PUBLIC = {
    "beam_dp": set(beam_dp.__all__),
    "beam_dp.ledger": set(beam_dp.ledger.__all__),
    "beam_dp.jobs": set(beam_dp.jobs.__all__),
}


def _beam_dp_imports(path: Path) -> list[tuple[str, str | None]]:
    """``(module, name)`` of every beam_dp import of ``path`` (name None for ``import x``)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.extend((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
    return [(module, name) for module, name in found if module.split(".")[0] == "beam_dp"]


@pytest.mark.parametrize("path", sorted(PIPELINES.glob("*.py")), ids=lambda p: p.name)
def test_jobs_import_the_public_surface_only(path: Path) -> None:
    for module, name in _beam_dp_imports(path):
        assert module in PUBLIC, f"{path.name} imports from {module}: not a public module"
        assert name in PUBLIC[module], f"{path.name} imports {name} from {module}: not public"


def test_every_public_name_resolves_to_one_definition() -> None:
    for name in beam_dp.__all__:
        value = getattr(beam_dp, name)
        where = beam_dp._WHERE[name]
        assert value is sys.modules[where] or value is getattr(sys.modules[where], name)
    assert set(beam_dp._WHERE) == set(beam_dp.__all__)
    with pytest.raises(AttributeError, match="no attribute 'PrivateMedain'"):
        beam_dp.PrivateMedain  # noqa: B018


def test_the_typing_imports_and_the_lazy_table_follow_all() -> None:
    # __all__ is the one list: the TYPE_CHECKING imports (what mypy sees) and _WHERE (what
    # loads on first use) name exactly its names, each from the same module.
    tree = ast.parse(Path(beam_dp.__file__).read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module
                for alias in statement.names:
                    assert alias.asname == alias.name  # an explicit re-export
                    typed[alias.name] = statement.module
    # a module (telemetry) is imported from its package
    lazy = {name: where.removesuffix(f".{name}") for name, where in beam_dp._WHERE.items()}
    assert typed == lazy
    assert len(beam_dp.__all__) == len(set(beam_dp.__all__)) == len(beam_dp._WHERE)


def test_the_jobs_names_are_not_the_librarys() -> None:
    assert not set(beam_dp.jobs.__all__) & set(beam_dp.__all__)
    for name in beam_dp.jobs.__all__:  # no second door: the jobs' names are not beam_dp's
        with pytest.raises(AttributeError):
            getattr(beam_dp, name)


def test_importing_beam_dp_does_not_load_beam() -> None:
    code = "import sys, beam_dp\nassert 'apache_beam' not in sys.modules\n"
    subprocess.run([sys.executable, "-c", code], check=True)
