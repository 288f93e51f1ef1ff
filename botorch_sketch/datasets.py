"""Loaders for the two finite-candidate-set benchmarks of the BBKB paper.

The BBKB paper (Calandriello et al., ICML 2020, Sec. 5) runs Bayesian optimization
over two finite candidate sets built from regression data sets:

* **Abalone** (UCI; Nash et al., 1994): A = 4177 points, d = 8 features (``Sex``
  coded as one numeric feature plus 7 physical measurements), target ``Rings``.
* **Cadata** (California housing; Pace & Barry, 1997; StatLib ``cal_housing``):
  A = 20640 points, d = 8 features, target ``median_house_value``.

The files are gzipped CSVs with one header row (``abalone.csv.gz`` and
``cal_housing.csv.gz``). They are looked up in a data directory (see
:func:`find_data_dir`) and the SHA-256 of each decompressed CSV is verified before
parsing. The machines this package is developed on have no internet access, so
nothing is downloaded; users with access can fetch the files from UCI / StatLib.

The paper rescales the target to [0, 1] and observes it with Gaussian noise of
standard deviation 0.01; :func:`rescale_target` does the rescaling. The paper does
not say how the features were scaled. **Our choice is per-column standardization**
(zero mean, unit standard deviation), done by :func:`standardize_features`.

Only the standard library (``gzip``, ``csv``, ``hashlib``) and ``torch`` are used,
so importing this module does not require pandas.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import logging
import os
import pathlib

import torch
from torch import Tensor

__all__ = [
    "ABALONE_FEATURES",
    "ABALONE_FILE",
    "ABALONE_SEX_CODING",
    "ABALONE_SHA256",
    "ABALONE_TARGET",
    "CADATA_FEATURES",
    "CADATA_FILE",
    "CADATA_SHA256",
    "CADATA_TARGET",
    "DATA_DIR_ENV_VAR",
    "categorical_library",
    "find_data_dir",
    "load_abalone",
    "load_cadata",
    "rescale_target",
    "standardize_features",
]

logger = logging.getLogger(__name__)

#: Environment variable that overrides the default data directory.
DATA_DIR_ENV_VAR = "BOTORCH_SKETCH_DATA"

#: File names inside the data directory.
ABALONE_FILE = "abalone.csv.gz"
CADATA_FILE = "cal_housing.csv.gz"

#: SHA-256 of the *decompressed* CSVs (from ``shared/data/README.md``).
ABALONE_SHA256 = "add76d88a9dd9c7a9f147dd005725ce19dbfdf352877df9d28703486742d35a2"
CADATA_SHA256 = "534365b6c3c9b07c2b7d88e0ff9f1b41725d8b799748f5c0b80e1067f51c8ab3"

#: Feature columns (in the order of the returned ``X``) and target column.
ABALONE_FEATURES: tuple[str, ...] = (
    "Sex",
    "Length",
    "Diameter",
    "Height",
    "Whole_weight",
    "Shucked_weight",
    "Viscera_weight",
    "Shell_weight",
)
ABALONE_TARGET = "Rings"
CADATA_FEATURES: tuple[str, ...] = (
    "longitude",
    "latitude",
    "housing_median_age",
    "total_rooms",
    "total_bedrooms",
    "population",
    "households",
    "median_income",
)
CADATA_TARGET = "median_house_value"

#: Numeric coding of Abalone's ``Sex`` column: M=1, F=2, I=3 (infant). This is
#: the coding of the LIBSVM ``abalone`` regression file, the d = 8 version of the
#: data set that is most likely what the paper used (it names the other set by
#: its LIBSVM name, "cadata").
ABALONE_SEX_CODING: dict[str, float] = {"M": 1.0, "F": 2.0, "I": 3.0}

#: Repository root (the parent of the package directory). Module-level so that
#: tests can monkeypatch it.
_REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _candidate_dirs() -> list[pathlib.Path]:
    """Default data directories, in lookup order (no argument, no env var)."""
    return [
        _REPO_ROOT.parent / "shared" / "data",
        pathlib.Path.cwd() / "shared" / "data",
    ]


def find_data_dir(data_dir: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """Locate the directory holding the data files.

    Lookup order:

    1. ``data_dir`` if given (it must exist; there is no fallback);
    2. the environment variable ``BOTORCH_SKETCH_DATA`` if set and non-empty (it
       must exist; there is no fallback);
    3. ``<repo root>/../shared/data``, where the repo root is the parent of the
       ``botorch_sketch`` package directory;
    4. ``./shared/data`` relative to the current working directory.

    Args:
        data_dir: Explicit data directory, or ``None`` to search.

    Returns:
        The resolved data directory.

    Raises:
        FileNotFoundError: If no existing directory is found; the message lists
            every place that was looked at.
    """
    if data_dir is not None:
        path = pathlib.Path(data_dir).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"Data directory not found: {path}")
        return path.resolve()

    env = os.environ.get(DATA_DIR_ENV_VAR)
    if env:
        path = pathlib.Path(env).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(
                f"Data directory from ${DATA_DIR_ENV_VAR} not found: {path}"
            )
        return path.resolve()

    candidates = _candidate_dirs()
    for path in candidates:
        if path.is_dir():
            logger.debug("Using data directory %s", path)
            return path.resolve()
    looked = ", ".join(str(p) for p in candidates)
    raise FileNotFoundError(
        f"No data directory found. Pass data_dir, set ${DATA_DIR_ENV_VAR}, or place "
        f"the files in one of: {looked}"
    )


def _read_verified_csv(
    path: pathlib.Path, sha256: str
) -> tuple[list[str], list[list[str]]]:
    """Decompress a gzipped CSV, verify its checksum and split it into rows.

    Args:
        path: Path of the ``.csv.gz`` file.
        sha256: Expected hex SHA-256 of the decompressed bytes.

    Returns:
        The header (list of column names) and the data rows (lists of strings).

    Raises:
        FileNotFoundError: If ``path`` does not exist (the message names it).
        ValueError: If the file is not valid gzip or the checksum does not match
            (the message names the file).
    """
    if not path.is_file():
        raise FileNotFoundError(f"Data file not found: {path}")
    try:
        with gzip.open(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as err:  # gzip.BadGzipFile is an OSError
        raise ValueError(f"Could not decompress data file {path}: {err}") from err
    digest = hashlib.sha256(raw).hexdigest()
    if digest != sha256:
        raise ValueError(
            f"Checksum mismatch for data file {path}: expected sha256 {sha256}, "
            f"got {digest}. The file is corrupted or a different version."
        )
    logger.debug("Verified sha256 of %s", path)
    reader = csv.reader(io.StringIO(raw.decode("utf-8")))
    header = next(reader)
    rows = [row for row in reader if row]
    return header, rows


def _check_float_dtype(dtype: torch.dtype) -> None:
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")


def load_abalone(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    dtype: torch.dtype = torch.float64,
) -> tuple[Tensor, Tensor]:
    """Load the UCI Abalone data set (4177 rows) as raw, unscaled tensors.

    ``Sex`` is coded as a single numeric feature (column 0 of ``X``) with
    ``M=1, F=2, I=3`` (see :data:`ABALONE_SEX_CODING`), matching the LIBSVM
    ``abalone`` file so that d = 8 as in the paper. Any such coding is an
    arbitrary ordering of a nominal variable; after standardization a different
    choice of three distinct values only changes the relative distances between
    the three groups. The remaining 7 columns are the physical measurements in
    file order (:data:`ABALONE_FEATURES`).

    Args:
        data_dir: Data directory; see :func:`find_data_dir`.
        dtype: Floating-point dtype of the returned tensors.

    Returns:
        ``X`` of shape ``(4177, 8)`` and ``y`` of shape ``(4177,)`` (``Rings``).

    Raises:
        FileNotFoundError: If the directory or ``abalone.csv.gz`` is missing.
        ValueError: If the checksum does not match, or ``dtype`` is not floating.
    """
    _check_float_dtype(dtype)
    path = find_data_dir(data_dir) / ABALONE_FILE
    header, rows = _read_verified_csv(path, ABALONE_SHA256)
    if tuple(header) != (*ABALONE_FEATURES, ABALONE_TARGET):
        raise ValueError(f"Unexpected header in data file {path}: {header}")
    values = [
        [ABALONE_SEX_CODING[row[0]], *(float(v) for v in row[1:])] for row in rows
    ]
    data = torch.tensor(values, dtype=dtype)
    logger.info("Loaded Abalone from %s: %d rows", path, data.shape[0])
    return data[:, :-1].contiguous(), data[:, -1].contiguous()


def load_cadata(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    dtype: torch.dtype = torch.float64,
) -> tuple[Tensor, Tensor]:
    """Load the California housing ("cadata") data set as raw, unscaled tensors.

    Features are in file order (:data:`CADATA_FEATURES`: longitude, latitude,
    housing_median_age, total_rooms, total_bedrooms, population, households,
    median_income). LIBSVM's ``cadata`` lists the same 8 features in a different
    order, which does not matter for the (permutation-invariant) kernels used here.

    Args:
        data_dir: Data directory; see :func:`find_data_dir`.
        dtype: Floating-point dtype of the returned tensors.

    Returns:
        ``X`` of shape ``(20640, 8)`` and ``y`` of shape ``(20640,)``
        (``median_house_value``).

    Raises:
        FileNotFoundError: If the directory or ``cal_housing.csv.gz`` is missing.
        ValueError: If the checksum does not match, or ``dtype`` is not floating.
    """
    _check_float_dtype(dtype)
    path = find_data_dir(data_dir) / CADATA_FILE
    header, rows = _read_verified_csv(path, CADATA_SHA256)
    if tuple(header) != (*CADATA_FEATURES, CADATA_TARGET):
        raise ValueError(f"Unexpected header in data file {path}: {header}")
    data = torch.tensor([[float(v) for v in row] for row in rows], dtype=dtype)
    logger.info("Loaded cadata from %s: %d rows", path, data.shape[0])
    return data[:, :-1].contiguous(), data[:, -1].contiguous()


def standardize_features(X: Tensor) -> Tensor:
    """Standardize each column to zero mean and unit standard deviation.

    This is our feature scaling for the BBKB experiments (the paper does not say
    how it scaled features). The standard deviation is the population one
    (``correction=0``, as in scikit-learn's ``StandardScaler``). Columns whose
    values are all equal are mapped to exactly 0. Batched inputs are standardized
    independently per batch over the ``n`` dimension.

    Args:
        X: Floating-point tensor of shape ``(n, d)`` or ``(..., n, d)``.

    Returns:
        A new tensor of the same shape and dtype; ``X`` is not modified.

    Raises:
        ValueError: If ``X`` has fewer than 2 dimensions, no rows, or is not
            floating point.
    """
    if X.ndim < 2 or X.shape[-2] == 0:
        raise ValueError(f"X must have shape (..., n, d) with n >= 1, got {X.shape}")
    if not X.is_floating_point():
        raise ValueError(f"X must be floating point, got {X.dtype}")
    centered = X - X.mean(dim=-2, keepdim=True)
    std = X.std(dim=-2, keepdim=True, correction=0)
    constant = X.amax(dim=-2, keepdim=True) == X.amin(dim=-2, keepdim=True)
    safe_std = torch.where(constant, torch.ones_like(std), std)
    return torch.where(constant, torch.zeros_like(centered), centered / safe_std)


def rescale_target(y: Tensor) -> Tensor:
    """Min-max rescale targets to [0, 1], as in the BBKB paper's experiments.

    The minimum maps to 0 and the maximum to 1. A constant ``y`` maps to all
    zeros. Batched inputs are rescaled independently over the last dimension.

    Args:
        y: Floating-point tensor of shape ``(n,)`` or ``(..., n)``.

    Returns:
        A new tensor of the same shape and dtype with values in [0, 1]; ``y`` is
        not modified.

    Raises:
        ValueError: If ``y`` is 0-dimensional, empty, or not floating point.
    """
    if y.ndim < 1 or y.shape[-1] == 0:
        raise ValueError(f"y must have shape (..., n) with n >= 1, got {y.shape}")
    if not y.is_floating_point():
        raise ValueError(f"y must be floating point, got {y.dtype}")
    lo = y.amin(dim=-1, keepdim=True)
    span = y.amax(dim=-1, keepdim=True) - lo
    constant = span == 0
    safe_span = torch.where(constant, torch.ones_like(span), span)
    return torch.where(constant, torch.zeros_like(y), (y - lo) / safe_span)


def categorical_library(
    num_inputs: int = 6,
    num_levels: int = 5,
    seed: int = 0,
    interaction_scale: float = 0.5,
    dtype: torch.dtype = torch.float64,
) -> tuple[Tensor, Tensor]:
    r"""A synthetic categorical library: every combination of ``num_inputs`` choices.

    Arms are the ``num_levels ** num_inputs`` combinations, one-hot encoded (one
    block of ``num_levels`` columns per input) and scaled to unit norm (each row has
    ``num_inputs`` entries ``1 / sqrt(num_inputs)``), the encoding a user brings to a
    kernel method for a library of discrete choices. The reward is a smooth
    function of the choices, main effects plus pairwise interactions,

        f(a) = sum_i theta_i[a_i] + interaction_scale sum_{i<j} phi_ij[a_i, a_j],

    with standard normal ``theta`` and ``phi`` drawn from ``seed``, rescaled to
    ``[0, 1]`` (:func:`rescale_target`). With an RBF kernel of lengthscale ~1 on
    this encoding the effective dimension is large: used by the BBKB benchmarks for
    the regime where the dictionary grows with ``t``.

    Args:
        num_inputs: Number of categorical inputs (``>= 1``).
        num_levels: Levels per input (``>= 2``).
        seed: Seed of the reward function.
        interaction_scale: Weight of the pairwise interactions.
        dtype: Floating dtype of the outputs.

    Returns:
        ``(arms, f)`` of shapes ``A x (num_inputs num_levels)`` and ``A``, with
        ``A = num_levels ** num_inputs`` (arm ``a`` has level ``(a // L^i) % L`` for
        input ``i``).
    """
    if num_inputs < 1 or num_levels < 2:
        raise ValueError(
            f"need num_inputs >= 1 and num_levels >= 2, got {num_inputs}, {num_levels}."
        )
    _check_float_dtype(dtype)
    A = num_levels**num_inputs
    idx = torch.arange(A)
    levels = torch.stack(
        [(idx // num_levels**i) % num_levels for i in range(num_inputs)], 1
    )
    cols = levels + num_levels * torch.arange(num_inputs)
    X = torch.zeros(A, num_inputs * num_levels, dtype=dtype)
    X.scatter_(1, cols, 1.0 / num_inputs**0.5)
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(num_inputs, num_levels, generator=g, dtype=dtype)
    f = theta[torch.arange(num_inputs), levels].sum(-1)
    for i in range(num_inputs):
        for j in range(i + 1, num_inputs):
            phi = torch.randn(num_levels, num_levels, generator=g, dtype=dtype)
            f = f + interaction_scale * phi[levels[:, i], levels[:, j]]
    return X, rescale_target(f)
