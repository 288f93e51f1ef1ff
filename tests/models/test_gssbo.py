"""Tests for GradientSubsetGP: exactness, subset bookkeeping, BoTorch use, errors."""

from __future__ import annotations

from copy import deepcopy

import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
)
from botorch.utils.datasets import SupervisedDataset
from botorch.utils.testing import BotorchTestCase
from gpytorch.kernels import MaternKernel
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_sketch.gssbo.selection import SubsetReason
from botorch_sketch.models.gssbo import GradientSubsetGP

DT = torch.float64


def make_data(n=40, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = 4 * torch.rand(n, d, generator=g, dtype=DT) - 1
    y = torch.sin(2 * X).sum(-1, keepdim=True)
    return X, 3 * y + 5 + 0.05 * torch.randn(n, 1, generator=g, dtype=DT)


def fit(model):
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model.eval()


def matern(d):
    return get_covar_module_with_dim_scaled_prior(ard_num_dims=d, use_rbf_kernel=False)


def transforms(d=3):
    return dict(input_transform=Normalize(d), outcome_transform=Standardize(1))


class TestExactness(BotorchTestCase):
    def test_full_budget_equals_single_task_gp(self):
        X, Y = make_data(n=30)
        for kw in ({}, transforms()):
            for M in (30, 50):
                model = fit(
                    GradientSubsetGP(X, Y, subset_size=M, n_initial=5, **deepcopy(kw))
                )
                ref = fit(SingleTaskGP(X, Y, covar_module=matern(3), **deepcopy(kw)))
                self.assertIsInstance(model.covar_module, MaternKernel)
                self.assertEqual(model.covar_module.nu, 2.5)
                self.assertEqual(model.subset_indices.tolist(), list(range(30)))
                self.assertTrue(
                    (model.subset_reasons == SubsetReason.WITHIN_BUDGET).all()
                )
                self.assertIsNone(model.lml_gradients)
                Xt = 4 * torch.rand(5, 3, dtype=DT) - 1
                p, q = model.posterior(Xt), ref.posterior(Xt)
                self.assertAllClose(p.mean, q.mean, atol=1e-6, rtol=1e-6)
                self.assertAllClose(p.variance, q.variance, atol=1e-6, rtol=1e-6)

    def test_subset_model_is_single_task_gp_on_the_subset(self):
        X, Y = make_data(n=60)
        model = fit(GradientSubsetGP(X, Y, subset_size=20, n_initial=5, seed=0))
        idx = model.subset_indices
        self.assertAllClose(model.train_inputs[0], X[idx])
        ref = SingleTaskGP(X[idx], Y[idx], covar_module=matern(3))
        ref.load_state_dict(model.state_dict())
        Xt = torch.rand(4, 3, dtype=DT)
        self.assertAllClose(model.posterior(Xt).mean, ref.eval().posterior(Xt).mean)
        self.assertAllClose(model.full_train_X, X)
        self.assertAllClose(model.full_train_Y, Y)

    def test_gradients_at_pilot_hyperparameters(self):
        # With a fitted pilot, the stored gradients are Eq. 3 in the pilot's
        # (transformed) scale on all of D.
        X, Y = make_data(n=50)
        pilot = fit(SingleTaskGP(X, Y, covar_module=matern(3), **transforms()))
        model = GradientSubsetGP(
            X, Y, subset_size=20, n_initial=5, pilot=pilot, seed=0, **transforms()
        )
        with torch.no_grad():
            Xt = pilot.transform_inputs(X)
            Yt, _ = pilot.outcome_transform(Y)
            r = Yt.squeeze(-1) - pilot.mean_module(Xt)
            K = pilot.covar_module(Xt).to_dense() + pilot.likelihood.noise * torch.eye(
                50, dtype=DT
            )
        self.assertAllClose(model.lml_gradients, -torch.linalg.solve(K, r), atol=1e-8)
        # The same pilot given as a state_dict gives the same subset.
        again = GradientSubsetGP(
            X,
            Y,
            subset_size=20,
            n_initial=5,
            pilot=pilot.state_dict(),
            seed=0,
            **transforms(),
        )
        self.assertEqual(again.subset_indices.tolist(), model.subset_indices.tolist())

    def test_warm_start_takes_the_pilots_hyperparameters_not_its_transforms(self):
        X, Y = make_data(n=50)
        pilot = fit(GradientSubsetGP(X, Y, subset_size=20, n_initial=5, seed=0))
        Y2 = 2 * Y + 7  # other data: the transforms must be the new model's
        for source in (pilot, pilot.state_dict()):
            for n in (50, 15):  # with a selection, and with every point
                model = GradientSubsetGP(
                    X[:n],
                    Y2[:n],
                    subset_size=20,
                    n_initial=5,
                    pilot=source,
                    warm_start=True,
                    seed=1,
                )
                self.assertAllClose(
                    model.covar_module.lengthscale, pilot.covar_module.lengthscale
                )
                self.assertAllClose(model.likelihood.noise, pilot.likelihood.noise)
                idx = model.subset_indices
                self.assertAllClose(
                    model.outcome_transform.means.squeeze(), Y2[:n][idx].mean()
                )
        cold = GradientSubsetGP(X, Y2, subset_size=20, n_initial=5, pilot=pilot)
        self.assertFalse(
            torch.allclose(
                cold.covar_module.lengthscale, pilot.covar_module.lengthscale
            )
        )
        # Without a pilot there is nothing to start from: the default start.
        plain = GradientSubsetGP(X, Y2, subset_size=60, n_initial=5, warm_start=True)
        self.assertAllClose(
            plain.covar_module.lengthscale, cold.covar_module.lengthscale
        )
        # A pilot without the model's hyperparameters is refused, naming them.
        partial = {
            k: v for k, v in pilot.state_dict().items() if "lengthscale" not in k
        }
        with self.assertRaisesRegex(ValueError, "lengthscale"):
            GradientSubsetGP(
                X[:15],
                Y2[:15],
                subset_size=20,
                n_initial=5,
                pilot=partial,
                warm_start=True,
            )

    def test_fixed_noise(self):
        X, Y = make_data(n=40)
        Yvar = torch.full_like(Y, 0.01)
        model = fit(GradientSubsetGP(X, Y, Yvar, subset_size=15, n_initial=4, seed=1))
        self.assertAllClose(
            model.likelihood.noise,
            Yvar[model.subset_indices].squeeze(-1) / Y[model.subset_indices].std() ** 2,
        )


class TestSubset(BotorchTestCase):
    def test_forced_members_and_reasons(self):
        X, Y = make_data(n=45)
        for mode in ("vector", "scalar", "random"):
            model = GradientSubsetGP(
                X, Y, subset_size=18, n_initial=6, mode=mode, seed=3
            )
            idx = model.subset_indices.tolist()
            self.assertEqual(len(idx), 18)
            self.assertTrue(set(range(6)) | {44} <= set(idx))
            names = model.subset_reason_names
            self.assertEqual(names[:6], ["initial"] * 6)
            self.assertEqual(names[-1], "newest")
            free = "random" if mode == "random" else "selected"
            self.assertEqual(names[6:-1], [free] * 11)
            if mode == "random":  # RSSBO computes no gradients
                self.assertIsNone(model.lml_gradients)
            else:
                self.assertEqual(model.lml_gradients.shape, (45,))

    def test_seeded_selection_is_reproducible(self):
        X, Y = make_data(n=45)
        for mode in ("vector", "scalar", "random"):
            a = GradientSubsetGP(X, Y, subset_size=15, n_initial=3, mode=mode, seed=5)
            b = GradientSubsetGP(X, Y, subset_size=15, n_initial=3, mode=mode, seed=5)
            self.assertEqual(a.subset_indices.tolist(), b.subset_indices.tolist())
        subsets = {
            tuple(
                GradientSubsetGP(
                    X, Y, subset_size=15, n_initial=3, mode="random", seed=s
                ).subset_indices.tolist()
            )
            for s in range(4)
        }
        self.assertGreater(len(subsets), 1)

    def test_subset_gradient_method(self):
        X, Y = make_data(n=50)
        pilot = fit(GradientSubsetGP(X[:40], Y[:40], subset_size=15, n_initial=3))
        grads = {
            method: GradientSubsetGP(
                X, Y, subset_size=15, n_initial=3, pilot=pilot, gradient_method=method
            ).lml_gradients
            for method in ("subset", "exact")
        }
        self.assertFalse(torch.allclose(grads["subset"], grads["exact"]))
        # Members of the pilot subset P get the exact gradient of log p(y_P).
        P = pilot.subset_indices
        with torch.no_grad():
            Yt, _ = pilot.outcome_transform(Y[P])
            r = Yt.squeeze(-1) - pilot.mean_module(X[P])
            K = pilot.covar_module(X[P]).to_dense()
            K = K + pilot.likelihood.noise * torch.eye(15, dtype=DT)
        self.assertAllClose(grads["subset"][P], -torch.linalg.solve(K, r), atol=1e-8)


class TestBoTorchContract(BotorchTestCase):
    def test_fantasize_extends_the_subset(self):
        X, Y = make_data(n=30)
        model = fit(GradientSubsetGP(X, Y, subset_size=12, n_initial=3, seed=0))
        model.posterior(X[:2])  # gpytorch builds its caches on the first call
        fm = model.condition_on_observations(
            torch.rand(2, 3, dtype=DT), torch.rand(2, 1, dtype=DT)
        )
        self.assertEqual(fm.train_inputs[0].shape[-2], 14)

    def test_construct_inputs_passes_model_options(self):
        # What Ax does: construct_inputs with the model options, then the
        # constructor with Normalize(bounds) and no outcome transform.
        X, Y = make_data(n=30)
        ds = SupervisedDataset(X, Y, feature_names=["a", "b", "c"], outcome_names=["y"])
        inputs = GradientSubsetGP.construct_inputs(
            ds, subset_size=12, mode="scalar", n_initial=3, seed=0
        )
        bounds = torch.tensor([[-1.0] * 3, [3.0] * 3], dtype=DT)
        model = GradientSubsetGP(
            **inputs,
            input_transform=Normalize(3, bounds=bounds),
            outcome_transform=None,
        )
        fit(model)
        self.assertEqual(model.subset_indices.numel(), 12)
        self.assertEqual(model.mode, "scalar")
        self.assertFalse(hasattr(model, "outcome_transform"))
        self.assertTrue(torch.isfinite(model.posterior(X[:3]).mean).all())


class TestBadInput(BotorchTestCase):
    def test_errors(self):
        X, Y = make_data(n=30)
        with self.assertRaisesRegex(ValueError, "subset_size"):
            GradientSubsetGP(X, Y, subset_size=20, n_initial=20)
        with self.assertRaisesRegex(ValueError, "subset_size"):
            GradientSubsetGP(X, Y, subset_size=21, n_initial=20)
        Ynan = Y.clone()
        Ynan[3] = float("nan")
        with self.assertRaisesRegex(ValueError, "NaN"):
            GradientSubsetGP(X, Ynan, subset_size=10, n_initial=3)
        with self.assertRaisesRegex(ValueError, "empty"):
            GradientSubsetGP(X[:0], Y[:0], subset_size=10, n_initial=3)
        with self.assertRaisesRegex(ValueError, "mode"):
            GradientSubsetGP(X, Y, subset_size=10, n_initial=3, mode="gradmatch")
        with self.assertRaisesRegex(ValueError, "gradient_method"):
            GradientSubsetGP(X, Y, subset_size=10, n_initial=3, gradient_method="svd")
        with self.assertRaisesRegex(ValueError, "points"):
            GradientSubsetGP(X, Y[:20], subset_size=10, n_initial=3)
        with self.assertRaises(UnsupportedError):
            GradientSubsetGP(
                X.unsqueeze(0), Y.unsqueeze(0), subset_size=10, n_initial=3
            )
        with self.assertRaises(UnsupportedError):
            GradientSubsetGP(X, Y.repeat(1, 2), subset_size=10, n_initial=3)
        for n in (30, 5):  # with and without a selection
            with self.assertRaisesRegex(TypeError, "pilot"):
                GradientSubsetGP(X[:n], Y[:n], subset_size=10, n_initial=3, pilot=3.0)
        with self.assertRaisesRegex(ValueError, "pilot"):
            GradientSubsetGP(
                X, Y, subset_size=10, n_initial=3, pilot={"foo": torch.zeros(1)}
            )
