r"""The dictionary of a sketched GP, drawn by its policy, as a base class.

:class:`SketchDictionaryMixin` holds what a model does with its dictionary
policy (:mod:`~botorch_sketch.models.dictionary_policy`): the first draw, fresh
draws, BKB's redraw from the ridge leverage scores (COLT 2019, Alg. 1), the
numbered generators and fixed per-row uniforms of the seed, the record of the
last draw (its ridge, whether the budget bound, the Nyström residual), and BKB's
incremental update (new observations, then a redraw from all points).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor

from botorch_sketch.models.dictionary_policy import DictionaryPolicy
from botorch_sketch.models.nystrom_dictionary import SketchDraw, row_uniforms
from botorch_sketch.models.nystrom_fit import fit_subset_size, refine_iterations
from botorch_sketch.models.sketch_state import SketchState
from botorch_sketch.models.validation import (
    check_batch_shape,
    validate_new_observations,
    validate_training_data,
)

logger = logging.getLogger(__name__)

__all__ = ["SketchDictionaryMixin"]


class SketchDictionaryMixin:
    r"""Dictionary draws of a sketched GP through its ``dictionary_policy``.

    The model provides ``dictionary_policy``, ``seed``, ``num_draws``,
    ``sketch_ridge``, ``dictionary_capped``, ``nystrom_residual``, the data
    (``_train_X``), the dictionary (``dictionary_indices``) and ``_rls_at``
    (:class:`~botorch_sketch.models.dtc_posterior.DTCPosteriorMixin`).
    """

    dictionary_policy: DictionaryPolicy
    seed: int | None
    num_draws: int
    sketch_ridge: float | None
    dictionary_capped: bool
    nystrom_residual: float | None
    exact_reason: str | None
    likelihood: Any
    _train_X: Tensor
    _dictionary_indices: Tensor | None
    _dictionary_spec: str
    _compute_dtype: torch.dtype
    _cache: dict[str, Any] | None

    @property
    def dictionary_indices(self) -> Tensor:
        r"""Sorted training indices of the dictionary ``S`` (drawn when first used)."""
        if self._dictionary_indices is None:
            with torch.no_grad():
                self._dictionary_indices = self.initial_dictionary()
        return self._dictionary_indices

    @dictionary_indices.setter
    def dictionary_indices(self, value: Tensor) -> None:
        self._dictionary_indices = value
        self._cache = None

    @property
    def dictionary_size(self) -> int:
        r"""Number of training points in the dictionary (unique indices)."""
        return int(self.dictionary_indices.numel())

    @property
    def dictionary_report(self) -> dict[str, Any]:
        r"""What the dictionary is and why: its size, the budget in force when it
        was drawn and whether it bound, the ridge it sampled, the mean Nyström
        residual over the noise where the policy measured it (``0`` for every
        point), why a dictionary of every point is every point (``None`` for a
        sampled one), the size of the hyperparameter fit's subsample and the
        L-BFGS-B iterations of its refinement on every point (at most)."""
        size = self.dictionary_size  # drawn now if still pending
        return {
            "size": size,
            "n": self.num_training_points,
            "cap": self._dictionary_cap() if self.drawn_cap is None else self.drawn_cap,
            "capped": self.dictionary_capped,
            "ridge": self.sketch_ridge,
            "residual": self.nystrom_residual,
            "exact_reason": self.exact_reason,
            "fit_subset_size": fit_subset_size(self),
            "refine_iterations": refine_iterations(self),
        }

    @property
    def inducing_points(self) -> Tensor:
        r"""``batch_shape x (m) x |S| x d`` dictionary points (transformed space)."""
        return self._train_X[..., self.dictionary_indices, :]

    def initial_dictionary(self) -> Tensor:
        r"""The dictionary at the current hyperparameters (lazy draw, after a fit).

        The given indices, else the policy's draw
        (:meth:`~botorch_sketch.models.dictionary_policy.DictionaryPolicy.initial`),
        recorded in :attr:`sketch_ridge` and :attr:`dictionary_capped`.
        """
        if self._dictionary_spec == "given" and self._dictionary_indices is not None:
            return self._dictionary_indices
        every = self._dictionary_spec == "all"
        return self.record_draw(self.dictionary_policy.initial(self, every))

    _initial_dictionary = initial_dictionary

    def draw_fresh_dictionary(self) -> Tensor:
        r"""A dictionary drawn from scratch by the policy (BLESS by default)."""
        return self.record_draw(self.dictionary_policy.fresh(self))

    def _bless_indices(self) -> Tensor:
        return self.draw_fresh_dictionary()

    def _warm_dictionary(self, state: SketchState) -> Tensor:
        return self.dictionary_policy.warm_rows(self, state)

    def record_draw(self, draw: SketchDraw) -> Tensor:
        r"""Record a draw's ridge and whether the budget bound; its indices."""
        self.sketch_ridge, self.dictionary_capped = draw.ridge, draw.capped
        every = draw.ridge is None and draw.indices.numel() == self.num_training_points
        self.nystrom_residual = 0.0 if every else draw.residual
        self.exact_reason = draw.reason if every else None
        # The cap in force for this draw, as the policy used it: on a GPU the
        # device's cap depends on the free memory, which the draw itself and the
        # fitted model's blocks then reduce, so a later reading would differ.
        self.drawn_cap = self._dictionary_cap() if draw.cap is None else draw.cap
        if draw.capped:
            logger.warning(
                "NystromGP: the sketch budget max_dictionary_size=%s binds (n = %d); "
                "the dictionary samples the leverage scores of the ridge %.3g instead "
                "of the noise variance %.3g.",
                self.drawn_cap,
                self.num_training_points,
                draw.ridge,
                float(self.likelihood.noise.mean()),
            )
        return draw.indices

    def posterior_variance_at_train(self) -> Tensor:
        r"""DTC variances at the training points in RLS units (``var / noise``).

        These are the (approximate) ridge leverage scores ``sigma~_t^2(x_i)``; their
        sum estimates the effective dimension ``d_eff`` (BKB Eq. 5).

        Returns:
            A ``batch_shape x (m) x n`` tensor.
        """
        return self.leverage_scores()

    def leverage_scores(self, ridge: float | None = None) -> Tensor:
        r"""Approximate ridge leverage scores of the training points at ``ridge``.

        ``tau~_i = (k_ii - ||z_i||^2) / ridge + z_i^T (Z^T Z + ridge I)^{-1} z_i``:
        the DTC posterior variance over ``ridge`` of a model whose noise is
        ``ridge``, with the current dictionary (BKB Sec. 3.1). ``ridge = None`` uses
        the model's noise. When the budget binds, the dictionary is resampled at
        its own, larger, ridge (:attr:`sketch_ridge`).

        Returns:
            A ``batch_shape x (m) x n`` tensor. ``O(n m r)``.
        """
        with torch.no_grad():
            return self._rls_at(self._train_X, ridge)

    def next_generator(
        self, generator: torch.Generator | None = None
    ) -> torch.Generator | None:
        r"""``generator``, or the next numbered generator of the seed (or ``None``)."""
        if generator is not None or self.seed is None:
            return generator
        seed = (self.seed * 1_000_003 + self.num_draws) % 2**63
        g = torch.Generator().manual_seed(seed)
        self.num_draws += 1
        return g

    _next_generator = next_generator

    def row_uniforms(self, stream: int = 0) -> Tensor:
        r"""One fixed uniform number per training row, for coupled draws.

        :func:`~botorch_sketch.models.nystrom_dictionary.row_uniforms` at the
        model's seed: ``stream`` 0 for dictionary draws, 1 for the fit subsample.
        """
        return row_uniforms(
            self.num_training_points, self.seed, stream, self._compute_dtype
        )

    _row_uniforms = row_uniforms

    def _resampling_ridge(self, ridge: float | None) -> float | None:
        noise = float(self.likelihood.noise.mean())
        return self.dictionary_policy.resampling_ridge(ridge, noise)

    def draw_indices(
        self,
        rls: Tensor,
        generator: torch.Generator | None,
        ridge: float | None = None,
        uniforms: Tensor | None = None,
    ) -> Tensor:
        r"""The policy's draw of dictionary rows from scores ``rls``.

        The draw is recorded (:attr:`num_draws`, :meth:`dictionary_report`) but
        not installed: the caller assigns :attr:`dictionary_indices`.

        Args:
            rls: ``batch_shape x n`` ridge leverage scores of the training rows.
            generator: Generator of the draw (``None``: unseeded).
            ridge: The ridge the scores were computed at (``None``: the noise).
            uniforms: Optional ``n`` fixed uniforms for a coupled draw.

        Returns:
            The drawn row indices (``LongTensor``).
        """
        draw = self.dictionary_policy.redraw(self, rls, ridge, generator, uniforms)
        return self.record_draw(draw)

    def resample_dictionary(self, generator: torch.Generator | None = None) -> Tensor:
        r"""Redraw the dictionary from all training points, in place (BKB Alg. 1).

        The policy's redraw from the leverage scores of the current dictionary and
        hyperparameters, within the budget. The model is changed only after the
        draw succeeded.

        Args:
            generator: Optional generator (default: derived from ``seed``).

        Returns:
            The new dictionary indices.
        """
        ridge = self._resampling_ridge(self.sketch_ridge)
        rls = self.leverage_scores(ridge)
        idx = self.draw_indices(rls, self.next_generator(generator), ridge)
        self.dictionary_indices = idx
        return idx

    def _dictionary_cap(self) -> int | None:
        """The policy's budget for the current data."""
        return self.dictionary_policy.cap_for(self._train_X)

    def condition_and_resample(
        self,
        X: Tensor,
        Y: Tensor,
        Yvar: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> Any:
        r"""BKB's incremental update: add observations and redraw the dictionary.

        Returns a new model with ``(X, Y)`` appended, whose dictionary is redrawn
        from *all* points with the stale variances ``sigma~_t^2`` (old data, old
        dictionary), as BKB does (COLT 2019, Sec. 3.1), within the budget. No
        refit of the hyperparameters.

        Args:
            X: ``n' x d`` (or ``batch_shape x n' x d``) new inputs.
            Y: ``n' x m`` new targets in the original outcome space.
            Yvar: Observed noise variances for a fixed-noise model.
            generator: Optional generator (default: derived from ``seed``).
        """
        validate_training_data(X, Y, Yvar, name="new")
        # Width and batch shape against this model, before anything is drawn.
        validate_new_observations(X, Y, Yvar, d=self.input_dim, m=self.num_outputs)
        check_batch_shape(X, self._input_batch_shape)
        ridge = self._resampling_ridge(self.sketch_ridge)
        old_rls = self.leverage_scores(ridge)
        new = self.condition_on_observations(
            X.to(self._compute_dtype),
            Y.to(self._compute_dtype),
            noise=None if Yvar is None else Yvar.to(self._compute_dtype),
        )
        n_old = old_rls.shape[-1]
        with torch.no_grad():
            # The new points are scored by the old model: no feedback yet.
            added = self._rls_at(new.compute_inputs[..., n_old:, :], ridge)
        stale = torch.cat([old_rls.expand(*added.shape[:-1], n_old), added], dim=-1)
        new.dictionary_indices = new.draw_indices(
            stale, new.next_generator(generator), ridge
        )
        new.num_draws = max(new.num_draws, self.num_draws)
        return new
