"""Tests for the GSSBO selection core: Eq. 3 gradients, Eq. 1, solvers, buffer rule."""

from __future__ import annotations

import itertools

import torch
from botorch.models import SingleTaskGP
from botorch.utils.testing import BotorchTestCase
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_sketch.gssbo import selection
from botorch_sketch.gssbo.selection import (
    DynamicBufferSize,
    SubsetReason,
    cosine_rows,
    exact_lml_gradient,
    gradient_direction_variance,
    greedy_min_cosine,
    lml_gradients,
    select_subset,
    sign_balance_variance,
    subset_lml_gradient,
)

DT = torch.float64


def gp_problem(n=30, d=2, seed=0):
    """A SingleTaskGP (no outcome transform) with non-default hyperparameters."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=DT)
    y = torch.sin(5 * X).sum(-1) + 0.1 * torch.randn(n, generator=g, dtype=DT)
    model = SingleTaskGP(X, y.unsqueeze(-1), outcome_transform=None)
    model.covar_module.lengthscale = torch.tensor([[0.3, 0.5]], dtype=DT)[..., :d]
    model.likelihood.noise = torch.tensor([0.05], dtype=DT)
    model.mean_module.constant.data.fill_(0.2)
    model.eval()
    return model, X, y


def kernels(model):
    def kernel(A, B):
        return model.covar_module(A, B).to_dense()

    def kernel_diag(A):
        return model.covar_module(A, diag=True)

    return kernel, kernel_diag


def residual_and_noise(model, X, y):
    with torch.no_grad():
        r = y - model.mean_module(X)
    return r, model.likelihood.noise.detach().expand(X.shape[0])


class TestGradients(BotorchTestCase):
    def test_exact_gradient_equals_autograd_of_exact_mll(self):
        model, X, y = gp_problem()
        kernel, kernel_diag = kernels(model)
        r, noise = residual_and_noise(model, X, y)
        grad = lml_gradients(X, r, noise, kernel, kernel_diag, method="exact")
        # Autograd of gpytorch's exact marginal likelihood (which divides by n).
        model.train()
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        y_var = y.clone().requires_grad_(True)
        value = mll(model(X), y_var) * X.shape[0]
        (auto,) = torch.autograd.grad(value, y_var)
        self.assertAllClose(grad, auto, atol=1e-10, rtol=1e-8)
        # And the closed form of Eq. 3.
        K = kernel(X, X) + torch.diag(noise)
        self.assertAllClose(grad, -torch.linalg.solve(K, r), atol=1e-10, rtol=1e-8)

    def test_gradient_is_precision_weighted_loo_residual(self):
        model, X, y = gp_problem(n=15)
        kernel, _ = kernels(model)
        r, noise = residual_and_noise(model, X, y)
        K = kernel(X, X) + torch.diag(noise)
        grad = exact_lml_gradient(K, r)
        Kinv = torch.linalg.inv(K)
        i = 4
        keep = [j for j in range(15) if j != i]
        Kk = K[keep][:, keep]
        loo_mean = K[i, keep] @ torch.linalg.solve(Kk, r[keep])
        self.assertAllClose(grad[i], -Kinv[i, i] * (r[i] - loo_mean), atol=1e-10)

    def test_subset_gradient_is_exact_on_pilot_plus_one(self):
        model, X, y = gp_problem(n=25)
        kernel, kernel_diag = kernels(model)
        r, noise = residual_and_noise(model, X, y)
        P = torch.tensor([0, 3, 5, 8, 13, 21])
        grad = subset_lml_gradient(X, r, noise, kernel, kernel_diag, P)

        def log_p(idx, r_idx):
            K = kernel(X[idx], X[idx]) + torch.diag(noise[idx])
            return torch.distributions.MultivariateNormal(
                torch.zeros_like(r_idx), K
            ).log_prob(r_idx)

        rP = r[P].clone().requires_grad_(True)
        (gP,) = torch.autograd.grad(log_p(P, rP), rP)
        self.assertAllClose(grad[P], gP, atol=1e-10)
        for i in (1, 24):
            idx = torch.cat([P, torch.tensor([i])])
            r_i = r[idx].clone().requires_grad_(True)
            (g_i,) = torch.autograd.grad(log_p(idx, r_i), r_i)
            self.assertAllClose(grad[i], g_i[-1], atol=1e-10)
        # With the pilot subset = all points it is the exact gradient.
        full = subset_lml_gradient(X, r, noise, kernel, kernel_diag, torch.arange(25))
        exact = lml_gradients(X, r, noise, kernel, kernel_diag, method="exact")
        self.assertAllClose(full, exact, atol=1e-10)

    def test_auto_method_switches_at_threshold(self):
        model, X, y = gp_problem(n=25)
        kernel, kernel_diag = kernels(model)
        r, noise = residual_and_noise(model, X, y)
        P = torch.arange(10)
        exact = lml_gradients(X, r, noise, kernel, kernel_diag, method="exact")
        sub = subset_lml_gradient(X, r, noise, kernel, kernel_diag, P)
        small = lml_gradients(X, r, noise, kernel, kernel_diag, "auto", P, 25)
        large = lml_gradients(X, r, noise, kernel, kernel_diag, "auto", P, 24)
        self.assertAllClose(small, exact)
        self.assertAllClose(large, sub)
        self.assertFalse(torch.allclose(exact, sub))
        with self.assertRaisesRegex(ValueError, "gradient_method"):
            lml_gradients(X, r, noise, kernel, kernel_diag, method="fast")
        with self.assertRaisesRegex(ValueError, "pilot subset"):
            lml_gradients(X, r, noise, kernel, kernel_diag, method="subset")


class TestCriterion(BotorchTestCase):
    def test_scalar_criterion_is_sign_balance(self):
        g = torch.randn(40, generator=torch.Generator().manual_seed(1), dtype=DT)
        for idx in (torch.arange(10), torch.arange(3, 40, 3)):
            gi = g[idx]
            cos = (gi.unsqueeze(-1) * gi.unsqueeze(-2)) / (
                gi.abs().unsqueeze(-1) * gi.abs().unsqueeze(-2)
            )
            self.assertAllClose(
                gradient_direction_variance(cos), sign_balance_variance(gi)
            )
            rows = cosine_rows("scalar", torch.sign(g))
            self.assertAllClose(rows(idx, idx), cos)
            S = torch.sign(gi).sum()
            self.assertAllClose(cos.sum(), S**2)

    def test_vector_cosines_are_signed_kernel_correlations(self):
        model, X, y = gp_problem(n=12)
        kernel, kernel_diag = kernels(model)
        signs = torch.sign(torch.randn(12, dtype=DT))
        with torch.no_grad():
            rows = cosine_rows("vector", signs, X, kernel, kernel_diag)
            C = rows(torch.arange(12), torch.arange(12))
            K = kernel(X, X)
        d = K.diagonal().sqrt()
        self.assertAllClose(C, signs[:, None] * signs[None] * K / d[:, None] / d)
        self.assertAllClose(C.diagonal(), torch.ones(12, dtype=DT))
        with self.assertRaisesRegex(ValueError, "vector"):
            cosine_rows("vector", signs)

    def test_greedy_is_optimal_in_scalar_mode(self):
        g = torch.tensor([1.0, 2, -1, 3, 4, 5, -2, 1, 2, -3, 6, 7], dtype=DT)
        n, n0, M = 12, 2, 7
        for seed in range(5):
            sel = select_subset(
                g,
                M,
                n0,
                mode="scalar",
                perturbation_variance=0.0,
                generator=torch.Generator().manual_seed(seed),
            )
            best = min(
                float(torch.sign(g[list(c) + [0, 1, n - 1]]).sum() ** 2)
                for c in itertools.combinations(range(n0, n - 1), M - n0 - 1)
            )
            self.assertEqual(float(torch.sign(g[sel.indices]).sum() ** 2), best)

    def test_greedy_vector_beats_random_subsets(self):
        model, X, y = gp_problem(n=60)
        kernel, kernel_diag = kernels(model)
        signs = torch.sign(torch.randn(60, generator=torch.Generator().manual_seed(2)))
        signs = signs.to(DT)
        forced = torch.tensor([0, 1, 59])
        cand = torch.arange(2, 59)
        with torch.no_grad():
            rows = cosine_rows("vector", signs, X, kernel, kernel_diag)
            chosen = greedy_min_cosine(rows, forced, cand, 12)
            U = torch.cat([forced, chosen])
            obj = rows(U, U).sum()
            g = torch.Generator().manual_seed(3)
            rand = []
            for _ in range(100):
                Ur = torch.cat([forced, cand[torch.randperm(57, generator=g)[:12]]])
                rand.append(rows(Ur, Ur).sum())
        self.assertEqual(chosen.unique().numel(), 12)
        self.assertLessEqual(float(obj), float(torch.stack(rand).mean()))
        self.assertLessEqual(float(obj), float(torch.stack(rand).min()))


class TestSelectSubset(BotorchTestCase):
    def setUp(self):
        super().setUp()
        self.model, self.X, self.y = gp_problem(n=50)
        self.kernel, self.kernel_diag = kernels(self.model)
        self.g = torch.randn(50, generator=torch.Generator().manual_seed(4), dtype=DT)

    def select(self, mode, seed=0, **kwargs):
        with torch.no_grad():
            return select_subset(
                self.g,
                kwargs.pop("M", 20),
                kwargs.pop("n0", 5),
                mode=mode,
                X=self.X,
                kernel=self.kernel,
                kernel_diag=self.kernel_diag,
                generator=torch.Generator().manual_seed(seed),
                **kwargs,
            )

    def test_forced_members_and_reasons(self):
        expected = {
            "scalar": SubsetReason.SELECTED,
            "vector": SubsetReason.SELECTED,
            "random": SubsetReason.RANDOM,
        }
        for mode in selection.MODES:
            for seed in range(3):
                sel = self.select(mode, seed)
                idx = sel.indices.tolist()
                self.assertEqual(len(idx), 20)
                self.assertEqual(len(set(idx)), 20)
                self.assertEqual(idx, sorted(idx))
                for i in [0, 1, 2, 3, 4, 49]:
                    self.assertIn(i, idx)
                reasons = dict(zip(idx, sel.reasons.tolist(), strict=True))
                self.assertTrue(
                    all(reasons[i] == SubsetReason.INITIAL for i in range(5))
                )
                self.assertEqual(reasons[49], SubsetReason.NEWEST)
                free = [reasons[i] for i in idx if 5 <= i < 49]
                self.assertEqual(len(free), 14)
                self.assertTrue(all(r == expected[mode] for r in free))

    def test_within_budget_keeps_everything(self):
        sel = select_subset(self.g[:12], 20, 5)
        self.assertEqual(sel.indices.tolist(), list(range(12)))
        self.assertTrue((sel.reasons == SubsetReason.WITHIN_BUDGET).all())

    def test_seeded_selection_is_reproducible(self):
        for mode in selection.MODES:
            a, b = self.select(mode, seed=7), self.select(mode, seed=7)
            self.assertEqual(a.indices.tolist(), b.indices.tolist())
            others = {
                tuple(self.select(mode, seed=s).indices.tolist()) for s in range(5)
            }
            self.assertGreater(len(others), 1, mode)

    def test_perturbation_flips_small_gradients(self):
        # With sigma_d^2 = 0 tiny gradients keep their sign; large noise changes
        # which points are chosen.
        g0 = self.select("scalar", seed=1, perturbation_variance=0.0)
        g1 = self.select("scalar", seed=1, perturbation_variance=100.0)
        self.assertNotEqual(g0.indices.tolist(), g1.indices.tolist())

    def test_bad_input(self):
        with self.assertRaisesRegex(ValueError, "subset_size"):
            select_subset(self.g, 6, 5)
        with self.assertRaisesRegex(ValueError, "subset_size"):
            select_subset(self.g, 5, 5)
        with self.assertRaisesRegex(ValueError, "n_initial"):
            select_subset(self.g, 20, -1)
        with self.assertRaisesRegex(ValueError, "mode"):
            select_subset(self.g, 20, 5, mode="kmeans")
        with self.assertRaisesRegex(ValueError, "NaN"):
            select_subset(torch.full((30,), float("nan"), dtype=DT), 20, 5)
        with self.assertRaisesRegex(ValueError, "non-empty"):
            select_subset(torch.zeros(0, dtype=DT), 20, 5)
        with self.assertRaisesRegex(ValueError, "perturbation_variance"):
            select_subset(self.g, 20, 5, mode="scalar", perturbation_variance=-1.0)


class TestDynamicBufferSize(BotorchTestCase):
    def test_switch_with_injected_times(self):
        rule = DynamicBufferSize(factor=4.0, n_warmup=3, min_size=22)
        for n, t in zip((21, 22, 23), (1.0, 2.0, 3.0), strict=True):
            self.assertIsNone(rule.update(t, n))
        self.assertEqual(rule.mean_initial_time, 2.0)
        self.assertIsNone(rule.update(8.0, 24))  # not strictly above Z * T_bar
        self.assertEqual(rule.update(8.1, 57), 57)
        self.assertEqual(rule.switch_n, 57)
        self.assertEqual(rule.update(0.1, 58), 57)  # one-way, frozen
        self.assertEqual(rule.update(100.0, 90), 57)

    def test_min_size_and_bad_options(self):
        rule = DynamicBufferSize(factor=2.0, n_warmup=1, min_size=30)
        rule.update(1.0, 10)
        self.assertEqual(rule.update(5.0, 12), 30)
        with self.assertRaisesRegex(ValueError, "factor"):
            DynamicBufferSize(factor=0)
        with self.assertRaisesRegex(ValueError, "n_warmup"):
            DynamicBufferSize(n_warmup=0)
