import gpytorch
import pytest
import torch
from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
)
from gpytorch.kernels import RBFKernel

from botorch_sketch.models.kernels import (
    GroupedRBFKernel,
    ard_equivalent,
    column_groups_index,
)

DT = torch.float64


def test_column_index_numbers_lengthscales_by_their_first_column():
    index = column_groups_index(7, [(5, 6), (1, 3, 2)])
    assert index.tolist() == [0, 1, 1, 1, 2, 3, 3]
    assert column_groups_index(3, []).tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "dim, groups",
    [(3, [(0, 1), (1, 2)]), (3, [(2, 3)]), (3, [(-1, 0)]), (0, [])],
)
def test_bad_groups_are_rejected(dim, groups):
    with pytest.raises(ValueError, match="disjoint columns"):
        column_groups_index(dim, groups)


@pytest.mark.parametrize("batch_shape", [torch.Size([]), torch.Size([2])])
def test_equals_the_ard_kernel_with_tied_lengthscales(batch_shape):
    d, groups = 6, [(0, 4), (1, 2, 3)]
    kernel = GroupedRBFKernel(d, groups, batch_shape=batch_shape).to(DT)
    assert kernel.lengthscale.shape == (*batch_shape, 1, 3)
    raw = torch.rand(*batch_shape, 1, 3, dtype=DT) + 0.2
    kernel.lengthscale = raw
    ard = RBFKernel(ard_num_dims=d, batch_shape=batch_shape).to(DT)
    ard.lengthscale = raw[..., [0, 1, 1, 1, 0, 2]]
    x = torch.rand(*batch_shape, 5, d, dtype=DT)
    y = torch.rand(*batch_shape, 3, d, dtype=DT)
    with gpytorch.settings.debug(True):  # gpytorch's input-width check passes
        torch.testing.assert_close(kernel(x, y).to_dense(), ard(x, y).to_dense())
        torch.testing.assert_close(kernel(x, diag=True), ard(x, diag=True))
    # Two distinct one-hot values of the group (1, 2, 3) are exp(-1 / l^2) apart.
    a = torch.zeros(1, d, dtype=DT)
    b = a.clone()
    a[0, 1], b[0, 2] = 1.0, 1.0
    single = GroupedRBFKernel(d, groups).to(DT)
    single.lengthscale = torch.tensor([[0.5, 0.7, 0.9]], dtype=DT)
    expected = torch.exp(torch.tensor(-1.0 / 0.7**2, dtype=DT))
    torch.testing.assert_close(single(a, b).to_dense().squeeze(), expected)


def test_gradients_reach_each_shared_lengthscale():
    kernel = GroupedRBFKernel(4, [(1, 2, 3)]).to(DT)
    x = torch.rand(5, 4, dtype=DT)
    kernel(x).to_dense().sum().backward()
    grad = kernel.raw_lengthscale.grad
    assert grad.shape == (1, 2) and bool((grad != 0).all())


def test_prior_counts_each_lengthscale_once():
    prior = get_covar_module_with_dim_scaled_prior(5).lengthscale_prior
    kernel = GroupedRBFKernel(5, [(1, 2, 3, 4)], lengthscale_prior=prior).to(DT)
    kernel.lengthscale = torch.tensor([[0.4, 1.1]], dtype=DT)
    ((_, module, prior_, closure, _),) = list(kernel.named_priors())
    expected = prior.log_prob(torch.tensor([0.4, 1.1], dtype=DT)).sum()
    torch.testing.assert_close(prior_.log_prob(closure(module)).sum(), expected)


def test_follows_dtype_and_keeps_its_index_in_the_state_dict():
    kernel = GroupedRBFKernel(3, [(0, 1)]).to(torch.float32)
    assert kernel.raw_lengthscale.dtype == torch.float32
    assert kernel.column_index.dtype == torch.long
    other = GroupedRBFKernel(3, [(0, 1)])
    other.load_state_dict(kernel.state_dict())
    assert other.column_index.tolist() == [0, 0, 1]


@pytest.mark.parametrize("name", ["ard_num_dims", "active_dims"])
def test_rejects_ard_num_dims_and_active_dims(name):
    with pytest.raises(ValueError, match=f"takes no {name}"):
        GroupedRBFKernel(3, [(0, 1)], **{name: 3 if name == "ard_num_dims" else [0]})


def test_ard_equivalent_is_the_same_kernel_in_column_lengthscales():
    from gpytorch.kernels import ScaleKernel

    grouped = GroupedRBFKernel(4, [(0, 1, 2)]).to(DT)
    grouped.lengthscale = torch.tensor([[0.3, 0.8]], dtype=DT)
    x = torch.rand(5, 4, dtype=DT)
    for kernel in (grouped, ScaleKernel(grouped)):
        ard = ard_equivalent(kernel)
        inner = getattr(ard, "base_kernel", ard)
        assert type(inner) is RBFKernel and inner.lengthscale.shape == (1, 4)
        with torch.no_grad():
            torch.testing.assert_close(ard(x).to_dense(), kernel(x).to_dense())
    plain = RBFKernel()
    assert ard_equivalent(plain) is plain
