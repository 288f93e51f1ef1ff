r"""Ax's Orchestrator with its trial-status queries read from the experiment's index.

Ax's ``Orchestrator`` answers "which trials are running / failed / expecting
data" by walking every trial of the experiment and reading its ``status``
property (which also checks the trial's time-to-live), several times per poll:
``running_trial_indices``, ``failed_abandoned_trial_indices`` (the failure-rate
check, before every launch), ``trials_expecting_data``,
``_get_trial_indices_to_fetch`` and, through ``Experiment.trials_by_status``,
``running_trials``, ``pending_trials`` and ``candidate_trials``. In a closed loop
of ``N`` trials that is ``O(N)`` Python per poll, between a worker's finish and
its next trial: about 20 ms a poll at 1,500 trials on one CPU thread, most of
the loop's own time (``benchmarks/results/ray_workers_summary.md``).

The experiment keeps the same answer as an index, ``trial_indices_by_status``
(``TrialStatus -> set of indices``), updated by every ``mark_*`` and checked for
expired candidates on access. :class:`StatusIndexedOrchestrator` reads that
index instead, for orchestrators of one trial type (``trial_type=None``, what
``Client.run_trials`` builds); the others take Ax's code. The answers are the
same sets and the same trials in index order.
"""

from __future__ import annotations

from datetime import timedelta

from ax.core.base_trial import BaseTrial
from ax.core.trial_status import STATUSES_EXPECTING_DATA, TrialStatus
from ax.orchestration.orchestrator import Orchestrator
from ax.utils.common.constants import Keys

__all__ = ["StatusIndexedOrchestrator"]


class StatusIndexedOrchestrator(Orchestrator):
    r"""``Orchestrator`` whose status queries read
    ``experiment.trial_indices_by_status`` (module docstring)."""

    def _indices_with(self, *statuses: TrialStatus) -> set[int]:
        r"""Indices of the trials in any of ``statuses`` (a new set)."""
        by_status = self.experiment.trial_indices_by_status
        return set().union(*(by_status.get(status, ()) for status in statuses))

    def _trials_with(self, *statuses: TrialStatus) -> list[BaseTrial]:
        r"""The trials in any of ``statuses``, in index order."""
        trials = self.experiment.trials
        return [trials[i] for i in sorted(self._indices_with(*statuses))]

    @property
    def running_trials(self) -> list[BaseTrial]:
        if self.trial_type is not None:
            return super().running_trials
        return self._trials_with(TrialStatus.RUNNING)

    @property
    def running_trial_indices(self) -> set[int]:
        if self.trial_type is not None:
            return super().running_trial_indices
        return self._indices_with(TrialStatus.RUNNING)

    @property
    def failed_abandoned_trial_indices(self) -> set[int]:
        if self.trial_type is not None:
            return super().failed_abandoned_trial_indices
        return self._indices_with(TrialStatus.ABANDONED, TrialStatus.FAILED)

    @property
    def pending_trials(self) -> list[BaseTrial]:
        if self.trial_type is not None:
            return super().pending_trials
        return self._trials_with(TrialStatus.RUNNING) + self._trials_with(
            TrialStatus.STAGED
        )

    @property
    def candidate_trials(self) -> list[BaseTrial]:
        if self.trial_type is not None:
            return super().candidate_trials
        return self._trials_with(TrialStatus.CANDIDATE)

    @property
    def trials_expecting_data(self) -> list[BaseTrial]:
        if self.trial_type is not None:
            return super().trials_expecting_data
        return [
            trial
            for trial in self._trials_with(*STATUSES_EXPECTING_DATA)
            if trial.trial_type != Keys.LILO_LABELING  # as BaseTrial.expecting_data
        ]

    def _get_trial_indices_to_fetch(
        self, polled_status_to_trial_idcs: dict[TrialStatus, set[int]]
    ) -> set[int]:
        if self.trial_type is not None:
            return super()._get_trial_indices_to_fetch(polled_status_to_trial_idcs)
        old = {status: self._indices_with(status) for status in TrialStatus}
        return self._identify_trial_indices_to_fetch(
            old_status_to_trial_idcs=old,
            polled_status_to_trial_idcs=polled_status_to_trial_idcs,
        )

    def _get_recently_completed_trial_indices(self) -> set[int]:
        # None can qualify when no metric expects data after completion (Ax
        # keeps trials completed less than that period ago): skip the walk.
        metrics = self.experiment.metrics.values()
        if metrics and max(
            m.period_of_new_data_after_trial_completion() for m in metrics
        ) <= timedelta(0):
            return set()
        return super()._get_recently_completed_trial_indices()
