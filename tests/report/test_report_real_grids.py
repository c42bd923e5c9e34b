"""report.html on real grids (issue 40, item 4): every panel fits 1 000 and 1 400 px windows.

The data: 10^6-point float grids (grid points ``j * (upper - lower) / (10^6 - 1)``, as
``Grid.uniform`` computes them), 50 keys, 200-character labels and a CDF with 29 requested
quantiles, each with its interval. Each panel's scroll width is measured against its box in
headless Chromium; wide tables scroll inside their own wrapper, and a one-word row header
("released", a key) stays on one line.
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from report_browser import chromium_or_skip, run_chromium

from beam_dp.accounting import PrivacyBudget
from beam_dp.io.outputs import write_outputs
from beam_dp.release import Release, ReleaseInterval, make_release, release_document

LOWER, UPPER, POINTS = 0.0, 3558.388558388559, 10**6
STEP = (UPPER - LOWER) / (POINTS - 1)
ALPHAS = [i / 30 for i in range(1, 30)]  # 29 quantiles
KEYS = [f"region-{i:02d}" if i % 5 else f"region-{i:02d}-" + "ü" * 190 for i in range(50)]
LABELS = [f"https://{i}.example/" + "a/very-long-path-segment" * 8 for i in range(6)]


def grid_point(index: int) -> float:
    return float(index * STEP + LOWER) if index < POINTS - 1 else UPPER


def _interval(alphas: list[float], values: list[float], share: float | None) -> ReleaseInterval:
    ends = [
        (grid_point(round(v / STEP) - 2357), grid_point(round(v / STEP) + 3011)) for v in values
    ]
    return ReleaseInterval(
        quantiles=tuple(alphas),
        lower=tuple(lo for lo, _ in ends),
        upper=tuple(hi for _, hi in ends),
        confidence=0.95,
        method="rank_bracket" if share else "ks_band",
        epsilon=(1 / 3) * share if share else 0.0,
        share=share,
    )


def _quantiles(name: str, alphas: list[float], indices: list[int], key: Any = None) -> Release:
    values = [grid_point(i) for i in indices]
    return make_release(
        name=name,
        statistic="quantiles",
        value=values if len(values) > 1 else values[0],
        mechanism="permute_and_flip",
        epsilon=1 / 3,
        sensitivity=0.5,
        neighbouring="add_remove",
        monotone=False,
        num_candidates=POINTS,
        contribution_bounds={"max_contributions_per_unit": 1},
        rounds=8,
        extra_accuracy={"rank_error": 81.63406881167859, "cell_width": STEP},
        key=key,
        interval=_interval(alphas, values, 1 / 3),
    )


def _cdf(key: Any = None, shift: int = 0) -> Release:
    steps = sorted({grid_point(126_403 + 61_733 * j + shift) for j in range(14)})
    cdf = [(j + 1) / len(steps) for j in range(len(steps))]
    read = [next(s for s, f in zip(steps, cdf, strict=True) if f >= a - 1e-12) for a in ALPHAS]
    value = {
        "points": steps,
        "steps": steps,
        "cdf": cdf,
        "quantiles": {f"{a:g}": q for a, q in zip(ALPHAS, read, strict=True)},
        "lower": LOWER,
        "upper": UPPER,
        "k": len(steps),
        "n_hat": 4987 + shift,
        "count_released": True,
    }
    return make_release(
        name="spend_cdf" if key is None else "spend_cdf_by_region",
        statistic="cdf",
        value=value,
        mechanism="exponential",
        epsilon=1 / 3,
        sensitivity=14.0,
        neighbouring="add_remove",
        monotone=False,
        num_candidates=POINTS,
        contribution_bounds={"max_contributions_per_unit": 1},
        extra_accuracy={"ks_distance": 0.08123595251061819, "count_error": 18.0},
        key=key,
        interval=_interval(ALPHAS, read, None),
    )


def _top(key: Any = None) -> Release:
    return make_release(
        name="top_pages" if key is None else "top_pages_by_region",
        statistic="top_candidates",
        value=LABELS[:3],
        mechanism="permute_and_flip_top_k",
        epsilon=1 / 3,
        sensitivity=1.0,
        neighbouring="add_remove",
        monotone=True,
        num_candidates=len(LABELS),
        contribution_bounds={"distinct_candidates": 1},
        rounds=3,
        key=key,
    )


def real_grid_document() -> dict[str, Any]:
    """Every panel kind on a 10^6-point float grid, 50 keys, 200-character labels."""
    releases = [
        _quantiles("weight_quartiles", [0.25, 0.5, 0.75], [539_075, 806_209, 982_318]),
        *[
            _quantiles("median_weight_by_region", [0.5], [539_075 + 977 * i], key=k)
            for i, k in enumerate(KEYS)
        ],
        _cdf(),
        *[_cdf(key=k, shift=17 * i) for i, k in enumerate(KEYS)],
        _top(),
        *[_top(key=k) for k in KEYS],
    ]
    budget = PrivacyBudget(2.0)
    for name in dict.fromkeys(r.ledger.name for r in releases):  # one entry per statistic
        entry = next(r.ledger for r in releases if r.ledger.name == name)
        budget.spend(entry.name, mechanism=entry.mechanism, epsilon=entry.epsilon)
        budget.record(entry)
    return release_document(releases, budget.to_json())


# ------------------------------------------------------------------ in a browser

_PROBE = """<script>
(function () {
  var panels = [], headers = [];
  document.querySelectorAll("section.panel").forEach(function (p) {
    var box = p.getBoundingClientRect();
    panels.push({id: p.id, clientWidth: p.clientWidth, scrollWidth: p.scrollWidth,
                 left: box.left, right: box.right});
  });
  document.querySelectorAll("th").forEach(function (th) {
    var text = th.textContent.trim();
    if (!text || /\\s/.test(text)) { return; }
    var range = document.createRange();
    range.selectNodeContents(th);
    var tops = {};
    Array.prototype.forEach.call(range.getClientRects(), function (r) {
      if (r.width > 0) { tops[Math.round(r.top)] = true; }
    });
    headers.push({text: text.slice(0, 40), length: text.length,
                  lines: Object.keys(tops).length});
  });
  var out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({innerWidth: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth, panels: panels, headers: headers});
  document.body.appendChild(out);
})();
</script>"""


def measure_panels(chromium: str, page: Path, width: int, tmp_path: Path) -> dict[str, Any]:
    """Each panel's box and scroll width, and the line count of each one-word table header."""
    probe = tmp_path / f"probe-{width}.html"
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8"
    )
    out = run_chromium(
        chromium, [f"--window-size={width},900", "--dump-dom", probe.as_uri()], tmp_path / "p"
    )
    match = re.search(r'<pre id="probe">(.*?)</pre>', out.decode("utf-8"), re.S)
    assert match, "the probe did not run"
    facts: dict[str, Any] = json.loads(html.unescape(match.group(1)))
    return facts


def screenshot(chromium: str, page: Path, width: int, target: Path, tmp_path: Path) -> None:
    run_chromium(
        chromium,
        [f"--window-size={width},9000", f"--screenshot={target}", page.as_uri()],
        tmp_path / "s",
    )


@pytest.mark.parametrize("width", [1000, 1400])
def test_every_panel_fits_its_box_on_real_grids(width: int, tmp_path: Path) -> None:
    chromium = chromium_or_skip()
    out = Path(write_outputs(real_grid_document(), tmp_path / "out"))
    facts = measure_panels(chromium, out / "report.html", width, tmp_path)
    assert facts["innerWidth"] == width
    assert len(facts["panels"]) == 1 + 6  # the budget and six statistics
    wider = [
        (p["id"], p["scrollWidth"], p["clientWidth"])
        for p in facts["panels"]
        if p["scrollWidth"] > p["clientWidth"] or p["right"] > width
    ]
    assert not wider, wider
    assert facts["scrollWidth"] <= width, facts["scrollWidth"]
    # "released" and short keys on one line; a 200-character key at 8 or more a line, never
    # one letter per line
    broken = [h for h in facts["headers"] if 8 * h["lines"] > max(8, h["length"])]
    assert not broken, broken
    if shots := os.environ.get("REPORT_SCREENSHOTS"):  # to look at: a folder for the PNGs
        screenshot(
            chromium, out / "report.html", width, Path(shots) / f"report-{width}.png", tmp_path
        )
        (Path(shots) / f"panels-{width}.json").write_text(json.dumps(facts["panels"], indent=1))


def test_one_cdf_lists_its_29_quantiles_down_and_many_cdfs_across() -> None:
    from beam_dp.report import render_report

    page = render_report(real_grid_document())
    one = re.search(r'id="release-spend_cdf">(.*?)</section>', page, re.S)
    many = re.search(r'id="release-spend_cdf_by_region">(.*?)</section>', page, re.S)
    assert one and many
    rows = re.findall(r'<tr><th class="n">([^<]*)</th><td class="n">([^<]*)</td></tr>', one[1])
    assert [alpha for alpha, _ in rows][:3] == ["0.0333", "0.0667", "0.1"] and len(rows) == 29
    assert all(re.fullmatch(r"\d+\.\d{3} \[\d+\.\d{3}, \d+\.\d{3}\]", cell) for _, cell in rows)
    assert 'class="panel"' in page.split('id="release-spend_cdf"')[0][-40:]  # narrow: fits
    assert many[1].count("<tr><th>region-") == 50  # a key a row, its quantiles across
