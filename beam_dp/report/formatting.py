"""How ``report.html`` prints: its style sheet, numbers, escaped text and axis ticks.

The helpers every panel of :mod:`beam_dp.report.page` shares: the CSS (plain CSS, no script, no
image), the palette, number and label formatting, HTML escaping and the tick and range rules of
a horizontal axis.

Numbers a person reads follow one rule, here, for the report and the jobs' terminal summary
(:mod:`pipelines.summary`): a value at its grid's resolution (:func:`format_number`: ``70.3``
on a 0.1 grid, ``1918.262`` on a float grid of step 0.00356, never ``1918.261918261918``), ε,
δ, shares and probabilities as short decimals (:func:`format_share`: ``0.333``). The exact
values stay in ``release.json``'s numbers and ``release.avro``.

**Privacy**: pure formatting of the values it is given (released values and public parameters
of a release document); axis ranges come from those values only.
"""

from __future__ import annotations

import html
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = [
    "ChosenBound",
    "chosen_bound",
    "format_number",
    "format_share",
    "grid_decimals",
    "grid_step",
    "separating_decimals",
]

_PALETTE = ("#3b6ea8", "#d9822b", "#3f9a6b", "#b5485d", "#7a5aa6", "#8c6d31", "#2a8a9a", "#a0527f")


_STYLE = """
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:#f5f6f8;color:#1f2328;line-height:1.45;overflow-wrap:anywhere;
 font-family:"Noto Sans","Noto Sans CJK JP","Noto Sans CJK SC","Noto Sans Arabic",
 "Noto Sans Devanagari","DejaVu Sans",system-ui,sans-serif,"Noto Color Emoji"}
main{max-width:1180px;margin:0 auto;padding:16px}
h1{font-size:1.5rem;margin:.2em 0 .3em}
h2{font-size:1.1rem;margin:0 0 .2em}
.lede{margin:0 0 1em;color:#444}
.warn{background:#fff3cd;border:1px solid #e0c46c;padding:8px 12px;border-radius:6px}
.panels{display:grid;gap:16px;
 grid-template-columns:repeat(auto-fill,minmax(min(100%,460px),1fr))}
.panel{background:#fff;border:1px solid #d8dbe0;border-radius:8px;padding:14px 16px;min-width:0}
.wide{grid-column:1/-1}
.meta{color:#555;font-size:.88rem;margin:0 0 .6em}
.big{font-size:1.9rem;font-weight:600;margin:.1em 0 .2em}
.acc{font-size:.9rem;margin:.5em 0 0;padding-left:1.1em}
.acc li{margin:.1em 0}
ol.rank{margin:.2em 0;padding-left:1.6em}
ol.rank li{font-weight:600}
table{border-collapse:collapse;width:100%;font-size:.92rem}
th,td{text-align:left;padding:3px 8px 3px 0;border-bottom:1px solid #eceef1;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.plot{display:grid;grid-template-columns:fit-content(30%) minmax(0,1fr) fit-content(38%);
 column-gap:10px;row-gap:2px;align-items:center;margin:.4em 0}
.plot .k{font-weight:600}
.plot .v{font-variant-numeric:tabular-nums;font-size:.92rem}
.nw{white-space:nowrap}
.track{position:relative;height:26px;margin:0 10px;border-left:1px solid #e3e5e8;
 border-right:1px solid #e3e5e8;background:linear-gradient(#e3e5e8,#e3e5e8) 0 50%/100% 1px
 no-repeat}
.dot{position:absolute;top:50%;width:11px;height:11px;border-radius:50%;
 transform:translate(-50%,-50%);background:#d9822b;border:1px solid #fff}
.band{position:absolute;top:25%;height:50%;background:rgba(217,130,43,.28);
 border:1px solid rgba(217,130,43,.7);border-radius:3px;min-width:2px}
.ci{position:absolute;top:30%;height:40%;border-left:2px solid #1f5f99;
 border-right:2px solid #1f5f99;min-width:2px;box-sizing:border-box;
 background:linear-gradient(#1f5f99,#1f5f99) 0 50%/100% 2px no-repeat}
.axis{position:relative;height:1.5em;margin:0 10px;font-size:.78rem;color:#555;
 border-top:1px solid #888}
.tick{position:absolute;top:0;white-space:nowrap;padding-top:2px}
.tick::before{content:"";position:absolute;top:-1px;left:var(--at);height:5px;
 border-left:1px solid #888}
.mid{transform:translateX(-50%);--at:50%}
.lo{--at:0}
.hi{transform:translateX(-100%);--at:100%}
.bar{display:flex;height:22px;border-radius:4px;overflow:hidden;margin:.5em 0;
 border:1px solid #c9ccd1}
.bar span{display:block;height:100%;min-width:1px}
.sw{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.4em;
 vertical-align:-.05em}
dl.kv{display:grid;grid-template-columns:fit-content(40%) minmax(0,1fr);gap:2px 12px;
 margin:.4em 0;font-size:.92rem}
dl.kv dt{color:#555}
dl.kv dd{margin:0}
footer{color:#666;font-size:.82rem;margin-top:1.2em}
.cdfwrap{display:grid;grid-template-columns:2.6em minmax(0,1fr);margin:.4em 0}
.cdfy{position:relative;font-size:.78rem;color:#555}
.cdfy span{position:absolute;right:6px;transform:translateY(-50%)}
svg.cdfplot{display:block;width:100%;height:190px;background:#fbfbfc;
 border-left:1px solid #888;border-bottom:1px solid #888}
.cdfwrap .axis{margin:0;border-top:0}
.legend{font-size:.85rem;margin:.2em 0 .4em}
.legend span.item{display:inline-block;margin-right:1em}
table.qt{font-size:.85rem}
table.qt td{overflow-wrap:normal;white-space:nowrap;padding-right:6px}
table.qt th.n{overflow-wrap:normal;white-space:nowrap;padding-right:6px}
.scroll{overflow-x:auto;max-width:100%;margin:.2em 0}
.scroll>table{width:auto;min-width:100%}
th{min-width:10em;max-width:18em;overflow-wrap:anywhere}
th.word{white-space:nowrap;min-width:0}
"""


# -------------------------------------------------------------------- numbers


#: A grid step written with at most this many significant digits is a decimal grid (0.1, 0.25,
#: 5): its values print with the step's decimals. Any other step is a float grid (100 / 999 999).
_ROUND_STEP_DIGITS = 4

#: The most significant digits a value prints with (a float has 15 to 17 meaningful ones).
_MAX_DIGITS = 15


def _significant_digits(text: str) -> int:
    digits = Decimal(text).normalize().as_tuple().digits
    return len(digits)


def grid_decimals(step: float) -> int | None:
    """Decimals that print every point of a decimal grid of spacing ``step`` (0.1 → 1, 5 → 0).

    ``step`` is a public grid spacing as floating point arithmetic left it (``0.0999999999``
    for 0.1): it is read at 12 significant digits. ``None`` for a step that is not a positive
    finite number, or not a decimal grid: a step of more than 4 significant digits
    (``0.0001000001``, the spacing of 10^6 points over [0, 100]) is a float grid, whose values
    print with :func:`separating_decimals`.
    """
    if not isinstance(step, (int, float)) or isinstance(step, bool):
        return None
    if not math.isfinite(step) or step <= 0:
        return None
    text = f"{step:.12g}"
    if _significant_digits(text) > _ROUND_STEP_DIGITS:
        return None
    exponent = Decimal(text).normalize().as_tuple().exponent
    if not isinstance(exponent, int):  # pragma: no cover - finite numbers have int exponents
        return None
    return min(max(-exponent, 0), 12)


def separating_decimals(step: float) -> int:
    """The fewest decimals that print two points ``step`` apart as different numbers.

    Each printed number is within half a unit of its last decimal of the value, so with
    ``10**-d <= step / 2`` two neighbours print at least ``step / 2`` apart: ``d =
    ceil(log10(2 / step))`` (never negative: integers print whole). 0.0035 → 3, 0.0001 → 5.
    """
    return max(0, math.ceil(math.log10(2.0 / step) - 1e-12))


def format_number(value: float, step: float | None = None) -> str:
    """A released value as a person reads it: at the resolution of its public grid.

    The one rule for values on the terminal, in ``report.html`` and wherever a value is
    printed for a person (the exact value stays in ``release.json``'s numbers and
    ``release.avro``):

    * a decimal grid (``step`` of at most 4 significant digits): the step's decimals, so
      integers print as integers and cents with 2 decimals (``70.30000000000001`` on a 0.1
      grid prints ``70.3``; a value off that grid, e.g. on a grid offset by 0.05, gets the
      further decimals it needs, up to :func:`separating_decimals` + 1);
    * a float grid (any other ``step``, e.g. 10^6 points over [0, 3558.39]): a fixed number
      of decimals that still tells neighbouring grid points apart
      (:func:`separating_decimals`: ``1918.262`` on a grid of step 0.00356), at most 15
      significant digits;
    * no grid: up to 6 significant digits (``0.1 + 0.2`` prints ``0.3``).

    Integers print whole; ``nan`` and ``inf`` as Python writes them.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or not math.isfinite(value):
        return str(value)
    valid = (
        step is not None
        and not isinstance(step, bool)
        and isinstance(step, (int, float))
        and math.isfinite(step)
        and step > 0
    )
    if not valid or step is None:
        return _short(value, keep=6, digits=6)
    step = float(step)
    separating = separating_decimals(step)
    decimals = grid_decimals(step)
    if decimals is not None:
        for places in range(decimals, max(separating, decimals) + 2):
            text = f"{value:.{places}f}"
            if abs(float(text) - value) <= step * 1e-6:
                return _drop_negative_zero(text)
        separating = max(separating, decimals + 1)
    magnitude = math.floor(math.log10(abs(value))) + 1 if value != 0 else 1
    places = min(separating, max(0, _MAX_DIGITS - magnitude))
    return _drop_negative_zero(f"{value:.{places}f}")


def format_share(value: Any) -> str:
    """ε, δ, ρ, a share of a budget, a probability or a grid step, as a short decimal.

    As written when it has at most 4 significant digits (``0.5``, ``2.125``, ``1e-06``),
    else 3 (1/3 prints ``0.333``, never ``0.333333333333333``); None prints ``–``.
    """
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or not math.isfinite(value):
        return str(value)
    return _short(float(value), keep=4, digits=3)


def _short(value: float, *, keep: int, digits: int) -> str:
    """``value`` as written if it has at most ``keep`` significant digits, else ``digits``."""
    if value == 0:
        return "0"
    text = repr(value)
    if _significant_digits(text) > keep:
        text = f"{value:.{digits}g}"
    if 1e-6 <= abs(value) < 1e15:  # positional, no exponent, no trailing zeros
        text = format(Decimal(text).normalize(), "f")
    return _drop_negative_zero(text)


def grid_step(release: Mapping[str, Any]) -> float | None:
    """The public grid spacing a release's values print at (:func:`format_number`), or None.

    ``accuracy["cell_width"]`` (quantiles, means: the widest grid cell next to a released
    value); for a released CDF (a value with ``steps``, ``lower`` and ``upper``), the spacing
    of its ``num_candidates`` grid points if uniform, or the closest two released steps if
    closer (a log or explicit grid): every two values it prints then print differently.
    """
    accuracy = release.get("accuracy")
    if isinstance(accuracy, Mapping):
        width: Any = accuracy.get("cell_width")
        if _is_number(width) and math.isfinite(width) and width > 0:
            return float(width)
    value = release.get("value")
    if not isinstance(value, Mapping):
        return None
    steps: Any = value.get("steps")
    lower: Any = value.get("lower")
    upper: Any = value.get("upper")
    points = release.get("num_candidates")
    if not (isinstance(steps, list) and _is_number(lower) and _is_number(upper)):
        return None
    spacings: list[float] = []
    if isinstance(points, int) and not isinstance(points, bool) and points > 1:
        spacings.append((float(upper) - float(lower)) / (points - 1))
    numbers = sorted(float(s) for s in steps if _is_number(s) and math.isfinite(s))
    spacings += [b - a for a, b in itertools.pairwise(numbers) if b > a]
    positive = [s for s in spacings if math.isfinite(s) and s > 0]
    return min(positive) if positive else None


def _drop_negative_zero(text: str) -> str:
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _bound(value: float) -> str:
    """An upper bound at 3 significant digits, rounded up (a bound is never understated)."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    decimals = 2 - math.floor(math.log10(abs(value)))
    scale = 10.0**decimals
    rounded = math.ceil(value * scale - 1e-9) / scale
    return format_number(rounded)


def _param(value: Any) -> str:
    """A public parameter (ε, δ, ρ, rounds): :func:`format_share`."""
    return format_share(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _label(value: Any) -> str:
    if isinstance(value, str):
        return value
    if _is_number(value):
        return format_number(value)
    return json.dumps(value, ensure_ascii=False)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _scroll(table: str) -> str:
    """A table in its own horizontal scroll box: wider than its panel, it scrolls inside it."""
    return f'<div class="scroll">{table}</div>'


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _row_label(release: Mapping[str, Any]) -> str:
    parts = []
    if "key" in release:
        parts.append(_label(release["key"]))
    if release.get("window"):
        parts.append(str(release["window"]))
    return " · ".join(parts) or str(release["name"])


# ----------------------------------------------------------------------- axes


def _nice_ticks(lower: float, upper: float, count: int = 5) -> tuple[list[float], int]:
    """Round tick positions in [lower, upper] and the decimals that print them."""
    span = upper - lower
    raw = span / count
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for multiple in (1.0, 2.0, 2.5, 5.0, 10.0):
        step = multiple * magnitude
        if span / step <= count:
            break
    decimals = max(0, -math.floor(math.log10(step)) + (1 if multiple == 2.5 else 0))
    first = math.ceil(lower / step - 1e-9)
    ticks = []
    index = first
    while index * step <= upper + step * 1e-9:
        ticks.append(index * step)
        index += 1
    return ticks, decimals


def _axis_range(points: Sequence[float], step: float | None) -> tuple[float, float]:
    lower, upper = min(points), max(points)
    span = upper - lower
    pad = span * 0.08 if span > 0 else max(step or 0.0, abs(lower) * 0.05, 1e-9)
    if span == 0 and lower == 0 and step is None:
        pad = 1.0
    return lower - pad, upper + pad


def _at(value: float, lower: float, upper: float) -> str:
    return f"{100.0 * (value - lower) / (upper - lower):.3f}%"


def _axis_ticks(lower: float, upper: float) -> str:
    """The tick labels of a horizontal axis over [lower, upper] (HTML spans, edges kept inside)."""
    ticks, decimals = _nice_ticks(lower, upper)
    tick_html = []
    for tick in ticks:
        position = (tick - lower) / (upper - lower)
        side = "lo" if position < 0.06 else "hi" if position > 0.94 else "mid"
        tick_html.append(
            f'<span class="tick {side}" style="left:{_at(tick, lower, upper)}">'
            f"{_e(format_number(round(tick, decimals), 10.0**-decimals))}</span>"
        )
    return "".join(tick_html)


@dataclass(frozen=True)
class ChosenBound:
    """An ``"auto"`` release's privately chosen bound (a DP output): rows per person
    (``max_contributions="auto"``), keys per person (``max_keys_per_unit="auto"``) or distinct
    candidates per person (DP key selection's ``max_candidates_per_unit="auto"``)."""

    bound: int
    cap: int
    epsilon_choice: float
    epsilon_release: float
    what: str = "rows"


_CHOSEN_FIELDS = {
    "rows": ("max_contributions_per_unit", "max_contributions_cap"),
    "keys": ("max_keys_per_unit", "max_keys_per_unit_cap"),
    "candidates": ("max_candidates_per_unit", "max_candidates_cap"),
}


def chosen_bound(release: Mapping[str, Any]) -> ChosenBound | None:
    """The chosen bound a release record states, or None (a fixed bound, or fields missing).

    The one reading of the record's fields for every display (the report and the jobs'
    terminal summary): ``contribution_bounds`` holds the bound and its cap
    (``max_contributions_cap``; ``max_keys_per_unit_cap`` or ``max_candidates_cap`` for a
    chosen number of keys or of distinct candidates),
    ``accuracy`` the epsilon of the choice.
    """
    bounds = release.get("contribution_bounds") or {}
    accuracy = release.get("accuracy") or {}
    what = next(
        (name for name, (_, cap) in _CHOSEN_FIELDS.items() if cap in bounds and name != "rows"),
        "rows",
    )
    bound_field, cap_field = _CHOSEN_FIELDS[what]
    values: tuple[Any, ...] = (
        bounds.get(bound_field),
        bounds.get(cap_field),
        accuracy.get("epsilon_bound_choice"),
        release.get("epsilon"),
    )
    numbers = [float(x) for x in values if _is_number(x)]
    if len(numbers) != len(values):
        return None
    chosen, cap, part, whole = numbers
    return ChosenBound(int(chosen), int(cap), part, whole, what)
