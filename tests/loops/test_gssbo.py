"""Tests for GSSBORefitter: re-selection in a BoTorch loop, warm starts, dynamic M."""

from __future__ import annotations

import torch
from botorch.acquisition import UpperConfidenceBound
from botorch.optim import optimize_acqf
from botorch.test_functions import Hartmann
from botorch.utils.testing import BotorchTestCase

from botorch_sketch.gssbo.selection import DynamicBufferSize
from botorch_sketch.loops.gssbo import GSSBORefitter

DT = torch.float64


def initial_data(n=25, seed=0):
    f = Hartmann(dim=6, negate=True)
    X = torch.rand(n, 6, generator=torch.Generator().manual_seed(seed), dtype=DT)
    return f, X, f(X).unsqueeze(-1)


class TestGSSBORefitter(BotorchTestCase):
    def test_bo_loop_reselects_every_iteration(self):
        f, X, Y = initial_data()
        refitter = GSSBORefitter(subset_size=15, n_initial=5, seed=0)
        bounds = torch.stack([torch.zeros(6), torch.ones(6)]).to(DT)
        subsets = []
        for _ in range(3):
            model = refitter.fit(X, Y)
            self.assertIs(refitter.model, model)
            idx = model.subset_indices
            self.assertEqual(idx.numel(), 15)
            self.assertEqual(int(idx[-1]), X.shape[0] - 1)  # newest is in
            self.assertTrue(set(range(5)) <= set(idx.tolist()))
            subsets.append(idx.tolist())
            acqf = UpperConfidenceBound(model, beta=2.0)
            x, _ = optimize_acqf(
                acqf,
                bounds,
                q=1,
                num_restarts=2,
                raw_samples=16,
                options={"maxiter": 5},
            )
            X, Y = torch.cat([X, x]), torch.cat([Y, f(x).unsqueeze(-1)])
        self.assertEqual(len({tuple(s) for s in subsets}), 3)

    def test_same_data_same_seed_reproduces(self):
        _, X, Y = initial_data(n=40)
        a = GSSBORefitter(subset_size=12, n_initial=4, seed=3).fit(X, Y)
        b = GSSBORefitter(subset_size=12, n_initial=4, seed=3).fit(X, Y)
        self.assertEqual(a.subset_indices.tolist(), b.subset_indices.tolist())

    def test_warm_start_keeps_new_transforms(self):
        _, X, Y = initial_data(n=30)
        refitter = GSSBORefitter(subset_size=12, n_initial=4, seed=0)
        first = refitter.fit(X, Y)
        second = refitter.fit(X, 2 * Y + 7)
        idx = second.subset_indices
        self.assertAllClose(
            second.outcome_transform.means.squeeze(), (2 * Y[idx] + 7).mean()
        )
        self.assertIsNot(first, second)

    def test_dynamic_buffer_rule(self):
        _, X, Y = initial_data(n=30)
        rule = DynamicBufferSize(factor=2.0, n_warmup=1, min_size=6)
        refitter = GSSBORefitter(subset_size=None, dynamic=rule, n_initial=4, seed=0)
        m = refitter.fit(X[:20], Y[:20], iteration_time=1.0)  # warm-up
        self.assertEqual(m.subset_indices.numel(), 20)
        m = refitter.fit(X[:21], Y[:21], iteration_time=1.5)  # below Z * T_bar
        self.assertEqual(m.subset_indices.numel(), 21)
        m = refitter.fit(X[:22], Y[:22], iteration_time=2.5)  # switch: M = 22
        self.assertEqual(m.subset_indices.numel(), 22)
        m = refitter.fit(X, Y, iteration_time=0.1)
        self.assertEqual(m.subset_indices.numel(), 22)
        self.assertEqual(rule.switch_n, 22)

    def test_bad_options(self):
        with self.assertRaisesRegex(ValueError, "exactly one"):
            GSSBORefitter(subset_size=None)
        with self.assertRaisesRegex(ValueError, "exactly one"):
            GSSBORefitter(subset_size=10, dynamic=DynamicBufferSize())
        with self.assertRaisesRegex(ValueError, "subset_size"):
            GSSBORefitter(subset_size=10, n_initial=9)
