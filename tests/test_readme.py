"""The README's python blocks run under a plain install (no extras).

A user's first contact with the package is ``pip install botorch_sketch`` and the
README. This module installs the package without any extra into a fresh virtual
environment (torch first, as the README says), then runs every python block of
the README there, each in its own interpreter. A block that needs an optional
dependency (tqdm, ray, ...) fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0")
OPTIONAL = ("tqdm", "pytest", "ray")  # matplotlib comes with Ax (pymoo)


def readme_python_blocks(text: str) -> list[str]:
    """The bodies of the fenced ```python blocks of a markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_readme_blocks_are_found() -> None:
    blocks = readme_python_blocks(README.read_text())
    assert len(blocks) >= 4
    assert all("import" in block for block in blocks)


def _plain_venv(env_dir: Path) -> Path:
    """A fresh virtual environment with torch and the package, no extras."""
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # ``--no-compile``: the blocks compile only the modules they import (about
    # half of the install time is otherwise spent byte-compiling every module).
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    pip.append("--no-compile")
    for args in ([TORCH_SPEC], [str(ROOT)]):
        done = subprocess.run([*pip, *args], capture_output=True, text=True)
        assert done.returncode == 0, f"pip install {args} failed:\n{done.stderr}"
    return python


def _run(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run(
        [str(python), "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def test_readme_runs_under_a_plain_install(tmp_path: Path) -> None:
    # One test (one environment) for all blocks: xdist would otherwise build the
    # environment once per worker.
    python = _plain_venv(tmp_path / "venv")
    probe = (
        "import importlib.util, botorch_sketch, botorch_sketch.ax, "
        "botorch_sketch.loops\n"
        f"print([m for m in {OPTIONAL!r} if importlib.util.find_spec(m)])"
    )
    done = _run(python, probe, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"optional packages installed: {done.stdout}"
    failures = []
    for index, block in enumerate(readme_python_blocks(README.read_text())):
        cwd = tmp_path / f"block{index}"
        cwd.mkdir()
        done = _run(python, block, cwd)
        if done.returncode != 0:
            failures.append(f"block {index}:\n{block}\n{done.stderr[-3000:]}")
            continue
        match = re.search(r"BBKB chose a batch of (\d+) points", done.stdout)
        if match is not None and int(match.group(1)) <= 1:
            failures.append(f"block {index}: the adaptive batch has one point")
    assert not failures, "README python blocks failed under a plain install:\n" + (
        "\n".join(failures)
    )
