r"""Fitting a :class:`~botorch_sketch.models.NystromGP`: hyperparameters, then sketch.

``fit_gpytorch_mll`` calls :meth:`~botorch_sketch.models.NystromGP.custom_fit`,
which runs :func:`fit_nystrom_gp` (options: :class:`~botorch_sketch.models.
fit_options.NystromFitOptions`; the model is read through :class:`FittableSketch`):

1. **Hyperparameters** at a cost that does not grow with ``n``. By default
   (``objective="exact"``) they maximise the exact GP marginal likelihood on a
   seeded uniform subsample of at most ``fit_subset_size`` points (``O(s^3)`` per
   evaluation, ``s <= fit_subset_size``; by default the size the device affords,
   :func:`fit_subset_size`). The Titsias bound (VFE) of a sketch
   whose size is capped charges the whole Nyström residual to the noise and so
   overestimates it; the exact likelihood of a subsample has no such bias.
   ``objective="vfe"`` / ``"dtc"`` keep the sketch objectives (``O(s m^2)``, with
   ``dictionary_refits`` redraws).
   Where the subsample is smaller than the data and the device affords it, the
   subsample's optimum is refined by ``refine_iterations`` L-BFGS-B steps of the
   exact likelihood on all ``n`` points (:func:`refine_iterations`; by default on
   a GPU up to about 19,000 points, never on a CPU).
2. **Sketch** at the fitted hyperparameters: BLESS on all ``n`` points within the
   budget ``max_dictionary_size`` (:func:`~botorch_sketch.linalg.bless`), or, with
   a warm start, BKB's posterior-variance resampling of the previous dictionary
   (:meth:`~botorch_sketch.models.NystromGP.resample_dictionary`).

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

import logging
import math
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import torch
from botorch.exceptions.errors import ModelFittingError
from botorch.fit import _fit_fallback
from gpytorch.likelihoods import Likelihood
from gpytorch.mlls import ExactMarginalLogLikelihood, MarginalLogLikelihood
from gpytorch.priors import LogNormalPrior, Prior
from linear_operator.utils.errors import NotPSDError
from torch import Tensor

from botorch_sketch import linalg
from botorch_sketch.models.budget import (
    device_facts,
    device_fit_subset_size,
    device_refine_iterations,
)
from botorch_sketch.models.fit_options import DEVICE_SUBSET, NystromFitOptions
from botorch_sketch.models.rbf_gram import training_gram
from botorch_sketch.models.sketch_state import SketchState, hyperparameter_state

logger = logging.getLogger(__name__)

#: L-BFGS-B ``ftol`` of the refinement on every point: it stops once a step
#: lowers the per-point loss by less than this fraction, so a subsample optimum
#: that is already the full data's costs a step or two.
REFINE_TOLERANCE = 1e-3

__all__ = [
    "FittableSketch",
    "REFINE_TOLERANCE",
    "RefitDecision",
    "SketchState",
    "custom_loss",
    "exact_loss",
    "fit_nystrom_gp",
    "fit_subset_size",
    "hyperparameter_state",
    "log_prior",
    "refine_iterations",
    "refit_due",
]


class FittableSketch(Protocol):
    r"""What the fit reads from and does to a model (public names only)."""

    likelihood: Likelihood
    fit_options: NystromFitOptions
    warm_start: SketchState | None
    num_draws: int
    fit_record: tuple[int, float, int] | None
    dictionary_indices: Tensor

    @property
    def num_training_points(self) -> int:
        """The model's ``num_training_points``."""

    @property
    def uses_sketch(self) -> bool:
        """The model's ``uses_sketch``."""

    @property
    def compute_inputs(self) -> Tensor:
        """The model's ``compute_inputs``."""

    def state_dict(self) -> dict[str, Any]:
        """The model's ``state_dict``."""

    def load_state_dict(self, state_dict: Any, strict: bool = True) -> Any:
        """The model's ``load_state_dict``."""

    @property
    def compute_targets(self) -> Tensor:
        """The model's transformed targets in its compute dtype."""

    @property
    def inducing_points(self) -> Tensor:
        """The model's dictionary points (transformed inputs)."""

    @property
    def covar_module(self) -> Any:
        """The model's kernel."""

    @property
    def mean_module(self) -> Any:
        """The model's prior mean."""

    def training_noise(self) -> Tensor:
        """The model's noise variances at its training points."""

    def named_priors(self) -> Any:
        """The model's priors (gpytorch)."""

    def exact_loss(self) -> Tensor:
        """The model's ``exact_loss``."""

    def compute_custom_loss(self, mll: MarginalLogLikelihood) -> Tensor:
        """The model's ``compute_custom_loss``."""

    def initial_dictionary(self) -> Tensor:
        """The model's ``initial_dictionary``."""

    def draw_fresh_dictionary(self) -> Tensor:
        """The model's ``draw_fresh_dictionary``."""

    def row_uniforms(self, stream: int = 0) -> Tensor:
        """The model's ``row_uniforms``."""

    def data_subset(self, idx: Tensor) -> FittableSketch:
        """The model's ``data_subset``."""


def exact_loss(model: FittableSketch) -> Tensor:
    r"""Negative exact log marginal likelihood per point, ``batch_shape x (m)``.

    ``-log N(y | m(X), K + N) / n`` on the model's training data, ``O(n^3)``.
    Priors are not included. ``K`` is formed by
    :func:`~botorch_sketch.models.rbf_gram.training_gram` (RBF kernels: the
    lengthscale gradient in closed form).
    """
    X = model.compute_inputs
    K = training_gram(model.covar_module, X)
    r = model.compute_targets - model.mean_module(X)
    try:
        ll = linalg.exact_log_marginal_likelihood(K, r, model.training_noise())
    except torch.linalg.LinAlgError as err:
        # A line-search step into a degenerate region: BoTorch's fit loop
        # retries on NotPSDError.
        raise NotPSDError(f"NystromGP loss: {err}") from err
    return -ll / r.shape[-1]


def custom_loss(model: FittableSketch) -> Tensor:
    r"""The hyperparameter objective, negated, plus log priors, over ``n``.

    ``objective="exact"``: :func:`exact_loss`. ``"vfe"`` / ``"dtc"``: Titsias'
    collapsed bound or the DTC likelihood of the sketch, with the Cholesky form
    of the Nyström features (:func:`~botorch_sketch.linalg.cholesky_features`,
    stable gradients), ``O(n m^2)`` time, ``O(n m)`` memory. Normalised like
    ``ExactMarginalLogLikelihood`` (divided by ``n``) and, like it, one value per
    member of the output-augmented batch (``batch_shape x (m)``).
    """
    Y = model.compute_targets
    n = Y.shape[-1]
    objective = model.fit_options.objective
    if objective == "exact":
        loss = model.exact_loss()
    else:
        X, S = model.compute_inputs, model.inducing_points
        kernel = model.covar_module
        kdiag = kernel(X, diag=True) if objective == "vfe" else None
        try:
            Z = linalg.cholesky_features(kernel(X, S).to_dense(), kernel(S).to_dense())
            ll = linalg.dtc_log_marginal_likelihood(
                Z, Y - model.mean_module(X), model.training_noise(), kdiag=kdiag
            )
        except torch.linalg.LinAlgError as err:
            raise NotPSDError(f"NystromGP loss: {err}") from err
        loss = -ll / n
    # Priors per batch member, reduced over their trailing (event) dimensions
    # as ``ExactMarginalLogLikelihood`` does.
    for _, module, prior, closure, _ in model.named_priors():
        term = log_prior(prior, closure(module))
        loss = loss - term.reshape(*term.shape[: loss.dim()], -1).sum(-1) / n
    return loss


def log_prior(prior: Prior, value: Tensor) -> Tensor:
    r"""``prior.log_prob(value)``; for gpytorch's ``LogNormalPrior`` (the prior of
    BoTorch's default lengthscales and noise) in closed form,

        log p(x) = -(log x - mu)^2 / (2 s^2) - log s - log(2 pi) / 2 - log x,

    the density torch's ``LogNormal`` evaluates through a transformed
    distribution and its argument checks, at every likelihood evaluation of a
    fit. Values outside the support (``x <= 0``) take ``prior.log_prob``, which
    rejects them as before."""
    if type(prior) is not LogNormalPrior:
        return prior.log_prob(value)
    x = prior.transform(value)
    if not bool((x > 0).all()):
        return prior.log_prob(value)
    log_x = x.log()
    z = (log_x - prior.loc) / prior.scale
    return -0.5 * z.square() - prior.scale.log() - _HALF_LOG_2PI - log_x


_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class RefitDecision(NamedTuple):
    r"""What :func:`refit_due` decided: ``cause`` is ``"growth"``, ``"drift"`` or
    ``None`` (keep the warm hyperparameters); ``message`` says why, for the log."""

    cause: str | None
    message: str

    @property
    def due(self) -> bool:
        """Whether to refit (a cause was found)."""
        return self.cause is not None


def refit_due(model: FittableSketch, state: SketchState) -> RefitDecision:
    r"""Whether the warm-started hyperparameters must be refitted, and why.

    Due when ``n >= (1 + refit_growth) num_fit_points`` (cause ``"growth"``), or
    when the per-point loss of the current fit subsample at the warm
    hyperparameters exceeds ``state.fit_loss`` by more than ``refit_tolerance``
    (cause ``"drift"``; needs the exact objective, and none with
    ``refit_tolerance=None``). The drift check costs one ``O(s^3)`` loss
    evaluation.
    """
    n = model.num_training_points
    if n >= (1.0 + model.fit_options.refit_growth) * max(state.num_fit_points, 1):
        return RefitDecision(
            "growth", f"data grew from {state.num_fit_points} to {n} points"
        )
    tolerance = model.fit_options.refit_tolerance
    checked = tolerance is not None and model.fit_options.objective == "exact"
    if checked and math.isfinite(state.fit_loss):
        loss = subsample_loss(model)
        if loss > state.fit_loss + tolerance:
            return RefitDecision(
                "drift", f"likelihood drifted ({state.fit_loss:.4f} -> {loss:.4f})"
            )
    return RefitDecision(None, "warm hyperparameters kept")


def subsample_loss(model: FittableSketch) -> float:
    r"""Per-point negative exact log marginal likelihood on the fit subsample."""
    sub = _fit_subsample(model)
    with torch.no_grad():
        return float(sub.exact_loss().sum())


def fit_nystrom_gp(
    model: FittableSketch, mll: MarginalLogLikelihood, fit_kwargs: dict[str, Any]
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
            loss = _fit_hyperparameters(
                model, fit_kwargs, model.fit_options.fit_max_iterations, scheduled=False
            )
            num_fit_points = model.num_training_points
        else:
            initial = hyperparameter_state(model)
            model.load_state_dict(warm.hyperparameters, strict=False)
            model.num_draws = max(model.num_draws, warm.num_draws)
            decision = refit_due(model, warm)
            logger.info("FittableSketch warm start: %s.", decision.message)
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
            model.dictionary_indices = model.initial_dictionary()
    except Exception:
        model.load_state_dict(saved)
        raise
    model.fit_record = (num_fit_points, loss, drift_refits)
    mll.eval()
    return mll


def _scheduled_refit(
    model: FittableSketch,
    fit_kwargs: dict[str, Any],
    initial: Mapping[str, Tensor],
    cold_restart: bool,
) -> float:
    r"""A scheduled refit from the warm values; on repeated drift, also cold.

    Both fits are bounded to ``refit_max_iterations`` L-BFGS-B iterations. A warm
    chain of refits can lock into a poor basin (lengthscales held at a bound, the
    likelihood then drifting at every call). A drift-triggered refit that follows
    another one (``cold_restart``) therefore also fits from the model's values
    before the warm start (its construction values) and keeps whichever reaches
    the lower objective (:meth:`~botorch_sketch.models.NystromGP.
    compute_custom_loss`, priors included) on the fit subsample; not at every
    drift, where the cold start rarely wins and doubles the cost. Returns the
    kept fit's per-point loss (priors excluded).
    """
    max_iterations = model.fit_options.refit_max_iterations
    loss = _fit_hyperparameters(model, fit_kwargs, max_iterations, scheduled=True)
    if not cold_restart:
        return loss
    warm_fit, warm_objective = hyperparameter_state(model), _objective(model)
    model.load_state_dict(initial, strict=False)
    cold_loss = _fit_hyperparameters(model, fit_kwargs, max_iterations, scheduled=True)
    cold_objective = _objective(model)
    if cold_objective < warm_objective:
        logger.info(
            "FittableSketch refit: the cold start wins (objective %.4f vs %.4f warm).",
            cold_objective,
            warm_objective,
        )
        return cold_loss
    model.load_state_dict(warm_fit, strict=False)
    return loss


def _objective(model: FittableSketch) -> float:
    r"""The fit objective on the fit subsample (``inf`` where it is not defined)."""
    sub = _fit_subsample(model)
    try:
        with torch.no_grad():
            value = float(sub.compute_custom_loss(_sub_mll(sub)).sum())
    except NotPSDError:
        return math.inf
    return value if math.isfinite(value) else math.inf


def _fit_hyperparameters(
    model: FittableSketch,
    fit_kwargs: dict[str, Any],
    max_iterations: int | None,
    scheduled: bool,
) -> float:
    r"""Fit the hyperparameters on the fit subsample; return its per-point loss.

    ``max_iterations`` bounds L-BFGS-B and the fit options' ``fit_tolerance`` is
    its ``ftol`` (unless ``fit_kwargs`` set ``maxiter`` / ``ftol`` themselves).
    A ``scheduled`` (warm-started) refit makes one attempt and keeps the warm
    values if it fails; a first fit raises.
    """
    sub = _fit_subsample(model)
    kwargs = dict(fit_kwargs)
    ours = {}
    if max_iterations is not None:
        ours["maxiter"] = max_iterations
    if model.fit_options.fit_tolerance is not None:
        ours["ftol"] = model.fit_options.fit_tolerance
    if ours:
        kwargs = _with_lbfgs_options(kwargs, ours)
    if scheduled:
        kwargs["max_attempts"] = 1
    sub_mll = _sub_mll(sub)
    try:
        refits = model.fit_options.dictionary_refits if sub.uses_sketch else 0
        for round_ in range(1 + refits):
            if round_ > 0:
                with torch.no_grad():
                    sub.dictionary_indices = sub.draw_fresh_dictionary()
            _fit_fallback(mll=sub_mll, **kwargs)
    except ModelFittingError:
        if not scheduled:
            raise
        logger.warning("FittableSketch: the scheduled refit failed; warm values kept.")
    if sub is not model:
        model.load_state_dict(hyperparameter_state(sub), strict=False)
        model.num_draws = max(model.num_draws, sub.num_draws)
        if _refine(model, fit_kwargs):
            sub.load_state_dict(hyperparameter_state(model), strict=False)
    if not sub.uses_sketch:
        with torch.no_grad():
            return float(sub.exact_loss().sum())
    return math.nan


def _with_lbfgs_options(
    fit_kwargs: dict[str, Any],
    defaults: Mapping[str, Any],
    forced: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    r"""``fit_kwargs`` with L-BFGS-B ``options``: ``defaults`` under the caller's
    own ``optimizer_kwargs["options"]``, ``forced`` over them."""
    kwargs = dict(fit_kwargs)
    optimizer_kwargs = dict(kwargs.get("optimizer_kwargs") or {})
    options = {**defaults, **optimizer_kwargs.get("options", {}), **(forced or {})}
    kwargs["optimizer_kwargs"] = {**optimizer_kwargs, "options": options}
    return kwargs


def _refine(model: FittableSketch, fit_kwargs: dict[str, Any]) -> bool:
    r"""Refine the subsample's fit on every point (:func:`refine_iterations`
    steps, ``ftol`` :data:`REFINE_TOLERANCE` unless ``fit_kwargs`` set one;
    ``fit_kwargs`` are the caller's, without the subsample fit's
    ``fit_tolerance`` and iteration bound); ``True`` if it ran. A failed
    refinement keeps the subsample's values (BoTorch's fit loop rolls back) and
    logs a warning."""
    iterations = refine_iterations(model)
    if iterations == 0:
        return False
    kwargs = _with_lbfgs_options(
        fit_kwargs, {"ftol": REFINE_TOLERANCE}, {"maxiter": iterations}
    )
    kwargs["max_attempts"] = 1
    try:
        _fit_fallback(mll=_sub_mll(model), **kwargs)
    except ModelFittingError:
        logger.warning("NystromGP: the refinement on every point failed; kept.")
        return False
    logger.info(
        "NystromGP fit: refined on all %d points (%d L-BFGS-B iterations).",
        model.num_training_points,
        iterations,
    )
    return True


def refine_iterations(model: FittableSketch) -> int:
    r"""L-BFGS-B iterations of the refinement on every point:
    ``refine_iterations`` resolved (``"device"``:
    :func:`~botorch_sketch.models.budget.device_refine_iterations` for the
    model's data), 0 with a sketch objective or where the fit subsample is
    every point."""
    n = model.num_training_points
    if model.fit_options.uses_sketch or fit_subset_size(model) >= n:
        return 0
    iterations = model.fit_options.refine_iterations
    if iterations == DEVICE_SUBSET:
        X = model.compute_inputs
        return device_refine_iterations(device_facts(X.device, X.dtype), n)
    return iterations


def _sub_mll(sub: FittableSketch) -> MarginalLogLikelihood:
    return ExactMarginalLogLikelihood(sub.likelihood, sub)


def fit_subset_size(model: FittableSketch) -> int:
    r"""The size of the model's fit subsample: ``fit_subset_size`` resolved.

    ``None`` is every point; ``"device"`` the device's
    :func:`~botorch_sketch.models.budget.device_fit_subset_size` for the
    model's data (device and dtype of its training inputs); at most ``n``.
    """
    n = model.num_training_points
    size = model.fit_options.fit_subset_size
    if size == DEVICE_SUBSET:
        X = model.compute_inputs
        return device_fit_subset_size(device_facts(X.device, X.dtype), n)
    return n if size is None else min(n, size)


def _fit_subsample(model: FittableSketch) -> FittableSketch:
    r"""The model itself if ``n <= fit_subset_size``, else a seeded subsample copy.

    The subsample is the ``fit_subset_size`` rows with the smallest of the
    model's fixed per-row uniform numbers (:meth:`~botorch_sketch.models.NystromGP.
    row_uniforms`): a
    uniform random subset, the same for the drift check and the fit of one call
    and for a reloaded run, and one that changes only by the new rows that enter
    it as the data grow. So the drift check compares the warm hyperparameters on
    nearly the points they were fitted on, plus the new ones.
    """
    n = model.num_training_points
    size = fit_subset_size(model)
    if n <= size:
        return model
    order = torch.argsort(model.row_uniforms(stream=1), stable=True)[:size]
    return model.data_subset(torch.sort(order).values.to(model.compute_inputs.device))
