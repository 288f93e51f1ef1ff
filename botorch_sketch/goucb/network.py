r"""Parametric regressors ``f(x; w)`` for GO-UCB and their parameter Jacobians.

GO-UCB (Liu & Wang, "Global Optimization with Parametric Function Approximation",
ICML 2023) builds its optimism from the gradient of the model output with respect to
the *parameters*, ``g(x; w) = \nabla_w f(x; w)`` (a ``d_w``-vector). This module

* builds the paper's default model (Sec. 6: ``linear2(sigmoid(linear1(x)))``, hidden
  width 25, so ``d_w = 25 d_x + 51``) and the realizable test function ``f1`` (all
  weights and biases equal to one);
* flattens the parameters of any ``torch.nn.Module`` into one vector ``w`` (in
  ``named_parameters()`` order) and back (:class:`ParameterLayout`);
* evaluates ``f(X; w)`` and the per-row Jacobian ``J = [g(x_1; w), ..., g(x_N; w)]^T``
  (``N x d_w``) with ``torch.func`` (``functional_call`` + ``vmap(grad)``). ``J`` is
  differentiable with respect to ``X`` by ordinary autograd, so acquisition
  functions built on it can be optimized with gradients.

All functions treat the module as a pure function of ``(w, x)``: the module's own
parameters are never modified here.
"""

from __future__ import annotations

import math
from copy import deepcopy
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

#: Hidden width of the paper's network (Sec. 6, Appendix D.1).
PAPER_WIDTH = 25


def paper_network(
    d: int,
    width: int = PAPER_WIDTH,
    *,
    seed: int | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> nn.Sequential:
    r"""The paper's regressor ``f(x) = w_2^T sigmoid(W_1 x + b_1) + b_2``.

    Args:
        d: Input dimension ``d_x``.
        width: Hidden width (the paper uses 25).
        seed: Seed of PyTorch's default initialization
            (``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weights and biases);
            ``None`` keeps the global RNG's draw.
        dtype: Parameter dtype.
        device: Parameter device.

    Returns:
        ``nn.Sequential(Linear(d, width), Sigmoid(), Linear(width, 1))`` with
        ``d_w = width (d + 2) + 1`` parameters.
    """
    if not (isinstance(d, int) and d > 0):
        raise ValueError(f"d must be a positive int, got {d!r}.")
    if not (isinstance(width, int) and width > 0):
        raise ValueError(f"width must be a positive int, got {width!r}.")
    net = nn.Sequential(nn.Linear(d, width), nn.Sigmoid(), nn.Linear(width, 1))
    net = net.to(dtype=dtype, device=device)
    if seed is not None:
        reset_parameters(net, seed)
    return net


def realizable_network(
    d: int,
    width: int = PAPER_WIDTH,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> nn.Sequential:
    r"""The paper's ``f1``: :func:`paper_network` with every parameter equal to 1.

    ``f1(x) = width * sigmoid(1 + sum_i x_i) + 1`` (Sec. 6.1). On ``[-5, 5]^20``
    its supremum is 26 (reached up to 2e-8 once ``sum_i x_i >= 20``).
    """
    net = paper_network(d, width, dtype=dtype, device=device)
    with torch.no_grad():
        for p in net.parameters():
            p.fill_(1.0)
    return net


def reset_parameters(module: nn.Module, seed: int) -> nn.Module:
    r"""Re-draw a module's parameters deterministically, in place.

    Every submodule with a ``reset_parameters`` method (``nn.Linear``, convolutions,
    norms, ...) is reset under a forked global RNG seeded with ``seed``, so the
    caller's random state is untouched and the draw is reproducible; a module
    off the CPU gets the values drawn on a CPU copy (the same on every device). Modules
    without ``reset_parameters`` keep their values.

    Returns:
        The same module.
    """
    params = list(module.parameters()) + list(module.buffers())
    if any(t.device.type != "cpu" for t in params):
        # Drawn on a CPU copy, then copied in: the same values on every device.
        cpu = reset_parameters(deepcopy(module).cpu(), seed)
        with torch.no_grad():
            for dst, src in zip(
                params, [*cpu.parameters(), *cpu.buffers()], strict=True
            ):
                dst.copy_(src)
        return module
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for sub in module.modules():
            reset = getattr(sub, "reset_parameters", None)
            if callable(reset):
                reset()
    return module


@dataclass(frozen=True)
class ParameterLayout:
    r"""How the flat parameter vector ``w`` maps onto a module's parameters.

    The order is ``named_parameters()`` order and each tensor is flattened
    row-major. For :func:`paper_network` that is
    ``[W_1 (width x d), b_1 (width), w_2 (1 x width), b_2 (1)]``.
    """

    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]

    @classmethod
    def from_module(cls, module: nn.Module) -> ParameterLayout:
        """The layout of ``module``'s trainable parameters.

        Raises:
            TypeError: If ``module`` is not a ``torch.nn.Module``.
            ValueError: If it has no trainable floating-point parameters.
        """
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"network must be a torch.nn.Module, got {type(module).__name__}."
            )
        named = [(k, p) for k, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError(
                "network has no trainable parameters; GO-UCB needs f(x; w) to "
                "depend differentiably on parameters w."
            )
        bad = [k for k, p in named if not p.is_floating_point()]
        if bad:
            raise ValueError(f"network parameters must be floating point: {bad}.")
        return cls(tuple(k for k, _ in named), tuple(p.shape for _, p in named))

    @property
    def numel(self) -> int:
        """``d_w``, the number of scalar parameters."""
        return sum(math.prod(s) for s in self.shapes)

    def flatten(self, module: nn.Module) -> Tensor:
        """The module's current parameters as a detached ``d_w`` vector."""
        params = dict(module.named_parameters())
        return torch.cat([params[k].detach().reshape(-1) for k in self.names])

    def unflatten(self, w: Tensor) -> dict[str, Tensor]:
        """Split a ``d_w`` vector into named views with the parameters' shapes."""
        if w.shape != (self.numel,):
            raise ValueError(
                f"w must have shape ({self.numel},), got {tuple(w.shape)}."
            )
        out, start = {}, 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            size = math.prod(shape)
            out[name] = w[start : start + size].reshape(shape)
            start += size
        return out

    def load(self, module: nn.Module, w: Tensor) -> None:
        """Copy the flat vector ``w`` into the module's parameters (in place)."""
        params = dict(module.named_parameters())
        with torch.no_grad():
            for name, value in self.unflatten(w).items():
                params[name].copy_(value)


def network_values(
    module: nn.Module, layout: ParameterLayout, w: Tensor, X: Tensor
) -> Tensor:
    r"""``f(X; w)`` for ``N x d`` inputs, as an ``N`` vector (differentiable in both).

    Raises:
        ValueError: If the module does not map ``N x d`` to ``N`` or ``N x 1``.
    """
    out = functional_call(module, layout.unflatten(w), (X,))
    if out.shape == X.shape[:-1] + (1,):
        out = out.squeeze(-1)
    if out.shape != X.shape[:-1]:
        raise ValueError(
            f"network must map N x d inputs to N x 1 (or N) outputs; input "
            f"{tuple(X.shape)} gave {tuple(out.shape)}."
        )
    return out


def values_and_jacobian(
    module: nn.Module,
    layout: ParameterLayout,
    w: Tensor,
    X: Tensor,
    use_closed_form: bool = True,
) -> tuple[Tensor, Tensor]:
    r"""``f(X; w)`` and the per-row parameter Jacobian ``J`` for ``N x d`` inputs.

    ``J[i] = \nabla_w f(x_i; w)`` (spec Sec. 6.1), computed as
    ``vmap(grad_and_value(f(x; .)))`` over rows, so each row is evaluated as a batch
    of one. Both outputs are differentiable with respect to ``X``.

    Args:
        module: The regressor (its own parameters are not used).
        layout: The module's :class:`ParameterLayout`.
        w: ``d_w`` parameter vector.
        X: ``N x d`` inputs.
        use_closed_form: Use :func:`sigmoid_mlp_jacobian` when the module is the
            paper's architecture (:func:`is_sigmoid_mlp`); else ``torch.func``.

    Returns:
        ``(f, J)`` with shapes ``N`` and ``N x d_w``.
    """

    def single(w_: Tensor, x: Tensor) -> Tensor:
        return network_values(module, layout, w_, x.unsqueeze(0)).squeeze(0)

    if X.shape[0] == 0:
        return X.new_zeros(0), X.new_zeros(0, layout.numel)
    if use_closed_form and is_sigmoid_mlp(module, layout):
        return sigmoid_mlp_jacobian(layout, w, X)
    J, f = vmap(grad_and_value(single), in_dims=(None, 0))(w, X)
    return f, J


def is_sigmoid_mlp(module: nn.Module, layout: ParameterLayout) -> bool:
    """Whether ``module`` is exactly ``Sequential(Linear, Sigmoid, Linear(., 1))``."""
    return (
        type(module) is nn.Sequential
        and len(module) == 3
        and type(module[0]) is nn.Linear
        and type(module[1]) is nn.Sigmoid
        and type(module[2]) is nn.Linear
        and module[2].out_features == 1
        and layout.names == ("0.weight", "0.bias", "2.weight", "2.bias")
    )


def sigmoid_mlp_jacobian(
    layout: ParameterLayout, w: Tensor, X: Tensor
) -> tuple[Tensor, Tensor]:
    r"""Closed-form ``(f, J)`` for the paper's network (spec Sec. 6.1).

    With ``z = W_1 x + b_1``, ``h = sigmoid(z)``, ``f = w_2^T h + b_2`` and
    ``a = w_2 * h * (1 - h)``: ``df/dW_1 = a x^T``, ``df/db_1 = a``, ``df/dw_2 = h``,
    ``df/db_2 = 1``. About ten times faster than ``vmap(grad)`` (forward and
    backward) at 128 rows and ``d_w = 551``; equal to it to round-off (tested).

    Args:
        layout: The network's layout (:func:`is_sigmoid_mlp` must hold).
        w: ``d_w`` parameters, or ``N x d_w`` (one parameter vector per row).
        X: ``N x d`` inputs.
    """
    width, d = layout.shapes[0]
    o1 = width * d
    o2, o3 = o1 + width, o1 + 2 * width
    W1 = w[..., :o1].reshape(*w.shape[:-1], width, d)
    b1, w2, b2 = w[..., o1:o2], w[..., o2:o3], w[..., o3]
    h = torch.sigmoid(torch.einsum("...hd,...d->...h", W1, X) + b1)
    a = w2 * h * (1 - h)
    n = X.shape[0]
    J = torch.cat(
        [(a.unsqueeze(-1) * X.unsqueeze(-2)).reshape(n, -1), a, h, X.new_ones(n, 1)],
        dim=-1,
    )
    return (h * w2).sum(-1) + b2, J


def rowwise_values_and_jacobian(
    module: nn.Module, layout: ParameterLayout, W: Tensor, X: Tensor
) -> tuple[Tensor, Tensor]:
    r"""``f(x_i; w_i)`` and ``\nabla_w f(x_i; w_i)`` for paired rows of ``W`` and ``X``.

    Args:
        module: The regressor.
        layout: Its layout.
        W: ``N x d_w`` parameters (one vector per row).
        X: ``N x d`` inputs.

    Returns:
        ``(f, J)`` with shapes ``N`` and ``N x d_w``.
    """
    if is_sigmoid_mlp(module, layout):
        return sigmoid_mlp_jacobian(layout, W, X)

    def single(w_: Tensor, x: Tensor) -> Tensor:
        return network_values(module, layout, w_, x.unsqueeze(0)).squeeze(0)

    J, f = vmap(grad_and_value(single), in_dims=(0, 0))(W, X)
    return f, J
