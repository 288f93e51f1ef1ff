"""Pieces of the NystromGP fit objective."""

from __future__ import annotations

import pytest
import torch
from gpytorch.priors import GammaPrior, LogNormalPrior

from botorch_sketch.models.nystrom_fit import log_prior


@pytest.mark.parametrize(
    "prior",
    [
        LogNormalPrior(-4.0, 1.0),
        LogNormalPrior(torch.tensor([0.5, 1.5]), torch.tensor([0.3, 2.0])),
        LogNormalPrior(0.2, 0.7, transform=torch.exp),
        GammaPrior(3.0, 6.0),
    ],
    ids=["noise", "batched", "transformed", "gamma"],
)
def test_log_prior_is_the_priors_log_density_and_gradient(prior):
    generator = torch.Generator().manual_seed(0)
    raw = torch.rand(4, 2, generator=generator, dtype=torch.float64) + 0.05
    value = raw.clone().requires_grad_(True)
    expected = raw.clone().requires_grad_(True)
    got, want = log_prior(prior, value), prior.log_prob(expected)
    torch.testing.assert_close(got, want.to(got))
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(value.grad, expected.grad)


def test_log_prior_rejects_values_outside_the_support_as_torch_does():
    with pytest.raises(ValueError, match="support"):
        log_prior(LogNormalPrior(0.0, 1.0), torch.tensor([0.5, -1.0]))
