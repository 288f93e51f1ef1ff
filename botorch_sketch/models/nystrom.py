r"""``NystromGP``: a DTC/Nyström sparse GP with a budgeted leverage-score dictionary.

This is the surrogate of BKB (Calandriello, Carratino, Lazaric, Valko & Rosasco,
"Gaussian process optimization with adaptive sketching: scalable and no regret",
COLT 2019) and BBKB (Calandriello et al., ICML 2020) as a BoTorch model.

Posterior (BBKB Eqs. 1-3, in GP units, see :mod:`botorch_sketch.linalg`): with a
dictionary ``S`` of training points, ``z(x) = K_S^{+1/2} k_S(x)``, ``Z`` the embedded
training inputs and ``A = I + Z^T N^{-1} Z``,

    mean(x)    = m(x) + z(x)^T A^{-1} Z^T N^{-1} (y - m(X))
    cov(x, x') = k(x, x') - z(x)^T z(x') + z(x)^T A^{-1} z(x').

This is the DTC predictive. It keeps the exact prior ``k(x, x')`` on test points,
so the variance does not collapse away from the dictionary (unlike SoR; unlike
FITC it does not alter the training covariance). With every training point in
``S`` it equals the exact GP.

Cost: ``O(n m^2 + m^3)`` for the posterior caches, ``O(n m)`` memory, ``O(q m + q^2)``
per batch of ``q`` test points after caching; marginal variances of ``q`` points
cost ``O(q m r)``, no ``q x q`` matrix is formed.

The model joins its pieces, each its own module: the dictionary policy
(:mod:`~botorch_sketch.models.dictionary_policy`), the fit options and fit
(:mod:`~botorch_sketch.models.fit_options`, :mod:`~botorch_sketch.models.nystrom_fit`),
the constructor's inputs (:mod:`~botorch_sketch.models.nystrom_inputs`), and
its bases: the stored data (:mod:`~botorch_sketch.models.sketch_data`), the
dictionary draws (:mod:`~botorch_sketch.models.sketch_dictionary`), the DTC
posterior (:mod:`~botorch_sketch.models.dtc_posterior`, operators in
:mod:`~botorch_sketch.models.nystrom_posterior`), conditioning and fantasies
(:mod:`~botorch_sketch.models.dtc_conditioning`) and the saved state and warm
start (:mod:`~botorch_sketch.models.model_state`,
:mod:`~botorch_sketch.models.sketch_state`).
"""

from __future__ import annotations

from typing import Any

import torch
from botorch.models.gpytorch import BatchedMultiOutputGPyTorchModel
from botorch.models.model import FantasizeMixin
from botorch.models.transforms.input import InputTransform
from botorch.models.transforms.outcome import OutcomeTransform, Standardize
from botorch.utils.types import DEFAULT, _DefaultType
from gpytorch.likelihoods import Likelihood
from gpytorch.means import Mean
from gpytorch.mlls import MarginalLogLikelihood
from gpytorch.models import GP
from gpytorch.module import Module
from torch import Tensor

from botorch_sketch.models.dictionary_policy import (
    DEFAULT_EXACT_MAX_N,
    DEFAULT_MAX_DICTIONARY_SIZE,
    DictionaryPolicy,
)
from botorch_sketch.models.dtc_conditioning import DTCConditioningMixin
from botorch_sketch.models.dtc_posterior import DTCParts, DTCPosteriorMixin
from botorch_sketch.models.fit_options import (
    DEFAULT_FIT_SUBSET_SIZE,
    OBJECTIVES,
    NystromFitOptions,
)
from botorch_sketch.models.model_state import SketchModelStateMixin
from botorch_sketch.models.nystrom_dictionary import EXACT_FRACTION, ROW_UNIFORM_BLOCK
from botorch_sketch.models.nystrom_fit import custom_loss, exact_loss, fit_nystrom_gp
from botorch_sketch.models.nystrom_inputs import (
    FIT_OPTION_DEFAULTS,
    POLICY_OPTION_DEFAULTS,
    check_input_transform,
    default_modules,
    dictionary_spec,
    option_property,
    options_objects,
    usable_warm_start,
)
from botorch_sketch.models.nystrom_posterior import LAZY_COVARIANCE_MIN_POINTS
from botorch_sketch.models.options import ModelOptionsMixin
from botorch_sketch.models.sketch_data import SketchDataMixin
from botorch_sketch.models.sketch_dictionary import SketchDictionaryMixin
from botorch_sketch.models.sketch_state import SketchState
from botorch_sketch.models.validation import validate_training_data

#: Dtype the model is built in. Afterwards it computes in the dtype of its training
#: data buffers, which ``.to(dtype)`` changes like every other tensor of the model.
_DEFAULT_DTYPE = torch.float64

__all__ = [
    "DEFAULT_EXACT_MAX_N",
    "DEFAULT_FIT_SUBSET_SIZE",
    "DEFAULT_MAX_DICTIONARY_SIZE",
    "EXACT_FRACTION",
    "LAZY_COVARIANCE_MIN_POINTS",
    "OBJECTIVES",
    "ROW_UNIFORM_BLOCK",
    "DTCParts",
    "NystromGP",
]


class NystromGP(
    ModelOptionsMixin,
    SketchDataMixin,
    SketchModelStateMixin,
    SketchDictionaryMixin,
    DTCConditioningMixin,
    DTCPosteriorMixin,
    BatchedMultiOutputGPyTorchModel,
    GP,
    FantasizeMixin,
):
    r"""DTC/Nyström sparse GP whose dictionary is drawn by posterior-variance sampling.

    A drop-in replacement for ``SingleTaskGP`` at large ``n``: same constructor
    arguments, same default kernel, likelihood, priors and outcome transform, the
    same batched multi-output layout, and every BoTorch acquisition function works
    (the posterior is a ``GPyTorchPosterior`` over the joint DTC covariance,
    ``condition_on_observations`` and ``fantasize`` are exact DTC updates).

    Two objects make its choices: the ``dictionary_policy`` (which points form
    the dictionary: :class:`~botorch_sketch.models.dictionary_policy.
    LeverageScorePolicy` by default) and the ``fit_options``
    (:class:`~botorch_sketch.models.fit_options.NystromFitOptions`). Their fields
    are also accepted as flat keyword arguments, which build the default objects.

    Fitting: ``fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))``
    runs :meth:`custom_fit` (:func:`~botorch_sketch.models.nystrom_fit.
    fit_nystrom_gp`). In a loop, pass the previous model's :meth:`sketch_state`
    as ``warm_start``: hyperparameters and dictionary are then kept and updated.

    Attributes:
        sketch_ridge: The ridge whose leverage scores the dictionary samples (the
            noise variance, or larger where the budget bound); ``None`` for an
            exact (every point) or user-given dictionary.
        dictionary_capped: Whether the budget bound at the last draw.
        num_draws: Random draws made so far (numbers the seeds of the next).
        fit_record: ``(num_fit_points, fit_loss, drift_refits)`` of the last fit.

    Example:
        >>> model = NystromGP(train_X, train_Y, seed=0)
        >>> mll = ExactMarginalLogLikelihood(model.likelihood, model)
        >>> fit_gpytorch_mll(mll)
        >>> posterior = model.posterior(test_X)
        >>> next_model = NystromGP(X_all, Y_all, warm_start=model.sketch_state())
    """

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        train_Yvar: Tensor | None = None,
        likelihood: Likelihood | None = None,
        covar_module: Module | None = None,
        mean_module: Mean | None = None,
        outcome_transform: OutcomeTransform | _DefaultType | None = DEFAULT,
        input_transform: InputTransform | None = None,
        q_bar: float = POLICY_OPTION_DEFAULTS["q_bar"],
        dictionary: Tensor | str | None = None,
        dictionary_refits: int = FIT_OPTION_DEFAULTS["dictionary_refits"],
        fit_subset_size: int | None = DEFAULT_FIT_SUBSET_SIZE,
        objective: str = FIT_OPTION_DEFAULTS["objective"],
        max_dictionary_size: int | None = DEFAULT_MAX_DICTIONARY_SIZE,
        seed: int | None = None,
        memory_budget_gb: float | None = None,
        exact_max_n: int = DEFAULT_EXACT_MAX_N,
        exact_window: str = POLICY_OPTION_DEFAULTS["exact_window"],
        warm_start: SketchState | dict[str, Any] | None = None,
        refit_growth: float = FIT_OPTION_DEFAULTS["refit_growth"],
        refit_tolerance: float | None = FIT_OPTION_DEFAULTS["refit_tolerance"],
        refit_max_iterations: int = FIT_OPTION_DEFAULTS["refit_max_iterations"],
        fit_max_iterations: int | None = FIT_OPTION_DEFAULTS["fit_max_iterations"],
        fit_tolerance: float | None = FIT_OPTION_DEFAULTS["fit_tolerance"],
        refine_iterations: int | str = FIT_OPTION_DEFAULTS["refine_iterations"],
        dictionary_policy: DictionaryPolicy | None = None,
        fit_options: NystromFitOptions | None = None,
    ) -> None:
        r"""Build the model.

        Args:
            train_X: ``batch_shape x n x d`` training inputs.
            train_Y: ``batch_shape x n x m`` training targets.
            train_Yvar: Optional ``batch_shape x n x m`` observed noise variances
                (``>= 0``); if given, a ``FixedNoiseGaussianLikelihood`` is used.
            likelihood: A Gaussian likelihood (default: as ``SingleTaskGP``).
            covar_module: Kernel (default: RBF with dimension-scaled priors).
            mean_module: Mean (default: ``ConstantMean``).
            outcome_transform: Defaults to ``Standardize(m)``; ``None`` disables.
            input_transform: An input transform without trainable parameters
                (e.g. ``Normalize``).
            q_bar, max_dictionary_size, seed, memory_budget_gb, exact_max_n,
                exact_window: The fields of the default :class:`~botorch_sketch.models.
                dictionary_policy.LeverageScorePolicy` (not with
                ``dictionary_policy``).
            dictionary: ``None`` (drawn by the policy when first needed, i.e. at
                the fitted hyperparameters after ``fit_gpytorch_mll``), ``"all"``
                (every point: the exact GP) or a ``LongTensor`` of training
                indices.
            dictionary_refits, fit_subset_size, objective, refit_growth,
                refit_tolerance, refit_max_iterations, fit_max_iterations,
                fit_tolerance, refine_iterations: The
                fields of the default
                :class:`~botorch_sketch.models.fit_options.NystromFitOptions`
                (not with ``fit_options``).
            warm_start: A previous model's :meth:`sketch_state` (or its
                ``to_dict()``). A state with non-finite numbers is discarded
                with a warning.
            dictionary_policy: The dictionary policy.
            fit_options: The fit options.
        """
        validate_training_data(train_X, train_Y, train_Yvar)
        policy, options = options_objects(
            dictionary_policy,
            fit_options,
            q_bar=q_bar,
            max_dictionary_size=max_dictionary_size,
            memory_budget_gb=memory_budget_gb,
            exact_max_n=exact_max_n,
            exact_window=exact_window,
            seed=seed,
            fit_subset_size=fit_subset_size,
            objective=objective,
            dictionary_refits=dictionary_refits,
            refit_growth=refit_growth,
            refit_tolerance=refit_tolerance,
            refit_max_iterations=refit_max_iterations,
            fit_max_iterations=fit_max_iterations,
            fit_tolerance=fit_tolerance,
            refine_iterations=refine_iterations,
        )
        check_input_transform(input_transform)
        warm_start = usable_warm_start(warm_start, train_X.shape[-2])
        spec, dictionary_idx = dictionary_spec(dictionary, train_X.shape[-2])
        data_dtype = train_X.dtype
        train_X = train_X.to(_DEFAULT_DTYPE)
        train_Y = train_Y.to(_DEFAULT_DTYPE)
        if train_Yvar is not None:
            train_Yvar = train_Yvar.to(_DEFAULT_DTYPE)
        super().__init__()
        if outcome_transform == DEFAULT:
            outcome_transform = Standardize(
                m=train_Y.shape[-1], batch_shape=train_X.shape[:-2]
            )
        with torch.no_grad():
            transformed_X = self.transform_inputs(
                train_X, input_transform=input_transform
            )
        if outcome_transform is not None:
            outcome_transform.train()
            train_Y, train_Yvar = outcome_transform(
                Y=train_Y, Yvar=train_Yvar, X=transformed_X
            )
        self._validate_tensor_args(X=transformed_X, Y=train_Y, Yvar=train_Yvar)
        self._set_dimensions(train_X=train_X, train_Y=train_Y)
        X_b, Y_b, Yvar_b = self._transform_tensor_args(
            X=transformed_X, Y=train_Y, Yvar=train_Yvar
        )
        self.register_buffer("_train_X", X_b.detach().clone(), persistent=False)
        self.register_buffer("_train_Y", Y_b.detach().clone(), persistent=False)
        self._original_train_inputs = train_X.detach().clone()
        self.likelihood, self.mean_module, self.covar_module, subset_batch_dict = (
            default_modules(
                self._aug_batch_shape,
                X_b.shape[-1],
                Yvar_b,
                likelihood,
                mean_module,
                covar_module,
            )
        )
        if subset_batch_dict is not None:
            self._subset_batch_dict = subset_batch_dict
        if outcome_transform is not None:
            self.outcome_transform = outcome_transform
        if input_transform is not None:
            self.input_transform = input_transform
        self.dictionary_policy: DictionaryPolicy = policy
        self.fit_options: NystromFitOptions = options
        self.warm_start = warm_start
        self.sketch_ridge: float | None = None
        self.dictionary_capped = False
        self.drawn_cap: int | None = None
        self.nystrom_residual: float | None = None
        self.exact_reason: str | None = None
        self.fit_record: tuple[int, float, int] | None = None
        self.num_draws = 0 if warm_start is None else warm_start.num_draws
        self._cache: dict[str, Any] | None = None
        self._embedding_memo: tuple[Any, tuple[Tensor, Tensor, Tensor]] | None = None
        self.to(dtype=_DEFAULT_DTYPE, device=train_X.device)
        self._data_dtype = data_dtype
        self._dictionary_spec = spec
        if dictionary_idx is not None:
            dictionary_idx = dictionary_idx.to(train_X.device)
        self.register_buffer("_dictionary_indices", dictionary_idx, persistent=False)

    q_bar = option_property("dictionary_policy", "q_bar")
    max_dictionary_size = option_property("dictionary_policy", "max_dictionary_size")
    memory_budget_gb = option_property("dictionary_policy", "memory_budget_gb")
    exact_max_n = option_property("dictionary_policy", "exact_max_n")
    exact_window = option_property("dictionary_policy", "exact_window")
    seed = option_property("dictionary_policy", "seed")
    fit_subset_size = option_property("fit_options", "fit_subset_size")
    objective = option_property("fit_options", "objective")
    dictionary_refits = option_property("fit_options", "dictionary_refits")
    refit_growth = option_property("fit_options", "refit_growth")
    refit_tolerance = option_property("fit_options", "refit_tolerance")
    refit_max_iterations = option_property("fit_options", "refit_max_iterations")
    fit_max_iterations = option_property("fit_options", "fit_max_iterations")
    fit_tolerance = option_property("fit_options", "fit_tolerance")
    refine_iterations = option_property("fit_options", "refine_iterations")

    @property
    def _num_draws(self) -> int:
        return self.num_draws

    @_num_draws.setter
    def _num_draws(self, value: int) -> None:
        self.num_draws = value

    @property
    def uses_sketch(self) -> bool:
        r"""Whether the hyperparameter objective is a sketch objective (VFE/DTC)."""
        return self.fit_options.uses_sketch

    def exact_loss(self) -> Tensor:
        r"""Negative exact log marginal likelihood per point, ``batch_shape x (m)``.

        :func:`~botorch_sketch.models.nystrom_fit.exact_loss`, ``O(n^3)``: meant
        for the fit subsample. Priors are not included.
        """
        return exact_loss(self)

    def compute_custom_loss(self, mll: MarginalLogLikelihood, **kwargs: Any) -> Tensor:
        r"""The hyperparameter objective, negated, plus log priors, over ``n``.

        :func:`~botorch_sketch.models.nystrom_fit.custom_loss`; picked up by
        BoTorch's loss closure, so ``fit_gpytorch_mll`` optimises it.

        Returns:
            A ``batch_shape x (m)`` tensor (a scalar for an unbatched one-output
            model).
        """
        return custom_loss(self)

    def custom_fit(
        self,
        mll: MarginalLogLikelihood,
        closure: Any = None,
        closure_kwargs: dict[str, Any] | None = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> MarginalLogLikelihood:
        r"""Fit the hyperparameters, then draw the sketch (``fit_gpytorch_mll``).

        See :func:`~botorch_sketch.models.nystrom_fit.fit_nystrom_gp`: the
        hyperparameters on a subsample of at most ``fit_subset_size`` points (or
        warm-started and refitted on a schedule), then the dictionary on all
        points at the fitted hyperparameters, within the budget. Extra keyword
        arguments go to BoTorch's fit routine. On failure the model is left as it
        was before the call.
        """
        fit_kwargs = dict(
            closure=closure,
            closure_kwargs=closure_kwargs,
            optimizer_kwargs=optimizer_kwargs,
            **kwargs,
        )
        try:
            return fit_nystrom_gp(self, mll, fit_kwargs)
        finally:
            self._cache = None
