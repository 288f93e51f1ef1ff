r"""A dictionary budget derived from the device that holds the data.

The posterior caches of a DTC model with ``m`` dictionary points over ``n``
training points in ``d`` dimensions cost, in floating-point operations,

    F(m) = 3 n m d        (the n x m kernel block)
         + 4 n m^2        (the embedding Z = K_XS W and Z^T Z)
         + 10 m^3         (the m x m eigendecomposition and factors)

and about ``B n m`` numbers of memory (``B = 4`` blocks of ``n x m``). The cap is
the largest ``m <= n`` with ``F(m) / flop_rate <= time_budget`` and
``B n m itemsize <= memory_fraction * free_memory``
(:func:`device_dictionary_cap`). The device facts are measured
(:func:`measure_device_facts`) or given, so a test can pass fake ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from botorch_sketch.models.validation import check_bool_free_int

__all__ = [
    "DeviceFacts",
    "device_dictionary_cap",
    "measure_device_facts",
    "posterior_cache_flops",
]

#: ``n x m`` blocks held at once by a fit.
MEMORY_BLOCKS = 4


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


def device_dictionary_cap(
    facts: DeviceFacts,
    n: int,
    d: int,
    time_budget: float = 1.0,
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
        time_budget: Seconds one pass over the posterior caches may take.
        memory_fraction: Fraction of the free memory the ``n x m`` blocks may use.

    Returns:
        The cap ``m``.
    """
    check_bool_free_int(n, "n", minimum=1)
    check_bool_free_int(d, "d", minimum=1)
    if not (isinstance(time_budget, int | float) and time_budget > 0):
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
