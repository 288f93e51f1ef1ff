r"""A dictionary budget derived from the device that holds the data.

The posterior caches of a DTC model with ``m`` dictionary points over ``n``
training points in ``d`` dimensions cost, in floating-point operations,

    F(m) = 3 n m d        (the n x m kernel block)
         + 4 n m^2        (the embedding Z = K_XS W and Z^T Z)
         + 10 m^3         (the m x m eigendecomposition and factors)

and about ``B n m`` numbers of memory (``B = 2`` blocks of ``n x m``: the model
keeps the embedded training inputs, one block, and every other ``O(n m)`` pass
runs over chunks of rows, :data:`~botorch_sketch.linalg.ROW_CHUNK`; the second
block is headroom, e.g. for the previous model of a loop). The cap is
the largest ``m <= n`` with ``F(m) / flop_rate <= T(n)`` and
``B n m itemsize <= memory_fraction * free_memory``
(:func:`device_dictionary_cap`), where the time budget grows with the data
(:func:`sketch_time_budget`),

    T(n) = BASE_SECONDS + SECONDS_PER_POINT * n * max(1, n / REFERENCE_POINTS)^{1/2}.

Up to ``REFERENCE_POINTS`` it is linear in ``n``, and the cap, ``4 n m^2``
dominating, stays near ``sqrt(flop_rate SECONDS_PER_POINT / 4)`` (a CPU keeps
about the cost of a fixed cap of 1,000 points); beyond, it grows like
``n^{3/2}`` and the cap like ``(n / REFERENCE_POINTS)^{1/4}``: the effective
dimension of the data grows with ``n``, and a dictionary that did not grow with
it would leave a DTC posterior that gets worse with more data. A fixed time
budget would shrink the cap like ``n^{-1/2}``.

With every point in the dictionary the posterior is the exact GP's, built
from one Cholesky factor of ``K + N`` (:func:`~botorch_sketch.linalg.exact_factor`)
and, for the callers that evaluate it through a basis (BBKB's batch UCB), its
triangular inverse (:func:`~botorch_sketch.linalg.exact_predictor`) instead of
the sketch's eigendecompositions; the rule counts the inverse either way:

    E(n) = 3 n^2 d + n^3 / 3 + EXACT_INVERSE_WEIGHT n^3 / 3,

the triangular inverse weighted by the matrix-product rate it falls short of.
Where the budget binds and the capped sketch misses its accuracy criterion,
the default policy uses every point if ``E(n) <= F(cap)`` and the ``n x n``
blocks fit the memory rule (:func:`device_affords_exact`): the exact GP at no
more than the cost of the sketch the budget allows. Only the caches are
compared: the exact predictor then costs ``O(n^2)`` per test point against the
sketch's ``O(m^2)``, which an acquisition function's thousands of evaluations
pay (``benchmarks/results/exact_posterior_ax.md``). That is the ``"posterior"``
window. A model fitted once and then predicted (a regression; a BoTorch loop
that would otherwise fit ``SingleTaskGP``, whose predictions cost the same
``O(n^2)``) can afford more: the ``"build"`` window takes every point wherever
the exact caches fit the time of a whole model build,
``E(n) / flop_rate <= T(n) + FIT_SECONDS`` (:data:`EXACT_WINDOWS`; one CPU
thread: up to about 5,000 points against about 2,900).

The hyperparameter fit on a subsample of ``s`` points evaluates the exact
marginal likelihood about ``FIT_EVALUATIONS`` times, each a Cholesky factor and
its gradient, ``G(s) = 4/3 s^3`` operations, run at ``FIT_EFFICIENCY`` times
the device's matrix-product rate (a Cholesky factor, triangular solves and the
optimizer's small steps do not reach the rate of one large product); the fit
subset is the largest ``s <= n`` with
``FIT_EVALUATIONS G(s) / (FIT_EFFICIENCY flop_rate) <= FIT_SECONDS`` and at least
``min(n, minimum)`` (:func:`device_fit_subset_size`).

The subsample's optimum is then refined by ``REFINE_ITERATIONS`` L-BFGS-B steps
of the exact likelihood on all ``n`` points (:func:`device_refine_iterations`)
where they fit the sketch's time budget,

    REFINE_ITERATIONS REFINE_EVALUATIONS G(n) / (REFINE_EFFICIENCY flop_rate) <= T(n),

and the ``n x n`` blocks the memory rule of the exact posterior, for ``n`` above
``MIN_FIT_SUBSET_SIZE``. One evaluation on ``n`` points reaches a larger share of
the product rate than the many small ones of a subsample fit. On a CPU (the
nominal rate) the rule never holds beyond ``MIN_FIT_SUBSET_SIZE``; on an H200
it holds up to about 19,000 points.

The device facts (:class:`DeviceFacts`) are modelled on a CPU (a fixed nominal
rate ``CPU_FLOP_RATE``, so that a seeded model draws the same dictionary on
every run whatever the machine's load, and the available memory), measured once
per process on a GPU (:func:`measure_device_facts`: a timed product, the
allocator's free memory), or given, so a test can pass fake ones
(:func:`device_facts`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import lru_cache

import torch

from botorch_sketch.models.validation import check_bool_free_int

__all__ = [
    "BASE_SECONDS",
    "CPU_FLOP_RATE",
    "EXACT_INVERSE_WEIGHT",
    "EXACT_MEMORY_BLOCKS",
    "EXACT_WINDOWS",
    "FIT_EFFICIENCY",
    "FIT_EVALUATIONS",
    "FIT_SECONDS",
    "MEMORY_BLOCKS",
    "MIN_FIT_SUBSET_SIZE",
    "REFERENCE_POINTS",
    "REFINE_EFFICIENCY",
    "REFINE_EVALUATIONS",
    "REFINE_ITERATIONS",
    "SECONDS_PER_POINT",
    "DeviceFacts",
    "device_affords_exact",
    "device_dictionary_cap",
    "device_facts",
    "device_fit_subset_size",
    "device_refine_iterations",
    "exact_fits_memory",
    "exact_posterior_flops",
    "fit_flops",
    "measure_device_facts",
    "posterior_cache_flops",
    "sketch_time_budget",
]

#: ``n x m`` blocks held at once by a fit (module docstring).
MEMORY_BLOCKS = 2

#: ``n x n`` blocks held at once while the exact posterior is built: the prior
#: covariance, its Cholesky factor, the triangular inverse and the folded basis
#: (:func:`~botorch_sketch.linalg.exact_predictor`).
EXACT_MEMORY_BLOCKS = 4

#: Where the exact posterior replaces a capped sketch (module docstring): its
#: caches cost no more than the sketch's at the cap (``"posterior"``: every
#: later evaluation of the posterior costs ``O(n^2)`` instead of ``O(m^2)``, so
#: only the caches may not grow), or they fit a whole model build's time
#: (``"build"``: for a model predicted a few times per fit).
EXACT_WINDOWS = ("posterior", "build")

#: Nominal float64 matrix-product rate of one CPU core, operations per second
#: (the modelled CPU flop rate).
CPU_FLOP_RATE = 5e10

#: Seconds of the sketch's time budget ``T(n)`` whatever ``n``.
BASE_SECONDS = 0.25

#: Seconds per training point of the sketch's time budget ``T(n)``.
SECONDS_PER_POINT = 1.5e-4

#: Beyond this many points the time budget ``T(n)`` grows like ``n^{3/2}``.
REFERENCE_POINTS = 4000

#: Weight of the triangular inverse's ``n^3 / 3`` operations in ``E(n)``: it runs
#: at about a third of the matrix-product rate on a CPU thread
#: (``benchmarks/results/exact_posterior.md``).
EXACT_INVERSE_WEIGHT = 3.0

#: Marginal-likelihood evaluations assumed for one hyperparameter fit.
FIT_EVALUATIONS = 100

#: Fraction of the matrix-product rate that the exact likelihood's evaluations
#: reach. Fits on an H100 (float64) took 2.6-8x the time of the product rate's
#: ``G(s)`` (issue 25's rows); on a CPU the rate is nominal and the subset is at
#: its floor ``MIN_FIT_SUBSET_SIZE`` either way.
FIT_EFFICIENCY = 0.2

#: Seconds the hyperparameter fit's evaluations may take.
FIT_SECONDS = 2.5

#: The fit subset is at least this large (or every point).
MIN_FIT_SUBSET_SIZE = 1000

#: L-BFGS-B iterations of the refinement on every point. On standardized Cadata
#: (16,000 points, an H200) ten steps from a 4,000-point fit reach the test NLL of
#: the fit on every point (``benchmarks/results/gpu_cuda.md``).
REFINE_ITERATIONS = 10

#: Likelihood evaluations per L-BFGS-B iteration (its line search), measured.
REFINE_EVALUATIONS = 1.5

#: Fraction of the matrix-product rate of one exact-likelihood evaluation and
#: gradient on ``n >= 10^4`` points (an H200, float64: 0.26 s at ``n = 16,000``).
REFINE_EFFICIENCY = 0.5


@dataclass(frozen=True)
class DeviceFacts:
    r"""What the budget needs to know about a device.

    Attributes:
        flop_rate: Sustained dense matrix-product rate, floating-point operations
            per second, in the compute dtype.
        free_memory: Free memory in bytes.
        itemsize: Bytes per number of the compute dtype.
    """

    flop_rate: float
    free_memory: float
    itemsize: int = 8

    def __post_init__(self) -> None:
        for name in ("flop_rate", "free_memory"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (
                isinstance(value, int | float) and value > 0
            ):
                raise ValueError(f"{name} must be a positive number, got {value!r}.")
        check_bool_free_int(self.itemsize, "itemsize", minimum=1)


def posterior_cache_flops(n: int, m: int, d: int) -> float:
    r"""``F(m)``, the floating-point operations of the posterior caches (module)."""
    return 3.0 * n * m * d + 4.0 * n * m * m + 10.0 * m**3


def exact_posterior_flops(n: int, d: int) -> float:
    r"""``E(n)``, the operations of the exact posterior's caches (module)."""
    return 3.0 * n * n * d + (1.0 + EXACT_INVERSE_WEIGHT) * float(n) ** 3 / 3.0


def fit_flops(s: int) -> float:
    r"""``G(s) = 4/3 s^3``, one exact-likelihood evaluation and gradient (module)."""
    return 4.0 / 3.0 * float(s) ** 3


def sketch_time_budget(n: int) -> float:
    r"""``T(n)`` in seconds (module docstring)."""
    check_bool_free_int(n, "n", minimum=1)
    growth = math.sqrt(max(1.0, n / REFERENCE_POINTS))
    return BASE_SECONDS + SECONDS_PER_POINT * n * growth


def device_dictionary_cap(
    facts: DeviceFacts,
    n: int,
    d: int,
    time_budget: float | None = None,
    memory_fraction: float = 0.5,
) -> int:
    r"""The largest dictionary the device affords for ``n`` points in ``d`` dims.

    The largest ``m`` in ``[1, n]`` with ``F(m) <= flop_rate * time_budget`` and
    ``MEMORY_BLOCKS n m itemsize <= memory_fraction * free_memory``; at least 1.
    ``F`` is increasing in ``m``, so a bisection finds it.

    Args:
        facts: The device's flop rate, free memory and itemsize.
        n: Number of training points.
        d: Input dimension.
        time_budget: Seconds one pass over the posterior caches may take
            (``None``: :func:`sketch_time_budget` of ``n``).
        memory_fraction: Fraction of the free memory the ``n x m`` blocks may use.

    Returns:
        The cap ``m``.
    """
    check_bool_free_int(n, "n", minimum=1)
    check_bool_free_int(d, "d", minimum=1)
    if time_budget is None:
        time_budget = sketch_time_budget(n)
    if isinstance(time_budget, bool) or not (
        isinstance(time_budget, int | float) and time_budget > 0
    ):
        raise ValueError(f"time_budget must be positive, got {time_budget!r}.")
    if not (isinstance(memory_fraction, int | float) and 0 < memory_fraction <= 1):
        raise ValueError(
            f"memory_fraction must lie in (0, 1], got {memory_fraction!r}."
        )
    by_memory = int(
        memory_fraction * facts.free_memory // (MEMORY_BLOCKS * n * facts.itemsize)
    )
    high = max(1, min(n, by_memory))
    flops = facts.flop_rate * time_budget
    low = 1
    while low < high:  # largest m in [low, high] with F(m) <= flops
        mid = (low + high + 1) // 2
        if posterior_cache_flops(n, mid, d) <= flops:
            low = mid
        else:
            high = mid - 1
    return low


def device_affords_exact(
    facts: DeviceFacts,
    n: int,
    d: int,
    cap: int,
    memory_fraction: float = 0.5,
    window: str = "posterior",
) -> bool:
    r"""Whether the device affords the exact posterior of ``n`` points in place
    of the sketch at the dictionary budget ``cap`` (module docstring).

    ``window="posterior"``: ``E(n) <= F(cap)``, the exact caches cost no more
    than the capped sketch's; ``"build"``: ``E(n) <= flop_rate (T(n) +
    FIT_SECONDS)``, they fit a whole model build's time. Either way
    ``EXACT_MEMORY_BLOCKS n^2 itemsize <= memory_fraction * free_memory``.

    Args:
        facts: The device's flop rate, free memory and itemsize.
        n: Number of training points.
        d: Input dimension.
        cap: The dictionary budget (``1 <= cap``).
        memory_fraction: Fraction of the free memory the blocks may use.
        window: One of :data:`EXACT_WINDOWS`.

    Returns:
        ``True`` if every point is affordable.
    """
    check_bool_free_int(n, "n", minimum=1)
    check_bool_free_int(d, "d", minimum=1)
    check_bool_free_int(cap, "cap", minimum=1)
    if window not in EXACT_WINDOWS:
        raise ValueError(f"window must be one of {EXACT_WINDOWS}, got {window!r}.")
    if window == "build":
        allowed = facts.flop_rate * (sketch_time_budget(n) + FIT_SECONDS)
    else:
        allowed = posterior_cache_flops(n, min(cap, n), d)
    return exact_posterior_flops(n, d) <= allowed and exact_fits_memory(
        facts, n, memory_fraction
    )


def exact_fits_memory(facts: DeviceFacts, n: int, memory_fraction: float = 0.5) -> bool:
    r"""Whether the exact posterior's ``EXACT_MEMORY_BLOCKS`` blocks of ``n x n``
    fit: ``EXACT_MEMORY_BLOCKS n^2 itemsize <= memory_fraction * free_memory``."""
    check_bool_free_int(n, "n", minimum=1)
    memory = EXACT_MEMORY_BLOCKS * float(n) * n * facts.itemsize
    return memory <= memory_fraction * facts.free_memory


def device_fit_subset_size(
    facts: DeviceFacts,
    n: int,
    time_budget: float = FIT_SECONDS,
    minimum: int = MIN_FIT_SUBSET_SIZE,
) -> int:
    r"""The fit subset the device affords: the largest ``s`` with
    ``FIT_EVALUATIONS G(s) <= FIT_EFFICIENCY flop_rate time_budget``, within
    ``[min(n, minimum), n]`` (module docstring).

    Args:
        facts: The device's flop rate (memory does not bind: ``s^2`` numbers).
        n: Number of training points.
        time_budget: Seconds the fit's likelihood evaluations may take.
        minimum: The smallest subset (or every point, if fewer).

    Returns:
        The subset size ``s``.
    """
    check_bool_free_int(n, "n", minimum=1)
    check_bool_free_int(minimum, "minimum", minimum=1)
    if isinstance(time_budget, bool) or not (
        isinstance(time_budget, int | float) and time_budget > 0
    ):
        raise ValueError(f"time_budget must be positive, got {time_budget!r}.")
    flops = FIT_EFFICIENCY * facts.flop_rate * time_budget / FIT_EVALUATIONS
    s = int(math.floor((0.75 * flops) ** (1.0 / 3.0)))
    while s > 1 and fit_flops(s) > flops:  # guard the cube root's rounding
        s -= 1
    return min(n, max(s, minimum))


def device_refine_iterations(facts: DeviceFacts, n: int) -> int:
    r"""L-BFGS-B iterations of the refinement on all ``n`` points the device
    affords (module docstring): ``REFINE_ITERATIONS`` if ``n > MIN_FIT_SUBSET_SIZE``,
    ``REFINE_ITERATIONS REFINE_EVALUATIONS G(n) <= REFINE_EFFICIENCY flop_rate
    T(n)`` and :func:`exact_fits_memory`, else 0.

    Args:
        facts: The device's flop rate, free memory and itemsize.
        n: Number of training points.

    Returns:
        ``REFINE_ITERATIONS`` or 0.
    """
    check_bool_free_int(n, "n", minimum=1)
    if n <= MIN_FIT_SUBSET_SIZE or not exact_fits_memory(facts, n):
        return 0
    seconds = (
        REFINE_ITERATIONS
        * REFINE_EVALUATIONS
        * fit_flops(n)
        / (REFINE_EFFICIENCY * facts.flop_rate)
    )
    return REFINE_ITERATIONS if seconds <= sketch_time_budget(n) else 0


def device_facts(
    device: torch.device | str = "cpu", dtype: torch.dtype = torch.float64
) -> DeviceFacts:
    r"""The facts of ``device`` for ``dtype``: modelled on a CPU, measured on a GPU.

    A CPU gets the nominal float64 rate ``CPU_FLOP_RATE`` (whatever ``dtype``)
    and the system's available memory; another device its
    :func:`measure_device_facts`, measured once per process and device (its free
    memory read at every call).
    """
    device = torch.device(device)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if device.type == "cpu":
        return DeviceFacts(CPU_FLOP_RATE, _available_memory(), itemsize)
    rate = _measured_rate(str(device), dtype)
    free = (
        float(torch.cuda.mem_get_info(device)[0])
        if device.type == "cuda"
        else _available_memory()
    )
    return DeviceFacts(rate, free, itemsize)


@lru_cache(maxsize=16)
def _measured_rate(device: str, dtype: torch.dtype) -> float:
    return measure_device_facts(device, dtype, size=2048).flop_rate


def measure_device_facts(
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float64,
    size: int = 512,
) -> DeviceFacts:
    r"""Measured facts of ``device``: one timed ``size x size`` product.

    The free memory is the CUDA allocator's free memory on a GPU and the
    system's available memory elsewhere (``/proc/meminfo``; 8 GiB if unknown).
    """
    device = torch.device(device)
    A = torch.randn(size, size, dtype=dtype, device=device)
    A @ A  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    A @ A
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = max(time.perf_counter() - start, 1e-9)
    if device.type == "cuda":
        free = float(torch.cuda.mem_get_info(device)[0])
    else:
        free = _available_memory()
    itemsize = torch.empty(0, dtype=dtype).element_size()
    return DeviceFacts(2.0 * size**3 / elapsed, free, itemsize)


def _available_memory() -> float:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(8 * 2**30)
