"""Where an Ax call of ``"turbo-bkb"`` spends its CPU in a long experiment.

A run in batches of ``q`` makes ``N / q`` generation calls, each paying Ax's
bookkeeping over every trial so far (training-data extraction, transforms,
pending points) on top of the region's model; with batches of one that
bookkeeping is most of a call. This script grows an ``ax.Client`` experiment on
Levy10 (``[-5, 10]^10``, noise sd 0.05) with ``"turbo-bkb"`` (``region_fit=
"periodic"``, ``thompson="pathwise"``: the README's pick for batches of one) in
batches of 50 to each size of ``--sizes``, then times ``--calls`` calls of
``get_next_batch(client, max_batch_size=--batch)`` followed by
``complete_trials``, in CPU seconds per call (one torch thread), split into:

- ``model``: the generator's ``gen`` (the region's fit and Thompson sample);
- ``extract``: the adapter's training-data extraction (the package's
  incremental one);
- ``transforms``: the adapter's data transforms (Ax's ``_transform_data``);
- ``pending``: Ax's ``extract_pending_observations``;
- ``complete``: ``complete_trials``;
- ``ax_other``: the rest of the call (Ax's generation strategy and adapter).

With ``--base TREE`` each size is run alternately with the package of another
source tree (``PYTHONPATH=TREE``) and this one, ``--repeats`` times each, in
separate processes, so that both meet the same machine load.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_ax_call.py --sizes 3000 \\
        --base /path/to/older/tree --tag _ab
    python benchmarks/bench_ax_call.py --smoke   # seconds
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

logger = logging.getLogger("bench_ax_call")

DIM = 10
NOISE_SD = 0.05
OPTIONS = {"region_fit": "periodic", "refit_growth": 0.1, "thompson": "pathwise"}

#: ``(module, owner or None, function, part)``: the functions whose CPU each part
#: adds up (``harness.method_cpu``), a method of ``owner`` in ``module`` or a
#: function where ``module`` looks it up.
PARTS = (
    ("botorch_sketch.ax.turbo", "TurboGenerator", "gen", "model"),
    (
        "botorch_sketch.ax.experiment_data",
        None,
        "incremental_experiment_data",
        "extract",
    ),
    ("ax.adapter.base", "Adapter", "_transform_data", "transforms"),
    (
        "ax.generation_strategy.generation_strategy",
        None,
        "extract_pending_observations",
        "pending",
    ),
)


def levy(x: np.ndarray) -> float:
    """Levy's function (minimum 0 at ``x = 1``)."""
    w = 1.0 + (x - 1.0) / 4.0
    head = np.sin(np.pi * w[0]) ** 2
    body = np.sum((w[:-1] - 1.0) ** 2 * (1.0 + 10.0 * np.sin(np.pi * w[:-1] + 1) ** 2))
    tail = (w[-1] - 1.0) ** 2 * (1.0 + np.sin(2.0 * np.pi * w[-1]) ** 2)
    return float(head + body + tail)


def _owner(module: str, owner: str | None) -> Any:
    r"""The class ``owner`` of ``module``, or the module itself."""
    found = importlib.import_module(module)
    return found if owner is None else getattr(found, owner)


def measure(size: int, calls: int, batch: int, seed: int) -> dict[str, Any]:
    """Grow the experiment to ``size`` trials and time ``calls`` calls."""
    from botorch_sketch.ax import (
        complete_trials,
        get_generation_strategy,
        get_next_batch,
    )

    harness.quiet_single_thread()
    client = harness.box_client(dim=DIM, seed=seed)
    client.set_generation_strategy(
        get_generation_strategy("turbo-bkb", seed=seed, batch_size=50, **OPTIONS)
    )
    rng = np.random.default_rng(seed)

    def evaluate(parameters: dict[str, float]) -> dict[str, float]:
        x = -5.0 + 15.0 * np.array([parameters[f"x{i}"] for i in range(DIM)])
        return {"f": levy(x) + NOISE_SD * float(rng.standard_normal())}

    count = 0
    while count < size:
        trials = get_next_batch(client, max_batch_size=min(50, size - count))
        complete_trials(client, {i: evaluate(p) for i, p in trials.items()})
        count += len(trials)
    completing = 0.0
    with contextlib.ExitStack() as stack:
        # One context per part: ``Adapter`` defines a ``gen`` of its own.
        timed = {
            part: (
                stack.enter_context(
                    harness.method_cpu((_owner(module, owner),), (fn,))
                ),
                fn,
            )
            for module, owner, fn, part in PARTS
        }
        start = time.process_time()
        for _ in range(calls):
            trials = get_next_batch(client, max_batch_size=batch)
            mark = time.process_time()
            complete_trials(client, {i: evaluate(p) for i, p in trials.items()})
            completing += time.process_time() - mark
        total = (time.process_time() - start) / calls
    totals = {part: cpu[fn] for part, (cpu, fn) in timed.items()}
    totals["complete"] = completing
    row: dict[str, Any] = {"trials": size, "batch": batch, "calls": calls}
    row["call_cpu_s"] = total
    for part in ("model", "extract", "transforms", "pending", "complete"):
        row[f"{part}_cpu_s"] = totals[part] / calls
    known = sum(totals[p] for p in ("model", "extract", "transforms", "pending"))
    row["ax_other_cpu_s"] = total - known / calls - totals["complete"] / calls
    row["load"] = os.getloadavg()[0]
    return row


def _run_tree(tree: str, args: argparse.Namespace, size: int) -> dict[str, Any]:
    """``measure`` in a fresh process on the package of ``tree``."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--sizes",
        str(size),
        "--calls",
        str(args.calls),
        "--batch",
        str(args.batch),
        "--seed",
        str(args.seed),
    ]
    env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["commit"] = harness.git_head(tree)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,3000,5000")
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--base", default=None, help="another source tree to compare")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--tag", default="")
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--smoke", action="store_true", help="a seconds-long run in tmp/")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.worker:
        print(json.dumps(measure(sizes[0], args.calls, args.batch, args.seed)))
        return 0
    if args.smoke:
        args.out, sizes, args.calls = harness.RESULTS / "tmp" / "ax_call", [120], 3
    harness.quiet_single_thread()
    here = str(harness.REPO_ROOT)
    trees = [here] if args.base is None else [args.base, here]
    rows = []
    for size in sizes:
        for _ in range(1 if args.base is None else args.repeats):
            for tree in trees:
                row = _run_tree(tree, args, size)
                rows.append(row)
                logger.info("%s", row)
    intro = (
        "CPU seconds per call of `get_next_batch(client, max_batch_size="
        f"{args.batch})` + `complete_trials` on Levy10 after growing the "
        'experiment to `trials` in batches of 50 (`"turbo-bkb"` with '
        f"`{OPTIONS}`), mean over `calls` calls, one torch thread, each row "
        "a fresh process on the package of `commit`; parts as in the module "
        "docstring of `benchmarks/bench_ax_call.py`. Rows of one size "
        "alternate between the trees so that both meet the same load "
        "(`load`: 1-minute load average, 2 cores)."
    )
    harness.write_table(
        args.out, f"ax_call{args.tag}", "Ax's share of a call", intro, rows
    )
    if any(math.isnan(r["call_cpu_s"]) for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
