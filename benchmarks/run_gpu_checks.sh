#!/usr/bin/env bash
# The GPU checks of issue 25 in one command, sized for a 15-minute GPU lease:
# the CUDA unit test, the smoke checks of every model on the device, the BBKB
# engine on cuda and on one CPU thread of the same machine, the model rows of
# bench_gpu.py (16,000 points with SingleTaskGP; 50,000 and 10^6 points with the
# defaults), the exact posterior where the budget may choose it (bench_exact_posterior.py,
# 16,000 points, defaults and dictionary="all", and the rates of its steps), then a
# short tiled 10^6-row engine run, the batch UCB's paths (bench_batch_ucb.py), and
# one "turbo-bkb" step (region fit + Thompson batch) at REGION_SIZES points:
# about 10 minutes on an H100.
# Each group has its own time limit, so one that hangs or fails does not cost the
# others; rows are written as they finish. MODEL_CELLS / MODEL_METHODS /
# LARGE_CELLS / EXACT_CELLS / TILED_T / REGION_SIZES and the *_LIMIT variables change
# the groups; ENGINE=0 leaves out the three BBKB engine groups, TILED_T=0 the tiled
# one, REGION_SIZES= (empty) the trust-region step.
#
#   OUT=/some/dir bash benchmarks/run_gpu_checks.sh
set -u
OUT=${OUT:-benchmarks/results/tmp/gpu}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
B=benchmarks/bench_gpu.py
step() { local limit=$1; shift; echo "== $(date +%T) $*"; timeout "$limit" "$@"; echo "== rc $?"; }
nvidia-smi -L
python3 -c "import torch, botorch, gpytorch; print(torch.__version__, botorch.__version__, gpytorch.__version__)"
step 60 python3 -m pytest -o addopts="" -rA -p no:cacheprovider tests/bbkb/test_state.py -k cuda
step ${SMOKE_LIMIT:-150} python3 benchmarks/gpu_smoke.py --device cuda --out "$OUT/smoke_cuda"
if [ "${ENGINE:-1}" = 1 ]; then
  step 45 python3 $B --device cuda --methods bbkb --cells cadata:16000 --out "$OUT/bbkb_cuda"
  step 40 env OMP_NUM_THREADS=1 python3 $B --device cpu --methods bbkb --cells cadata:16000 --out "$OUT/bbkb_cpu1"
fi
step ${MODEL_LIMIT:-240} python3 $B --device cuda --methods "${MODEL_METHODS:-exact,nystrom,budget}" \
  --cells "${MODEL_CELLS:-cadata:16000,synthetic:16000}" --out "$OUT/models_cuda"
step ${LARGE_LIMIT:-90} python3 $B --device cuda --methods nystrom \
  --cells "${LARGE_CELLS:-synthetic:50000,synthetic:1000000}" --out "$OUT/models_large_cuda"
step ${EXACT_LIMIT:-90} python3 benchmarks/bench_exact_posterior.py --device cuda \
  --cells "${EXACT_CELLS:-synthetic:16000}" --methods default,all --out "$OUT/exact_cuda"
if [ "${ENGINE:-1}" = 1 ] && [ "${TILED_T:-300}" != 0 ]; then
  step ${TILED_LIMIT:-45} python3 $B --device cuda --methods none --tiled-rows 1000000 \
    --tiled-T "${TILED_T:-300}" --out "$OUT/tiled_cuda"
fi
step ${UCB_LIMIT:-40} python3 benchmarks/bench_batch_ucb.py --device cuda --repeats 2 \
  --out "$OUT/batch_ucb_cuda"
REGION_SIZES=${REGION_SIZES-1000,3000,6000,10000}
if [ -n "$REGION_SIZES" ]; then
  step ${REGION_LIMIT:-120} python3 $B --device cuda --methods none \
    --region-sizes "$REGION_SIZES" --out "$OUT/region_cuda"
fi
rm -f "$OUT"/*.md; ls -la "$OUT"
