"""The number, label and budget panels of ``report.html`` and the accuracy lines under them.

* numbers (a median, a price, quantiles, one per key): points on one axis with, where the
  release states an accuracy in the value's own units (``accuracy["value_error"]``, see
  :data:`VALUE_ERROR_KEYS`), the interval ``value ± value_error`` as a band, and where it
  carries quantile intervals (``interval``: ``lower``, ``upper``) each ``[lower, upper]`` as a
  bar with end caps, its value printed ``5.16 [5.09, 5.22]``; a single number without an
  interval is printed large instead of drawn alone on an axis;
* labels (an election winner, a top-k list): the label, or a ranked list, one row per key;
* the budget: each share, the total, what is left and, with a ledger, the dataset's record.

The private CDF's panel is :mod:`beam_dp.report.cdf`.

**Privacy**: everything drawn is a released value or a public parameter taken from the release
document (values, keys, windows, mechanism, ε, δ, bounds, accuracy, the budget); an axis range
is computed from released values only. No score, count or record is read here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from beam_dp.report.formatting import (
    _PALETTE,
    _at,
    _axis_range,
    _axis_ticks,
    _bound,
    _e,
    _is_number,
    _label,
    _param,
    _row_label,
    _scroll,
    chosen_bound,
    format_number,
    format_share,
    grid_step,
)

__all__ = ["VALUE_ERROR_KEYS"]

#: Accuracy fields stating a half-width in the value's own units (drawn as a band).
VALUE_ERROR_KEYS = ("value_error",)


# ------------------------------------------------------------------- accuracy


def _step(release: Mapping[str, Any]) -> float | None:
    return grid_step(release)


def _half_width(release: Mapping[str, Any]) -> float | None:
    accuracy = release.get("accuracy", {})
    for key in VALUE_ERROR_KEYS:
        width = accuracy.get(key)
        if _is_number(width) and math.isfinite(width) and width >= 0:
            return float(width)
    return None


def _interval_ends(release: Mapping[str, Any], count: int) -> list[tuple[float, float]]:
    """The ``(lower, upper)`` of each of a release's ``count`` numbers (none: [])."""
    interval = release.get("interval")
    if not isinstance(interval, Mapping):
        return []
    lower, upper = interval.get("lower"), interval.get("upper")
    lowers = lower if isinstance(lower, list) else [lower]
    uppers = upper if isinstance(upper, list) else [upper]
    if len(lowers) != count or len(uppers) != count:
        return []
    ends = list(zip(lowers, uppers, strict=True))
    if not all(_is_number(lo) and _is_number(hi) and lo <= hi for lo, hi in ends):
        return []
    return [(float(lo), float(hi)) for lo, hi in ends]


def _interval_item(release: Mapping[str, Any]) -> list[str]:
    """The intervals in words (what they hold, at what confidence, what they cost)."""
    interval = release.get("interval")
    if not isinstance(interval, Mapping) or not _is_number(interval.get("confidence")):
        return []
    level = format_share(float(interval["confidence"]) * 100)
    epsilon = interval.get("epsilon")
    spent = float(epsilon) if isinstance(epsilon, (int, float)) else 0.0
    cost = (
        f"ε {format_share(spent)} of the release's"
        if spent > 0
        else "post-processing of the release, no ε of its own"
    )
    note = interval.get("note")
    return [
        f"bars: {level}% intervals [lower, upper] that hold the data's quantile over the "
        f"mechanism's randomness, all of a release's at once ({interval.get('method')}; {cost})"
    ] + ([f"note: {note}"] if isinstance(note, str) and note else [])


def _chosen_bound(release: Mapping[str, Any]) -> list[str]:
    """The rows (or keys) per person an ``"auto"`` release chose, in words, if any."""
    chosen = chosen_bound(release)
    if chosen is None:
        return []
    return [
        f"{chosen.what} per person: {chosen.bound} of at most {chosen.cap}, chosen privately "
        "with ε "
        f"{format_share(chosen.epsilon_choice)} of this release's "
        f"{format_share(chosen.epsilon_release)}"
    ]


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
    chosen = _chosen_bound(release)
    if chosen:  # said in words below, not listed again as raw keys
        for key in ("epsilon_bound_choice", "epsilon_statistic"):
            accuracy.pop(key, None)
    grid = [] if step is None else [f"grid step {format_share(step)}"]
    grid = _interval_item(release) + grid + chosen
    notes = [note for note in release.get("notes") or () if isinstance(note, str)]
    description = release.get("accuracy_description")
    if isinstance(description, str) and description:
        return [_e(item) for item in (*notes, description, *grid)]
    accuracy.pop("cell_width", None)
    items = list(notes)
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
        f"Accuracy at {format_share(float(confidence) * 100)}% confidence"
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


# --------------------------------------------------------- numbers and labels


def _numbers(value: Any) -> list[float] | None:
    """The finite numbers of a numeric value (one, or a list), else None (shown as labels)."""
    values = value if isinstance(value, list) else [value]
    if values and all(_is_number(v) and math.isfinite(v) for v in values):
        return [float(v) for v in values]
    return None


def _numeric_panel_body(releases: Sequence[Mapping[str, Any]]) -> str:
    rows: list[tuple[Mapping[str, Any], list[float], float | None, list[tuple[float, float]]]]
    rows = []
    for release in releases:
        numbers = _numbers(release["value"])
        assert numbers is not None
        rows.append((release, numbers, _half_width(release), _interval_ends(release, len(numbers))))
    single = len(rows) == 1 and len(rows[0][1]) == 1 and "key" not in rows[0][0]
    if single and rows[0][2] is None and not rows[0][3]:
        release, numbers, _, _ = rows[0]
        return f'<p class="big">{_e(format_number(numbers[0], _step(release)))}</p>'
    step = min((s for s in (_step(r) for r, _, _, _ in rows) if s is not None), default=None)
    points = [
        end
        for _, numbers, width, _ in rows
        for number in numbers
        for end in ((number - width, number + width) if width else (number,))
    ]
    points += [end for _, _, _, ends in rows for pair in ends for end in pair]
    lower, upper = _axis_range(points, step)
    cells = []
    for release, numbers, width, ends in rows:
        own_step = _step(release)
        marks = []
        if width:
            for number in numbers:
                marks.append(
                    f'<span class="band" style="left:{_at(number - width, lower, upper)};'
                    f'width:{100.0 * 2 * width / (upper - lower):.3f}%"></span>'
                )
        for lo, hi in ends:
            shown = f"[{format_number(lo, own_step)}, {format_number(hi, own_step)}]"
            marks.append(
                f'<span class="ci" style="left:{_at(lo, lower, upper)};'
                f'width:{100.0 * (hi - lo) / (upper - lower):.3f}%" title="{_e(shown)}"></span>'
            )
        for number in numbers:
            shown = format_number(number, own_step)
            marks.append(
                f'<span class="dot" style="left:{_at(number, lower, upper)}" '
                f'title="{_e(shown)}"></span>'
            )
        if ends:  # each "value [lower, upper]," kept on one line
            items = [
                f"{format_number(n, own_step)} [{format_number(lo, own_step)}, "
                f"{format_number(hi, own_step)}]"
                for n, (lo, hi) in zip(numbers, ends, strict=True)
            ]
            text = " ".join(
                f'<span class="nw">{_e(item)}{"," if i < len(items) - 1 else ""}</span>'
                for i, item in enumerate(items)
            )
        else:
            text = _e(", ".join(format_number(n, own_step) for n in numbers))
        if width:
            text += _e(f" (± {format_number(width, own_step)})")
        label = _row_label(release) if ("key" in release or release.get("window")) else ""
        cells.append(
            f'<span class="k">{_e(label)}</span><div class="track">{"".join(marks)}</div>'
            f'<span class="v">{text}</span>'
        )
    tick_html = _axis_ticks(lower, upper)
    cells.append(f'<span></span><div class="axis">{tick_html}</div><span></span>')
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
    return _scroll(
        f'<table><tr><th class="word">key</th><th class="word">released</th></tr>{rows}</table>'
    )


# --------------------------------------------------------------------- budget


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
    return _scroll(f"<table><tr>{head}</tr>{body}</table>")


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
        '<div class="scroll"><table><tr><th>share</th><th>mechanism</th><th class="n">rounds</th>'
        f'<th class="n">ε</th><th class="n">δ</th></tr>{"".join(rows)}</table></div>'
        f"{ledger_html}</section>"
    )
