r"""The BBKB upper confidence bound as a BoTorch acquisition function.

BBKB (Calandriello, Carratino, Lazaric, Valko & Rosasco, "Near-linear time Gaussian
process optimization with adaptive batching and resparsification", ICML 2020)
builds a batch greedily with the UCB of Sec. 3.1

    u~_t(x) = mu~_fb(x) + alpha~ * sigma~_t(x),

where

- ``mu~_fb`` is the DTC posterior mean at the start of the batch (feedback up to
  ``fb(t)``); it is FROZEN during the batch, pending points do not move it;
- ``sigma~_t`` is the DTC posterior standard deviation in "RLS units" with every
  pending point hallucinated into the posterior through the FROZEN Nyström
  embedding ``z(x) = W^T k_S(x)`` (Alg. 1 L7, spec Sec. 4.2).

In the GP units of :class:`~botorch_sketch.models.NystromGP` (latent variance, noise
``lam``), with ``A = I + Z^T N^{-1} Z = L L^T`` the factor of the model and ``Z_p``
(``p x r``) the embedded pending points,

    A_t     = A + Z_p^T Z_p / lam = L_t L_t^T                              (r x r)
    var_t(x) = k(x, x) - ||z(x)||^2 + ||L_t^{-1} z(x)||^2                  (Eqs. 2-3)
    sigma~_t^2(x) = var_t(x) / lam                                       (App. A.1)

This is exactly the variance of the DTC model conditioned on fantasy observations
at the pending points (any values, e.g. the posterior mean: DTC variances do not
depend on the targets), i.e. ``model.condition_on_observations(X_p, Y_p)``, but
costs ``O(p r^2)`` once (``p`` rank-one Cholesky updates, or one re-factorisation
when ``p >= r``) instead of a refit (``hallucination="dictionary"``, the default).

**Full hallucination** (``hallucination="full"``, GP-BUCB's update). The frozen
embedding only sees the part of a pending point inside the dictionary's span: the
Nyström residual ``k(x, x) - ||z(x)||^2`` is not reduced, so a pending point far
from the dictionary (early in a run, or in an unexplored region) stays as
uncertain as before, and a greedy batch continued past the rule's stop picks it
again and again. ``"full"`` conditions the batch-start posterior itself on noisy
fantasy observations at the pending points: with ``v(x, x')`` the batch-start
posterior covariance (the DTC covariance above) and ``V_pp = v(X_p, X_p)``,

    var_t(x) = v(x, x) - v(x, X_p) (V_pp + lam I)^{-1} v(X_p, x),              (p x p)

i.e. the exact GP posterior conditioned on the pending points when the model is
exact (every point in the dictionary), and the dictionary update above whenever
the pending points lie in the dictionary's span. ``O(p^2 (p + r) + p m d)`` once
(a ``p x p`` Cholesky factor, extended block-wise as points are appended) and
``O(q p (d + r + p))`` more per evaluation of ``q`` points.

**Units.** ``alpha`` is the paper's ``alpha~``, multiplying the RLS-unit standard
deviation ``sigma~ = sigma_GP / sqrt(lam)``, so ``alpha`` carries the units of the
outcome. With BoTorch's ``UpperConfidenceBound(beta)`` (``mu + sqrt(beta) sigma_GP``)
the two agree for ``alpha = sqrt(beta * lam)``
(:meth:`BatchUpperConfidenceBound.from_botorch_beta`,
:func:`botorch_sketch.bbkb.schedules.alpha_from_botorch_beta`); here ``lam`` is the
noise variance in the outcome units of the posterior, i.e. after undoing an
outcome transform such as ``Standardize`` (:attr:`BatchUpperConfidenceBound.lam`).
``sigma~`` itself does not depend on the outcome scaling.

Cost: ``O(r^3 + m r^2 + p r^2)`` to build the cache (``m`` dictionary points,
``r <= m`` embedding rank, ``p`` pending points), then ``O(q (m d + m r))`` per
evaluation of ``q`` points: one kernel row ``k(x, S)`` and one product with an
``m x (1 + r)`` basis that gives the mean and the variance together
(:func:`~botorch_sketch.linalg.dtc_explained_basis`; ``m x (1 + 2r)`` under the
dictionary hallucination with pending points).
"""

from __future__ import annotations

import logging
import math
from typing import Any, NamedTuple

import gpytorch
import torch
from botorch.acquisition.acquisition import AcquisitionFunction
from botorch.acquisition.analytic import AnalyticAcquisitionFunction
from botorch.acquisition.objective import (
    PosteriorTransform,
    ScalarizedPosteriorTransform,
)
from botorch.exceptions.errors import UnsupportedError
from botorch.utils.transforms import t_batch_mode_transform
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood
from torch import Tensor

from botorch_sketch import linalg
from botorch_sketch.acquisition.dtc_marginals import PendingRows, dtc_marginals
from botorch_sketch.bbkb.dense_kernel import SquaredExponential, as_dense_kernel
from botorch_sketch.bbkb.posterior_state import PosteriorState
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.validation import check_choice

logger = logging.getLogger(__name__)

__all__ = ["BatchUpperConfidenceBound", "pending_cholesky"]

#: Variances (RLS units) are clamped at this value before the square root, so the
#: gradient of ``sigma~`` stays finite where the posterior is certain.
MIN_RLS_VARIANCE = 1e-12

#: Rows of a finite candidate set evaluated at once (``chunk x m`` kernel blocks).
STATE_CHUNK_SIZE = 4096


def pending_cholesky(L: Tensor, V: Tensor) -> Tensor:
    r"""Cholesky factor of ``L L^T + V^T V`` (hallucinating the rows of ``V``).

    For ``p < r`` rows this applies ``p`` rank-one updates
    (:func:`~botorch_sketch.linalg.cholesky_rank_one_update`, ``O(p r^2)``); for
    ``p >= r`` one re-factorisation of the ``r x r`` matrix is cheaper
    (``O(p r^2 + r^3)``). Both are factor updates: no inverse is formed.

    Args:
        L: ``r x r`` lower Cholesky factor.
        V: ``p x r`` rows to add (here ``z(x_p) / sqrt(lam)``).

    Returns:
        The ``r x r`` lower Cholesky factor of ``L L^T + V^T V``.
    """
    p, r = V.shape
    if p == 0 or r == 0:
        return L
    if p < r:
        for row in V:
            L = linalg.cholesky_rank_one_update(L, row)
        return L
    A = L @ L.mT + V.mT @ V
    return torch.linalg.cholesky(0.5 * (A + A.mT))


class _FrozenCache(NamedTuple):
    r"""Batch-start quantities of :class:`BatchUpperConfidenceBound`.

    ``predictor`` is a :class:`~botorch_sketch.linalg.DTCPredictor`
    ``[a | P | N]`` whose one product with ``k_S(x)``
    (:func:`~botorch_sketch.linalg.dtc_features`) gives the frozen mean offset
    ``a^T k_S(x)`` (``a = W L^{-T} c``) and the factors of

        var_t(x) = k(x, x) - ||p(x)||^2 + ||n(x)||^2.

    Without dictionary-hallucinated points it is the model's folded predictor:
    ``p(x) = B^T k_S(x)`` with ``B B^T = W (I - A^{-1}) W^T``
    (:func:`~botorch_sketch.linalg.dtc_explained_basis`), ``n`` empty,
    ``m x (1 + r)``; with every training point in the dictionary, the exact GP's
    ``p(x) = L^{-1} k_X(x)`` (:func:`~botorch_sketch.linalg.exact_predictor`,
    ``n x (1 + n)``). With them, ``p(x) = z(x)`` and ``n(x) = L_t^{-1} z(x)``:
    ``m x (1 + 2r)``.

    Attributes:
        source: The model's predictor this cache was built from
            (:meth:`~botorch_sketch.models.NystromGP.dtc_predictor`; identity is
            used to detect a rebuilt model cache).
        X_pending: The (untransformed) pending points hallucinated into ``chol``.
        S: ``m x d`` dictionary points (transformed inputs).
        W: ``m x r`` embedding map, ``z(x) = W^T k_S(x)`` (``None`` under the
            full hallucination, which needs only the folded predictor).
        start: The batch-start (folded) predictor, kept when pending points are
            appended.
        predictor: The predictor of the current hallucinated variance.
        chol: ``r x r`` factor ``L_t`` of ``A_t = A + Z_p^T Z_p / lam`` (``None``
            under the full hallucination).
        lam: Noise variance ``lam`` in model (transformed-outcome) units, a scalar.
        pending: The pending points' block of the full hallucination, or ``None``.
        factor: The model's DTC factor under the dictionary hallucination.
    """

    source: Any
    X_pending: Tensor | None
    S: Tensor
    W: Tensor | None
    start: linalg.DTCPredictor
    predictor: linalg.DTCPredictor
    chol: Tensor | None
    lam: Tensor
    pending: _PendingBlock | None = None
    factor: linalg.DTCFactor | None = None


class _PendingBlock(NamedTuple):
    r"""Pending points of the full hallucination (``p`` points, transformed).

    Attributes:
        Xt: ``p x d`` transformed pending points.
        P: ``p x r`` explained parts ``b(x_p) = B^T k_S(x_p)`` (batch start), so
            that ``v(x, X_p) = k(x, X_p) - b(x)^T P^T``.
        chol: ``p x p`` lower Cholesky factor of ``V_pp + lam I``.
    """

    Xt: Tensor
    P: Tensor
    chol: Tensor


#: How pending points enter the variance (module docstring).
HALLUCINATIONS = ("dictionary", "full")
#: The one default of ``hallucination`` (here and in
#: :func:`~botorch_sketch.optim.optimize_acqf_adaptive_batch`): conditioning on the
#: pending points also lowers the variance outside the dictionary's span, so a
#: greedy batch does not repeat a point far from the data.
DEFAULT_HALLUCINATION = "full"
#: Points closer than this (Euclidean, original input space) are the same point.
SAME_POINT_TOL = 1e-9


class BatchUpperConfidenceBound(AnalyticAcquisitionFunction):
    r"""BBKB's batch UCB ``u(x) = mu_fb(x) + alpha sigma~_t(x)`` (ICML 2020 Sec. 3.1).

    Single-outcome, ``q = 1``, for an unbatched
    :class:`~botorch_sketch.models.NystromGP`. ``mu_fb`` is the model's posterior
    mean (unaffected by ``X_pending``); ``sigma~_t = sqrt(var_t / lam)`` is the
    posterior standard deviation in RLS units after hallucinating ``X_pending``
    through the frozen embedding, or, with ``hallucination="full"``, by conditioning
    the batch-start posterior on them (module docstring). With ``X_pending = None``
    this is ``UpperConfidenceBound(beta = alpha^2 / lam)``.

    ``posterior_transform`` may be a :class:`ScalarizedPosteriorTransform` with a
    single weight ``+1`` or ``-1`` (``-1`` minimises: the mean flips sign, ``sigma~``
    does not change); the offset is added to the mean. ``maximize=False`` flips the
    sign of the mean as in ``UpperConfidenceBound``.

    Example:
        >>> model = NystromGP(train_X, train_Y, seed=0)
        >>> bucb = BatchUpperConfidenceBound(model, alpha=1.0, X_pending=X_batch)
        >>> x, val = optimize_acqf(bucb, bounds, q=1, num_restarts=8, raw_samples=256)
    """

    def __init__(
        self,
        model: NystromGP,
        alpha: float | Tensor,
        posterior_transform: PosteriorTransform | None = None,
        maximize: bool = True,
        X_pending: Tensor | None = None,
        hallucination: str = DEFAULT_HALLUCINATION,
    ) -> None:
        r"""Batch UCB with hallucinated pending points.

        Args:
            model: A single-output, unbatched ``NystromGP`` (homoscedastic noise, or a
                fixed-noise likelihood, whose mean training noise is then used as
                ``lam`` for the pending points).
            alpha: The paper's ``alpha~ >= 0`` in RLS units (multiplies
                ``sigma_GP / sqrt(lam)``); see :meth:`from_botorch_beta`.
            posterior_transform: ``None`` or a ``ScalarizedPosteriorTransform`` with
                one weight equal to ``+1`` or ``-1``.
            maximize: If ``False``, the mean enters with a minus sign.
            X_pending: ``p x d`` points selected but not yet evaluated (original
                input space), hallucinated into the variance.
            hallucination: ``"full"`` (default, :data:`DEFAULT_HALLUCINATION`: the
                batch-start posterior conditioned on the pending points, Nyström
                residual included) or ``"dictionary"`` (the paper's update through
                the frozen embedding); module docstring.
        """
        super().__init__(model=model, posterior_transform=posterior_transform)
        _validate_model(model)
        self.hallucination = check_choice(
            hallucination, HALLUCINATIONS, "hallucination"
        )
        self._sign, self._offset = _validate_posterior_transform(posterior_transform)
        alpha_t = torch.as_tensor(alpha, dtype=model.compute_dtype)
        if alpha_t.numel() != 1 or not bool(torch.isfinite(alpha_t)) or alpha_t < 0:
            raise ValueError(
                f"alpha must be a finite non-negative scalar, got {alpha!r}."
            )
        self.register_buffer("alpha", alpha_t.reshape(()))
        self.maximize = maximize
        self._frozen: _FrozenCache | None = None
        self.X_avoid: Tensor | None = None
        self.set_X_pending(X_pending)

    @classmethod
    def from_botorch_beta(
        cls,
        model: NystromGP,
        beta: float,
        posterior_transform: PosteriorTransform | None = None,
        maximize: bool = True,
        X_pending: Tensor | None = None,
        hallucination: str = DEFAULT_HALLUCINATION,
    ) -> BatchUpperConfidenceBound:
        r"""Build from BoTorch's UCB ``beta``: ``alpha = sqrt(beta * lam)``.

        ``lam`` is the noise variance in the outcome units of the posterior
        (:attr:`lam`), so that ``alpha sigma~ = sqrt(beta) sigma_GP`` and, without
        pending points, the value equals ``UpperConfidenceBound(model, beta)``.
        """
        if not (math.isfinite(float(beta)) and float(beta) >= 0):
            raise ValueError(f"beta must be a finite non-negative number, got {beta}.")
        _validate_model(model)
        lam = _outcome_noise(model, _noise_level(model))
        alpha = math.sqrt(float(beta) * float(lam))
        return cls(
            model,
            alpha=alpha,
            posterior_transform=posterior_transform,
            maximize=maximize,
            X_pending=X_pending,
            hallucination=hallucination,
        )

    @property
    def lam(self) -> float:
        r"""Noise variance ``lam`` in the posterior's outcome units (``Standardize``
        undone). ``sigma~ = sigma_GP / sqrt(lam)`` with ``sigma_GP`` the std of
        ``model.posterior``."""
        return float(_outcome_noise(self.model, _noise_level(self.model)))

    def set_X_pending(self, X_pending: Tensor | None = None) -> None:
        r"""Set the pending points hallucinated into the variance (BoTorch semantics).

        The cached factor is rebuilt lazily at the next evaluation; if the new
        ``X_pending`` extends the previous one (same first rows), only the new rows
        are added (``O(r^2)`` per row), which is what a sequential batch does.

        Args:
            X_pending: ``p x d`` pending points, or ``None``.
        """
        if X_pending is not None:
            if X_pending.dim() != 2:
                raise ValueError(
                    f"X_pending must be a p x d tensor, got {tuple(X_pending.shape)}."
                )
            d = _input_dim(self.model)
            if X_pending.shape[-1] != d:
                raise ValueError(
                    f"X_pending has {X_pending.shape[-1]} columns, the model has d={d}."
                )
        AcquisitionFunction.set_X_pending(self, X_pending)

    def set_X_avoid(self, X_avoid: Tensor | None = None) -> None:
        r"""Points at which :meth:`forward` returns the lower bound instead.

        At a point of ``X_avoid`` (already evaluated, pending, or earlier in the
        batch) the value is :meth:`lower_bound`, ``mu - alpha sigma~_t``: an
        optimiser of this function then takes such a point only when the model is
        sure it beats the best other point it finds (its lower bound above that
        point's UCB). The variance is unaffected (``X_pending`` does that).

        Args:
            X_avoid: ``a x d`` points (original input space), or ``None``.
        """
        if X_avoid is not None and (
            X_avoid.dim() != 2 or X_avoid.shape[-1] != _input_dim(self.model)
        ):
            raise ValueError(
                f"X_avoid must be a x d with d={_input_dim(self.model)}, got "
                f"{tuple(X_avoid.shape)}."
            )
        self.X_avoid = X_avoid

    # ------------------------------------------------------------------------------
    # Evaluation
    # ------------------------------------------------------------------------------

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:
        r"""Evaluate ``u(x) = s mu_fb(x) + o + alpha sigma~_t(x)`` (``s = +-1``).

        Args:
            X: A ``batch_shape x 1 x d`` tensor of points (t-batches of ``q = 1``).

        Returns:
            A ``batch_shape`` tensor of UCB values (in the model's dtype).
        """
        mean, rls_var = self._mean_and_rls_variance(X)
        sigma = rls_var.clamp_min(MIN_RLS_VARIANCE).sqrt()
        value = (self._ucb_mean(mean) + self.alpha * sigma).squeeze(-1)
        if self.X_avoid is None or self.X_avoid.shape[0] == 0:
            return value
        flat = X.reshape(-1, X.shape[-1])
        hit = torch.cdist(flat, self.X_avoid.to(flat)).min(dim=-1).values
        hit = (hit <= SAME_POINT_TOL).reshape(value.shape)
        lower = (self._ucb_mean(mean) - self.alpha * sigma).squeeze(-1)
        return torch.where(hit, lower, value)

    def lower_bound(self, X: Tensor) -> Tensor:
        r"""``l(x) = s mu_fb(x) + o - alpha sigma~_t(x)``, the UCB's lower twin.

        Args:
            X: ``batch_shape x 1 x d`` points.

        Returns:
            A ``batch_shape`` tensor.
        """
        mean, rls_var = self._mean_and_rls_variance(X)
        sigma = rls_var.clamp_min(MIN_RLS_VARIANCE).sqrt()
        return (self._ucb_mean(mean) - self.alpha * sigma).squeeze(-1)

    def batch_state(
        self, choices: Tensor, chunk_size: int = STATE_CHUNK_SIZE
    ) -> PosteriorState:
        r"""This UCB over the rows of ``choices`` as a frozen BBKB engine state.

        The :class:`~botorch_sketch.bbkb.posterior_state.PosteriorState` whose
        arms are the ``A`` rows (in the model's transformed input space), with the
        model's kernel (``covar_module``), dictionary ``S`` and embedding map
        ``W``, ``lam`` the noise level, ``V_fb = lam A_t`` (the pending points
        hallucinated), ``mu(a)`` the mean term of this UCB (sign, offset and
        ``maximize`` applied) and ``s2_0(a) = sigma~^2_t(a)`` (RLS units), so
        that the engine's UCB ``mu(a) + alpha sqrt(s2_0(a))`` is :meth:`forward`
        (except below :data:`MIN_RLS_VARIANCE`, which the engine does not clamp)
        and hallucinating an arm in the engine is appending it to ``X_pending``
        here. The engine's selectors
        (:func:`~botorch_sketch.bbkb.selection.select_batch`) then pick a batch
        over the rows without evaluating this function again.

        ``O(A m (d + r) + m r^2)`` time in chunks of ``chunk_size`` rows; the
        state holds ``O(A)`` numbers besides the transformed rows (no ``A x m``,
        ``A x r`` or ``A x A`` block).

        Args:
            choices: ``A x d`` finite candidate set (original input space).
            chunk_size: Rows evaluated at once (here and by the state).

        Returns:
            The frozen state, in the model's dtype.
        """
        if choices.dim() != 2 or choices.shape[-1] != _input_dim(self.model):
            raise ValueError(
                f"choices must be A x d with d={_input_dim(self.model)}, got "
                f"{tuple(choices.shape)}."
            )
        model = self.model
        with torch.no_grad():
            cache = self._cache()
            if cache.pending is not None:
                raise ValueError(
                    "batch_state hallucinates through the frozen embedding (the "
                    "engine's update); build the UCB with hallucination="
                    "'dictionary' to give it pending points."
                )
            X = choices.to(model.compute_dtype)
            terms = [self._mean_and_rls_variance(c) for c in X.split(chunk_size)]
            arms = model.transform_inputs(X)
            kernel = as_dense_kernel(model.covar_module, arms)
            lam = float(cache.lam)
            S, W, L_t = cache.S, cache.W, cache.chol
            if W is None:  # full hallucination, no pending point: the model's
                S, W, factor = model.dtc_parts()
                L_t = factor.chol
            return PosteriorState(
                arms=arms,
                kernel=kernel,
                lam=lam,
                X_S=S,
                W=W,
                L=L_t * math.sqrt(lam),
                mu=self._ucb_mean(torch.cat([m for m, _ in terms])),
                s2_0=torch.cat([v for _, v in terms]),
                kdiag=kernel.diag(arms),
                chunk_size=chunk_size,
            )

    def rls_variance(self, X: Tensor) -> Tensor:
        r"""Hallucinated variance ``sigma~^2_t(x) = var_t(x) / lam`` in RLS units.

        Args:
            X: ``batch_shape x q x d`` points (original input space).

        Returns:
            A ``batch_shape x q`` tensor, clamped at zero.
        """
        return self._mean_and_rls_variance(X)[1]

    def posterior_mean(self, X: Tensor) -> Tensor:
        r"""Frozen mean ``mu_fb(x)`` in the outcome space (no transform applied).

        Args:
            X: ``batch_shape x q x d`` points.

        Returns:
            A ``batch_shape x q`` tensor equal to ``model.posterior(X).mean[..., 0]``.
        """
        return self._mean_and_rls_variance(X)[0]

    def rls_covariance(self, X1: Tensor, X2: Tensor) -> Tensor:
        r"""Hallucinated covariance in RLS units (BBKB Eq. 2, spec Sec. 5.2).

        ``k~_t(x, x') = (k(x, x') - z(x)^T z(x')) / lam + z(x)^T (lam A_t)^{-1} z(x')``,
        the full approximate covariance (Nyström residual included), as needed by
        the local rule of Lemma 3. ``O((n1 + n2) m (d + r) + n1 n2 (d + r))``.

        Args:
            X1: ``n1 x d`` points.
            X2: ``n2 x d`` points.

        Returns:
            An ``n1 x n2`` tensor.
        """
        f1 = self._features(X1)
        f2 = self._features(X2)
        K12 = _dense_kernel(self.model, f1.Xt, f2.Xt)
        cov = K12 - f1.P @ f2.P.mT + f1.N @ f2.N.mT
        cache = self._cache()
        if cache.pending is not None:
            cov = cov - self._pending_solve(f1, cache).mT @ self._pending_solve(
                f2, cache
            )
        return cov / cache.lam

    # ------------------------------------------------------------------------------
    # Internals
    # ------------------------------------------------------------------------------

    def _cache(self) -> _FrozenCache:
        model = self.model
        if model.training:  # eval() walks every submodule: not on every call
            model.eval()
        source = model.dtc_predictor()
        old = self._frozen
        X_pending = self.X_pending
        if old is not None and old.source is source:
            if _same_points(old.X_pending, X_pending):
                return old
            if _is_prefix(old.X_pending, X_pending):
                n_old = 0 if old.X_pending is None else old.X_pending.shape[0]
                self._frozen = _build_cache(
                    model,
                    X_pending,
                    self.hallucination,
                    old=old,
                    new_rows=X_pending[n_old:],
                )
                return self._frozen
        self._frozen = _build_cache(model, X_pending, self.hallucination)
        return self._frozen

    def _ucb_mean(self, mean: Tensor) -> Tensor:
        r"""The mean term of the UCB: ``s mu + o``, negated if not ``maximize``."""
        mean = self._sign * mean + self._offset
        return mean if self.maximize else -mean

    def _features(self, X: Tensor) -> _Features:
        return self._features_at(
            self.model.transform_inputs(X.to(self.model.compute_dtype))
        )

    def _features_at(self, Xt: Tensor) -> _Features:
        r""":meth:`_features` of inputs already transformed (``Xt``)."""
        cache = self._cache()
        mean, P, N = linalg.dtc_features(
            cache.predictor, _dense_kernel(self.model, Xt, cache.S)
        )
        return _Features(Xt=Xt, mean=mean, P=P, N=N)

    def _mean_and_rls_variance(self, X: Tensor) -> tuple[Tensor, Tensor]:
        r"""``(mu_fb, sigma~^2_t)``, each ``batch_shape x q``."""
        cache = self._cache()
        Xt = self.model.transform_inputs(X.to(self.model.compute_dtype))
        fused = _fused_marginals(self.model, cache, Xt)
        if fused is None:  # autograd through the kernel module
            f = self._features_at(Xt)
            offset = f.mean
            kdiag = self.model.covar_module(f.Xt, diag=True)
            var_t = linalg.embedding_residual(kdiag, f.P) + f.N.pow(2).sum(-1)
            if cache.pending is not None:
                var_t = var_t - self._pending_solve(f, cache).pow(2).sum(-2)
        else:
            offset, var_t = fused
        mean = _untransform_mean(self.model, self.model.mean_module(Xt) + offset)
        return mean, (var_t / cache.lam).clamp_min(0.0)

    def _pending_solve(self, f: _Features, cache: _FrozenCache) -> Tensor:
        r"""``C^{-1} v(X_p, x)`` (``... x p x q``), ``C C^T = V_pp + lam I``.

        ``v(x, x') = k(x, x') - b(x)^T b(x')`` is the batch-start posterior
        covariance (under the full hallucination ``f.P`` is ``b(x)``).
        """
        pend = cache.pending
        K_xp = _dense_kernel(self.model, f.Xt, pend.Xt)
        v = K_xp - f.P @ pend.P.mT  # ... x q x p
        return torch.linalg.solve_triangular(pend.chol, v.mT, upper=False)


class _Features(NamedTuple):
    Xt: Tensor  # transformed inputs, ... x q x d
    mean: Tensor  # batch-start mean offset a^T k_S(x), ... x q
    P: Tensor  # explained part (b(x), or z(x) with dictionary pending), ... x q x r
    N: Tensor  # L_t^{-1} z(x) with dictionary pending (else no columns)


# ---------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------


def _fused_marginals(
    model: NystromGP, cache: _FrozenCache, Xt: Tensor
) -> tuple[Tensor, Tensor] | None:
    r"""``(mean offset, var_t)`` by the closed-form gradient path, if it applies.

    :func:`~botorch_sketch.acquisition.dtc_marginals.dtc_marginals` for a Gaussian
    kernel without batch dimensions; ``None`` otherwise (the caller's autograd
    path gives the same numbers for any kernel).
    """
    kernel = SquaredExponential.of(model.covar_module)
    if kernel is None:
        return None
    pend = cache.pending
    rows = None if pend is None else PendingRows(Xt=pend.Xt, P=pend.P, chol=pend.chol)
    return dtc_marginals(kernel, Xt, cache.S, cache.predictor, rows)


def _build_cache(
    model: NystromGP,
    X_pending: Tensor | None,
    hallucination: str,
    old: _FrozenCache | None = None,
    new_rows: Tensor | None = None,
) -> _FrozenCache:
    r"""Build (or extend by ``new_rows``) the frozen cache.

    At the batch start the model's folded predictor gives ``a`` and ``B``
    (``O(r^3 + m r^2)`` once per model state; the dictionary hallucination also
    reads the model's embedding map and DTC factor), then
    ``O(p r^2 + m r^2)`` per extension under the dictionary hallucination, or
    ``O(p m (d + r) + p^2 (p + r))`` under the full one.
    """
    with torch.no_grad():
        lam = _noise_level(model)
        source = model.dtc_predictor()
        if old is None:
            start, S, W, L_t, factor = source, None, None, None, None
            if hallucination == "dictionary" or not start.folded:
                S, W, factor = model.dtc_parts()
                L_t = factor.chol
                if not start.folded:  # built for data with gradients
                    start = linalg.dtc_predictor(W, factor)
            else:  # the full hallucination needs the folded predictor only
                S = model.posterior_inducing_points()
            rows, pending = X_pending, None
        else:
            start, L_t, rows, pending = old.start, old.chol, new_rows, old.pending
            S, W, factor = old.S, old.W, old.factor
        if rows is not None and rows.shape[0] > 0:
            Xp = model.transform_inputs(rows.to(model.compute_dtype))
            K_pS = _dense_kernel(model, Xp, S)
            if hallucination == "full":
                P = linalg.dtc_features(start, K_pS)[1]
                pending = _extend_pending(model, pending, Xp, P, lam)
            else:
                L_t = pending_cholesky(L_t, K_pS @ W / lam.sqrt())
        predictor = start
        if hallucination == "dictionary" and L_t is not factor.chol:
            # the dictionary hallucination: z(x), L_t^{-1} z(x)
            M_t = torch.linalg.solve_triangular(L_t, W.mT, upper=False).mT
            predictor = linalg.DTCPredictor(
                basis=torch.cat([start.basis[..., :1], W, M_t], dim=-1),
                num_explained=W.shape[-1],
            )
        p = 0 if X_pending is None else X_pending.shape[0]
        logger.debug("BBKB cache: m=%d, p=%d.", S.shape[-2], p)
        return _FrozenCache(
            source=source,
            X_pending=X_pending,
            S=S,
            W=W,
            start=start,
            predictor=predictor,
            chol=L_t,
            lam=lam,
            pending=pending,
            factor=factor,
        )


def _extend_pending(
    model: NystromGP,
    old: _PendingBlock | None,
    Xt: Tensor,
    P: Tensor,
    lam: Tensor,
) -> _PendingBlock:
    r"""Append ``q`` transformed pending points to the full hallucination's block.

    With ``C_o`` the old ``p x p`` factor, ``B = v(X_old, X_new)`` and
    ``D = v(X_new, X_new) + lam I`` (batch-start posterior covariances
    ``v(x, x') = k(x, x') - b(x)^T b(x')``), the new factor is
    ``[[C_o, 0], [E^T, chol(D - E^T E)]]`` with ``E = C_o^{-1} B``:
    ``O(p^2 q + q^3)``, the same factor as a re-factorisation.
    """
    K_new = _dense_kernel(model, Xt, Xt)
    D = K_new - P @ P.mT
    D = 0.5 * (D + D.mT) + lam * torch.eye(D.shape[-1], dtype=D.dtype, device=D.device)
    if old is None:
        return _PendingBlock(Xt=Xt, P=P, chol=torch.linalg.cholesky(D))
    B = _dense_kernel(model, old.Xt, Xt) - old.P @ P.mT
    E = torch.linalg.solve_triangular(old.chol, B, upper=False)
    S22 = D - E.mT @ E
    C22 = torch.linalg.cholesky(0.5 * (S22 + S22.mT))
    top = torch.cat([old.chol, torch.zeros_like(B)], dim=-1)
    chol = torch.cat([top, torch.cat([E.mT, C22], dim=-1)], dim=-2)
    return _PendingBlock(Xt=torch.cat([old.Xt, Xt]), P=torch.cat([old.P, P]), chol=chol)


def _dense_kernel(model: NystromGP, X1: Tensor, X2: Tensor) -> Tensor:
    r"""``k(X1, X2)`` as a dense tensor, evaluated at once.

    gpytorch's lazily evaluated kernel tensor costs more than the ``q x m`` block
    itself here (about 1.1 ms against 0.45 ms per call for ``q = 8, m = 1000``);
    the acquisition function is evaluated thousands of times per batch.
    """
    with gpytorch.settings.lazily_evaluate_kernels(False):
        return model.covar_module(X1, X2).to_dense()


def _validate_model(model: Any) -> None:
    if not isinstance(model, NystromGP):
        raise UnsupportedError(
            "BatchUpperConfidenceBound needs a NystromGP (frozen Nyström embedding), "
            f"got {type(model).__name__}."
        )
    if model.num_outputs != 1:
        raise UnsupportedError(
            "BatchUpperConfidenceBound supports single-output NystromGP models only "
            f"(got {model.num_outputs} outputs); fit one model per outcome."
        )
    if len(model.batch_shape) > 0:
        raise UnsupportedError(
            "BatchUpperConfidenceBound supports unbatched models only, got batch "
            f"shape {tuple(model.batch_shape)}."
        )
    ot = getattr(model, "outcome_transform", None)
    if ot is not None and not ot._is_linear:
        raise UnsupportedError(
            "BatchUpperConfidenceBound needs a linear outcome transform (e.g. "
            f"Standardize) or none, got {type(ot).__name__}."
        )


def _validate_posterior_transform(
    posterior_transform: PosteriorTransform | None,
) -> tuple[float, float]:
    r"""Return ``(sign, offset)`` of an allowed posterior transform."""
    if posterior_transform is None:
        return 1.0, 0.0
    if not isinstance(posterior_transform, ScalarizedPosteriorTransform):
        raise UnsupportedError(
            "BatchUpperConfidenceBound supports only a ScalarizedPosteriorTransform "
            f"with weight +1 or -1, got {type(posterior_transform).__name__}."
        )
    w = posterior_transform.weights
    if w.numel() != 1 or float(w.abs().reshape(())) != 1.0:
        raise UnsupportedError(
            "BatchUpperConfidenceBound supports a ScalarizedPosteriorTransform with "
            f"a single weight +1 or -1, got weights {w.tolist()}."
        )
    return float(w.reshape(())), float(posterior_transform.offset)


def _noise_level(model: NystromGP) -> Tensor:
    r"""``lam`` in model units: the homoscedastic noise (mean training noise for a
    fixed-noise likelihood), a scalar in the model's dtype."""
    noise = model.likelihood.noise.detach()
    if isinstance(model.likelihood, FixedNoiseGaussianLikelihood):
        return noise.mean()
    return noise.reshape(-1)[0]


def _outcome_noise(model: NystromGP, lam: Tensor) -> Tensor:
    r"""``lam`` in the original outcome units (undo a linear outcome transform)."""
    ot = getattr(model, "outcome_transform", None)
    if ot is None:
        return lam
    with torch.no_grad():
        ot.eval()
        one = torch.ones(1, 1, dtype=lam.dtype, device=lam.device)
        _, var = ot.untransform(Y=torch.zeros_like(one), Yvar=lam * one)
    return var.reshape(())


def _untransform_mean(model: NystromGP, mean_t: Tensor) -> Tensor:
    ot = getattr(model, "outcome_transform", None)
    if ot is None:
        return mean_t
    ot.eval()
    mean, _ = ot.untransform(mean_t.unsqueeze(-1))
    return mean.squeeze(-1)


def _input_dim(model: NystromGP) -> int:
    return model.input_dim


def _same_points(A: Tensor | None, B: Tensor | None) -> bool:
    if A is None or B is None:
        return A is None and B is None
    return A.shape == B.shape and torch.equal(A, B)


def _is_prefix(A: Tensor | None, B: Tensor | None) -> bool:
    r"""Whether the rows of ``A`` are the first rows of ``B`` (``None`` = no rows)."""
    if B is None:
        return False
    if A is None:
        return True
    n = A.shape[0]
    return n <= B.shape[0] and torch.equal(A, B[:n].to(A))
