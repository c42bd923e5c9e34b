"""Privacy mutants the test suite must kill (issue 28): ``make mutants``.

Each mutant in ``tools/mutants.toml`` is one targeted change to a privacy-critical line (a
calibration constant or sensitivity factor at a call site, a contribution-bound enforcement, a
budget split, a ledger state check, the identity canonicalisation), anchored by a source
snippet that must occur exactly once in its file, never by a line number, so the list survives
edits. For each mutant the harness writes the mutated file into a temporary copy of the tree,
runs the mutant's own test selection there (``python -m pytest -x`` with a timeout) and
reports:

* ``killed``: the selection failed (what we want);
* ``survived``: it passed: the tests do not see this change;
* ``stale``: the snippet is no longer in the file (the code moved on: update the list);
* ``ambiguous``: the snippet occurs more than once (make it longer);
* ``invalid``: the mutated file does not compile, or the mutant changes nothing;
* ``error`` / ``no tests`` / ``timeout``: pytest could not run the selection, collected
  nothing, or ran out of time;
* ``baseline failed``: the selection already fails without the mutant (checked once per
  distinct selection unless ``--no-baseline``), so a failure would prove nothing.

Only ``killed`` counts; the exit status is 0 when every selected mutant is killed.

Why not mutmut or cosmic-ray: both generate mutants from generic operators (a number plus
one, ``<`` to ``<=``, ``*`` to ``/``) over whole files or functions, and can only be narrowed
by excluding lines (a pragma on every other line, or a filter over the operator kinds). Neither
takes a list of targeted substitutions ("drop the 2 in the pair node's rate"), neither gives
each mutant its own test selection (the pipeline audits take minutes; a whole-suite run per
mutant would take hours on two cores), and mutmut 3 mutates only inside functions, through a
trampoline in a copy of the tree, which would miss module-level constants. A list of text
substitutions and a loop over pytest runs says exactly which change each test must catch.

Usage::

    python tools/mutants.py                 # every mutant
    python tools/mutants.py --only pair     # mutants whose id contains "pair"
    python tools/mutants.py --list          # the list, nothing run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tools" / "mutants.toml"
DEFAULT_TIMEOUT = 900.0  # seconds per mutant's test selection
KILLED = "killed"


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One targeted change and the tests that must catch it."""

    id: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    why: str
    timeout: float = DEFAULT_TIMEOUT


@dataclasses.dataclass
class Outcome:
    mutant: Mutant
    status: str
    seconds: float = 0.0
    detail: str = ""


def load(path: Path = LIST) -> list[Mutant]:
    """The mutant list, checked: every field present, ids unique."""
    with path.open("rb") as handle:
        document = tomllib.load(handle)
    unknown = set(document) - {"mutant"}
    if unknown:
        raise SystemExit(f"{path}: unknown top-level key(s) {sorted(unknown)}")
    mutants = []
    seen: set[str] = set()
    required = {"id", "file", "find", "replace", "tests", "why"}
    for number, entry in enumerate(document.get("mutant", []), start=1):
        missing = required - set(entry)
        extra = set(entry) - required - {"timeout"}
        if missing or extra:
            raise SystemExit(
                f"{path}: mutant #{number}: missing {sorted(missing)}, unknown {sorted(extra)}"
            )
        if entry["id"] in seen:
            raise SystemExit(f"{path}: mutant id {entry['id']!r} appears twice")
        seen.add(entry["id"])
        tests = entry["tests"]
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise SystemExit(f"{path}: mutant {entry['id']!r}: 'tests' must be a list of strings")
        mutants.append(
            Mutant(
                id=entry["id"],
                file=entry["file"],
                find=entry["find"],
                replace=entry["replace"],
                tests=tuple(tests),
                why=entry["why"],
                timeout=float(entry.get("timeout", DEFAULT_TIMEOUT)),
            )
        )
    return mutants


def copy_tree(destination: Path) -> None:
    """The working tree's tracked and untracked (not ignored) files, as they are on disk."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode("utf-8")
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def _pytest(tree: Path, tests: Sequence[str], timeout: float) -> tuple[str, float, str]:
    """Run a test selection in ``tree``: (status, seconds, last lines of output)."""
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    environment = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    try:
        result = subprocess.run(
            command,
            cwd=tree,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started, ""
    seconds = time.monotonic() - started
    tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-3:])
    status = {0: "survived", 1: KILLED, 5: "no tests"}.get(result.returncode, "error")
    return status, seconds, tail


def _check_imports(tree: Path) -> None:
    """The copy's packages are the ones a test run there imports (not an installed copy)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import beam_dp, pipelines; print(beam_dp.__file__)"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    )
    if not Path(probe.stdout.strip()).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"a test run in the copy imports beam_dp from {probe.stdout.strip()}")


def _apply(tree: Path, mutant: Mutant) -> tuple[str, str] | str:
    """Write the mutated file into ``tree``: (original text, path) or a failure status."""
    path = tree / mutant.file
    if not path.is_file():
        return "stale"
    original = path.read_text(encoding="utf-8")
    found = original.count(mutant.find)
    if found == 0:
        return "stale"
    if found > 1:
        return "ambiguous"
    if mutant.find == mutant.replace:
        return "invalid"
    mutated = original.replace(mutant.find, mutant.replace)
    try:
        compile(mutated, str(path), "exec")
    except SyntaxError:
        return "invalid"
    path.write_text(mutated, encoding="utf-8")
    return original, str(path)


def run(mutants: Sequence[Mutant], *, baseline: bool, report: bool = True) -> list[Outcome]:
    """Every mutant against its selection, in one temporary copy of the tree."""
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="beam_dp_mutants_") as scratch:
        tree = Path(scratch) / "tree"
        copy_tree(tree)
        _check_imports(tree)
        baselines: dict[tuple[str, ...], tuple[str, str]] = {}
        for mutant in mutants:
            if baseline and mutant.tests not in baselines:
                status, _, tail = _pytest(tree, mutant.tests, mutant.timeout)
                baselines[mutant.tests] = (status, tail)
            if baseline and baselines[mutant.tests][0] != "survived":
                status, tail = baselines[mutant.tests]
                status = status if status == "no tests" else "baseline failed"
                outcome = Outcome(mutant, status, 0.0, tail)
            else:
                applied = _apply(tree, mutant)
                if isinstance(applied, str):
                    outcome = Outcome(mutant, applied)
                else:
                    original, path = applied
                    try:
                        status, seconds, tail = _pytest(tree, mutant.tests, mutant.timeout)
                    finally:
                        Path(path).write_text(original, encoding="utf-8")
                    outcome = Outcome(mutant, status, seconds, "" if status == KILLED else tail)
            outcomes.append(outcome)
            if report:
                print(_line(outcome), flush=True)
    return outcomes


def _line(outcome: Outcome) -> str:
    text = f"{outcome.status:>15}  {outcome.seconds:6.1f} s  {outcome.mutant.id}"
    if outcome.detail:
        text += "\n" + "\n".join(f"{'':27}{line}" for line in outcome.detail.splitlines())
    return text


def summary(outcomes: Sequence[Outcome]) -> str:
    killed = sum(1 for outcome in outcomes if outcome.status == KILLED)
    total = len(outcomes)
    rate = 100.0 * killed / total if total else 100.0
    seconds = sum(outcome.seconds for outcome in outcomes)
    failed = [f"{o.mutant.id} ({o.status})" for o in outcomes if o.status != KILLED]
    text = f"killed {killed} of {total} mutants ({rate:.0f}%) in {seconds / 60:.1f} min of tests"
    return text + ("" if not failed else "; not killed: " + ", ".join(failed))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="TEXT", help="ids containing any TEXT")
    parser.add_argument("--list", action="store_true", help="print the list and stop")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the unmutated run of each selection"
    )
    parser.add_argument("--json", type=Path, help="also write the outcomes to this file")
    args = parser.parse_args(argv)
    mutants = load()
    if args.only:
        mutants = [m for m in mutants if any(text in m.id for text in args.only)]
        if not mutants:
            parser.error(f"no mutant id contains any of {args.only}")
    if args.list:
        for mutant in mutants:
            print(f"{mutant.id}: {mutant.file}: {mutant.why}")
        return 0
    started = time.monotonic()
    outcomes = run(mutants, baseline=not args.no_baseline)
    print(summary(outcomes))
    print(f"wall time {(time.monotonic() - started) / 60:.1f} min")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                [
                    {"id": o.mutant.id, "status": o.status, "seconds": round(o.seconds, 1)}
                    for o in outcomes
                ],
                indent=2,
            )
            + "\n"
        )
    return 0 if all(outcome.status == KILLED for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
