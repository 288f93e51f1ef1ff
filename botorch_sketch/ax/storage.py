r"""Registration of our classes with Ax's JSON (and SQL) storage.

Ax stores a class by a registered name and looks the name up when loading
(``ax.storage.botorch_modular_registry``), so every process that saves or loads an
experiment using our strategies must register them first. Importing
``botorch_sketch.ax`` does that; :func:`register_with_ax` is idempotent and can be
called again explicitly.

:func:`save_experiment` saves an ``ax.Client`` like ``Client.save_to_json_file``,
but atomically: the snapshot is serialized first, written to a temporary file in
the target's folder, flushed to disk, and only then renamed over the target
(``os.replace``), so an interruption at any point leaves the previous snapshot
intact (``Client.save_to_json_file`` truncates the file before it serializes).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

from ax.api.client import Client
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

logger = logging.getLogger(__name__)

__all__ = ["register_with_ax", "save_experiment"]

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


def save_experiment(client: Client, path: str | os.PathLike[str]) -> None:
    r"""Save ``client`` to the JSON file ``path``, atomically.

    The file then holds either the previous snapshot or the new one, never a
    partial one; load it with ``Client.load_from_json_file``.

    Args:
        client: The ``ax.Client`` to save.
        path: The JSON file; its folder must exist.

    Raises:
        TypeError: ``client`` is not an ``ax.Client`` or ``path`` not a path.
        ValueError: ``path``'s folder does not exist, or ``path`` is a folder.
    """
    if not isinstance(client, Client):
        raise TypeError(f"client must be an ax.Client, got {type(client).__name__}.")
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or os.PathLike, got {path!r}.")
    target = Path(path)
    folder = target.resolve().parent
    if not folder.is_dir():
        raise ValueError(f"path's folder {str(folder)!r} does not exist.")
    if target.is_dir():
        raise ValueError(f"path {str(target)!r} is a folder, not a file.")
    text = json.dumps(client._to_json_snapshot())  # before any file changes
    fd, temporary = tempfile.mkstemp(
        dir=folder, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_folder(folder)
    logger.debug("Saved the client to %s.", target)


def _fsync_folder(folder: Path) -> None:
    r"""Flush the rename to disk where the platform allows it (POSIX)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
