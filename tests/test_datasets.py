"""Tests for botorch_sketch.datasets."""

from __future__ import annotations

import gzip
import pathlib
import re
import shutil

import pytest
import torch

from botorch_sketch import datasets
from botorch_sketch.datasets import (
    ABALONE_FILE,
    ABALONE_SHA256,
    CADATA_FILE,
    CADATA_SHA256,
    DATA_DIR_ENV_VAR,
    find_data_dir,
    load_abalone,
    load_cadata,
    rescale_target,
    standardize_features,
)


@pytest.fixture(scope="module")
def data_dir() -> pathlib.Path:
    """The real data directory (``../shared/data``); its absence is a failure.

    CI clones the repo with ``../shared`` beside it; the benchmarks and the BBKB
    experiment need these files, so a missing directory must fail loudly.
    """
    return find_data_dir()


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV_VAR, raising=False)


def _write_gz(path: pathlib.Path, text: str) -> None:
    with gzip.open(path, "wb") as fh:
        fh.write(text.encode("utf-8"))


def _read_csv_text(path: pathlib.Path) -> str:
    with gzip.open(path, "rb") as fh:
        return fh.read().decode("utf-8")


# --------------------------------------------------------------------- loading


def test_readme_checksums_match_constants(data_dir: pathlib.Path) -> None:
    readme = data_dir / "README.md"
    assert readme.is_file(), f"no README.md beside the data in {data_dir}"
    text = readme.read_text()
    row = {
        name: re.search(rf"`{re.escape(name)}`.*?`([0-9a-f]{{64}})`", text)
        for name in (ABALONE_FILE, CADATA_FILE)
    }
    assert row[ABALONE_FILE] is not None and row[CADATA_FILE] is not None
    assert row[ABALONE_FILE].group(1) == ABALONE_SHA256
    assert row[CADATA_FILE].group(1) == CADATA_SHA256


def test_load_abalone(data_dir: pathlib.Path) -> None:
    X, y = load_abalone(data_dir)
    assert X.shape == (4177, 8)
    assert y.shape == (4177,)
    assert X.dtype == torch.float64 and y.dtype == torch.float64
    # First row of the CSV: M,0.455,0.365,0.095,0.514,0.2245,0.101,0.15,15
    expected0 = torch.tensor(
        [1.0, 0.455, 0.365, 0.095, 0.514, 0.2245, 0.101, 0.15], dtype=torch.float64
    )
    torch.testing.assert_close(X[0], expected0, rtol=0, atol=0)
    assert y[0].item() == 15.0
    # Third row is F, last row: M,0.71,0.555,0.195,1.9485,0.9455,0.3765,0.495,12
    assert X[2, 0].item() == 2.0
    assert X[-1, 1].item() == 0.71 and y[-1].item() == 12.0
    # Class counts documented by UCI: M 1528, F 1307, I 1342.
    sex = X[:, 0]
    assert int((sex == 1).sum()) == 1528
    assert int((sex == 2).sum()) == 1307
    assert int((sex == 3).sum()) == 1342
    assert torch.isfinite(X).all() and torch.isfinite(y).all()


def test_load_cadata(data_dir: pathlib.Path) -> None:
    X, y = load_cadata(data_dir)
    assert X.shape == (20640, 8)
    assert y.shape == (20640,)
    assert X.dtype == torch.float64 and y.dtype == torch.float64
    expected0 = torch.tensor(
        [-122.23, 37.88, 41.0, 880.0, 129.0, 322.0, 126.0, 8.3252],
        dtype=torch.float64,
    )
    torch.testing.assert_close(X[0], expected0, rtol=0, atol=0)
    assert y[0].item() == 452600.0
    assert y[-1].item() == 89400.0
    assert X[-1, 0].item() == -121.24
    assert torch.isfinite(X).all() and torch.isfinite(y).all()


def test_dtype_argument(data_dir: pathlib.Path) -> None:
    X, y = load_abalone(data_dir, dtype=torch.float32)
    assert X.dtype == torch.float32 and y.dtype == torch.float32
    with pytest.raises(ValueError, match="floating"):
        load_cadata(data_dir, dtype=torch.int64)


def test_default_lookup_finds_shared_data(data_dir: pathlib.Path) -> None:
    expected = datasets._REPO_ROOT.parent / "shared" / "data"
    assert expected.is_dir(), f"{expected} does not exist"
    assert find_data_dir() == expected.resolve()


# ---------------------------------------------------------------- error paths


def test_missing_dir_raises_with_path(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "no_such_dir"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        find_data_dir(missing)
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        load_abalone(missing)


def test_missing_file_raises_with_path(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        load_abalone(tmp_path)
    assert str(tmp_path.resolve() / ABALONE_FILE) in str(info.value)
    with pytest.raises(FileNotFoundError) as info:
        load_cadata(tmp_path)
    assert str(tmp_path.resolve() / CADATA_FILE) in str(info.value)


def test_no_default_dir_lists_where_it_looked(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_root = tmp_path / "repo"
    fake_root.mkdir()
    monkeypatch.setattr(datasets, "_REPO_ROOT", fake_root)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as info:
        find_data_dir()
    msg = str(info.value)
    assert str(tmp_path / "shared" / "data") in msg
    assert DATA_DIR_ENV_VAR in msg


def test_cwd_fallback(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_root = tmp_path / "deep" / "repo"
    fake_root.mkdir(parents=True)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    monkeypatch.setattr(datasets, "_REPO_ROOT", fake_root)
    monkeypatch.chdir(tmp_path)
    assert find_data_dir() == (tmp_path / "shared" / "data").resolve()


def test_corrupted_file_raises_value_error(
    tmp_path: pathlib.Path, data_dir: pathlib.Path
) -> None:
    text = _read_csv_text(data_dir / ABALONE_FILE)
    altered = text.replace("0.455", "0.456", 1)
    assert altered != text
    bad = tmp_path / ABALONE_FILE
    _write_gz(bad, altered)
    with pytest.raises(ValueError, match=re.escape(str(bad.resolve()))) as info:
        load_abalone(tmp_path)
    assert "checksum" in str(info.value).lower()


def test_corrupted_cadata_raises_value_error(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / CADATA_FILE
    _write_gz(bad, "longitude,latitude\n1,2\n")
    with pytest.raises(ValueError, match=re.escape(CADATA_FILE)):
        load_cadata(tmp_path)


def test_not_gzip_raises_value_error(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / ABALONE_FILE
    bad.write_bytes(b"this is not gzip data")
    with pytest.raises(ValueError, match=re.escape(ABALONE_FILE)):
        load_abalone(tmp_path)


# ---------------------------------------------------------------- env override


def test_env_var_override(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, data_dir: pathlib.Path
) -> None:
    shutil.copy(data_dir / ABALONE_FILE, tmp_path / ABALONE_FILE)
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(tmp_path))
    assert find_data_dir() == tmp_path.resolve()
    X, y = load_abalone()
    assert X.shape == (4177, 8) and y.shape == (4177,)
    # The override is really used: cadata is not in tmp_path.
    with pytest.raises(FileNotFoundError, match=re.escape(CADATA_FILE)):
        load_cadata()
    # An explicit argument wins over the environment variable.
    assert find_data_dir(data_dir) == data_dir.resolve()


def test_env_var_pointing_nowhere_raises(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere"
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(missing))
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        find_data_dir()


# ---------------------------------------------------------------- transforms


def test_standardize_features() -> None:
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(50, 3, generator=gen, dtype=torch.float64) * 5.0 + 3.0
    X[:, 1] = 0.1  # constant column (0.1 is not exactly representable)
    X_orig = X.clone()
    Z = standardize_features(X)
    assert Z.shape == X.shape and Z.dtype == X.dtype
    torch.testing.assert_close(X, X_orig, rtol=0, atol=0)  # input untouched
    assert (Z[:, 1] == 0).all()
    cols = [0, 2]
    torch.testing.assert_close(
        Z[:, cols].mean(0), torch.zeros(2, dtype=torch.float64), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(
        Z[:, cols].std(0, correction=0),
        torch.ones(2, dtype=torch.float64),
        rtol=0,
        atol=1e-12,
    )
    expected = (X[:, 0] - X[:, 0].mean()) / X[:, 0].std(correction=0)
    torch.testing.assert_close(Z[:, 0], expected)


def test_standardize_features_batched_and_errors() -> None:
    X = torch.tensor([[[0.0], [2.0]], [[10.0], [30.0]]])  # (2, 2, 1)
    Z = standardize_features(X)
    torch.testing.assert_close(Z, torch.tensor([[[-1.0], [1.0]], [[-1.0], [1.0]]]))
    with pytest.raises(ValueError):
        standardize_features(torch.ones(5))
    with pytest.raises(ValueError):
        standardize_features(torch.ones(3, 2, dtype=torch.int64))
    with pytest.raises(ValueError):
        standardize_features(torch.ones(0, 2))


def test_rescale_target() -> None:
    y = torch.tensor([2.0, 4.0, 6.0, 3.0], dtype=torch.float64)
    y_orig = y.clone()
    r = rescale_target(y)
    torch.testing.assert_close(
        r, torch.tensor([0.0, 0.5, 1.0, 0.25], dtype=torch.float64)
    )
    torch.testing.assert_close(y, y_orig, rtol=0, atol=0)
    assert r.dtype == y.dtype
    assert (rescale_target(torch.full((4,), 7.0)) == 0).all()
    batched = rescale_target(torch.tensor([[0.0, 10.0], [5.0, -5.0]]))
    torch.testing.assert_close(batched, torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    with pytest.raises(ValueError):
        rescale_target(torch.tensor(1.0))
    with pytest.raises(ValueError):
        rescale_target(torch.arange(3))


def test_rescaled_real_target_in_unit_interval(data_dir: pathlib.Path) -> None:
    _, y = load_cadata(data_dir)
    r = rescale_target(y)
    assert r.min().item() == 0.0 and r.max().item() == 1.0
    X, _ = load_abalone(data_dir)
    Z = standardize_features(X)
    assert torch.allclose(Z.mean(0), torch.zeros(8, dtype=Z.dtype), atol=1e-10)


def test_categorical_library() -> None:
    from botorch_sketch.datasets import categorical_library

    X, f = categorical_library(num_inputs=3, num_levels=4, seed=1)
    assert X.shape == (64, 12) and f.shape == (64,) and X.dtype == torch.float64
    torch.testing.assert_close(X.norm(dim=-1), torch.ones(64, dtype=torch.float64))
    # One level per input block; arm a has level (a // 4^i) % 4 for input i.
    blocks = (X.reshape(64, 3, 4) > 0).to(torch.long)
    assert torch.equal(blocks.sum(-1), torch.ones(64, 3, dtype=torch.long))
    a = torch.arange(64)
    for i in range(3):
        assert torch.equal(blocks[:, i].argmax(-1), (a // 4**i) % 4)
    assert f.min() == 0 and f.max() == 1
    assert torch.equal(f, categorical_library(3, 4, seed=1)[1])
    assert not torch.equal(f, categorical_library(3, 4, seed=2)[1])
    with pytest.raises(ValueError, match="num_levels"):
        categorical_library(2, 1)
