"""The closed-form gradient path of the batch UCB against autograd."""

from __future__ import annotations

import pytest
import torch
from botorch.models.transforms.input import Normalize
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel

from botorch_sketch.acquisition import BatchUpperConfidenceBound
from botorch_sketch.acquisition import bbkb as bbkb_module
from botorch_sketch.acquisition.dtc_marginals import PendingRows, dtc_marginals
from botorch_sketch.bbkb.dense_kernel import SquaredExponential
from botorch_sketch.linalg import DTCPredictor
from botorch_sketch.models import NystromGP

DT = torch.float64


def make_model(kernel="rbf", sparse=False, transform=False, d=4, n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=DT)
    Y = torch.sin(5 * X).sum(-1, keepdim=True) + 0.05 * torch.randn(
        n, 1, generator=g, dtype=DT
    )
    kw = {}
    if kernel == "scale":
        kw["covar_module"] = ScaleKernel(RBFKernel(ard_num_dims=d))
    elif kernel == "matern":
        kw["covar_module"] = MaternKernel(nu=2.5, ard_num_dims=d)
    if transform:
        X = 3.0 * X - 1.0
        kw["input_transform"] = Normalize(d=d)
    model = NystromGP(
        X, Y, dictionary=torch.arange(0, n, 2) if sparse else None, seed=0, **kw
    )
    base = model.covar_module
    base = base.base_kernel if isinstance(base, ScaleKernel) else base
    base.lengthscale = torch.linspace(0.3, 0.7, d, dtype=DT).unsqueeze(0)
    if kernel == "scale":
        model.covar_module.outputscale = 1.7
    model.likelihood.noise = 0.01
    model.eval()
    return model, X


def value_and_grad(model, X_pending, hallucination, Xq, fused):
    acqf = BatchUpperConfidenceBound(model, alpha=1.5, hallucination=hallucination)
    if X_pending is not None:
        acqf.set_X_pending(X_pending)
    Xq = Xq.clone().requires_grad_(True)
    original = bbkb_module._fused_marginals
    if not fused:
        bbkb_module._fused_marginals = lambda *args: None
    try:
        value = acqf(Xq)
        (grad,) = torch.autograd.grad(value.sum(), Xq)
    finally:
        bbkb_module._fused_marginals = original
    return value.detach(), grad


@pytest.mark.parametrize("hallucination", ["full", "dictionary"])
@pytest.mark.parametrize("num_pending", [0, 7])
@pytest.mark.parametrize(
    "kernel,sparse,transform",
    [("rbf", False, False), ("rbf", True, False), ("scale", True, True)],
)
def test_closed_form_gradient_equals_autograd(
    hallucination, num_pending, kernel, sparse, transform
):
    model, X = make_model(kernel=kernel, sparse=sparse, transform=transform)
    g = torch.Generator().manual_seed(1)
    lo, hi = X.min(0).values, X.max(0).values
    pending = None
    if num_pending:
        pending = lo + (hi - lo) * torch.rand(num_pending, 4, generator=g, dtype=DT)
    Xq = lo + (hi - lo) * torch.rand(5, 3, 1, 4, generator=g, dtype=DT)
    v_fast, g_fast = value_and_grad(model, pending, hallucination, Xq, fused=True)
    v_ref, g_ref = value_and_grad(model, pending, hallucination, Xq, fused=False)
    assert v_fast.shape == (5, 3)
    torch.testing.assert_close(v_fast, v_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(g_fast, g_ref, rtol=1e-8, atol=1e-8)
    assert g_ref.abs().max() > 1e-3  # the comparison is not between zeros


def test_fused_path_is_taken_for_a_gaussian_kernel_only():
    model, X = make_model()
    acqf = BatchUpperConfidenceBound(model, alpha=1.0)
    cache = acqf._cache()
    Xt = model.transform_inputs(X[:3])
    assert bbkb_module._fused_marginals(model, cache, Xt) is not None
    matern, X = make_model(kernel="matern")
    acqf = BatchUpperConfidenceBound(matern, alpha=1.0)
    assert bbkb_module._fused_marginals(matern, acqf._cache(), X[:3]) is None
    # the autograd path still gives a finite gradient
    Xq = X[:2].unsqueeze(-2).clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(acqf(Xq).sum(), Xq)
    assert torch.isfinite(grad).all() and grad.abs().max() > 0


def test_gradcheck_with_pending_rows_and_the_residual_clamp():
    g = torch.Generator().manual_seed(3)
    d, m, r, p = 3, 9, 6, 4
    kernel = SquaredExponential.of(ScaleKernel(RBFKernel(ard_num_dims=d)).to(DT))
    kernel.rbf.lengthscale = torch.tensor([[0.4, 0.6, 0.5]], dtype=DT)
    kernel.scale.outputscale = 0.8
    S = torch.rand(m, d, generator=g, dtype=DT)
    basis = 0.3 * torch.randn(m, 1 + r + 2, generator=g, dtype=DT)
    predictor = DTCPredictor(basis=basis, num_explained=r)
    A = torch.randn(p, p, generator=g, dtype=DT)
    pending = PendingRows(
        Xt=torch.rand(p, d, generator=g, dtype=DT),
        P=torch.randn(p, r, generator=g, dtype=DT),
        chol=torch.linalg.cholesky(A @ A.T + torch.eye(p, dtype=DT)),
    )
    X = torch.rand(2, 5, d, generator=g, dtype=DT, requires_grad=True)

    def fn(X):
        return dtc_marginals(kernel, X, S, predictor, pending)

    assert torch.autograd.gradcheck(fn, (X,))
    # a basis large enough that k - ||F_P||^2 < 0 somewhere: the clamp's
    # gradient is zero there, as autograd's clamp_min gives
    big = DTCPredictor(basis=10.0 * basis, num_explained=r)
    assert torch.autograd.gradcheck(lambda X: dtc_marginals(kernel, X, S, big), (X,))
    offset, var = dtc_marginals(kernel, X, S, big)
    K = kernel(X.detach().reshape(-1, d), S)
    P = (K @ big.basis)[:, 1 : 1 + r]
    assert ((0.8 - P.pow(2).sum(-1)) < 0).any()
    assert offset.shape == var.shape == (2, 5)


def test_batched_lengthscales_fall_back():
    rbf = RBFKernel(ard_num_dims=2, batch_shape=torch.Size([3])).to(DT)
    kernel = SquaredExponential.of(rbf)
    S = torch.rand(4, 2, dtype=DT)
    predictor = DTCPredictor(basis=torch.rand(4, 3, dtype=DT), num_explained=2)
    assert dtc_marginals(kernel, torch.rand(2, 2, dtype=DT), S, predictor) is None


def test_the_default_nystrom_kernel_takes_the_closed_form():
    """``NystromGP``'s default kernel (what every Ax strategy fits) is a Gaussian
    kernel the closed form handles: a change of default that dropped the batch
    UCB back to autograd would fail here."""
    X = torch.rand(20, 3, dtype=DT)
    model = NystromGP(X, X.sum(-1, keepdim=True), seed=0).eval()
    acqf = BatchUpperConfidenceBound(model, alpha=1.0)
    Xt = model.transform_inputs(X[:4])
    assert bbkb_module._fused_marginals(model, acqf._cache(), Xt) is not None
