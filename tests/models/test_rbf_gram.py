"""The RBF training Gram matrix with its closed-form lengthscale gradient."""

from __future__ import annotations

import pytest
import torch
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
from gpytorch.priors import LogNormalPrior

from botorch_sketch.models import NystromGP, nystrom_fit, rbf_gram
from botorch_sketch.models.kernels import GroupedRBFKernel
from botorch_sketch.models.rbf_gram import training_gram


def _kernels() -> dict:
    return {
        "ard": RBFKernel(ard_num_dims=5),
        "shared": RBFKernel(),
        "grouped": GroupedRBFKernel(5, groups=[(1, 2, 3)]),
        "scaled_ard": ScaleKernel(RBFKernel(ard_num_dims=5)),
        "scaled_grouped": ScaleKernel(GroupedRBFKernel(5, groups=[(0, 4)])),
    }


def _randomise(kernel, generator: torch.Generator) -> None:
    with torch.no_grad():
        for p in kernel.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype))


def _grads(kernel, K: torch.Tensor, weights: torch.Tensor) -> list[torch.Tensor]:
    params = [p for p in kernel.parameters() if p.requires_grad]
    return list(torch.autograd.grad((K * weights).sum(), params))


@pytest.mark.parametrize("name", list(_kernels()))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_values_and_parameter_gradients_equal_gpytorchs(name, dtype):
    generator = torch.Generator().manual_seed(3)
    kernel = _kernels()[name].to(dtype)
    _randomise(kernel, generator)
    X = torch.rand(40, 5, generator=generator, dtype=dtype)
    weights = torch.randn(40, 40, generator=generator, dtype=dtype)
    expected = kernel(X).to_dense()
    K = training_gram(kernel, X)
    assert K.dtype == dtype and K.shape == (40, 40)
    tol = {"atol": 1e-12, "rtol": 1e-10} if dtype == torch.float64 else {}
    torch.testing.assert_close(K, expected, **tol)
    assert torch.all(K.diagonal() == 1) or name.startswith("scaled")
    got, want = _grads(kernel, K, weights), _grads(kernel, expected, weights)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **tol)


@pytest.mark.parametrize(
    "kernel",
    [
        MaternKernel(ard_num_dims=5),
        RBFKernel(ard_num_dims=2, active_dims=(0, 3)),
        RBFKernel(ard_num_dims=5, batch_shape=torch.Size([2])),
        ScaleKernel(MaternKernel()),
    ],
    ids=["matern", "active_dims", "batched", "scaled_matern"],
)
def test_other_kernels_take_gpytorchs_matrix(monkeypatch, kernel):
    def refuse(*args, **kwargs):
        raise AssertionError("rbf_gram used for a kernel it does not cover")

    monkeypatch.setattr(rbf_gram, "rbf_gram", refuse)
    X = torch.rand(12, 5, dtype=torch.float64)
    kernel = kernel.to(X)
    torch.testing.assert_close(training_gram(kernel, X), kernel(X).to_dense())


def test_inputs_that_need_a_gradient_take_gpytorchs_matrix(monkeypatch):
    monkeypatch.setattr(rbf_gram, "rbf_gram", lambda *a: 1 / 0)
    X = torch.rand(6, 3, dtype=torch.float64, requires_grad=True)
    kernel = RBFKernel(ard_num_dims=3).to(X)
    K = training_gram(kernel, X)
    K.sum().backward()  # gpytorch's graph reaches X
    assert X.grad is not None


def test_bad_shapes_and_input_gradients_are_refused():
    X = torch.rand(6, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="lengthscale d"):
        rbf_gram.rbf_gram(X, torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="n x d"):
        rbf_gram.rbf_gram(X[0], torch.ones(3, dtype=torch.float64))
    Xg = X.clone().requires_grad_(True)
    K = rbf_gram.rbf_gram(Xg, torch.ones(3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="not differentiable in X"):
        K.sum().backward()


def test_model_loss_and_gradients_are_those_of_gpytorchs_kernel(monkeypatch):
    """A NystromGP's fit objective (exact likelihood plus priors) and its gradient
    in every raw hyperparameter are unchanged by the closed-form Gram matrix."""
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(60, 4, generator=generator, dtype=torch.float64)
    Y = torch.sin(5 * X).sum(-1, keepdim=True)
    kernel = ScaleKernel(
        RBFKernel(ard_num_dims=4, lengthscale_prior=LogNormalPrior(0.0, 1.0))
    )
    model = NystromGP(X, Y, covar_module=kernel, seed=0)
    _randomise(model.covar_module, generator)

    def loss_and_grads():
        model.zero_grad()
        loss = model.compute_custom_loss(None).sum()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    loss, grads = loss_and_grads()
    monkeypatch.setattr(nystrom_fit, "training_gram", lambda k, Z: k(Z).to_dense())
    expected_loss, expected_grads = loss_and_grads()
    torch.testing.assert_close(loss, expected_loss, atol=1e-12, rtol=1e-12)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-9)
