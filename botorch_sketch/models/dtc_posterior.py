r"""The DTC posterior of a sketched GP, as a base class of its model.

:class:`DTCPosteriorMixin` gives a BoTorch model whose training data live in
``_train_X`` (``batch_shape x (m) x n x d``, transformed) and ``_train_Y``
(``batch_shape x (m) x n``) and whose dictionary is ``inducing_points`` the DTC
posterior (BBKB Eqs. 1-3, see :mod:`botorch_sketch.linalg`): with
``z(x) = K_S^{+1/2} k_S(x)``, ``Z`` the embedded training inputs and
``A = I + Z^T N^{-1} Z``,

    mean(x)    = m(x) + z(x)^T A^{-1} Z^T N^{-1} (y - m(X))
    cov(x, x') = k(x, x') - z(x)^T z(x') + z(x)^T A^{-1} z(x'),

with its caches (rebuilt when data, dictionary or hyperparameters change), the
ridge leverage scores of the training points, BoTorch's ``posterior`` and
Thompson samples of the latent function at many candidates.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.exceptions.errors import UnsupportedError
from botorch.posteriors.gpytorch import GPyTorchPosterior
from botorch.posteriors.transformed import TransformedPosterior
from gpytorch.distributions import MultivariateNormal
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood
from torch import Tensor

from botorch_sketch import linalg
from botorch_sketch.models.nystrom_posterior import (
    DEFAULT_PATHWISE_FEATURES,
    cast_posterior,
    dtc_covariance,
    prior_feature_paths,
    same_key,
    sample_dtc_joint,
    sample_dtc_latent,
)
from botorch_sketch.models.validation import (
    check_batch_shape,
    check_finite,
    validate_candidates,
)

__all__ = ["DTCParts", "DTCPosteriorMixin"]


class DTCParts(NamedTuple):
    r"""Parts of a :class:`NystromGP`'s DTC posterior (:meth:`NystromGP.dtc_parts`)."""

    inducing_points: Tensor
    embedding_map: Tensor
    factor: linalg.DTCFactor


class DTCPosteriorMixin:
    r"""The DTC posterior and its caches (module docstring).

    List it before the BoTorch/GPyTorch bases: its ``__call__`` replaces
    ``Module.__call__`` (prior in training mode, DTC posterior in evaluation
    mode, as ``ExactGP.__call__``). The model sets ``_cache`` and
    ``_embedding_memo`` to ``None`` whenever its data change.
    """

    _train_X: Tensor
    _train_Y: Tensor
    _cache: dict[str, Any] | None
    _embedding_memo: tuple[Any, tuple[Tensor, Tensor, Tensor]] | None
    _input_batch_shape: torch.Size

    def _noise(self) -> Tensor:
        """``batch_shape x (m) x n`` noise variances of the training points."""
        return self.likelihood.noise.expand(self._train_Y.shape)

    def _embedding(self) -> tuple[Tensor, Tensor]:
        """Inducing points and the map ``W`` with ``z(x) = W^T k_S(x)``: the
        pseudo-inverse square root of ``K_S``, or, with every training point in
        the dictionary, a jittered Cholesky factor's inverse
        (:func:`~botorch_sketch.linalg.cholesky_embedding_map`, a fifth of the
        cost)."""
        S = self.inducing_points
        K_S = self.covar_module(S).to_dense()
        if self._uses_every_point():
            return S, linalg.cholesky_embedding_map(K_S)
        return S, linalg.nystrom_embedding_map(K_S)

    def _embed(self, X: Tensor, S: Tensor, W: Tensor) -> Tensor:
        r"""``z(X) = k(X, S) W``, ``batch_shape x n x r``, the ``n x |S|`` kernel
        block formed a chunk of rows at a time (:func:`~botorch_sketch.linalg.
        map_row_chunks`)."""
        return linalg.map_row_chunks(
            lambda Xc: self.covar_module(Xc, S).to_dense() @ W, X
        )

    def _train_embedding(self) -> tuple[Tensor, Tensor, Tensor]:
        r"""``(S, W, Z)`` of the training inputs for the current dictionary.

        Remembered for the current dictionary and hyperparameters (one
        ``O(n m r)`` product), so that the leverage scores of a warm start's draw
        and the posterior of an unchanged dictionary share it.
        """
        X = self._train_X
        data = torch.tensor([X.data_ptr(), X._version, *X.shape])
        key = (self.dictionary_indices, (data, *self._hyperparameter_key()))
        memo = self._embedding_memo
        if memo is not None and same_key(memo[0], key):
            return memo[1]
        with torch.no_grad():
            S, W = self._embedding()
            Z = self._embed(self._train_X, S, W)
        self._embedding_memo = (key, (S, W, Z))
        return S, W, Z

    def _hyperparameter_key(self) -> tuple[Tensor, ...]:
        return tuple(p.detach().clone() for p in self.parameters())

    def _posterior_cache(self) -> dict[str, Any]:
        """Posterior caches, rebuilt when data, dictionary or hyperparameters change.

        Unlike ``ExactGP``, which keeps its caches until ``train()`` is called, we
        compare the hyperparameters on every call (a few small tensors), so setting
        e.g. ``model.covar_module.lengthscale`` in eval mode is never served stale.

        Like gpytorch's test caches they are detached from the hyperparameters,
        but not from the training data when those carry gradients: a fantasy
        model's data depend on the fantasy points, and qKG / qNIPV differentiate
        through them. The embedding map of the (data-independent) dictionary is
        always built without gradients (an eigendecomposition's are unstable).

        With every training point in the dictionary (and no gradient through the
        data) the cache holds the exact GP's Cholesky factor
        (:func:`~botorch_sketch.linalg.exact_factor`, ``O(n^3 / 3)``): the mean,
        the posterior and the samplers solve against it (``n^2 q`` per ``q``
        points); the folded predictor ``[a | L^{-T}]``, one more ``O(n^3)``
        triangular inverse, is built only for the callers of
        :meth:`dtc_predictor` (BBKB's batch UCB). Without gradients
        the embedding map and the DTC factor are built on first use
        (:meth:`_factor_cache`): by the predictor of a dictionary of some points,
        and, with every point, only for the callers that need them
        (:meth:`dtc_parts`, :meth:`sample_latent`, the leverage scores).
        """
        current = [p.detach() for p in self.parameters()]  # compared, not copied
        if self._cache is not None and not all(
            torch.equal(a, b) for a, b in zip(current, self._cache["key"], strict=True)
        ):
            self._cache = None
        if self._cache is None:
            key = tuple(p.clone() for p in current)
            X, Y = self._train_X, self._train_Y
            data_grad = torch.is_grad_enabled() and (X.requires_grad or Y.requires_grad)
            cache: dict[str, Any] = dict.fromkeys(
                ("S", "W", "factor", "predictor", "exact")
            )
            cache["key"] = key
            if data_grad:
                with torch.no_grad():
                    S, W = self._embedding()
                Z = self._embed(X, S, W)
                factor = linalg.dtc_factor(Z, Y - self.mean_module(X), self._noise())
                # The folded predictor's eigendecomposition has no stable
                # gradient: keep the unfolded form when the data carry one.
                predictor = linalg.dtc_predictor(W, factor, fold=False)
                cache.update(S=S, W=W, factor=factor, predictor=predictor)
            elif self._uses_every_point():
                with torch.no_grad():
                    cache["S"] = X
                    cache["exact"] = linalg.exact_factor(
                        self.covar_module(X).to_dense(),
                        Y - self.mean_module(X),
                        self._noise(),
                    )
            self._cache = cache
        return self._cache

    def _uses_every_point(self) -> bool:
        """Whether the dictionary is every training point (the exact GP)."""
        return self.dictionary_indices.shape[-1] == self._train_X.shape[-2]

    @property
    def is_exact(self) -> bool:
        r"""Whether every training point is in the dictionary, so that the
        posterior is the exact GP's."""
        return self._uses_every_point()

    def _factor_cache(self) -> dict[str, Any]:
        """:meth:`_posterior_cache` with the dictionary ``S``, the embedding map
        ``W`` and the :class:`~botorch_sketch.linalg.DTCFactor` filled in (built
        here, without gradients, on first use)."""
        cache = self._posterior_cache()
        if cache["factor"] is None:
            with torch.no_grad():
                S, W, Z = self._train_embedding()
                X, Y = self._train_X, self._train_Y
                factor = linalg.dtc_factor(Z, Y - self.mean_module(X), self._noise())
            cache.update(S=S, W=W, factor=factor)
        return cache

    def _predictor(self) -> linalg.DTCPredictor:
        cache = self._posterior_cache()
        if cache["predictor"] is None:
            if cache["exact"] is not None:
                predictor = linalg.exact_predictor_from_factor(cache["exact"])
            else:
                cache = self._factor_cache()
                predictor = linalg.dtc_predictor(cache["W"], cache["factor"])
            cache["predictor"] = predictor
        return cache["predictor"]

    def _exact_factor(self) -> linalg.ExactFactor | None:
        r"""The cached :class:`~botorch_sketch.linalg.ExactFactor` of an exact
        model whose posterior is served from it (an unbatched factor, no
        predictor built yet); ``None`` otherwise."""
        cache = self._posterior_cache()
        exact = cache["exact"]
        if exact is None or cache["predictor"] is not None or exact.chol.dim() > 2:
            return None
        return exact

    def dtc_predictor(self) -> linalg.DTCPredictor:
        r"""The posterior's :class:`~botorch_sketch.linalg.DTCPredictor`, built on
        first use (folded unless the training data carry gradients)."""
        return self._predictor()

    def posterior_inducing_points(self) -> Tensor:
        r"""The points the posterior's predictor (:meth:`dtc_predictor`) is
        expressed on: ``|S| x d`` transformed inputs, the dictionary (every
        training point for the exact predictor)."""
        if self._posterior_cache()["S"] is None:
            self._predictor()
        return self._posterior_cache()["S"]

    def dtc_parts(self) -> DTCParts:
        r"""The current DTC posterior's parts: dictionary points ``S``
        (``|S| x d``, transformed space), embedding map ``W`` (``|S| x r``) and the
        :class:`~botorch_sketch.linalg.DTCFactor` of the data.

        The returned objects are rebuilt (new identities) whenever the data, the
        dictionary or the hyperparameters change, so ``parts.factor is old.factor``
        tells a caller that its derived caches are still valid.
        """
        cache = self._factor_cache()
        return DTCParts(cache["S"], cache["W"], cache["factor"])

    def __call__(self, X: Tensor, *args: Any, **kwargs: Any) -> MultivariateNormal:
        r"""Prior in training mode, DTC posterior of the latent function in eval mode.

        This mirrors ``ExactGP.__call__``, which BoTorch's ``posterior`` relies on.
        ``X`` is transformed and in the output-augmented batch layout.
        """
        if self.training:
            return self.forward(X)
        if X.dtype == self._compute_dtype:
            return self._dtc_mvn(X)
        mvn = self._dtc_mvn(X.to(self._compute_dtype))  # e.g. float32 inputs
        return MultivariateNormal(mvn.mean.to(X), mvn.lazy_covariance_matrix.to(X))

    def forward(self, X: Tensor) -> MultivariateNormal:
        r"""The GP prior at ``X`` (``batch_shape x (m) x q x d``)."""
        return MultivariateNormal(self.mean_module(X), self.covar_module(X))

    def _dtc_mvn(self, X: Tensor) -> MultivariateNormal:
        r"""The DTC posterior at ``X``, ``cov = K_XX - Z Z^T + U U^T``.

        Lazy for ``q >= LAZY_COVARIANCE_MIN_POINTS`` points, dense below
        (:func:`~botorch_sketch.models.nystrom_posterior.dtc_covariance`).
        """
        mean, P, N = self._dtc_mean_and_factors(X)
        cov = dtc_covariance(self.covar_module(X), P, N)
        return MultivariateNormal(mean.expand(cov.shape[:-1]), cov)

    def _dtc_mean_and_factors(self, X: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        r"""The DTC posterior mean at transformed ``X`` (``... x q``) and the
        factors ``P``, ``N`` of its covariance ``K_XX - P P^T + N N^T``
        (:func:`~botorch_sketch.linalg.dtc_features`)."""
        S = self.posterior_inducing_points()
        K_XS = self.covar_module(X, S).to_dense()
        exact = self._exact_factor()
        if exact is not None:
            offset, P = linalg.exact_features(exact, K_XS)
            return self.mean_module(X) + offset, P, P[..., :0]
        offset, P, N = linalg.dtc_features(self._predictor(), K_XS)
        return self.mean_module(X) + offset, P, N

    def _rls_at(self, X: Tensor, ridge: float | None = None) -> Tensor:
        """DTC variance over the ridge at transformed inputs (aug batch layout).

        ``ridge = None``: the model's noise (a fixed-noise likelihood's training
        noise at the training points, its mean elsewhere).
        """
        if ridge is None:
            cache = self._factor_cache()
            S, W, factor = cache["S"], cache["W"], cache["factor"]
            # The training inputs' embedding is the memo's (no second n x r block).
            Z = (
                self._train_embedding()[2]
                if X is self._train_X
                else self._embed(X, S, W)
            )
            noise = self.likelihood.noise
            if isinstance(self.likelihood, FixedNoiseGaussianLikelihood):
                same = X.shape == self._train_X.shape and torch.equal(X, self._train_X)
                noise = noise if same else noise.mean(-1, keepdim=True)
        else:
            # Only the embedding is shared with the posterior (kept in a memo for
            # it, see _posterior_cache): the factor is the ridge's.
            S, W, Z_train = self._train_embedding()
            Z = Z_train if X is self._train_X else self._embed(X, S, W)
            noise = torch.full_like(self._noise(), ridge)
            factor = linalg.dtc_factor(Z_train, torch.zeros_like(noise), noise)
            noise = noise[..., :1]
        var = linalg.dtc_variance(factor, Z, self.covar_module(X, diag=True))
        return linalg.rls_units(var, noise)

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: PosteriorTransform | None = None,
        **kwargs: Any,
    ) -> GPyTorchPosterior | TransformedPosterior:
        r"""DTC posterior over ``batch_shape x q x m`` outputs at ``X``.

        Args:
            X: ``batch_shape x q x d`` inputs (any float dtype; computed in float64).
            output_indices: Subset of outputs.
            observation_noise: Add the likelihood noise (``True``) or the given
                ``batch_shape x q x m`` noise tensor.
            posterior_transform: Optional posterior transform.

        Returns:
            A ``GPyTorchPosterior`` with the joint DTC covariance, computed in
            :attr:`compute_dtype` and returned in :attr:`data_dtype`.
        """
        self._check_test_inputs(X)
        if output_indices is not None and len(output_indices) == 1 < self.num_outputs:
            # BoTorch's batched multi-output posterior cannot build a one-task
            # MultitaskMultivariateNormal; a single output is a single-output model.
            return self.subset_output(list(output_indices)).posterior(
                X,
                observation_noise=observation_noise,
                posterior_transform=posterior_transform,
            )
        if torch.is_tensor(observation_noise):
            observation_noise = observation_noise.to(self._compute_dtype)
        posterior = super().posterior(
            X.to(self._compute_dtype),
            output_indices=output_indices,
            observation_noise=observation_noise,
        )
        posterior = cast_posterior(posterior, self.data_dtype)
        if posterior_transform is not None:
            return posterior_transform(posterior)
        return posterior

    def _check_test_inputs(self, X: Tensor) -> None:
        r"""``X`` is finite, ``batch_shape x q x d`` with the model's ``d`` and a
        batch shape that broadcasts with the model's."""
        check_finite(X, "X")
        if X.dim() < 2 or X.shape[-1] != self.input_dim:
            raise ValueError(
                f"X must be batch_shape x q x d with d = "
                f"{self.input_dim}, got {tuple(X.shape)}."
            )
        check_batch_shape(X, self._input_batch_shape)

    def posterior_mean(self, X: Tensor) -> Tensor:
        r"""The posterior mean at ``X`` alone, without gradients.

        ``mean(x) = m(x) + a^T k_S(x)`` (:class:`~botorch_sketch.linalg.
        DTCPredictor`): one ``q x |S|`` kernel block times the predictor's first
        column, where :meth:`posterior` also forms the ``q x |S| x r`` products of
        the covariance's factors. Equals ``posterior(X).mean``; for scoring many
        points (e.g. basins of the mean).

        Args:
            X: ``batch_shape x q x d`` inputs (untransformed).

        Returns:
            A ``batch_shape x q x m`` tensor in the original outcome space and
            the data's dtype.
        """
        self._check_test_inputs(X)
        self.eval()
        with torch.no_grad():
            Xt = self.transform_inputs(X.to(self._compute_dtype))
            if self.num_outputs > 1:
                Xt = Xt.unsqueeze(-3)  # the outputs as a batch dimension
            S = self.posterior_inducing_points()
            exact = self._posterior_cache()["exact"]
            if exact is not None:
                weights = exact.coef.unsqueeze(-1)  # a: ... x n x 1
            else:
                weights = self._predictor().basis[..., :1]  # a: ... x |S| x 1
            kernel = self.covar_module(Xt, S).to_dense()
            mean = self.mean_module(Xt) + (kernel @ weights).squeeze(-1)
            if self.num_outputs > 1:
                mean = mean.transpose(-1, -2)
            else:
                mean = mean.unsqueeze(-1)
            if hasattr(self, "outcome_transform"):
                mean, _ = self.outcome_transform.untransform(mean)
        return mean.to(self.data_dtype)

    def _prepare_sampling(self, X: Tensor, num_samples: int, name: str) -> None:
        r"""Checks of a sampler's arguments (unbatched model, ``A x d`` finite
        candidates, ``num_samples >= 1``); the model in eval mode."""
        if len(self._input_batch_shape) > 0:
            raise UnsupportedError(f"{name} supports unbatched models only.")
        validate_candidates(X, self.input_dim, num_samples)
        self.eval()

    def _untransformed_samples(self, samples: Tensor) -> Tensor:
        r"""``num_samples x A x m`` samples in the original outcome space and the
        data's dtype."""
        if hasattr(self, "outcome_transform"):
            samples, _ = self.outcome_transform.untransform(samples)
        return samples.to(self.data_dtype)

    def sample_joint(
        self,
        X: Tensor,
        num_samples: int,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        r"""Exact joint posterior samples of the latent function at ``A`` points.

        The samples of ``posterior(X).rsample``, i.e. of the DTC posterior
        ``N(mu, K_XX - P P^T + N N^T)`` (the exact GP's with every point in the
        dictionary), at a lower cost for large ``A``: the ``A x A`` covariance's
        lower triangle is formed in place and factored once
        (:func:`~botorch_sketch.models.nystrom_posterior.sample_dtc_joint`,
        ``O(A^2 r + A^3 / 3)``). For candidate sets too large for an ``A x A``
        matrix use :meth:`sample_latent`.

        Args:
            X: ``A x d`` points (untransformed; not for batched models).
            num_samples: Number of joint samples.
            generator: Optional ``torch.Generator`` (CPU).

        Returns:
            A ``num_samples x A x m`` tensor in the original outcome space.
        """
        self._prepare_sampling(X, num_samples, "sample_joint")
        with torch.no_grad():
            Xt = self.transform_inputs(X.to(self._compute_dtype))
            if self.num_outputs > 1:
                Xt = Xt.unsqueeze(0).expand(self.num_outputs, *Xt.shape)
            mean, P, N = self._dtc_mean_and_factors(Xt)
            samples = sample_dtc_joint(
                mean,
                self.covar_module(Xt).to_dense(),
                P,
                N,
                num_samples,
                generator=generator,
                overwrite_K=True,
            )  # num_samples x (m) x A
            if self.num_outputs > 1:
                samples = samples.transpose(-1, -2)
            else:
                samples = samples.unsqueeze(-1)
            return self._untransformed_samples(samples)

    def sample_pathwise(
        self,
        X: Tensor,
        num_samples: int,
        generator: torch.Generator | None = None,
        num_features: int = DEFAULT_PATHWISE_FEATURES,
    ) -> Tensor:
        r"""Posterior samples of the latent function by Matheron's rule, ``O(A n)``.

        With every training point in the dictionary (the exact GP), a posterior
        sample is a prior sample updated by the data (Wilson et al., ICML 2020,
        Eq. 13; BoTorch's ``draw_matheron_paths`` for ``ExactGP``):

            f(x) = m(x) + f0(x) + k_X(x)^T C^{-1} (y - m(X) - f0(X) - eps),

        ``C = K_XX + N``, ``eps ~ N(0, N)``, and ``f0`` a prior draw from
        ``num_features`` random Fourier features of the kernel (Rahimi & Recht,
        2007; BoTorch's ``gen_kernel_features``). ``C^{-1} = P P^T`` comes from
        the cached exact predictor, so ``A`` candidates cost one ``A x n`` kernel
        block and ``A x F`` features, where :meth:`sample_joint` factors an
        ``A x A`` matrix. The update is exact; the prior's covariance is
        approximated with an ``O(1 / sqrt(F))`` entrywise error.

        Args:
            X: ``A x d`` points (untransformed; not for batched models).
            num_samples: Number of samples (paths).
            generator: Optional ``torch.Generator`` (CPU) of the features, their
                weights and ``eps``.
            num_features: Number ``F`` of random Fourier features (even).

        Returns:
            A ``num_samples x A x 1`` tensor in the original outcome space.
        """
        self._prepare_sampling(X, num_samples, "sample_pathwise")
        if self.num_outputs > 1 or not self._uses_every_point():
            raise UnsupportedError(
                "sample_pathwise needs a single-output model with every training "
                "point in its dictionary (the exact GP); use sample_joint."
            )
        dtype, X_train = self._compute_dtype, self._train_X
        with torch.no_grad():
            Xt = self.transform_inputs(X.to(dtype))
            residual_y = self._train_Y - self.mean_module(X_train)
            paths = prior_feature_paths(
                self.covar_module, X.shape[-1], num_samples, num_features, generator
            )
            f0_train = paths(X_train)  # n x k
            eps = torch.randn(*f0_train.shape, generator=generator, dtype=dtype)
            eps = eps.to(f0_train.device) * self._noise().sqrt().unsqueeze(-1)
            rhs = residual_y.unsqueeze(-1) - f0_train - eps
            exact = self._posterior_cache()["exact"]
            if exact is not None:
                weights = torch.cholesky_solve(rhs, exact.chol)
            else:
                P = self._predictor().basis[..., 1:]  # C^{-1} = P P^T
                weights = P @ (P.mT @ rhs)
            # A x k, a chunk of candidates at a time (A x n and A x F blocks).
            samples = linalg.map_row_chunks(
                lambda Xc: (
                    self.mean_module(Xc).unsqueeze(-1)
                    + paths(Xc)
                    + self.covar_module(Xc, X_train).to_dense() @ weights
                ),
                Xt,
            )
            return self._untransformed_samples(samples.mT.unsqueeze(-1))

    def sample_latent(
        self,
        X: Tensor,
        num_samples: int,
        generator: torch.Generator | None = None,
        chunk_size: int = 16384,
    ) -> Tensor:
        r"""Posterior samples of the latent function at many candidates, ``O(A m)``.

        Thompson sampling over a large candidate set must not build the ``A x A``
        joint covariance. We sample

            f(x) = mean(x) + (L^{-1} z(x))^T eps + sqrt(k(x,x) - ||z(x)||^2) xi(x)

        (:func:`~botorch_sketch.models.nystrom_posterior.sample_dtc_latent`): exact
        on every marginal and on the low-rank (learned) part of the correlation,
        the Nyström residual's correlations dropped, so not the exact DTC joint.
        Candidates are processed in chunks, so memory is ``O(chunk_size m)``.

        Args:
            X: ``A x d`` candidates (untransformed; not for batched models).
            num_samples: Number of joint samples.
            generator: Optional ``torch.Generator``.
            chunk_size: Candidates per chunk.

        Returns:
            A ``num_samples x A x m`` tensor in the original outcome space.
        """
        self._prepare_sampling(X, num_samples, "sample_latent")
        cache = self._factor_cache()
        with torch.no_grad():
            samples = sample_dtc_latent(
                self.transform_inputs(X.to(self._compute_dtype)),
                cache["factor"],
                lambda Xc: self._embed(Xc, cache["S"], cache["W"]),
                self.mean_module,
                self.covar_module,
                self.num_outputs,
                num_samples,
                generator=generator,
                chunk_size=chunk_size,
            )
            return self._untransformed_samples(samples)
