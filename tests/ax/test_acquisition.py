"""AdaptiveBatchAcquisition on choice parameters: filled batches are new points."""

from __future__ import annotations

import torch
from ax import ChoiceParameterConfig, Client

from botorch_sketch.ax import get_generation_strategy, get_next_batch
from tests.ax.helpers import FAST

LEVELS = 4


def value(p: dict) -> float:
    """A smooth objective with a categorical effect, maximised near the centre."""
    u = [p[f"o{i}"] / (LEVELS - 1) for i in range(3)]
    f = -sum((ui - 0.5) ** 2 for ui in u)
    return f + {"a": 0.0, "b": 0.2, "c": -0.1}[p["c0"]] + 0.05 * (p["c1"] == "y")


def choice_client() -> Client:
    """3 ordinal parameters with 4 levels, 2 categorical ones (one-hot in Ax's
    model space, so Ax's mixed optimiser relaxes and rounds them)."""
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            ChoiceParameterConfig(
                name=f"o{i}",
                parameter_type="int",
                values=list(range(LEVELS)),
                is_ordered=True,
            )
            for i in range(3)
        ]
        + [
            ChoiceParameterConfig(name="c0", parameter_type="str", values=list("abc")),
            ChoiceParameterConfig(name="c1", parameter_type="str", values=list("xy")),
        ]
    )
    client.configure_optimization(objective="f")
    client.set_generation_strategy(
        get_generation_strategy("bbkb", seed=0, min_batch_size=8, **FAST)
    )
    return client


def test_filled_batches_on_choice_parameters_have_no_repeats():
    client = choice_client()
    gen = torch.Generator().manual_seed(0)
    seen: set[tuple] = set()
    repeats, sizes = 0, []
    for _ in range(3):  # the Sobol batch, then two model batches
        batch = get_next_batch(client, 8)
        sizes.append(len(batch))
        for index, p in batch.items():
            key = tuple(sorted(p.items()))
            repeats += key in seen
            seen.add(key)
            y = value(p) + 0.01 * float(torch.randn(1, generator=gen))
            client.complete_trial(index, raw_data={"f": y})
    assert sizes[1:] == [8, 8]
    assert repeats == 0
