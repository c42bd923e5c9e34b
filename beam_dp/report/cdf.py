"""The private CDF's panel of ``report.html``: step curves and the quantiles read from them.

A release with ``statistic`` ``"cdf"`` (a value with ``steps`` and ``cdf``) is drawn as one
inline SVG step path per release, up to :data:`MAX_CDF_CURVES` (with one curve, the band
``F ± D`` of its stated KS distance), above a table of quantiles read from the released CDF:
the requested ones, else the deciles and quartiles.

**Privacy**: the curves, the band and the quantile table are post-processing of released
values (the steps, the CDF and its stated accuracy); the axis comes from released steps only.
No score, count or record is read here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from beam_dp.report.formatting import (
    _PALETTE,
    _axis_ticks,
    _bound,
    _e,
    _is_number,
    _row_label,
    _scroll,
    format_number,
    format_share,
    grid_step,
)

__all__ = ["MAX_CDF_CURVES"]

#: The most step curves one CDF panel draws (the quantile table lists every release).
MAX_CDF_CURVES = 8


#: Quantiles shown for a CDF released without requested ones (read from its step CDF).
_CDF_DEFAULT_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


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


def _cdf_intervals(release: Mapping[str, Any]) -> dict[float, tuple[float, float]]:
    """The interval of each quantile read from a released CDF, by alpha (none: {})."""
    interval = release.get("interval")
    if not isinstance(interval, Mapping):
        return {}
    alphas, lower, upper = (interval.get(k) for k in ("quantiles", "lower", "upper"))
    if not (isinstance(alphas, list) and isinstance(lower, list) and isinstance(upper, list)):
        return {}
    if not len(alphas) == len(lower) == len(upper):
        return {}
    # keyed as the value's quantiles are named (f"{alpha:g}": 1/30 is "0.0333333")
    return {
        float(f"{float(a):g}"): (float(lo), float(hi))
        for a, lo, hi in zip(alphas, lower, upper, strict=True)
        if _is_number(a) and _is_number(lo) and _is_number(hi)
    }


def _interval_bars(
    ends: Mapping[float, tuple[float, float]],
    colour: str,
    lower: float,
    upper: float,
    step: float | None,
) -> list[str]:
    """Each quantile's interval as a horizontal bar with end caps at the height alpha."""
    bars = []
    for alpha, (lo, hi) in ends.items():
        x1 = 1000.0 * (lo - lower) / (upper - lower)
        x2 = 1000.0 * (hi - lower) / (upper - lower)
        y = 400.0 * (1.0 - alpha)
        bars.append(
            f'<path d="M{x1:.2f},{y - 9:.2f}V{y + 9:.2f}M{x1:.2f},{y:.2f}H{x2:.2f}'
            f'M{x2:.2f},{y - 9:.2f}V{y + 9:.2f}" stroke="{colour}" stroke-width="3" '
            'fill="none" vector-effect="non-scaling-stroke"><title>'
            f"{_e(format_share(alpha))}: [{_e(format_number(lo, step))}, "
            f"{_e(format_number(hi, step))}]"
            "</title></path>"
        )
    return bars


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
        bars = _interval_bars(_cdf_intervals(release), colour, lower, upper, grid_step(release))
        shapes.extend(bars)
        if not single:
            legend.append(
                f'<span class="item"><span class="sw" style="background:{colour}"></span>'
                f"{_e(_row_label(release))}</span>"
            )
    label = "step plot of the released CDF" + (
        f" with its ±{_bound(float(distance))} band" if single and _is_number(distance) else ""
    )
    tick_html = _axis_ticks(lower, upper)
    y_labels = "".join(
        f'<span style="top:{100.0 * (1.0 - share):.1f}%">{text}</span>'
        for share, text in ((1.0, "1"), (0.5, "0.5"), (0.0, "0"))
    )
    plot = (
        f'<div class="cdfwrap"><div class="cdfy">{y_labels}</div>'
        f'<svg class="cdfplot" viewBox="0 0 1000 400" preserveAspectRatio="none" role="img" '
        f'aria-label="{_e(label)}">{"".join(shapes)}</svg>'
        f'<span></span><div class="axis">{tick_html}</div></div>'
    )
    more = ""
    if len(parts) > len(drawn):
        more = (
            f'<p class="meta">the first {len(drawn)} of {len(parts)} releases are drawn; '
            "the table lists every one</p>"
        )
    requested = sorted({alpha for cdf in parts for alpha, _ in cdf["quantiles"]})
    alphas = requested or list(_CDF_DEFAULT_QUANTILES)
    head = "".join(f'<th class="n">{_e(format_share(a))}</th>' for a in alphas)
    rows = []
    columns: list[tuple[list[str], str, str, str]] = []
    for release, cdf in zip(releases, parts, strict=True):
        given = dict(cdf["quantiles"])
        ends = _cdf_intervals(release)
        step = grid_step(release)

        def cell(
            a: float, ends: Mapping[float, tuple[float, float]] = ends, step: float | None = step
        ) -> str:
            text = format_number(given.get(a, _read_quantile(cdf, a)), step)  # noqa: B023
            if a in ends:
                text += f" [{format_number(ends[a][0], step)}, {format_number(ends[a][1], step)}]"
            return f'<td class="n">{_e(text)}</td>'

        by_alpha = [cell(a) for a in alphas]
        cells = "".join(by_alpha)
        size = f"{int(cdf['n_hat']):,}" if _is_number(cdf["n_hat"]) else "–"
        k = f"{int(cdf['k']):,}" if _is_number(cdf["k"]) else "–"
        keyed = "key" in release or bool(release.get("window"))
        name = _row_label(release) if keyed else "released"
        word = "" if keyed else ' class="word"'  # one word, never broken letter by letter
        bound = release.get("accuracy", {}).get("ks_distance")
        shown = _bound(float(bound)) if _is_number(bound) else "–"
        columns.append((by_alpha, shown, k, size))
        rows.append(
            f'<tr><th{word}>{_e(name)}</th>{cells}<td class="n">{_e(shown)}</td>'
            f'<td class="n">{_e(k)}</td><td class="n">{_e(size)}</td></tr>'
        )
    caption = "requested quantiles" if requested else "quantiles"
    with_intervals = [r for r in releases if _cdf_intervals(r)]
    intervals_note = ""
    if with_intervals:
        level = with_intervals[0]["interval"].get("confidence")
        shown = format_share(float(level) * 100) if _is_number(level) else "?"
        intervals_note = (
            f", each with its {shown}% interval [lower, upper] for the data's quantile "
            "(read from the KS bound; bars on the plot)"
        )
    released = [cdf["count_released"] for cdf in parts]
    size_head = "n̂ (released)" if all(released) else "n" if not any(released) else "n or n̂"
    if len(parts) == 1:  # one release: a quantile a row (29 of them read down, not across)
        grid = (
            '<table class="qt"><tr><th class="word">alpha</th><th class="n">released</th></tr>'
            f"{_one_release_rows(alphas, columns[0], size_head)}</table>"
        )
    else:
        grid = (
            f'<table class="qt"><tr><th></th>{head}<th class="n">KS ≤</th><th class="n">k</th>'
            f'<th class="n">{size_head}</th></tr>{"".join(rows)}</table>'
        )
    table = (
        f'<p class="meta">{caption}, read from the released CDF (no extra ε)'
        f"{intervals_note}:</p>" + _scroll(grid)
    )
    legend_html = f'<p class="legend">{"".join(legend)}</p>' if legend else ""
    return f"{plot}{legend_html}{more}{table}"


def _one_release_rows(
    alphas: Sequence[float], column: tuple[list[str], str, str, str], size_head: str
) -> str:
    """The quantile table of one release, transposed: an alpha and its quantile a row, then
    the KS bound, k and the size."""
    cells, shown, k, size = column
    rows = [
        f'<tr><th class="n">{_e(format_share(a))}</th>{cell}</tr>'
        for a, cell in zip(alphas, cells, strict=True)
    ]
    rows += [
        f'<tr><th class="word">{_e(head)}</th><td class="n">{_e(text)}</td></tr>'
        for head, text in (("KS ≤", shown), ("k", k), (size_head, size))
    ]
    return "".join(rows)


def _cdf_accuracy_block(releases: Sequence[Mapping[str, Any]]) -> str:
    """Several CDFs: one sentence; each release's KS bound is in the table's "KS ≤" column."""
    confidence = releases[0].get("accuracy", {}).get("confidence")
    known = _is_number(confidence)
    heading = (
        f"Accuracy at {format_share(float(confidence) * 100)}% confidence"
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
