"""``report.html``: one readable page for a job's releases and its budget.

The page is plain HTML and CSS (no image, no script): every chart is a few positioned boxes, so
it reflows to any window width, its labels are real text in the reader's fonts (a Noto font
stack; Chromium falls back glyph by glyph), and it prints. Why not matplotlib PNGs: a PNG has a
fixed width (the old 1210 px chart overflowed a 1200 px window), its text cannot wrap and it
draws unicode with whatever font matplotlib found (empty boxes).

Layout: a budget panel (each share, the total, what is left and, with a ledger, the dataset's
record), then one panel per statistic (releases sharing a name), each on its own scale:

* numbers (a median, a price, quantiles, one per key): points on one axis with, where the
  release states an accuracy in the value's own units (``accuracy["value_error"]``), the
  interval ``value ± value_error`` as a band; a single number without such an interval is
  printed large instead of drawn alone on an axis;
* labels (an election winner, a top-k list): the label, or a ranked list, one row per key;
* a private CDF (``statistic`` ``"cdf"``, a value with ``steps`` and ``cdf``): its step plot
  as one inline SVG path per release (up to :data:`MAX_CDF_CURVES`; the band ``F ± D`` of the
  stated KS distance when there is one curve), and a table of quantiles read from the released
  CDF (the requested ones, else the deciles and quartiles: post-processing of released values).

**Privacy**: everything on the page is a released value or a public parameter taken from the
release document (the releases' ``value``, ``key``, ``window``, mechanism, ε, δ, bounds and
accuracy, and the budget); the axes' ranges are computed from released values only. No score,
count or record is read here.

Numbers are printed at the grid's resolution: with a public grid step
(``accuracy["cell_width"]``) a value on a 0.1 grid prints ``70.3``; otherwise the shortest of
``repr`` and 15 significant digits (never ``70.30000000000001``).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

__all__ = [
    "MAX_CDF_CURVES",
    "VALUE_ERROR_KEYS",
    "format_number",
    "grid_decimals",
    "render_report",
]

#: Accuracy fields stating a half-width in the value's own units (drawn as a band).
VALUE_ERROR_KEYS = ("value_error",)
#: The most step curves one CDF panel draws (the quantile table lists every release).
MAX_CDF_CURVES = 8
#: Quantiles shown for a CDF released without requested ones (read from its step CDF).
_CDF_DEFAULT_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)

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
.track{position:relative;height:26px;margin:0 10px;border-left:1px solid #e3e5e8;
 border-right:1px solid #e3e5e8;background:linear-gradient(#e3e5e8,#e3e5e8) 0 50%/100% 1px
 no-repeat}
.dot{position:absolute;top:50%;width:11px;height:11px;border-radius:50%;
 transform:translate(-50%,-50%);background:#d9822b;border:1px solid #fff}
.band{position:absolute;top:25%;height:50%;background:rgba(217,130,43,.28);
 border:1px solid rgba(217,130,43,.7);border-radius:3px;min-width:2px}
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
table.qt th.n{overflow-wrap:normal;padding-right:6px}
"""


# --------------------------------------------------------------------------- numbers


def grid_decimals(step: float) -> int | None:
    """Decimals that print every point of a grid with spacing ``step`` (0.1 → 1, 5 → 0).

    ``step`` is a public grid spacing as floating point arithmetic left it (``0.0999999999``
    for 0.1): it is read at 12 significant digits. ``None`` for a step that is not a positive
    finite number.
    """
    if not isinstance(step, (int, float)) or isinstance(step, bool):
        return None
    if not math.isfinite(step) or step <= 0:
        return None
    exponent = Decimal(f"{step:.12g}").normalize().as_tuple().exponent
    if not isinstance(exponent, int):  # pragma: no cover - finite numbers have int exponents
        return None
    return min(max(-exponent, 0), 12)


def format_number(value: float, step: float | None = None) -> str:
    """``value`` at the resolution of a grid of spacing ``step`` (public), or shortest.

    With a ``step``, ``70.30000000000001`` on a 0.1 grid prints ``70.3`` (a value that is not
    on a decimal grid of that resolution, e.g. a grid offset by 0.05, keeps its own digits).
    Without one, the shorter of ``repr`` and 15 significant digits: floating point noise in
    the 16th and 17th digits is not printed, every printed digit is exact.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    decimals = None if step is None else grid_decimals(step)
    if decimals is not None and step is not None:
        text = f"{value:.{decimals}f}"
        if abs(float(text) - value) <= abs(step) * 1e-6:
            return _drop_negative_zero(text)
    text = min((repr(value), f"{value:.15g}"), key=len)
    return _drop_negative_zero(text)


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
    """A public parameter (ε, δ, ρ): up to 6 significant digits."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{float(value):.6g}"
    return "–" if value is None else str(value)


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


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


# --------------------------------------------------------------------------- accuracy


def _step(release: Mapping[str, Any]) -> float | None:
    step = release.get("accuracy", {}).get("cell_width")
    return float(step) if _is_number(step) and step > 0 else None


def _half_width(release: Mapping[str, Any]) -> float | None:
    accuracy = release.get("accuracy", {})
    for key in VALUE_ERROR_KEYS:
        width = accuracy.get(key)
        if _is_number(width) and math.isfinite(width) and width >= 0:
            return float(width)
    return None


def _accuracy_items(release: Mapping[str, Any]) -> list[str]:
    """The release's accuracy in plain words (HTML-escaped list items).

    A release that states its accuracy in one sentence (``accuracy_description``, in the
    statistic's own units) is shown by that sentence and its grid step: the sentence already
    says every bound (each is also in ``release.json``, with its unit). Otherwise each bound in
    words for the ones this module knows, and with its unit (``accuracy_units``) for the rest.
    """
    accuracy = dict(release.get("accuracy", {}))
    accuracy.pop("confidence", None)
    step = _step(release)
    grid = [] if step is None else [f"grid step {format_number(step, step)}"]
    description = release.get("accuracy_description")
    if isinstance(description, str) and description:
        return [_e(item) for item in (description, *grid)]
    accuracy.pop("cell_width", None)
    items = []
    for key in VALUE_ERROR_KEYS:
        if key in accuracy and _is_number(accuracy[key]):
            half = format_number(float(accuracy.pop(key)), step)
            items.append(f"within ± {half} of the released value, in the value's own units")
    if "ks_distance" in accuracy and _is_number(accuracy["ks_distance"]):
        bound = _bound(float(accuracy.pop("ks_distance")))
        items.append(
            f"the released CDF is within {bound} of the data's CDF at every point (KS distance)"
        )
        for key in ("rounding_error", "log_candidates"):  # parts of the sentence's bound
            accuracy.pop(key, None)
    if "rank_error" in accuracy:
        items.append(
            f"within {_bound(float(accuracy.pop('rank_error')))} ranks of the best grid point"
        )
    if "fine_rank_error" in accuracy:
        bound = _bound(float(accuracy.pop("fine_rank_error")))
        items.append(f"refined pass: within {bound} ranks of the best fine grid point")
    if "score_loss" in accuracy:
        items.append(
            f"score within {_bound(float(accuracy.pop('score_loss')))} of the best candidate's "
            "(in the statistic's score units)"
        )
    units = release.get("accuracy_units") or {}
    for key, value in sorted(accuracy.items()):
        shown = _bound(float(value)) if _is_number(value) else _label(value)
        unit = units.get(key) if isinstance(units, Mapping) else None
        items.append(f"{key.replace('_', ' ')}: {shown}" + (f" ({unit})" if unit else ""))
    return [_e(item) for item in (*items, *grid)]


def _accuracy_block(releases: Sequence[Mapping[str, Any]]) -> str:
    """One accuracy list when the releases share it (per-key), else one per row label."""
    first = releases[0]
    confidence = first.get("accuracy", {}).get("confidence")
    heading = (
        f"Accuracy at {format_number(float(confidence) * 100)}% confidence"
        if _is_number(confidence)
        else "Accuracy"
    )
    # compared as printed: per-key grid steps differ in their last floating point digits
    printed = [_accuracy_items(release) for release in releases]
    if all(items == printed[0] for items in printed):
        body = "".join(f"<li>{item}</li>" for item in printed[0]) or "<li>not stated</li>"
        suffix = " (each key)" if len(releases) > 1 else ""
        return f'<p class="meta">{_e(heading)}{suffix}:</p><ul class="acc">{body}</ul>'
    rows = []
    for release, items in zip(releases, printed, strict=True):
        text = "; ".join(items) or "not stated"
        rows.append(f"<li><b>{_e(_row_label(release))}</b>: {text}</li>")
    return f'<p class="meta">{_e(heading)}:</p><ul class="acc">{"".join(rows)}</ul>'


# --------------------------------------------------------------------------- panels


def _row_label(release: Mapping[str, Any]) -> str:
    parts = []
    if "key" in release:
        parts.append(_label(release["key"]))
    if release.get("window"):
        parts.append(str(release["window"]))
    return " · ".join(parts) or str(release["name"])


def _numbers(value: Any) -> list[float] | None:
    """The finite numbers of a numeric value (one, or a list), else None (shown as labels)."""
    values = value if isinstance(value, list) else [value]
    if values and all(_is_number(v) and math.isfinite(v) for v in values):
        return [float(v) for v in values]
    return None


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


def _numeric_panel_body(releases: Sequence[Mapping[str, Any]]) -> str:
    rows: list[tuple[Mapping[str, Any], list[float], float | None]] = []
    for release in releases:
        numbers = _numbers(release["value"])
        assert numbers is not None
        rows.append((release, numbers, _half_width(release)))
    single = len(rows) == 1 and len(rows[0][1]) == 1 and "key" not in rows[0][0]
    if single and rows[0][2] is None:
        release, numbers, _ = rows[0]
        return f'<p class="big">{_e(format_number(numbers[0], _step(release)))}</p>'
    step = min((s for s in (_step(r) for r, _, _ in rows) if s is not None), default=None)
    points = [
        end
        for _, numbers, width in rows
        for number in numbers
        for end in ((number - width, number + width) if width else (number,))
    ]
    lower, upper = _axis_range(points, step)
    cells = []
    for release, numbers, width in rows:
        own_step = _step(release)
        marks = []
        if width:
            for number in numbers:
                marks.append(
                    f'<span class="band" style="left:{_at(number - width, lower, upper)};'
                    f'width:{100.0 * 2 * width / (upper - lower):.3f}%"></span>'
                )
        for number in numbers:
            shown = format_number(number, own_step)
            marks.append(
                f'<span class="dot" style="left:{_at(number, lower, upper)}" '
                f'title="{_e(shown)}"></span>'
            )
        text = ", ".join(format_number(n, own_step) for n in numbers)
        if width:
            text += f" (± {format_number(width, own_step)})"
        label = _row_label(release) if ("key" in release or release.get("window")) else ""
        cells.append(
            f'<span class="k">{_e(label)}</span><div class="track">{"".join(marks)}</div>'
            f'<span class="v">{_e(text)}</span>'
        )
    ticks, decimals = _nice_ticks(lower, upper)
    tick_html = []
    for tick in ticks:
        position = (tick - lower) / (upper - lower)
        side = "lo" if position < 0.06 else "hi" if position > 0.94 else "mid"
        tick_html.append(
            f'<span class="tick {side}" style="left:{_at(tick, lower, upper)}">'
            f"{_e(format_number(round(tick, decimals), 10.0**-decimals))}</span>"
        )
    cells.append(f'<span></span><div class="axis">{"".join(tick_html)}</div><span></span>')
    return f'<div class="plot">{"".join(cells)}</div>'


def _label_panel_body(releases: Sequence[Mapping[str, Any]]) -> str:
    def one(value: Any) -> str:
        if isinstance(value, list):
            items = "".join(f"<li>{_e(_label(v))}</li>" for v in value)
            return f'<ol class="rank">{items}</ol>'
        return _e(_label(value))

    if len(releases) == 1 and "key" not in releases[0] and not releases[0].get("window"):
        value = releases[0]["value"]
        if isinstance(value, list):
            return f'<p class="meta">in the order selected:</p>{one(value)}'
        return f'<p class="big">{one(value)}</p>'
    rows = "".join(
        f"<tr><th>{_e(_row_label(r))}</th><td>{one(r['value'])}</td></tr>" for r in releases
    )
    return f"<table><tr><th>key</th><th>released</th></tr>{rows}</table>"


def _cdf_of(value: Any) -> dict[str, Any] | None:
    """A released CDF's parts (steps, cumulative fractions, bounds, quantiles), else None."""
    if not isinstance(value, Mapping):
        return None
    steps, cdf = value.get("steps"), value.get("cdf")
    lower, upper = value.get("lower"), value.get("upper")
    if not (isinstance(steps, list) and isinstance(cdf, list) and len(steps) == len(cdf)):
        return None
    numbers = [*steps, *cdf, lower, upper]
    if not all(_is_number(v) and math.isfinite(v) for v in numbers):
        return None
    low, high = float(lower), float(upper)  # type: ignore[arg-type]  # numbers, checked
    if not low < high:
        return None
    quantiles = value.get("quantiles")
    requested: list[tuple[float, float]] = []
    if isinstance(quantiles, Mapping):
        for alpha, q in quantiles.items():
            try:
                requested.append((float(alpha), float(q)))
            except (TypeError, ValueError):
                return None
    return {
        "steps": [float(v) for v in steps],
        "cdf": [min(max(float(v), 0.0), 1.0) for v in cdf],
        "lower": low,
        "upper": high,
        "quantiles": requested,
        "k": value.get("k"),
        "n_hat": value.get("n_hat"),
        "count_released": value.get("count_released") is True,
    }


def _read_quantile(cdf: Mapping[str, Any], alpha: float) -> float:
    """The smallest step with ``F >= alpha`` (post-processing of the released CDF)."""
    for step, share in zip(cdf["steps"], cdf["cdf"], strict=True):
        if share >= alpha - 1e-12:
            return float(step)
    return float(cdf["upper"])


def _step_vertices(
    cdf: Mapping[str, Any], shift: float, lower: float, upper: float
) -> list[tuple[float, float]]:
    """Corners of ``min(1, max(0, F + shift))`` from ``lower`` to ``upper`` (value, level)."""

    def level(share: float) -> float:
        return min(1.0, max(0.0, share + shift))

    current = level(0.0)
    vertices = [(lower, current)]
    for step, share in zip(cdf["steps"], cdf["cdf"], strict=True):
        vertices.append((step, current))
        current = level(share)
        vertices.append((step, current))
    vertices.append((upper, current))
    return vertices


def _svg_points(vertices: Sequence[tuple[float, float]], lower: float, upper: float) -> str:
    return " ".join(
        f"{1000.0 * (x - lower) / (upper - lower):.2f},{400.0 * (1.0 - y):.2f}" for x, y in vertices
    )


def _cdf_panel_body(releases: Sequence[Mapping[str, Any]]) -> str:
    cdfs = [_cdf_of(r["value"]) for r in releases]
    parts = [c for c in cdfs if c is not None]
    lower = min(c["lower"] for c in parts)
    upper = max(c["upper"] for c in parts)
    drawn = list(zip(releases, parts, strict=True))[:MAX_CDF_CURVES]
    shapes = []
    single = len(parts) == 1
    distance = releases[0].get("accuracy", {}).get("ks_distance")
    if single and _is_number(distance) and distance > 0:
        band = _step_vertices(parts[0], float(distance), lower, upper)
        band += reversed(_step_vertices(parts[0], -float(distance), lower, upper))
        shapes.append(
            f'<polygon points="{_svg_points(band, lower, upper)}" '
            'fill="rgba(217,130,43,.22)" stroke="none"/>'
        )
    legend = []
    for index, (release, cdf) in enumerate(drawn):
        colour = _PALETTE[index % len(_PALETTE)]
        line = _svg_points(_step_vertices(cdf, 0.0, lower, upper), lower, upper)
        shapes.append(
            f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2" '
            'vector-effect="non-scaling-stroke"/>'
        )
        if not single:
            legend.append(
                f'<span class="item"><span class="sw" style="background:{colour}"></span>'
                f"{_e(_row_label(release))}</span>"
            )
    label = "step plot of the released CDF" + (
        f" with its ±{_bound(float(distance))} band" if single and _is_number(distance) else ""
    )
    ticks, decimals = _nice_ticks(lower, upper)
    tick_html = []
    for tick in ticks:
        position = (tick - lower) / (upper - lower)
        side = "lo" if position < 0.06 else "hi" if position > 0.94 else "mid"
        tick_html.append(
            f'<span class="tick {side}" style="left:{_at(tick, lower, upper)}">'
            f"{_e(format_number(round(tick, decimals), 10.0**-decimals))}</span>"
        )
    y_labels = "".join(
        f'<span style="top:{100.0 * (1.0 - share):.1f}%">{text}</span>'
        for share, text in ((1.0, "1"), (0.5, "0.5"), (0.0, "0"))
    )
    plot = (
        f'<div class="cdfwrap"><div class="cdfy">{y_labels}</div>'
        f'<svg class="cdfplot" viewBox="0 0 1000 400" preserveAspectRatio="none" role="img" '
        f'aria-label="{_e(label)}">{"".join(shapes)}</svg>'
        f'<span></span><div class="axis">{"".join(tick_html)}</div></div>'
    )
    more = ""
    if len(parts) > len(drawn):
        more = (
            f'<p class="meta">the first {len(drawn)} of {len(parts)} releases are drawn; '
            "the table lists every one</p>"
        )
    requested = sorted({alpha for cdf in parts for alpha, _ in cdf["quantiles"]})
    alphas = requested or list(_CDF_DEFAULT_QUANTILES)
    head = "".join(f'<th class="n">{_e(format_number(a))}</th>' for a in alphas)
    rows = []
    for release, cdf in zip(releases, parts, strict=True):
        given = dict(cdf["quantiles"])
        cells = "".join(
            f'<td class="n">{_e(format_number(given.get(a, _read_quantile(cdf, a))))}</td>'
            for a in alphas
        )
        size = f"{int(cdf['n_hat']):,}" if _is_number(cdf["n_hat"]) else "–"
        k = f"{int(cdf['k']):,}" if _is_number(cdf["k"]) else "–"
        name = _row_label(release) if ("key" in release or release.get("window")) else "released"
        bound = release.get("accuracy", {}).get("ks_distance")
        shown = _bound(float(bound)) if _is_number(bound) else "–"
        rows.append(
            f'<tr><th>{_e(name)}</th>{cells}<td class="n">{_e(shown)}</td>'
            f'<td class="n">{_e(k)}</td><td class="n">{_e(size)}</td></tr>'
        )
    caption = "requested quantiles" if requested else "quantiles"
    released = [cdf["count_released"] for cdf in parts]
    size_head = "n̂ (released)" if all(released) else "n" if not any(released) else "n or n̂"
    table = (
        f'<p class="meta">{caption}, read from the released CDF (no extra ε):</p>'
        f'<table class="qt"><tr><th></th>{head}<th class="n">KS ≤</th><th class="n">k</th>'
        f'<th class="n">{size_head}</th></tr>'
        f"{''.join(rows)}</table>"
    )
    legend_html = f'<p class="legend">{"".join(legend)}</p>' if legend else ""
    return f"{plot}{legend_html}{more}{table}"


def _cdf_accuracy_block(releases: Sequence[Mapping[str, Any]]) -> str:
    """Several CDFs: one sentence; each release's KS bound is in the table's "KS ≤" column."""
    confidence = releases[0].get("accuracy", {}).get("confidence")
    known = _is_number(confidence)
    heading = (
        f"Accuracy at {format_number(float(confidence) * 100)}% confidence"
        if known
        else ("Accuracy")
    )
    probability = f"With probability {float(confidence):g}" if known else "With its confidence"
    text = (
        f"{probability}, each released CDF is within its bound (column KS ≤) of the data's "
        "CDF at every point (the KS distance to the empirical CDF of the values kept after "
        "bounding, snapped up to the public grid); a quantile read from it has a data CDF "
        "value within the same bound of its alpha."
    )
    return f'<p class="meta">{_e(heading)}:</p><ul class="acc"><li>{_e(text)}</li></ul>'


def _statistic_panel(releases: Sequence[Mapping[str, Any]]) -> str:
    first = releases[0]
    numeric = all(_numbers(r["value"]) is not None for r in releases)
    if all(_cdf_of(r["value"]) is not None for r in releases):
        body = _cdf_panel_body(releases)
    elif numeric:
        body = _numeric_panel_body(releases)
    else:
        body = _label_panel_body(releases)
    epsilons = sorted({_param(r.get("epsilon")) for r in releases})
    per = " per key" if any("key" in r for r in releases) else ""
    meta = (
        f"{_e(first.get('statistic', ''))} · {_e(first.get('mechanism', ''))} · "
        f"ε {_e(', '.join(epsilons))}{per} · {_e(first.get('neighbouring', ''))} · "
        f"{_plural(len(releases), 'release')}"
    )
    delta = {_param(r.get("delta")) for r in releases} - {"0"}
    if delta:
        meta += f" · δ {_e(', '.join(sorted(delta)))}"
    accuracy = _accuracy_block(releases)
    if len(releases) > 1 and all(_cdf_of(r["value"]) is not None for r in releases):
        accuracy = _cdf_accuracy_block(releases)
    wide = " wide" if len(releases) > 6 else ""
    return (
        f'<section class="panel{wide}" id="release-{_e(first["name"])}">'
        f'<h2>{_e(first["name"])}</h2><p class="meta">{meta}</p>{body}'
        f"{accuracy}</section>"
    )


# --------------------------------------------------------------------------- budget


def _kv_rows(record: Mapping[str, Any]) -> str:
    rows = []
    for key, value in record.items():
        if isinstance(value, Mapping):
            shown = ", ".join(
                f"{k} {_param(v) if _is_number(v) else _label(v)}"
                for k, v in value.items()
                if not isinstance(v, (Mapping, list))
            )
        elif isinstance(value, list):
            if value and all(isinstance(v, Mapping) for v in value):
                rows.append(f"<dt>{_e(key)}</dt><dd>{_table(value)}</dd>")
                continue
            shown = ", ".join(_label(v) for v in value)
        elif _is_number(value):
            shown = _param(value)
        else:
            shown = "–" if value is None else str(value)
        rows.append(f"<dt>{_e(str(key).replace('_', ' '))}</dt><dd>{_e(shown)}</dd>")
    return "".join(rows)


def _table(records: Sequence[Mapping[str, Any]]) -> str:
    columns: list[str] = []
    for record in records:
        columns.extend(k for k in record if k not in columns)
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{_e(_param(r.get(c)) if _is_number(r.get(c)) else _label(r.get(c, '')))}</td>"
            for c in columns
        )
        + "</tr>"
        for r in records
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _budget_panel(budget: Mapping[str, Any]) -> str:
    total = float(budget["epsilon_total"])
    spent = float(budget["epsilon_spent"])
    left = max(total - spent, 0.0)
    shares = list(budget.get("shares", []))
    segments, rows = [], []
    for index, share in enumerate(shares):
        colour = _PALETTE[index % len(_PALETTE)]
        epsilon = float(share.get("epsilon_spent", share.get("epsilon", 0.0)))
        width = 100.0 * epsilon / total if total > 0 else 0.0
        name = str(share.get("name", f"share {index + 1}"))
        segments.append(
            f'<span style="width:{width:.3f}%;background:{colour}" '
            f'title="{_e(name)}: ε {_e(_param(epsilon))}"></span>'
        )
        rounds = share.get("rounds")
        rows.append(
            f'<tr><td><span class="sw" style="background:{colour}"></span>{_e(name)}</td>'
            f"<td>{_e(share.get('mechanism', ''))}</td>"
            f'<td class="n">{_e(_param(rounds) if rounds is not None else "–")}</td>'
            f'<td class="n">{_e(_param(epsilon))}</td>'
            f'<td class="n">{_e(_param(share.get("delta_spent", share.get("delta", 0.0))))}</td>'
            "</tr>"
        )
    if left > 0 and total > 0:
        segments.append(
            f'<span style="width:{100.0 * left / total:.3f}%;background:#e4e6ea" '
            f'title="left: ε {_e(_param(left))}"></span>'
        )
    delta_total = float(budget.get("delta_total", 0.0))
    delta_spent = float(budget.get("delta_spent", 0.0))
    rows.append(
        '<tr><td><span class="sw" style="background:#e4e6ea"></span>left</td><td></td><td></td>'
        f'<td class="n">{_e(_param(left))}</td>'
        f'<td class="n">{_e(_param(max(delta_total - delta_spent, 0.0)))}</td></tr>'
    )
    rows.append(
        f'<tr><th>total</th><th></th><th></th><th class="n">{_e(_param(total))}</th>'
        f'<th class="n">{_e(_param(delta_total))}</th></tr>'
    )
    composition = budget.get("composition", "basic")
    rho = budget.get("rho_total")
    summary = (
        f"ε {_e(_param(spent))} spent of {_e(_param(total))}, {_e(_param(left))} left; "
        f"δ {_e(_param(delta_spent))} of {_e(_param(delta_total))} "
        f"({_e(composition)} composition)"
    )
    if rho is not None:
        summary += f"; ρ {_e(_param(budget.get('rho_spent')))} of {_e(_param(rho))}"
    ledger = budget.get("ledger")
    ledger_html = ""
    if isinstance(ledger, Mapping):
        ledger_html = (
            '<h2>Ledger record</h2><p class="meta">this run as the dataset\'s ledger '
            f'records it</p><dl class="kv">{_kv_rows(ledger)}</dl>'
        )
    return (
        '<section class="panel wide" id="budget"><h2>Privacy budget</h2>'
        f'<p class="meta">{summary}</p><div class="bar">{"".join(segments)}</div>'
        '<table><tr><th>share</th><th>mechanism</th><th class="n">rounds</th>'
        f'<th class="n">ε</th><th class="n">δ</th></tr>{"".join(rows)}</table>'
        f"{ledger_html}</section>"
    )


# --------------------------------------------------------------------------- page


def render_report(document: Mapping[str, Any]) -> str:
    """The whole ``report.html`` page (UTF-8 text) for a ``release.json`` document.

    **Privacy**: reads only ``document`` (released values and public parameters); the page
    shows nothing else.
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for release in document["releases"]:
        groups.setdefault(str(release["name"]), []).append(release)
    panels = [_statistic_panel(releases) for releases in groups.values()]
    insecure = any(r.get("rng", "os_csprng") != "os_csprng" for r in document["releases"])
    warning = (
        '<p class="warn">Some values were sampled with a seeded test generator: they are not '
        "private releases.</p>"
        if insecure
        else ""
    )
    count = len(document["releases"])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>beam-dp release report</title><style>{_STYLE}</style></head>
<body><main>
<h1>Differentially private releases</h1>
<p class="lede">{_plural(len(groups), "statistic")}, {_plural(count, "release")}. Only released
values and public parameters appear on this page; each statistic has its own scale.</p>
{warning}
<div class="panels">
{_budget_panel(document["budget"])}
{"".join(panels)}
</div>
<footer>Accuracy bounds are rounded up; values are printed at their grid's resolution.</footer>
</main></body></html>
"""
