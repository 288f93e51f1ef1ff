"""Reading an Ax ``Data``'s rows without its data frame."""

from __future__ import annotations

from ax.core.data import Data, DataRow

from botorch_sketch.ax.data_rows import data_rows, rows_before, same_rows


def row(trial: int, metric: str = "f", mean: float = 0.0) -> DataRow:
    return DataRow(
        trial_index=trial,
        arm_name=f"{trial}_0",
        metric_name=metric,
        metric_signature=metric,
        mean=mean,
        se=float("nan"),
    )


def test_data_rows_are_the_datas_own_row_objects():
    rows = [row(0), row(1), row(1, "g")]
    data = Data(data_rows=rows)
    got = data_rows(data)
    assert got is not None and same_rows(got, rows)
    assert "full_df" not in data.__dict__  # no frame was built


def test_data_without_a_row_list_gives_none():
    class Frameless:
        pass

    assert data_rows(Frameless()) is None


def test_rows_before_keeps_order_and_filters_by_trial():
    rows = [row(3), row(0), row(1, "g"), row(2)]
    assert same_rows(rows_before(rows, 2), [rows[1], rows[2]])
    assert rows_before(rows, 0) == []


def test_same_rows_is_identity_not_equality():
    a, b = row(0), row(1)
    assert same_rows([a, b], [a, b])
    assert not same_rows([a, b], [b, a])
    assert not same_rows([a], [a, b])
    assert not same_rows([a], [row(0)])  # equal values, another object


def test_attaching_data_keeps_the_rows_it_does_not_replace():
    r"""The premise of the reuse: Ax's ``attach_data`` carries the unchanged
    rows over as the same objects and replaces a re-attached observation."""
    from ax import Client, RangeParameterConfig

    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", parameter_type="float", bounds=(0, 1))
        ]
    )
    client.configure_optimization(objective="f")
    for value in (0.1, 0.2, 0.3):
        index = client.attach_trial({"x": value})
        client.complete_trial(index, {"f": value})
    experiment = client._experiment
    before = list(data_rows(experiment.lookup_data()))
    index = client.attach_trial({"x": 0.4})
    client.complete_trial(index, {"f": 0.4})
    after = data_rows(experiment.lookup_data())
    assert same_rows(rows_before(after, 3), before)
    experiment.attach_data(Data(data_rows=[row(1, mean=9.0)]))
    again = data_rows(experiment.lookup_data())
    assert again[0] is before[0] and again[2] is before[2]
    assert again[1] is not before[1] and again[1].mean == 9.0
