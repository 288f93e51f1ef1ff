"""How often "bbkb" with 50-point batches stalls on noisy Hartmann6 (issue 24).

What is measured, and why: issue 24 asks that no run of
``get_generation_strategy("bbkb", min_batch_size=50)`` + ``get_next_batch`` on
Hartmann6 (noise sd 0.05) end in the second basin (best true value > -3.25) at
1,000 evaluations in batches of 50, over 10 seeds. The loop is
``bench_ax_long_run.py``'s (a fresh seeded ``ax.Client`` per seed; the seed seeds
the client, the strategy and the observation noise); this script records the
final noiseless best per seed and variant.

Variants (``--variant``) set module constants of
:mod:`botorch_sketch.optim.adaptive_batch` before the run, or the strategy's
``basin_share`` option:

- ``default``: the package as it is (``THOMPSON_FAR_SHARE = 0``: the whole
  Thompson fill over all candidates);
- ``no-far``: ``THOMPSON_FAR_SHARE = 0`` explicitly;
- ``far<p>``: ``THOMPSON_FAR_SHARE = p`` (e.g. ``far1`` or ``far0.75``);
- ``basin<p>`` / ``hv-basin<p>``: the option ``basin_share=p`` (``basin0``: no
  points in other basins than the incumbent's, the default before the
  hill-valley basins; the CSV's ``basin0.25`` rows are from the distance rule
  that the hill-valley test replaced, its ``hv-basin0.25`` rows from the
  hill-valley rule, now the default);
- ``temp<t>``: the Thompson fill's samples tempered, ``mu + t (f - mu)`` (a
  posterior ``t`` times wider for the fill only);
- several of these joined by ``+`` (e.g. ``basin0.5+far0.25``).

Writes one row per (variant, seed) to ``stall_hartmann6.csv`` (appending) and
rebuilds ``stall_hartmann6.md`` from the CSV.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_stall.py --variant default --seeds 0,1
    OMP_NUM_THREADS=1 python benchmarks/bench_stall.py --report-only
"""

from __future__ import annotations

import argparse
import fcntl
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import torch  # noqa: E402
from ax_hartmann import complete, new_client, next_trials, quiet, set_strategy  # noqa: E402

import botorch_sketch.optim.adaptive_batch as adaptive_batch  # noqa: E402

STALL = -3.25  # the second basin's minimum is about -3.203
BATCH = 50
CSV = "stall_hartmann6.csv"


def apply_variant(variant: str) -> dict:
    """Set the module constants of the variant (module docstring); return the
    strategy options it sets."""
    options = {}
    for part in variant.split("+"):
        if part == "default":
            continue
        if part == "no-far":
            adaptive_batch.THOMPSON_FAR_SHARE = 0.0
        elif part.startswith("far"):
            adaptive_batch.THOMPSON_FAR_SHARE = float(part[3:])
        elif part.removeprefix("hv-").startswith("basin"):
            share = part.removeprefix("hv-").removeprefix("basin")
            options["basin_share"] = float(share)
        elif part.startswith("temp"):
            adaptive_batch.EmbeddingThompsonSampling = _tempered(float(part[4:]))
        else:
            raise ValueError(f"unknown variant {variant!r}")
    return options


def _tempered(temperature: float) -> type:
    """The fill's sampler with samples ``mu + temperature (f - mu)`` (a wider
    posterior for the Thompson fill only; the greedy part keeps its UCB)."""
    base = adaptive_batch.EmbeddingThompsonSampling

    class Tempered(base):
        def forward(self, X, num_samples=1):  # noqa: ANN001, ANN201
            model = self.model
            original = model.sample_latent

            def sample_latent(Xc, n, **kwargs):  # noqa: ANN001, ANN202
                draws = original(Xc, n, **kwargs)
                with torch.no_grad():
                    mean = model.posterior(Xc).mean.to(draws)
                return mean + temperature * (draws - mean)

            model.sample_latent = sample_latent
            try:
                return super().forward(X, num_samples)
            finally:
                del model.sample_latent

    return Tempered


def run_seed(seed: int, trials: int, noise_sd: float, options: dict) -> dict:
    """One 1,000-evaluation run; the final and the 500-evaluation best."""
    client = new_client(seed=seed)
    set_strategy(client, "bbkb", seed=seed, min_batch_size=BATCH, **options)
    best, best_500, done = float("inf"), None, 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while done < trials:
        batch = next_trials(client, min(BATCH, trials - done))
        values = complete(client, batch, noise_sd, seed=seed)
        done += len(values)
        best = min([best, *(v for _, v in values)])
        if best_500 is None and done >= trials // 2:
            best_500 = best
    return {
        "seed": seed,
        "trials": done,
        "best_at_half": best_500,
        "best_true": best,
        "stalled": best > STALL,
        "wall_s": time.perf_counter() - wall0,
        "cpu_s": time.process_time() - cpu0,
        "load": os.getloadavg()[0],
    }


def report(out: Path) -> None:
    """``stall_hartmann6.md`` from every row of the CSV."""
    rows = harness.read_csv(out / CSV)
    if not rows:
        return
    summary = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        vals = [float(r["best_true"]) for r in rows if r["variant"] == variant]
        seeds = [int(r["seed"]) for r in rows if r["variant"] == variant]
        cpu = [float(r["cpu_s"]) for r in rows if r["variant"] == variant]
        summary.append(
            {
                "variant": variant,
                "seeds": len(vals),
                f"stalled (> {STALL})": sum(v > STALL for v in vals),
                "median best": statistics.median(vals),
                "worst best": max(vals),
                "worst seed": seeds[vals.index(max(vals))],
                "median CPU s": statistics.median(cpu),
            }
        )
    sections = [
        "`ax.Client` on Hartmann6 (minimised, noise sd 0.05, optimum -3.32237, "
        'second basin about -3.203), `get_generation_strategy("bbkb", '
        f"min_batch_size={BATCH})` + `get_next_batch(client, {BATCH})`, "
        "1,000 evaluations, best noiseless value among the evaluated points; "
        "one torch thread, shared 2-core machine (load average per row in the CSV). "
        "Variants: module docstring of `benchmarks/bench_stall.py`.",
        "## Summary",
        harness.markdown_table(summary),
        "## Per seed",
        harness.markdown_table(rows),
    ]
    harness.write_report(
        out / "stall_hartmann6.md", "Stalls of 50-point bbkb", sections
    )


def main(argv: list[str] | None = None) -> int:
    """Run the seeds of one variant in turn (appending to the CSV), then report."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", default="default")
    p.add_argument("--seeds", default="0,1,2,3,4,5,6,7,8,9")
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--noise-sd", type=float, default=0.05)
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    quiet()
    if not args.report_only:
        options = apply_variant(args.variant)
        for seed in (int(s) for s in args.seeds.split(",")):
            row = {
                "variant": args.variant,
                **run_seed(seed, args.trials, args.noise_sd, options),
            }
            print(row, flush=True)
            with open(args.out / f".{CSV}.lock", "w") as lock:  # runs in parallel
                fcntl.flock(lock, fcntl.LOCK_EX)
                path = args.out / CSV
                rows = harness.read_csv(path) if path.exists() else []
                harness.write_csv(path, [*rows, row])
    report(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
