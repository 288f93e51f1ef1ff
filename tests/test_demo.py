"""Smoke test of :mod:`botorch_sketch.demo` on the synthetic candidate set."""

import json
import math

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")

from botorch_sketch import demo  # noqa: E402


def test_demo_synthetic_writes_files(tmp_path):
    out = tmp_path / "demo"
    summary = demo.main(
        ["--T", "200", "--out", str(out), "--synthetic", "--no-progress"]
    )
    for name in ("bbkb_demo.csv", "bbkb_demo.json", "bbkb_demo.png"):
        assert (out / name).is_file(), name
    assert json.loads((out / "bbkb_demo.json").read_text()) == summary
    assert summary["dataset"] == "synthetic"
    assert summary["T"] == 200
    rr = summary["regret_ratio_T"]
    assert math.isfinite(rr) and 0 <= rr < 1
    with open(out / "bbkb_demo.csv") as fh:
        assert len(fh.read().strip().splitlines()) == 201
