r"""How a :class:`~botorch_sketch.models.NystromGP` fits its hyperparameters.

One small object, :class:`NystromFitOptions`, checked when it is built; the fit
itself is :func:`~botorch_sketch.models.nystrom_fit.fit_nystrom_gp`.
"""

from __future__ import annotations

from dataclasses import dataclass

from botorch_sketch.models.validation import (
    check_bool_free_int,
    check_choice,
    check_nonnegative_number,
    optional_positive_int,
)

__all__ = [
    "DEFAULT_FIT_SUBSET_SIZE",
    "DEVICE_SUBSET",
    "OBJECTIVES",
    "NystromFitOptions",
]

#: ``fit_subset_size`` that asks for the device-derived size
#: (:func:`~botorch_sketch.models.budget.device_fit_subset_size`).
DEVICE_SUBSET = "device"

#: Default size of the subsample the hyperparameters are fitted on.
DEFAULT_FIT_SUBSET_SIZE = DEVICE_SUBSET

#: Objectives of the hyperparameter fit.
OBJECTIVES = ("exact", "vfe", "dtc")


@dataclass(frozen=True)
class NystromFitOptions:
    r"""Options of the hyperparameter fit and of its warm-started schedule.

    Attributes:
        fit_subset_size: The hyperparameters are fitted on a seeded uniform
            subsample of at most this many points (``None``: all; ``"device"``:
            the largest the device affords in the fit's time budget, at least
            1,000, :func:`~botorch_sketch.models.budget.device_fit_subset_size`),
            ``O(s^3)`` per evaluation.
        objective: ``"exact"`` (the exact marginal likelihood of the subsample),
            ``"vfe"`` (Titsias' collapsed bound of the sketch) or ``"dtc"`` (the
            DTC likelihood), the latter two ``O(s m^2)``.
        dictionary_refits: Dictionary redraws inside a VFE/DTC fit.
        refit_growth: With a warm start, refit once the data grew by this
            fraction since the last fit.
        refit_tolerance: With a warm start, refit when the per-point negative
            log marginal likelihood rose by more than this many nats (``None``:
            no such check, the warm hyperparameters are kept until the data
            grew by ``refit_growth``).
        refit_max_iterations: L-BFGS-B iterations of a scheduled refit (of each
            of its starts; ``None``: unbounded).
        fit_max_iterations: L-BFGS-B iterations of a fit from the current
            values (a first fit, or one without a warm start; ``None``: BoTorch's
            default). TuRBO's reference code fits its GP with 50 Adam steps; on a
            flat likelihood (e.g. the one-hot columns of a categorical parameter)
            an unbounded L-BFGS-B run can take over 1,000 iterations.
        fit_tolerance: L-BFGS-B's ``ftol`` in every fit on the subsample (the
            refinement on every point has its own,
            ``nystrom_fit.REFINE_TOLERANCE``): it stops once an
            iteration lowers the per-point loss by less than this fraction of
            its magnitude (``None``: SciPy's default, about ``2.2e-9``). The
            last iterations of a tight fit mostly move lengthscales along a flat
            likelihood (coordinates that barely matter); ``1e-5`` already stops
            far from the optimum.
        refine_iterations: L-BFGS-B iterations of the exact marginal likelihood
            on every training point, started from the subsample's fit, when the
            subsample is smaller than the data (``objective="exact"`` only;
            ``0``: none; ``"device"``: ``REFINE_ITERATIONS`` where the device
            affords them in the sketch's time budget and memory, else none,
            :func:`~botorch_sketch.models.budget.device_refine_iterations`; on a
            CPU, none). The subsample's hyperparameters can sit far from the
            full data's where the likelihood is flat in some directions (e.g.
            the lengthscales of standardized Cadata); a few full-data steps from
            there recover the exact GP's fit at a fraction of a full fit's cost.
    """

    fit_subset_size: int | str | None = DEFAULT_FIT_SUBSET_SIZE
    objective: str = "exact"
    dictionary_refits: int = 1
    refit_growth: float = 0.25
    refit_tolerance: float | None = 0.05
    refit_max_iterations: int | None = 50
    fit_max_iterations: int | None = None
    fit_tolerance: float | None = None
    refine_iterations: int | str = DEVICE_SUBSET

    def __post_init__(self) -> None:
        if self.fit_subset_size != DEVICE_SUBSET:
            optional_positive_int(self.fit_subset_size, "fit_subset_size")
        check_choice(self.objective, OBJECTIVES, "objective")
        check_bool_free_int(self.dictionary_refits, "dictionary_refits", minimum=0)
        check_nonnegative_number(self.refit_growth, "refit_growth")
        optional_positive_int(self.refit_max_iterations, "refit_max_iterations")
        optional_positive_int(self.fit_max_iterations, "fit_max_iterations")
        if isinstance(self.refine_iterations, str):
            if self.refine_iterations != DEVICE_SUBSET:
                raise ValueError(
                    f"refine_iterations must be {DEVICE_SUBSET!r} or an int >= 0, "
                    f"got {self.refine_iterations!r}."
                )
        else:
            check_bool_free_int(self.refine_iterations, "refine_iterations", minimum=0)
        object.__setattr__(self, "refit_growth", float(self.refit_growth))
        if self.refit_tolerance is not None:
            check_nonnegative_number(self.refit_tolerance, "refit_tolerance")
            object.__setattr__(self, "refit_tolerance", float(self.refit_tolerance))
        tol = self.fit_tolerance
        if tol is not None:
            check_nonnegative_number(tol, "fit_tolerance")
            if tol <= 0:
                raise ValueError(f"fit_tolerance must be > 0 or None, got {tol!r}.")
            object.__setattr__(self, "fit_tolerance", float(tol))

    @property
    def uses_sketch(self) -> bool:
        r"""Whether the objective is a sketch objective (VFE/DTC)."""
        return self.objective != "exact"
