"""Large price grids in BestPrice: labels as one array, the grid pickled as runs of steps."""

from __future__ import annotations

import pickle
from decimal import Decimal

import numpy as np
import pytest
from apache_beam.internal import pickler

from beam_dp.beam.selection import BestPrice
from beam_dp.beam.selection_combiners import RevenueFn
from beam_dp.scores import Revenue
from beam_dp.summaries.selection import PackedGrid


def _grid(start: str, step: str, count: int) -> list[float]:
    return [float(Decimal(start) + i * Decimal(step)) for i in range(count)]


@pytest.mark.parametrize(
    "prices",
    [
        _grid("0.01", "0.01", 5000),
        _grid("0.1", "0.07", 300),
        _grid("1", "1", 10),
        _grid("0.01", "0.01", 100) + _grid("1.5", "0.5", 100) + [1000.0],
        _grid("0.000001", "0.000003", 2000),
    ],
)
def test_packed_grid_gives_back_both_arrays_exactly(prices: list[float]) -> None:
    score = Revenue(prices)
    packed = PackedGrid.pack(score.scaled_prices, score.thresholds)
    assert packed is not None
    scaled, thresholds = pickle.loads(pickle.dumps(packed)).unpack()
    assert np.array_equal(scaled, score.scaled_prices)
    assert np.array_equal(thresholds, score.thresholds)  # bit for bit
    assert thresholds.tolist() == [float(Decimal(repr(p))) for p in prices]


def test_grids_that_do_not_pack_stay_as_arrays() -> None:
    rng = np.random.default_rng(0)
    irregular = Revenue(np.unique(np.round(rng.uniform(0.01, 100.0, 5000), 2)).tolist())
    assert PackedGrid.pack(irregular.scaled_prices, irregular.thresholds) is None
    one = Revenue([2.5])
    assert PackedGrid.pack(one.scaled_prices, one.thresholds) is None
    # thresholds that are not scaled / 10**places are never replaced
    score = Revenue(_grid("0.01", "0.01", 100))
    wrong = score.thresholds.copy()
    wrong[50] = np.nextafter(wrong[50], 1.0)
    assert PackedGrid.pack(score.scaled_prices, wrong) is None


def test_a_million_price_combiner_pickles_small_and_selects_the_same() -> None:
    prices = _grid("0.01", "0.01", 10**6)
    transform = BestPrice.Globally(value_column="v", unit_column="u", prices=prices, epsilon=1.0)
    fn = transform._wiring.combine_fn
    assert isinstance(fn, RevenueFn)
    payload = pickler.dumps(fn)  # what Beam ships (pickled and compressed), many times
    assert len(payload) < 10_000  # 16 MB of arrays before the grid was packed
    again = pickler.loads(payload)
    assert np.array_equal(again._thresholds, fn._thresholds)
    assert np.array_equal(again._scaled_prices, fn._scaled_prices)
    batch = {"value": np.array([0.5, 3.0, 9999.99, 10_000.5]), "unit": np.arange(4)}
    ours = again.add_input(again.create_accumulator(), batch)
    theirs = fn.add_input(fn.create_accumulator(), batch)
    assert np.array_equal(ours, theirs)
    assert np.array_equal(again._scores(ours), fn._scores(theirs))
    release = again.extract_output(ours)[0]
    assert type(release.value) is float and release.ledger.num_candidates == 10**6
    assert release.ledger.sensitivity == 10_000.0


def test_irregular_grid_combiner_survives_pickling() -> None:
    prices = [0.5, 0.75, 2.0, 3.25, 7.0]
    fn = BestPrice.Globally(
        value_column="v", record_level=True, prices=prices, epsilon=1.0
    )._wiring.combine_fn
    again = pickler.loads(pickler.dumps(fn))
    assert again._packed is None or np.array_equal(again._thresholds, fn._thresholds)
    assert again._labels.get(()).tolist() == prices


def test_best_price_accepts_a_built_revenue_grid() -> None:
    score = Revenue(_grid("0.01", "0.01", 1000))
    transform = BestPrice.Globally(value_column="v", unit_column="u", prices=score, epsilon=1.0)
    fn = transform._wiring.combine_fn
    assert np.shares_memory(fn._thresholds, score.thresholds)
    assert transform.display_data()["num_candidates"] == 1000
