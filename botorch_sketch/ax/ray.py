r"""Run Ax trials on Ray workers: an ``IRunner`` / ``IMetric`` pair and one setup call.

``configure_ray(client, evaluate, num_workers=k)`` attaches to an Ax ``Client`` a
:class:`RayRunner` (each trial is one Ray task computing ``evaluate(parameters)``)
and one :class:`RayMetric` per metric (reading the finished task's value). Then
``client.run_trials(max_trials=N, parallelism=k)`` (Ax's Orchestrator), or
:func:`run_trials` (the same Orchestrator without its one-second pauses between
launches), keeps ``k`` trials in flight:

- ``evaluate(parameters) -> {metric_name: value}``, where a value is a number (the
  mean, noise unknown) or a pair ``(mean, sem)``; every configured metric must be
  present, and means must be finite and SEMs finite and non-negative (or ``None``
  for unknown).
- Ax's Orchestrator (``client.run_trials``) asks the generation strategy for one
  single-arm trial per free slot (``gen(num_trials=1, n=1)``: one model fit per
  trial), with the running trials as pending points; the package's strategies
  hallucinate those (asynchronous BBKB: a worker that finishes gets new work at
  once, chosen from the current posterior with the pending points' variance
  shrunk). :func:`run_trials` runs a :class:`LookaheadOrchestrator`: all free
  slots are filled from one call (one fit, then one acquisition optimisation
  per trial, each hallucinating the ones before; with a BBKB strategy, one
  batch of that many points), and with ``lookahead = L > 0``
  ``L`` trials more are generated, kept in memory and handed to the next
  free slots without a fit; by default (``L = 8 k``, ``background=True``) that
  queue is refilled in a thread while freed workers are served from it, by
  refills whose size follows the demand (between ``k`` and ``L``); with 16
  or more workers a BBKB refill's points past the batch rule's stop are
  posterior samples (``pace_fill``) until generation runs well ahead of the
  workers. Queued
  trials come from the posterior of their generation call with the then
  running and queued trials hallucinated (asynchronous BBKB's batch-start
  posterior); a queued trial is dropped when ``max_queue_age`` trials have
  completed since the state it came from, and the queue when the strategy has
  not reached its last node (the Sobol initialisation is never
  over-generated).
- A trial ends FAILED, with the reason in its run metadata under ``"error"`` and as
  its failure reason, when ``evaluate`` raises, when its worker process dies
  (Ray's ``WorkerCrashedError``; tasks run with ``max_retries=0`` so a crashed
  evaluation is never silently run twice), when the returned values are invalid
  (missing metric, NaN or infinite), or when its task is unknown to this process.
  The Orchestrator goes on while the share of failed trials stays within its
  ``tolerated_trial_failure_rate``.
- Run metadata is JSON: the task's object id (hex), the submission time and, once
  finished, the worker's start and finish times (``time.time()`` seconds), from
  which worker utilisation ``sum(busy) / (k * wall)`` follows. The ``ObjectRef`` s
  live in a process-wide map keyed by that id. An experiment saved while trials
  run reloads; in the same process (Ray still up) its running trials are still
  tracked, in a new process they are unknown and are failed at the first poll
  (Ax does not re-run failed trials; the Orchestrator generates new ones). After
  loading, call ``configure_ray`` again to attach the evaluation function: a
  loaded runner only polls.

Ray is optional (``pip install botorch_sketch[ray]``); it is imported when
``configure_ray`` or :func:`run_trials` is called. With ``address=None`` a local
Ray is started with ``num_cpus=num_workers`` (one slot per concurrent
evaluation), unless Ray is already initialised in this process; with an address,
the existing cluster is joined.
"""

from __future__ import annotations

import copy
import gc
import logging
import math
import multiprocessing
import numbers
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ax.adapter.adapter_utils import get_fixed_features_from_experiment
from ax.api.client import Client
from ax.api.protocols.metric import IMetric
from ax.api.protocols.runner import IRunner
from ax.api.types import TParameterization
from ax.api.utils.storage import db_settings_from_storage_config
from ax.core.base_trial import BaseTrial
from ax.core.data import Data, DataRow
from ax.core.generator_run import GeneratorRun
from ax.core.metric import MetricFetchE, MetricFetchResult
from ax.core.trial import Trial
from ax.core.trial_status import TrialStatus
from ax.exceptions.core import AxError
from ax.orchestration.orchestrator_options import OrchestratorOptions, TrialType
from ax.storage.json_store.registry import (
    CORE_DECODER_REGISTRY,
    CORE_ENCODER_REGISTRY,
)
from ax.utils.common.result import Err, Ok
from ax.utils.common.typeutils import assert_is_instance
from pyre_extensions import none_throws

from botorch_sketch.ax.data_rows import data_rows
from botorch_sketch.ax.experiment_data import adopt_prefix
from botorch_sketch.ax.pending import fast_metric_availability
from botorch_sketch.ax.status_index import StatusIndexedOrchestrator
from botorch_sketch.ax.trials import gen_filled_batch, trials_left_in_generating_node
from botorch_sketch.models.validation import check_fraction

__all__ = [
    "LOOKAHEAD_PER_WORKER",
    "PACE_CALLS",
    "PACE_FILL_WORKERS",
    "PACE_HEADROOM",
    "PACE_TRIALS",
    "GenerationCall",
    "LookaheadOrchestrator",
    "RayMetric",
    "RayRunner",
    "configure_ray",
    "generation_ahead",
    "refill_size",
    "register_ray_storage",
    "run_trials",
]

logger = logging.getLogger(__name__)

#: Run-metadata keys.
TASK_KEY = "ray_object_id"
SUBMITTED_KEY = "submitted_at"
STARTED_KEY = "worker_started_at"
FINISHED_KEY = "worker_finished_at"
ERROR_KEY = "error"

INSTALL_HINT = "Ray is not installed: pip install botorch_sketch[ray]"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as err:  # pragma: no cover - exercised without ray
        raise ImportError(INSTALL_HINT) from err
    return ray


@dataclass
class _Task:
    r"""One evaluation: its Ray reference and, once finished, its outcome.

    Attributes:
        ref: The task's ``ObjectRef`` (dropped once the outcome is read).
        outcome: ``metric name -> (mean, sem)`` of a successful evaluation.
        error: Why the trial failed.
        started: Worker-side start time (seconds since the epoch).
        finished: Worker-side finish time.
    """

    ref: Any
    outcome: dict[str, tuple[float, float]] | None = None
    error: str | None = None
    started: float | None = None
    finished: float | None = None

    @property
    def done(self) -> bool:
        return self.outcome is not None or self.error is not None


#: Process-wide map: object id (hex) -> task. ``ObjectRef`` s cannot be stored in
#: Ax's JSON, so runners and metrics (also reloaded ones) find tasks here.
_TASKS: dict[str, _Task] = {}


def _unknown_task_error(key: Any) -> str:
    return (
        f"Ray task {key!r} is unknown to this process (the experiment was saved "
        "while the trial ran, or Ray was restarted); the trial is failed."
    )


def parse_outcome(
    result: Any, metric_names: Sequence[str]
) -> dict[str, tuple[float, float]]:
    r"""Validate ``evaluate``'s return value and convert it to ``(mean, sem)`` pairs.

    Args:
        result: ``{metric_name: value}``, a value a real number or ``(mean, sem)``
            with ``sem`` a non-negative number or ``None`` (unknown noise).
        metric_names: Metrics that must be present (other keys are ignored).

    Returns:
        ``metric_name -> (mean, sem)``, ``sem`` NaN when unknown.

    Raises:
        ValueError: A metric is missing, or a mean or SEM is not finite (or the SEM
            is negative), naming the metric and the value.
        TypeError: ``result`` is not a mapping or a value is not a number or pair.
    """
    if not isinstance(result, Mapping):
        raise TypeError(
            "evaluate must return a mapping {metric_name: value or (mean, sem)}, "
            f"got {type(result).__name__}"
        )
    missing = [name for name in metric_names if name not in result]
    if missing:
        raise ValueError(
            f"evaluate returned no value for metric(s) {missing}; it returned "
            f"{sorted(map(str, result))}"
        )
    outcome = {}
    for name in metric_names:
        value = result[name]
        if isinstance(value, Sequence) and not isinstance(value, str):
            if len(value) != 2:
                raise TypeError(
                    f"metric {name!r}: expected a number or (mean, sem), got {value!r}"
                )
            mean, sem = value
        else:
            mean, sem = value, None
        mean = _as_float(name, "mean", mean)
        if not math.isfinite(mean):
            raise ValueError(f"metric {name!r}: the value {mean} is not finite")
        if sem is None:
            sem = math.nan
        else:
            sem = _as_float(name, "sem", sem)
            if not (math.isfinite(sem) and sem >= 0):
                raise ValueError(
                    f"metric {name!r}: the sem {sem} is not finite and non-negative"
                )
        outcome[name] = (mean, sem)
    return outcome


def _as_float(name: str, what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        try:  # numpy / torch scalars
            if isinstance(value, bool) or getattr(value, "ndim", 1) != 0:
                raise TypeError
            return float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"metric {name!r}: the {what} must be a real number, got {value!r}"
            ) from None
    return float(value)


def _make_task(ray: Any, options: Mapping[str, Any]) -> Any:
    r"""The Ray remote function wrapping ``evaluate`` with worker-side timing.

    A nested function, so that Ray ships it by value and a worker need not import
    this package to run it.
    """

    def timed_evaluate(evaluate: Callable, parameters: dict) -> dict[str, Any]:
        import time as _time

        started = _time.time()
        result = evaluate(parameters)
        return {"result": result, "started": started, "finished": _time.time()}

    return ray.remote(timed_evaluate).options(**{"max_retries": 0, **options})


def _make_warm_task(ray: Any, options: Mapping[str, Any]) -> Any:
    r"""A Ray remote function that receives ``evaluate`` (so the worker
    deserialises it), sleeps ``seconds`` and returns the worker's process id."""

    def warm(evaluate: Callable, seconds: float) -> int:
        import os as _os
        import time as _time

        _time.sleep(seconds)
        return _os.getpid()

    return ray.remote(warm).options(**{"max_retries": 0, **options})


#: The interpreter's switch interval (seconds) while a
#: :class:`LookaheadOrchestrator` with thread refills runs (CPython's default: 5 ms).
THREAD_SWITCH_INTERVAL = 5e-4

#: Seconds without a new worker process after which :meth:`RayRunner.warm_up`
#: stops (the cluster runs no more tasks at once). A local Ray starts about two
#: worker processes per half second on two cores (32 in 5.8 s), so rounds that
#: stop after a fixed count left 13 of 32 workers to start during the first
#: trials (session 34).
WARM_UP_STALL_S = 1.5

#: Generation calls whose median wall time per trial :func:`generation_ahead`
#: compares with the workers' pace.
PACE_CALLS = 3

#: Most recent completed trials whose median evaluation time sets the pace.
PACE_TRIALS = 64

#: Fewest workers (``max_pending_trials``) at which :class:`LookaheadOrchestrator`
#: uses its ``pace_fill``. With 8 workers of a second the refills keep up with
#: the strategy's own fill once they have grown past their fixed costs, and
#: ``thompson_fill=1.0`` lowered the utilisation there (0.958-0.965 against
#: 0.966-0.988 with the strategy's ``0.5``); with 32, the strategy's fill fell
#: behind (0.42-0.49) where ``1.0`` kept up (0.91;
#: ``benchmarks/results/ray_workers_summary.md``, sessions 32-33).
PACE_FILL_WORKERS = 16

#: How many times faster than the workers' pace generation must be (per trial,
#: with the ``pace_fill``) before :class:`LookaheadOrchestrator` gives the
#: strategy its own fill back: greedy points cost about three times a Thompson
#: sample's.
PACE_HEADROOM = 4.0


def generation_ahead(
    seconds_per_trial: Sequence[float],
    durations: Sequence[float],
    workers: int,
    calls: int = PACE_CALLS,
    headroom: float = PACE_HEADROOM,
) -> bool:
    r"""Whether generation runs ``headroom`` times ahead of ``workers`` evaluations.

    ``k`` workers whose evaluations take a median ``tau`` seconds free a slot
    every ``tau / k`` seconds; generation keeps them busy only while it costs
    less per trial. Ahead: the median wall time per trial of the last ``calls``
    generation calls times ``headroom`` is below ``tau / k`` (``durations``:
    evaluation times of recent trials, seconds). A median over calls, so that
    one slow call (a hyperparameter refit) does not count.

    Returns:
        ``False`` with fewer than ``calls`` calls or no duration.
    """
    _check_count("workers", workers, minimum=1)
    _check_count("calls", calls, minimum=1)
    if isinstance(headroom, bool) or not (
        isinstance(headroom, int | float) and headroom >= 1
    ):
        raise ValueError(f"headroom must be a number >= 1, got {headroom!r}")
    if len(seconds_per_trial) < calls or not durations:
        return False
    per_trial = sorted(seconds_per_trial[-calls:])[(calls - 1) // 2]
    tau = sorted(durations)[(len(durations) - 1) // 2]
    return per_trial * headroom < tau / workers


class RayRunner(IRunner):
    r"""Ax runner that evaluates each trial as one Ray task.

    Args:
        evaluate: ``parameters -> {metric_name: value or (mean, sem)}``; ``None``
            gives a runner that only polls (what loading a saved experiment makes).
        metric_names: The metrics ``evaluate`` must return.
        num_workers: The number of concurrent evaluations it is sized for.
        task_options: Extra Ray task options (``num_cpus``, ``num_gpus``,
            ``resources``, ...); ``max_retries`` is 0 unless given here.
        poll_timeout: Seconds a poll waits for the first running task to finish
            when none has (so the Orchestrator reacts when a worker frees up
            instead of sleeping between polls).
    """

    def __init__(
        self,
        evaluate: Callable[[TParameterization], Mapping[str, Any]] | None = None,
        metric_names: Sequence[str] = (),
        num_workers: int = 1,
        task_options: Mapping[str, Any] | None = None,
        poll_timeout: float = 1.0,
    ) -> None:
        super().__init__()
        self.metric_names = list(metric_names)
        self.num_workers = num_workers
        self.poll_timeout = poll_timeout
        self._evaluate = evaluate
        self._task_options = dict(task_options or {})
        self._remote: Any = None
        self._evaluate_ref: Any = None

    # -- IRunner ------------------------------------------------------------------
    def run_trial(
        self, trial_index: int, parameterization: TParameterization
    ) -> dict[str, Any]:
        r"""Submit ``evaluate(parameterization)`` as a Ray task; JSON run metadata."""
        self._prepare()
        ref = self._remote.remote(self._evaluate_ref, dict(parameterization))
        key = ref.hex()
        _TASKS[key] = _Task(ref=ref)
        return {TASK_KEY: key, SUBMITTED_KEY: time.time()}

    def poll_trial(
        self, trial_index: int, trial_metadata: Mapping[str, Any]
    ) -> TrialStatus:
        r"""Status of one trial without waiting (see :meth:`poll_trial_status`)."""
        task = _TASKS.get(trial_metadata.get(TASK_KEY))
        if task is not None and not task.done:
            self._collect([task], wait=False)
        return _status(task)

    def poll_trial_status(
        self, trials: Iterable[BaseTrial]
    ) -> dict[TrialStatus, set[int]]:
        r"""Statuses of ``trials``; waits up to ``poll_timeout`` s for one to end.

        Failed trials get the reason in their run metadata (``"error"``).
        """
        trials = list(trials)
        tasks = {t.index: _TASKS.get(t.run_metadata.get(TASK_KEY)) for t in trials}
        running = [task for task in tasks.values() if task is not None]
        if any(not task.done for task in running):
            self._collect(running, wait=True)
        statuses: dict[TrialStatus, set[int]] = {}
        for trial in trials:
            task = tasks[trial.index]
            if task is None and TASK_KEY not in trial.run_metadata:
                if trial.status.is_candidate:  # created, not launched yet
                    statuses.setdefault(trial.status, set()).add(trial.index)
                    continue
            status = _status(task)
            statuses.setdefault(status, set()).add(trial.index)
            if status.is_terminal:
                _record(trial, task)
        return statuses

    def poll_exception(self, trial: BaseTrial) -> str:
        r"""Why a trial failed (Ax stores it as the trial's failure reason)."""
        key = trial.run_metadata.get(TASK_KEY)
        task = _TASKS.get(key)
        if task is None:
            return _unknown_task_error(key)
        return task.error or ""

    def stop_trial(
        self, trial_index: int, trial_metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        r"""Cancel the trial's Ray task (interrupting it if it runs)."""
        key = trial_metadata.get(TASK_KEY)
        task = _TASKS.get(key)
        if task is not None and not task.done:
            _import_ray().cancel(task.ref)
            task.error = "stopped"
        return {"stopped": True}

    def warm_up(self, timeout: float = 10.0, seconds: float = 0.2) -> int:
        r"""Start the worker processes before the first trial.

        A Ray worker process starts when the first task that needs it is
        scheduled, and until then that task waits (a second or more per worker on
        a loaded machine): the first ``k`` trials of a run would start late. Rounds
        of ``num_workers`` concurrent tasks (each receives ``evaluate``, so the
        worker also deserialises it, and sleeps ``seconds``) run until
        ``num_workers`` distinct worker processes have answered, until no new
        one has answered for :data:`WARM_UP_STALL_S` seconds (a cluster whose
        resources run fewer tasks at once stops there), or for at most
        ``timeout`` seconds. Idle workers stay up for the trials.

        Returns:
            The number of distinct worker processes that ran a warm-up task.
        """
        ray = self._prepare()
        warm = _make_warm_task(ray, self._task_options)
        now = time.monotonic()
        deadline, last_new = now + timeout, now
        workers: set[int] = set()
        while True:
            refs = [
                warm.remote(self._evaluate_ref, seconds)
                for _ in range(self.num_workers)
            ]
            try:
                pids = ray.get(refs, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                for ref in refs:
                    ray.cancel(ref)
                break
            now = time.monotonic()
            if not workers.issuperset(pids):
                workers.update(pids)
                last_new = now
            stalled = now - last_new >= WARM_UP_STALL_S
            if len(workers) >= self.num_workers or now >= deadline or stalled:
                break
        logger.info(
            "Ray warm-up: %d of %d worker processes started",
            len(workers),
            self.num_workers,
        )
        return len(workers)

    # -- helpers --------------------------------------------------------------------
    def _prepare(self) -> Any:
        r"""Ray, with the remote task and ``evaluate``'s object reference made
        once per runner."""
        if self._evaluate is None:
            raise RuntimeError(
                "This RayRunner has no evaluate function (it was loaded from "
                "storage); call botorch_sketch.ax.configure_ray(client, evaluate, "
                "num_workers=k) again before running trials."
            )
        ray = _import_ray()
        if self._remote is None:
            self._remote = _make_task(ray, self._task_options)
            self._evaluate_ref = ray.put(self._evaluate)
        return ray

    def _collect(self, tasks: Sequence[_Task], wait: bool) -> None:
        r"""Read the outcome of every finished task among ``tasks``."""
        ray = _import_ray()
        pending = [task for task in tasks if not task.done]
        refs = [task.ref for task in pending]
        if wait and self.poll_timeout > 0:
            ray.wait(refs, num_returns=1, timeout=self.poll_timeout)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        ready_ids = {ref.hex() for ref in ready}
        for task in pending:
            if task.ref.hex() in ready_ids:
                self._resolve(ray, task)

    def _resolve(self, ray: Any, task: _Task) -> None:
        try:
            value = ray.get(task.ref, timeout=0)
        except ray.exceptions.RayTaskError as err:  # evaluate raised
            cause = err.cause if err.cause is not None else err
            task.error = f"evaluate raised {type(cause).__name__}: {cause}"
        except ray.exceptions.WorkerCrashedError as err:
            task.error = f"the worker process died during the evaluation ({err})"
        except ray.exceptions.TaskCancelledError:
            task.error = "the evaluation was cancelled"
        except ray.exceptions.RayError as err:
            task.error = f"Ray error {type(err).__name__}: {err}"
        else:
            task.started, task.finished = value["started"], value["finished"]
            try:
                task.outcome = parse_outcome(value["result"], self.metric_names)
            except (TypeError, ValueError) as err:
                task.error = f"invalid evaluate result: {err}"
        task.ref = None
        if task.error is not None:
            logger.warning("Ray trial failed: %s", task.error)


def _status(task: _Task | None) -> TrialStatus:
    if task is None or task.error is not None:
        return TrialStatus.FAILED
    if task.outcome is not None:
        return TrialStatus.COMPLETED
    return TrialStatus.RUNNING


def _record(trial: BaseTrial, task: _Task | None) -> None:
    r"""Write the worker times and any error into the trial's run metadata."""
    update: dict[str, Any] = {}
    if task is None:
        update[ERROR_KEY] = _unknown_task_error(trial.run_metadata.get(TASK_KEY))
    else:
        if task.error is not None:
            update[ERROR_KEY] = task.error
        if task.started is not None:
            update[STARTED_KEY] = task.started
            update[FINISHED_KEY] = task.finished
    if any(trial.run_metadata.get(k) != v for k, v in update.items()):
        trial.update_run_metadata(update)


class RayMetric(IMetric):
    r"""Ax metric that reads its value from the trial's finished Ray task."""

    def fetch_data_prefer_lookup(
        self,
        experiment: Any,
        metrics: list[Any],
        trials: list[BaseTrial] | None = None,
        **kwargs: Any,
    ) -> tuple[dict[int, dict[str, Any]], bool]:
        r"""``Metric.fetch_data_prefer_lookup`` without the lookup for trials that
        have no data yet.

        Ax looks each completed trial up in the experiment's data before it
        fetches (``experiment.lookup_data(trial_indices={i})``), and that builds
        the data frame of every observation, because ``attach_data`` replaced
        the experiment's ``Data`` at the previous completion: ``O(N)`` per
        completed trial, tens of milliseconds at thousands of trials, between a
        worker's finish and its next trial. Here the experiment's rows
        (:func:`~botorch_sketch.ax.data_rows.data_rows`) say which trials have
        none of ``metrics``' data; those are fetched directly (the finished
        task's outcome), the others go through Ax's lookup as before.
        """
        rows = data_rows(experiment.data)
        if rows is None or self.is_available_while_running():
            return super().fetch_data_prefer_lookup(
                experiment=experiment, metrics=metrics, trials=trials, **kwargs
            )
        if trials is None:
            trials = experiment.completed_trials
        completed = [t for t in trials if t.status.is_completed]
        signatures = {m.signature for m in metrics}
        observed = {r.trial_index for r in rows if r.metric_signature in signatures}
        fresh = [t for t in completed if t.index not in observed]
        seen = [t for t in completed if t.index in observed]
        results: dict[int, dict[str, Any]] = {}
        new = False
        if seen:
            results, new = super().fetch_data_prefer_lookup(
                experiment=experiment, metrics=metrics, trials=seen, **kwargs
            )
        if fresh:
            fetched = self.bulk_fetch_experiment_data(
                experiment=experiment, metrics=metrics, trials=fresh, **kwargs
            )
            results.update(fetched)
            new = new or any(
                result.is_ok() for by in fetched.values() for result in by.values()
            )
        return results, new

    def fetch(
        self, trial_index: int, trial_metadata: Mapping[str, Any]
    ) -> tuple[int, float | tuple[float, float]]:
        r"""``(0, (mean, sem))`` of the trial's evaluation (``sem`` NaN: unknown)."""
        key = trial_metadata.get(TASK_KEY)
        task = _TASKS.get(key)
        if task is None:
            raise RuntimeError(_unknown_task_error(key))
        if task.outcome is None:
            raise RuntimeError(f"trial {trial_index} has no outcome: {task.error}")
        mean, sem = task.outcome[self.name]
        return 0, (mean, sem)

    def fetch_trial_data(self, trial: BaseTrial, **kwargs: Any) -> MetricFetchResult:
        r"""The trial's row, as ``IMetric.fetch_trial_data`` returns it, built as a
        ``DataRow`` instead of through a one-row data frame (a few milliseconds a
        trial, between a worker's finish and its next trial)."""
        trial = assert_is_instance(trial, Trial)
        try:
            step, (mean, sem) = self.fetch(trial.index, trial.run_metadata)
            row = DataRow(
                trial_index=trial.index,
                arm_name=none_throws(trial.arm).name,
                metric_name=self.name,
                metric_signature=self.signature,
                mean=mean,
                se=sem,
                step=step,
            )
            return Ok(value=Data(data_rows=[row]))
        except Exception as err:
            return Err(
                value=MetricFetchE(
                    message=f"Failed to fetch {self.name}", exception=err
                )
            )


def _runner_to_dict(runner: RayRunner) -> dict[str, Any]:
    return {
        "__type": type(runner).__name__,
        "metric_names": list(runner.metric_names),
        "num_workers": runner.num_workers,
    }


def _metric_to_dict(metric: RayMetric) -> dict[str, Any]:
    return {"__type": type(metric).__name__, "name": metric.name}


def register_ray_storage() -> None:
    r"""Register :class:`RayRunner` and :class:`RayMetric` with Ax's JSON storage.

    A stored runner keeps its metric names and worker count, not ``evaluate``.
    """
    CORE_ENCODER_REGISTRY.setdefault(RayRunner, _runner_to_dict)
    CORE_DECODER_REGISTRY.setdefault(RayRunner.__name__, RayRunner)
    CORE_ENCODER_REGISTRY.setdefault(RayMetric, _metric_to_dict)
    CORE_DECODER_REGISTRY.setdefault(RayMetric.__name__, RayMetric)


def configure_ray(
    client: Client,
    evaluate: Callable[[TParameterization], Mapping[str, Any]],
    num_workers: int,
    address: str | None = None,
    metric_names: Sequence[str] | None = None,
    task_options: Mapping[str, Any] | None = None,
    init_kwargs: Mapping[str, Any] | None = None,
    poll_timeout: float = 1.0,
    warm_up: bool = True,
) -> RayRunner:
    r"""Run ``client``'s trials on Ray: attach a :class:`RayRunner` and metrics.

    Args:
        client: An Ax ``Client`` with its experiment and optimization configured.
        evaluate: ``parameters -> {metric_name: value or (mean, sem)}``, run in a
            Ray worker (it must be picklable).
        num_workers: Concurrent evaluations (the local Ray's ``num_cpus``); pass the
            same number as ``parallelism`` to ``run_trials``.
        address: A Ray cluster address; ``None`` starts a local Ray (or uses the
            one this process already started).
        metric_names: The metrics ``evaluate`` returns; default every metric of the
            experiment (objectives, constraints, tracking metrics).
        task_options: Extra Ray task options (e.g. ``{"num_gpus": 1}``).
        init_kwargs: Extra ``ray.init`` arguments when Ray is started here.
        poll_timeout: See :class:`RayRunner`.
        warm_up: Start the ``num_workers`` worker processes now
            (:meth:`RayRunner.warm_up`), so that the first trials do not wait
            for them.

    Returns:
        The runner (also attached to the client).

    Raises:
        TypeError, ValueError: Bad arguments (before anything is created).
        ImportError: Ray is not installed.
    """
    if not isinstance(client, Client):
        raise TypeError(f"client must be an ax.Client, got {type(client).__name__}")
    if not callable(evaluate):
        raise TypeError(f"evaluate must be callable, got {type(evaluate).__name__}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, numbers.Integral):
        raise TypeError(f"num_workers must be an int, got {num_workers!r}")
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if address is not None and not isinstance(address, str):
        raise TypeError(f"address must be a string or None, got {address!r}")
    if not (isinstance(poll_timeout, numbers.Real) and poll_timeout >= 0):
        raise ValueError(f"poll_timeout must be >= 0, got {poll_timeout!r}")
    if not isinstance(warm_up, bool):
        raise TypeError(f"warm_up must be a bool, got {warm_up!r}")
    for name, value in (("task_options", task_options), ("init_kwargs", init_kwargs)):
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"{name} must be a mapping or None, got {value!r}")
    known = list(client._experiment.metrics)  # raises if no experiment is set
    if metric_names is None:
        metric_names = known
    elif isinstance(metric_names, str):
        raise TypeError("metric_names must be a sequence of names, not a string")
    unknown = [name for name in metric_names if name not in known]
    if unknown or not metric_names:
        raise ValueError(
            f"metric_names {list(metric_names)}: unknown {unknown}; the experiment's "
            f"metrics are {known}"
        )
    ray = _import_ray()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False}
        if address is None:
            kwargs["num_cpus"] = int(num_workers)
        kwargs.update(init_kwargs or {})
        ray.init(address=address, **kwargs)
    elif address is not None:
        logger.info("Ray is already initialised; ignoring address=%r", address)
    register_ray_storage()
    runner = RayRunner(
        evaluate,
        metric_names=metric_names,
        num_workers=int(num_workers),
        task_options=task_options,
        poll_timeout=float(poll_timeout),
    )
    client.configure_runner(runner)
    client.configure_metrics([RayMetric(name) for name in metric_names])
    if warm_up:
        runner.warm_up()
    return runner


@dataclass(frozen=True)
class GenerationCall:
    r"""One request of the Orchestrator for new trials, as served.

    Attributes:
        requested: Trials the Orchestrator asked for (its free slots).
        from_queue: Of those, trials taken from the lookahead queue.
        generated: Trials the generation strategy produced in this call (the
            rest of ``requested`` plus the lookahead; 0 when served from the
            queue).
        num_trials: Trials in the experiment before the call.
        wall: Seconds the call took (wall-clock).
        cpu: CPU seconds of this process during the call (of the calling
            thread when the orchestrator generates in the background).
        background: Whether the call ran in the refill thread (its wall time
            held no worker).
        queued: Runs in the queue when the call began (for a background
            refill: when it started; -1 where not recorded).
    """

    requested: int
    from_queue: int
    generated: int
    num_trials: int
    wall: float
    cpu: float
    background: bool = False
    queued: int = -1


class LookaheadOrchestrator(StatusIndexedOrchestrator):
    r"""Ax's Orchestrator with generation amortised over the free worker slots.

    Every request for ``m`` trials (the free slots) is answered from a queue of
    pre-generated one-arm generator runs when it holds any; otherwise by one
    ``GenerationStrategy.gen(num_trials=m + L)`` call (one model fit, then ``m +
    L`` acquisition optimisations, each hallucinating the ones before it), whose
    first ``m`` runs become trials and the last ``L`` are queued. On a BBKB node
    (``AdaptiveBatchAcquisition``) the call is one BBKB batch of ``m + L``
    points (:func:`~botorch_sketch.ax.trials.gen_filled_batch`: the batch rule's
    ``min_batch_size`` raised to ``m + L`` for the call, so the greedy steps
    after the first reuse its restarts); on a trust-region node
    (``"turbo-bkb"``) one TuRBO batch of ``m + L`` points (one region fit), and on
    a finite library's node one engine batch of ``m + L`` rows. ``L`` is
    ``lookahead`` on the strategy's last node, capped by the trials still to
    run, and 0 before (the Sobol initialisation generates exactly its budget).
    With ``generate_ahead``, while every worker is busy and the queue is empty,
    ``L`` runs are generated ahead (in the time the Orchestrator would otherwise
    wait for a worker). With ``background``, the refill runs in a thread:
    whenever the queue holds fewer than ``s`` runs and no refill is running,
    ``s`` runs are generated on a copy of the experiment in which the queued
    runs are running trials (all hallucinated), while the Orchestrator goes on
    polling and serving freed workers from the queue; a request that finds the
    queue empty waits for the refill. The refill size follows the demand
    (:func:`refill_size`): ``s = clip(2 D, k, L)``, with ``D`` the trials
    requested while the previous refill ran and ``k = max_pending_trials`` (the
    first refill has ``k``). A refill's fixed cost (the fit, Ax's data
    extraction, the posterior's factors) then spreads over more trials when the
    refills fall behind the workers (thousands of trials), and the queued points
    stay fresh while they keep up. The queue's target (the level below which a
    refill starts) is ``clip(2 D_max, k, L)``, with ``D_max`` the most trials
    requested during any one refill so far: a refill that once took long (a
    hyperparameter refit, due every time the data grew by a fraction) will take
    long again, and longer as the data grow, so the queue keeps enough runs to
    last through it, while the refills between stay of size ``s``.
    Generation then holds a free worker only when the queue runs dry, and a
    generation's cost overlaps the evaluations instead of adding to the wall
    time. The queue is never stored (a reloaded experiment regenerates); a
    queued run is dropped once ``max_queue_age`` trials completed after the
    state it was generated from, and the whole queue when the strategy moves to
    another node.

    Generation keeps up only while it costs less per trial than the workers'
    pace, ``tau / k`` for evaluations of median time ``tau``: with many workers
    (32 evaluations of a second, about 23 ms a trial) the batch rule's greedy
    points (each an acquisition optimisation with every queued and running
    trial hallucinated) cost more, and refills that fall behind grow and get
    slower. With at least :data:`PACE_FILL_WORKERS` workers every call on a
    BBKB node therefore fills the points past the rule's own batch with
    ``pace_fill`` as the acquisition's ``thompson_fill`` (posterior samples,
    a fraction of a greedy point's cost), until :func:`generation_ahead` finds
    generation :data:`PACE_HEADROOM` times faster than the pace (the median
    over :data:`PACE_CALLS` calls on the strategy's last node against the
    median evaluation time of the last :data:`PACE_TRIALS` completed trials;
    slow evaluations): from then on the strategy's own fill, and
    :attr:`pace_fill_until` records when.

    Args:
        experiment, generation_strategy, options, db_settings: As
            ``Orchestrator``; use ``options.run_trials_in_batches=True`` so that
            all free slots are asked for at once.
        lookahead: Trials generated ahead per generation call (``L >= 0``); with
            ``background``, the largest refill (:func:`refill_size`).
        max_queue_age: Completed trials after which queued runs are dropped
            (``>= 1``); ``None``: ``options.max_pending_trials`` (plus
            ``2 * lookahead`` with ``background``).
        generate_ahead: Refill an empty queue while every worker is busy.
        background: Refill the queue in the background (above): ``"thread"``
            (or ``True``) in a thread of this process, ``"process"`` in a
            forked child process (:class:`_BackgroundGeneration`; where the
            platform forks, :func:`fork_available`), which keeps the
            generation's interpreter lock and CPU off the Orchestrator's
            loop; ``False``: no background refill.
        pace_fill: The ``thompson_fill`` of BBKB calls with many workers
            (above), in ``[0, 1]``; ``None``: the strategy's own throughout.

    Attributes:
        generation_calls: One :class:`GenerationCall` per request, in order.
        background_mode: ``"thread"``, ``"process"`` or ``None``.
        pace_fill_until: Trials in the experiment when the strategy got its own
            fill back (``None``: not, or not yet).
    """

    def __init__(
        self,
        experiment: Any,
        generation_strategy: Any,
        options: OrchestratorOptions,
        db_settings: Any = None,
        lookahead: int = 0,
        max_queue_age: int | None = None,
        generate_ahead: bool = False,
        background: bool | str = False,
        pace_fill: float | None = None,
    ) -> None:
        _check_count("lookahead", lookahead, minimum=0)
        mode = background_mode(background)
        if pace_fill is not None:
            check_fraction(pace_fill, "pace_fill")
        if max_queue_age is not None:
            _check_count("max_queue_age", max_queue_age, minimum=1)
        super().__init__(
            experiment=experiment,
            generation_strategy=generation_strategy,
            options=options,
            db_settings=db_settings,
        )
        self.lookahead = int(lookahead)
        self.generate_ahead = bool(generate_ahead)
        self.background_mode = mode
        default_age = int(options.max_pending_trials)
        if self.background:  # refills queued behind the runs still waiting
            default_age += 2 * self.lookahead
        self.max_queue_age = (
            int(max_queue_age) if max_queue_age is not None else default_age
        )
        self.generation_calls: list[GenerationCall] = []
        #: Queued runs with the number of completed trials when generated.
        self._queue: deque[tuple[GeneratorRun, int]] = deque()
        self._queue_node: str | None = None
        self._worker: _BackgroundGeneration | None = None
        #: Trials requested so far (free slots asked for, served or not).
        self._demand = 0
        #: The next background refill's size (``None``: ``k``).
        self._refill_size: int | None = None
        #: Most trials requested during one refill so far (``D_max``).
        self._peak_demand = 0
        #: The last thread refill's snapshot (its training-data extraction is
        #: the next snapshot's starting point).
        self._last_snapshot: Any = None
        self.pace_fill = None if pace_fill is None else float(pace_fill)
        self.pace_fill_until: int | None = None
        #: Wall seconds per trial of each generation call on the last node.
        self._seconds_per_trial: list[float] = []

    @property
    def background(self) -> bool:
        r"""Whether refills run in the background (``background_mode`` set)."""
        return self.background_mode is not None

    @property
    def queue_target(self) -> int:
        r"""The queue level below which a background refill starts:
        ``clip(2 D_max, k, L)`` (:func:`refill_size` of the most trials
        requested during one refill so far; ``min(k, L)`` before any)."""
        return refill_size(
            self._peak_demand, self._get_max_pending_trials(), self.lookahead
        )

    @property
    def queued(self) -> int:
        r"""Pre-generated runs waiting for a free slot."""
        return len(self._queue)

    def run_n_trials(self, *args: Any, **kwargs: Any) -> Any:
        r"""``Orchestrator.run_n_trials``; a background refill still running at
        the end is waited for and discarded.

        With thread refills, the interpreter's switch interval is
        :data:`THREAD_SWITCH_INTERVAL` during the run (restored after): the loop
        releases the interpreter lock at every Ray call, and with CPython's
        default of 5 ms a refill thread running Python code keeps it that long
        each time, between a worker's finish and its next trial."""
        interval = sys.getswitchinterval()
        if self.background_mode == "thread":
            sys.setswitchinterval(min(interval, THREAD_SWITCH_INTERVAL))
        try:
            return super().run_n_trials(*args, **kwargs)
        finally:
            sys.setswitchinterval(interval)
            self._finish_background(wait=True, keep=False)

    def _cpu(self) -> float:
        # With a generation thread, CPU is counted per thread.
        return time.thread_time() if self.background else time.process_time()

    def _gen_new_trials_from_generation_strategy(
        self, num_trials: int, n: int | None = None
    ) -> list[list[GeneratorRun]]:
        r"""``num_trials`` one-arm runs: queued ones, else generated (``L`` more)."""
        wall, cpu = time.perf_counter(), self._cpu()
        before, requested = len(self.experiment.trials), num_trials
        queued = len(self._queue)
        self._demand += num_trials
        self._drop_stale_queue()
        if not self._queue and self._worker is not None:
            self._finish_background(wait=True)  # the refill in flight serves
            self._drop_stale_queue()
        if self._queue:
            take = min(num_trials, len(self._queue))
            runs = [[self._queue.popleft()[0]] for _ in range(take)]
            generated = 0
        else:
            extra = 0
            in_node = trials_left_in_generating_node(
                self.generation_strategy, self.experiment
            )
            last = in_node is None
            if not last:  # e.g. Sobol: exactly its budget, then the model
                num_trials = min(num_trials, in_node)
            elif self.lookahead > 0 and not self.background:
                # (with ``background`` the refill thread generates the extra)
                left = getattr(self, "_num_remaining_requested_trials", num_trials)
                extra = max(0, min(self.lookahead, left - num_trials))
            runs = self._generate(num_trials + extra, n, last_node=last)
            generated = len(runs)
            self._enqueue(runs[num_trials:], self._num_completed())
            runs = runs[:num_trials]
            if last:
                self._record_pace(time.perf_counter() - wall, generated)
        self.generation_calls.append(
            GenerationCall(
                requested=requested,
                from_queue=0 if generated else len(runs),
                generated=generated,
                num_trials=before,
                wall=time.perf_counter() - wall,
                cpu=self._cpu() - cpu,
                queued=queued,
            )
        )
        return runs

    def poll_and_process_results(self, poll_all_trial_statuses: bool = False) -> bool:
        r"""Poll; refill the queue ahead of the requests when so configured.

        With ``generate_ahead`` and ``lookahead > 0`` on the strategy's last node,
        when no slot is free and the queue is empty, ``L`` runs are generated now
        (the running trials hallucinated), so that the next worker to finish is
        served at once. With ``background``, a refill starts in a thread when the
        queue holds fewer than ``L`` runs: after a poll that freed no worker, else
        once the freed workers are served (:meth:`run`).
        """
        if not self.background:
            self._generate_ahead()
            return super().poll_and_process_results(
                poll_all_trial_statuses=poll_all_trial_statuses
            )
        updated = super().poll_and_process_results(
            poll_all_trial_statuses=poll_all_trial_statuses
        )
        self._finish_background(wait=False)
        if not updated:  # no worker freed: a due refill starts now; else after
            self._start_background()  # the freed workers are served (:meth:`run`)
        return updated

    def run(self, max_new_trials: int, timeout_hours: float | None = None) -> bool:
        r"""``Orchestrator.run``; with ``background``, then a due refill starts.

        The refill's snapshot of the experiment costs the loop ``O(N)`` (tens of
        milliseconds at thousands of trials): taken after the freed workers got
        their trials, it delays no evaluation."""
        launched = super().run(max_new_trials, timeout_hours=timeout_hours)
        if self.background:
            self._start_background()
        return launched

    def _generate_ahead(self) -> None:
        left = getattr(self, "_num_remaining_requested_trials", 0)
        busy = len(self.pending_trials) >= self._get_max_pending_trials()
        idle = self.lookahead == 0 or not self.generate_ahead
        if idle or self._queue or left < 1 or not busy:
            return
        if self.candidate_trials:
            return
        if (
            trials_left_in_generating_node(self.generation_strategy, self.experiment)
            is not None
        ):
            return
        wall, cpu = time.perf_counter(), self._cpu()
        before = len(self.experiment.trials)
        try:
            runs = self._generate(min(self.lookahead, left), None, last_node=True)
        except AxError as err:  # e.g. more data required: the next request tells
            logger.debug("No runs generated ahead: %s", err)
            return
        self._enqueue(runs, self._num_completed())
        self.generation_calls.append(
            GenerationCall(
                requested=0,
                from_queue=0,
                generated=len(runs),
                num_trials=before,
                wall=time.perf_counter() - wall,
                cpu=self._cpu() - cpu,
            )
        )

    def _start_background(self) -> None:
        r"""Start a refill thread on a snapshot of the experiment, if one is due.

        The snapshot holds the queued runs as running trials, so that the refill
        hallucinates them with the running ones. While the thread runs, this
        thread only serves queued runs (it never calls the strategy).
        """
        if self.lookahead == 0 or self._worker is not None:
            return
        left = getattr(self, "_num_remaining_requested_trials", 0) - len(self._queue)
        size = min(self._refill_size or self._get_max_pending_trials(), self.lookahead)
        # ``size <= queue_target``: the last refill's demand is at most the peak.
        if left < 1 or len(self._queue) >= self.queue_target:
            return
        if (
            trials_left_in_generating_node(self.generation_strategy, self.experiment)
            is not None
        ):
            return
        snapshot = self._snapshot()
        if self.background_mode == "thread":
            # The previous refill's extraction of the settled trials (in this
            # process's memory, unlike a child's) carries over to the new copy.
            previous = self._last_snapshot
            adopt_prefix(self.experiment if previous is None else previous, snapshot)
            self._last_snapshot = snapshot
        self._worker = _BackgroundGeneration(
            self,
            snapshot,
            count=min(size, left),
            completed=self._num_completed(),
            num_trials=len(self.experiment.trials),
            demand=self._demand,
            queued=len(self._queue),
            mode=self.background_mode,
        )
        self._worker.start()

    def _snapshot(self) -> Any:
        r"""A copy of the experiment plus the queue, sharing what never changes.

        The trials and their bookkeeping are copied (this thread changes their
        statuses while the refill reads the snapshot); the objects Ax replaces
        instead of changing them are shared: the metrics, the runner, every
        trial's generator runs and arms, and the data (``Experiment.attach_data``
        builds a new ``Data``). A deep copy of those made the snapshot the
        loop's largest cost after generation at thousands of trials.
        """
        experiment = self.experiment
        memo = _shared_objects(experiment)
        # One-arm trials are copied by hand (a shallow copy with its own
        # bookkeeping dicts), not by the generic deep copy, then re-attached.
        trials = {
            id(trial): _detached_trial(trial)
            for trial in experiment.trials.values()
            if type(trial) is Trial
        }
        memo.update(trials)
        snapshot = copy.deepcopy(experiment, memo)
        for trial in trials.values():
            trial._experiment = snapshot
        for run, _ in self._queue:
            trial = snapshot.new_trial(generator_run=run.clone())
            trial.mark_running(no_runner_required=True)
        return snapshot

    def _finish_background(self, wait: bool, keep: bool = True) -> None:
        r"""Take the refill thread's runs into the queue once it has ended."""
        worker = self._worker
        if worker is None or (not wait and not worker.done()):
            return
        worker.wait()
        self._worker = None
        self.generation_strategy.experiment = self.experiment  # not the snapshot
        if worker.recorded:
            # The child's strategy recorded its runs (with the generator's state
            # after them: the sketch's warm start, a trust region) in its own
            # copy: record them here, so that the next generation continues.
            self.generation_strategy._generator_runs.extend(worker.recorded)
        demand = self._demand - worker.demand
        self._peak_demand = max(self._peak_demand, demand)
        self._refill_size = refill_size(
            demand, self._get_max_pending_trials(), self.lookahead
        )
        runs = worker.runs or []
        self.generation_calls.append(
            GenerationCall(
                requested=0,
                from_queue=0,
                generated=len(runs),
                num_trials=worker.num_trials,
                wall=worker.wall,
                cpu=worker.cpu,
                background=True,
                queued=worker.queued,
            )
        )
        if worker.error is not None:
            logger.warning(
                "Background generation failed (%s); the next request generates.",
                worker.error,
            )
            return
        self._record_pace(worker.wall, len(runs))
        if keep:
            self._enqueue(runs, worker.completed)

    @property
    def pacing(self) -> bool:
        r"""Whether BBKB calls now use ``pace_fill`` (class docstring)."""
        return (
            self.pace_fill is not None
            and self.pace_fill_until is None
            and self._get_max_pending_trials() >= PACE_FILL_WORKERS
        )

    def _record_pace(self, wall: float, generated: int) -> None:
        r"""Record a last-node call's wall time per trial; give the strategy its
        own fill back once :func:`generation_ahead` says so."""
        if generated < 1 or not self.pacing:
            return
        self._seconds_per_trial.append(wall / generated)
        if len(self._seconds_per_trial) < PACE_CALLS:
            return
        durations = self._recent_durations()
        k = self._get_max_pending_trials()
        if generation_ahead(self._seconds_per_trial, durations, k):
            self.pace_fill_until = len(self.experiment.trials)
            logger.info(
                "Generation (%.3g s a trial) is well ahead of %d workers (median "
                "evaluation %.3g s): BBKB batches take the strategy's own "
                "thompson_fill again.",
                sorted(self._seconds_per_trial[-PACE_CALLS:])[(PACE_CALLS - 1) // 2],
                k,
                sorted(durations)[(len(durations) - 1) // 2],
            )

    def _recent_durations(self) -> list[float]:
        r"""Evaluation seconds of the last :data:`PACE_TRIALS` completed trials:
        the worker's start to finish (run metadata) where recorded, else Ax's
        run-start to completion times."""
        trials = self.experiment.trials
        recent = sorted(self._indices_with(TrialStatus.COMPLETED))[-PACE_TRIALS:]
        durations = []
        for trial in (trials[i] for i in recent):
            meta = trial.run_metadata or {}
            start, end = meta.get(STARTED_KEY), meta.get(FINISHED_KEY)
            if start is None or end is None:
                if trial.time_run_started is None or trial.time_completed is None:
                    continue
                seconds = (
                    trial.time_completed - trial.time_run_started
                ).total_seconds()
            else:
                seconds = float(end) - float(start)
            durations.append(max(seconds, 0.0))
        return durations

    def _enqueue(self, runs: list[list[GeneratorRun]], completed: int) -> None:
        if not runs:
            return
        for run_list in runs:
            self._queue.extend((run, completed) for run in run_list)
        self._queue_node = self.generation_strategy.current_node_name

    def _generate(
        self,
        num_trials: int,
        n: int | None,
        last_node: bool,
        experiment: Any = None,
    ) -> list[list[GeneratorRun]]:
        r"""``num_trials`` one-arm runs from one generation call (one fit).

        On a node with ``AdaptiveBatchAcquisition``, the trust-region generator or
        a finite library's engine (single-arm trials): one BBKB, TuRBO or engine
        batch of ``num_trials`` points (:func:`gen_filled_batch`); otherwise
        ``GenerationStrategy.gen(num_trials=...)``. ``experiment``: the one to
        generate for (default: the orchestrator's). Pending points are found
        with :func:`~botorch_sketch.ax.pending.fast_metric_availability`.
        """
        experiment = self.experiment if experiment is None else experiment
        fixed = get_fixed_features_from_experiment(experiment)
        with fast_metric_availability():
            if last_node and self.options.trial_type == TrialType.TRIAL:
                runs = gen_filled_batch(
                    self.generation_strategy,
                    experiment,
                    num_trials,
                    fixed_features=fixed,
                    thompson_fill=self.pace_fill if self.pacing else None,
                )
                if runs is not None:
                    return [[run] for run in runs]
            if experiment is self.experiment:
                return super()._gen_new_trials_from_generation_strategy(
                    num_trials=num_trials, n=n
                )
            self.generation_strategy.experiment = experiment
            return self.generation_strategy.gen(
                experiment=experiment, num_trials=num_trials, n=n, fixed_features=fixed
            )

    def _drop_stale_queue(self) -> None:
        if not self._queue:
            return
        done = self._num_completed()
        moved = self.generation_strategy.current_node_name != self._queue_node
        kept = deque(
            item for item in self._queue if done - item[1] < self.max_queue_age
        )
        if moved:
            kept.clear()
        if len(kept) < len(self._queue):
            logger.debug("Dropping %d queued run(s).", len(self._queue) - len(kept))
        self._queue = kept

    def _num_completed(self) -> int:
        return len(self.experiment.trial_indices_by_status[TrialStatus.COMPLETED])


#: :func:`run_trials`' default ``lookahead`` per worker: the queue may hold up to
#: ``8 k`` trials, enough to last through a refill that refits the
#: hyperparameters (every 20 % of growth; at 1,000-2,000 trials such refills
#: took 2.6-5.4 s on one core, 21-43 trials of 8 workers at 1 s each, against
#: ``4 k = 32``).
LOOKAHEAD_PER_WORKER = 8

#: How a background refill runs (:class:`LookaheadOrchestrator`'s ``background``).
BACKGROUND_MODES = ("thread", "process")


def fork_available() -> bool:
    r"""Whether this platform can fork (``"process"`` refills need it)."""
    return "fork" in multiprocessing.get_all_start_methods()


class _BackgroundGeneration:
    r"""One refill of the queue, generated on an experiment snapshot.

    ``mode="thread"``: in a thread of this process (it shares the interpreter's
    lock with the Orchestrator's loop). ``mode="process"``: in a forked child
    process, which starts with the snapshot in its copy of the memory, runs
    the generation on one torch thread and sends the runs back through a pipe
    (pickled) with the runs its strategy recorded; the orchestrator appends
    those to the strategy's run list, so that the next generation's warm start
    and a trust region's state continue from them (the child's other changes,
    e.g. a fitted model kept in memory, are lost with it).

    Attributes:
        runs: The generated runs (``None`` until done or on failure).
        error: The exception the generation raised, if any (a child's as a
            ``RuntimeError`` naming its type and message).
        completed: Completed trials when the snapshot was taken (the runs' age).
        num_trials: Trials in the experiment at the snapshot.
        demand: The orchestrator's count of requested trials at the start.
        queued: Runs in the orchestrator's queue at the start (-1: unknown).
        wall, cpu: Wall and CPU seconds of the generation (the thread's or the
            child process's CPU).
    """

    def __init__(
        self,
        orchestrator: LookaheadOrchestrator,
        snapshot: Any,
        count: int,
        completed: int,
        num_trials: int,
        demand: int = 0,
        queued: int = -1,
        mode: str = "thread",
    ) -> None:
        self.runs: list[list[GeneratorRun]] | None = None
        self.recorded: list[GeneratorRun] = []
        self.demand = demand
        self.queued = queued
        self.error: Exception | None = None
        self.completed = completed
        self.num_trials = num_trials
        self.node = orchestrator.generation_strategy.current_node_name
        self.mode = mode
        self.wall = self.cpu = 0.0
        self._receiver: Any = None
        if mode == "process":
            context = multiprocessing.get_context("fork")
            self._receiver, sender = context.Pipe(duplex=False)
            self._task: Any = context.Process(
                target=_generate_in_child,
                args=(sender, orchestrator, snapshot, count),
                name="botorch_sketch-generation",
                daemon=True,
            )
        else:
            self._task = threading.Thread(
                target=self._run,
                args=(orchestrator, snapshot, count),
                name="botorch_sketch-generation",
                daemon=True,
            )

    def start(self) -> None:
        if self.mode != "process":
            self._task.start()
            return
        # The parent's objects move to the collector's permanent generation for
        # the fork, so that the child's collections do not write to (and so copy)
        # every page of the parent's heap; the parent takes them back after.
        gc.freeze()
        try:
            self._task.start()
        finally:
            gc.unfreeze()

    def done(self) -> bool:
        r"""Whether the refill has ended (its result is ready)."""
        if self.mode == "process":
            return self._receiver.poll() or not self._task.is_alive()
        return not self._task.is_alive()

    def wait(self) -> None:
        r"""Wait for the end; a child's result is read before it is joined."""
        if self.mode == "process":
            self._receive()
        self._task.join()

    def _receive(self) -> None:
        try:
            status, payload, self.wall, self.cpu = self._receiver.recv()
        except (EOFError, OSError) as err:  # the child died without a result
            self._task.join()
            self.error = RuntimeError(
                f"generation process ended without a result (exit code "
                f"{self._task.exitcode}): {err!r}"
            )
            return
        finally:
            self._receiver.close()
        if status == "ok":
            self.runs, self.recorded = payload
        else:
            self.error = RuntimeError(payload)

    def _run(
        self, orchestrator: LookaheadOrchestrator, snapshot: Any, count: int
    ) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            self.runs = orchestrator._generate(
                count, None, last_node=True, experiment=snapshot
            )
        except Exception as err:  # reported by the orchestrator's thread
            self.error = err
        self.wall = time.perf_counter() - wall
        self.cpu = time.thread_time() - cpu


def _generate_in_child(
    sender: Any, orchestrator: LookaheadOrchestrator, snapshot: Any, count: int
) -> None:
    r"""The forked child of a ``"process"`` refill: generate, send, exit.

    One torch thread (a forked OpenMP pool is not usable, and the parent keeps
    the other cores). The result is ``(status, payload, wall, cpu)``: ``("ok",
    runs, ...)`` or ``("error", "Type: message", ...)``.
    """
    import torch

    torch.set_num_threads(1)
    wall, cpu = time.perf_counter(), time.process_time()
    recorded = orchestrator.generation_strategy._generator_runs
    before = len(recorded)
    try:
        runs = orchestrator._generate(count, None, last_node=True, experiment=snapshot)
        result: tuple[Any, ...] = ("ok", (runs, recorded[before:]))
    except Exception as err:  # sent to the parent, which logs it
        result = ("error", f"{type(err).__name__}: {err}")
    sender.send((*result, time.perf_counter() - wall, time.process_time() - cpu))
    sender.close()


def background_mode(background: bool | str | None) -> str | None:
    r"""The refill mode of ``background``: ``True`` is ``"thread"``, ``False``
    or ``None`` none; ``"process"`` needs :func:`fork_available`.

    Raises:
        TypeError: If ``background`` is not a bool, ``None`` or a string.
        ValueError: If it is an unknown mode, or ``"process"`` where the
            platform cannot fork.
    """
    if background is None or background is False:
        return None
    if background is True:
        return "thread"
    message = (
        f"background must be a bool or one of {BACKGROUND_MODES}, got {background!r}"
    )
    if not isinstance(background, str):
        raise TypeError(message)
    if background not in BACKGROUND_MODES:
        raise ValueError(message)
    if background == "process" and not fork_available():
        raise ValueError(
            'background="process" needs the "fork" start method, which this '
            'platform lacks; use background="thread".'
        )
    return background


def refill_size(demand: int, parallelism: int, lookahead: int) -> int:
    r"""The next background refill's size: ``clip(2 D, k, L)``.

    ``D = demand``: trials requested while the previous refill ran; twice that
    leaves a margin for a refill that takes longer than the last (the data
    grow); at least ``k = parallelism`` (every worker served once), at most
    ``L = lookahead`` (which bounds how stale a queued point may get; ``L < k``
    gives ``L``). With the most trials requested during one refill so far, the
    same rule gives the queue's target (:class:`LookaheadOrchestrator`).
    """
    upper = max(int(lookahead), 1)
    return max(min(2 * max(int(demand), 0), upper), min(int(parallelism), upper))


def _shared_objects(experiment: Any) -> dict[int, Any]:
    r"""A ``copy.deepcopy`` memo that keeps the experiment's unchanging parts.

    The metrics, the runner, the data, and every trial's generator runs and
    arms map to themselves, so a deep copy shares them (see
    :meth:`LookaheadOrchestrator._snapshot`).
    """
    shared: list[Any] = [*experiment.metrics.values(), experiment.data]
    if experiment.runner is not None:
        shared.append(experiment.runner)
    for trial in experiment.trials.values():
        for run in trial.generator_runs:  # a trial's arms are its runs' arms
            shared.append(run)
            shared.extend(run.arms)
    shared.extend(experiment.arms_by_name.values())  # and e.g. the status quo
    return {id(obj): obj for obj in shared}


def _detached_trial(trial: Trial) -> Trial:
    r"""A copy of a one-arm trial for a snapshot: generator run and times shared,
    its status and metadata its own (its ``_experiment`` is set by the caller)."""
    copied = copy.copy(trial)
    for name in ("_run_metadata", "_stop_metadata", "_properties"):
        value = getattr(trial, name, None)
        if isinstance(value, dict):
            setattr(copied, name, dict(value))
    return copied


def _check_count(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def run_trials(
    client: Client,
    max_trials: int,
    parallelism: int,
    tolerated_trial_failure_rate: float = 0.5,
    logging_level: int = logging.INFO,
    lookahead: int | None = None,
    max_queue_age: int | None = None,
    generate_ahead: bool = False,
    background: bool | str = True,
    pace_fill: float | None = 1.0,
) -> LookaheadOrchestrator:
    r"""``client.run_trials`` without its pauses, filling free slots in one call.

    ``Client.run_trials`` runs Ax's Orchestrator with a one-second minimum between
    launching a trial and polling or launching the next, so at most one trial
    starts per second whatever the number of free workers, and one generation
    call (one model fit) per trial. This runs a :class:`LookaheadOrchestrator`
    with that minimum at zero, no sleep between polls (the :class:`RayRunner`'s
    poll waits for a task to finish instead) and all free slots asked for at once.
    By default the queue holds trials generated ahead and is refilled in a
    background thread (``lookahead=None``, ``background=True``), so that a freed
    worker is served from the queue while the next trials are generated; the
    refills hold ``k`` trials while they keep up with the workers and grow up to
    ``8 k`` when they do not (:func:`refill_size`), and the queue keeps enough
    trials to last through the slowest refill so far (a hyperparameter refit).

    Args:
        client: A client configured with :func:`configure_ray`.
        max_trials: Trials to run.
        parallelism: Trials in flight at once (the number of workers).
        tolerated_trial_failure_rate: Share of failed trials the run tolerates.
        logging_level: Level of the Orchestrator's log messages.
        lookahead: Trials generated ahead per generation call, queued for the
            next free slots (:class:`LookaheadOrchestrator`; with
            ``background``, the largest refill and the queue's largest
            target); 0: none; ``None``: :data:`LOOKAHEAD_PER_WORKER` ``*
            parallelism``.
        max_queue_age: Completed trials after which queued ones are dropped;
            ``None``: ``parallelism`` (plus ``2 * lookahead`` with
            ``background``).
        generate_ahead: Refill an empty queue while every worker is busy.
        background: Refill the queue in the background while workers finish
            and are served from it (:class:`LookaheadOrchestrator`): ``True``
            or ``"thread"`` in a thread, ``"process"`` in a forked child
            process; ``False``: in the Orchestrator's loop.
        pace_fill: With a BBKB strategy and at least :data:`PACE_FILL_WORKERS`
            workers, the ``thompson_fill`` of every generation call until
            generation is well ahead of the workers' pace
            (:class:`LookaheadOrchestrator`; ``1.0``: every point past the batch
            rule's stop a posterior sample); ``None``: the strategy's own. The
            switch back follows measured times: a run that must repeat exactly
            passes ``None``.

    Returns:
        The orchestrator (its ``generation_calls`` time every request,
        ``pace_fill_until`` says when the strategy's own fill came back).
    """
    if not isinstance(client._experiment.runner, RayRunner):
        raise ValueError("run_trials needs a client configured with configure_ray")
    _check_count("max_trials", max_trials, minimum=0)
    _check_count("parallelism", parallelism, minimum=1)
    if lookahead is None:
        lookahead = LOOKAHEAD_PER_WORKER * int(parallelism)
    _check_count("lookahead", lookahead, minimum=0)
    if max_queue_age is not None:
        _check_count("max_queue_age", max_queue_age, minimum=1)
    background_mode(background)  # checked before anything runs
    if pace_fill is not None:
        check_fraction(pace_fill, "pace_fill")
    storage = client._storage_config
    orchestrator = LookaheadOrchestrator(
        experiment=client._experiment,
        generation_strategy=client._generation_strategy_or_choose(),
        options=OrchestratorOptions(
            max_pending_trials=parallelism,
            tolerated_trial_failure_rate=tolerated_trial_failure_rate,
            init_seconds_between_polls=0,
            min_seconds_before_poll=0.0,
            seconds_between_polls_backoff_factor=1.0,
            run_trials_in_batches=True,
            logging_level=logging_level,
        ),
        db_settings=db_settings_from_storage_config(storage) if storage else None,
        lookahead=lookahead,
        max_queue_age=max_queue_age,
        generate_ahead=generate_ahead,
        background=background,
        pace_fill=pace_fill,
    )
    orchestrator.run_n_trials(max_trials=max_trials)
    return orchestrator
