r"""The state a :class:`~botorch_sketch.models.NystromGP` carries to the next model.

A loop (BoTorch's, Ax's) builds a new model at every call. :class:`SketchState`
holds what the next one starts from: hyperparameters, the dictionary (as row
indices with a checksum, and as inputs) and the fit schedule's bookkeeping. It
has a JSON form (:meth:`SketchState.to_dict`) for Ax's generator state, and is
checked when it is loaded (:meth:`SketchState.problems`): a state with
non-finite numbers or out-of-range rows cannot be used.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood
from torch import Tensor

from botorch_sketch.models.extra_state import EXTRA_STATE_KEY

__all__ = ["SketchState", "hyperparameter_state"]

#: State-dict prefixes that are not hyperparameters: transforms are refitted to
#: the current data by the new model itself.
_NOT_HYPERPARAMETERS = ("outcome_transform.", "input_transform.", EXTRA_STATE_KEY)


@dataclass(frozen=True)
class SketchState:
    r"""What a :class:`NystromGP` carries to the next model of a loop.

    The dictionary is recorded twice: as row indices into the training data of
    the model that produced the state (with a checksum of those rows), which is
    compact and survives when the next model's data extend this one's (BoTorch
    and Ax loops append observations), and, in memory, as the transformed inputs
    themselves, which the next model locates among its own even if the data were
    reordered.

    Attributes:
        hyperparameters: Kernel, mean and likelihood state (no transforms, no
            per-point fixed noise), as in ``state_dict()``.
        dictionary_rows: ``|S|`` training-row indices of the dictionary.
        rows_checksum: Sum of the transformed training inputs at those rows.
        num_fit_points: Number of training points when the hyperparameters were
            last fitted.
        fit_loss: Per-point negative exact log marginal likelihood of the fit
            subsample at that fit (``nan`` if unknown, e.g. a VFE fit).
        num_draws: Random draws made so far (seeds of the next draws).
        sketch_ridge: The ridge the dictionary samples where the budget bound
            (``nan`` otherwise); the next resampling scores at it.
        drift_refits: Consecutive calls, up to this one, that refitted because
            the likelihood drifted (:func:`_scheduled_refit` tries a cold start
            from the second).
        dictionary_inputs: Optional ``batch_shape x (m) x |S| x d`` transformed
            inputs of the dictionary (not in the compact JSON form).
    """

    hyperparameters: Mapping[str, Tensor]
    dictionary_rows: Tensor
    rows_checksum: float
    num_fit_points: int
    fit_loss: float
    num_draws: int
    sketch_ridge: float = math.nan
    drift_refits: int = 0
    dictionary_inputs: Tensor | None = None

    def to_dict(self, compact: bool = True) -> dict[str, Any]:
        r"""A JSON-ready form (lists, numbers and strings), e.g. for Ax.

        Args:
            compact: Store the dictionary as a base64 bit mask over the producing
                model's rows (about ``n / 6`` characters) and leave out its
                inputs.
        """
        rows = self.dictionary_rows.cpu()
        out: dict[str, Any] = {
            "hyperparameters": {
                k: {"shape": list(v.shape), "values": v.reshape(-1).tolist()}
                for k, v in self.hyperparameters.items()
            },
            "dictionary_rows": _rows_to_mask(rows) if compact else rows.tolist(),
            "rows_checksum": float(self.rows_checksum),
            "num_fit_points": int(self.num_fit_points),
            "fit_loss": float(self.fit_loss),
            "num_draws": int(self.num_draws),
            "sketch_ridge": float(self.sketch_ridge),
            "drift_refits": int(self.drift_refits),
        }
        if not compact and self.dictionary_inputs is not None:
            out["dictionary_inputs"] = _tensor_to_dict(self.dictionary_inputs)
        return out

    def problems(self, n: int | None = None) -> list[str]:
        r"""Why this state cannot be used (empty if it can).

        Non-finite hyperparameters (a crash mid-fit, a hand edit), dictionary
        rows outside ``[0, n)`` for a model of ``n`` points, a negative or
        non-finite bookkeeping number.

        Args:
            n: Number of training points of the model that would use the state.
        """
        found = [
            f"hyperparameter {key} is not finite"
            for key, value in self.hyperparameters.items()
            if torch.is_tensor(value)
            and "constraint." not in key  # bounds may be infinite
            and value.is_floating_point()
            and not torch.isfinite(value).all()
        ]
        rows = self.dictionary_rows
        if rows.numel() and (
            int(rows.min()) < 0 or (n is not None and int(rows.max()) >= n)
        ):
            found.append(f"dictionary rows outside [0, {n if n is not None else 'n'})")
        if self.num_fit_points < 0 or self.num_draws < 0 or self.drift_refits < 0:
            found.append("negative counts")
        if math.isinf(self.fit_loss) or not math.isfinite(self.rows_checksum):
            found.append("non-finite fit loss or checksum")
        if math.isinf(self.sketch_ridge) or self.sketch_ridge <= 0:
            found.append(f"sketch_ridge {self.sketch_ridge} is not a positive ridge")
        if (
            self.dictionary_inputs is not None
            and not torch.isfinite(self.dictionary_inputs).all()
        ):
            found.append("dictionary inputs are not finite")
        return found

    @classmethod
    def from_dict(
        cls, state: Mapping[str, Any] | SketchState, dtype: torch.dtype = torch.float64
    ) -> SketchState:
        r"""Inverse of :meth:`to_dict` (also accepts a :class:`SketchState`)."""
        if isinstance(state, SketchState):
            return state
        if not isinstance(state, Mapping):
            raise ValueError(
                "warm_start must be a SketchState or its to_dict(), got "
                f"{type(state).__name__}."
            )
        missing = {
            "hyperparameters",
            "dictionary_rows",
            "rows_checksum",
            "num_fit_points",
            "fit_loss",
            "num_draws",
        } - set(state)
        if missing:
            raise ValueError(f"warm_start lacks {sorted(missing)}.")
        rows = state["dictionary_rows"]
        rows = _mask_to_rows(rows) if isinstance(rows, str) else torch.tensor(rows)
        inputs = state.get("dictionary_inputs")
        return cls(
            hyperparameters={
                k: _tensor_from_dict(v, dtype)
                for k, v in state["hyperparameters"].items()
            },
            dictionary_rows=rows.long(),
            rows_checksum=float(state["rows_checksum"]),
            num_fit_points=int(state["num_fit_points"]),
            fit_loss=float(state["fit_loss"]),
            num_draws=int(state["num_draws"]),
            sketch_ridge=float(state.get("sketch_ridge", math.nan)),
            drift_refits=int(state.get("drift_refits", 0)),
            dictionary_inputs=None
            if inputs is None
            else _tensor_from_dict(inputs, dtype),
        )


def _tensor_to_dict(t: Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "values": t.detach().cpu().reshape(-1).tolist()}


def _tensor_from_dict(entry: Any, dtype: torch.dtype) -> Tensor:
    if torch.is_tensor(entry):
        return entry
    return torch.tensor(entry["values"], dtype=dtype).reshape(entry["shape"])


def _rows_to_mask(rows: Tensor) -> str:
    n = int(rows.max()) + 1 if rows.numel() else 0
    mask = np.zeros(n, dtype=bool)
    mask[rows.numpy()] = True
    return f"{n}:" + base64.b64encode(np.packbits(mask).tobytes()).decode("ascii")


def _mask_to_rows(text: str) -> Tensor:
    try:
        n_text, payload = text.split(":", 1)
        bits = np.unpackbits(np.frombuffer(base64.b64decode(payload), dtype=np.uint8))
    except ValueError as err:
        raise ValueError(
            f"warm_start dictionary_rows is not a row mask: {err}"
        ) from err
    return torch.from_numpy(np.flatnonzero(bits[: int(n_text)]).astype(np.int64))


def hyperparameter_state(model: torch.nn.Module) -> dict[str, Tensor]:
    r"""The model's ``state_dict`` restricted to its hyperparameters.

    Drops the transforms (they belong to the data), the dictionary (extra state)
    and the per-point noise of a fixed-noise likelihood.
    """
    state = {
        k: v.detach().clone()
        for k, v in model.state_dict().items()
        if not k.startswith(_NOT_HYPERPARAMETERS)
    }
    if isinstance(model.likelihood, FixedNoiseGaussianLikelihood):
        state = {k: v for k, v in state.items() if not k.startswith("likelihood.")}
    return state
