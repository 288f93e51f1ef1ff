"""Global-BBKB in float64 and float32: the engine target's configuration
(standardized Cadata, ``ENGINE_CONFIGS["std"]`` of ``bench_perf.py``, two seeded
initial arms, ``lam = 1e-4``), CPU seconds, regret ratio, batches, dictionary.

    python benchmarks/bench_bbkb_dtype.py --dtypes 64,32 --T 10000

One line per dtype and seed (0-2); the table of
``benchmarks/results/bbkb_float32.md`` is written from them.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_perf import engine_worker  # noqa: E402

logger = logging.getLogger("bench_bbkb_dtype")
DTYPES = {"64": torch.float64, "32": torch.float32}


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", default="64,32", help="float widths, e.g. 64,32")
    p.add_argument("--T", type=int, default=10000)
    args = p.parse_args(argv)
    for width in args.dtypes.split(","):
        for seed in (0, 1, 2):
            row = engine_worker("std", args.T, seed, dtype=DTYPES[width])
            logger.info(
                "float%s seed %d: %.2f CPU s, regret ratio %.5f, %d batches, m %d",
                width, seed, row["cpu_s"], row["regret_ratio"], row["batches"],
                row["max_dict"],
            )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
