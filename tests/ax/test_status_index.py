from __future__ import annotations

import pytest
from ax.core.trial_status import TrialStatus
from ax.orchestration.orchestrator import Orchestrator
from ax.orchestration.orchestrator_options import OrchestratorOptions
from ax.runners.synthetic import SyntheticRunner

from botorch_sketch.ax.status_index import StatusIndexedOrchestrator
from tests.ax.helpers import make_client


@pytest.fixture
def orchestrator() -> StatusIndexedOrchestrator:
    """An experiment with trials in every status an Orchestrator queries."""
    client = make_client("bbkb", "branin", initialization_budget=12)
    trials = client.get_next_trials(max_trials=12)  # RUNNING
    for i in (0, 3, 5, 7, 9):
        client.complete_trial(i, raw_data={"branin": float(i)})
    client.mark_trial_failed(1)
    client.mark_trial_abandoned(2)
    experiment = client._experiment
    experiment.runner = SyntheticRunner()
    experiment.trials[4].mark_early_stopped(unsafe=True)
    # A trial created but not launched, and one staged.
    candidate = experiment.new_trial()
    candidate.add_arm(experiment.trials[0].arm.clone(clear_name=True))
    staged = experiment.new_trial()
    staged.add_arm(experiment.trials[0].arm.clone(clear_name=True))
    staged.mark_staged(unsafe=True)
    assert len(trials) == 12
    return StatusIndexedOrchestrator(
        experiment=experiment,
        generation_strategy=client._generation_strategy_or_choose(),
        options=OrchestratorOptions(),
    )


def indices(trials) -> list[int]:
    return [t.index for t in trials]


def test_status_queries_match_ax(orchestrator):
    ax = Orchestrator
    for name in ("running_trial_indices", "failed_abandoned_trial_indices"):
        ours = getattr(orchestrator, name)
        assert ours == getattr(ax, name).fget(orchestrator), name
    assert orchestrator.running_trial_indices == {6, 8, 10, 11}
    assert orchestrator.failed_abandoned_trial_indices == {1, 2}
    for name in (
        "running_trials",
        "pending_trials",
        "candidate_trials",
        "trials_expecting_data",
    ):
        ours = indices(getattr(orchestrator, name))
        assert sorted(ours) == sorted(indices(getattr(ax, name).fget(orchestrator)))
        assert len(ours) == len(set(ours)), name
    assert indices(orchestrator.candidate_trials) == [12]
    assert sorted(indices(orchestrator.pending_trials)) == [6, 8, 10, 11, 13]
    # Completed, early-stopped and running trials expect data.
    assert indices(orchestrator.trials_expecting_data) == [0, *range(3, 12)]


def test_indices_to_fetch_and_recently_completed_match_ax(orchestrator):
    polled = {TrialStatus.COMPLETED: {6, 8}, TrialStatus.FAILED: {10}}
    ours = orchestrator._get_trial_indices_to_fetch(polled)
    assert ours == Orchestrator._get_trial_indices_to_fetch(orchestrator, polled)
    assert {6, 8} <= ours
    assert orchestrator._get_recently_completed_trial_indices() == set()
    assert Orchestrator._get_recently_completed_trial_indices(orchestrator) == set()
    # The index follows status changes.
    orchestrator.experiment.trials[6].mark_completed()
    assert 6 not in orchestrator.running_trial_indices
    assert 6 in indices(orchestrator.trials_expecting_data)
