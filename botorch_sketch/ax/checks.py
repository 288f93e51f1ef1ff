r"""Checks of a strategy against its experiment, at every generation call.

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
decides the transition). The experiment can change later
(``Client.configure_optimization`` after some trials), so the model-based node
carries :class:`ExperimentGuard`, a pausing criterion that Ax evaluates before
each of the node's generations, running the same checks: a change the method
cannot honour raises before the model is fitted and before any trial exists. Both
are stored with the strategy in Ax JSON.
"""

from __future__ import annotations

from typing import Any

from ax.core.experiment import Experiment
from ax.core.optimization_config import MultiObjectiveOptimizationConfig
from ax.exceptions.core import UnsupportedError
from ax.generation_strategy.transition_criterion import (
    PausingCriterion,
    TransitionCriterion,
)

from botorch_sketch.ax.encoding import model_space

__all__ = ["ExperimentCheck", "ExperimentGuard", "check_experiment"]


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
        check_experiment(
            experiment, self.strategy, self.single_objective, self.candidate_width
        )
        return True


class ExperimentGuard(PausingCriterion):
    r"""The checks of :class:`ExperimentCheck` before every generation of a node.

    Ax evaluates a node's pausing criteria before it generates; this one raises
    when the experiment no longer suits the strategy and otherwise never pauses.

    Args:
        strategy: The strategy's name (for the messages).
        single_objective: The method optimises one objective without outcome
            constraints.
        candidate_width: Columns of the strategy's ``candidate_set`` (``None``:
            no library).
    """

    def __init__(
        self,
        strategy: str,
        single_objective: bool = False,
        candidate_width: int | None = None,
    ) -> None:
        self.strategy = strategy
        self.single_objective = single_objective
        self.candidate_width = candidate_width

    def is_met(self, experiment: Experiment, curr_node: Any = None) -> bool:
        r"""Run the checks (raising on a problem); never pauses (``False``)."""
        check_experiment(
            experiment, self.strategy, self.single_objective, self.candidate_width
        )
        return False

    def block_continued_generation_error(
        self, node_name: str, experiment: Experiment, trials_from_node: set[int]
    ) -> None:
        r"""Never called: :meth:`is_met` raises itself or returns ``False``."""


def check_experiment(
    experiment: Experiment,
    strategy: str,
    single_objective: bool,
    candidate_width: int | None,
) -> None:
    r"""Raise if ``experiment`` asks what strategy ``strategy`` cannot do.

    Raises:
        UnsupportedError: A single-objective method on an experiment with several
            objectives or with outcome constraints (named in the message).
        ValueError: A ``candidate_set`` whose width is not the model space's.
    """
    if single_objective:
        _check_single_objective(experiment, strategy)
    if candidate_width is not None:
        _check_candidate_width(experiment, strategy, candidate_width)


def _check_single_objective(experiment: Experiment, strategy: str) -> None:
    config = experiment.optimization_config
    if config is None:
        return
    if isinstance(config, MultiObjectiveOptimizationConfig):
        problem = "several objectives"
    elif config.outcome_constraints:
        names = sorted({n for c in config.outcome_constraints for n in c.metric_names})
        problem = f"outcome constraints (on {', '.join(names)})"
    else:
        return
    raise UnsupportedError(
        f"Strategy {strategy!r} optimises one objective without outcome "
        f"constraints (BBKB's batch UCB), but this experiment has {problem}; no "
        "trial was created. Use 'gssbo', 'rssbo' or 'goucb' (their models go in a "
        "model list with constrained or multi-objective acquisition functions) or "
        "Ax's default."
    )


def _check_candidate_width(
    experiment: Experiment, strategy: str, candidate_width: int
) -> None:
    names = list(model_space(experiment.search_space).parameters)
    if len(names) != candidate_width:
        raise ValueError(
            f"Strategy {strategy!r}: candidate_set has "
            f"{candidate_width} columns but the experiment has "
            f"{len(names)} in Ax's model space ({', '.join(names)}); give one "
            "column per range parameter, in parameter order and units, or "
            "make the rows with botorch_sketch.ax.encode_library (choice "
            "parameters one-hot or numbered as Ax encodes them)."
        )
