"""report.html: one panel per statistic, numbers at the grid's resolution, unicode, fits 1000 px."""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from beam_dp.accounting import PrivacyBudget
from beam_dp.beam.cdf import PrivateCDF
from beam_dp.io.outputs import write_outputs
from beam_dp.release import Release, make_release, release_document
from beam_dp.report import render_report
from beam_dp.report.formatting import format_number, format_share, grid_decimals

_LONG_KEY = "Ελλάδα-" + "x" * 150  # one unbroken 157-character word: must wrap, not overflow


def _median(value: float, key: Any = None, **accuracy: float) -> Release:
    return make_release(
        name="median_weight_by_country" if key is not None else "median_weight",
        statistic="median",
        value=value,
        mechanism="permute_and_flip",
        epsilon=0.5,
        sensitivity=0.5,
        neighbouring="add_remove",
        monotone=False,
        num_candidates=1801,
        contribution_bounds={"max_contributions_per_unit": 1, "max_keys_per_unit": 1},
        extra_accuracy={"rank_error": 20.98, "cell_width": 0.09999999999999432, **accuracy},
        key=key,
    )


def _document(*releases: Release, ledger: dict[str, Any] | None = None) -> dict[str, Any]:
    budget = PrivacyBudget(4.0, delta=1e-6)
    first = {r.name: r.ledger for r in reversed(releases)}
    for entry in reversed(first.values()):
        budget.spend(entry.name, mechanism=entry.mechanism, epsilon=entry.epsilon)
        budget.record(entry)  # a per-key statistic with one key per unit: one entry
    document = release_document(releases, budget.to_json())
    for record in document["releases"]:  # the report's own wording (a sentence: test below)
        record.pop("accuracy_units", None)
        record.pop("accuracy_description", None)
    if ledger is not None:
        document["budget"]["ledger"] = ledger
    return document


def _rich_document() -> dict[str, Any]:
    top = make_release(
        name="top_websites",
        statistic="top_candidates",
        value=["site00.example", "ünïcødé.example", "日本語.example"],
        mechanism="permute_and_flip_top_k",
        epsilon=0.5,
        sensitivity=1.0,
        neighbouring="add_remove",
        monotone=True,
        num_candidates=40,
        contribution_bounds={"distinct_candidates": 1},
        rounds=3,
    )
    quartiles = make_release(
        name="weight_quartiles",
        statistic="quantiles",
        value=[61.760000000000005, 70.1, 78.06],
        mechanism="permute_and_flip",
        epsilon=0.5,
        sensitivity=0.5,
        neighbouring="add_remove",
        monotone=False,
        num_candidates=18001,
        contribution_bounds={"max_contributions_per_unit": 1},
        extra_accuracy={"rank_error": 55.57, "cell_width": 0.010000000000005116},
    )
    winner = make_release(
        name="vote_winner",
        statistic="election",
        value="Melon-pan Party 🍈",
        mechanism="permute_and_flip",
        epsilon=0.5,
        sensitivity=1.0,
        neighbouring="add_remove",
        monotone=True,
        num_candidates=3,
        contribution_bounds={"votes_per_unit": 1},
    )
    per_key = [
        _median(v, key=k, value_error=0.8)
        for k, v in (("de", 69.5), ("日本", 69.80000000000001), (_LONG_KEY, 70.30000000000001))
    ]
    ledger = {
        "ledger": "postgresql://ledger.internal.example/" + "budgets" * 20,
        "dataset": "sample_survey",
        "run": 2,
        "reserved": {"epsilon": 2.0, "delta": 0.0},
        "period_start": "2026-11-01T00:00:00Z",
    }
    return _document(top, quartiles, winner, _median(41.5), *per_key, ledger=ledger)


def _page(document: dict[str, Any]) -> str:
    return render_report(document)


# ------------------------------------------------------------------ numbers


@pytest.mark.parametrize(
    ("value", "step", "shown"),
    [
        (70.30000000000001, 0.1, "70.3"),
        (70.30000000000001, 0.09999999999999432, "70.3"),
        (69.80000000000001, 0.10000000000000853, "69.8"),
        (61.760000000000005, 0.010000000000005116, "61.76"),
        (20.05, 0.1, "20.05"),  # a grid offset by 0.05 keeps its digits
        (70.30000000000001, None, "70.3"),  # no public grid: shortest, no float noise
        (0.1 + 0.2, None, "0.3"),
        (0.44, None, "0.44"),
        (5.0, 5.0, "5"),
        (-0.0, 0.1, "0.0"),
        (7, None, "7"),
    ],
)
def test_numbers_print_at_the_grid_resolution(value: float, step: float | None, shown: str) -> None:
    assert format_number(value, step) == shown


def test_grid_decimals() -> None:
    assert grid_decimals(0.09999999999999432) == 1
    assert grid_decimals(0.010000000000005116) == 2
    assert grid_decimals(25.0) == 0
    assert grid_decimals(0.0) is None
    assert grid_decimals(float("nan")) is None


# ------------------------------------------------------------------ page content


def test_no_float_noise_no_unicode_escapes_and_a_noto_font_stack(tmp_path: Path) -> None:
    out = Path(write_outputs(_rich_document(), tmp_path / "out"))
    page = (out / "report.html").read_text(encoding="utf-8")
    assert '<meta charset="utf-8">' in page
    assert "000000" not in page and "70.3" in page and "69.8" in page and "61.76" in page
    assert "日本" in page and "ünïcødé.example" in page and "🍈" in page
    assert "\\u" not in page
    assert re.search(r"font-family:[^;]*\"Noto Sans\"", page)
    # release.json is readable UTF-8 as well, and still the same document
    text = (out / "release.json").read_text(encoding="utf-8")
    assert "日本" in text and "\\u" not in text
    assert json.loads(text) == json.loads(json.dumps(_rich_document()))
    assert sorted(p.name for p in out.iterdir()) == [
        "release.avro",
        "release.json",
        "release.manifest.json",
        "report.html",
    ]


def _panel(page: str, name: str) -> str:
    match = re.search(rf'<section class="panel[^"]*" id="release-{name}">(.*?)</section>', page)
    assert match, name
    return match.group(1)


def test_one_panel_per_statistic_each_in_its_own_form() -> None:
    page = _page(_rich_document())
    assert page.count('<section class="panel') == 1 + 5  # the budget and five statistics
    top = _panel(page, "top_websites")
    assert re.search(
        r'<ol class="rank"><li>site00.example</li><li>ünïcødé.example</li><li>日本語.example</li>',
        top,
    )
    quartiles = _panel(page, "weight_quartiles")
    assert quartiles.count('class="plot"') == 1 and quartiles.count('class="track"') == 1
    assert quartiles.count('class="dot"') == 3  # three points on one axis
    assert "61.76, 70.10, 78.06" in quartiles and "within 55.6 ranks" in quartiles
    per_key = _panel(page, "median_weight_by_country")
    assert per_key.count('class="plot"') == 1 and per_key.count('class="dot"') == 3
    assert per_key.count('class="band"') == 3  # value ± value_error, in the value's units
    assert "69.8 (± 0.8)" in per_key and "(each key)" in per_key
    assert "within 21 ranks" in per_key and "grid step 0.1" in per_key
    winner = _panel(page, "vote_winner")
    assert '<p class="big">Melon-pan Party 🍈</p>' in winner
    assert "95% confidence" in winner and "score within 8.19" in winner


def test_a_release_that_states_its_accuracy_is_shown_by_its_sentence_and_units() -> None:
    document = _document(_median(41.5, value_error=0.8))
    release = document["releases"][0]
    release["accuracy_description"] = "With probability 0.95, within 0.8 kg of the mean <n>."
    release["accuracy_units"] = {"value_error": "kg", "rank_error": "ranks"}
    panel = _panel(_page(document), "median_weight")
    assert "within 0.8 kg of the mean &lt;n&gt;." in panel and "grid step 0.1" in panel
    assert "score within" not in panel  # the sentence states it; no second wording
    # without a sentence, a bound this module has no words for is shown with its unit
    del release["accuracy_description"]
    release["accuracy"]["vote_shortfall"] = 8.1234
    release["accuracy_units"]["vote_shortfall"] = "votes"
    panel = _panel(_page(document), "median_weight")
    assert "vote shortfall: 8.13 (votes)" in panel and "within 21 ranks" in panel


def test_a_privately_chosen_bound_is_said_in_words_in_both_forms() -> None:
    document = _document(_median(41.5, epsilon_bound_choice=0.05, epsilon_statistic=0.45))
    release = document["releases"][0]
    release["contribution_bounds"] = {
        "max_contributions_per_unit": 8,
        "max_contributions_cap": 1024,
    }
    words = "rows per person: 8 of at most 1024, chosen privately with ε 0.05 of this release's 0.5"
    panel = html.unescape(_panel(_page(document), "median_weight"))
    assert words in panel
    assert "epsilon bound choice" not in panel  # said once, in words
    release["accuracy_description"] = "With probability 0.95, within 21 ranks."
    assert words in html.unescape(_panel(_page(document), "median_weight"))
    fixed = _document(_median(41.5))
    assert "rows per person" not in _panel(_page(fixed), "median_weight")


def test_a_single_number_is_printed_not_drawn_alone_on_an_empty_axis() -> None:
    page = _page(_document(_median(70.30000000000001)))
    assert page.count('<section class="panel') == 2
    panel = _panel(page, "median_weight")
    assert '<p class="big">70.3</p>' in panel and 'class="plot"' not in panel
    # with an interval in the value's units it is drawn: the band is the point of the chart
    page = _page(_document(_median(70.30000000000001, value_error=1.2)))
    panel = _panel(page, "median_weight")
    assert panel.count('class="band"') == 1 and "70.3 (± 1.2)" in panel


def test_budget_panel_shows_each_share_the_total_what_is_left_and_the_ledger() -> None:
    document = _rich_document()
    budget = re.search(r'<section class="panel wide" id="budget">(.*?)</section>', _page(document))
    assert budget
    text = budget.group(1)
    for share in document["budget"]["shares"]:
        assert f"{html.escape(share['name'])}</td>" in text
    assert "ε 2.5 spent of 4, 1.5 left" in text
    assert "<th>total</th>" in text and ">left</td>" in text
    assert "Ledger record" in text and "sample_survey" in text and "period start" in text
    del document["budget"]["ledger"]
    assert "Ledger record" not in _page(document)


def test_a_seeded_test_generator_is_flagged() -> None:
    document = _document(_median(41.5))
    assert "seeded test generator" not in _page(document)
    document["releases"][0]["rng"] = "insecure_seeded_test_generator"
    assert "seeded test generator" in _page(document)


# ------------------------------------------------------------------ in a browser

_PROBE = """<script>
(function () {
  var root = document.documentElement, widest = 0;
  document.querySelectorAll("body *").forEach(function (e) {
    var box = e.parentElement && e.parentElement.closest(".scroll");
    if (!box) {  // inside a table's scroll box the box itself is measured
      widest = Math.max(widest, e.getBoundingClientRect().right);
    }
  });
  var out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({scrollWidth: root.scrollWidth, innerWidth: window.innerWidth,
    widest: widest, text: document.body.innerText});
  document.body.appendChild(out);
})();
</script>"""


def _chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (make test installs Debian's chromium)")
        pytest.skip("Debian's chromium is not installed (make test installs it; CI requires it)")
    return found


def _measure(chromium: str, page: Path, width: int, tmp_path: Path) -> dict[str, Any]:
    """Open ``page`` at ``width`` px in headless Chromium; layout facts written by a probe."""
    probe = tmp_path / f"probe-{width}.html"
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8"
    )
    done = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / f'profile-{width}'}",
            f"--window-size={width},900",
            "--dump-dom",
            probe.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    match = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout.decode("utf-8"), re.S)
    assert match, "the probe did not run"
    facts: dict[str, Any] = json.loads(html.unescape(match.group(1)))
    return facts


@pytest.mark.parametrize("width", [1000, 1400])
def test_report_fits_the_window_in_headless_chromium(width: int, tmp_path: Path) -> None:
    chromium = _chromium()
    document = _rich_document()
    out = Path(write_outputs(document, tmp_path / "out"))
    facts = _measure(chromium, out / "report.html", width, tmp_path)
    assert facts["innerWidth"] == width  # the window really is that wide
    assert facts["scrollWidth"] <= facts["innerWidth"], facts["scrollWidth"]
    assert facts["widest"] <= facts["innerWidth"] + 0.5, facts["widest"]
    for release in document["releases"]:
        assert release["name"] in facts["text"]
    for label in ("日本", "site00.example", "Melon-pan Party 🍈", "70.3", "Privacy budget"):
        assert label in facts["text"]


def test_without_chromium_the_browser_test_skips_locally_and_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="chromium is not installed"):
        _chromium()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        _chromium()


def test_odd_documents_render_escaped_and_without_errors() -> None:
    document = _document(_median(41.5))
    document["releases"][0]["name"] = "<b>odd & name</b>"
    document["releases"].append({**document["releases"][0], "value": float("inf"), "key": [1, "ü"]})
    page = _page(document)
    assert "&lt;b&gt;odd &amp; name&lt;/b&gt;" in page and "<b>odd" not in page
    assert "inf" in page and '[1, "ü"]' in html.unescape(page)
    empty = {"releases": [], "budget": {**document["budget"], "epsilon_total": 0.0, "shares": []}}
    assert "0 statistics, 0 releases" in _page(empty)


# ------------------------------------------------------------------ a private CDF


def _cdf(key: Any = None, quantiles: list[float] | None = None, seed: int = 0) -> Release:
    """A real PrivateCDF release (its combiner's spec over a grid histogram)."""
    transform = PrivateCDF.Globally(
        lower=0.0,
        upper=100.0,
        num_points=201,
        epsilon=2.0,
        record_level=True,
        quantiles=quantiles,
        name="spend_cdf" if key is None else "spend_cdf_by_country",
    )
    spec = transform.spec
    values = np.random.default_rng(seed).lognormal(3.0, 0.5, 3000)
    release = spec.release(spec.draw(spec.grid.histogram(values)))
    return release if key is None else dataclasses.replace(release, key=key)


def test_a_cdf_is_drawn_as_a_step_plot_with_its_band_and_a_quantile_table() -> None:
    release = _cdf(quantiles=[0.1, 0.5, 0.9])
    document = release_document([release], PrivacyBudget(4.0).to_json())
    panel = _panel(_page(document), "spend_cdf")
    assert panel.count("<svg") == 1 and panel.count("<polyline") == 1
    assert panel.count("<polygon") == 1  # F ± D, one curve
    value = release.value
    assert release.interval is not None
    for (alpha, q), lo, hi in zip(
        value.quantiles, release.interval.lower, release.interval.upper, strict=True
    ):
        assert f'<th class="n">{format_share(alpha)}</th>' in panel
        # each quantile with its interval, in the table and as a bar on the plot, on the grid
        # of step 0.5 (201 points over [0, 100]): one decimal
        shown = f"{format_number(q, 0.5)} [{format_number(lo, 0.5)}, {format_number(hi, 0.5)}]"
        assert re.fullmatch(r"\d+\.\d \[\d+\.\d, \d+\.\d\]", shown), shown
        assert f'<td class="n">{shown}</td>' in panel
        bar = f"<title>{format_share(alpha)}: [{format_number(lo, 0.5)}, {format_number(hi, 0.5)}]"
        assert bar in panel
    assert "requested quantiles" in panel and f'<td class="n">{value.n_hat:,}</td>' in panel
    assert "n̂ (released)" in panel
    assert "the released CDF is within" in html.unescape(panel)
    assert "at every point" in panel
    # without the sentence (stripped), the report words the bound itself
    stripped = _document(release)
    assert "the released CDF is within" in _panel(_page(stripped), "spend_cdf")
    assert "log candidates" not in _page(stripped)


def test_a_cdf_per_key_draws_at_most_eight_curves_and_lists_every_key() -> None:
    releases = [_cdf(key=f"k{i}", seed=i) for i in range(10)]
    page = _page(_document(*releases))
    panel = _panel(page, "spend_cdf_by_country")
    assert panel.count("<polyline") == 8 and "<polygon" not in panel
    assert "the first 8 of 10 releases are drawn" in panel
    assert all(f"<tr><th>k{i}</th>" in panel for i in range(10))
    assert '<th class="n">0.5</th>' in panel  # quartiles and deciles read from each CDF
    assert "each released CDF is within its bound (column KS ≤)" in html.unescape(panel)
    for release in releases:  # each key's bound, rounded up, in its row
        bound = release.accuracy["ks_distance"]
        assert 0.01 <= bound < 0.1  # three significant digits: four decimals
        assert f'<td class="n">{math.ceil(bound * 10**4 - 1e-9) / 10**4:g}</td>' in panel
    median = releases[3].value.quantile(0.5)
    assert f'<td class="n">{format_number(median, 0.5)}</td>' in panel


def test_a_cdf_release_goes_through_every_output(tmp_path: Path) -> None:
    document = _document(_cdf(quantiles=[0.5]))
    out = Path(write_outputs(document, tmp_path / "out"))
    assert json.loads((out / "release.json").read_text(encoding="utf-8")) == json.loads(
        json.dumps(document)
    )
    assert "<svg" in (out / "report.html").read_text(encoding="utf-8")


def test_a_cdf_report_fits_the_window_in_headless_chromium(tmp_path: Path) -> None:
    chromium = _chromium()
    releases = [_cdf(quantiles=[0.25, 0.5, 0.75])]
    releases += [_cdf(key=key, seed=i) for i, key in enumerate(["de", "日本", _LONG_KEY])]
    out = Path(write_outputs(_document(*releases), tmp_path / "out"))
    facts = _measure(chromium, out / "report.html", 1000, tmp_path)
    assert facts["scrollWidth"] <= facts["innerWidth"], facts["scrollWidth"]
    assert facts["widest"] <= facts["innerWidth"] + 0.5, facts["widest"]
    assert "the released CDF is within" in facts["text"] and "日本" in facts["text"]
