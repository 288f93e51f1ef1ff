r"""The constructor inputs of a :class:`~botorch_sketch.models.NystromGP`, checked.

Small pure functions that turn ``NystromGP``'s keyword arguments into the
objects the model holds: its dictionary policy and fit options (from the flat
keywords, whose defaults are those of the two dataclasses), ``SingleTaskGP``'s
default modules, the dictionary specification, and a usable warm start. Each
raises a ``ValueError``/``TypeError`` naming the argument before the model
changes.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.models.transforms.input import InputTransform
from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
    get_gaussian_likelihood_with_lognormal_prior,
)
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood, Likelihood
from gpytorch.means import ConstantMean, Mean
from gpytorch.module import Module
from torch import Tensor

from botorch_sketch.models.dictionary_policy import (
    DictionaryPolicy,
    LeverageScorePolicy,
)
from botorch_sketch.models.fit_options import NystromFitOptions
from botorch_sketch.models.nystrom_dictionary import validate_indices
from botorch_sketch.models.sketch_state import SketchState

__all__ = [
    "FIT_OPTION_DEFAULTS",
    "POLICY_OPTION_DEFAULTS",
    "check_input_transform",
    "default_modules",
    "dictionary_spec",
    "option_property",
    "options_objects",
    "usable_warm_start",
]


def _field_defaults(cls: type, names: tuple[str, ...]) -> dict[str, Any]:
    defaults = {f.name: f.default for f in fields(cls)}
    return {name: defaults[name] for name in names}


#: The flat constructor options that build the default dictionary policy, with
#: their defaults (those of :class:`LeverageScorePolicy`).
POLICY_OPTION_DEFAULTS: Mapping[str, Any] = _field_defaults(
    LeverageScorePolicy,
    (
        "q_bar",
        "max_dictionary_size",
        "memory_budget_gb",
        "exact_max_n",
        "exact_window",
        "seed",
    ),
)

#: The flat constructor options that build the fit options, with their defaults
#: (those of :class:`NystromFitOptions`).
FIT_OPTION_DEFAULTS: Mapping[str, Any] = _field_defaults(
    NystromFitOptions, tuple(f.name for f in fields(NystromFitOptions))
)


def _options_object(
    given: Any, base: type, factory: type, flat: dict[str, Any], name: str
) -> Any:
    r"""``given`` (checked), or ``factory(**flat)`` built from the flat keywords."""
    defaults = (
        POLICY_OPTION_DEFAULTS if base is DictionaryPolicy else FIT_OPTION_DEFAULTS
    )
    flat = {k: flat[k] for k in defaults}
    if given is None:
        return factory(**flat)
    if not isinstance(given, base):
        raise TypeError(
            f"{name} must be a {base.__name__}, got {type(given).__name__}."
        )
    changed = sorted(k for k, v in flat.items() if v != defaults[k])
    if changed:
        raise ValueError(f"pass either {name} or {changed}, not both.")
    return given


def options_objects(
    dictionary_policy: DictionaryPolicy | None,
    fit_options: NystromFitOptions | None,
    **flat: Any,
) -> tuple[DictionaryPolicy, NystromFitOptions]:
    r"""The policy and fit options: given, or built from the flat keywords.

    ``flat`` holds every key of :data:`POLICY_OPTION_DEFAULTS` and
    :data:`FIT_OPTION_DEFAULTS`. A given object with a flat keyword away from its
    default is ambiguous (``ValueError``); an object of the wrong type is a
    ``TypeError``.
    """
    policy = _options_object(
        dictionary_policy,
        DictionaryPolicy,
        LeverageScorePolicy,
        flat,
        "dictionary_policy",
    )
    options = _options_object(
        fit_options, NystromFitOptions, NystromFitOptions, flat, "fit_options"
    )
    return policy, options


def default_modules(
    batch_shape: torch.Size,
    d: int,
    Yvar: Tensor | None,
    likelihood: Likelihood | None,
    mean_module: Mean | None,
    covar_module: Module | None,
) -> tuple[Likelihood, Mean, Module, dict[str, int] | None]:
    r"""``SingleTaskGP``'s defaults for the modules the user did not give.

    Args:
        batch_shape: The output-augmented batch shape of the modules.
        d: Number of input features.
        Yvar: ``batch_shape x n`` fixed noises (``None``: inferred noise).

    Returns:
        ``(likelihood, mean_module, covar_module, subset_batch_dict)``, the last
        ``None`` unless the default kernel is used (BoTorch's ``subset_output``
        map of the default modules' batch dimensions).
    """
    if likelihood is None:
        if Yvar is None:
            likelihood = get_gaussian_likelihood_with_lognormal_prior(
                batch_shape=batch_shape
            )
        else:
            likelihood = FixedNoiseGaussianLikelihood(
                noise=Yvar, batch_shape=batch_shape
            )
    mean_module = mean_module or ConstantMean(batch_shape=batch_shape)
    subset_batch_dict = None
    if covar_module is None:
        covar_module = get_covar_module_with_dim_scaled_prior(
            ard_num_dims=d, batch_shape=batch_shape
        )
        subset_batch_dict = {
            "mean_module.raw_constant": -1,
            "covar_module.raw_lengthscale": -3,
        }
        if Yvar is None:
            subset_batch_dict["likelihood.noise_covar.raw_noise"] = -2
    return likelihood, mean_module, covar_module, subset_batch_dict


def check_input_transform(input_transform: InputTransform | None) -> None:
    r"""``UnsupportedError`` for an input transform with trainable parameters.

    The model stores its training inputs transformed once, so a transform that
    the fit would change (e.g. ``Warp``) cannot be used.
    """
    if input_transform is not None and any(
        p.requires_grad for p in input_transform.parameters()
    ):
        raise UnsupportedError(
            "NystromGP stores transformed training inputs; input transforms with "
            "trainable parameters (e.g. Warp) are not supported."
        )


def dictionary_spec(
    dictionary: Tensor | str | None, n: int
) -> tuple[str, Tensor | None]:
    r"""``("auto", None)``, ``("all", None)`` or ``("given", indices)``.

    Args:
        dictionary: ``None`` (drawn by the policy), ``"all"`` or a ``LongTensor``
            of training indices in ``[0, n)``.
        n: Number of training points.
    """
    if dictionary is None:
        return "auto", None
    if isinstance(dictionary, str):
        if dictionary != "all":
            raise ValueError(
                f"dictionary must be 'all', None or indices, got {dictionary!r}."
            )
        return "all", None
    return "given", validate_indices(dictionary, n)


def usable_warm_start(
    warm_start: SketchState | dict[str, Any] | None, n: int
) -> SketchState | None:
    r"""The warm start as a :class:`SketchState`, or ``None`` if it is unusable.

    A state with problems (:meth:`SketchState.problems` for ``n`` points, e.g.
    non-finite numbers) is discarded with a ``RuntimeWarning``: the model then
    fits from scratch.
    """
    if warm_start is None:
        return None
    warm_start = SketchState.from_dict(warm_start)
    problems = warm_start.problems(n)
    if problems:
        warnings.warn(
            f"NystromGP: warm_start discarded ({'; '.join(problems)}); "
            "the model fits from scratch.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return warm_start


def option_property(holder: str, name: str) -> property:
    r"""A model attribute read from (and set through) one of its options objects.

    Reading gives ``getattr(model.<holder>, name)`` (``None`` where the object has
    no such field); setting replaces the frozen object by a copy with the field
    changed.
    """

    def get(self: Any) -> Any:
        return getattr(getattr(self, holder), name, None)

    get.__doc__ = f"``{holder}.{name}`` (``None`` where the object has none)."

    def set_(self: Any, value: Any) -> None:
        setattr(self, holder, replace(getattr(self, holder), **{name: value}))

    return property(get, set_)
