import math

import pytest
import torch

from botorch_sketch.optim.basins import hill_valley_centers

DT = torch.float64


def two_wells(Z: torch.Tensor) -> torch.Tensor:
    """Score with a deep well at 0.8 and a shallow one at 0.2 (1-d), larger better."""
    x = Z[..., 0]
    return torch.exp(-((x - 0.8) ** 2) / 0.01) + 0.6 * torch.exp(
        -((x - 0.2) ** 2) / 0.01
    )


def test_one_centre_per_basin_best_first():
    """The best point of each well, the deep one first; the points on either
    well's slopes join their well however far they lie from its best point."""
    X = torch.tensor([[0.78], [0.9], [0.65], [0.25], [0.1], [0.5]], dtype=DT)
    got = hill_valley_centers(X, two_wells, 5)
    # 0.5 is the valley's floor: its segment to the deep well climbs all the
    # way, so it joins that well rather than making a basin of its own.
    assert got.tolist() == [0, 3]


def test_distance_does_not_split_a_basin():
    """A wide single basin: points far apart on one slope are one basin."""
    X = torch.linspace(0.0, 1.0, 11, dtype=DT).unsqueeze(-1)
    got = hill_valley_centers(X, lambda Z: -Z[..., 0], 4)
    assert got.tolist() == [0]


def test_tolerance_merges_shallow_dips_and_num_centers_caps():
    X = torch.tensor([[0.78], [0.25]], dtype=DT)
    assert hill_valley_centers(X, two_wells, 5).tolist() == [0, 1]
    assert hill_valley_centers(X, two_wells, 1).tolist() == [0]
    # The dip between the wells is ~0.6 deep below the shallow well's best point.
    assert hill_valley_centers(X, two_wells, 5, tolerance=0.7).tolist() == [0]


def test_chunked_scores_match(monkeypatch):
    import botorch_sketch.optim.basins as basins

    gen = torch.Generator().manual_seed(0)
    X = torch.rand(40, 2, generator=gen, dtype=DT)

    def score(Z):
        return torch.sin(6 * Z[..., 0]) * torch.cos(5 * Z[..., 1])

    full = hill_valley_centers(X, score, 6)
    monkeypatch.setattr(basins, "SCORE_CHUNK", 7)
    assert hill_valley_centers(X, score, 6).tolist() == full.tolist()
    assert len(full) >= 2 and math.isclose(
        float(score(X[full[:1]])), float(score(X).max())
    )


def test_given_scores_are_used_and_checked():
    """Scores the caller already has give the same centres without calling
    score_fn on X again; scores of the wrong shape are refused."""
    X = torch.tensor([[0.78], [0.9], [0.65], [0.25], [0.1], [0.5]], dtype=DT)
    calls = []

    def counted(Z):
        calls.append(Z.shape[0])
        return two_wells(Z)

    got = hill_valley_centers(X, counted, 5, scores=two_wells(X))
    assert got.tolist() == hill_valley_centers(X, two_wells, 5).tolist()
    assert X.shape[0] not in calls  # only segments (multiples of 5 rows)
    with pytest.raises(ValueError, match="one value per row"):
        hill_valley_centers(X, two_wells, 5, scores=two_wells(X)[:3])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_centers": 0}, "num_centers"),
        ({"num_centers": True}, "num_centers"),
        ({"num_interior": 0}, "num_interior"),
        ({"tolerance": -1.0}, "tolerance"),
        ({"X": torch.zeros(0, 2, dtype=DT)}, "non-empty"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    args = {
        "X": torch.rand(4, 2, dtype=DT),
        "score_fn": lambda Z: Z.sum(-1),
        "num_centers": 2,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        hill_valley_centers(**args)
