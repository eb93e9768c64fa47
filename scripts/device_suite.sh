#!/usr/bin/env bash
# scripts/device_suite.sh — the whole GPU suite, in one call on the lent GPU machine (no Rust there).
#
# Runs the prebuilt binaries carried with the call (build them here first: `cargo build --release` and
# `cargo build --release -p gdn-cuda --bins`; then `run` with carry ["target/release/gdn",
# "target/release/gdn-cuda-smoke"]):
#   1. env       nvidia-smi, the CUDA libraries the loader sees
#   2. kernels   gdn kernels --arch sm_90a --policy      (NVRTC compile of every variant, resources)
#   3. smoke     gdn-cuda-smoke                           (runtime self-test: loading, test kernel, tiers)
#   4. check     gdn check --backend cuda                 (full correctness sweep vs the float64 reference; with
#                the 65,536-token stability case, 2,048 sequences and the 64-bit offset case, ~35 GB of GPU memory)
#   5. bench     gdn bench --backend cuda                 (correctness, then the timing tiers + copy floor)
#   5b. blind    gdn bench --backend cuda --op prefill --no-length-hint   (the plans a caller that knows only
#                T and N gets: no longest-sequence hint)
#   5c. serving  gdn bench --backend cuda --serving       (serving modes beside the definition mode)
#   5d. gates    long prefill under the three gate regimes, with and without the cp plans' cuts (not in the
#                default STEPS: STEPS="gates"; bench JSONs in $OUT/gates.tar.gz)
#   6. memcheck  compute-sanitizer --tool memcheck  on gdn check --quick --backend cuda
#   7. racecheck compute-sanitizer --tool racecheck on gdn check --quick --backend cuda (RACE_OPS, default all:
#                the prefill kernels and the K-first decode / MTP kernels use shared memory)
# Files under $OUT (at most 8, flat): summary.txt, check.json, bench.json, bench_blind.json,
# bench_serving.json, gates.tar.gz, logs.tar.gz.
# Prints a short summary last. Exit code: 0 when every step passed.
# Knobs (environment): GDN (binary), SMOKE, STEPS (e.g. "kernels check"), CHECK_ARGS, BENCH_ARGS, RACE_OPS,
# T_<STEP> (seconds per step; defaults below), GDN_CACHE_DIR (NVRTC cache; shared by all steps), GDN_ARCH (the
# compile target, kernels/target.rs: `compute_80` runs every step on the portable kernels as an A100 runs them,
# compiled from PTX by the driver; `sm_90` on the portable kernels compiled for Hopper without its sm_90a features),
# GDN_MAX_DYN_SMEM (plan with at most this much shared memory per block: 166912 an A100's fused tiles, 101376 those
# of sm_86 / sm_89 / sm_120).
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-/tmp/gdn-device-out}
mkdir -p "$OUT"
GDN=${GDN:-target/release/gdn}
SMOKE=${SMOKE:-target/release/gdn-cuda-smoke}
STEPS=${STEPS:-"env kernels smoke check bench blind serving memcheck racecheck"}
CHECK_ARGS=${CHECK_ARGS:-}
RACE_OPS=${RACE_OPS:-all}
BENCH_ARGS=${BENCH_ARGS:-}
export GDN_CACHE_DIR=${GDN_CACHE_DIR:-/tmp/gdn-cache}
LOGS=$(mktemp -d)
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
failed=0

# step NAME TIMEOUT CMD... — runs CMD with a time limit, logs to $LOGS/NAME.log, records rc and seconds.
step() {
    local name=$1 limit=$2
    shift 2
    local t0 rc failed_before=$failed
    t0=$(date +%s.%N)
    timeout --signal=KILL "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    local secs
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    local verdict=ok
    if [ "$rc" -eq 137 ]; then
        verdict="TIMEOUT after ${limit}s"; failed=1
    elif [ "$rc" -ne 0 ]; then
        verdict="FAILED rc=$rc"; failed=1
        # a sanitizer step fails on sanitizer findings only (rc $SAN_RC); a failing check case under it is
        # the check step's business
        case $name in memcheck | racecheck)
            if [ "$rc" -ne "$SAN_RC" ] && grep -qE "ERROR SUMMARY: 0 errors|0 hazards displayed \(0 errors" "$LOGS/$name.log"; then
                verdict="ok (clean; checked program rc=$rc)"; failed=$failed_before
            fi ;;
        esac
    fi
    printf '%-10s %-22s %6ss  %s\n' "$name" "$verdict" "$secs" "$*" >>"$SUMMARY"
}

has() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if has env; then
    step env "${T_ENV:-30}" bash -c 'nvidia-smi; ldconfig -p | grep -E "libcuda\.so|libnvrtc" ; \
        command -v compute-sanitizer; ls /usr/local/cuda/include/cuda_bf16.h; true'
fi
if [ ! -x "$GDN" ]; then
    echo "error: $GDN not found: build with cargo build --release and carry it" | tee -a "$SUMMARY"
    exit 1
fi
has kernels && step kernels "${T_KERNELS:-120}" "$GDN" kernels --arch sm_90a --policy
if has smoke; then
    if [ -x "$SMOKE" ]; then step smoke "${T_SMOKE:-240}" "$SMOKE"; else
        echo "smoke      skipped: $SMOKE not carried" >>"$SUMMARY"; fi
fi
# shellcheck disable=SC2086
has check && step check "${T_CHECK:-420}" "$GDN" check --backend cuda --json "$OUT/check.json" $CHECK_ARGS
# shellcheck disable=SC2086
has bench && step bench "${T_BENCH:-300}" "$GDN" bench --backend cuda --json "$OUT/bench.json" $BENCH_ARGS
# shellcheck disable=SC2086
has blind && step blind "${T_BLIND:-200}" "$GDN" bench --backend cuda --op prefill --no-length-hint \
    --json "$OUT/bench_blind.json" $BENCH_ARGS
# shellcheck disable=SC2086
has serving && step serving "${T_SERVING:-300}" "$GDN" bench --backend cuda --serving \
    --json "$OUT/bench_serving.json" $BENCH_ARGS
# gates: long prefill under each gate regime (anchor, model, slow), with the cp plans' cuts (the automatic plan,
# hinted and blind) and without (GDN_KERNEL=cp2-exact), one bench JSON each under $OUT/gates/ (GATE_CFGS: the
# configurations, --seq-lens syntax), packed into $OUT/gates.tar.gz
if has gates; then
    mkdir -p "$OUT/gates"
    step gates "${T_GATES:-420}" bash -c '
        for g in anchor model slow; do for c in ${GATE_CFGS:-1x65536 64x1024 1x8192 4x2048}; do
            "$0" bench --backend cuda --op prefill --seq-lens "$c" --gates "$g" --json "$1/gates/$g-$c-hinted.json" &&
            "$0" bench --backend cuda --op prefill --seq-lens "$c" --gates "$g" --no-length-hint \
                --json "$1/gates/$g-$c-blind.json" &&
            GDN_KERNEL=cp2-exact "$0" bench --backend cuda --op prefill --seq-lens "$c" --gates "$g" \
                --json "$1/gates/$g-$c-exact.json" || exit 1
        done; done' "$GDN" "$OUT"
    tar -czf "$OUT/gates.tar.gz" -C "$OUT" gates && rm -rf "$OUT/gates"
fi
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
SAN_RC=99
if has memcheck; then
    step memcheck "${T_MEMCHECK:-240}" "$SAN" --tool memcheck --error-exitcode "$SAN_RC" --leak-check full \
        "$GDN" check --quick --backend cuda
fi
if has racecheck; then
    step racecheck "${T_RACECHECK:-400}" "$SAN" --tool racecheck --error-exitcode "$SAN_RC" \
        "$GDN" check --quick --backend cuda --op "$RACE_OPS"
fi

tar -czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null

# ---- short summary (last lines of the output)
for f in "$LOGS"/*.log; do
    n=$(basename "$f" .log)
    case $n in
        env) grep -m1 -E "NVIDIA H|Driver Version" "$f" | sed 's/^/  env: /' ;;
        kernels) tail -n 1 "$f" | sed 's/^/  kernels: /' ;;
        smoke) grep -E "^(device|copy|decode B|smoke)" "$f" | sed 's/^/  smoke: /' ;;
        check) tail -n 3 "$f" | sed 's/^/  check: /' ;;
        bench | blind | serving) tail -n 25 "$f" | sed "s/^/  $n: /" ;;
        gates) grep -E "^\|? *(prefill|1x|64x|4x)|median|gates=" "$f" | tail -n 40 | sed "s/^/  $n: /" ;;
        memcheck | racecheck) grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^FAIL|error:" "$f" | tail -n 4 | sed "s/^/  $n: /" ;;
    esac
done >>"$SUMMARY"
echo "==== device suite summary ($(date -u +%FT%TZ))"
cat "$SUMMARY"
[ "$failed" -eq 0 ] && echo "device suite: PASS" || echo "device suite: FAIL"
exit "$failed"
