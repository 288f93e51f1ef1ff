r"""The state a :class:`~botorch_sketch.models.NystromGP` carries to the next model.

A loop (BoTorch's, Ax's) builds a new model at every call. :class:`SketchState`
holds what the next one starts from: hyperparameters, the dictionary (as row
indices with a checksum, as keys of its input rows, and as inputs) and the fit
schedule's bookkeeping. It
has a JSON form (:meth:`SketchState.to_dict`) for Ax's generator state, and is
checked when it is loaded (:meth:`SketchState.problems`): a state with
non-finite numbers or out-of-range rows cannot be used.
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood
from torch import Tensor

from botorch_sketch.models.extra_state import EXTRA_STATE_KEY

__all__ = [
    "SketchState",
    "hyperparameter_state",
    "row_keys",
    "tensors_from_json",
    "tensors_to_json",
]

#: State-dict prefixes that are not hyperparameters: transforms are refitted to
#: the current data by the new model itself.
_NOT_HYPERPARAMETERS = ("outcome_transform.", "input_transform.", EXTRA_STATE_KEY)


@dataclass(frozen=True)
class SketchState:
    r"""What a :class:`NystromGP` carries to the next model of a loop.

    The dictionary is recorded three times: as row indices into the training
    data of the model that produced the state (with a checksum of those rows),
    which is compact and survives when the next model's data extend this one's
    (BoTorch loops append observations); as 32-bit keys of its input rows
    (:func:`row_keys`), which the next model finds among its own rows wherever
    they moved (Ax orders its training data by trial index, so a trial that
    completes after later ones is inserted before them, as in asynchronous
    loops); and, in memory, as the transformed inputs themselves.

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
        dictionary_keys: Optional ``|S|`` keys of the dictionary's input rows
            (:func:`row_keys`; about 5.3 characters per row in the JSON form).
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
    dictionary_keys: Tensor | None = None

    def to_dict(self, compact: bool = True) -> dict[str, Any]:
        r"""A JSON-ready form (lists, numbers and strings), e.g. for Ax.

        Args:
            compact: Store the dictionary as a base64 bit mask over the producing
                model's rows (about ``n / 6`` characters) and leave out its
                inputs.
        """
        rows = self.dictionary_rows.cpu()
        out: dict[str, Any] = {
            "hyperparameters": tensors_to_json(self.hyperparameters),
            "dictionary_rows": _rows_to_mask(rows) if compact else rows.tolist(),
            "rows_checksum": float(self.rows_checksum),
            "num_fit_points": int(self.num_fit_points),
            "fit_loss": float(self.fit_loss),
            "num_draws": int(self.num_draws),
            "sketch_ridge": float(self.sketch_ridge),
            "drift_refits": int(self.drift_refits),
        }
        if self.dictionary_keys is not None:
            keys = self.dictionary_keys.cpu()
            out["dictionary_keys"] = (
                base64.b64encode(keys.numpy().astype("<u4").tobytes()).decode("ascii")
                if compact
                else keys.tolist()
            )
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
        keys = self.dictionary_keys
        if (
            keys is not None
            and keys.numel()
            and not (int(keys.min()) >= 0 and int(keys.max()) < 2**32)
        ):
            found.append("dictionary keys outside [0, 2^32)")
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
        keys = state.get("dictionary_keys")
        return cls(
            hyperparameters=tensors_from_json(state["hyperparameters"], dtype),
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
            dictionary_keys=None if keys is None else _keys_from_json(keys),
        )


def tensors_to_json(tensors: Mapping[str, Tensor]) -> dict[str, dict[str, Any]]:
    r"""``{name: {"shape": [...], "values": [...]}}``: a tensor map as JSON data.

    Floats go through Python's ``float`` (shortest round-trip form), so
    :func:`tensors_from_json` gives back the same values for float32 and float64.
    """
    return {k: _tensor_to_dict(v) for k, v in tensors.items()}


def tensors_from_json(
    entries: Mapping[str, Any],
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> dict[str, Tensor]:
    r"""Inverse of :func:`tensors_to_json` (tensors among ``entries`` pass through).

    Raises:
        ValueError: An entry without ``shape`` / ``values``, or whose values do not
            fill its shape.
    """
    if not isinstance(entries, Mapping):
        raise ValueError(f"expected a map of tensors, got {type(entries).__name__}.")
    return {
        k: _tensor_from_dict(v, dtype).to(device=device) for k, v in entries.items()
    }


def _tensor_to_dict(t: Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "values": t.detach().cpu().reshape(-1).tolist()}


def _tensor_from_dict(entry: Any, dtype: torch.dtype) -> Tensor:
    if torch.is_tensor(entry):
        return entry
    try:
        return torch.tensor(entry["values"], dtype=dtype).reshape(entry["shape"])
    except (KeyError, TypeError, RuntimeError) as err:
        raise ValueError(f"not a tensor entry {{'shape', 'values'}}: {err}") from err


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


def row_keys(rows: Tensor) -> Tensor:
    r"""A 32-bit key per row of ``rows`` (``n x D``): CRC-32 of its float64 bytes.

    The same inputs give the same key in any process (unlike Python's salted
    ``hash``); different rows collide with probability ``2^-32`` per pair, and a
    collision only swaps which of two points a warm start keeps.

    Returns:
        An ``n`` int64 tensor of keys in ``[0, 2^32)`` (on ``rows``' device).
    """
    values = np.ascontiguousarray(rows.detach().to("cpu", torch.float64).numpy())
    keys = [zlib.crc32(row.tobytes()) for row in values]
    return torch.tensor(keys, dtype=torch.int64, device=rows.device)


def _keys_from_json(keys: Any) -> Tensor:
    if isinstance(keys, str):
        try:
            raw = base64.b64decode(keys, validate=True)
        except ValueError as err:
            raise ValueError(
                f"warm_start dictionary_keys is not base64: {err}"
            ) from err
        if len(raw) % 4:
            raise ValueError("warm_start dictionary_keys is not a uint32 array.")
        return torch.from_numpy(np.frombuffer(raw, dtype="<u4").astype(np.int64))
    return torch.tensor(list(keys), dtype=torch.int64)


def hyperparameter_state(
    model: torch.nn.Module | Mapping[str, Tensor],
) -> dict[str, Tensor]:
    r"""The model's ``state_dict`` (or a given one) restricted to hyperparameters.

    Drops the transforms (they belong to the data), the dictionary (extra state)
    and, for a model, the per-point noise of a fixed-noise likelihood.
    """
    items = model.items() if isinstance(model, Mapping) else model.state_dict().items()
    state = {
        k: v.detach().clone()
        for k, v in items
        if not k.startswith(_NOT_HYPERPARAMETERS)
    }
    likelihood = getattr(model, "likelihood", None)
    if isinstance(likelihood, FixedNoiseGaussianLikelihood):
        state = {k: v for k, v in state.items() if not k.startswith("likelihood.")}
    return state
