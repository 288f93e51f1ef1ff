"""The small harness every benchmark script shares: machine, timing, tables, plots.

A benchmark script imports this module (``from harness import ...`` when run as
``python benchmarks/bench_x.py``; the scripts put their own folder on ``sys.path``
first) and keeps only its own experiment: what to run and what the targets are.

- :func:`machine_details` describes the machine and software in one line (CPU
  model, cores, threads, library versions, git commit, date), the same line in
  every results file.
- :func:`timed` runs a callable and returns wall and CPU seconds and the load
  average before and after (the machine is shared: CPU time is the
  load-independent number; wall time is what a user waits).
- :func:`method_cpu` adds up the CPU seconds spent inside some methods of a
  class while it is active (e.g. a generator's ``fit`` and ``gen`` inside one
  Ax call, to tell the model's time from Ax's own bookkeeping).
- :func:`write_csv` / :func:`read_csv` write and read rows of dicts.
- :func:`markdown_table` renders rows as a Markdown table; :func:`mean_sd` formats
  ``mean ± sd`` over seeds.
- :func:`write_report` writes a Markdown results file with the machine and the
  command that made it.
- :func:`figure` returns a Matplotlib figure on the Agg backend.
"""

from __future__ import annotations

import csv
import datetime
import logging
import math
import os
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"

__all__ = [
    "REPO_ROOT",
    "RESULTS",
    "box_client",
    "cpu_model",
    "figure",
    "git_head",
    "machine_details",
    "markdown_table",
    "mean_sd",
    "method_cpu",
    "quiet_single_thread",
    "read_csv",
    "timed",
    "write_csv",
    "write_report",
    "write_table",
]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; else what ``platform`` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(*args: str, cwd: Path | str = REPO_ROOT) -> str:
    return subprocess.run(
        ["git", *args], capture_output=True, text=True, check=False, cwd=cwd
    ).stdout.strip()


def git_head(root: Path | str = REPO_ROOT) -> str:
    """Short commit of the repository at ``root`` (default: this one), marked
    when the tracked files differ."""
    try:
        head = _git("rev-parse", "--short", "HEAD", cwd=root)
        dirty = _git("status", "--porcelain", "--untracked-files=no", cwd=root)
    except OSError:
        return "?"
    return f"{head or '?'}{' (+ working tree)' if dirty else ''}"


def machine_details() -> str:
    """One line: CPU, cores, threads, library versions, git commit and date."""
    import botorch
    import gpytorch

    try:
        import ax

        ax_version = ax.__version__
    except Exception:  # pragma: no cover - ax is a dependency
        ax_version = "?"
    return (
        f"{cpu_model()}, {os.cpu_count()} logical cores, torch {torch.__version__} "
        f"(torch threads {torch.get_num_threads()}, OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}), botorch {botorch.__version__}"
        f", gpytorch {gpytorch.__version__}, ax {ax_version}, Python "
        f"{platform.python_version()}, git {git_head()}, "
        f"{datetime.date.today().isoformat()}"
    )


def timed(fn: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """Run ``fn()``; return its result and ``wall_s``, ``cpu_s``, ``load``.

    ``cpu_s`` is this process's CPU time (all its threads); ``load`` is the mean of
    the 1-minute load average before and after.
    """
    load0, wall0, cpu0 = os.getloadavg()[0], time.perf_counter(), time.process_time()
    out = fn()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    load = 0.5 * (load0 + os.getloadavg()[0])
    return out, {"wall_s": wall, "cpu_s": cpu, "load": load}


@contextmanager
def method_cpu(
    classes: Sequence[Any], names: Sequence[str]
) -> Iterator[dict[str, float]]:
    """Within the block, add the CPU seconds of calls to the methods ``names`` of
    ``classes`` (classes, or modules for their functions) to the yielded dict
    (key: the method's name).

    Each class's own definitions are wrapped (a class that does not define a
    method is skipped) and restored on exit; a module's functions are wrapped
    where the module looks them up. A call made from inside another
    timed call (an override calling ``super()``) is not counted twice.
    """
    totals = {name: 0.0 for name in names}
    depth = [0]

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed_method(*args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            cpu0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    totals[name] += time.process_time() - cpu0

        return timed_method

    originals = [
        (cls, name, cls.__dict__[name])
        for cls in classes
        for name in names
        if name in cls.__dict__
    ]
    for cls, name, fn in originals:
        setattr(cls, name, wrap(name, fn))
    try:
        yield totals
    finally:
        for cls, name, fn in originals:
            setattr(cls, name, fn)


def complete(client: Any, results: dict[int, dict], mode: str) -> None:
    """Complete Ax trials ``{index: raw_data}``: all at once with
    ``botorch_sketch.ax.complete_trials`` (``mode="batch"``) or one
    ``client.complete_trial`` per trial (``"trial"``)."""
    from botorch_sketch.ax import complete_trials

    if mode == "batch":
        complete_trials(client, results)
        return
    for index, raw in results.items():
        client.complete_trial(index, raw_data=raw)


def quiet_single_thread() -> None:
    """A benchmark's process set-up: INFO logging with times for the script,
    warnings off, Ax's and the package's loggers at WARNING, one torch thread."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    warnings.filterwarnings("ignore")
    for name in ("ax", "botorch_sketch"):
        logging.getLogger(name).setLevel(logging.WARNING)
    torch.set_num_threads(1)


def profile_report(profile: Any, top: int) -> str:
    """A ``cProfile.Profile``'s ``top`` functions by own and by cumulative time."""
    import io
    import pstats

    parts = []
    for key in ("tottime", "cumtime"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(key).print_stats(top)
        parts.append(out.getvalue())
    return "\n".join(parts)


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``rows`` (dicts; the union of their keys, in first-seen order)."""
    fields: list[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


#: CSV columns kept as text by :func:`read_csv` (a commit such as ``430e779``
#: parses as the float ``inf``).
TEXT_COLUMNS = frozenset({"commit"})


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows of a CSV; values that parse as numbers become floats, except in
    :data:`TEXT_COLUMNS`."""

    def convert(key: str, value: str) -> Any:
        if key in TEXT_COLUMNS:
            return value
        try:
            return float(value)
        except ValueError:
            return value

    with path.open() as fh:
        return [
            {k: convert(k, v) for k, v in row.items()} for row in csv.DictReader(fh)
        ]


def mean_sd(values: Iterable[float], fmt: str = "{:.3g}") -> str:
    """``mean ± sd`` over seeds (one value alone; ``-`` when there is none)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return "-"
    mean = sum(vals) / len(vals)
    if len(vals) == 1:
        return fmt.format(mean)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    return f"{fmt.format(mean)} ± {fmt.format(sd)}"


def markdown_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None
) -> str:
    """A Markdown table of ``rows`` (floats with 4 significant digits)."""
    columns = list(columns or (rows[0].keys() if rows else []))

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "-" if math.isnan(value) else f"{value:.4g}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def write_report(path: Path, title: str, sections: Sequence[str]) -> None:
    """A Markdown results file: title, sections, then machine and command."""
    script = Path(sys.argv[0]).resolve()
    if script.is_relative_to(REPO_ROOT):
        script = script.relative_to(REPO_ROOT)
    command = " ".join([f"python {script.as_posix()}", *sys.argv[1:]])
    body = [f"# {title}", "", f"Generated by `{command}`; do not edit by hand.", ""]
    for section in sections:
        body += [section.rstrip(), ""]
    body += ["## Machine", "", machine_details(), ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(body))


def write_table(
    out: Path, stem: str, title: str, intro: str, rows: Sequence[dict[str, Any]]
) -> None:
    """``out/stem.csv`` (the rows) and ``out/stem.md`` (title, intro, the rows
    as a table, machine and command)."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / f"{stem}.csv", rows)
    write_report(out / f"{stem}.md", title, [intro, markdown_table(rows)])


def box_client(dim: int = 10, seed: int = 0) -> Any:
    """An ``ax.Client`` minimising ``f`` over ``x0 .. x{dim-1}`` in ``[0, 1]``,
    Ax's loggers at WARNING."""
    from ax import Client, RangeParameterConfig

    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(
                name=f"x{i}", bounds=(0.0, 1.0), parameter_type="float"
            )
            for i in range(dim)
        ]
    )
    client.configure_optimization(objective="-f")
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("ax"):
            logging.getLogger(name).setLevel(logging.WARNING)
    return client


def figure(*args: Any, **kwargs: Any) -> Any:
    """``matplotlib.pyplot.subplots`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)
