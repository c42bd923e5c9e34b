"""Functions that spawned test processes run (importable by name in a fresh interpreter)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from beam_dp.ledger import BudgetExceededError, Plan, RunInfo, open_ledger


def reserve_and_commit(
    url: str, dataset: str, epsilon: str, index: int, start: Any, results: Any, reads: str
) -> None:
    """One racing job: reserve, "read the data" (a marker file), commit; report the outcome."""
    ledger = open_ledger(url, timeout=60)
    try:
        start.wait(timeout=60)
        began = time.perf_counter()
        try:
            reservation = ledger.reserve(
                dataset,
                Plan.basic(epsilon, statistics=["race"]),
                RunInfo(job=f"race-{index}", inputs=(f"/data/{dataset}/x",)),
            )
        except BudgetExceededError as error:
            results.put((index, "refused", time.perf_counter() - began, str(error)))
            return
        reserved = time.perf_counter() - began
        (Path(reads) / f"read-{index}").write_text("the data was read")
        reservation.commit([], output_location=f"out/{index}")
        results.put((index, "committed", reserved, ""))
    except Exception as error:  # reported to the test, which fails on it at once
        results.put((index, "error", 0.0, f"{type(error).__name__}: {error}"))
    finally:
        ledger.close()


def reserve_and_hang(url: str, dataset: str, epsilon: str, ready: str) -> None:
    """A job that reserves, says so (writes its run id to ``ready``), then hangs until killed."""
    ledger = open_ledger(url, timeout=60)
    reservation = ledger.reserve(
        dataset, Plan.basic(epsilon), RunInfo(job="killed-job", inputs=(f"/data/{dataset}/x",))
    )
    Path(ready + ".tmp").write_text(str(reservation.run_id))
    Path(ready + ".tmp").rename(ready)
    time.sleep(120)
