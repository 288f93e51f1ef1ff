"""The device-derived dictionary cap is a pure function of (device facts, n, d)."""

from __future__ import annotations

import pytest

from botorch_sketch.models.budget import (
    MEMORY_BLOCKS,
    DeviceFacts,
    device_dictionary_cap,
    measure_device_facts,
    posterior_cache_flops,
)

CPU = DeviceFacts(flop_rate=2e10, free_memory=8 * 2**30)  # a few CPU cores
GPU = DeviceFacts(flop_rate=5e13, free_memory=70 * 2**30)  # an H100, float64


def test_cap_is_the_largest_affordable_size():
    n, d = 100_000, 6
    m = device_dictionary_cap(CPU, n, d, time_budget=1.0)
    assert posterior_cache_flops(n, m, d) <= CPU.flop_rate
    assert posterior_cache_flops(n, m + 1, d) > CPU.flop_rate


def test_gpu_gets_thousands_where_a_cpu_gets_hundreds():
    n, d = 100_000, 6
    cpu = device_dictionary_cap(CPU, n, d)
    gpu = device_dictionary_cap(GPU, n, d)
    assert 100 <= cpu < 1000 and gpu >= 5000


def test_cap_grows_with_time_and_shrinks_with_data():
    assert device_dictionary_cap(CPU, 10_000, 6, time_budget=4.0) > (
        device_dictionary_cap(CPU, 10_000, 6, time_budget=1.0)
    )
    assert device_dictionary_cap(CPU, 1_000_000, 6) < device_dictionary_cap(
        CPU, 10_000, 6
    )


def test_memory_binds_and_small_data_use_every_point():
    tight = DeviceFacts(flop_rate=1e15, free_memory=2**30)
    n = 1_000_000
    m = device_dictionary_cap(tight, n, 6, memory_fraction=0.5)
    assert MEMORY_BLOCKS * n * m * tight.itemsize <= 0.5 * 2**30
    assert MEMORY_BLOCKS * n * (m + 1) * tight.itemsize > 0.5 * 2**30
    assert device_dictionary_cap(GPU, 300, 6) == 300  # m <= n
    slow = DeviceFacts(flop_rate=1.0, free_memory=1.0)
    assert device_dictionary_cap(slow, 10_000, 6) == 1  # never below one point


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"n": 0}, "n"),
        ({"n": True}, "n"),
        ({"d": 0}, "d"),
        ({"time_budget": 0.0}, "time_budget"),
        ({"memory_fraction": 1.5}, "memory_fraction"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, name):
    args = {"facts": CPU, "n": 100, "d": 2, **kwargs}
    with pytest.raises((TypeError, ValueError), match=name):
        device_dictionary_cap(**args)


def test_bad_facts_name_themselves():
    with pytest.raises(ValueError, match="flop_rate"):
        DeviceFacts(flop_rate=0.0, free_memory=1.0)
    with pytest.raises(TypeError, match="itemsize"):
        DeviceFacts(flop_rate=1.0, free_memory=1.0, itemsize=True)


def test_measured_cpu_facts_are_positive():
    facts = measure_device_facts("cpu", size=128)
    assert facts.flop_rate > 0 and facts.free_memory > 0 and facts.itemsize == 8
    assert device_dictionary_cap(facts, 1_000, 2) >= 1
