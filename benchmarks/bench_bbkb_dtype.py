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
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_perf import ENGINE_CONFIGS, LAM, NOISE_STD, Q_BAR, C, cadata  # noqa: E402

from botorch_sketch.bbkb import fixed_rbf_kernel  # noqa: E402
from botorch_sketch.loops import noisy_oracle, run_bbkb  # noqa: E402

logger = logging.getLogger("bench_bbkb_dtype")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", default="64,32", help="float widths, e.g. 64,32")
    p.add_argument("--T", type=int, default=10000)
    args = p.parse_args(argv)
    for width in args.dtypes.split(","):
        run(width, args.T)
    return 0


def run(width: str, T: int) -> None:
    dtype = {"64": torch.float64, "32": torch.float32}[width]
    scaling, lengthscale, base = ENGINE_CONFIGS["std"]
    X, f = cadata(scaling)
    for seed in (0, 1, 2):
        init = torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(seed))
        opts = {**base, "F": 1.0, "delta": 1.0 / T, "init": init[:2]}
        gen = torch.Generator().manual_seed(1000 + seed)
        oracle = noisy_oracle(f, NOISE_STD, gen)
        kernel = fixed_rbf_kernel(lengthscale)
        t0 = time.process_time()
        res = run_bbkb(
            X, oracle, T, kernel, LAM, C=C, q_bar=Q_BAR, rule="global", f_true=f,
            seed=seed, progress=False, dtype=dtype, **opts,
        )  # fmt: skip
        cpu = time.process_time() - t0
        ratio = float(res.regret_ratio(f)[-1])
        logger.info(
            "float%s seed %d: %.2f CPU s, regret ratio %.5f, %d batches, m %d",
            width, seed, cpu, ratio, res.num_batches, int(res.dict_size.max()),
        )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
