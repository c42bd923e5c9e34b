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
  as one inline SVG path per release (up to :data:`~beam_dp.report.cdf.MAX_CDF_CURVES`; the
  band ``F ± D`` of the stated KS distance when there is one curve), and a table of quantiles
  read from the released CDF (the requested ones, else the deciles and quartiles:
  post-processing of released values).

**Privacy**: everything on the page is a released value or a public parameter taken from the
release document (the releases' ``value``, ``key``, ``window``, mechanism, ε, δ, bounds and
accuracy, and the budget); the axes' ranges are computed from released values only. No score,
count or record is read here.

Numbers are printed at the grid's resolution (:mod:`beam_dp.report.formatting`, which also holds
the style sheet); the panels are :mod:`beam_dp.report.panels` (numbers, labels, budget) and
:mod:`beam_dp.report.cdf` (the private CDF); this module groups releases into panels and
assembles the page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from beam_dp.report.cdf import (
    _cdf_accuracy_block,
    _cdf_of,
    _cdf_panel_body,
)
from beam_dp.report.formatting import (
    _STYLE,
    _e,
    _param,
    _plural,
)
from beam_dp.report.panels import (
    _accuracy_block,
    _budget_panel,
    _label_panel_body,
    _numbers,
    _numeric_panel_body,
)

__all__ = ["render_report"]


# ----------------------------------------------------------------------- page


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
    cdfs = [_cdf_of(r["value"]) for r in releases]
    columns = {alpha for cdf in cdfs if cdf is not None for alpha, _ in cdf["quantiles"]}
    # a wide table, a wide panel (one CDF's quantiles are listed down, not across)
    wide = " wide" if len(releases) > 6 or (len(releases) > 1 and len(columns) > 5) else ""
    return (
        f'<section class="panel{wide}" id="release-{_e(first["name"])}">'
        f'<h2>{_e(first["name"])}</h2><p class="meta">{meta}</p>{body}'
        f"{accuracy}</section>"
    )


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
