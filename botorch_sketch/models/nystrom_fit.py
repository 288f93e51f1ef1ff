r"""Fitting a :class:`~botorch_sketch.models.NystromGP`: hyperparameters, then sketch.

``fit_gpytorch_mll`` calls :meth:`NystromGP.custom_fit`, which runs
:func:`fit_nystrom_gp`:

1. **Hyperparameters** at a cost that does not grow with ``n``. By default
   (``objective="exact"``) they maximise the exact GP marginal likelihood on a
   seeded uniform subsample of at most ``fit_subset_size`` points (``O(s^3)`` per
   evaluation, ``s <= fit_subset_size``). The alternatives were measured in issue 15
   (noisy Hartmann6, ``n = 2,000``): the Titsias bound (VFE) on a sketch
   whose size is capped overestimates the noise (about threefold on a low-noise
   Hartmann6), because its trace term charges the whole Nyström residual to the
   noise; the exact likelihood of a subsample estimates lengthscales and noise
   without that bias. ``objective="vfe"`` / ``"dtc"`` keep the sketch objectives
   (``O(s m^2)``, with ``dictionary_refits`` redraws).
2. **Sketch** at the fitted hyperparameters: BLESS on all ``n`` points within the
   budget ``max_dictionary_size`` (:func:`~botorch_sketch.linalg.bless`), or, with
   a warm start, BKB's posterior-variance resampling of the previous dictionary
   (:meth:`NystromGP.resample_dictionary`).

**State kept between calls.** A model built with ``warm_start=previous.sketch_state()``
(a :class:`SketchState`: hyperparameters, dictionary, fit bookkeeping) starts from
that state. Its hyperparameters are refitted only when a schedule says so
(:func:`refit_due`): when the data grew by the factor ``1 + refit_growth`` since the
last fit, or when the per-point negative log marginal likelihood of the current
data at the previous hyperparameters exceeds the one at the last fit by more than
``refit_tolerance`` nats (the likelihood drifted). A scheduled refit is
warm-started and bounded to ``refit_max_iterations`` L-BFGS-B iterations; a
drift-triggered one right after another also fits from the model's construction
values and keeps the better of the two (a warm chain can lock into a poor basin, see
:func:`_scheduled_refit`). This is what lets a long BoTorch or Ax loop pay a
near-constant cost per call.
"""

from __future__ import annotations

import base64
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
from botorch.exceptions.errors import ModelFittingError
from botorch.fit import _fit_fallback
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood
from gpytorch.mlls import MarginalLogLikelihood
from linear_operator.utils.errors import NotPSDError
from torch import Tensor

from botorch_sketch.models.extra_state import EXTRA_STATE_KEY

if TYPE_CHECKING:
    from botorch_sketch.models.nystrom import NystromGP

logger = logging.getLogger(__name__)

__all__ = [
    "RefitDecision",
    "SketchState",
    "fit_nystrom_gp",
    "hyperparameter_state",
    "refit_due",
]

#: State-dict prefixes that are not hyperparameters: transforms are refitted to
#: the current data by the new model itself.
_NOT_HYPERPARAMETERS = ("outcome_transform.", "input_transform.", EXTRA_STATE_KEY)


@dataclass(frozen=True)
class SketchState:
    r"""What a :class:`NystromGP` carries to the next model of a loop.

    The dictionary is recorded twice: as row indices into the training data of
    the model that produced the state (with a checksum of those rows), which is
    compact and survives when the next model's data extend this one's (BoTorch
    and Ax loops append observations), and, in memory, as the transformed inputs
    themselves, which the next model locates among its own even if the data were
    reordered.

    Attributes:
        hyperparameters: Kernel, mean and likelihood state (no transforms, no
            per-point fixed noise), as in ``state_dict()``.
        dictionary_rows: ``|S|`` training-row indices of the dictionary.
        rows_checksum: Sum of the transformed training inputs at those rows.
        num_fit_points: Number of training points when the hyperparameters were
            last fitted.
        fit_loss: Per-point negative exact log marginal likelihood of the fit
            subsample at that fit (``nan`` if unknown, e.g. a VFE fit).
        num_draws: Random draws made so far (seeds of the next draws).
        sketch_ridge: The ridge the dictionary samples where the budget bound
            (``nan`` otherwise); the next resampling scores at it.
        drift_refits: Consecutive calls, up to this one, that refitted because
            the likelihood drifted (:func:`_scheduled_refit` tries a cold start
            from the second).
        dictionary_inputs: Optional ``batch_shape x (m) x |S| x d`` transformed
            inputs of the dictionary (not in the compact JSON form).
    """

    hyperparameters: Mapping[str, Tensor]
    dictionary_rows: Tensor
    rows_checksum: float
    num_fit_points: int
    fit_loss: float
    num_draws: int
    sketch_ridge: float = math.nan
    drift_refits: int = 0
    dictionary_inputs: Tensor | None = None

    def to_dict(self, compact: bool = True) -> dict[str, Any]:
        r"""A JSON-ready form (lists, numbers and strings), e.g. for Ax.

        Args:
            compact: Store the dictionary as a base64 bit mask over the producing
                model's rows (about ``n / 6`` characters) and leave out its
                inputs.
        """
        rows = self.dictionary_rows.cpu()
        out: dict[str, Any] = {
            "hyperparameters": {
                k: {"shape": list(v.shape), "values": v.reshape(-1).tolist()}
                for k, v in self.hyperparameters.items()
            },
            "dictionary_rows": _rows_to_mask(rows) if compact else rows.tolist(),
            "rows_checksum": float(self.rows_checksum),
            "num_fit_points": int(self.num_fit_points),
            "fit_loss": float(self.fit_loss),
            "num_draws": int(self.num_draws),
            "sketch_ridge": float(self.sketch_ridge),
            "drift_refits": int(self.drift_refits),
        }
        if not compact and self.dictionary_inputs is not None:
            out["dictionary_inputs"] = _tensor_to_dict(self.dictionary_inputs)
        return out

    @classmethod
    def from_dict(
        cls, state: Mapping[str, Any] | SketchState, dtype: torch.dtype = torch.float64
    ) -> SketchState:
        r"""Inverse of :meth:`to_dict` (also accepts a :class:`SketchState`)."""
        if isinstance(state, SketchState):
            return state
        if not isinstance(state, Mapping):
            raise ValueError(
                "warm_start must be a SketchState or its to_dict(), got "
                f"{type(state).__name__}."
            )
        missing = {
            "hyperparameters",
            "dictionary_rows",
            "rows_checksum",
            "num_fit_points",
            "fit_loss",
            "num_draws",
        } - set(state)
        if missing:
            raise ValueError(f"warm_start lacks {sorted(missing)}.")
        rows = state["dictionary_rows"]
        rows = _mask_to_rows(rows) if isinstance(rows, str) else torch.tensor(rows)
        inputs = state.get("dictionary_inputs")
        return cls(
            hyperparameters={
                k: _tensor_from_dict(v, dtype)
                for k, v in state["hyperparameters"].items()
            },
            dictionary_rows=rows.long(),
            rows_checksum=float(state["rows_checksum"]),
            num_fit_points=int(state["num_fit_points"]),
            fit_loss=float(state["fit_loss"]),
            num_draws=int(state["num_draws"]),
            sketch_ridge=float(state.get("sketch_ridge", math.nan)),
            drift_refits=int(state.get("drift_refits", 0)),
            dictionary_inputs=None
            if inputs is None
            else _tensor_from_dict(inputs, dtype),
        )


def _tensor_to_dict(t: Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "values": t.detach().cpu().reshape(-1).tolist()}


def _tensor_from_dict(entry: Any, dtype: torch.dtype) -> Tensor:
    if torch.is_tensor(entry):
        return entry
    return torch.tensor(entry["values"], dtype=dtype).reshape(entry["shape"])


def _rows_to_mask(rows: Tensor) -> str:
    n = int(rows.max()) + 1 if rows.numel() else 0
    mask = np.zeros(n, dtype=bool)
    mask[rows.numpy()] = True
    return f"{n}:" + base64.b64encode(np.packbits(mask).tobytes()).decode("ascii")


def _mask_to_rows(text: str) -> Tensor:
    try:
        n_text, payload = text.split(":", 1)
        bits = np.unpackbits(np.frombuffer(base64.b64decode(payload), dtype=np.uint8))
    except ValueError as err:
        raise ValueError(
            f"warm_start dictionary_rows is not a row mask: {err}"
        ) from err
    return torch.from_numpy(np.flatnonzero(bits[: int(n_text)]).astype(np.int64))


def hyperparameter_state(model: NystromGP) -> dict[str, Tensor]:
    r"""The model's ``state_dict`` restricted to its hyperparameters.

    Drops the transforms (they belong to the data), the dictionary (extra state)
    and the per-point noise of a fixed-noise likelihood.
    """
    state = {
        k: v.detach().clone()
        for k, v in model.state_dict().items()
        if not k.startswith(_NOT_HYPERPARAMETERS)
    }
    if isinstance(model.likelihood, FixedNoiseGaussianLikelihood):
        state = {k: v for k, v in state.items() if not k.startswith("likelihood.")}
    return state


class RefitDecision(NamedTuple):
    r"""What :func:`refit_due` decided: ``cause`` is ``"growth"``, ``"drift"`` or
    ``None`` (keep the warm hyperparameters); ``message`` says why, for the log."""

    cause: str | None
    message: str

    @property
    def due(self) -> bool:
        """Whether to refit (a cause was found)."""
        return self.cause is not None


def refit_due(model: NystromGP, state: SketchState) -> RefitDecision:
    r"""Whether the warm-started hyperparameters must be refitted, and why.

    Due when ``n >= (1 + refit_growth) num_fit_points`` (cause ``"growth"``), or
    when the per-point loss of the current fit subsample at the warm
    hyperparameters exceeds ``state.fit_loss`` by more than ``refit_tolerance``
    (cause ``"drift"``; needs the exact objective). The drift check costs one
    ``O(s^3)`` loss evaluation.
    """
    n = model.num_training_points
    if n >= (1.0 + model.refit_growth) * max(state.num_fit_points, 1):
        return RefitDecision(
            "growth", f"data grew from {state.num_fit_points} to {n} points"
        )
    if model.objective == "exact" and math.isfinite(state.fit_loss):
        loss = subsample_loss(model)
        if loss > state.fit_loss + model.refit_tolerance:
            return RefitDecision(
                "drift", f"likelihood drifted ({state.fit_loss:.4f} -> {loss:.4f})"
            )
    return RefitDecision(None, "warm hyperparameters kept")


def subsample_loss(model: NystromGP) -> float:
    r"""Per-point negative exact log marginal likelihood on the fit subsample."""
    sub = _fit_subsample(model)
    with torch.no_grad():
        return float(sub.exact_loss().sum())


def fit_nystrom_gp(
    model: NystromGP, mll: MarginalLogLikelihood, fit_kwargs: dict[str, Any]
) -> MarginalLogLikelihood:
    r"""Fit ``model`` in place: hyperparameters, then the sketch (module docstring).

    On failure the model is left as it was (hyperparameters and dictionary).

    Args:
        model: The model (``model.warm_start`` decides the schedule).
        mll: The marginal likelihood object the user passed (BoTorch convention).
        fit_kwargs: Keyword arguments for BoTorch's fit routine.

    Returns:
        ``mll``, in evaluation mode.
    """
    warm = model.warm_start
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        drift_refits = 0
        if warm is None:
            loss = _fit_hyperparameters(model, fit_kwargs, max_iterations=None)
            num_fit_points = model.num_training_points
        else:
            initial = hyperparameter_state(model)
            model.load_state_dict(warm.hyperparameters, strict=False)
            model._num_draws = max(model._num_draws, warm.num_draws)
            decision = refit_due(model, warm)
            logger.info("NystromGP warm start: %s.", decision.message)
            if decision.due:
                if decision.cause == "drift":
                    drift_refits = warm.drift_refits + 1
                loss = _scheduled_refit(
                    model, fit_kwargs, initial, cold_restart=drift_refits >= 2
                )
                num_fit_points = model.num_training_points
            else:
                loss, num_fit_points = warm.fit_loss, warm.num_fit_points
        with torch.no_grad():
            model.dictionary_indices = model._initial_dictionary()
    except Exception:
        model.load_state_dict(saved)
        raise
    model._fit_record = (num_fit_points, loss, drift_refits)
    mll.eval()
    return mll


def _scheduled_refit(
    model: NystromGP,
    fit_kwargs: dict[str, Any],
    initial: Mapping[str, Tensor],
    cold_restart: bool,
) -> float:
    r"""A scheduled refit from the warm values; on repeated drift, also cold.

    Both fits are bounded to ``refit_max_iterations`` L-BFGS-B iterations. A warm
    start can lock in: measured on a 5,000-trial Ax run (noisy Hartmann6, issue 15;
    ``benchmarks/results/bbkb_exploration.md``, section 5), warm-started refits held
    three RBF lengthscales at BoTorch's lower bound with a per-point loss of -0.40
    on the fit subsample, where a fit from the default values on the same data
    reached -1.31; the likelihood then drifted at every call, so every call
    refitted. A drift-triggered refit that follows another one
    (``cold_restart``) therefore also fits from the model's values before the
    warm start (its construction values: the cold start of a fit without
    ``warm_start``) and keeps whichever reaches the lower objective
    (:meth:`NystromGP.compute_custom_loss`, priors included) on the fit
    subsample. Not at every drift: tried at every drift on the same run, the
    cold start won 3 of 14 times, by at most 0.012 nats per point, at twice the
    refit's cost (section 6 there). Returns the kept fit's per-point loss
    (priors excluded).
    """
    loss = _fit_hyperparameters(model, fit_kwargs, model.refit_max_iterations)
    if not cold_restart:
        return loss
    warm_fit, warm_objective = hyperparameter_state(model), _objective(model)
    model.load_state_dict(initial, strict=False)
    cold_loss = _fit_hyperparameters(model, fit_kwargs, model.refit_max_iterations)
    cold_objective = _objective(model)
    if cold_objective < warm_objective:
        logger.info(
            "NystromGP refit: the cold start wins (objective %.4f vs %.4f warm).",
            cold_objective,
            warm_objective,
        )
        return cold_loss
    model.load_state_dict(warm_fit, strict=False)
    return loss


def _objective(model: NystromGP) -> float:
    r"""The fit objective on the fit subsample (``inf`` where it is not defined)."""
    sub = _fit_subsample(model)
    try:
        with torch.no_grad():
            value = float(sub.compute_custom_loss(_sub_mll(sub)).sum())
    except NotPSDError:
        return math.inf
    return value if math.isfinite(value) else math.inf


def _fit_hyperparameters(
    model: NystromGP, fit_kwargs: dict[str, Any], max_iterations: int | None
) -> float:
    r"""Fit the hyperparameters on the fit subsample; return its per-point loss.

    ``max_iterations`` bounds L-BFGS-B (a scheduled, warm-started refit: one
    attempt, the warm values kept if it fails).
    """
    sub = _fit_subsample(model)
    kwargs = dict(fit_kwargs)
    if max_iterations is not None:
        optimizer_kwargs = dict(kwargs.get("optimizer_kwargs") or {})
        options = {"maxiter": max_iterations, **optimizer_kwargs.get("options", {})}
        kwargs["optimizer_kwargs"] = {**optimizer_kwargs, "options": options}
        kwargs["max_attempts"] = 1
    sub_mll = _sub_mll(sub)
    try:
        for round_ in range(1 + (model.dictionary_refits if sub.uses_sketch else 0)):
            if round_ > 0:
                with torch.no_grad():
                    sub.dictionary_indices = sub._bless_indices()
            _fit_fallback(mll=sub_mll, **kwargs)
    except ModelFittingError:
        if max_iterations is None:
            raise
        logger.warning("NystromGP: the scheduled refit failed; warm values kept.")
    if sub is not model:
        model.load_state_dict(hyperparameter_state(sub), strict=False)
        model._num_draws = max(model._num_draws, sub._num_draws)
    if not sub.uses_sketch:
        with torch.no_grad():
            return float(sub.exact_loss().sum())
    return math.nan


def _sub_mll(sub: NystromGP) -> MarginalLogLikelihood:
    from gpytorch.mlls import ExactMarginalLogLikelihood

    return ExactMarginalLogLikelihood(sub.likelihood, sub)


def _fit_subsample(model: NystromGP) -> NystromGP:
    r"""The model itself if ``n <= fit_subset_size``, else a seeded subsample copy.

    The subsample is the ``fit_subset_size`` rows with the smallest of the
    model's fixed per-row uniform numbers (:meth:`NystromGP._row_uniforms`): a
    uniform random subset, the same for the drift check and the fit of one call
    and for a reloaded run, and one that changes only by the new rows that enter
    it as the data grow. So the drift check compares the warm hyperparameters on
    nearly the points they were fitted on, plus the new ones.
    """
    n = model.num_training_points
    size = model.fit_subset_size
    if size is None or n <= size:
        return model
    order = torch.argsort(model._row_uniforms(stream=1), stable=True)[:size]
    return model._data_subset(torch.sort(order).values.to(model._train_X.device))
