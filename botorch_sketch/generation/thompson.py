r"""Thompson sampling over large candidate sets without an ``A x A`` covariance.

BoTorch's ``MaxPosteriorSampling`` draws from the joint posterior over all ``A``
candidates, which needs an ``A x A`` covariance and its Cholesky factor
(``O(A^3)``). :class:`EmbeddingThompsonSampling` draws through the Nyström embedding
of a :class:`~botorch_sketch.models.NystromGP` instead (see
:meth:`NystromGP.sample_latent` for exactly what is sampled), in ``O(A m)`` time
and ``O(chunk m)`` memory, so ``A = 10^6`` candidates work on a CPU.
"""

from __future__ import annotations

import torch
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.generation.sampling import SamplingStrategy
from torch import Tensor

from botorch_sketch.models.nystrom import NystromGP


class EmbeddingThompsonSampling(SamplingStrategy):
    r"""Thompson sampling for :class:`NystromGP` over a finite candidate set.

    Example:
        >>> ts = EmbeddingThompsonSampling(model, seed=0)
        >>> X_next = ts(candidates, num_samples=4)  # 4 x d
    """

    def __init__(
        self,
        model: NystromGP,
        posterior_transform: ScalarizedPosteriorTransform | None = None,
        replacement: bool = True,
        seed: int | None = None,
        chunk_size: int = 16384,
    ) -> None:
        r"""Constructor.

        Args:
            model: A fitted single-batch :class:`NystromGP`.
            posterior_transform: Scalarization for a multi-output model (required
                if ``model.num_outputs > 1``); weights of ``-1`` minimize.
            replacement: If ``False``, the ``num_samples`` returned points are
                distinct (each sample's best candidate not already taken).
            seed: Seed of the sampler's ``torch.Generator``.
            chunk_size: Candidates per chunk.
        """
        super().__init__()
        if not isinstance(model, NystromGP):
            raise TypeError(
                "EmbeddingThompsonSampling needs a NystromGP, got "
                f"{type(model).__name__}."
            )
        if model.num_outputs > 1 and posterior_transform is None:
            raise ValueError("A multi-output model needs a posterior_transform.")
        self.model = model
        self.posterior_transform = posterior_transform
        self.replacement = replacement
        self.chunk_size = chunk_size
        self.generator = None if seed is None else torch.Generator().manual_seed(seed)

    def forward(self, X: Tensor, num_samples: int = 1) -> Tensor:
        r"""Return the maximizers of ``num_samples`` posterior samples.

        Args:
            X: ``A x d`` candidates.
            num_samples: Number of points to select.

        Returns:
            A ``num_samples x d`` tensor of candidates (rows of ``X``).
        """
        if X.dim() != 2 or X.shape[0] == 0:
            raise ValueError(
                f"X must be a non-empty A x d tensor, got {tuple(X.shape)}."
            )
        if not self.replacement and num_samples > X.shape[0]:
            raise ValueError(
                f"cannot draw {num_samples} distinct points from {X.shape[0]} "
                "candidates."
            )
        samples = self.model.sample_latent(
            X, num_samples, generator=self.generator, chunk_size=self.chunk_size
        )
        if self.posterior_transform is not None:
            w = self.posterior_transform.weights.to(samples)
            values = samples @ w + self.posterior_transform.offset
        else:
            values = samples.squeeze(-1)
        if self.replacement:
            idx = values.argmax(dim=-1)
        else:
            taken: list[int] = []
            for row in values:
                row = row.clone()
                if taken:
                    row[torch.tensor(taken, device=row.device)] = -torch.inf
                taken.append(int(row.argmax()))
            idx = torch.tensor(taken, device=X.device)
        return X[idx]
