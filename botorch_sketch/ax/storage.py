r"""Registration of our classes with Ax's JSON (and SQL) storage.

Ax stores a class by a registered name and looks the name up when loading
(``ax.storage.botorch_modular_registry``), so every process that saves or loads an
experiment using our strategies must register them first. Importing
``botorch_sketch.ax`` does that; :func:`register_with_ax` is idempotent and can be
called again explicitly.
"""

from __future__ import annotations

from ax.storage.botorch_modular_registry import (
    ACQUISITION_FUNCTION_REGISTRY,
    ACQUISITION_REGISTRY,
    MODEL_REGISTRY,
    register_acquisition,
    register_acquisition_function,
    register_model,
)
from ax.storage.json_store.encoders import (
    pausing_criterion_to_dict,
    transition_criterion_to_dict,
)
from ax.storage.json_store.registry import (
    CORE_DECODER_REGISTRY,
    CORE_ENCODER_REGISTRY,
)

from botorch_sketch.acquisition.bbkb import BatchUpperConfidenceBound
from botorch_sketch.ax.acquisition import AdaptiveBatchAcquisition
from botorch_sketch.ax.checks import ExperimentCheck, ExperimentGuard
from botorch_sketch.ax.generator import SketchGenerators
from botorch_sketch.models.goucb import GOUCBModel
from botorch_sketch.models.gssbo import GradientSubsetGP
from botorch_sketch.models.nystrom import NystromGP

__all__ = ["register_with_ax"]

#: The BoTorch models our strategies store.
MODELS = (NystromGP, GradientSubsetGP, GOUCBModel)
#: The BoTorch acquisition functions our strategies store.
ACQUISITION_FUNCTIONS = (BatchUpperConfidenceBound,)
#: The Ax ``Acquisition`` classes our strategies store.
ACQUISITIONS = (AdaptiveBatchAcquisition,)
#: Our generator registry enums (Ax JSON stores an enum by its class name).
GENERATOR_ENUMS = (SketchGenerators,)
#: Our transition criteria (stored like Ax's, by their constructor arguments).
TRANSITION_CRITERIA = (ExperimentCheck,)
#: Our pausing criteria (stored like Ax's, by their constructor arguments).
PAUSING_CRITERIA = (ExperimentGuard,)


def register_with_ax() -> None:
    r"""Register our models, acquisition functions, ``Acquisition`` classes,
    generator enums, transition and pausing criteria."""
    for model in MODELS:
        if model not in MODEL_REGISTRY:
            register_model(model)
    for acqf in ACQUISITION_FUNCTIONS:
        if acqf not in ACQUISITION_FUNCTION_REGISTRY:
            register_acquisition_function(acqf)
    for acquisition in ACQUISITIONS:
        if acquisition not in ACQUISITION_REGISTRY:
            register_acquisition(acquisition)
    for enum in GENERATOR_ENUMS:
        CORE_DECODER_REGISTRY.setdefault(enum.__name__, enum)
    for criterion in TRANSITION_CRITERIA:
        CORE_ENCODER_REGISTRY.setdefault(criterion, transition_criterion_to_dict)
        CORE_DECODER_REGISTRY.setdefault(criterion.__name__, criterion)
    for criterion in PAUSING_CRITERIA:
        CORE_ENCODER_REGISTRY.setdefault(criterion, pausing_criterion_to_dict)
        CORE_DECODER_REGISTRY.setdefault(criterion.__name__, criterion)
