r"""The options of BBKB's engine, in one validated object.

:class:`BBKBConfig` holds every option of Algorithm 1 of Calandriello et al.
(ICML 2020) besides the data (arms, kernel, ridge ``lam``) and the random
generator: the batch threshold and stopping rule, the ``beta~`` schedule, the
dictionary resampling, the state's update path and its memory budgets, the
selector. :class:`~botorch_sketch.bbkb.engine.BBKBEngine` and
:func:`~botorch_sketch.loops.bbkb.run_bbkb` take it (or its fields as keyword
arguments), so each default is written here once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from botorch_sketch import linalg
from botorch_sketch.bbkb.learning import KernelLearning
from botorch_sketch.bbkb.schedules import BetaSchedule
from botorch_sketch.bbkb.selection import DEFAULT_POOL_SIZE
from botorch_sketch.bbkb.state import DEFAULT_CHUNK_SIZE
from botorch_sketch.bbkb.stopping import StoppingRule

__all__ = [
    "BBKBConfig",
    "DEFAULT_DELTA",
    "RESAMPLING_MODES",
    "RESPARSIFY_MODES",
    "RULE_NAMES",
]

#: Dictionary resampling coins (``BBKBConfig.resampling``).
RESAMPLING_MODES = ("independent", "coupled")

#: Resparsification paths (``BBKBConfig.resparsify``).
RESPARSIFY_MODES = ("auto", "incremental", "rebuild")

#: Stopping rules by name (:func:`~botorch_sketch.bbkb.stopping.make_rule`).
RULE_NAMES = ("global", "global_local", "local", "product", "bkb")

#: Confidence level ``delta`` of an engine driven without a known horizon.
DEFAULT_DELTA = 0.01


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class BBKBConfig:
    r"""Options of a BBKB run (validated when built; errors name the option).

    Attributes:
        C: Batch threshold ``C~ >= 1`` (BBKB spec Sec. 5.4); ``rule="bkb"``
            overrides it with 1.
        q_bar: Oversampling factor ``q_bar > 0`` of the dictionary resampling.
        rule: ``"global"`` (Global-BBKB), ``"global_local"``, ``"local"``,
            ``"product"``, ``"bkb"`` (``C = 1``) or a
            :class:`~botorch_sketch.bbkb.stopping.StoppingRule`.
        beta: ``"paper"``, ``"reference_code"``, a fixed ``beta~ > 0`` (``alpha =
            C beta``) or a :class:`~botorch_sketch.bbkb.schedules.BetaSchedule`.
        xi: Noise std ``> 0`` in ``beta~`` (``None``: ``sqrt(lam)``).
        delta: Confidence level in ``(0, 1)`` (``None``: ``1 / (T + 1)`` for a run
            of horizon ``T``, App. D; :data:`DEFAULT_DELTA` without a horizon).
        F: RKHS norm bound ``>= 0`` in ``beta~`` (App. D).
        learn: ``False``, ``True`` or a
            :class:`~botorch_sketch.bbkb.learning.KernelLearning` schedule.
        repeats: ``"union"`` or ``"per_pull"``
            (:func:`~botorch_sketch.linalg.rls_inclusion_probabilities`).
        resampling: ``"independent"`` (fresh coins at every resampling, Alg. 1
            L11-L16) or ``"coupled"`` (one fixed uniform per arm, drawn once
            from the run's generator: arm ``a`` is in the dictionary while
            ``u_a < p_a``, :func:`~botorch_sketch.linalg.sample_dictionary`).
            Each draw has the paper's marginal probabilities, but consecutive
            dictionaries differ only where the probabilities crossed the
            arms' uniforms, so an incremental resparsification moves few
            points instead of re-drawing every uncertain one. The coins of
            different batches are then dependent, which the papers' analysis
            (Calandriello et al., COLT 2019 Thm. 1; ICML 2020 Thm. 2) does not
            cover: a measured choice (``benchmarks/results/``), not the
            paper's.
        resparsify: ``"auto"``, ``"incremental"`` or ``"rebuild"``.
        embedding_bytes: Memory budget (bytes) of the incremental path's ``A x
            m`` embeddings (``1.5 A m`` floats with the buffer's slack).
        chunk_size: Rows embedded at once on the rebuild path.
        kernel_cache: Reuse kernel columns across rebuilds.
        kernel_cache_bytes: Memory cap (bytes) of that cache.
        pool_size: Initial pool of the batch selector (``None``: the lazy rule
            over all arms).
        lazy: Lazy UCB evaluation or eager downdates.
        dtype: Compute dtype, ``torch.float64`` (default) or ``torch.float32``.
            float32 halves the memory of the ``A x r`` embedding, but its rounding
            errors (about ``1e-7 k(a, a)``) enter the variances divided by ``lam``
            (Eq. 3): use it with a ridge far above them (the tests use ``lam =
            0.05``). At ``lam = 1e-4`` the variances are mostly rounding and the
            batches shrink (``benchmarks/results/bbkb_float32.md``).
    """

    C: float = 2.0
    q_bar: float = 2.0
    rule: str | StoppingRule = "global"
    beta: str | float | BetaSchedule = "paper"
    xi: float | None = None
    delta: float | None = None
    F: float = 1.0
    learn: bool | KernelLearning = False
    repeats: str = "union"
    resampling: str = "independent"
    resparsify: str = "auto"
    embedding_bytes: int = 2**31
    chunk_size: int = DEFAULT_CHUNK_SIZE
    kernel_cache: bool = True
    kernel_cache_bytes: int = 2**30
    pool_size: int | None = DEFAULT_POOL_SIZE
    lazy: bool = True
    dtype: torch.dtype = torch.float64

    def __post_init__(self) -> None:
        if not (_is_real(self.C) and self.C >= 1):
            raise ValueError(f"the batch threshold C must be >= 1, got {self.C!r}.")
        if not (_is_real(self.q_bar) and self.q_bar > 0):
            raise ValueError(f"q_bar must be positive, got {self.q_bar!r}.")
        if not isinstance(self.rule, StoppingRule) and self.rule not in RULE_NAMES:
            raise ValueError(
                f"unknown stopping rule {self.rule!r}; expected one of "
                f"{sorted(RULE_NAMES)} or a StoppingRule."
            )
        beta = self.beta
        if isinstance(beta, str):
            if beta not in ("paper", "reference_code"):
                raise ValueError(f"unknown beta schedule {beta!r}.")
        elif not isinstance(beta, BetaSchedule) and not (
            _is_real(beta) and math.isfinite(beta) and beta > 0
        ):
            raise ValueError(
                f"beta must be 'paper', 'reference_code', a positive number or a "
                f"BetaSchedule, got {beta!r}."
            )
        if self.xi is not None and not (_is_real(self.xi) and self.xi > 0):
            raise ValueError(f"xi must be positive or None, got {self.xi!r}.")
        if self.delta is not None and not (_is_real(self.delta) and 0 < self.delta < 1):
            raise ValueError(f"delta must lie in (0, 1), got {self.delta!r}.")
        if not (_is_real(self.F) and self.F >= 0):
            raise ValueError(f"F must be a number >= 0, got {self.F!r}.")
        if not isinstance(self.learn, (bool, KernelLearning)):
            raise ValueError(
                f"learn must be a bool or a KernelLearning, got {self.learn!r}."
            )
        if self.repeats not in linalg.REPEAT_RULES:
            raise ValueError(
                f"repeats must be one of {linalg.REPEAT_RULES}, got {self.repeats!r}."
            )
        if self.resampling not in RESAMPLING_MODES:
            raise ValueError(
                f"resampling must be one of {RESAMPLING_MODES}, got "
                f"{self.resampling!r}."
            )
        if self.resparsify not in RESPARSIFY_MODES:
            raise ValueError(
                f"resparsify must be one of {RESPARSIFY_MODES}, got "
                f"{self.resparsify!r}."
            )
        for name in ("embedding_bytes", "chunk_size", "kernel_cache_bytes"):
            value = getattr(self, name)
            if not (_is_int(value) and value >= (name != "kernel_cache_bytes")):
                raise ValueError(f"{name} must be a positive int, got {value!r}.")
        if self.pool_size is not None and not (
            _is_int(self.pool_size) and self.pool_size >= 1
        ):
            raise ValueError(
                f"pool_size must be an int >= 1 or None, got {self.pool_size!r}."
            )
        for name in ("kernel_cache", "lazy"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}.")
        if self.dtype not in (torch.float32, torch.float64):
            raise ValueError(
                f"dtype must be torch.float32 or torch.float64, got {self.dtype}."
            )

    @property
    def threshold(self) -> float:
        """The batch threshold in use (1 for ``rule="bkb"``)."""
        return 1.0 if self.rule == "bkb" else float(self.C)

    def confidence(self, horizon: int | None = None) -> float:
        r"""``delta``, or its default for a run of ``horizon`` steps (App. D)."""
        if self.delta is not None:
            return float(self.delta)
        return DEFAULT_DELTA if horizon is None else 1.0 / (horizon + 1)

    def updated(self, **options: Any) -> BBKBConfig:
        """A copy with some options changed (unknown names raise a TypeError)."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"unknown BBKB options {unknown}; known: {sorted(names)}.")
        return replace(self, **options) if options else self
