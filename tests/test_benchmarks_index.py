r"""Every benchmark script has one entry point and one line of documentation.

``make bench`` runs ``benchmarks/run_all.py``, which lists the scripts; the table of
``benchmarks/README.md`` says what each measures and where its results go. A script
missing from either is a benchmark nobody reruns.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"


def scripts() -> set[str]:
    return {path.name for path in BENCH.glob("bench_*.py")}


def test_run_all_lists_every_benchmark_script():
    spec = importlib.util.spec_from_file_location("run_all", BENCH / "run_all.py")
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    listed = {Path(script).name for script, _ in run_all.BENCHMARKS}
    assert scripts() - listed == set(), "add them to benchmarks/run_all.py"
    assert all((ROOT / script).is_file() for script, _ in run_all.BENCHMARKS)


def test_readme_table_describes_every_benchmark_script():
    table = (BENCH / "README.md").read_text()
    missing = {name for name in scripts() if f"| `{name}` |" not in table}
    assert missing == set(), "add a row to benchmarks/README.md"
