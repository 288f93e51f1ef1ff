r"""GO-UCB's Phase I regression oracle (Liu & Wang, ICML 2023, Eq. 2).

``w_hat_0 = argmin_w sum_j (f(x_j; w) - y_j)^2`` by full-batch gradient descent from a
seeded initialization, with optional restarts (the lowest final loss wins).

The paper names SGD, Gauss-Newton or Levenberg-Marquardt as solvers and its
experiments used SGD on the MSE, 2000 iterations, learning rate ``1e-11``
(Appendix D.1); at that rate the weights barely move, probably a typo (spec
Sec. 6.7). :data:`PAPER_ORACLE` reproduces the printed values; the default
:class:`OracleOptions` is full-batch Adam (``lr = 1e-2``, 2000 steps).

Because GO-UCB's whole Phase II chain depends on ``w_hat_0``, results are cached by
a hash of (data, options, seed, network architecture and initial values), so a
model rebuilt from the same data (as Ax does at every generation) reuses the same
estimate without refitting.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import OrderedDict
from copy import deepcopy
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from botorch_sketch.goucb.network import (
    ParameterLayout,
    network_values,
    reset_parameters,
)

logger = logging.getLogger(__name__)

_CACHE: OrderedDict[str, Tensor] = OrderedDict()
_CACHE_SIZE = 64


@dataclass(frozen=True)
class OracleOptions:
    """Settings of the regression oracle.

    Attributes:
        optimizer: ``"adam"``, ``"sgd"`` or ``"lbfgs"`` (full batch).
        steps: Iterations (for L-BFGS: ``max_iter`` of one ``step``).
        lr: Learning rate.
        restarts: Random initializations (seeds ``seed, seed + 1, ...``); the
            lowest final mean squared error is kept.
        weight_decay: Optional L2 penalty ``weight_decay * ||w||^2`` added to the
            MSE (not in the paper; 0 by default).
    """

    optimizer: str = "adam"
    steps: int = 2000
    lr: float = 1e-2
    restarts: int = 1
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if self.optimizer not in ("adam", "sgd", "lbfgs"):
            raise ValueError(
                f"optimizer must be 'adam', 'sgd' or 'lbfgs', got {self.optimizer!r}."
            )
        for name in ("steps", "restarts"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"{name} must be a positive int, got {value!r}.")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}.")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}.")


#: The printed experimental settings: SGD, MSE, 2000 iterations, lr 1e-11.
PAPER_ORACLE = OracleOptions(optimizer="sgd", steps=2000, lr=1e-11)


def _cache_key(
    module: nn.Module, X: Tensor, Y: Tensor, options: OracleOptions, seed: int
) -> str:
    h = hashlib.sha256()
    for t in (X, Y, *(p.detach() for p in module.parameters())):
        t = t.detach().cpu().contiguous()
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.numpy().tobytes())
    h.update(repr(module).encode())
    h.update(repr((options, seed)).encode())
    return h.hexdigest()


def _fit_once(
    module: nn.Module,
    layout: ParameterLayout,
    X: Tensor,
    y: Tensor,
    options: OracleOptions,
) -> tuple[Tensor, float]:
    """Train ``module`` (a private copy) in place; return its ``w`` and final MSE."""
    params = [p for p in module.parameters() if p.requires_grad]

    def loss_fn() -> Tensor:
        loss = (module(X).reshape(-1) - y).pow(2).mean()
        if options.weight_decay:
            loss = loss + options.weight_decay * sum(p.pow(2).sum() for p in params)
        return loss

    if options.optimizer == "lbfgs":
        opt = torch.optim.LBFGS(
            params, lr=options.lr, max_iter=options.steps, line_search_fn="strong_wolfe"
        )

        def closure() -> Tensor:
            opt.zero_grad()
            loss = loss_fn()
            loss.backward()
            return loss

        opt.step(closure)
    else:
        cls = torch.optim.Adam if options.optimizer == "adam" else torch.optim.SGD
        opt = cls(params, lr=options.lr)
        for _ in range(options.steps):
            opt.zero_grad()
            loss = loss_fn()
            loss.backward()
            opt.step()
    with torch.no_grad():
        final = float(loss_fn())
    return layout.flatten(module), final


def fit_regression_oracle(
    module: nn.Module,
    X: Tensor,
    Y: Tensor,
    *,
    options: OracleOptions | None = None,
    seed: int = 0,
    use_cache: bool = True,
) -> Tensor:
    r"""Phase I estimate ``w_hat_0`` (Eq. 2) as a flat ``d_w`` vector.

    Restart ``k`` starts from the module's initializer re-drawn with seed
    ``seed + k`` (:func:`~botorch_sketch.goucb.network.reset_parameters`); for
    modules without ``reset_parameters`` every restart starts from the module's
    current values. The module itself is not modified.

    Args:
        module: The regressor.
        X: ``n x d`` Phase I inputs (as the network sees them).
        Y: ``n x 1`` (or ``n``) Phase I targets.
        options: Solver settings (default :class:`OracleOptions`).
        seed: Seed of the initializations.
        use_cache: Reuse a cached result for identical inputs.

    Returns:
        ``w_hat_0`` (detached).

    Raises:
        ValueError: On empty or non-finite data, or a non-finite final loss.
    """
    options = options or OracleOptions()
    if X.dim() != 2 or X.shape[0] == 0:
        raise ValueError(
            f"oracle needs n x d inputs with n >= 1, got {tuple(X.shape)}."
        )
    y = Y.reshape(-1)
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"oracle got {X.shape[0]} inputs but {y.shape[0]} targets.")
    if not (torch.isfinite(X).all() and torch.isfinite(y).all()):
        raise ValueError("oracle data contain NaN or Inf.")
    layout = ParameterLayout.from_module(module)
    network_values(module, layout, layout.flatten(module), X[:1])  # checks shapes
    key = _cache_key(module, X, y, options, seed)
    if use_cache and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key].clone()
    best: tuple[float, Tensor] | None = None
    for k in range(options.restarts):
        copy = reset_parameters(deepcopy(module), seed + k)
        w, loss = _fit_once(copy, layout, X, y, options)
        logger.debug("oracle restart %d: mse %.4g", k, loss)
        finite = math.isfinite(loss) and bool(torch.isfinite(w).all())
        if finite and (best is None or loss < best[0]):
            best = (loss, w)
    if best is None:
        raise ValueError(
            "regression oracle diverged (non-finite loss); lower the learning rate."
        )
    _CACHE[key] = best[1].clone()
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return best[1]
