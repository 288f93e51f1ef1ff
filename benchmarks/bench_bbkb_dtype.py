"""Global-BBKB in float64 and float32: the engine target's configuration
(standardized Cadata, ``ENGINE_CONFIGS["std"]`` of ``bench_perf.py``, two seeded
initial arms, ``lam = 1e-4``), CPU seconds, regret ratio, batches, dictionary.

    python benchmarks/bench_bbkb_dtype.py 64 10000
    python benchmarks/bench_bbkb_dtype.py 32 10000

One line per seed (0-2); results in ``benchmarks/results/bbkb_float32.md``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_perf import ENGINE_CONFIGS, LAM, NOISE_STD, Q_BAR, C, cadata  # noqa: E402

from botorch_sketch.bbkb import fixed_rbf_kernel  # noqa: E402
from botorch_sketch.loops import noisy_oracle, run_bbkb  # noqa: E402


def main(argv: list[str]) -> int:
    dtype = {"64": torch.float64, "32": torch.float32}[argv[0]]
    T = int(argv[1])
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
        print(
            f"float{argv[0]} seed {seed}: {cpu:.2f} CPU s, regret ratio {ratio:.5f}, "
            f"{res.num_batches} batches, m {int(res.dict_size.max())}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
