"""k Ray workers through Ax's Orchestrator: utilisation and best value vs wall-clock.

Each trial is one Ray task (``botorch_sketch.ax.configure_ray``) that computes a
test function and sleeps a log-normal time (mean ``--mean`` s, log-sd
``--sigma``: a heavy tail), so the workers need no real cores. Methods, all under
the same runner and ``k`` workers:

- ``bbkb per-slot``: ``get_generation_strategy("bbkb")`` under Ax's Orchestrator
  asking for one single-arm trial per free slot (one fit per trial; running
  trials hallucinated as pending points), without its one-second pauses;
- ``bbkb async``: the same strategy under ``run_trials``
  (``LookaheadOrchestrator``): all free slots filled from one generation call;
- ``bbkb lookahead``: as ``bbkb async`` with ``lookahead=--lookahead`` trials
  (default ``k``) generated ahead and queued for the next free slots, refilled
  while every worker is busy; ``bbkb lookahead, not ahead``: refilled only when
  a slot frees and the queue is empty;
- ``bbkb background``: ``run_trials``' default: a queue refilled in a thread
  (``background=True``) while freed workers are served from it, by refills of
  ``k`` to ``lookahead`` (default ``8k``, as ``run_trials``) trials sized by the demand,
  with ``run_trials``' ``pace_fill`` (``--pace-fill``, default ``1.0``; ``none``);
- ``bbkb process``: as ``bbkb background`` with each refill in a forked child
  process (``background="process"``): the generation's CPU and interpreter lock
  off the Orchestrator's loop (its CPU is in the refills' calls, not in the
  loop's);
- ``ax default async``: the same loop with Ax's default strategy (Sobol, then
  BoTorch's GP with qLogNEI; Ax caps its parallelism itself); ``ax default
  background``: Ax's default with the background refill (``lookahead = k``);
- ``bbkb sync``: ``bbkb`` in synchronous batches of ``k`` (each batch waits for
  its slowest evaluation);
- ``<strategy> background`` for any other name of ``list_generation_strategies``
  (``turbo-bkb``, ``gssbo``, ...): that strategy under ``run_trials``' defaults.

Recorded per run: wall time, worker utilisation ``sum(busy) / (k * wall)`` (busy:
worker-side evaluation time; wall: first submission to last finish), mean trials
in flight, the best value found vs wall-clock time, and the generation calls:
their number, wall and CPU seconds per call over the last 10 % of the run
(the cost per call at ``N`` trials), the longest call (the longest a free
worker waits for generation) and CPU seconds per generated trial.

Writes ``benchmarks/results/ray_workers{tag}.{csv,md,png}`` and the best-value
traces to ``ray_workers{tag}_traces.csv``.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_ray_workers.py [--k 8] [--trials 100]
"""

from __future__ import annotations

import argparse
import heapq
import json
import logging
import math
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import ray  # noqa: E402
from ax import Client, RangeParameterConfig  # noqa: E402
from ax.orchestration.orchestrator_options import OrchestratorOptions  # noqa: E402
from harness import (  # noqa: E402
    RESULTS,
    figure,
    markdown_table,
    write_csv,
    write_report,
)

from botorch_sketch.ax import (  # noqa: E402
    configure_ray,
    get_generation_strategy,
    list_generation_strategies,
)
from botorch_sketch.ax.ray import (  # noqa: E402
    FINISHED_KEY,
    LOOKAHEAD_PER_WORKER,
    STARTED_KEY,
    SUBMITTED_KEY,
    LookaheadOrchestrator,
    run_trials,
)

METHODS = (
    "bbkb per-slot",
    "bbkb async",
    "bbkb lookahead",
    "bbkb lookahead, not ahead",
    "bbkb background",
    "bbkb process",
    "ax default async",
    "ax default background",
    "bbkb sync",
)
#: name -> (dimension, optimum); minimised, inputs in the unit cube.
PROBLEMS = {"hartmann6": (6, -3.32237), "branin": (2, 0.397887)}


def make_evaluate(problem: str, mean: float, sigma: float, seed: int):
    """``parameters -> {"f": value}`` after a log-normal sleep (mean ``mean`` s).

    A nested function: Ray ships it by value, so workers import only numpy.
    """
    mu = math.log(mean) - sigma**2 / 2  # E[exp(N(mu, sigma^2))] = mean

    def evaluate(p):
        import time

        import numpy as np

        x = np.array([p[f"x{i}"] for i in range(len(p))])
        key = int(abs(hash(tuple(x.round(12)))) % 2**31)
        rng = np.random.default_rng([seed, key])
        time.sleep(float(rng.lognormal(mu, sigma)))
        if problem == "branin":
            u, v = 15 * x[0] - 5, 15 * x[1]
            b, c = 5.1 / (4 * np.pi**2), 5 / np.pi
            f = (v - b * u**2 + c * u - 6) ** 2 + 10 * (1 - 1 / (8 * np.pi)) * np.cos(u)
            return {"f": float(f + 10)}
        alpha = np.array([1.0, 1.2, 3.0, 3.2])
        A = np.array(
            [
                [10, 3, 17, 3.5, 1.7, 8],
                [0.05, 10, 17, 0.1, 8, 14],
                [3, 3.5, 1.7, 10, 17, 8],
                [17, 8, 0.05, 10, 0.1, 14],
            ]
        )
        P = 1e-4 * np.array(
            [
                [1312, 1696, 5569, 124, 8283, 5886],
                [2329, 4135, 8307, 3736, 1004, 9991],
                [2348, 1451, 3522, 2883, 3047, 6650],
                [4047, 8828, 8732, 5743, 1091, 381],
            ]
        )
        f = -float(alpha @ np.exp(-(A * (x - P) ** 2).sum(axis=1)))
        return {"f": f}

    return evaluate


def run_one(method: str, problem: str, args: argparse.Namespace, seed: int) -> dict:
    dim, optimum = PROBLEMS[problem]
    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=f"x{i}", parameter_type="float", bounds=(0, 1))
            for i in range(dim)
        ]
    )
    client.configure_optimization(objective="-f")
    strategy = method.split(" ")[0]
    if strategy in list_generation_strategies():
        client.set_generation_strategy(
            get_generation_strategy(
                strategy,
                initialization_budget=2 * dim,
                seed=seed,
                **json.loads(args.strategy_options),
            )
        )
    k = args.k
    evaluate = make_evaluate(problem, args.mean, args.sigma, seed)
    configure_ray(client, evaluate, num_workers=k)
    load = os.getloadavg()[0]
    t0, cpu0 = time.time(), time.process_time()
    calls, orchestrator = [], None
    if method == "bbkb sync":
        for _ in range(math.ceil(args.trials / k)):
            calls += run_trials(client, max_trials=k, parallelism=k).generation_calls
    elif method == "bbkb per-slot":
        calls = per_slot(client, args.trials, k)
    else:
        refill = "background" in method or "process" in method
        queued = "lookahead" in method or refill
        default = LOOKAHEAD_PER_WORKER * k if refill else k  # run_trials' default
        lookahead = (args.lookahead or default) if queued else 0
        orchestrator = LookaheadOrchestrator(
            experiment=client._experiment,
            generation_strategy=client._generation_strategy_or_choose(),
            options=orchestrator_options(k, batches=True),
            lookahead=lookahead,
            generate_ahead="not ahead" not in method,
            background="process" if "process" in method else "background" in method,
            pace_fill=args.pace_fill,
        )
        orchestrator.run_n_trials(max_trials=args.trials)
        calls = orchestrator.generation_calls
    cpu = time.process_time() - cpu0
    trials = [
        t
        for t in client._experiment.trials.values()
        if t.status.is_completed and FINISHED_KEY in t.run_metadata
    ]
    df = client._experiment.lookup_data().df.set_index("trial_index")["mean"]
    submitted = min(t.run_metadata[SUBMITTED_KEY] for t in trials)
    finished = max(t.run_metadata[FINISHED_KEY] for t in trials)
    wall = finished - submitted
    by_start = sorted(trials, key=lambda t: t.run_metadata[STARTED_KEY])
    durations = np.array(
        [t.run_metadata[FINISHED_KEY] - t.run_metadata[STARTED_KEY] for t in by_start]
    )
    busy = float(durations.sum())
    span = sum(
        t.run_metadata[FINISHED_KEY] - t.run_metadata[SUBMITTED_KEY] for t in trials
    )
    idle = idle_breakdown(
        submitted,
        np.array([t.run_metadata[STARTED_KEY] for t in trials]),
        np.array([t.run_metadata[FINISHED_KEY] for t in trials]),
        k,
    )
    ceiling = list_schedule_utilisation(durations, k)
    order = sorted(trials, key=lambda t: t.run_metadata[FINISHED_KEY])
    times = [t.run_metadata[FINISHED_KEY] - t0 for t in order]
    best = np.minimum.accumulate([float(df[t.index]) for t in order])
    # Requests hold free workers; background refills do not.
    requests = [c for c in calls if not c.background] or calls
    late = [c for c in requests if c.num_trials >= 0.9 * args.trials] or requests
    at_n = {
        f"gen CPU/trial at N={n} [s]": _cpu_per_trial(calls, n)
        for n in (500, 2000)
        if n <= args.trials
    }
    generated = sum(c.generated for c in calls) or 1
    pace = "-"  # LookaheadOrchestrator's pace_fill: until when it was used
    if orchestrator is not None and orchestrator.pace_fill_until is not None:
        pace = orchestrator.pace_fill_until
    elif orchestrator is not None and orchestrator.pacing:
        pace = "to the end"
    return {
        "problem": problem,
        "method": method,
        "k": k,
        "seed": seed,
        "trials": len(client._experiment.trials),
        "wall [s]": wall,
        "utilisation": busy / (k * wall),
        "ceiling": ceiling,
        "of ceiling": busy / (k * wall) / ceiling,
        "in flight": span / wall,
        **idle,
        "gen calls": len(calls),
        "late call wall [s]": float(np.mean([c.wall for c in late])),
        "late call CPU [s]": float(np.mean([c.cpu for c in late])),
        "max call wall [s]": max(c.wall for c in requests),
        "requests > median": sum(c.wall > median_time(args) for c in requests),
        # Trials in the experiment at each slow request, and the refill before it.
        "slow requests": slow_requests(calls, median_time(args)),
        "longest at N": max(requests, key=lambda c: c.wall).num_trials,
        "CPU per trial [s]": sum(c.cpu for c in calls) / generated,
        **at_n,
        "gen wall share": sum(c.wall for c in requests) / wall,
        "pace fill": pace,
        "loop CPU [s]": cpu,
        "best value": float(best[-1]),
        "simple regret": float(best[-1]) - optimum,
        "load": load,
        "times": times,
        "best": best.tolist(),
    }


def slow_requests(calls: list, limit: float) -> str:
    r"""``N:wall/refill@queued`` for each request that took longer than
    ``limit`` seconds: the trials in the experiment when it came, its wall
    seconds, the wall seconds of the last background refill that ended before
    it (the one it waited for) and the queue's length when that refill started
    (``-`` if none), separated by ``;``."""
    out, refill = [], "-"
    for call in calls:
        if call.background:
            refill = f"{call.wall:.2f}@{call.queued}"
        elif call.wall > limit:
            out.append(f"{call.num_trials}:{call.wall:.2f}/{refill}")
    return ";".join(out)


def idle_breakdown(
    submitted: float, started: np.ndarray, finished: np.ndarray, k: int
) -> dict[str, float]:
    """Idle worker-seconds by phase, each as a fraction of ``k * wall``.

    ``idle(t) = k - busy(t)`` (``busy``: trials between their start and finish)
    integrated over three phases of ``[submitted, max(finished)]``: *start*, until
    all ``k`` workers are first busy at once; *end*, from the last start on (no
    new work can begin: the last evaluations' tail); *middle*, in between (the
    time freed workers wait for the loop: polling, generation, dispatch).
    """
    times = np.concatenate([started, finished])
    steps = np.concatenate([np.ones_like(started), -np.ones_like(finished)])
    order = np.lexsort((steps, times))  # at equal times, finishes first
    times, busy = times[order], np.cumsum(steps[order])
    end = float(finished.max())
    full = times[np.argmax(busy >= k)] if (busy >= k).any() else end
    last = float(started.max())
    edges = np.append(times, end)
    # busy[i] holds on [edges[i], edges[i + 1]); before the first start, none.
    idle = {"start": (times[0] - submitted) * k, "middle": 0.0, "end": 0.0}
    for i in range(len(times)):
        a, b = edges[i], edges[i + 1]
        gap = (k - busy[i]) * (b - a)
        phase = "start" if b <= full else "end" if a >= last else "middle"
        idle[phase] += gap
    total = k * (end - submitted)
    return {f"idle {p}": float(v / total) for p, v in idle.items()}


def list_schedule_utilisation(durations: np.ndarray, k: int) -> float:
    r"""The utilisation a scheduler with no latency would reach on ``durations``.

    Each of ``k`` workers starts the next evaluation (in the given order) the
    instant it frees, as if generation, dispatch and polling cost nothing:
    ``sum(d) / (k * makespan)``. What stays below 1 is the start (fewer
    evaluations than workers) and the tail of the last evaluations, which
    a scheduler that cannot see the durations in advance does not avoid. Used as
    the *ceiling* of a run, on that run's own durations in the order they
    started.
    """
    durations = np.asarray(durations, dtype=float)
    if k < 1 or durations.size == 0:
        raise ValueError(f"need k >= 1 and durations, got k={k}, {durations.size}.")
    free = [0.0] * k
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + float(d))
    return float(durations.sum() / (k * max(free)))


def expected_ceiling(
    k: int, trials: int, mean: float, sigma: float, draws: int = 20
) -> tuple[float, float, float]:
    r"""Median, min and max of :func:`list_schedule_utilisation` over ``draws``
    sets of ``trials`` log-normal durations (mean ``mean``, log-sd ``sigma``;
    numpy seeds ``0 .. draws - 1``): the utilisation that no scheduler beats on
    such evaluations, before any run."""
    mu = math.log(mean) - sigma**2 / 2
    values = [
        list_schedule_utilisation(
            np.random.default_rng(seed).lognormal(mu, sigma, trials), k
        )
        for seed in range(draws)
    ]
    return float(np.median(values)), min(values), max(values)


def median_time(args: argparse.Namespace) -> float:
    """The evaluations' median duration: ``exp(mu)`` of the log-normal."""
    return math.exp(math.log(args.mean) - args.sigma**2 / 2)


def _cpu_per_trial(calls: list, n: int) -> float:
    """Generation CPU per generated trial of the calls made at 90-100 % of ``n``."""
    near = [c for c in calls if 0.9 * n <= c.num_trials <= n and c.generated]
    return sum(c.cpu for c in near) / max(1, sum(c.generated for c in near))


def per_slot(client: Client, trials: int, k: int) -> list:
    """Ax's one-trial-per-free-slot requests (no batching, no queue), timed."""
    orchestrator = LookaheadOrchestrator(
        experiment=client._experiment,
        generation_strategy=client._generation_strategy_or_choose(),
        options=orchestrator_options(k, batches=False),
    )
    orchestrator.run_n_trials(max_trials=trials)
    return orchestrator.generation_calls


def orchestrator_options(k: int, batches: bool) -> OrchestratorOptions:
    """``run_trials``'s options (``batches=False``: one trial per request)."""
    return OrchestratorOptions(
        max_pending_trials=k,
        init_seconds_between_polls=0,
        min_seconds_before_poll=0.0,
        seconds_between_polls_backoff_factor=1.0,
        run_trials_in_batches=batches,
        logging_level=logging.WARNING,
    )


def write_ceiling(args: argparse.Namespace, draws: int = 20) -> None:
    r"""``ray_workers_ceiling.md``: :func:`expected_ceiling` for the issue's
    worker counts and budgets, at ``--mean`` and ``--sigma``."""
    rows = []
    for k in (8, 32):
        for trials in (500, 2000):
            median, low, high = expected_ceiling(
                k, trials, args.mean, args.sigma, draws
            )
            rows.append(
                {
                    "k": k,
                    "trials": trials,
                    "ceiling median": median,
                    "worst": low,
                    "best": high,
                    "idle tail (median)": 1 - median,
                }
            )
    intro = (
        f"The utilisation of a scheduler with no latency (each of k workers takes "
        f"the next evaluation the instant it frees) on {draws} draws of log-normal "
        f"evaluation times, mean {args.mean} s, log-sd {args.sigma} (numpy seeds "
        f"0-{draws - 1}; `list_schedule_utilisation`). What is missing to 1 is "
        "the last evaluations' tail: workers that finish while the slowest few "
        "still run have nothing left to start. A scheduler that cannot see the "
        "durations beforehand does at best this (never keep a free worker "
        "waiting); the runs' own *ceiling* column is the same computation on "
        "the run's durations."
    )
    write_report(
        RESULTS / "ray_workers_ceiling.md",
        "Worker utilisation that no scheduler beats",
        [intro, markdown_table(rows, list(rows[0]))],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--mean", type=float, default=0.5)
    parser.add_argument("--sigma", type=float, default=0.8)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds from here")
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument(
        "--lookahead", type=int, default=0, help="0: 8k in background, else k"
    )
    parser.add_argument("--tag", default="")
    parser.add_argument(
        "--strategy-options",
        default="{}",
        help='JSON options of the "bbkb" strategy, e.g. \'{"thompson_fill": 1.0}\'',
    )
    parser.add_argument(
        "--pace-fill",
        type=lambda v: None if v == "none" else float(v),
        default=1.0,
        help="LookaheadOrchestrator's pace_fill (run_trials' default 1.0; none)",
    )
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="only write ray_workers_ceiling.md: the utilisation no scheduler "
        "beats at k = 8, 32 and 500, 2,000 trials (no Ray run)",
    )
    args = parser.parse_args()
    if args.ceiling:
        write_ceiling(args)
        return
    logging.getLogger("ax").setLevel(logging.WARNING)
    logging.getLogger("botorch_sketch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    ray.init(num_cpus=args.k, include_dashboard=False, log_to_driver=False)

    rows = []
    for problem in args.problems:
        for method in args.methods:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                row = run_one(method, problem, args, seed)
                print(
                    f"{problem} {method} seed {seed}: wall {row['wall [s]']:.1f} s, "
                    f"utilisation {row['utilisation']:.2f}, "
                    f"calls {row['gen calls']}, late call "
                    f"{row['late call wall [s]']:.2f} s / "
                    f"{row['late call CPU [s]']:.2f} CPU s, max call "
                    f"{row['max call wall [s]']:.2f} s, "
                    f"best {row['best value']:.4g}, load {row['load']:.1f}",
                    flush=True,
                )
                rows.append(row)
    ray.shutdown()

    name = f"ray_workers{args.tag}"
    write_csv(
        RESULTS / f"{name}.csv",
        [{k: v for k, v in r.items() if k not in ("times", "best")} for r in rows],
    )
    write_csv(
        RESULTS / f"{name}_traces.csv",
        [
            {**{c: r[c] for c in ("problem", "method", "seed")}, "time": t, "best": b}
            for r in rows
            for t, b in zip(r["times"], r["best"], strict=True)
        ],
    )
    fig, axes = figure(1, len(args.problems), figsize=(5 * len(args.problems), 3.6))
    axes = np.atleast_1d(axes)
    for ax, problem in zip(axes, args.problems, strict=True):
        optimum = PROBLEMS[problem][1]
        for r in rows:
            if r["problem"] == problem:
                label = f"{r['method']} (seed {r['seed']})"
                regret = np.maximum(np.asarray(r["best"]) - optimum, 1e-6)
                ax.step(r["times"], regret, where="post", label=label)
        ax.set(title=f"{problem}, k={args.k}", xlabel="wall-clock [s]", yscale="log")
        ax.set_ylabel("simple regret of the best value")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=110)

    columns = ["problem", "method", "k", "seed", "trials", "wall [s]"]
    columns += ["utilisation", "ceiling", "of ceiling"]
    columns += ["idle start", "idle middle", "idle end"]
    columns += ["in flight", "gen calls", "late call wall [s]"]
    columns += ["late call CPU [s]", "max call wall [s]", "requests > median"]
    columns += ["longest at N", "CPU per trial [s]"]
    columns += [c for c in rows[0] if c.startswith("gen CPU/trial at")]
    columns += ["gen wall share", "pace fill", "loop CPU [s]"]
    columns += ["best value", "simple regret", "load"]
    median = median_time(args)
    intro = (
        f"k = {args.k} Ray workers on this machine (local Ray, sleeping tasks), "
        f"{args.trials} trials per run; evaluation time log-normal with mean "
        f"{args.mean} s and log-sd {args.sigma}. *utilisation*: worker-side busy "
        "time / (k x wall), wall from the first submission to the last finish; "
        "*ceiling*: the utilisation of a scheduler with no latency on the run's "
        "own durations in the order they started (each worker takes the next "
        "evaluation the instant it frees): the start and the last evaluations' "
        "tail that no scheduler avoids; *of ceiling*: utilisation / ceiling; "
        "*idle start / middle / end*: idle worker-seconds / (k x wall) until all "
        "k workers are first busy, between then and the last start, and after "
        "the last start (the last evaluations' tail); "
        "*in flight*: mean number of submitted, unfinished trials; *gen calls*: "
        "the Orchestrator's requests for trials; *late call*: mean wall / CPU "
        "seconds of a request over the last 10 % of the trials; *max call wall*: "
        "the longest request (a free worker waits at most that for work; the "
        f"evaluations' median is {median:.2g}"
        " s); *requests > median*: requests that took longer than that median; "
        "*longest at N*: trials in the experiment at the longest request; "
        "*CPU per trial*: generation CPU seconds per generated trial; "
        "*gen CPU/trial at N=n*: generation CPU seconds per trial generated by "
        "the calls made at 90-100 % of n trials (background refills included: "
        "they count in CPU, not in the request wall times); "
        "*gen wall share*: the requests' total wall time / wall; *pace fill*: "
        "until when (trials) the orchestrator's pace_fill was used ('-': not "
        "at all); "
        "*loop CPU*: CPU "
        "seconds of the whole Orchestrator loop (generation included); "
        "*load*: the 1-minute load average when the run started (2 cores, "
        "shared with other jobs)."
    )
    write_report(
        RESULTS / f"{name}.md",
        f"k = {args.k} Ray workers through Ax's Orchestrator",
        [intro, markdown_table(rows, columns), f"![best vs wall-clock]({name}.png)"],
    )


if __name__ == "__main__":
    main()
