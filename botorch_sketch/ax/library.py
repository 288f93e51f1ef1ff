r"""Ax generator of a finite library on the BBKB engine, its state kept between calls.

With a ``candidate_set`` (a library of ``A`` rows, e.g. measurable compounds or
the rows of a dataset), the BKB/BBKB strategies generate with
:class:`BBKBLibraryGenerator`: the same :class:`~botorch_sketch.bbkb.engine.
BBKBEngine` that :func:`~botorch_sketch.loops.run_bbkb` drives, so each Ax call
is one step of Algorithm 1 (Calandriello et al., ICML 2020) instead of a model
rebuilt from all data:

- **fit**: the observations not yet seen by the engine (Ax passes all of them,
  in trial order) are matched to library rows and :meth:`observed
  <botorch_sketch.bbkb.engine.BBKBEngine.observe>`; the first call starts the
  engine with every observation so far (the Sobol points, which are usually not
  library rows, become extra arms that are never proposed);
- **gen**: :meth:`~botorch_sketch.bbkb.engine.BBKBEngine.next_batch`, which first
  refits the kernel when due and resamples the dictionary (lazy step 4), with
  Ax's pending points hallucinated and, without repeats, observed and pending rows
  excluded; BBKB's rule decides ``k <= n`` (:mod:`botorch_sketch.ax.trials`).

**State between calls.** Ax builds a new generator at every call and hands it the
previous call's :meth:`_get_state` (stored as ``generator_state_after_gen``, so
also in Ax JSON). That state is the engine's
:meth:`~botorch_sketch.bbkb.engine.BBKBEngine.checkpoint` plus the number of
observations it has seen, a digest of them and the reward scaling. In the same
process the live engine is found again by the digest of that state (a small
cache, :data:`MAX_CACHED_RUNS` runs), so a call costs one batch of the engine
(``O(A r (p + k))`` on the incremental path) and the matching of the new rows.
After a reload, or when the cache lost it, the engine is restored from the
checkpoint and the observations it names, and continues the same run, up to the
rounding of a rebuilt state. A call works on a copy of the live engine and
replaces it only when it completes, so an interrupted call (an exception, a
``KeyboardInterrupt``) leaves the engine as it was and a retry continues the run
as if the call had not been made. A carried state that is unusable
(:func:`engine_state_problem`: non-finite kernel hyperparameters or reward
scaling, dictionary indices outside the arms) or does not restore is discarded
with a warning, and the engine starts again from all data. If the observations do
not extend the ones of the state (a trial's data changed, or an observation is
not a library row nor an extra arm), the engine starts again from all data
(logged).

**Units.** Inputs are scaled to the unit cube by the search space's bounds before
the kernel; rewards are standardized with the mean and standard deviation of the
observations at the engine's start (frozen, so the engine's sums stay valid;
``standardize=False`` keeps raw values). The kernel is an ARD RBF with unit
outputscale whose lengthscales are learned by default
(:mod:`~botorch_sketch.bbkb.learning`); ``lam`` is BBKB's ridge, the noise variance
of one standardized reward.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from ax.core.search_space import SearchSpaceDigest
from ax.exceptions.core import SearchSpaceExhausted, UnsupportedError
from ax.generators.torch_base import TorchGenerator, TorchGenResults, TorchOptConfig
from botorch.utils.datasets import SupervisedDataset
from gpytorch.kernels import RBFKernel, ScaleKernel
from torch import Tensor

from botorch_sketch.bbkb.config import BBKBConfig
from botorch_sketch.bbkb.engine import BBKBEngine
from botorch_sketch.bbkb.schedules import alpha_from_botorch_beta

logger = logging.getLogger(__name__)

__all__ = [
    "BBKBLibraryGenerator",
    "LIBRARY_OPTIONS",
    "MAX_CACHED_RUNS",
    "engine_state_problem",
]

#: Live engines kept in this process, by the digest of their state.
MAX_CACHED_RUNS = 4
#: Rows closer than this (max-abs, Ax's model space) are the same library row.
SAME_ROW_ATOL = 1e-9
#: Initial dictionary of a (re)start: all distinct observed arms up to this many,
#: else BLESS on them.
MAX_EXACT_START = 200

#: Options of the library path, with defaults (besides the strategy's own).
LIBRARY_OPTIONS: dict[str, Any] = {
    "lam": 0.01,
    "learn": True,
    "lengthscale": 0.2,
    "standardize": True,
    "schedule": "paper",
    "resampling": "independent",
}


@dataclass
class _Run:
    """A live engine and what maps Ax's data onto its arms."""

    engine: BBKBEngine
    library: Tensor  # A x d rows in Ax's model space
    extra: Tensor  # e x d observed rows outside the library (arms A..A+e-1)
    offset: float
    scale: float
    num_seen: int
    digest: dict[str, Any]
    lookup: dict[tuple[float, ...], int] = field(repr=False, default_factory=dict)

    @property
    def rows(self) -> Tensor:
        return torch.cat([self.library, self.extra])

    def copy(self) -> _Run:
        r"""An independent copy (the engine deep-copied, the library shared)."""
        return replace(
            self,
            engine=copy.deepcopy(self.engine),
            extra=self.extra.clone(),
            digest=dict(self.digest),
        )


#: The live runs of this process (``state digest -> run``), least recent first.
_RUNS: OrderedDict[str, _Run] = OrderedDict()


class BBKBLibraryGenerator(TorchGenerator):
    r"""BKB/BBKB over a finite library, one engine step per Ax call.

    Args:
        candidate_set: ``A x d`` library in Ax's model space (float parameters in
            their own units, choice parameters as Ax encodes them).
        rule: Stopping rule (``"global"``, ``"global_local"``, ``"bkb"``, ...).
        C: Batch threshold ``C~ >= 1``.
        q_bar: Oversampling of the dictionary resampling.
        lam: BBKB's ridge: noise variance of one (standardized) reward.
        alpha: Fixed UCB width ``alpha~`` (RLS units), instead of ``schedule``.
        beta: Fixed BoTorch UCB ``beta`` (``alpha~ = sqrt(beta lam)``).
        schedule: ``"paper"`` or ``"reference_code"`` ``beta~`` (when neither
            ``alpha`` nor ``beta`` is given).
        learn: Refit the kernel's lengthscales on the engine's schedule.
        resampling: The engine's dictionary coins, ``"independent"`` (Alg. 1)
            or ``"coupled"`` (:class:`~botorch_sketch.bbkb.config.BBKBConfig`).
        lengthscale: Initial lengthscale (unit-cube inputs).
        standardize: Standardize rewards with the statistics at the start.
        max_batch_size: Cap on ``k`` besides Ax's ``n``.
        min_batch_size: Floor on ``k`` (at most ``n``).
        allow_repeats: Whether an observed or pending row may be proposed again.
        seed: Seed of the engine's generator.
        engine_state: The previous call's state (Ax passes it back).
    """

    def __init__(
        self,
        candidate_set: Any,
        rule: str = "global",
        C: float = BBKBConfig.C,
        q_bar: float = BBKBConfig.q_bar,
        lam: float = LIBRARY_OPTIONS["lam"],
        alpha: float | None = None,
        beta: float | None = None,
        schedule: str = LIBRARY_OPTIONS["schedule"],
        learn: bool = LIBRARY_OPTIONS["learn"],
        lengthscale: float = LIBRARY_OPTIONS["lengthscale"],
        standardize: bool = LIBRARY_OPTIONS["standardize"],
        resampling: str = LIBRARY_OPTIONS["resampling"],
        max_batch_size: int | None = None,
        min_batch_size: int = 1,
        allow_repeats: bool = False,
        seed: int = 0,
        engine_state: dict[str, Any] | None = None,
    ) -> None:
        self.library = torch.as_tensor(candidate_set, dtype=torch.float64)
        if self.library.dim() != 2 or self.library.shape[0] == 0:
            raise ValueError(
                "candidate_set must be a non-empty A x d table, got shape "
                f"{tuple(self.library.shape)}."
            )
        self.options = {
            "rule": rule, "C": float(C), "q_bar": float(q_bar), "lam": float(lam),
            "alpha": alpha, "beta": beta, "schedule": schedule, "learn": bool(learn),
            "lengthscale": float(lengthscale), "standardize": bool(standardize),
            "resampling": resampling,
        }  # fmt: skip
        self.max_batch_size, self.min_batch_size = max_batch_size, min_batch_size
        self.allow_repeats, self.seed = allow_repeats, int(seed)
        if engine_state is not None and not isinstance(engine_state, dict):
            raise ValueError(
                f"engine_state must be a dict, got {type(engine_state).__name__}."
            )
        self.engine_state = engine_state
        self._run: _Run | None = None
        self._bounds: Tensor | None = None
        self.restarts = 0  # fresh starts after the first, for diagnostics

    # ------------------------------------------------------------------ Ax API
    def fit(
        self,
        datasets: Sequence[SupervisedDataset],
        search_space_digest: SearchSpaceDigest,
        candidate_metadata: Any = None,
    ) -> None:
        r"""Bring the engine up to date with the observations (module docstring)."""
        if len(datasets) != 1 or datasets[0].Y.shape[-1] != 1:
            raise UnsupportedError(
                "the BBKB library generator models one outcome; got "
                f"{sum(d.Y.shape[-1] for d in datasets)}."
            )
        X = datasets[0].X.to(torch.float64)
        Y = datasets[0].Y.to(torch.float64).squeeze(-1)
        if X.shape[-1] != self.library.shape[-1]:
            raise ValueError(
                f"candidate_set has {self.library.shape[-1]} columns but the "
                f"model space has {X.shape[-1]}."
            )
        if not torch.isfinite(Y).all():
            raise ValueError("the observations contain NaN or infinite values.")
        bounds = torch.tensor(search_space_digest.bounds, dtype=torch.float64).T
        self._bounds = bounds
        run = self._find_run(X, Y)
        if run is None:
            run = self._start(X, Y, extra=X.new_zeros(0, X.shape[-1]))
        self._run = run

    def gen(
        self,
        n: int,
        search_space_digest: SearchSpaceDigest,
        torch_opt_config: TorchOptConfig,
    ) -> TorchGenResults:
        r"""One BBKB batch of ``1 <= k <= n`` library rows."""
        run = self._fitted()
        weights = torch_opt_config.objective_weights
        if (
            torch_opt_config.outcome_constraints is not None
            or (weights != 0).sum() != 1
        ):
            raise UnsupportedError(
                "the BBKB library generator optimises one objective without "
                "outcome constraints."
            )
        maximize = bool(weights[weights != 0][0] > 0)
        pending = self._pending_arms(run, torch_opt_config.pending_observations)
        # The batch is chosen on a copy that replaces the run only when the call
        # completes: an interrupted call leaves the run as fit() left it, and a
        # retry (Ax skips fit() when the data did not change) makes the same draws.
        run = run.copy()
        A, engine = run.library.shape[0], run.engine
        excluded = torch.zeros(engine.arms.shape[0], dtype=torch.bool)
        excluded[A:] = True  # extra arms are not in the library
        if not self.allow_repeats:
            excluded |= engine.counts.cpu() > 0
            excluded[pending] = True
        if bool(excluded[:A].all()):
            raise SearchSpaceExhausted(
                "every library row was observed or is pending (allow_repeats=False)."
            )
        cap = n if self.max_batch_size is None else min(n, self.max_batch_size)
        batch = engine.next_batch(
            cap,
            min_batch_size=min(self.min_batch_size, cap),
            allow_repeats=self.allow_repeats,
            excluded=excluded.to(engine.arms.device),
            pending=pending.tolist(),
            maximize=maximize,
        )
        self._run = run
        self._remember(run)
        points = run.library[torch.tensor(batch)]
        return TorchGenResults(
            points=points,
            weights=torch.ones(len(batch), dtype=points.dtype),
            gen_metadata={
                "batch_size": len(batch),
                "dictionary_size": engine.state.dict_size,
                "alpha": engine.alpha,
            },
        )

    def predict(
        self, X: Tensor, use_posterior_predictive: bool = False
    ) -> tuple[Tensor, Tensor]:
        r"""BBKB's posterior at ``X`` (``j x d``), in the outcome's units."""
        run = self._fitted()
        mean, var = run.engine.predict(self._unit(X.to(torch.float64)))
        return self._outcome_units(run, mean, var, use_posterior_predictive, X)

    def cross_validate(
        self,
        datasets: Sequence[SupervisedDataset],
        X_test: Tensor,
        search_space_digest: SearchSpaceDigest,
        use_posterior_predictive: bool = False,
    ) -> tuple[Tensor, Tensor]:
        r"""BBKB's posterior of a training fold (current kernel and dictionary)."""
        run = self._fitted()
        X = self._unit(datasets[0].X.to(torch.float64))
        y = (datasets[0].Y.to(torch.float64).squeeze(-1) - run.offset) / run.scale
        mean, var = run.engine.predict(self._unit(X_test.to(torch.float64)), X, y)
        return self._outcome_units(run, mean, var, use_posterior_predictive, X_test)

    def _outcome_units(
        self, run: _Run, mean: Tensor, var: Tensor, predictive: bool, like: Tensor
    ) -> tuple[Tensor, Tensor]:
        if predictive:
            var = var + run.engine.lam
        mean = mean * run.scale + run.offset
        var = var * run.scale**2
        return mean.unsqueeze(-1).to(like), var.reshape(-1, 1, 1).to(like)

    def _get_state(self) -> dict[str, Any]:
        r"""``{"engine_state": ...}``: what the next call continues from."""
        state = super()._get_state()
        if self.engine_state is not None:
            state["engine_state"] = self.engine_state
        return state

    # --------------------------------------------------------------- internals
    def _fitted(self) -> _Run:
        if self._run is None:
            raise RuntimeError("call fit() before gen() or predict().")
        return self._run

    def _unit(self, X: Tensor) -> Tensor:
        lower, upper = self._bounds
        return (X - lower) / (upper - lower).clamp_min(1e-12)

    def _new_engine(self, rows: Tensor) -> BBKBEngine:
        opts = self.options
        d = rows.shape[-1]
        kernel = ScaleKernel(RBFKernel(ard_num_dims=d)).to(torch.float64)
        kernel.base_kernel.lengthscale = torch.full((1, d), opts["lengthscale"])
        kernel.outputscale = torch.tensor(1.0)
        kernel.raw_outputscale.requires_grad_(False)
        if opts["alpha"] is not None or opts["beta"] is not None:
            alpha = opts["alpha"]
            if alpha is None:
                alpha = alpha_from_botorch_beta(opts["beta"], opts["lam"])
            beta: str | float = alpha / opts["C"]  # FixedSchedule: alpha = C beta
        else:
            beta = opts["schedule"]
        return BBKBEngine(
            self._unit(rows), kernel, opts["lam"], C=opts["C"], q_bar=opts["q_bar"],
            rule=opts["rule"], beta=beta, learn=opts["learn"],
            resampling=opts["resampling"],
            generator=torch.Generator().manual_seed(self.seed),
        )  # fmt: skip

    def _start(self, X: Tensor, Y: Tensor, extra: Tensor) -> _Run:
        r"""A fresh engine on every observation so far."""
        run = _Run(
            engine=None, library=self.library, extra=extra, offset=0.0,
            scale=1.0, num_seen=0, digest={},
        )  # type: ignore[arg-type]  # fmt: skip
        run.lookup = _row_lookup(self.library)
        idx = _match_rows(X, run)
        if bool((idx < 0).any()):
            run.extra = torch.cat([extra, torch.unique(X[idx < 0], dim=0)])
            idx = _match_rows(X, run)
        if self.options["standardize"] and Y.numel() > 1 and float(Y.std()) > 0:
            run.offset, run.scale = float(Y.mean()), float(Y.std())
        run.engine = self._new_engine(run.rows)
        distinct = torch.unique(idx).numel()
        start = "all" if distinct <= MAX_EXACT_START else "bless"
        run.engine.start(idx, (Y - run.offset) / run.scale, start)
        run.num_seen, run.digest = X.shape[0], _data_digest(X, Y)
        if self.engine_state is not None:
            self.restarts += 1
            logger.info("BBKB library engine started again on %d points.", len(Y))
        return run

    def _find_run(self, X: Tensor, Y: Tensor) -> _Run | None:
        r"""The previous call's engine, moved on by the new observations."""
        state = self.engine_state
        if state is None:
            return None
        problem = engine_state_problem(state, self.library.shape[0])
        if problem is not None:
            logger.warning(
                "Carried BBKB engine state discarded (%s); starting again from "
                "all data.",
                problem,
            )
            return self._start(X, Y, extra=X.new_zeros(0, X.shape[-1]))
        n = int(state["num_seen"])
        if n > X.shape[0] or not _same_data(state["data_digest"], X[:n], Y[:n]):
            logger.info("observations changed since the last call; starting again.")
            return self._start(X, Y, extra=_extra_rows(state, X))
        cached = _RUNS.get(_state_key(state))
        if cached is None:  # another process, or evicted: restore from the checkpoint
            try:
                run = self._restore(state, X[:n], Y[:n])
            except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as err:
                logger.warning(
                    "Carried BBKB engine state discarded (it does not restore: "
                    "%s); starting again from all data.",
                    err,
                )
                return self._start(X, Y, extra=X.new_zeros(0, X.shape[-1]))
        else:  # a copy: the cached run stays as it was if this call is interrupted
            run = cached.copy()
        idx = _match_rows(X[n:], run)
        if bool((idx < 0).any()):
            logger.info("an observation is not a library row; starting again.")
            return self._start(X, Y, extra=run.extra)
        if idx.numel() > 0:
            run.engine.observe(idx, (Y[n:] - run.offset) / run.scale)
        run.num_seen, run.digest = X.shape[0], _data_digest(X, Y)
        return run

    def _restore(self, state: dict[str, Any], X: Tensor, Y: Tensor) -> _Run:
        run = _Run(
            engine=None, library=self.library, extra=_extra_rows(state, X),
            offset=float(state["offset"]), scale=float(state["scale"]),
            num_seen=X.shape[0], digest=state["data_digest"],
        )  # type: ignore[arg-type]  # fmt: skip
        run.lookup = _row_lookup(self.library)
        run.engine = self._new_engine(run.rows)
        idx = _match_rows(X, run)
        if bool((idx < 0).any()):
            raise ValueError("the stored engine state does not match the data.")
        run.engine.restore(state["checkpoint"], idx, (Y - run.offset) / run.scale)
        return run

    def _remember(self, run: _Run) -> None:
        r"""Store the run's state for the next call, and the run under its key."""
        self.engine_state = {
            "num_seen": run.num_seen,
            "data_digest": run.digest,
            "offset": run.offset,
            "scale": run.scale,
            "extra": run.extra.tolist(),
            "checkpoint": run.engine.checkpoint(),
        }
        _RUNS[_state_key(self.engine_state)] = run
        while len(_RUNS) > MAX_CACHED_RUNS:
            _RUNS.popitem(last=False)

    def _pending_arms(self, run: _Run, pending: Sequence[Tensor] | None) -> Tensor:
        if not pending or pending[0].numel() == 0:
            return torch.zeros(0, dtype=torch.long)
        idx = _match_rows(pending[0].to(torch.float64), run)
        if bool((idx < 0).any()):
            logger.warning(
                "%d pending point(s) outside the library are not hallucinated.",
                int((idx < 0).sum()),
            )
        return idx[idx >= 0]


def engine_state_problem(state: Any, num_library_rows: int) -> str | None:
    r"""What makes a carried ``engine_state`` unusable, or ``None``.

    Usable: it has every entry :meth:`BBKBLibraryGenerator._get_state` writes,
    finite reward scaling (``scale > 0``), finite kernel hyperparameters and
    dictionary indices among the arms (``0 <= i < A + extra rows``).
    """
    keys = {"num_seen", "data_digest", "offset", "scale", "extra", "checkpoint"}
    if not isinstance(state, dict) or not keys <= set(state):
        return "not a BBKB library state"
    checkpoint = state["checkpoint"]
    if not isinstance(checkpoint, dict) or not {"kernel", "dictionary"} <= set(
        checkpoint
    ):
        return "no engine checkpoint"
    try:
        offset, scale = float(state["offset"]), float(state["scale"])
        kernel = [
            torch.as_tensor(v, dtype=torch.float64)
            for v in checkpoint["kernel"].values()
        ]
        dictionary = torch.as_tensor(checkpoint["dictionary"], dtype=torch.long)
        num_arms = num_library_rows + len(state["extra"] or [])
    except (TypeError, ValueError, RuntimeError, AttributeError) as err:
        return f"unreadable: {err}"
    if not (math.isfinite(offset) and math.isfinite(scale) and scale > 0):
        return f"reward scaling offset={offset}, scale={scale}"
    if not all(bool(torch.isfinite(v).all()) for v in kernel):
        return "non-finite kernel hyperparameters"
    if dictionary.numel() > 0 and (
        int(dictionary.min()) < 0 or int(dictionary.max()) >= num_arms
    ):
        return f"dictionary indices outside 0..{num_arms - 1}"
    return None


def _row_lookup(rows: Tensor) -> dict[tuple[float, ...], int]:
    lookup: dict[tuple[float, ...], int] = {}
    for i, row in enumerate(rows.tolist()):
        lookup.setdefault(tuple(row), i)
    return lookup


def _match_rows(X: Tensor, run: _Run) -> Tensor:
    r"""Arm index of each row of ``X`` (``-1``: neither a library nor an extra row).

    Exact matches by a hash lookup; the rest by the nearest row within
    :data:`SAME_ROW_ATOL` (max-abs), in chunks.
    """
    A = run.library.shape[0]
    out = torch.tensor([run.lookup.get(tuple(r), -1) for r in X.tolist()])
    out = out.to(torch.long).reshape(-1)
    missing = (out < 0).nonzero().squeeze(-1)
    if missing.numel() == 0:
        return out
    rows = run.rows
    for chunk in missing.split(16):
        gap = (X[chunk].unsqueeze(1) - rows.unsqueeze(0)).abs().amax(-1)
        best = gap.min(-1)
        hit = best.values <= SAME_ROW_ATOL
        out[chunk[hit]] = best.indices[hit]
    if run.extra.shape[0] > 0:
        logger.debug("%d of %d rows matched outside the library.",
                     int((out >= A).sum()), X.shape[0])  # fmt: skip
    return out


def _extra_rows(state: dict[str, Any], X: Tensor) -> Tensor:
    extra = state.get("extra") or []
    return torch.tensor(extra, dtype=torch.float64).reshape(-1, X.shape[-1])


def _data_digest(X: Tensor, Y: Tensor) -> dict[str, Any]:
    r"""What identifies the observations: the inputs exactly (they round-trip
    through Ax JSON), the outcomes by their first two moments (Ax JSON keeps 10
    decimals of each value, so a reloaded run sees them rounded)."""
    h = hashlib.sha256(X.contiguous().numpy().tobytes())
    return {
        "x": h.hexdigest(),
        "y_sum": float(Y.sum()),
        "y_sq_sum": float(Y.square().sum()),
    }


def _same_data(digest: dict[str, Any], X: Tensor, Y: Tensor) -> bool:
    now = _data_digest(X, Y)
    tol = 1e-8 * (Y.numel() + float(Y.abs().sum()) + float(Y.square().sum()))
    return now["x"] == digest["x"] and all(
        abs(now[k] - digest[k]) <= tol for k in ("y_sum", "y_sq_sum")
    )


def _state_key(state: dict[str, Any]) -> str:
    text = json.dumps(state, sort_keys=True, default=_json_number)
    return hashlib.sha256(text.encode()).hexdigest()


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")
