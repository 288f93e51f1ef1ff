r"""The DTC posterior of :class:`~botorch_sketch.models.nystrom.NystromGP` as operators.

With the dictionary's embedding ``z(x) = K_S^{+1/2} k_S(x)`` and the factor of
``A = I + Z^T N^{-1} Z`` (:func:`~botorch_sketch.linalg.dtc_factor`), the DTC
posterior at ``q`` test points (BBKB Eqs. 1-3) is

    mean = m(X) + Z_X A^{-1} Z^T N^{-1} (y - m(X_train))            q
    cov  = K_XX - Z_X Z_X^T + U U^T,   U = Z_X L^{-T}               q x q

(:func:`~botorch_sketch.linalg.dtc_features` gives the offset and the covariance's
low-rank factors, ``Z_X Z_X^T - U U^T`` folded into one ``P P^T`` where the data
carry no gradients).
Here the covariance becomes a ``LinearOperator`` (:func:`dtc_covariance`) and
posterior samples at many candidates are drawn without a ``q x q`` matrix
(:func:`sample_dtc_latent`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from botorch.posteriors import Posterior
from botorch.posteriors.gpytorch import GPyTorchPosterior
from botorch.posteriors.transformed import TransformedPosterior
from botorch.sampling.pathwise.features import gen_kernel_features
from botorch.utils.sampling import manual_seed
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from gpytorch.means import Mean
from gpytorch.module import Module
from linear_operator.operators import (
    DenseLinearOperator,
    LinearOperator,
    LowRankRootLinearOperator,
    MatmulLinearOperator,
    SumLinearOperator,
)
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

from botorch_sketch import linalg
from botorch_sketch.models.kernels import ard_equivalent

#: Joint posteriors of at least this many points keep a lazy low-rank covariance.
LAZY_COVARIANCE_MIN_POINTS = 256


def dtc_covariance(K: LinearOperator, P: Tensor, N: Tensor) -> LinearOperator:
    r"""The DTC covariance ``K - P P^T + N N^T``.

    ``K`` is the ``... x q x q`` prior covariance, ``P`` and ``N`` the ``... x q x r_p``
    and ``... x q x r_n`` factors of :func:`~botorch_sketch.linalg.dtc_features`
    (``N`` has no columns for a folded predictor).

    For ``q >= LAZY_COVARIANCE_MIN_POINTS`` points the result stays a lazy sum of
    the kernel and the low-rank terms, so marginal variances cost ``O(q r)`` (Ax
    predicts thousands of points at once); below, it is dense (symmetrized) and
    factored lazily with gpytorch's jitter, as for ``SingleTaskGP`` (a dense tensor
    would be Cholesky-factored without jitter by torch's ``MultivariateNormal``,
    which fails for nearly repeated test points).
    """
    if K.shape[-1] >= LAZY_COVARIANCE_MIN_POINTS:
        terms = [K, MatmulLinearOperator(P, -P.mT)]
        if N.shape[-1] > 0:
            terms.append(LowRankRootLinearOperator(N))
        return SumLinearOperator(*terms)
    dense = K.to_dense() - P @ P.mT + N @ N.mT
    return DenseLinearOperator(0.5 * (dense + dense.mT))


#: Rows per block of :func:`sample_dtc_joint`'s lower-triangle products.
JOINT_BLOCK_ROWS = 1024


def sample_dtc_joint(
    mean: Tensor,
    K: Tensor,
    P: Tensor,
    N: Tensor,
    num_samples: int,
    generator: torch.Generator | None = None,
    block_rows: int = JOINT_BLOCK_ROWS,
    overwrite_K: bool = False,
) -> Tensor:
    r"""Exact joint samples of ``N(mean, K - P P^T + N N^T)`` at ``A`` points.

    The DTC posterior's covariance (:func:`dtc_covariance`; with every training
    point in the dictionary, the exact GP's) is formed densely, but only its
    lower triangle: the low-rank products are taken by blocks of
    ``block_rows`` rows against the columns up to the block's diagonal, in
    place on the kernel matrix, which is about half the flops of ``P P^T``
    (``A^2 r`` instead of ``2 A^2 r``) and no ``A x A`` temporaries. The
    Cholesky factor (``A^3 / 3``, gpytorch's ``psd_safe_cholesky`` with its
    jitter) reads only that triangle. Then ``f = mean + L eps`` with
    ``eps ~ N(0, I_A)`` drawn as ``batch_shape x A x num_samples`` from
    ``generator``.

    Args:
        mean: ``batch_shape x A`` posterior mean.
        K: ``batch_shape x A x A`` dense prior covariance.
        P: ``batch_shape x A x r_p`` factor subtracted.
        N: ``batch_shape x A x r_n`` factor added (``r_n`` may be 0).
        num_samples: Number of joint samples.
        generator: Optional ``torch.Generator`` (CPU) of ``eps``.
        block_rows: Rows per block of the triangle's products.
        overwrite_K: Form the covariance in ``K``'s storage (its lower triangle
            is overwritten) instead of a copy.

    Returns:
        A ``num_samples x batch_shape x A`` tensor.
    """
    cov = K if overwrite_K else K.clone()
    A = cov.shape[-1]
    for start in range(0, A, block_rows):
        stop = min(start + block_rows, A)
        rows = cov[..., start:stop, :stop]
        rows.sub_(P[..., start:stop, :] @ P[..., :stop, :].mT)
        if N.shape[-1] > 0:
            rows.add_(N[..., start:stop, :] @ N[..., :stop, :].mT)
    chol = psd_safe_cholesky(cov)
    eps = torch.randn(
        *cov.shape[:-2], A, num_samples, generator=generator, dtype=cov.dtype
    ).to(cov.device)
    samples = mean.unsqueeze(-1) + chol @ eps  # batch_shape x A x num_samples
    return samples.movedim(-1, 0)


def sample_dtc_latent(
    X: Tensor,
    factor: linalg.DTCFactor,
    embed: Callable[[Tensor], Tensor],
    mean_module: Mean,
    covar_module: Module,
    num_outputs: int,
    num_samples: int,
    generator: torch.Generator | None = None,
    chunk_size: int = 16384,
) -> Tensor:
    r"""Samples of the latent function at ``A`` candidates, ``O(A m)`` memory per chunk.

    With one ``eps ~ N(0, I_r)`` shared by all candidates and independent
    ``xi(x) ~ N(0, 1)``,

        f(x) = mean(x) + (L^{-1} z(x))^T eps + sqrt(k(x,x) - ||z(x)||^2) xi(x).

    The first two terms are exact (their covariance is the embedding part
    ``z^T A^{-1} z'`` of the DTC posterior); the Nyström residual is sampled as
    independent per-point noise: exact marginals, its off-diagonal correlations
    (``K** - Q**``) dropped.

    Args:
        X: ``A x d`` transformed candidates.
        factor: The posterior's :class:`~botorch_sketch.linalg.DTCFactor`,
            ``(m) x ...``.
        embed: ``X -> z(X)``, the dictionary's embedding, ``(m) x c x r``.
        mean_module: The prior mean.
        covar_module: The kernel.
        num_outputs: ``m``.
        num_samples: Number of joint samples.
        generator: Optional ``torch.Generator``.
        chunk_size: Candidates per chunk.

    Returns:
        A ``num_samples x A x m`` tensor in model (transformed outcome) units.
    """
    dtype = X.dtype
    L = factor.chol
    r = L.shape[-1]
    eps = torch.randn(num_samples, *L.shape[:-2], r, generator=generator, dtype=dtype)
    eps = eps.to(L.device)
    # coef^T L^{-1} z(x) and eps^T L^{-1} z(x) are z(x)^T u with u = L^{-T} [coef |
    # eps^T]: one r x r solve for all candidates (O(A r (1 + S)) products instead
    # of whitening every candidate, O(A r^2)).
    rhs = torch.cat([factor.coef.unsqueeze(-1), eps.movedim(0, -1)], dim=-1)
    u = torch.linalg.solve_triangular(L.mT, rhs, upper=True)  # (m) x r x (1 + S)
    chunks = []
    for start in range(0, X.shape[0], chunk_size):
        Xc = X[start : start + chunk_size]
        if num_outputs > 1:
            Xc = Xc.unsqueeze(0).expand(num_outputs, *Xc.shape)
        Zc = embed(Xc)  # (m) x c x r
        proj = Zc @ u  # (m) x c x (1 + S)
        mean = mean_module(Xc) + proj[..., 0]
        resid = linalg.embedding_residual(covar_module(Xc, diag=True), Zc)
        xi = torch.randn(
            num_samples, *resid.shape, generator=generator, dtype=dtype
        ).to(resid.device)
        f = mean + proj[..., 1:].movedim(-1, 0)
        f = f + resid.sqrt() * xi
        chunks.append(f.unsqueeze(-1) if num_outputs == 1 else f.transpose(-1, -2))
    return torch.cat(chunks, dim=-2)


def append_rows(old: Tensor, new: Tensor, batch: torch.Size, dims: int) -> Tensor:
    r"""``old`` and ``new`` concatenated along their last ``dims``-th dimension.

    Both are first expanded to the broadcast ``batch`` shape (leading fantasy
    dimensions): ``dims = 2`` for ``... x n x d`` inputs, ``1`` for ``... x n``
    targets and noises.
    """
    event = -dims
    return torch.cat(
        [
            old.expand(*batch, *old.shape[event:]),
            new.expand(*batch, *new.shape[event:]),
        ],
        dim=event,
    )


def same_key(a: tuple, b: tuple) -> bool:
    r"""Whether two ``(dictionary, hyperparameters)`` cache keys are equal."""
    idx_a, hyper_a = a
    idx_b, hyper_b = b
    return (
        idx_a.shape == idx_b.shape
        and torch.equal(idx_a, idx_b)
        and len(hyper_a) == len(hyper_b)
        and all(torch.equal(x, y) for x, y in zip(hyper_a, hyper_b, strict=True))
    )


def cast_posterior(posterior: Posterior, dtype: torch.dtype) -> Posterior:
    r"""``posterior`` with its moments and samples in ``dtype``.

    The model computes in its own dtype and returns the data's, as
    ``SingleTaskGP`` does for float32 data. A ``GPyTorchPosterior`` gets its
    distribution's mean and (lazy) covariance cast; a ``TransformedPosterior``
    its base posterior and transforms' outputs. The cast is differentiable.
    """
    if isinstance(posterior, TransformedPosterior):
        sample, mean, variance = (
            posterior._sample_transform,
            posterior._mean_transform,
            posterior._variance_transform,
        )
        return TransformedPosterior(
            cast_posterior(posterior._posterior, dtype),
            sample_transform=lambda s: sample(s).to(dtype),
            mean_transform=None
            if mean is None
            else (lambda m, v: mean(m, v).to(dtype)),
            variance_transform=None
            if variance is None
            else (lambda m, v: variance(m, v).to(dtype)),
        )
    if not isinstance(posterior, GPyTorchPosterior):
        return posterior
    mvn = posterior.distribution
    if mvn.mean.dtype == dtype:
        return posterior
    mean, cov = mvn.mean.to(dtype), mvn.lazy_covariance_matrix.to(dtype)
    if isinstance(mvn, MultitaskMultivariateNormal):
        cast = MultitaskMultivariateNormal(mean, cov, interleaved=mvn._interleaved)
    else:
        cast = MultivariateNormal(mean, cov)
    return GPyTorchPosterior(cast)


#: Random Fourier features of a prior path (:func:`prior_feature_paths`;
#: BoTorch's default for ``draw_kernel_feature_paths``).
DEFAULT_PATHWISE_FEATURES = 1024


def prior_feature_paths(
    kernel: Module,
    dim: int,
    num_samples: int,
    num_features: int = DEFAULT_PATHWISE_FEATURES,
    generator: torch.Generator | None = None,
) -> Callable[[Tensor], Tensor]:
    r"""``num_samples`` zero-mean prior paths ``f0(x) = phi(x)^T theta`` of
    ``kernel``: ``phi`` the ``F`` random Fourier features of BoTorch's
    ``gen_kernel_features`` (``k(x, x') ~ phi(x)^T phi(x')``; RBF, Matérn, their
    ``ScaleKernel``, and :class:`~botorch_sketch.models.kernels.GroupedRBFKernel`
    through its ARD equivalent), ``theta ~ N(0, I_F)``.

    Args:
        kernel: A stationary gpytorch kernel on ``dim`` inputs.
        dim: Input dimension ``d``.
        num_samples: Number ``k`` of paths.
        num_features: Number ``F`` of features (even).
        generator: Optional ``torch.Generator`` (CPU) of the feature frequencies
            (through a seed) and of ``theta``.

    Returns:
        A function mapping ``A x d`` inputs to the ``A x k`` path values.
    """
    seed = int(torch.randint(2**31 - 1, (1,), generator=generator))
    with manual_seed(seed):
        features = gen_kernel_features(
            ard_equivalent(kernel), num_inputs=dim, num_outputs=num_features
        )
    like = next(iter(kernel.parameters()), None)
    dtype = torch.float64 if like is None else like.dtype
    theta = torch.randn(
        features.num_outputs, num_samples, generator=generator, dtype=dtype
    )

    def paths(X: Tensor) -> Tensor:
        return features(X) @ theta.to(X)

    return paths
