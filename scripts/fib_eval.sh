#!/usr/bin/env bash
# scripts/fib_eval.sh — THERE (the GPU machine, no internet): gdn's packed solutions built and evaluated by
# flashinfer-bench 0.1.2 itself. Prepare HERE with `bash scripts/fetch_fib_wheels.sh`, then run with carry
# [".fib", "target/release/gdn"]:
#   1. installs the carried wheels (.fib/wheels) into /tmp/fib_site (no index, no dependencies resolved);
#   2. writes a dataset with `gdn workloads` (MIX=quick: 10 small workloads per definition, the default; MIX=contest:
#      the contest-like decode mix (54), the 100-workload prefill mix and MTP T = 2..8 for B = 1, 16, 64 — about
#      3.5 GB, many minutes with the harness's Python reference; MIX=anchors: gdn bench's anchors);
#   3. scripts/fib_eval.py: the solutions of .fib/packs into the dataset, built by the harness's builder (its TVM-FFI
#      builder: nvcc with its default flags), evaluated by its Benchmark; summary under $OUT.
# Files under $OUT: fib_summary.json, fib_summary.md, fib_eval.log. Knobs: MIX, OPS ("decode prefill mtp"),
# WARMUP, ITERATIONS, TRIALS, FIB_TIMEOUT (seconds per solution and workload), FIB_DATASET (dataset folder).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fib-out}
mkdir -p "$OUT"
GDN=${GDN:-target/release/gdn}
MIX=${MIX:-quick}
OPS=${OPS:-"decode prefill mtp"}
export PYTHONUNBUFFERED=1
log="$OUT/fib_eval.log"
exec > >(tee "$log") 2>&1

[ -d .fib/wheels ] && [ -d .fib/packs ] && [ -d .fib/definitions ] || { echo "fib_eval.sh: carry .fib (bash scripts/fetch_fib_wheels.sh here)"; exit 1; }
[ -x "$GDN" ] || { echo "fib_eval.sh: carry $GDN"; exit 1; }
echo "== environment"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
command -v nvcc ninja || true
nvcc --version | tail -2 || true

echo "== flashinfer-bench 0.1.2 from the carried wheels"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fib_site .fib/wheels/*.whl \
  || { echo "fib_eval.sh: installing the wheels failed"; exit 1; }
export PYTHONPATH=/tmp/fib_site${PYTHONPATH:+:$PYTHONPATH}
# the TVM-FFI builder finds the CUDA toolkit by CUDA_HOME or nvcc on PATH
if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then export CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")"); fi
export FIB_CACHE_PATH=${FIB_CACHE_PATH:-/tmp/fib-cache}
python3 -c "import flashinfer_bench, tvm_ffi, torch; print('flashinfer-bench', flashinfer_bench.__version__, '| tvm-ffi', tvm_ffi.__version__, '| torch', torch.__version__, torch.cuda.get_device_name())" \
  || { echo "fib_eval.sh: flashinfer-bench does not import"; exit 1; }

echo "== dataset: gdn workloads ($MIX; $OPS)"
ds=${FIB_DATASET:-/tmp/fib-dataset}
rm -rf "$ds"
mix_args=(--mix contest)
case "$MIX" in
  quick) mix_args=(--quick) ;;
  contest) mix_args=(--mix contest) ;;
  anchors) mix_args=(--mix anchors) ;;
  *) echo "fib_eval.sh: MIX must be quick, contest or anchors"; exit 1 ;;
esac
# the published definition JSONs, carried in .fib/definitions (gdn workloads copies them into the dataset)
defs_dir=.fib/definitions
[ -d "$defs_dir" ] || { echo "fib_eval.sh: no $defs_dir (bash scripts/fetch_fib_wheels.sh copies them)"; exit 1; }
for op in $OPS; do
  "$GDN" workloads --out "$ds" --definitions "$defs_dir" --op "$op" "${mix_args[@]}" --seed 0 \
    || { echo "fib_eval.sh: gdn workloads --op $op failed"; exit 1; }
done
du -sh "$ds"

echo "== build and evaluate in flashinfer-bench"
python3 scripts/fib_eval.py --dataset "$ds" --packs .fib/packs --out "$OUT" \
  --warmup "${WARMUP:-3}" --iterations "${ITERATIONS:-20}" --trials "${TRIALS:-1}" --timeout "${FIB_TIMEOUT:-300}"
rc=$?
echo "fib_eval.sh: exit $rc"
exit $rc
