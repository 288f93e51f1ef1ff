r"""A fitted DTC posterior over a finite arm set, as a frozen BBKB batch-start state.

The engine's selectors (:mod:`botorch_sketch.bbkb.selection`) and stopping rules
(:mod:`botorch_sketch.bbkb.stopping`) read a :class:`~botorch_sketch.bbkb.state.
BatchState`. :func:`~botorch_sketch.bbkb.state.rebuild` and
:class:`~botorch_sketch.bbkb.state.IncrementalState` build one from the pull counts
and reward sums of the arms, with a dictionary of arms. A fitted sparse GP (e.g. a
:class:`~botorch_sketch.models.NystromGP` behind the BoTorch optimizer over
``choices``) has neither: its data and its dictionary ``S`` (``m`` inducing points)
need not be arms, and its mean includes a prior mean and an outcome transform.
:class:`PosteriorState` is the same interface built from the posterior itself.

With the Nyström map ``z(x) = W^T k_S(x)`` (``r`` entries) and the model's factor
``A = I + Z^T N^{-1} Z`` (noise ``N``, scalar noise level ``lam``; BBKB App. A.1),

    V_fb     = lam A (+ Z_p^T Z_p for hallucinated pending points) = L L^T   (r x r)
    s2_0(a)  = (k(a, a) - ||z(a)||^2) / lam + z(a)^T V_fb^{-1} z(a)          (Eq. 3)
             = var_DTC(a) / lam                                  (RLS units)

and hallucinating an arm adds ``z(a) z(a)^T`` to ``V``, the BBKB update of Alg. 1
L7 (with ``N = lam I`` and one observation per training point, ``V_fb`` is
exactly the engine's ``sum_a n_a z(a) z(a)^T + lam I``). The frozen means ``mu``
and the batch-start variances ``s2_0`` are given by the caller (the model's
posterior at the arms); the embeddings of arms are computed on demand, in row
chunks, so the state holds ``O(A)`` numbers besides the arms: nothing of size
``A x m``, ``A x r`` or ``A x A`` (only the optional :attr:`PosteriorState.Z`,
used by the lazy selector, forms ``A x r``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from botorch_sketch import linalg
from botorch_sketch.bbkb.batch_state import (
    DEFAULT_CHUNK_SIZE,
    FactoredState,
    row_chunks,
)
from botorch_sketch.bbkb.dense_kernel import DenseKernel

__all__ = ["PosteriorState"]


@dataclass(eq=False)
class PosteriorState(FactoredState):
    r"""Frozen batch-start state of a fitted DTC posterior over ``A`` arms.

    The :class:`~botorch_sketch.bbkb.state.BatchState` interface (module
    docstring) with the dictionary given as points, not arm indices. It has no
    ``S_idx``, ``counts`` or ``reward_sums``: the data live in the model, and
    only the selection and the stopping rules read this state.

    Attributes:
        arms: ``A x d`` arms (in the kernel's input space).
        kernel: The prior covariance (:class:`~botorch_sketch.bbkb.dense_kernel.
            DenseKernel`).
        lam: Noise level ``lam > 0`` (the RLS units' scale).
        X_S: ``m x d`` dictionary points.
        W: ``m x r`` embedding map, ``z(x) = W^T k_S(x)``.
        L: ``r x r`` lower Cholesky factor of ``V_fb``.
        mu: ``A`` frozen means.
        s2_0: ``A`` batch-start variances (RLS units, Eq. 3).
        kdiag: ``A`` prior variances ``k(a, a)``.
        chunk_size: Rows of ``arms`` evaluated at once.
    """

    arms: Tensor
    kernel: DenseKernel
    lam: float
    X_S: Tensor
    W: Tensor
    L: Tensor
    mu: Tensor
    s2_0: Tensor
    kdiag: Tensor
    chunk_size: int = DEFAULT_CHUNK_SIZE
    _Vinv: Tensor | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        A, m, r = self.arms.shape[0], self.X_S.shape[0], self.W.shape[-1]
        if self.arms.dim() != 2 or A == 0:
            raise ValueError(
                f"arms must be a non-empty A x d tensor, got {tuple(self.arms.shape)}."
            )
        if self.W.shape != (m, r) or self.L.shape != (r, r):
            raise ValueError(
                f"W must be m x r and L r x r with m={m} dictionary points, got "
                f"{tuple(self.W.shape)} and {tuple(self.L.shape)}."
            )
        for name in ("mu", "s2_0", "kdiag"):
            if getattr(self, name).shape != (A,):
                raise ValueError(
                    f"{name} must have shape ({A},), got "
                    f"{tuple(getattr(self, name).shape)}."
                )
        if not self.lam > 0:
            raise ValueError(f"lam must be positive, got {self.lam}.")

    @property
    def dict_size(self) -> int:
        """Dictionary size ``m``."""
        return self.X_S.shape[0]

    @property
    def dictionary_points(self) -> Tensor:
        r"""``m x d`` dictionary points :attr:`X_S`."""
        return self.X_S

    @property
    def resid(self) -> Tensor:
        r"""``A`` Nyström residuals ``max(k(a, a) - ||z(a)||^2, 0) / lam``.

        Embeds the arms chunk by chunk, ``O(A m (d + r))`` time, ``O(A)`` memory.
        """
        out = torch.empty_like(self.kdiag)
        for lo, hi in row_chunks(self.num_arms, self.chunk_size):
            idx = torch.arange(lo, hi, device=self.arms.device)
            out[lo:hi] = self.resid_at(idx)
        return out

    def embed(self, idx: Tensor | None = None) -> Tensor:
        r"""``n x r`` embeddings ``z(a) = W^T k_S(a)`` of the arms ``idx`` (all if
        ``None``), ``O(n m (d + r))`` in chunks of :attr:`chunk_size` rows."""
        return self._embed_rows(self.arms if idx is None else self.arms[idx], self.X_S)

    def resid_at(self, idx: Tensor, Z_idx: Tensor | None = None) -> Tensor:
        r"""Residuals :attr:`resid` of the arms ``idx`` only (``O(n m (d + r))``)."""
        Z_idx = self.embed(idx) if Z_idx is None else Z_idx
        return linalg.embedding_residual(self.kdiag[idx], Z_idx) / self.lam
