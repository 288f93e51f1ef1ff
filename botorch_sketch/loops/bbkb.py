r"""Finite-arm bandit loops: BBKB, BKB, exact GP-UCB / GP-BUCB and uniform.

Protocol of BBKB (Calandriello et al., ICML 2020, Alg. 1; BBKB spec Sec. 3 items
7-9, Sec. 7.1):

1. Initialisation (batch 0): evaluate the given arms, or one uniformly random arm
   (Alg. 1 L1), with the dictionary ``S = unique(initial arms)`` (App. B.1 base
   case; or BLESS, Sec. 7.3), and build the state.
2. Repeat until ``T`` points are evaluated: select a batch with the frozen state
   (:meth:`~botorch_sketch.bbkb.engine.BBKBEngine.next_batch`, cut at the
   horizon), evaluate the whole batch (synchronous, L17), update pull counts, add
   the batch's ``log(1 + 3 s2_0)`` to ``beta~``, resample the dictionary among
   ALL pulled arms with the batch-start variances (L11-L16; an arm pulled ``n_a``
   times is kept with probability ``min(1, q_bar n_a s2_0)`` by default, as in
   the authors' code, or
   ``1 - (1 - min(1, q_bar s2_0))^{n_a}`` with ``repeats="per_pull"``, see
   :func:`~botorch_sketch.linalg.rls_inclusion_probabilities`; empty-draw fallback
   of :func:`~botorch_sketch.linalg.sample_dictionary`) and rebuild (L18).

The initial points count toward the horizon ``T`` (as ``x_1`` in Alg. 1). Wall
times exclude the oracle calls (the paper's runtimes exclude experimentation cost).
BKB is BBKB with ``C = 1``: one point per batch, resampling at every step.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.bbkb.config import BBKBConfig
from botorch_sketch.bbkb.dense_kernel import as_dense_kernel
from botorch_sketch.bbkb.engine import BBKBEngine, validate_arms
from botorch_sketch.bbkb.exact import ExactBUCBEngine, ExactPosterior
from botorch_sketch.bbkb.learning import KernelFit, KernelLearning
from botorch_sketch.bbkb.schedules import BetaSchedule
from botorch_sketch.bbkb.selection import (
    StepRecord,
)
from botorch_sketch.bbkb.state import (
    BatchState,
)
from botorch_sketch.bbkb.stopping import StoppingRule
from botorch_sketch.models.validation import check_seed

logger = logging.getLogger(__name__)

_D = BBKBConfig  # the defaults of run_bbkb's engine options, written once there

__all__ = [
    "BBKBCheckpoint",
    "BBKBInterrupted",
    "BBKBRunState",
    "BanditResult",
    "noisy_oracle",
    "run_bbkb",
    "run_botorch_fixed_q",
    "run_gp_bucb",
    "run_gp_ucb",
    "run_uniform",
    "uncertainty_sampling_init",
    "uniform_regret",
]

Oracle = Callable[[Tensor], Tensor]


@dataclass
class BanditResult:
    r"""Per-step record of a finite-arm run of ``T`` steps in ``B`` batches.

    Attributes:
        arms: ``T`` selected arm indices.
        rewards: ``T`` observed (noisy) rewards.
        batch_id: ``T`` batch of each step (0 = the initial points).
        batch_size: ``T`` size of the batch containing each step.
        dict_size: ``T`` dictionary size used to select each step (0 for the
            initial points, the number of distinct pulled arms for exact GPs).
        wall_time: ``T`` seconds since the start when the step was selected
            (oracle time excluded).
        regret: ``T`` instantaneous regret ``f* - f(x_t)`` if ``f_true`` was given.
        batch_sizes: ``B`` batch sizes (batch 0 = initial points).
        alphas: ``B`` UCB multipliers used per batch (``nan`` for batch 0).
        total_time: Total seconds (oracle excluded).
        final_state: Last frozen BBKB state (``None`` for other methods).
        batch_ranks: ``B`` embedding dimensions ``r`` used to select each batch
            (BBKB only; 0 for batch 0), e.g. to count the flops of the
            resparsifications (``~ 2 A m r`` each).
        kernel: The kernel of :attr:`final_state` (BBKB only): with learning, the
            learned kernel (a trainable copy; the caller's module is unchanged).
        kernel_fits: The refits of a run with learning, in order.
        run_state: Set on the partial result of an interrupted :func:`run_bbkb`
            (:attr:`BBKBInterrupted.partial`): what ``run_bbkb(...,
            resume=partial)`` continues from (``None`` otherwise).
    """

    arms: Tensor
    rewards: Tensor
    batch_id: Tensor
    batch_size: Tensor
    dict_size: Tensor
    wall_time: Tensor
    regret: Tensor | None
    batch_sizes: Tensor
    alphas: Tensor
    total_time: float
    final_state: BatchState | None = None
    batch_ranks: Tensor | None = None
    kernel: Kernel | None = None
    kernel_fits: list[KernelFit] = field(default_factory=list)
    run_state: BBKBRunState | None = None

    @property
    def num_batches(self) -> int:
        """Number of batches ``B`` (the initial batch included)."""
        return self.batch_sizes.numel()

    @property
    def cumulative_regret(self) -> Tensor:
        """``R_t = sum_{s <= t} (f* - f(x_s))``, a ``T`` tensor."""
        if self.regret is None:
            raise ValueError("no regret recorded; pass f_true.")
        return self.regret.cumsum(0)

    def regret_ratio(self, f_true: Tensor) -> Tensor:
        r"""``R_t / R_t^unif``, expected uniform regret (:func:`uniform_regret`)."""
        regret = self.cumulative_regret
        f_true = f_true.to(regret.device)
        t = torch.arange(
            1, self.arms.numel() + 1, dtype=f_true.dtype, device=regret.device
        )
        return regret / uniform_regret(f_true, t)


class BBKBInterrupted(RuntimeError):
    r"""A :func:`run_bbkb` run stopped by a fault of the oracle (or of the run).

    Raised from the original exception (its ``__cause__``) when the oracle
    raises, returns the wrong shape or a non-finite reward. Nothing observed is
    lost: :attr:`partial` is a :class:`BanditResult` of every step whose reward
    was observed, and ``run_bbkb(..., resume=exc.partial)`` continues the run
    exactly as it would have gone without the fault (the batch that was being
    evaluated is evaluated again first). A ``KeyboardInterrupt`` during a run
    propagates unchanged, with the same ``partial`` attribute set on it.

    Attributes:
        partial: The partial result, with :attr:`BanditResult.run_state` set.
    """

    def __init__(self, message: str, partial: BanditResult) -> None:
        super().__init__(message)
        self.partial = partial


@dataclass
class BBKBRunState:
    r"""What an interrupted :func:`run_bbkb` continues from (in-process).

    Attributes:
        engine: The engine, changed only by completed batches.
        recorder: The records so far (the pending batch's steps included).
        pending: Arm indices chosen but not yet observed (``None`` if none).
        started: Whether the initial batch was observed.
        options: The loop's own options (``max_batch_size``, ``allow_repeats``,
            ``init_dictionary``, checkpointing).
    """

    engine: BBKBEngine
    recorder: _Recorder
    pending: Tensor | None
    started: bool
    options: dict[str, Any]


def uniform_regret(f_true: Tensor, t: Tensor | int) -> Tensor:
    r"""Expected cumulative regret of uniform sampling, ``t (f* - mean_a f(a))``."""
    return t * (f_true.max() - f_true.mean())


def noisy_oracle(
    f_true: Tensor, noise_std: float, generator: torch.Generator | None = None
) -> Oracle:
    r"""Oracle ``idx -> f(idx) + N(0, noise_std^2)`` with its own generator."""

    def oracle(idx: Tensor) -> Tensor:
        f = f_true[idx]
        noise = torch.randn(f.shape, generator=generator, dtype=f.dtype)
        return f + noise_std * noise.to(f.device)

    return oracle


class _Recorder:
    """Collects per-step and per-batch records and builds a :class:`BanditResult`."""

    def __init__(
        self, T: int, f_true: Tensor | None, progress: bool, desc: str
    ) -> None:
        self.T, self.f_true = T, f_true
        self.arms: list[int] = []
        self.rewards: list[float] = []
        self.batch_id: list[int] = []
        self.dict_size: list[int] = []
        self.wall: list[float] = []
        self.batch_sizes: list[int] = []
        self.alphas: list[float] = []
        self.ranks: list[int] = []
        self.t0 = time.perf_counter()
        self.oracle_time = 0.0
        self.paused_at = self.t0
        self.desc = desc
        self.pbar = None
        self.open_progress(progress)

    def open_progress(self, progress: bool) -> None:
        """Show a tqdm progress bar if asked and tqdm is installed."""
        self.pbar = None
        if not progress:
            return
        try:
            from tqdm.auto import tqdm  # optional dependency
        except ImportError:
            logger.debug("tqdm is not installed: running without a progress bar.")
            return
        self.pbar = tqdm(total=self.T, desc=self.desc, initial=self.observed)

    def close_progress(self) -> None:
        if self.pbar is not None:
            self.pbar.close()
            self.pbar = None

    @property
    def t(self) -> int:
        return len(self.arms)

    @property
    def observed(self) -> int:
        """Number of steps whose reward was observed."""
        return len(self.rewards)

    def now(self) -> float:
        return time.perf_counter() - self.t0 - self.oracle_time

    def step(self, arm: int, dict_size: int) -> None:
        self.wall.append(self.now())
        self.arms.append(arm)
        self.batch_id.append(len(self.batch_sizes))
        self.dict_size.append(dict_size)

    def evaluate(self, oracle: Oracle, idx: Tensor) -> Tensor:
        start = time.perf_counter()
        try:
            y = oracle(idx)
        finally:
            self.oracle_time += time.perf_counter() - start
        if not isinstance(y, Tensor):
            raise TypeError(f"the oracle must return a tensor, got {type(y).__name__}.")
        if y.shape != idx.shape:
            raise ValueError(
                f"the oracle returned shape {tuple(y.shape)} for {idx.numel()} arms."
            )
        return y

    def end_batch(
        self, rewards: Tensor, alpha: float, dict_size: int, rank: int = 0
    ) -> None:
        n = rewards.numel()
        self.ranks.append(rank)
        self.rewards.extend(rewards.tolist())
        self.batch_sizes.append(n)
        self.alphas.append(alpha)
        if self.pbar is not None:
            self.pbar.update(n)
            self.pbar.set_postfix(batch=n, m=dict_size, refresh=False)

    def result(
        self,
        final_state: BatchState | None = None,
        kernel: Kernel | None = None,
        kernel_fits: list[KernelFit] | None = None,
        run_state: BBKBRunState | None = None,
    ) -> BanditResult:
        """The records of the observed steps (a pending batch's steps left out)."""
        total = self.now()
        self.close_progress()
        n = self.observed
        arms = torch.tensor(self.arms[:n], dtype=torch.long)
        sizes = torch.tensor(self.batch_sizes, dtype=torch.long)
        bid = torch.tensor(self.batch_id[:n], dtype=torch.long)
        regret = None
        if self.f_true is not None:
            regret = self.f_true.max() - self.f_true[arms]
        return BanditResult(
            arms=arms,
            rewards=torch.tensor(self.rewards, dtype=torch.float64),
            batch_id=bid,
            batch_size=sizes[bid],
            dict_size=torch.tensor(self.dict_size[:n], dtype=torch.long),
            wall_time=torch.tensor(self.wall[:n], dtype=torch.float64),
            regret=regret,
            batch_sizes=sizes,
            alphas=torch.tensor(self.alphas, dtype=torch.float64),
            total_time=total,
            final_state=final_state,
            batch_ranks=torch.tensor(self.ranks, dtype=torch.long),
            kernel=kernel,
            kernel_fits=list(kernel_fits or []),
            run_state=run_state,
        )


def _make_generator(
    generator: torch.Generator | None, seed: int | None
) -> torch.Generator:
    if generator is not None and seed is not None:
        raise ValueError("pass either generator or seed, not both.")
    check_seed(seed)
    if generator is not None:
        return generator
    g = torch.Generator()
    if seed is not None:
        g.manual_seed(int(seed))
    else:
        g.seed()
    return g


def _validate(
    arms: Tensor,
    T: int,
    lam: float,
    f_true: Tensor | None,
    init: Tensor | None,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    arms = validate_arms(arms, lam, dtype)
    if int(T) != T or T < 1:
        raise ValueError(f"the horizon T must be an integer >= 1, got {T}.")
    A = arms.shape[0]
    if f_true is not None and f_true.shape != (A,):
        raise ValueError(
            f"f_true must have shape ({A},) to match arms, got {tuple(f_true.shape)}."
        )
    if init is not None:
        init = torch.as_tensor(init, dtype=torch.long).reshape(-1)
        if init.numel() == 0:
            raise ValueError("init must contain at least one arm index.")
        if init.min() < 0 or init.max() >= A:
            raise ValueError(f"init indices must lie in [0, {A}).")
        if init.numel() > T:
            raise ValueError(f"{init.numel()} initial arms exceed the horizon T = {T}.")
    return arms


def run_bbkb(
    arms: Tensor,
    oracle: Oracle,
    T: int,
    kernel: Kernel,
    lam: float,
    C: float = _D.C,
    q_bar: float = _D.q_bar,
    rule: str | StoppingRule = _D.rule,
    beta: str | float | BetaSchedule = _D.beta,
    *,
    xi: float | None = _D.xi,
    delta: float | None = _D.delta,
    F: float = _D.F,
    init: Tensor | None = None,
    init_rewards: Tensor | None = None,
    init_dictionary: str | Tensor = "all",
    f_true: Tensor | None = None,
    max_batch_size: int | None = None,
    allow_repeats: bool = True,
    lazy: bool = _D.lazy,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    progress: bool = True,
    chunk_size: int = _D.chunk_size,
    kernel_cache: bool = _D.kernel_cache,
    dtype: torch.dtype = _D.dtype,
    pool_size: int | None = _D.pool_size,
    kernel_cache_bytes: int = _D.kernel_cache_bytes,
    repeats: str = _D.repeats,
    resampling: str = _D.resampling,
    resparsify: str = _D.resparsify,
    embedding_bytes: int = _D.embedding_bytes,
    learn: bool | KernelLearning = _D.learn,
    resume: BanditResult | BBKBCheckpoint | None = None,
    checkpoint: Callable[[BBKBCheckpoint], None] | None = None,
    checkpoint_every: int = 1,
    config: BBKBConfig | None = None,
) -> BanditResult:
    r"""Run BBKB (or BKB) on a finite arm set for ``T`` steps (Alg. 1).

    Args:
        arms: ``A x d`` candidate set (cast to float64).
        oracle: ``idx -> rewards``, noisy feedback for a LongTensor of arm indices
            (e.g. :func:`noisy_oracle`).
        T: Horizon (number of evaluations, initial ones included).
        kernel: The prior covariance, any ``gpytorch.kernels.Kernel`` without batch
            dimensions (e.g. :func:`~botorch_sketch.bbkb.dense_kernel.
            fixed_rbf_kernel` for the paper's Gaussian kernel, a Matern/ARD
            ``ScaleKernel``, or a fitted model's ``covar_module``). It is evaluated
            through a frozen copy in ``dtype`` on the device of ``arms``
            (:class:`~botorch_sketch.bbkb.dense_kernel.DenseKernel`).
        lam: Ridge ``lam`` (the paper's experiments suggest ``lam = xi^2``).
        C: Batch threshold ``C~ >= 1`` (default 2, BBKB spec Sec. 5.4).
        q_bar: Oversampling factor of the dictionary resampling.
        rule: ``"global"`` (Global-BBKB), ``"global_local"`` (GlobalLocal-BBKB),
            ``"local"``, ``"bkb"`` (``C = 1``) or a :class:`StoppingRule`.
        beta: ``"paper"``, ``"reference_code"``, a fixed ``beta~`` (``alpha = C
            beta``) or a :class:`BetaSchedule`.
        xi: Noise std for ``beta~`` (default ``sqrt(lam)``).
        delta: Confidence level (default ``1 / (T + 1)``, App. D).
        F: RKHS norm bound (default 1, App. D).
        init: Initial arm indices (default: one uniformly random arm).
        init_rewards: Their rewards if already known (else the oracle is called).
        init_dictionary: ``"all"`` (the distinct initial arms), ``"bless"``
            (:func:`~botorch_sketch.linalg.bless_dictionary` on them) or indices.
        f_true: Optional ``A`` noiseless values, to record the regret.
        max_batch_size: Optional cap on the batch size (an extension).
        allow_repeats: Allow repeated arms within a batch (paper default).
        lazy: Lazy UCB evaluation (default) or eager downdates.
        generator: ``torch.Generator`` for the random choices of the algorithm.
        seed: Seed for a fresh generator (instead of ``generator``).
        progress: Show a ``tqdm`` progress bar when tqdm is installed (without it
            the run goes on silently; tqdm is an optional dependency).
        chunk_size: Rows embedded at once in rebuilds (bounds the memory of the
            ``A``-sized sweeps to ``O(chunk_size m)``).
        kernel_cache: Reuse kernel columns of dictionary points across rebuilds
            (:class:`~botorch_sketch.bbkb.state.KernelColumnCache`).
        dtype: Compute dtype, ``torch.float64`` (default) or ``torch.float32``.
            float32 halves memory and time of the ``A``-sized products but the
            variances ``(k - ||z||^2) / lam + ...`` lose about ``eps_32 / lam``
            in absolute accuracy, so it is only advisable for ``lam`` well above
            ``1e-3`` (see the tests); the paper's ``lam = 1e-4`` needs float64.
        pool_size: Initial pool of the batch selector
            (:class:`~botorch_sketch.bbkb.selection.PooledUCBSelector`).
        kernel_cache_bytes: Memory cap of the kernel-column cache; above it the
            kernel is recomputed in chunks at every rebuild (``A`` up to ``10^6``
            and beyond in bounded memory).
        repeats: How an arm pulled ``n`` times is kept at a resparsification:
            ``"union"`` (default, the authors' code: ``min(1, q_bar n s2_0)``) or
            ``"per_pull"`` (Alg. 1 L12-L15 literally, one coin per pull); see
            :func:`~botorch_sketch.linalg.rls_inclusion_probabilities` for the
            measured difference.
        resampling: ``"independent"`` (default, fresh coins at every
            resparsification, Alg. 1) or ``"coupled"`` (one fixed uniform per
            arm: consecutive dictionaries differ only where the probabilities
            moved; :class:`~botorch_sketch.bbkb.config.BBKBConfig`).
        resparsify: How the state follows a resparsification: ``"incremental"``
            (:class:`~botorch_sketch.bbkb.state.IncrementalState`: only the new
            pulls and the dictionary points that leave or enter are applied,
            ``O(A r (p + k))`` per batch; it refreshes or resets itself when that
            is cheaper or numerically needed), ``"rebuild"``
            (:func:`~botorch_sketch.bbkb.state.rebuild` at every batch, ``O(A m
            r)``, bounded memory) or ``"auto"`` (default: incremental while the
            ``A x m`` embedding fits in ``embedding_bytes``, else rebuild). Both
            paths make the same choices up to rounding (see the tests).
        embedding_bytes: Memory budget of the incremental path's embeddings
            (``1.5 A m`` floats with the buffer's slack).
        learn: Refit the kernel's trainable hyperparameters during the run
            (:mod:`~botorch_sketch.bbkb.learning`): ``True`` for the default
            :class:`~botorch_sketch.bbkb.learning.KernelLearning` schedule (first
            fit after 10 observations, then whenever they grew by 25 %; exact
            marginal likelihood of at most 1,000 observed arms with ``lam`` as the
            noise variance; 30 warm-started L-BFGS-B iterations), or a
            ``KernelLearning``. After a refit the state is rebuilt with the new
            kernel and the dictionary is resampled with its variances; ``beta~``
            keeps its running sum. ``False`` (default) keeps the kernel fixed, as
            in the paper's experiments. The learned kernel is
            :attr:`BanditResult.kernel`, the fits :attr:`BanditResult.kernel_fits`.
        resume: Continue a run instead of starting one: the partial result of an
            interrupted run (:attr:`BBKBInterrupted.partial`; the run goes on with
            its own engine and options, exactly as without the fault) or a
            :class:`BBKBCheckpoint` (a fresh engine built from this call's
            options, which must be those of the checkpointed run, restored from
            it; the same choices up to the rounding of a rebuilt state). ``T``
            may be larger than the interrupted run's.
        checkpoint: Called with a :class:`BBKBCheckpoint` (JSON-serialisable with
            :meth:`BBKBCheckpoint.to_dict`) after every ``checkpoint_every``
            observed batches.
        checkpoint_every: Batches between two checkpoints.
        config: All engine options at once, a
            :class:`~botorch_sketch.bbkb.config.BBKBConfig` (then the keyword
            options ``C`` to ``learn`` above must keep their defaults, which are
            the config's).

    Returns:
        A :class:`BanditResult`.

    Raises:
        BBKBInterrupted: The oracle raised, returned the wrong shape or a
            non-finite reward; the exception's ``partial`` holds every
            observation so far and resumes the run.

    The arms may live on any device (e.g. CUDA); the algorithm's random draws use
    a CPU ``torch.Generator``, so runs are reproducible across devices up to
    rounding.
    """
    options = {
        "C": C, "q_bar": q_bar, "rule": rule, "beta": beta, "xi": xi,
        "delta": delta, "F": F, "learn": learn, "repeats": repeats,
        "resampling": resampling, "resparsify": resparsify,
        "embedding_bytes": embedding_bytes,
        "chunk_size": chunk_size, "kernel_cache": kernel_cache,
        "kernel_cache_bytes": kernel_cache_bytes, "pool_size": pool_size,
        "lazy": lazy, "dtype": dtype,
    }  # fmt: skip
    cfg = _config(config, options)
    if resume is not None:
        run = _resumed_run(
            resume, arms, T, progress,
            lambda: _new_run(
                arms, T, kernel, lam, f_true, None, init_dictionary, progress,
                max_batch_size, allow_repeats, checkpoint, checkpoint_every,
                generator, seed, cfg,
            ),
        )  # fmt: skip
        return _drive(run, oracle, T, None)
    run = _new_run(
        arms, T, kernel, lam, f_true, init, init_dictionary, progress,
        max_batch_size, allow_repeats, checkpoint, checkpoint_every, generator,
        seed, cfg,
    )  # fmt: skip
    return _drive(run, oracle, T, _known_rewards(init_rewards, run.pending))


@dataclass
class BBKBCheckpoint:
    r"""A snapshot of a :func:`run_bbkb` run between two batches.

    Written by ``run_bbkb(..., checkpoint=callback)``; ``run_bbkb(...,
    resume=ckpt)`` with the run's options continues from it. :meth:`to_dict` and
    :meth:`from_dict` convert to and from plain JSON types.

    Attributes:
        engine: :meth:`~botorch_sketch.bbkb.engine.BBKBEngine.checkpoint`.
        arms: The observed arm indices, in order.
        rewards: Their rewards.
        batch_sizes: Sizes of the observed batches (batch 0 = initial points).
        alphas: Their UCB multipliers.
        dict_size: Per step, the dictionary size that selected it.
        wall_time: Per step, seconds since the start (oracle excluded).
        batch_ranks: Per batch, the embedding dimension that selected it.
    """

    engine: dict[str, Any]
    arms: list[int]
    rewards: list[float]
    batch_sizes: list[int]
    alphas: list[float]
    dict_size: list[int]
    wall_time: list[float]
    batch_ranks: list[int]

    def __post_init__(self) -> None:
        n = len(self.arms)
        for name in ("rewards", "dict_size", "wall_time"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} must have {n} entries, one per arm.")
        if sum(self.batch_sizes) != n:
            raise ValueError(f"batch_sizes must sum to the {n} arms.")
        if len(self.alphas) != len(self.batch_sizes) or len(self.batch_ranks) != len(
            self.batch_sizes
        ):
            raise ValueError("alphas and batch_ranks need one entry per batch.")
        if not isinstance(self.engine, dict) or "num_observations" not in self.engine:
            raise ValueError("engine must be a BBKBEngine.checkpoint() dict.")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (floats as Python floats, ``nan`` kept)."""
        return dict(vars(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BBKBCheckpoint:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def _config(config: BBKBConfig | None, options: dict[str, Any]) -> BBKBConfig:
    """``config``, or one built from ``run_bbkb``'s keyword options (not both)."""
    if config is None:
        return BBKBConfig(**options)
    if not isinstance(config, BBKBConfig):
        raise TypeError(f"config must be a BBKBConfig, got {config!r}.")
    changed = sorted(
        name
        for name, value in options.items()
        if value is not getattr(_D, name) and value != getattr(_D, name)
    )
    if changed:
        raise ValueError(
            f"pass the options either in config or as keywords, not both: {changed}."
        )
    return config


class _OracleFault(Exception):
    """Marks a fault of the oracle (raised, wrong shape or non-finite reward)."""


def _new_run(
    arms: Tensor,
    T: int,
    kernel: Kernel,
    lam: float,
    f_true: Tensor | None,
    init: Tensor | None,
    init_dictionary: str | Tensor,
    progress: bool,
    max_batch_size: int | None,
    allow_repeats: bool,
    checkpoint: Callable[[BBKBCheckpoint], None] | None,
    checkpoint_every: int,
    generator: torch.Generator | None,
    seed: int | None,
    cfg: BBKBConfig,
) -> BBKBRunState:
    arms = _validate(arms, T, lam, f_true, init, cfg.dtype)
    if isinstance(init_dictionary, str) and init_dictionary not in ("all", "bless"):
        raise ValueError(f"unknown init_dictionary {init_dictionary!r}.")
    if checkpoint is not None and not callable(checkpoint):
        raise TypeError(f"checkpoint must be callable, got {checkpoint!r}.")
    if (
        isinstance(checkpoint_every, bool)
        or not isinstance(checkpoint_every, int)
        or checkpoint_every < 1
    ):
        raise ValueError(
            f"checkpoint_every must be an int >= 1, got {checkpoint_every!r}."
        )
    g = _make_generator(generator, seed)
    engine = BBKBEngine(arms, kernel, lam, cfg, horizon=T, generator=g)
    rule = cfg.rule
    rec = _Recorder(
        T, f_true, progress, desc=f"BBKB[{getattr(rule, '__name__', rule)}]"
    )
    options = {
        "max_batch_size": max_batch_size,
        "allow_repeats": allow_repeats,
        "init_dictionary": init_dictionary,
        "checkpoint": checkpoint,
        "checkpoint_every": checkpoint_every,
    }
    return _start_run(engine, rec, arms, init, g, options)


def _start_run(
    engine: BBKBEngine | ExactBUCBEngine,
    rec: _Recorder,
    arms: Tensor,
    init: Tensor | None,
    generator: torch.Generator,
    options: dict[str, Any],
) -> BBKBRunState:
    r"""A run whose first batch is ``init`` (one arm drawn with ``generator``
    when ``None``), recorded as batch 0, its rewards still to be observed."""
    if init is None:
        init = torch.randint(arms.shape[0], (1,), generator=generator)
    init = torch.as_tensor(init, dtype=torch.long).reshape(-1)
    for a in init.tolist():
        rec.step(a, 0)
    return BBKBRunState(engine, rec, init.to(arms.device), False, options)


def _known_rewards(init_rewards: Tensor | None, init: Tensor) -> Tensor | None:
    r"""``init_rewards`` as a float64 vector matching the first batch ``init``
    (``None`` when not given: the oracle is asked)."""
    if init_rewards is None:
        return None
    known = torch.as_tensor(init_rewards, dtype=torch.float64).reshape(-1)
    if known.shape != init.shape:
        raise ValueError(
            f"init_rewards has {known.numel()} values for {init.numel()} arms."
        )
    return known


def _resumed_run(
    resume: BanditResult | BBKBCheckpoint,
    arms: Tensor,
    T: int,
    progress: bool,
    fresh: Callable[[], BBKBRunState],
) -> BBKBRunState:
    if isinstance(resume, BBKBCheckpoint):
        run = fresh()
        rec = run.recorder
        rec.close_progress()
        n = len(resume.arms)
        if n > T:
            raise ValueError(f"the checkpoint holds {n} steps, more than T = {T}.")
        engine = run.engine
        engine.restore(
            resume.engine, torch.tensor(resume.arms), torch.tensor(resume.rewards)
        )
        rec.arms, rec.rewards = list(resume.arms), list(resume.rewards)
        rec.batch_sizes = list(resume.batch_sizes)
        rec.batch_id = [b for b, k in enumerate(resume.batch_sizes) for _ in range(k)]
        rec.alphas, rec.ranks = list(resume.alphas), list(resume.batch_ranks)
        rec.dict_size, rec.wall = list(resume.dict_size), list(resume.wall_time)
        rec.t0 = time.perf_counter() - (rec.wall[-1] if rec.wall else 0.0)
        run.pending, run.started = None, True
        rec.open_progress(progress)
        return run
    if not isinstance(resume, BanditResult) or resume.run_state is None:
        raise ValueError(
            "resume must be the partial result of an interrupted run_bbkb "
            "(BBKBInterrupted.partial) or a BBKBCheckpoint."
        )
    run = resume.run_state
    if run.options.get("done"):
        raise ValueError("this partial result was already resumed to its end.")
    if not isinstance(arms, Tensor) or arms.shape != run.engine.arms.shape:
        raise ValueError("resume needs the arms of the interrupted run.")
    if int(T) != T or T < run.recorder.observed:
        raise ValueError(
            f"T must be an integer >= the {run.recorder.observed} observed steps."
        )
    rec = run.recorder
    rec.T = int(T)
    rec.oracle_time += time.perf_counter() - rec.paused_at  # idle time excluded
    rec.open_progress(progress)
    return run


def _checked_rewards(y: Tensor, idx: Tensor, rec: _Recorder) -> Tensor:
    bad = ~torch.isfinite(y)
    if bool(bad.any()):
        k = int(bad.nonzero()[0, 0])
        step = rec.observed + k + 1
        raise _OracleFault(
            f"the oracle returned {float(y[k])} for arm {int(idx[k])} at step "
            f"{step} (batch {len(rec.batch_sizes)}); rewards must be finite."
        )
    return y


def _drive(
    run: BBKBRunState, oracle: Oracle, T: int, known: Tensor | None
) -> BanditResult:
    engine, rec, opts = run.engine, run.recorder, run.options
    device, dtype = engine.arms.device, engine.arms.dtype
    max_batch_size = opts["max_batch_size"]

    def record(step: StepRecord) -> None:
        rec.step(step.arm, engine.state.dict_size)

    try:
        while True:
            if run.pending is None:
                if rec.observed >= T:
                    break
                cap = T - rec.t
                if max_batch_size is not None:
                    cap = min(max_batch_size, cap)
                batch = engine.next_batch(
                    cap, allow_repeats=opts["allow_repeats"], recorder=record
                )
                run.pending = torch.tensor(batch, dtype=torch.long, device=device)
            idx = run.pending
            if known is not None:
                y, known = known, None
            else:
                try:
                    y = rec.evaluate(oracle, idx)
                except Exception as exc:
                    raise _OracleFault(f"the oracle failed: {exc!r}") from exc
            y = _checked_rewards(torch.as_tensor(y).to(device, dtype), idx, rec)
            if run.started:
                state, alpha = engine.state, engine.alpha
                engine.observe(idx, y)
                rec.end_batch(y, alpha, state.dict_size, state.rank)
            else:
                engine.start(idx, y, opts["init_dictionary"])
                rec.end_batch(y, math.nan, 0)
                run.started = True
            run.pending = None
            every = opts["checkpoint_every"]
            if opts["checkpoint"] is not None and len(rec.batch_sizes) % every == 0:
                opts["checkpoint"](_checkpoint(engine, rec))
    except (Exception, KeyboardInterrupt) as exc:
        rec.paused_at = time.perf_counter()
        partial = rec.result(
            final_state=engine.state if engine.started else None,
            kernel=engine.kernel,
            kernel_fits=engine.kernel_fits,
            run_state=run,
        )
        if isinstance(exc, _OracleFault):
            raise BBKBInterrupted(
                f"run_bbkb stopped at step {rec.observed + 1} of {T}: {exc} The "
                f"{rec.observed} observations so far are in the exception's "
                "`partial`; continue with run_bbkb(..., resume=exc.partial).",
                partial,
            ) from (exc.__cause__ or exc)
        try:
            exc.partial = partial  # type: ignore[attr-defined]
        except AttributeError:  # pragma: no cover - exceptions with __slots__
            pass
        raise
    opts["done"] = True
    return rec.result(
        final_state=engine.state,
        kernel=engine.kernel,
        kernel_fits=engine.kernel_fits,
    )


def _checkpoint(engine: BBKBEngine, rec: _Recorder) -> BBKBCheckpoint:
    n = rec.observed
    return BBKBCheckpoint(
        engine=engine.checkpoint(),
        arms=list(rec.arms[:n]),
        rewards=list(rec.rewards),
        batch_sizes=list(rec.batch_sizes),
        alphas=list(rec.alphas),
        dict_size=list(rec.dict_size[:n]),
        wall_time=list(rec.wall[:n]),
        batch_ranks=list(rec.ranks),
    )


def run_gp_bucb(
    arms: Tensor,
    oracle: Oracle,
    T: int,
    kernel: Kernel,
    lam: float,
    C: float = _D.C,
    beta: str | float = _D.beta,
    *,
    rule: str | StoppingRule | None = None,
    xi: float | None = _D.xi,
    delta: float | None = _D.delta,
    F: float = _D.F,
    init: Tensor | None = None,
    init_rewards: Tensor | None = None,
    f_true: Tensor | None = None,
    max_batch_size: int | None = None,
    allow_repeats: bool = True,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    progress: bool = True,
    resume: BanditResult | None = None,
) -> BanditResult:
    r"""Exact GP-BUCB (Desautels et al. 2014; BBKB Alg. 2) on a finite arm set.

    ``u_t(a) = mu_fb(a) + alpha_fb sigma_t(a)`` with the exact posterior
    (:class:`~botorch_sketch.bbkb.exact.ExactPosterior`, hallucinated variances),
    ``alpha_fb = C beta_fb``, and the batch ends when ``prod_{s in batch} (1 +
    sigma^2_{s-1}(x_s)) > C`` (:class:`ProductRule`; the crossing point belongs to
    the batch). ``beta="paper"`` uses Prop. 5 with the exact ``logdet``:
    ``beta = 2 xi sqrt(logdet(I + K_fb / lam) + log(1/delta)) + (1 + sqrt 2)
    sqrt(lam) F`` ([INFERENCE], the paper does not print the baselines' beta); a
    number gives a fixed ``beta``. Eager ``O(t A)`` updates per step: ``O(T^2 A)``
    in total, meant for ``T <= 2000``. ``C = 1`` is GP-UCB. ``rule`` can replace
    the product rule (e.g. ``"global"`` gives the improved GP-BUCB with the sum
    rule of Lemma 1 under an exact dictionary).

    The engine (:class:`~botorch_sketch.bbkb.exact.ExactBUCBEngine`) is driven by
    :func:`run_bbkb`'s loop: the same initial batch, horizon cut, oracle checks
    and :class:`BBKBInterrupted` on an oracle fault (``resume=exc.partial``
    continues the run).

    Args: as :func:`run_bbkb` (``C``, ``beta``, ``xi``, ``delta`` and ``F`` with
        :class:`~botorch_sketch.bbkb.config.BBKBConfig`'s defaults).

    Returns:
        A :class:`BanditResult` (``dict_size`` = number of distinct pulled arms).
    """
    if resume is not None:
        run = _resumed_run(resume, arms, T, progress, _no_checkpoint_resume)
        return _drive(run, oracle, T, None)
    arms = _validate(arms, T, lam, f_true, init)
    engine = ExactBUCBEngine(
        arms, kernel, lam, T, C=C, beta=beta, rule=rule, xi=xi, delta=delta, F=F
    )
    g = _make_generator(generator, seed)
    rec = _Recorder(T, f_true, progress, desc="GP-BUCB" if C > 1 else "GP-UCB")
    options = {
        "max_batch_size": max_batch_size,
        "allow_repeats": allow_repeats,
        "init_dictionary": "all",
        "checkpoint": None,
        "checkpoint_every": 1,
    }
    run = _start_run(engine, rec, arms, init, g, options)
    return _drive(run, oracle, T, _known_rewards(init_rewards, run.pending))


def _no_checkpoint_resume() -> BBKBRunState:
    raise ValueError(
        "the exact baselines resume from a partial result "
        "(BBKBInterrupted.partial), not from a BBKBCheckpoint."
    )


def run_gp_ucb(
    arms: Tensor,
    oracle: Oracle,
    T: int,
    kernel: Kernel,
    lam: float,
    beta: str | float = _D.beta,
    **kwargs,
) -> BanditResult:
    r"""Exact sequential GP-UCB (Srinivas et al. 2010): ``run_gp_bucb``, ``C = 1``."""
    return run_gp_bucb(arms, oracle, T, kernel, lam, C=1.0, beta=beta, **kwargs)


def run_uniform(
    num_arms: int,
    oracle: Oracle,
    T: int,
    *,
    f_true: Tensor | None = None,
    generator: torch.Generator | None = None,
    seed: int | None = None,
) -> BanditResult:
    r"""Uniformly random arms, one batch of ``T`` (the regret-ratio baseline)."""
    if num_arms < 1:
        raise ValueError("the candidate set is empty (A = 0).")
    g = _make_generator(generator, seed)
    rec = _Recorder(T, f_true, False, desc="uniform")
    idx = torch.randint(num_arms, (T,), generator=g)
    for a in idx.tolist():
        rec.step(a, 0)
    rec.end_batch(rec.evaluate(oracle, idx).to(torch.float64), math.nan, 0)
    return rec.result()


def run_botorch_fixed_q(
    arms: Tensor,
    oracle: Oracle,
    T: int,
    q: int,
    kernel: Kernel,
    lam: float,
    beta: float = 4.0,
    *,
    init: Tensor | None = None,
    init_rewards: Tensor | None = None,
    f_true: Tensor | None = None,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    progress: bool = True,
    max_batch_size: int = 4096,
) -> BanditResult:
    r"""BoTorch's stock fixed-``q`` batch on a finite arm set (the baseline of
    BBKB's comparison with "what a BoTorch user would run").

    Each batch fits nothing: a ``SingleTaskGP`` with the same fixed kernel as the
    other loops (a frozen copy of ``kernel``, zero mean, fixed noise ``lam``, no
    outcome transform) is built on all evaluations so far, and
    ``optimize_acqf_discrete`` picks ``q`` distinct arms greedily with
    ``qUpperConfidenceBound(beta)`` (BoTorch units: ``mu + sqrt(beta pi / 2)
    E|f - mu|``, i.e. ``mu + sqrt(beta) sigma`` for ``q = 1``). Cost per batch: an
    exact GP solve on ``t`` points plus ``q`` passes of an MC acquisition over all
    ``A`` arms, so ``O(t^3 + q A t)`` per batch.

    Args:
        arms: ``A x d`` candidate set.
        oracle: ``idx -> rewards`` (e.g. :func:`noisy_oracle`).
        T: Horizon (number of evaluations, initial ones included).
        q: Fixed batch size ``>= 1``.
        kernel: The prior covariance (a gpytorch kernel, as in :func:`run_bbkb`).
        lam: Noise variance of the GP (as ``lam`` in the other loops).
        beta: ``qUpperConfidenceBound``'s ``beta``.
        init: Indices of initial arms (default: one uniformly random arm).
        init_rewards: Rewards of ``init`` (default: queried from the oracle).
        f_true: Noiseless values, to record the regret.
        generator: Random generator (initial arm and the MC sampler's seed).
        seed: Seed, if no generator is given.
        progress: Show a progress bar.
        max_batch_size: Candidates evaluated at once by ``optimize_acqf_discrete``.

    Returns:
        The per-step record; ``dict_size`` is the number of observations.
    """
    from botorch.acquisition import qUpperConfidenceBound
    from botorch.models import SingleTaskGP
    from botorch.optim import optimize_acqf_discrete
    from botorch.sampling import SobolQMCNormalSampler
    from gpytorch.means import ZeroMean

    if isinstance(q, bool) or not isinstance(q, int) or q < 1:
        raise ValueError(f"q must be a positive int, got {q!r}.")
    if not (math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be positive, got {lam}.")
    if arms.dim() != 2 or arms.shape[0] == 0:
        raise ValueError(
            f"arms must be a non-empty A x d tensor, got {tuple(arms.shape)}."
        )
    if T < 1:
        raise ValueError(f"T must be >= 1, got {T}.")
    arms = arms.to(torch.float64)
    g = _make_generator(generator, seed)
    rec = _Recorder(T, f_true, progress, desc=f"BoTorch qUCB q={q}")
    if init is None:
        init = torch.randint(arms.shape[0], (1,), generator=g)
    for a in init.tolist():
        rec.step(int(a), 0)
    Y = init_rewards if init_rewards is not None else rec.evaluate(oracle, init)
    rec.end_batch(Y.to(torch.float64), math.nan, 0)
    pulled = init.clone()
    covar = as_dense_kernel(kernel, arms)
    while rec.t < T:
        model = SingleTaskGP(
            arms[pulled],
            torch.tensor(rec.rewards, dtype=torch.float64).unsqueeze(-1),
            train_Yvar=torch.full((pulled.numel(), 1), lam, dtype=torch.float64),
            covar_module=covar.module,
            mean_module=ZeroMean(),
            outcome_transform=None,
        )
        sampler = SobolQMCNormalSampler(
            torch.Size([128]), seed=int(torch.randint(2**31 - 1, (1,), generator=g))
        )
        acqf = qUpperConfidenceBound(model, beta=beta, sampler=sampler)
        k = min(q, T - rec.t)
        with torch.no_grad():
            candidates, _ = optimize_acqf_discrete(
                acqf, q=k, choices=arms, max_batch_size=max_batch_size
            )
        # optimize_acqf_discrete returns rows of ``arms``: recover their indices.
        new = (candidates.unsqueeze(1) == arms.unsqueeze(0)).all(-1).int().argmax(-1)
        for a in new.tolist():
            rec.step(int(a), int(pulled.numel()))
        rec.end_batch(rec.evaluate(oracle, new).to(torch.float64), math.nan, 0)
        pulled = torch.cat([pulled, new])
    return rec.result()


def uncertainty_sampling_init(
    arms: Tensor,
    kernel: Kernel,
    lam: float,
    P: float,
    max_points: int = 1000,
) -> Tensor:
    r"""Uncertainty-sampling initialisation (BBKB Alg. 3, App. A.5).

    ``x_1 = argmax sigma_0^2``; while the variance of the last chosen point at its
    selection, ``sigma^2_{T-1}(x_T)``, is ``>= 1/P`` (variances, spec Sec. 7.2),
    add ``argmax sigma^2_{T-1}``. Needs no feedback, so the whole set can be
    evaluated as one parallel batch; afterwards ``max sigma^2 <= gamma / T_init``
    (Prop. 4), which makes later BBKB batches at least ``P (C~ - 1) / 3`` long.
    Exact variances, ``O(T_init^2 A)``. Ties go to the lowest index.

    Args:
        arms: ``A x d`` candidate set.
        kernel: The prior covariance (a gpytorch kernel, as in :func:`run_bbkb`).
        lam: Ridge (variances in RLS units ``sigma^2 = var / lam``).
        P: Target minimum parallelism ``> 0``.
        max_points: Cap on ``T_init``.

    Returns:
        LongTensor of the selected arm indices (distinct unless all are explained).
    """
    if not P > 0:
        raise ValueError(f"P must be positive, got {P}.")
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1, got {max_points}.")
    arms = _validate(arms, max_points, lam, None, None)
    post = ExactPosterior(arms, kernel, lam, capacity=min(max_points, 1024))
    chosen: list[int] = []
    while True:
        var = post.variance()
        i = int(torch.argmax(var))
        chosen.append(i)
        post.add(i)
        if float(var[i]) < 1.0 / P or len(chosen) >= max_points:
            break
    if len(chosen) >= max_points:
        logger.warning("uncertainty sampling stopped at max_points=%d.", max_points)
    return torch.tensor(chosen, dtype=torch.long)
