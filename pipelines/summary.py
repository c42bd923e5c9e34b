"""The table a job prints at the end: the releases, their accuracy, and the budget.

Everything in it is released (the values, their ledger entries and accuracy bounds) or
public (names, keys, the budget). Numbers print by the report's one rule
(:func:`beam_dp.report.formatting.format_number`: a value at its grid's resolution, enough
decimals to tell neighbouring grid points apart; :func:`~beam_dp.report.formatting.format_share`:
ε, δ and shares as short decimals); a cell wider than its column wraps onto more lines, a
number is never cut.
"""

from __future__ import annotations

import decimal
import math
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from beam_dp.jobs import chosen_bound, format_number, format_share, grid_step

__all__ = ["print_summary"]


def _shown(value: Any, step: float | None = None) -> str:
    """A released value at the resolution of its grid (``step``, public)."""
    if isinstance(value, float):
        return format_number(value, step)
    if isinstance(value, dict) and "points" in value and "cdf" in value:
        return _shown_cdf(value, step=step)
    return str(value)


def _alpha(alpha: Any) -> str:
    try:
        return format_share(float(alpha))
    except (TypeError, ValueError):
        return str(alpha)


def _shown_cdf(
    value: dict[str, Any], interval: dict[str, Any] | None = None, step: float | None = None
) -> str:
    """A released CDF in one cell: its size and the quantiles read from it (with their
    intervals when the release carries them)."""
    quantiles = value.get("quantiles") or {}
    ends = _interval_ends(interval)
    read = ", ".join(
        f"q{_alpha(alpha)}={_shown(x, step)}" + (f" {_bracket(*ends[i], step)}" if ends else "")
        for i, (alpha, x) in enumerate(quantiles.items())
    )
    head = f"CDF of {len(value['points'])} synthetic points"
    if read and ends:
        read += f" at {_percent(interval)}"
    return f"{head}: {read}" if read else head


def _interval_ends(interval: dict[str, Any] | None) -> list[tuple[float, float]]:
    """The ``(lower, upper)`` of each quantile of a release's ``interval`` (none: [])."""
    if not isinstance(interval, dict):
        return []
    lower, upper = interval.get("lower"), interval.get("upper")
    lowers = lower if isinstance(lower, list) else [lower]
    uppers = upper if isinstance(upper, list) else [upper]
    return [(float(lo), float(hi)) for lo, hi in zip(lowers, uppers, strict=True)]


def _bracket(lower: float, upper: float, step: float | None = None) -> str:
    return f"[{_shown(lower, step)}, {_shown(upper, step)}]"


def _percent(interval: dict[str, Any] | None) -> str:
    confidence = float((interval or {}).get("confidence", 0.95))
    return f"{format_share(confidence * 100)}%"


def _shown_release(release: dict[str, Any]) -> str:
    """A released value for the table, led by its interval when it has one:
    ``5.16 [5.09, 5.22] at 95%``."""
    value, interval = release["value"], release.get("interval")
    step = grid_step(release)
    if isinstance(value, dict) and "points" in value and "cdf" in value:
        return _shown_cdf(value, interval, step)
    ends = _interval_ends(interval)
    numbers = value if isinstance(value, list) else [value]
    if ends and len(ends) == len(numbers):
        shown = ", ".join(
            f"{_shown(v, step)} {_bracket(lo, hi, step)}"
            for v, (lo, hi) in zip(numbers, ends, strict=True)
        )
        return f"{shown} at {_percent(interval)}"
    if isinstance(value, list):
        return ", ".join(_shown(v, step) for v in value)
    return _shown(value, step)


def _print_intervals(releases: Sequence[dict[str, Any]], out: Any) -> None:
    """Every quantile's interval in full, one line per release, after the table."""
    lines = []
    for r in releases:
        ends = _interval_ends(r.get("interval"))
        if not ends:
            continue
        interval = r["interval"]
        step = grid_step(r)
        alphas = interval.get("quantiles") or [None] * len(ends)
        value = r["value"]
        if isinstance(value, dict) and "quantiles" in value:
            points = list((value.get("quantiles") or {}).values())
        else:
            points = value if isinstance(value, list) else [value]
        parts = "; ".join(
            f"q{_alpha(alpha)} = {_shown(point, step)} {_bracket(lo, hi, step)}"
            for alpha, point, (lo, hi) in zip(alphas, points, ends, strict=True)
        )
        label = r["name"] if r.get("key") is None else f"{r['name']} [{r['key']}]"
        lines.append(f"{label}: {parts} ({interval.get('method')})")
    if not lines:
        return
    print(
        "\nintervals (each holds the data's quantile with the stated probability over the "
        "mechanism's randomness, all of a release's at once):",
        file=out,
    )
    for line in lines:
        for piece in textwrap.wrap(line, width=100, initial_indent="  ", subsequent_indent="    "):
            print(piece, file=out)
    for r in releases:  # intervals that say little more than the public bounds
        note = (r.get("interval") or {}).get("note")
        if note:
            label = r["name"] if r.get("key") is None else f"{r['name']} [{r['key']}]"
            for piece in textwrap.wrap(
                f"note: {label}: {note}", width=100, initial_indent="  ", subsequent_indent="    "
            ):
                print(piece, file=out)


# The ledger's own accuracy keys (in the score's units); a release that states its accuracy in
# the statistic's units (``accuracy_units``) shows its other keys instead.
_LEDGER_ACCURACY = frozenset({"score_loss", "rank_error", "cell_width", "confidence"})
_CELL = 48  # the widest column but the last (accuracy), which is never wrapped


def _kept_together(cell: str) -> str:
    """``cell`` with the spaces of each ``value [lower, upper]`` made unbreakable (NUL)."""
    return re.sub(r" ?\[[^\]]*\]", lambda m: m.group(0).replace(" ", "\0"), cell)


def _wrapped(cell: str, width: int) -> list[str]:
    """``cell`` in lines of at most ``width`` characters, broken at spaces only, never inside
    a number or a ``value [lower, upper]`` (a longer piece widens its column instead)."""
    lines = textwrap.wrap(
        _kept_together(cell), width, break_long_words=False, break_on_hyphens=False
    )
    return [line.replace("\0", " ") for line in lines] or [""]


def _longest_word(cell: str) -> int:
    return max((len(word) for word in _kept_together(cell).split()), default=0)


def _accuracy_cell(release: dict[str, Any]) -> str:
    """The accuracy column: the bounds in the statistic's units when the release states them
    (``accuracy_units``), else the ledger's score-loss and rank-error bounds."""
    accuracy = release.get("accuracy") or {}
    units = release.get("accuracy_units") or {}
    stated = [
        f"{key.replace('_', ' ')} <= {_rounded_up(bound)}"
        for key, bound in accuracy.items()
        if key in units and key not in _LEDGER_ACCURACY and isinstance(bound, (int, float))
    ]
    if stated:
        return "; ".join(stated)
    parts = [f"score within {accuracy['score_loss']:.3g}"] if "score_loss" in accuracy else []
    if "rank_error" in accuracy:
        parts.append(f"rank error <= {accuracy['rank_error']:.3g}")
    return "; ".join(parts)


def _rounded_up(bound: float) -> str:
    """A bound to three significant digits, rounded up (a stated bound never shrinks)."""
    number = float(bound)
    if number <= 0 or not math.isfinite(number):
        return f"{number:g}"
    rounded = decimal.Context(prec=3, rounding=decimal.ROUND_CEILING).plus(
        decimal.Decimal(repr(number))
    )
    return f"{rounded:f}"


def _accuracy_header(releases: Sequence[dict[str, Any]]) -> str:
    levels = {(r.get("accuracy") or {}).get("confidence", 0.95) for r in releases}
    if len(levels) == 1:
        return f"accuracy ({float(levels.pop()) * 100:g}%)"
    return "accuracy (at each release's confidence)"


def _print_notes(releases: Sequence[dict[str, Any]], out: Any) -> None:
    """What a reader must not miss about a released value (a value at a public bound)."""
    notes = [
        (r["name"] if r.get("key") is None else f"{r['name']} [{r['key']}]", note)
        for r in releases
        for note in r.get("notes") or ()
    ]
    if not notes:
        return
    print("\nnote:", file=out)
    for label, note in notes:
        for line in textwrap.wrap(
            f"{label}: {note}", width=100, initial_indent="  ", subsequent_indent="    "
        ):
            print(line, file=out)


def _print_descriptions(releases: Sequence[dict[str, Any]], out: Any) -> None:
    """Each release's accuracy in words, once per statistic when its keys share the text."""
    seen: dict[tuple[str, str], list[str]] = {}
    for r in releases:
        text = r.get("accuracy_description")
        if isinstance(text, str) and text:
            seen.setdefault((r["name"], text), []).append(
                "" if r.get("key") is None else str(r["key"])
            )
    if not seen:
        return
    print("\naccuracy, in words:", file=out)
    for (name, text), keys in seen.items():
        label = name if keys == [""] or len(keys) > 1 else f"{name} [{keys[0]}]"
        for line in textwrap.wrap(
            f"{label}: {text}", width=100, initial_indent="  ", subsequent_indent="    "
        ):
            print(line, file=out)


_CHOSEN_HEADINGS = {
    "rows": "rows per person, chosen privately (max_contributions = auto):",
    "keys": "keys per person, chosen privately (max_keys_per_unit = auto):",
    "candidates": "candidates per person, chosen privately (max_candidates_per_unit = auto):",
}


def _print_chosen_bounds(releases: Sequence[dict[str, Any]], out: Any) -> None:
    """The rows (or keys) per person each ``"auto"`` statistic chose (a DP output): one line
    per statistic when all its keys and windows agree, else one per key and window."""
    groups: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for r in releases:
        chosen = chosen_bound(r)
        if chosen is None:
            continue
        text = (
            f"{chosen.bound} of at most {chosen.cap} (epsilon "
            f"{format_share(chosen.epsilon_choice)} of the release's "
            f"{format_share(chosen.epsilon_release)} chose it)"
        )
        where = ", ".join(str(part) for part in (r.get("key"), r.get("window")) if part is not None)
        by_name = groups.setdefault(chosen.what, {})
        if (text, where) not in by_name.setdefault(r["name"], []):
            by_name[r["name"]].append((text, where))
    for what, by_name in groups.items():
        print(f"\n{_CHOSEN_HEADINGS[what]}", file=out)
        for name, choices in by_name.items():
            if len({text for text, _ in choices}) == 1:
                print(f"  {name}: {choices[0][0]}", file=out)
                continue
            for text, where in choices:
                print(f"  {name}: {text}" + (f" [{where}]" if where else ""), file=out)


def print_summary(document: dict[str, Any], file: Any = None) -> None:
    """A readable table of the releases and the budget.

    The accuracy column shows a release's bounds in the statistic's own units when the release
    states them (``accuracy_units``, with the sentence ``accuracy_description`` printed in full
    after the table), and otherwise the ledger's bounds in the score's units.
    """
    out = file if file is not None else sys.stdout
    rows = [("name", "key", "released value", "epsilon", _accuracy_header(document["releases"]))]
    for r in document["releases"]:
        shown = _shown_release(r)
        rows.append(
            (
                r["name"],
                "" if r.get("key") is None else str(r["key"]),
                shown,
                format_share(r["epsilon"]),
                _accuracy_cell(r),
            )
        )
    limits = [_CELL] * (len(rows[0]) - 1) + [max(len(row[-1]) for row in rows)]
    widths = [
        max(min(max(len(row[i]) for row in rows), limits[i]), *(_longest_word(r[i]) for r in rows))
        for i in range(len(rows[0]))
    ]
    for n, row in enumerate(rows):
        cells = [_wrapped(cell, width) for cell, width in zip(row, widths, strict=True)]
        for line in range(max(len(lines) for lines in cells)):
            parts = [
                (lines[line] if line < len(lines) else "").ljust(width)
                for lines, width in zip(cells, widths, strict=True)
            ]
            print("  ".join(parts).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * width for width in widths), file=out)
    _print_intervals(document["releases"], out)
    _print_notes(document["releases"], out)
    _print_descriptions(document["releases"], out)
    _print_chosen_bounds(document["releases"], out)
    budget = document["budget"]
    windows = budget.get("windows_per_unit")
    if budget.get("per_window") and isinstance(windows, int) and windows >= 1:
        # the stream job: its config's budget is each person's over the job, each window's
        # releases spend it over the windows a person may be in (pipelines.stream)
        epsilon, delta = budget["epsilon_spent"], budget["delta_spent"]
        print(
            f"\nbudget per window: epsilon {format_share(epsilon / windows)}, delta "
            f"{format_share(delta / windows)} (the config's epsilon {format_share(epsilon)}, "
            f"delta {format_share(delta)} over --max_windows_per_unit {windows}; "
            f"{budget.get('composition', 'basic')} composition); each person, over every "
            f"window of the job: at most epsilon {format_share(epsilon)}, delta "
            f"{format_share(delta)}",
            file=out,
        )
    else:
        print(
            f"\nbudget: epsilon {format_share(budget['epsilon_spent'])} of "
            f"{format_share(budget['epsilon_total'])} spent, "
            f"delta {format_share(budget['delta_spent'])} of "
            f"{format_share(budget['delta_total'])} "
            f"({budget.get('composition', 'basic')} composition)",
            file=out,
        )
    ledger = budget.get("ledger")
    if isinstance(ledger, dict) and isinstance(ledger.get("after_commit"), dict):
        charge = ledger["after_commit"]
        print(
            f"ledger {ledger.get('ledger')}: run {charge.get('run')} charged "
            f"{charge.get('charged')} to dataset {ledger.get('dataset')!r}",
            file=out,
        )
        if charge.get("remaining"):
            print(f"  {charge['remaining']}", file=out)
    skipped = document.get("skipped_files") or []
    if skipped:
        print(
            f"\nskipped as undecodable (on_bad_record = skip), {len(skipped)} file(s):",
            file=out,
        )
        for name in skipped:
            print(f"  {name}", file=out)
