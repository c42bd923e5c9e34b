"""Drop export shards into a landing folder, one every few seconds (the streaming example).

    python -m pipelines.land_shards --source 'sample_data/survey/export-*.avro' \\
        --landing landing/ --every 5 [--rounds 3]

Each round copies every matched shard under a new name (``<round>-<name>``), one every
``--every`` seconds, as an exporter landing hourly or nightly shards would; run
``python -m pipelines.stream`` on the landing folder meanwhile (docs/streaming.md).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import time
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipelines.land_shards", allow_abbrev=False)
    parser.add_argument("--source", required=True, help="a glob over the shards to copy")
    parser.add_argument("--landing", required=True, help="the folder they land in")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between shards")
    parser.add_argument("--rounds", type=int, default=1, help="how many times to copy them")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    shards = sorted(glob.glob(args.source))
    if not shards:
        parser.error(f"no file matches --source {args.source!r}")
    os.makedirs(args.landing, exist_ok=True)
    for round_ in range(args.rounds):
        for shard in shards:
            name = f"{round_:04d}-{os.path.basename(shard)}"
            partial = os.path.join(args.landing, f".{name}.partial")
            shutil.copyfile(shard, partial)
            os.replace(partial, os.path.join(args.landing, name))  # lands whole, at once
            print(f"landed {name}", flush=True)
            time.sleep(args.every)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
