r"""Checks of a strategy against its experiment, at the first generation call.

``get_generation_strategy`` validates every option on its own (
:mod:`botorch_sketch.ax.options`), but some problems only show against the
experiment: a candidate library whose width is not the search space's dimension,
or an optimization config the method cannot handle (BBKB's batch UCB optimises
one objective without outcome constraints). Ax hands a strategy its experiment
when it first generates (``Client.set_generation_strategy`` only stores it), and
before generating it evaluates the transition criteria of the current node. So
:class:`ExperimentCheck`, the first criterion of the Sobol node, runs these checks
at the first ``get_next_trials`` of an experiment, before any trial exists, and
otherwise never decides anything (it is always "met", the node's ``MinTrials``
decides the transition). It is stored with the strategy in Ax JSON.
"""

from __future__ import annotations

from typing import Any

from ax.core.experiment import Experiment
from ax.core.optimization_config import MultiObjectiveOptimizationConfig
from ax.exceptions.core import UnsupportedError
from ax.generation_strategy.transition_criterion import TransitionCriterion

from botorch_sketch.ax.encoding import model_space

__all__ = ["ExperimentCheck"]


class ExperimentCheck(TransitionCriterion):
    r"""Validate a strategy against its experiment; never blocks a transition.

    Args:
        transition_to: The node the Sobol node transitions to (as ``MinTrials``).
        strategy: The strategy's name (for the messages).
        single_objective: The method optimises one objective without outcome
            constraints.
        candidate_width: Columns of the strategy's ``candidate_set`` (``None``:
            no library).
        continue_trial_generation: As ``TransitionCriterion``.
    """

    def __init__(
        self,
        transition_to: str,
        strategy: str,
        single_objective: bool = False,
        candidate_width: int | None = None,
        continue_trial_generation: bool | None = False,
    ) -> None:
        super().__init__(
            transition_to=transition_to,
            continue_trial_generation=continue_trial_generation,
        )
        self.strategy = strategy
        self.single_objective = single_objective
        self.candidate_width = candidate_width

    def is_met(self, experiment: Experiment, curr_node: Any = None) -> bool:
        r"""Run the checks (raising on a problem); always ``True`` otherwise."""
        if self.single_objective:
            self._check_single_objective(experiment)
        if self.candidate_width is not None:
            self._check_candidate_width(experiment)
        return True

    def _check_single_objective(self, experiment: Experiment) -> None:
        config = experiment.optimization_config
        if config is None:
            return
        if isinstance(config, MultiObjectiveOptimizationConfig):
            problem = "several objectives"
        elif config.outcome_constraints:
            problem = "outcome constraints"
        else:
            return
        raise UnsupportedError(
            f"Strategy {self.strategy!r} optimises one objective without outcome "
            f"constraints (BBKB's batch UCB), but this experiment has {problem}. Use "
            "'gssbo', 'rssbo' or 'goucb' (their models go in a model list with "
            "constrained or multi-objective acquisition functions) or Ax's default."
        )

    def _check_candidate_width(self, experiment: Experiment) -> None:
        names = list(model_space(experiment.search_space).parameters)
        if len(names) != self.candidate_width:
            raise ValueError(
                f"Strategy {self.strategy!r}: candidate_set has "
                f"{self.candidate_width} columns but the experiment has "
                f"{len(names)} in Ax's model space ({', '.join(names)}); give one "
                "column per range parameter, in parameter order and units, or "
                "make the rows with botorch_sketch.ax.encode_library (choice "
                "parameters one-hot or numbered as Ax encodes them)."
            )
