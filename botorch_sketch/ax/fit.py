r"""How Ax fits our models that are not gpytorch models.

Ax fits a surrogate through the dispatcher
``ax.generators.torch.botorch_modular.utils.fit_botorch_model``, which handles
``GPyTorchModel`` s (``NystromGP``, ``GradientSubsetGP``) with
``fit_gpytorch_mll`` and raises ``NotImplementedError`` for any other ``Model``.
:class:`~botorch_sketch.models.GOUCBModel` fits itself when it is built (GO-UCB's
Phase I regression oracle and the Phase II replay, Liu & Wang, ICML 2023, Alg. 1),
so its registered fit has nothing left to do.
"""

from __future__ import annotations

import logging
from typing import Any

from ax.generators.torch.botorch_modular.utils import fit_botorch_model

from botorch_sketch.models.goucb import GOUCBModel, fit_goucb_model

logger = logging.getLogger(__name__)


@fit_botorch_model.register(GOUCBModel)
def _fit_goucb_for_ax(
    model: GOUCBModel, mll_class: Any = None, mll_options: Any = None
) -> None:
    r"""Ax's fit hook: a model built with ``fit=False`` is fitted here."""
    if not model.is_fitted:
        fit_goucb_model(model)
