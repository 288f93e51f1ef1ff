r"""BBKB's state across batches: one engine for the bandit loop, BoTorch and Ax.

:class:`BBKBEngine` is Algorithm 1 of Calandriello et al. (ICML 2020) as a state
machine over a finite arm set, driven from outside:

1. :meth:`~BBKBEngine.start` with the initial pulls (Alg. 1 L1; dictionary
   ``S = unique(initial arms)``, App. B.1, or BLESS);
2. :meth:`~BBKBEngine.next_batch`: one batch with the frozen batch-start state
   (L4-L8, :func:`~botorch_sketch.bbkb.selection.select_batch`);
3. :meth:`~BBKBEngine.observe` the batch's rewards (L17): pull counts and reward
   sums, and ``beta~``'s running sum with the batch-start variances of the pulled
   arms (:mod:`~botorch_sketch.bbkb.schedules`);
4. at the next :meth:`~BBKBEngine.next_batch`, before selecting: the kernel
   refit when one is due (:mod:`~botorch_sketch.bbkb.learning`), the dictionary
   resampled among all pulled arms with the batch-start variances (L11-L16,
   :func:`~botorch_sketch.linalg.sample_dictionary`) and the state moved to it
   incrementally or rebuilt (L18, :mod:`~botorch_sketch.bbkb.state`).

Step 4 runs lazily, so a run that stops after its last :meth:`observe` ends on
its last batch-start state, and draws happen in the same order whoever drives
the engine: :func:`~botorch_sketch.loops.bbkb.run_bbkb` (an oracle in a loop)
and the Ax generator of a finite library (one call per batch, with the engine
kept between calls and :meth:`~BBKBEngine.checkpoint` in Ax's generator state)
make the same choices from the same pulls and seed.
"""

from __future__ import annotations

import base64
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch import linalg
from botorch_sketch.bbkb.config import RESPARSIFY_MODES, BBKBConfig
from botorch_sketch.bbkb.dense_kernel import DenseKernel, as_dense_kernel
from botorch_sketch.bbkb.learning import KernelFit, KernelLearner, KernelLearning
from botorch_sketch.bbkb.schedules import make_schedule
from botorch_sketch.bbkb.selection import StepRecord, select_batch
from botorch_sketch.bbkb.state import (
    BatchState,
    IncrementalState,
    KernelColumnCache,
    rebuild,
)
from botorch_sketch.bbkb.stopping import make_rule

logger = logging.getLogger(__name__)

__all__ = ["BBKBConfig", "BBKBEngine", "RESPARSIFY_MODES", "validate_arms"]


def validate_arms(arms: Tensor, lam: float, dtype: torch.dtype) -> Tensor:
    r"""Check an ``A x d`` arm set and the ridge; return the arms in ``dtype``."""
    if not isinstance(arms, Tensor) or arms.dim() != 2:
        shape = tuple(arms.shape) if isinstance(arms, Tensor) else type(arms).__name__
        raise ValueError(f"arms must be an A x d tensor, got {shape}.")
    if arms.shape[0] == 0:
        raise ValueError("the candidate set is empty (A = 0).")
    if not arms.is_floating_point():
        raise ValueError(f"arms must be floating point, got {arms.dtype}.")
    if not torch.isfinite(arms).all():
        raise ValueError("arms contain NaN or infinite values.")
    if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be positive, got {lam}.")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}.")
    return arms.to(dtype)


class _StateKeeper:
    """Builds the next batch-start state on the incremental or the rebuild path."""

    def __init__(
        self,
        arms: Tensor,
        kernel: DenseKernel,
        lam: float,
        mode: str,
        embedding_bytes: int,
        chunk_size: int,
        kernel_cache: bool,
        kernel_cache_bytes: int,
    ) -> None:
        self.arms, self.kernel = arms, kernel
        self.lam, self.kdiag, self.mode = lam, kernel.diag(arms), mode
        self.embedding_bytes, self.chunk_size = embedding_bytes, chunk_size
        self.cache_opts = (kernel_cache, kernel_cache_bytes)
        self.cache: KernelColumnCache | None = None
        self.incremental: IncrementalState | None = None

    def _fits(self, m: int) -> bool:
        need = 1.5 * self.arms.shape[0] * max(m, 1) * self.arms.element_size()
        return need <= self.embedding_bytes

    def __call__(self, S: Tensor, counts: Tensor, sums: Tensor) -> BatchState:
        m = torch.unique(S).numel()
        if self.mode == "incremental" or (self.mode == "auto" and self._fits(m)):
            if self.incremental is None:
                self.incremental = IncrementalState(
                    self.arms, self.kernel, S, counts, sums, self.lam, kdiag=self.kdiag,
                    chunk_size=self.chunk_size,
                )  # fmt: skip
            else:
                self.incremental.resparsify(S, counts, sums)
            return self.incremental
        self.incremental = None  # over the memory budget: bounded-memory rebuilds
        return self.rebuilt(S, counts, sums)

    def discard_incremental(self) -> None:
        """Forget the incremental state (the next call builds a fresh one)."""
        self.incremental = None

    def rebuilt(self, S: Tensor, counts: Tensor, sums: Tensor) -> BatchState:
        """A state built from scratch (:func:`rebuild`), nothing kept in place."""
        if self.cache is None and self.cache_opts[0]:
            self.cache = KernelColumnCache(
                self.arms, self.kernel, max_bytes=self.cache_opts[1]
            )
        return rebuild(
            self.arms, self.kernel, S, counts, sums, self.lam, kdiag=self.kdiag,
            chunk_size=self.chunk_size, cache=self.cache,
        )  # fmt: skip


class BBKBEngine:
    r"""Algorithm 1 of BBKB on ``A`` arms, one batch at a time (module docstring).

    Args:
        arms: ``A x d`` candidate set (any device; cast to the config's
            ``dtype``).
        kernel: The prior covariance, any ``gpytorch.kernels.Kernel`` without batch
            dimensions, evaluated through a frozen copy
            (:class:`~botorch_sketch.bbkb.dense_kernel.DenseKernel`).
        lam: Ridge ``lam`` (the noise variance of one reward).
        config: The options (:class:`~botorch_sketch.bbkb.config.BBKBConfig`;
            default: its defaults).
        horizon: The run's horizon ``T`` if known (``beta~``'s default
            ``delta = 1 / (T + 1)``, :meth:`BBKBConfig.confidence`).
        generator: ``torch.Generator`` of the dictionary draws and the refits'
            subsamples (a fresh unseeded one if ``None``).
        **options: Fields of :class:`BBKBConfig` that replace those of
            ``config`` (e.g. ``C=3.0``).

    See :func:`~botorch_sketch.loops.bbkb.run_bbkb` for the meaning of every option
    in a run.
    """

    def __init__(
        self,
        arms: Tensor,
        kernel: Kernel,
        lam: float,
        config: BBKBConfig | None = None,
        *,
        horizon: int | None = None,
        generator: torch.Generator | None = None,
        **options: Any,
    ) -> None:
        if config is not None and not isinstance(config, BBKBConfig):
            raise TypeError(f"config must be a BBKBConfig, got {config!r}.")
        cfg = (config or BBKBConfig()).updated(**options)
        self.arms = validate_arms(arms, lam, cfg.dtype)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {generator!r}.")
        self.config = cfg
        C = cfg.threshold
        self.rule = make_rule(cfg.rule, C)
        self.lam, self.q_bar, self.repeats = float(lam), float(cfg.q_bar), cfg.repeats
        xi = math.sqrt(lam) if cfg.xi is None else cfg.xi
        self.schedule = make_schedule(
            cfg.beta, C=C, lam=lam, xi=xi, delta=cfg.confidence(horizon), F=cfg.F
        )
        self.lazy, self.pool_size = cfg.lazy, cfg.pool_size
        self.generator = generator if generator is not None else torch.Generator()
        if generator is None:
            self.generator.seed()
        #: Seed of the arms' fixed uniforms (``resampling="coupled"``), drawn
        #: from the run's generator; ``None`` with independent coins.
        self.coupling_seed: int | None = None
        if cfg.resampling == "coupled":
            self.coupling_seed = int(
                torch.randint(2**62, (1,), generator=self.generator)
            )
        self._uniforms: Tensor | None = None
        self.learner = _make_learner(cfg.learn, kernel, self.arms)
        self._keeper = self._keeper_for(kernel if self.learner is None else None)
        A = self.arms.shape[0]
        self.counts = self.arms.new_zeros(A)
        self.reward_sums = self.arms.new_zeros(A)
        self._state: BatchState | None = None
        self._state_inputs: tuple[Tensor, Tensor, Tensor] | None = None
        self._stale = False  # rewards observed since the state was built

    # --------------------------------------------------------------- properties
    @property
    def started(self) -> bool:
        """Whether :meth:`start` ran."""
        return self._state is not None

    @property
    def state(self) -> BatchState:
        """The current batch-start state (Alg. 1's frozen state of the batch)."""
        if self._state is None:
            raise RuntimeError("call start() with the initial pulls first.")
        return self._state

    @property
    def num_observations(self) -> int:
        """Number of rewards observed so far."""
        return int(self.counts.sum())

    @property
    def alpha(self) -> float:
        """UCB multiplier ``alpha~`` of the next batch."""
        return self.schedule.alpha

    @property
    def kernel(self) -> Kernel:
        """The kernel in use (with learning: the learned trainable copy)."""
        return self._keeper.kernel.module

    @property
    def arm_uniforms(self) -> Tensor | None:
        r"""The ``A`` fixed uniforms of ``resampling="coupled"`` (on the CPU,
        the compute dtype; from :attr:`coupling_seed`), else ``None``."""
        if self.coupling_seed is None:
            return None
        if self._uniforms is None:
            g = torch.Generator().manual_seed(self.coupling_seed)
            A = self.arms.shape[0]
            self._uniforms = torch.rand(A, generator=g, dtype=self.arms.dtype)
        return self._uniforms

    @property
    def kernel_fits(self) -> list[KernelFit]:
        """The refits so far (empty without learning)."""
        return [] if self.learner is None else list(self.learner.history)

    # ------------------------------------------------------------------ protocol
    def start(
        self,
        init: Tensor,
        rewards: Tensor,
        init_dictionary: str | Tensor = "all",
    ) -> None:
        r"""Record the initial pulls and build the first state (Alg. 1 L1).

        Args:
            init: ``n0`` arm indices (repeats allowed).
            rewards: Their ``n0`` rewards.
            init_dictionary: ``"all"`` (the distinct initial arms, App. B.1),
                ``"bless"`` (:func:`~botorch_sketch.linalg.bless_dictionary` on
                them) or explicit arm indices.
        """
        if self.started:
            raise RuntimeError("the engine was already started.")
        idx, y = self._checked(init, rewards)
        if isinstance(init_dictionary, str) and init_dictionary not in ("all", "bless"):
            raise ValueError(f"unknown init_dictionary {init_dictionary!r}.")
        self._record(idx, y)
        self._maybe_refit()
        uniq = torch.unique(idx)
        if isinstance(init_dictionary, str):
            if init_dictionary == "all":
                S = uniq
            elif init_dictionary == "bless":
                kernel = self._keeper.kernel
                keep = linalg.bless_dictionary(
                    self.arms[uniq], kernel, kernel.diag, self.lam, self.q_bar,
                    self.generator,
                )  # fmt: skip
                S = uniq[keep]
            else:
                raise ValueError(f"unknown init_dictionary {init_dictionary!r}.")
        else:
            S = torch.as_tensor(init_dictionary, dtype=torch.long)
        self._set_state(S)
        self.schedule.initialize(self._state, idx)

    def next_batch(
        self,
        max_batch_size: int | None = None,
        *,
        min_batch_size: int = 1,
        allow_repeats: bool = True,
        excluded: Tensor | None = None,
        pending: Sequence[int] = (),
        recorder: Callable[[StepRecord], None] | None = None,
        maximize: bool = True,
    ) -> list[int]:
        r"""The next batch (Alg. 1 L4-L8), after the lazy resampling of step 4.

        Args:
            max_batch_size: Optional cap on the batch size.
            min_batch_size: Fill a batch the rule ends early up to this size.
            allow_repeats: Allow an arm several times in the batch.
            excluded: Optional ``A`` boolean mask of arms never selected.
            pending: Arms under evaluation (hallucinated before the first choice).
            recorder: Callback receiving a
                :class:`~botorch_sketch.bbkb.selection.StepRecord` per step.
            maximize: ``False`` selects by ``-mu + alpha sigma~`` (the rewards
                are then losses). Everything else about the state is unchanged:
                variances, ``beta~`` and the dictionary do not depend on the sign.

        Returns:
            The chosen arm indices, in selection order.
        """
        if self._stale:
            self._resample()
        return select_batch(
            self.state if maximize else _NegatedMean(self.state),
            self.alpha,
            self.rule,
            max_batch_size=max_batch_size,
            min_batch_size=min_batch_size,
            allow_repeats=allow_repeats,
            lazy=self.lazy,
            recorder=recorder,
            pool_size=self.pool_size,
            excluded=excluded,
            pending=pending,
        )

    def observe(self, arms: Tensor, rewards: Tensor) -> None:
        r"""Record rewards of a batch chosen from the current state (Alg. 1 L17).

        ``beta~``'s running sum takes the batch-start variances of the pulled arms;
        the dictionary is resampled at the next :meth:`next_batch`.
        """
        idx, y = self._checked(arms, rewards)
        self.schedule.update(self.state.s2_0[idx])
        self._record(idx, y)
        self._stale = True

    def predict(
        self,
        X: Tensor,
        train_X: Tensor | None = None,
        train_rewards: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        r"""Posterior mean and variance of the reward at any points ``X``.

        The DTC posterior with the current kernel and dictionary ``S`` (BBKB
        Eq. 1 and Eq. 3, ``var = lam s2``) of every observation so far, or of
        ``train_X, train_rewards`` instead (e.g. a cross-validation fold),
        computed on the small arm set ``S u train u X``: ``O((m + n + j) m r)``,
        no ``A``-sized work.

        Args:
            X: ``j x d`` points in the arms' space (arms or not).
            train_X: Optional ``n x d`` training points.
            train_rewards: Their ``n`` rewards.

        Returns:
            ``(mean, variance)``, two ``j`` tensors.
        """
        d = self.arms.shape[-1]
        if X.dim() != 2 or X.shape[-1] != d:
            raise ValueError(f"X must be j x {d}, got {tuple(X.shape)}.")
        if train_X is None:
            pulled = (self.counts > 0).nonzero().squeeze(-1)
            rows = self.arms[pulled]
            counts, sums = self.counts[pulled], self.reward_sums[pulled]
        else:
            rows = train_X.to(self.arms)
            sums = torch.as_tensor(train_rewards).to(self.arms).reshape(-1)
            if rows.dim() != 2 or rows.shape != (sums.numel(), d):
                raise ValueError("train_X must be n x d with n train_rewards.")
            counts = torch.ones_like(sums)
        S = self.state.S_idx
        m, X = S.numel(), X.to(self.arms)
        pad = X.new_zeros(m + X.shape[0])
        sub = rebuild(
            torch.cat([self.arms[S], rows, X]), self._keeper.kernel,
            torch.arange(m, device=X.device), torch.cat([pad[:m], counts, pad[m:]]),
            torch.cat([pad[:m], sums, pad[m:]]), self.lam,
        )  # fmt: skip
        j = m + rows.shape[0]
        return sub.mu[j:], self.lam * sub.s2_0[j:]

    # ------------------------------------------------------------- checkpoints
    def checkpoint(self) -> dict[str, Any]:
        r"""JSON-serialisable state besides the pulls (with which it restores).

        Holds the dictionary of the current state, the schedule's running sums,
        the kernel's hyperparameters (with learning: its refit bookkeeping), the
        generator's state and the number of observations it belongs to.
        :meth:`restore` with the same arms, options and pulls continues exactly
        as this engine would, up to the rounding of a rebuilt (instead of an
        incrementally updated) state.
        """
        state = self.state
        out: dict[str, Any] = {
            "num_observations": self.num_observations,
            "stale": self._stale,
            "dictionary": state.S_idx.tolist(),
            "schedule": {k: v for k, v in vars(self.schedule).items() if _is_number(v)},
            "kernel": {
                name: p.tolist()
                for name, p in self._keeper.kernel.module.named_parameters()
            },
            "generator": base64.b64encode(
                self.generator.get_state().numpy().tobytes()
            ).decode("ascii"),
        }
        if self.coupling_seed is not None:
            out["coupling_seed"] = self.coupling_seed
        if self.learner is not None:
            out["learner"] = {
                "misfit_variance": self.learner.misfit_variance,
                "last_fit": self.learner.last_fit,
            }
        return out

    def restore(
        self,
        checkpoint: dict[str, Any],
        arms: Tensor,
        rewards: Tensor,
    ) -> None:
        r"""Continue from :meth:`checkpoint` on a fresh engine with the same options.

        Args:
            checkpoint: What :meth:`checkpoint` returned.
            arms: The arm indices of the pulls the checkpoint belongs to.
            rewards: Their rewards.
        """
        if self.started:
            raise RuntimeError("restore() needs a fresh engine.")
        idx, y = self._checked(arms, rewards)
        if idx.numel() != checkpoint["num_observations"]:
            raise ValueError(
                f"the checkpoint belongs to {checkpoint['num_observations']} "
                f"observations, got {idx.numel()}."
            )
        learner = self.learner
        module = self._keeper.kernel.module if learner is None else learner.module
        params = dict(module.named_parameters())
        if set(params) != set(checkpoint["kernel"]):
            raise ValueError(
                f"the checkpoint's kernel has parameters {sorted(checkpoint['kernel'])}"
                f", this engine's kernel {sorted(params)}."
            )
        with torch.no_grad():
            for name, value in checkpoint["kernel"].items():
                params[name].copy_(torch.as_tensor(value, dtype=params[name].dtype))
        if learner is not None:
            learner.misfit_variance = checkpoint["learner"]["misfit_variance"]
            learner.last_fit = checkpoint["learner"]["last_fit"]
        self._keeper = self._keeper_for(None if learner is not None else module)
        for key, value in checkpoint["schedule"].items():
            setattr(self.schedule, key, value)
        if (self.coupling_seed is None) != ("coupling_seed" not in checkpoint):
            raise ValueError(
                "the checkpoint's dictionary resampling (coupled: "
                f"{'coupling_seed' in checkpoint}) differs from this engine's "
                f"({self.config.resampling!r})."
            )
        if self.coupling_seed is not None:
            self.coupling_seed = int(checkpoint["coupling_seed"])
            self._uniforms = None
        raw = base64.b64decode(checkpoint["generator"])
        self.generator.set_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
        self._record(idx, y)
        self._set_state(torch.as_tensor(checkpoint["dictionary"], dtype=torch.long))
        self._stale = bool(checkpoint["stale"])

    # ----------------------------------------------------------------- helpers
    def _keeper_for(self, kernel: Kernel | None) -> _StateKeeper:
        module = self.learner.module if kernel is None else kernel
        dense = as_dense_kernel(module, self.arms)
        cfg = self.config
        return _StateKeeper(
            self.arms, dense, self.lam, cfg.resparsify, cfg.embedding_bytes,
            cfg.chunk_size, cfg.kernel_cache, cfg.kernel_cache_bytes,
        )  # fmt: skip

    def _checked(self, arms: Tensor, rewards: Tensor) -> tuple[Tensor, Tensor]:
        A, device = self.arms.shape[0], self.arms.device
        idx = torch.as_tensor(arms, dtype=torch.long).reshape(-1).to(device)
        y = torch.as_tensor(rewards).reshape(-1)
        y = y.to(device=device, dtype=self.arms.dtype)
        if idx.numel() == 0:
            raise ValueError("no arms given.")
        if y.shape != idx.shape:
            raise ValueError(f"{y.numel()} rewards for {idx.numel()} arms.")
        if idx.min() < 0 or idx.max() >= A:
            raise ValueError(f"arm indices must lie in [0, {A}).")
        bad = ~torch.isfinite(y)
        if bool(bad.any()):
            k = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"rewards must be finite: got {float(y[k])} for arm {int(idx[k])} "
                f"(position {k} of the batch)."
            )
        return idx, y

    def _record(self, idx: Tensor, y: Tensor) -> None:
        self.counts.index_add_(0, idx, torch.ones_like(y))
        self.reward_sums.index_add_(0, idx, y)

    def _maybe_refit(self) -> bool:
        learner = self.learner
        if learner is None or not learner.due(self.num_observations):
            return False
        learner.fit(self.arms, self.counts, self.reward_sums, self.lam, self.generator)
        self._keeper = self._keeper_for(None)
        return True

    def _resample(self) -> None:
        r"""Alg. 1 L11-L18 (and a due refit) after the last observed batch.

        All or nothing: an exception (a ``KeyboardInterrupt`` included) raised
        inside it restores the generator, the kernel (and its refit bookkeeping)
        and the batch-start state, so the next call draws the same dictionary.
        The incremental state, half updated in place, is then discarded and the
        previous state rebuilt from its dictionary and pulls.
        """
        snapshot = self._snapshot()
        try:
            self._resample_unguarded()
        except BaseException:
            self._rollback(snapshot)
            raise

    def _snapshot(self) -> dict[str, Any]:
        state = self.state
        learner = self.learner
        return {
            "generator": self.generator.get_state(),
            "keeper": self._keeper,
            "state": state,
            "inputs": self._state_inputs,
            "learner": None if learner is None else learner.snapshot(),
        }

    def _rollback(self, snapshot: dict[str, Any]) -> None:
        self.generator.set_state(snapshot["generator"])
        if self.learner is not None:
            self.learner.load_snapshot(snapshot["learner"])
        keeper = snapshot["keeper"]
        keeper.discard_incremental()
        self._keeper = keeper
        S, counts, sums = snapshot["inputs"]
        self._state = keeper.rebuilt(S, counts, sums)
        self._state_inputs = snapshot["inputs"]
        logger.info("resampling interrupted: restored the batch-start state.")

    def _resample_unguarded(self) -> None:
        state = self.state
        if self._maybe_refit():
            # The embedding changes with the kernel: rebuild, then resample the
            # dictionary below with the new kernel's variances.
            state = self._keeper(state.S_idx, self.counts, self.reward_sums)
        pulled = (self.counts > 0).nonzero().squeeze(-1)
        uniforms = self.arm_uniforms
        draw = linalg.sample_dictionary(
            state.s2_0[pulled], self.q_bar, self.counts[pulled], self.generator,
            repeats=self.repeats,
            uniforms=None if uniforms is None else uniforms[pulled.cpu()],
        )  # fmt: skip
        if draw.fallback:
            logger.info(
                "empty dictionary draw at t=%d; kept the argmax point.",
                self.num_observations,
            )
        self._set_state(pulled[draw.selected])
        self._stale = False

    def _set_state(self, S: Tensor) -> None:
        """The state on ``S`` and the current pulls (its inputs kept for a rollback)."""
        self._state = self._keeper(S, self.counts, self.reward_sums)
        self._state_inputs = (
            self._state.S_idx.clone(),
            self.counts.clone(),
            self.reward_sums.clone(),
        )


class _NegatedMean:
    """A view of a state with the mean ``-mu`` (everything else delegated)."""

    def __init__(self, state: BatchState) -> None:
        self._state = state
        self.mu = -state.mu

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _make_learner(
    learn: bool | KernelLearning, kernel: Kernel, arms: Tensor
) -> KernelLearner | None:
    if learn is False or learn is None:
        return None
    if learn is True:
        learn = KernelLearning()
    if not isinstance(learn, KernelLearning):
        raise ValueError(f"learn must be a bool or a KernelLearning, got {learn!r}.")
    return KernelLearner(kernel, learn, dtype=arms.dtype, device=arms.device)
