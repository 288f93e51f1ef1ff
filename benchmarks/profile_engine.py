"""Where the BBKB engine's time goes on a device: ``cProfile`` of one
``bench_gpu.py`` BBKB row (Global-BBKB, ``std`` configuration, standardized
Cadata), the top functions by own time and by cumulative time.

On a GPU the own time of a host synchronisation (``int()`` / ``float()`` /
``.tolist()`` of a device value) is the time spent waiting for the queue, so
the rows say which steps of the loop wait for the device.

    python benchmarks/profile_engine.py --device cuda --T 10000 [--pool-size N]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gpu  # noqa: E402
import harness  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--T", type=int, default=10000)
    p.add_argument("--rows", type=int, default=None, help="tiled candidate rows")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    ns = argparse.Namespace(device=args.device, seed=0)
    profile = cProfile.Profile()
    row = profile.runcall(bench_gpu.bbkb_row, args.rows, args.T, ns)
    print(json.dumps(row))
    print(harness.profile_report(profile, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
