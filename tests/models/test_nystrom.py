"""Tests for NystromGP: exact references, the BoTorch contract and bad input."""

from __future__ import annotations

import json
import math
import warnings
from copy import deepcopy
from dataclasses import replace
from unittest import mock

import scipy.optimize
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.sampling import SobolQMCNormalSampler
from botorch.utils.testing import BotorchTestCase
from gpytorch.kernels import InducingPointKernel
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.settings import sgpr_diagonal_correction
from linear_operator.operators import DenseLinearOperator

from botorch_sketch import linalg
from botorch_sketch.generation import EmbeddingThompsonSampling
from botorch_sketch.models import NystromGP
from botorch_sketch.models.nystrom_fit import (
    SketchState,
    _fit_hyperparameters,
    _objective,
    hyperparameter_state,
    refit_due,
)

DT = torch.float64


def make_data(n=40, d=2, m=1, batch=(), seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(*batch, n, d, generator=g, dtype=DT)
    f = torch.sin(4 * X).sum(-1, keepdim=True)
    Y = torch.cat([f * (j + 1) for j in range(m)], -1)
    return X, Y + 0.05 * torch.randn(Y.shape, generator=g, dtype=DT)


def exact_twin(model, X, Y, **kwargs):
    """A SingleTaskGP with the same hyperparameters and transforms."""
    exact = SingleTaskGP(X, Y, **kwargs)
    exact.load_state_dict(model.state_dict(), strict=False)
    return exact.eval()


class TestNystromGPExactness(BotorchTestCase):
    def assert_same_joint(self, p, q, atol):
        r"""Equal means and joint covariance matrices (absolute ``atol``)."""
        self.assertAllClose(p.mean, q.mean, atol=atol, rtol=0)
        self.assertAllClose(
            p.distribution.covariance_matrix,
            q.distribution.covariance_matrix,
            atol=atol,
            rtol=0,
        )

    def test_full_dictionary_equals_exact_gp(self):
        for m, batch in [(1, ()), (2, ()), (1, (3,)), (2, (2,))]:
            X, Y = make_data(m=m, batch=batch)
            model = NystromGP(X, Y, dictionary="all").eval()
            exact = exact_twin(model, X, Y)
            Xt = torch.rand(4, 1, 5, 2, dtype=DT)
            for noise in (False, True):
                p, q = (
                    model.posterior(Xt, observation_noise=noise),
                    exact.posterior(Xt, observation_noise=noise),
                )
                self.assertEqual(p.mean.shape, q.mean.shape)
                self.assert_same_joint(p, q, atol=1e-8)

    def test_full_dictionary_parts_are_built_on_demand_and_agree(self):
        # Every point: the posterior comes from one Cholesky factor (solves
        # against it); the inverse's predictor is built only for a caller of
        # dtc_predictor and gives the same posterior; the DTC parts (embedding
        # map, factor) are built only when a caller asks for them, and their
        # predictor gives the same posterior.
        X, Y = make_data(n=40)
        model = NystromGP(X, Y, dictionary="all").eval()
        Xt = torch.rand(6, 2, dtype=DT, generator=torch.Generator().manual_seed(1))
        p = model.posterior(Xt)
        cache = model._posterior_cache()
        self.assertIsNone(cache["factor"])
        self.assertIsNone(cache["predictor"])
        self.assertEqual(cache["exact"].chol.shape, (40, 40))
        self.assertEqual(model.dtc_predictor().num_explained, 40)
        self.assert_same_joint(model.posterior(Xt), p, atol=1e-10)  # by the inverse
        S, W, factor = model.dtc_parts()
        self.assertIs(model.dtc_parts().factor, factor)  # built once
        dtc = linalg.dtc_predictor(W, factor)
        K_XS = model.covar_module(model.transform_inputs(Xt), S).to_dense()
        mean, cov = linalg.dtc_predict(
            dtc, K_XS, model.covar_module(model.transform_inputs(Xt)).to_dense()
        )
        scale = model.outcome_transform.stdvs.squeeze()
        self.assertAllClose(
            p.mean.squeeze(-1),
            model.outcome_transform.means.squeeze()
            + scale * (mean + model.mean_module.constant),
            # The parts' embedding map is the Cholesky factor of K_S + 1e-8 s I
            # (s the mean diagonal): over 300 random test sets the means differed
            # by up to 1.5e-5 (outputs of order 1), the covariances by 2e-7.
            atol=1e-4,
            rtol=0,
        )
        self.assertAllClose(
            p.distribution.covariance_matrix, scale**2 * cov, atol=1e-5, rtol=0
        )
        # A dictionary of some points keeps the DTC route.
        some = NystromGP(X, Y, dictionary=torch.arange(0, 40, 2)).eval()
        some.posterior(Xt)
        self.assertIsNotNone(some._posterior_cache()["factor"])

    def test_full_dictionary_loss_is_exact_mll_per_output(self):
        # With every point in the dictionary the DTC marginal likelihood is the
        # exact GP's; the loss BoTorch's batched fit sees has one value per
        # output / batch member (issue 13, item 1).
        for m, batch in [(1, ()), (2, ()), (1, (3,)), (2, (2,))]:
            X, Y = make_data(m=m, batch=batch)
            model = NystromGP(X, Y, dictionary="all", objective="dtc")
            with torch.no_grad():
                model.covar_module.lengthscale = 0.3 + torch.rand_like(
                    model.covar_module.lengthscale
                )
            exact = exact_twin(model, X, Y).train()
            mll = ExactMarginalLogLikelihood(exact.likelihood, exact)
            expected = -mll(exact(*exact.train_inputs), exact.train_targets)
            model.train()
            loss = model.compute_custom_loss(
                ExactMarginalLogLikelihood(model.likelihood, model)
            )
            self.assertEqual(loss.shape, model._aug_batch_shape)
            # Up to the 1e-8 relative jitter of linalg.cholesky_features.
            self.assertAllClose(loss, expected, atol=1e-6, rtol=1e-5)

    def test_full_dictionary_with_transforms_and_fixed_noise(self):
        X, Y = make_data(n=30, d=3)
        X = 10 * X - 3
        Yvar = torch.full_like(Y, 0.01) * (1 + torch.rand_like(Y))
        kw = dict(
            train_Yvar=Yvar,
            input_transform=Normalize(3),
            outcome_transform=Standardize(1),
        )
        model = NystromGP(X, Y, dictionary="all", **deepcopy(kw)).eval()
        exact = exact_twin(model, X, Y, **deepcopy(kw))
        Xt = 10 * torch.rand(6, 3, dtype=DT) - 3
        p, q = model.posterior(Xt), exact.posterior(Xt)
        self.assertAllClose(p.mean, q.mean, atol=1e-8, rtol=0)
        self.assertAllClose(p.variance, q.variance, atol=1e-8, rtol=0)

    def test_partial_dictionary_equals_closed_form_and_sgpr(self):
        X, Y = make_data(n=50)
        model = NystromGP(
            X, Y, dictionary=torch.arange(0, 50, 5), outcome_transform=None
        )
        model.covar_module.lengthscale = 0.4
        model.likelihood.noise = 0.02
        model.eval()
        Xt = torch.rand(6, 2, dtype=DT)
        k, S, s2 = model.covar_module, model.inducing_points, 0.02
        y = Y.squeeze(-1) - model.mean_module.constant
        Kuu_pinv = torch.linalg.pinv(k(S).to_dense(), hermitian=True)
        Q_ff = k(X, S).to_dense() @ Kuu_pinv @ k(S, X).to_dense()
        Q_sf = k(Xt, S).to_dense() @ Kuu_pinv @ k(S, X).to_dense()
        Q_ss = k(Xt, S).to_dense() @ Kuu_pinv @ k(S, Xt).to_dense()
        C = Q_ff + s2 * torch.eye(50, dtype=DT)
        mean = model.mean_module.constant + Q_sf @ torch.linalg.solve(C, y)
        cov = k(Xt).to_dense() - Q_sf @ torch.linalg.solve(C, Q_sf.T)
        post = model.posterior(Xt)
        self.assertAllClose(post.mean.squeeze(-1), mean, atol=1e-8, rtol=0)
        self.assertAllClose(post.distribution.covariance_matrix, cov, atol=1e-8, rtol=0)
        # gpytorch's SGPR without the diagonal correction is the SoR predictive:
        # same mean, and DTC = SoR + (K** - Q**).
        base = deepcopy(model.covar_module)
        sgpr = SingleTaskGP(
            X,
            Y,
            covar_module=InducingPointKernel(
                base, inducing_points=S.clone(), likelihood=model.likelihood
            ),
            likelihood=deepcopy(model.likelihood),
            mean_module=deepcopy(model.mean_module),
            outcome_transform=None,
        ).eval()
        sgpr.covar_module.likelihood = sgpr.likelihood
        with sgpr_diagonal_correction(False):
            ps = sgpr.posterior(Xt)
        self.assertAllClose(ps.mean, post.mean, atol=1e-6, rtol=0)
        sor_plus_residual = ps.distribution.covariance_matrix + (
            k(Xt).to_dense() - Q_ss
        )
        self.assertAllClose(
            sor_plus_residual, post.distribution.covariance_matrix, atol=1e-6, rtol=0
        )


class TestNystromGPContract(BotorchTestCase):
    def test_shapes_batched_multi_output(self):
        X, Y = make_data(m=2, batch=(3,))
        model = NystromGP(X, Y, seed=0)
        self.assertEqual(model.num_outputs, 2)
        self.assertEqual(model.batch_shape, torch.Size([3]))
        for shape in [(5, 2), (3, 5, 2), (4, 3, 5, 2), (4, 1, 5, 2)]:
            post = model.posterior(torch.rand(*shape, dtype=DT))
            expected = torch.broadcast_shapes(shape[:-2], (3,)) + (5, 2)
            self.assertEqual(post.mean.shape, torch.Size(expected))
        post = model.posterior(torch.rand(5, 2, dtype=DT), output_indices=[1])
        self.assertEqual(post.mean.shape, torch.Size([3, 5, 1]))

    def test_posterior_mean_equals_the_posterior_s_mean(self):
        cases = [
            (1, (), {}),
            (2, (), {}),
            (1, (3,), {}),
            (2, (2,), {}),
            (
                1,
                (),
                {"input_transform": Normalize(2), "outcome_transform": Standardize(1)},
            ),
            (2, (), {"outcome_transform": Standardize(2)}),
        ]
        for m, batch, transforms in cases:
            X, Y = make_data(m=m, batch=batch)
            model = fitted(NystromGP(X, Y, seed=0, **transforms))
            for shape in [(5, 2), (4, 1, 5, 2)] if batch else [(5, 2), (4, 3, 5, 2)]:
                Xt = torch.rand(*shape, dtype=DT) * 1.2 - 0.1
                mean = model.posterior_mean(Xt)
                expected = model.posterior(Xt).mean
                self.assertEqual(mean.shape, expected.shape)
                self.assertAllClose(mean, expected, atol=1e-10, rtol=1e-10)
        with self.assertRaisesRegex(ValueError, "d = 2"):
            model.posterior_mean(torch.rand(5, 3, dtype=DT))
        with self.assertRaisesRegex(ValueError, "NaN|finite"):
            model.posterior_mean(torch.full((5, 2), float("nan"), dtype=DT))

    def test_subset_output(self):
        X, Y = make_data(m=3)
        model = NystromGP(X, Y, seed=0)
        sub = model.subset_output([2])
        Xt = torch.rand(4, 2, dtype=DT)
        self.assertEqual(sub.num_outputs, 1)
        self.assertAllClose(
            sub.posterior(Xt).mean.squeeze(-1), model.posterior(Xt).mean[..., 2]
        )

    def test_condition_on_observations_and_fantasize(self):
        X, Y = make_data(n=30)
        model = NystromGP(X, Y, seed=0, outcome_transform=None).eval()
        Xn, Yn = make_data(n=5, seed=1)
        cond = model.condition_on_observations(Xn, Yn)
        # Exact DTC update: same as a rebuild on all data with the same
        # dictionary, hyperparameters and outcome-transform statistics.
        rebuilt = NystromGP(
            torch.cat([X, Xn]),
            torch.cat([Y, Yn]),
            dictionary=model.dictionary_indices,
            outcome_transform=None,
        )
        rebuilt.load_state_dict(model.state_dict())
        Xt = torch.rand(4, 2, dtype=DT)
        self.assertAllClose(
            cond.posterior(Xt).mean, rebuilt.posterior(Xt).mean, atol=1e-10, rtol=0
        )
        self.assertEqual(model.train_inputs[0].shape[-2], 30)  # original untouched
        fant = model.fantasize(Xt, sampler=SobolQMCNormalSampler(torch.Size([3])))
        self.assertEqual(fant.batch_shape, torch.Size([3]))
        self.assertEqual(fant.posterior(Xt).mean.shape, torch.Size([3, 4, 1]))
        # The fantasy mean at the fantasy points moves towards the fantasies.
        self.assertFalse(
            torch.allclose(fant.posterior(Xt).mean[0], fant.posterior(Xt).mean[1])
        )


class TestNystromGPDictionary(BotorchTestCase):
    def test_fit_redraws_dictionary_and_uses_subset(self):
        X, Y = make_data(n=120)
        model = NystromGP(X, Y, seed=0, fit_subset_size=60)
        before = model.covar_module.lengthscale.clone()
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        self.assertFalse(torch.allclose(before, model.covar_module.lengthscale))
        self.assertGreater(int(model.dictionary_indices.max()), 59)  # on all n
        self.assertFalse(model.training)
        # seeded: the same fit gives the same dictionary and hyperparameters
        twin = NystromGP(X, Y, seed=0, fit_subset_size=60)
        fit_gpytorch_mll(ExactMarginalLogLikelihood(twin.likelihood, twin))
        self.assertTrue(torch.equal(twin.dictionary_indices, model.dictionary_indices))
        self.assertAllClose(
            twin.covar_module.lengthscale, model.covar_module.lengthscale
        )

    def test_dictionary_tracks_effective_dimension(self):
        # Smooth 1-d function: d_eff saturates, so the dictionary stays small.
        g = torch.Generator().manual_seed(5)
        sizes = []
        for n in (200, 1000):
            X = torch.rand(n, 1, generator=g, dtype=DT)
            Y = torch.sin(6 * X)
            model = NystromGP(X, Y, seed=1, outcome_transform=None)
            model.covar_module.lengthscale = 0.2
            model.likelihood.noise = 1e-2
            model.resample_dictionary()
            rls = model.posterior_variance_at_train()
            d_eff = float(rls.sum())
            self.assertLessEqual(model.dictionary_size, 3 * model.q_bar * d_eff + 5)
            sizes.append(model.dictionary_size)
        self.assertLess(sizes[1], 2 * sizes[0])

    def test_condition_and_resample_is_bkb_update(self):
        X, Y = make_data(n=30)
        # every p = 1: the dictionary holds every point and BKB is exact GP-UCB
        model = NystromGP(X, Y, seed=0, q_bar=1e12, outcome_transform=None)
        Xn, Yn = make_data(n=4, seed=2)
        new = model.condition_and_resample(Xn, Yn)
        self.assertEqual(new.dictionary_size, 34)
        self.assertEqual(model.train_inputs[0].shape[-2], 30)
        exact = exact_twin(
            new, torch.cat([X, Xn]), torch.cat([Y, Yn]), outcome_transform=None
        )
        Xt = torch.rand(5, 2, dtype=DT)
        self.assertAllClose(new.posterior(Xt).mean, exact.posterior(Xt).mean, atol=1e-8)
        # duplicated rows: a point that is already there adds nothing new
        dup = model.condition_and_resample(X[:3], Y[:3])
        self.assertEqual(dup.dictionary_size, 30)
        # seeded draws reproduce; a small q_bar gives a smaller dictionary
        a = NystromGP(X, Y, seed=3, q_bar=0.05).condition_and_resample(Xn, Yn)
        b = NystromGP(X, Y, seed=3, q_bar=0.05).condition_and_resample(Xn, Yn)
        self.assertTrue(torch.equal(a.dictionary_indices, b.dictionary_indices))
        self.assertLess(a.dictionary_size, 34)

    def test_hyperparameter_change_refreshes_posterior(self):
        X, Y = make_data()
        model = NystromGP(X, Y, dictionary="all").eval()
        Xt = torch.rand(3, 2, dtype=DT)
        before = model.posterior(Xt).variance
        model.covar_module.lengthscale = 0.05  # in eval mode, no train() call
        after = model.posterior(Xt).variance
        fresh = NystromGP(X, Y, dictionary="all")
        fresh.load_state_dict(model.state_dict())
        self.assertFalse(torch.allclose(before, after))
        self.assertAllClose(after, fresh.posterior(Xt).variance)

    def test_max_dictionary_size_caps_every_draw(self):
        X, Y = make_data(n=60)
        model = NystromGP(X, Y, seed=0, q_bar=1e12, max_dictionary_size=15)
        # BLESS within the budget: a leverage-score draw of at most 15 points at
        # a ridge above the noise, flagged (issue 15).
        self.assertTrue(8 <= model.dictionary_size <= 15)
        self.assertTrue(model.dictionary_capped)
        self.assertGreater(model.sketch_ridge, float(model.likelihood.noise))
        for _ in range(3):
            model.resample_dictionary()  # BKB's draw within the budget
            self.assertTrue(8 <= model.dictionary_size <= 15)
            self.assertTrue(model.dictionary_capped)
        free = NystromGP(X, Y, seed=0, q_bar=1e12, max_dictionary_size=None)
        self.assertEqual(free.dictionary_size, 60)
        self.assertFalse(free.dictionary_capped)

    def test_memory_budget_caps_dictionary_and_subset_fit(self):
        X, Y = make_data(n=60)
        budget = 15 * 32 * 60 / 2**30  # room for 15 dictionary points
        model = NystromGP(X, Y, seed=0, q_bar=1e12, memory_budget_gb=budget)
        self.assertTrue(8 <= model.dictionary_size <= 15)
        capped = NystromGP(
            X, Y, seed=0, q_bar=1e12, memory_budget_gb=budget, max_dictionary_size=9
        )
        self.assertTrue(4 <= capped.dictionary_size <= 9)
        sub = model._data_subset(torch.arange(30))
        self.assertEqual(sub.max_dictionary_size, 15)  # the full model's cap
        self.assertLessEqual(sub.dictionary_size, 15)
        with self.assertRaisesRegex(ValueError, "memory_budget_gb"):
            NystromGP(X, Y, memory_budget_gb=0.0)

    def test_duplicated_dictionary_points(self):
        X, Y = make_data(n=20)
        X = torch.cat([X, X[:5]])
        Y = torch.cat([Y, Y[:5]])
        idx = torch.tensor([0, 1, 2, 20, 21, 7])  # 20, 21 duplicate 0, 1
        model = NystromGP(X, Y, dictionary=idx).eval()
        ref = NystromGP(X, Y, dictionary=torch.tensor([0, 1, 2, 7])).eval()
        Xt = torch.rand(4, 2, dtype=DT)
        self.assertAllClose(model.posterior(Xt).variance, ref.posterior(Xt).variance)
        model.resample_dictionary(generator=torch.Generator().manual_seed(0))
        self.assertTrue((model.dictionary_indices < 20).all())  # first occurrences

    def test_posterior_at_repeated_test_points(self):
        # The joint covariance of two identical test points is singular: the
        # posterior must still build and sample (as SingleTaskGP's does), e.g. when
        # Ax predicts at repeated observations.
        X, Y = make_data(n=30)
        model = NystromGP(X, Y, seed=0).eval()
        Xt = torch.cat([X[:3], X[:3]])
        post = model.posterior(Xt)
        self.assertAllClose(post.mean[:3], post.mean[3:])
        samples = post.rsample(torch.Size([4]))
        self.assertTrue(torch.isfinite(samples).all())
        self.assertAllClose(samples[:, :3], samples[:, 3:], atol=1e-3)

    def test_thompson_sampling_without_joint_covariance(self):
        X, Y = make_data(n=40)
        model = NystromGP(X, Y, dictionary="all")
        cand = torch.rand(3000, 2, dtype=DT)
        samples = model.sample_latent(
            cand, 2000, generator=torch.Generator().manual_seed(0), chunk_size=700
        )
        self.assertEqual(samples.shape, torch.Size([2000, 3000, 1]))
        post = model.posterior(cand[:50].unsqueeze(-2))
        self.assertAllClose(
            samples[:, :50, 0].mean(0), post.mean.squeeze(), atol=0.1, rtol=0
        )
        self.assertAllClose(
            samples[:, :50, 0].var(0), post.variance.squeeze(), atol=0.05, rtol=0.15
        )
        ts = EmbeddingThompsonSampling(model, replacement=False, seed=1)
        picks = ts(cand, num_samples=5)
        self.assertEqual(picks.shape, torch.Size([5, 2]))
        self.assertEqual(torch.unique(picks, dim=0).shape[0], 5)
        again = EmbeddingThompsonSampling(model, replacement=False, seed=1)(cand, 5)
        self.assertTrue(torch.equal(picks, again))

    def test_joint_samples_are_the_posteriors(self):
        # sample_joint draws mean + L eps with L the Cholesky factor of the
        # posterior's joint covariance and eps ~ (A x S) from the generator: the
        # same draws as a reference built from posterior(X) (a sketched model with
        # an outcome transform; an exact-dictionary model against SingleTaskGP),
        # at 12 points whose covariance is well conditioned (the factor of a
        # nearly singular one depends on rounding).
        from linear_operator.utils.cholesky import psd_safe_cholesky

        X, Y = make_data(n=60)
        cand = torch.rand(12, 2, generator=torch.Generator().manual_seed(4), dtype=DT)
        sketched = NystromGP(
            X, Y, dictionary=torch.arange(0, 60, 3), outcome_transform=Standardize(1)
        ).eval()
        every = NystromGP(X, Y, dictionary="all").eval()
        pairs = [(sketched, sketched), (every, exact_twin(every, X, Y))]
        for model, reference in pairs:
            g9 = torch.Generator().manual_seed(9)
            got = model.sample_joint(cand, 6, generator=g9)
            self.assertEqual(got.shape, torch.Size([6, 12, 1]))
            with torch.no_grad():
                post = reference.posterior(cand)
                chol = psd_safe_cholesky(post.distribution.covariance_matrix)
            eps = torch.randn(
                12, 6, generator=torch.Generator().manual_seed(9), dtype=DT
            )
            want = post.mean.squeeze(-1) + (chol @ eps).mT
            self.assertAllClose(got.squeeze(-1), want, atol=1e-9, rtol=0)
        two = NystromGP(*make_data(m=2), dictionary="all")
        samples = two.sample_joint(cand, 4000, generator=torch.Generator())
        self.assertEqual(samples.shape, torch.Size([4000, 12, 2]))
        post = two.posterior(cand)
        self.assertAllClose(samples.mean(0), post.mean, atol=0.02, rtol=0)
        self.assertAllClose(samples.var(0), post.variance, atol=0.005, rtol=0.15)
        with self.assertRaisesRegex(ValueError, "num_samples"):
            every.sample_joint(cand, 0)


class TestNystromGPInputs(BotorchTestCase):
    def test_bad_input_raises_value_error(self):
        X, Y = make_data()
        bad = [
            (dict(train_X=X.clone().fill_(float("nan")), train_Y=Y), "NaN"),
            (dict(train_X=X, train_Y=Y.clone().fill_(float("inf"))), "Inf"),
            (dict(train_X=X, train_Y=Y[:-1]), "points"),
            (dict(train_X=X, train_Y=Y.squeeze(-1)), "dimensions"),
            (dict(train_X=X[:0], train_Y=Y[:0]), "empty"),
            (dict(train_X=X, train_Y=Y, q_bar=0.0), "q_bar"),
            (dict(train_X=X, train_Y=Y, q_bar=-1), "q_bar"),
            (dict(train_X=X, train_Y=Y, objective="fitc"), "objective"),
            (dict(train_X=X, train_Y=Y, dictionary="some"), "dictionary"),
            (dict(train_X=X, train_Y=Y, dictionary=torch.tensor([99])), "indices"),
            (dict(train_X=X, train_Y=Y, train_Yvar=-torch.ones_like(Y)), "negative"),
            (dict(train_X=X, train_Y=Y, fit_subset_size=0), "fit_subset_size"),
            (dict(train_X=X, train_Y=Y, max_dictionary_size=0), "max_dictionary"),
        ]
        for kwargs, match in bad:
            with self.assertRaisesRegex(ValueError, match):
                NystromGP(**kwargs)
        model = NystromGP(X, Y, seed=0)
        with self.assertRaisesRegex(ValueError, "d = 2"):
            model.posterior(torch.rand(3, 5, dtype=DT))
        with self.assertRaisesRegex(ValueError, "NaN"):
            model.posterior(torch.full((3, 2), float("nan"), dtype=DT))

    def test_failed_update_leaves_model_intact(self):
        X, Y = make_data()
        model = NystromGP(X, Y, seed=0)
        state = (model.dictionary_indices.clone(), model._num_draws)
        with self.assertRaisesRegex(ValueError, "NaN"):
            model.condition_and_resample(X[:2], torch.full((2, 1), float("nan")))
        with self.assertRaisesRegex(ValueError, "1 output"):
            model.condition_and_resample(X[:2], torch.zeros(2, 2, dtype=DT))
        self.assertTrue(torch.equal(model.dictionary_indices, state[0]))
        self.assertEqual(model._num_draws, state[1])
        self.assertEqual(model.train_inputs[0].shape[-2], 40)

    def test_to_after_posterior_rebuilds_caches(self):
        model = NystromGP(*make_data(), seed=0).eval()
        Xt = torch.rand(4, 2, dtype=DT)
        ref = model.posterior(Xt).mean
        post = model.to(torch.float32).posterior(Xt.float())
        self.assertEqual(post.mean.dtype, torch.float32)
        # float32 rounding of the embedding's eigendecomposition (every one of
        # the 40 points is in the dictionary here).
        self.assertAllClose(post.mean, ref.float(), atol=1e-2, rtol=0)
        self.assertAllClose(
            model.to(torch.float64).posterior(Xt).mean, ref, atol=1e-2, rtol=0
        )

    def test_state_dict_loads_into_reordered_and_subsampled_data(self):
        X, Y = make_data(n=30)
        model = NystromGP(X, Y, seed=0, max_dictionary_size=12)
        self.assertGreater(model.dictionary_size, 0)  # drawn (lazily) now
        state = model.state_dict()
        perm = torch.randperm(30, generator=torch.Generator().manual_seed(1))
        shuffled = NystromGP(X[perm], Y[perm], seed=3)
        shuffled.load_state_dict(state)
        self.assertTrue(
            torch.equal(
                torch.sort(perm[shuffled.dictionary_indices]).values,
                model.dictionary_indices,
            )
        )
        keep = torch.arange(0, 30, 2)  # Ax's cross-validation drops points
        sub = NystromGP(X[keep], Y[keep], seed=3)
        with self.assertLogs("botorch_sketch.models", "WARNING"):
            sub.load_state_dict(state)
        expected = [i // 2 for i in model.dictionary_indices.tolist() if i % 2 == 0]
        self.assertEqual(sub.dictionary_indices.tolist(), expected)

    def test_float32_is_computed_in_float64(self):
        X, Y = make_data()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m32 = NystromGP(X.float(), Y.float(), dictionary="all")
        m64 = NystromGP(X, Y, dictionary="all")
        # Computed in float64, returned in the data's dtype (as SingleTaskGP).
        self.assertEqual(m32.compute_dtype, torch.float64)
        self.assertEqual(m32.train_inputs[0].dtype, torch.float32)
        Xt = torch.rand(4, 2)
        p32 = m32.posterior(Xt)
        self.assertEqual(p32.mean.dtype, torch.float32)
        self.assertAllClose(
            p32.mean.double(), m64.posterior(Xt.double()).mean, atol=1e-5, rtol=0
        )


def fitted(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def rough_data(n, seed=0):
    """Short lengthscale, low noise: a leverage-score dictionary wants most points."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=DT)
    Y = torch.sin(12 * X).sum(-1, keepdim=True)
    return X, Y + 0.01 * torch.randn(Y.shape, generator=g, dtype=DT)


class TestNystromGPBudget(BotorchTestCase):
    def test_budget_is_honoured_in_every_path(self):
        X, Y = rough_data(300)
        cap = 40
        model = NystromGP(X, Y, seed=0, max_dictionary_size=cap, fit_subset_size=120)
        self.assertLessEqual(model.dictionary_size, cap)  # lazy draw
        fitted(model)
        self.assertLessEqual(model.dictionary_size, cap)  # fit: final dictionary
        self.assertTrue(model.dictionary_capped)
        self.assertGreater(model.sketch_ridge, float(model.likelihood.noise))
        model.resample_dictionary()
        self.assertLessEqual(model.dictionary_size, cap)  # BKB resampling
        model.eval()
        Xn, Yn = rough_data(30, seed=1)
        new = model.condition_and_resample(Xn, Yn)
        self.assertLessEqual(new.dictionary_size, cap)  # conditioning + resampling
        warm = NystromGP(
            torch.cat([X, Xn]),
            torch.cat([Y, Yn]),
            seed=0,
            max_dictionary_size=cap,
            warm_start=model.sketch_state(),
        )
        fitted(warm)
        self.assertLessEqual(warm.dictionary_size, cap)  # warm start
        sub_sizes = []
        original = NystromGP._data_subset

        def spy(self, idx):
            sub = original(self, idx)
            sub_sizes.append(sub._dictionary_cap())
            return sub

        NystromGP._data_subset = spy
        try:
            fitted(
                NystromGP(
                    X,
                    Y,
                    seed=0,
                    max_dictionary_size=cap,
                    objective="vfe",
                    fit_subset_size=120,
                )
            )
        finally:
            NystromGP._data_subset = original
        self.assertEqual(sub_sizes, [cap])  # the VFE subsample fit: same budget

    def test_regime_guard_uses_every_point(self):
        X, Y = rough_data(120)
        small = NystromGP(X, Y, seed=0, exact_max_n=200)
        self.assertEqual(small.dictionary_size, 120)
        self.assertIsNone(small.sketch_ridge)
        # Above exact_max_n, a draw that keeps at least half the points is
        # replaced by every point (a rough, low-noise function here).
        rough = NystromGP(X, Y, seed=0, exact_max_n=0)
        rough.covar_module.lengthscale = 0.05
        rough.likelihood.noise = 1e-4
        self.assertEqual(rough.dictionary_size, 120)
        smooth = NystromGP(X, Y, seed=0, exact_max_n=0)
        smooth.covar_module.lengthscale = 1.0
        smooth.likelihood.noise = 0.1
        self.assertLess(smooth.dictionary_size, 60)

    def test_full_dictionary_is_the_exact_gp_after_a_fit(self):
        X, Y = make_data(n=60)
        model = fitted(NystromGP(X, Y, seed=0))  # n <= exact_max_n
        exact = exact_twin(model, X, Y)
        Xt = torch.rand(5, 2, dtype=DT)
        self.assertAllClose(
            model.posterior(Xt).mean, exact.posterior(Xt).mean, atol=1e-8, rtol=0
        )

    def test_marginals_without_the_joint_covariance(self):
        X, Y = rough_data(300)
        model = fitted(NystromGP(X, Y, seed=0, max_dictionary_size=50, exact_max_n=0))
        Xt = torch.rand(400, 2, generator=torch.Generator().manual_seed(2), dtype=DT)
        post = model.posterior(Xt)  # q = 400: the lazy covariance
        self.assertNotIsInstance(
            post.distribution.lazy_covariance_matrix, DenseLinearOperator
        )
        single = model.posterior(Xt.unsqueeze(-2))  # 400 separate q = 1 posteriors
        self.assertAllClose(
            post.variance, single.variance.squeeze(-2), atol=1e-10, rtol=0
        )
        dense = post.distribution.covariance_matrix
        self.assertAllClose(
            post.variance.squeeze(-1), dense.diagonal(), atol=1e-10, rtol=0
        )
        self.assertAllClose(post.mean, single.mean.squeeze(-2), atol=1e-10, rtol=0)

    def test_warm_start_keeps_state_and_refits_on_schedule(self):
        X, Y = rough_data(200)
        first = fitted(
            NystromGP(X[:160], Y[:160], seed=0, exact_max_n=0, max_dictionary_size=60)
        )
        state = first.sketch_state()
        self.assertEqual(state.num_fit_points, 160)
        # 10% more data: no refit, the hyperparameters are kept exactly, and the
        # dictionary comes from BKB's resampling of the old one (no BLESS).
        kept = NystromGP(
            X[:176],
            Y[:176],
            seed=0,
            exact_max_n=0,
            max_dictionary_size=60,
            warm_start=state,
        )
        with mock.patch.object(NystromGP, "_bless_indices", side_effect=AssertionError):
            fitted(kept)
        for key, value in state.hyperparameters.items():
            self.assertTrue(torch.equal(kept.state_dict()[key], value), key)
        self.assertEqual(kept.sketch_state().num_fit_points, 160)
        # Resampled at the previous draw's budget ridge, which it refines.
        self.assertTrue(kept.dictionary_capped)
        self.assertLessEqual(kept.dictionary_size, 60)
        self.assertGreater(kept.dictionary_size, 45)
        # 25% more data: a scheduled (bounded) refit.
        grown = fitted(
            NystromGP(
                X, Y, seed=0, exact_max_n=0, max_dictionary_size=60, warm_start=state
            )
        )
        self.assertEqual(grown.sketch_state().num_fit_points, 200)
        changed = any(
            not torch.equal(grown.state_dict()[k], v)
            for k, v in state.hyperparameters.items()
        )
        self.assertTrue(changed)

        # Drift: the same inputs with targets of another scale and shape.
        def drifted_fit(**options):
            return fitted(
                NystromGP(
                    X[:176],
                    5 * torch.cos(3 * Y[:176]),
                    seed=0,
                    exact_max_n=0,
                    max_dictionary_size=60,
                    outcome_transform=None,
                    warm_start=state,
                    **options,
                )
            )

        self.assertEqual(drifted_fit().sketch_state().num_fit_points, 176)
        # refit_tolerance=None: no drift check, the warm fit is kept.
        unchecked = drifted_fit(refit_tolerance=None)
        self.assertEqual(unchecked.sketch_state().num_fit_points, 160)

    def test_repeated_drift_refit_keeps_the_better_of_warm_and_cold_starts(self):
        """A drift-triggered refit right after another also fits from the
        construction values and keeps the lower objective; a first drift or a
        growth-triggered refit refits warm only."""
        X, Y = make_data(n=200, d=6)
        opts = dict(seed=0, exact_max_n=0, max_dictionary_size=60)
        good = fitted(NystromGP(X[:160], Y[:160], **opts)).sketch_state()
        # A warm start in a poor region (lengthscales near BoTorch's bound 0.025)
        # that one L-BFGS-B iteration cannot leave; fit_loss forces the drift.
        poor = NystromGP(X[:160], Y[:160], **opts)
        poor.load_state_dict(good.hyperparameters, strict=False)
        poor.covar_module.lengthscale = 0.026
        locked = replace(good, hyperparameters=hyperparameter_state(poor))

        def one_step(state=None):
            """One bounded refit from ``state`` (None: the construction values)."""
            model = NystromGP(X[:170], Y[:170], **opts)
            if state is not None:
                model.load_state_dict(state.hyperparameters, strict=False)
            _fit_hyperparameters(model, {}, max_iterations=1, scheduled=True)
            return _objective(model)

        def drift_refit(state, drift_refits):
            return fitted(
                NystromGP(
                    X[:170],
                    Y[:170],
                    refit_max_iterations=1,
                    warm_start=replace(
                        state, fit_loss=-10.0, drift_refits=drift_refits
                    ),
                    **opts,
                )
            )

        cold = one_step()
        # A first drift: warm only (the poor start stays poor); the count is kept.
        first = drift_refit(locked, 0)
        self.assertAlmostEqual(_objective(first), one_step(locked), places=10)
        self.assertEqual(first.sketch_state().drift_refits, 1)
        for state in (locked, good):
            model = drift_refit(state, 1)
            self.assertEqual(model.sketch_state().drift_refits, 2)
            warm = one_step(state)
            self.assertAlmostEqual(_objective(model), min(warm, cold), places=10)
            if state is locked:  # the cold start wins, far from the bound
                self.assertLess(cold, warm - 0.5)
                lengthscale = model.covar_module.lengthscale.detach()
                self.assertGreater(float(lengthscale.min()), 0.1)
            else:  # the fitted start wins
                self.assertLess(warm, cold)
        # Growth (200 >= 1.25 x 160) without a drift check: warm only, so the
        # poor start stays where it was.
        grown = fitted(
            NystromGP(
                X,
                Y,
                refit_max_iterations=1,
                warm_start=replace(locked, fit_loss=math.nan),
                **opts,
            )
        )
        self.assertLess(float(grown.covar_module.lengthscale.detach().max()), 0.1)
        self.assertEqual(grown.sketch_state().drift_refits, 0)
        self.assertEqual(
            SketchState.from_dict(
                json.loads(json.dumps(model.sketch_state().to_dict()))
            ).drift_refits,
            2,
        )

    def test_fit_max_iterations_bounds_a_first_fit(self):
        """A fit from the construction values stops after ``fit_max_iterations``
        L-BFGS-B iterations (unless the caller's optimizer options say otherwise)."""
        X, Y = make_data(n=120, d=3)
        iterations = []
        minimize = scipy.optimize.minimize

        def spy(*args, **kwargs):
            result = minimize(*args, **kwargs)
            iterations.append(result.nit)
            return result

        with mock.patch.object(scipy.optimize, "minimize", spy):
            bounded = fitted(NystromGP(X, Y, seed=0, fit_max_iterations=2))
            self.assertEqual(iterations, [2])
            free = fitted(NystromGP(X, Y, seed=0))
            self.assertGreater(iterations[-1], 2)
            model = NystromGP(X, Y, seed=0, fit_max_iterations=2)
            options = {"optimizer_kwargs": {"options": {"maxiter": 3}}}
            fit_gpytorch_mll(
                ExactMarginalLogLikelihood(model.likelihood, model),
                optimizer_kwargs=options["optimizer_kwargs"],
            )
            self.assertEqual(iterations[-1], 3)  # the caller's maxiter wins
        self.assertFalse(
            torch.allclose(
                bounded.covar_module.lengthscale, free.covar_module.lengthscale
            )
        )

    def test_fit_tolerance_is_lbfgsbs_ftol(self):
        """``fit_tolerance`` is L-BFGS-B's ``ftol``: a loose one stops after fewer
        iterations, ``1e-6`` ends near the tight fit's loss; the caller's
        ``ftol`` wins."""
        X, Y = make_data(n=120, d=3)
        seen = []
        minimize = scipy.optimize.minimize

        def spy(*args, **kwargs):
            result = minimize(*args, **kwargs)
            seen.append(((kwargs.get("options") or {}).get("ftol"), result.nit))
            return result

        with mock.patch.object(scipy.optimize, "minimize", spy):
            tight = fitted(NystromGP(X, Y, seed=0))
            fitted(NystromGP(X, Y, seed=0, fit_tolerance=1e-5))
            near = fitted(NystromGP(X, Y, seed=0, fit_tolerance=1e-6))
            self.assertEqual([ftol for ftol, _ in seen], [None, 1e-5, 1e-6])
            self.assertLess(seen[1][1], seen[0][1] / 2)
            model = NystromGP(X, Y, seed=0, fit_tolerance=1e-6)
            fit_gpytorch_mll(
                ExactMarginalLogLikelihood(model.likelihood, model),
                optimizer_kwargs={"options": {"ftol": 1e-3}},
            )
            self.assertEqual(seen[-1][0], 1e-3)
        self.assertLess(abs(float(near.exact_loss() - tight.exact_loss())), 1e-3)
        self.assertEqual(near.fit_tolerance, 1e-6)

    def test_refit_due_names_its_cause(self):
        """Growth, drift, or keep: the decision carries its cause as data."""
        X, Y = make_data(n=200, d=3)
        opts = dict(seed=0, exact_max_n=0, max_dictionary_size=60)
        state = fitted(NystromGP(X[:160], Y[:160], **opts)).sketch_state()

        def decide(n, fit_loss):
            model = NystromGP(X[:n], Y[:n], **opts)
            model.load_state_dict(state.hyperparameters, strict=False)
            return refit_due(model, replace(state, fit_loss=fit_loss))

        self.assertEqual(decide(200, state.fit_loss).cause, "growth")
        drift = decide(170, state.fit_loss - 1.0)
        self.assertEqual((drift.cause, drift.due), ("drift", True))
        self.assertIn("likelihood drifted", drift.message)
        kept = decide(170, state.fit_loss + 1.0)
        self.assertEqual((kept.cause, kept.due), (None, False))

    def test_warm_start_chain_is_reproducible_and_json_ready(self):
        X, Y = rough_data(240)

        def chain():
            state, models = None, []
            for n in (120, 150, 200, 240):
                model = fitted(
                    NystromGP(
                        X[:n],
                        Y[:n],
                        seed=3,
                        exact_max_n=0,
                        max_dictionary_size=50,
                        warm_start=state,
                    )
                )
                state = json.loads(json.dumps(model.sketch_state().to_dict()))
                models.append(model)
            return models

        for a, b in zip(chain(), chain(), strict=True):
            self.assertTrue(torch.equal(a.dictionary_indices, b.dictionary_indices))
            for (ka, va), (kb, vb) in zip(
                a.state_dict().items(), b.state_dict().items(), strict=True
            ):
                self.assertEqual(ka, kb)
                self.assertTrue(torch.equal(va, vb), ka)

    def test_bad_warm_start_and_schedule_options(self):
        X, Y = make_data()
        with self.assertRaisesRegex(ValueError, "warm_start lacks"):
            NystromGP(X, Y, warm_start={"hyperparameters": {}})
        for kwargs, match in [
            ({"refit_growth": -0.1}, "refit_growth"),
            ({"refit_tolerance": float("nan")}, "refit_tolerance"),
            ({"refit_max_iterations": 0}, "refit_max_iterations"),
            ({"exact_max_n": -1}, "exact_max_n"),
            ({"objective": "fitc"}, "objective"),
            ({"fit_tolerance": 0.0}, "fit_tolerance"),
        ]:
            with self.assertRaisesRegex(ValueError, match):
                NystromGP(X, Y, **kwargs)

    def test_sketch_state_forms_and_where_they_apply(self):
        X, Y = rough_data(150)
        model = fitted(NystromGP(X, Y, seed=0, exact_max_n=0, max_dictionary_size=40))
        state = model.sketch_state()
        compact = SketchState.from_dict(json.loads(json.dumps(state.to_dict())))
        full = SketchState.from_dict(state.to_dict(compact=False))
        self.assertIsNone(compact.dictionary_inputs)
        for s in (compact, full):
            self.assertTrue(torch.equal(s.dictionary_rows, model.dictionary_indices))
            for k, v in state.hyperparameters.items():
                self.assertTrue(torch.equal(s.hyperparameters[k], v), k)
        self.assertTrue(torch.equal(compact.dictionary_keys, state.dictionary_keys))
        self.assertEqual(compact.dictionary_keys.numel(), model.dictionary_size)
        perm = torch.randperm(150, generator=torch.Generator().manual_seed(4))
        shuffled = NystromGP(X[perm], Y[perm], seed=0, exact_max_n=0)
        # Reordered data: the inputs and the row keys locate the dictionary; the
        # row indices alone (a state without keys) do not.
        for s in (full, compact):
            located = shuffled._warm_dictionary(s)
            self.assertTrue(
                torch.equal(torch.sort(perm[located]).values, model.dictionary_indices)
            )
        legacy = replace(compact, dictionary_keys=None)
        self.assertEqual(shuffled._warm_dictionary(legacy).numel(), 0)
        # Extended data (a loop appends): the row indices are valid.
        extended = NystromGP(torch.cat([X, X[:5] + 0.5]), torch.cat([Y, Y[:5]]), seed=0)
        for s in (compact, legacy):
            self.assertTrue(
                torch.equal(extended._warm_dictionary(s), model.dictionary_indices)
            )
        # A row inserted in the middle (Ax: a trial completing after later ones)
        # shifts the rows after it: the keys still find every dictionary point.
        inserted = NystromGP(
            torch.cat([X[:70], X[:1] + 0.5, X[70:]]),
            torch.cat([Y[:70], Y[:1], Y[70:]]),
            seed=0,
        )
        shifted = model.dictionary_indices + (model.dictionary_indices >= 70).long()
        self.assertTrue(torch.equal(inserted._warm_dictionary(compact), shifted))
        self.assertEqual(inserted._warm_dictionary(legacy).numel(), 0)
        with self.assertRaisesRegex(ValueError, "row mask"):
            SketchState.from_dict({**state.to_dict(), "dictionary_rows": "garbage"})
        with self.assertRaisesRegex(ValueError, "dictionary_keys"):
            SketchState.from_dict({**state.to_dict(), "dictionary_keys": "a!b"})
        with self.assertRaisesRegex(ValueError, "dictionary_keys"):
            SketchState.from_dict({**state.to_dict(), "dictionary_keys": "AAA="})

    def test_warm_draws_are_coupled_across_calls(self):
        """A loop adding one point per call keeps most of its sketch (coupled
        uniforms), where fresh draws would swap most of a budget-bound one
        (measured: 2-14 of 60 points vs 64-83)."""
        X, Y = rough_data(220)
        opts = dict(seed=0, exact_max_n=0, max_dictionary_size=60)
        model = fitted(NystromGP(X[:200], Y[:200], **opts))
        coupled = []
        for n in range(201, 208):
            warm = fitted(
                NystromGP(X[:n], Y[:n], warm_start=model.sketch_state(), **opts)
            )
            before = set(model.dictionary_indices.tolist())
            coupled.append(len(before ^ set(warm.dictionary_indices.tolist())))
            model = warm
        fresh = []
        for _ in range(5):
            before = set(model.dictionary_indices.tolist())
            model.resample_dictionary()
            fresh.append(len(before ^ set(model.dictionary_indices.tolist())))
        # The first warm draw replaces BLESS's dictionary; later ones are coupled.
        self.assertLess(sum(coupled[1:]) / 6, 0.3 * sum(fresh) / 5)
