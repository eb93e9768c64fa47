#!/usr/bin/env bash
# device_python.sh — the Python module on the GPU machine (Python 3.12 + torch there, no Rust, no internet).
#
#   bash scripts/device_python.sh --prepare   # HERE (dev machine): build the abi3 wheel into .whl/gdn/ (ignored,
#                                             # carried) and, when ../shared/peers was fetched (.peers2 exists),
#                                             # copy bench_peers.py + setup.sh into .peers2/
#   bash scripts/device_python.sh             # THERE (device run, carry [".whl/gdn"] or [".whl/gdn", ".peers2"]):
#                                             # install the wheel, run tests/test_gpu.py, the call-overhead
#                                             # measurement and, with .peers2 carried and PEERS=1, the side-by-side
#                                             # bench_peers.py all; with PEERS_MIX=1, FlashInfer beside gdn on
#                                             # the contest-like mix (scripts/peers_mix.py; a call carrying .peers1
#                                             # must come first); with PEERS_SERVING=1, FlashInfer's serving calls
#                                             # (state pools, verify, checkpoints) beside gdn's
#                                             # (scripts/peers_serving.py, same .peers1 call first). Results and
#                                             # logs land in $OUT.
# .peers1 (63 MB) and the tracked tree together do not fit one 64 MiB carry: split it here
# (`split -b 21000000 .peers1/cutlass_cu12.tar.xz .peers1/part_`), carry .peers1/part_aa, part_ab, part_ac in three
# quick calls (the machine stays warm ~30 s) that copy them to /tmp/parts, then cat them and untar into /tmp/cutl.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
  set -e
  VENV=${VENV:-.venv}
  [ -x "$VENV/bin/maturin" ] || { python3 -m venv "$VENV" && "$VENV/bin/python" -m pip install -q maturin==1.16.0; }
  rm -rf .whl/gdn && mkdir -p .whl/gdn
  "$VENV/bin/maturin" build --release -m crates/gdn-py/Cargo.toml -o .whl/gdn
  if [ -d .peers2 ]; then cp ../shared/peers/bench_peers.py ../shared/peers/setup.sh .peers2/; fi
  du -sh .whl/gdn .peers1 .peers2 2>/dev/null || true
  exit 0
fi

OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
whl=$(ls .whl/gdn/gdn-*.whl 2>/dev/null | head -1)
[ -n "$whl" ] || { echo "device_python.sh: no .whl/gdn/gdn-*.whl (run --prepare here and carry .whl/gdn)" >&2; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gdn_site "$whl" \
  || { echo "device_python.sh: installing $whl failed" >&2; exit 1; }
export PYTHONPATH=/tmp/gdn_site${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import torch, gdn; print('gdn', gdn.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(), \
'| cuda:', gdn.cuda_unavailable_reason() or 'ok')"

echo "==> test_gpu.py"
python3 -m pytest -q -p no:cacheprovider crates/gdn-py/tests/test_gpu.py 2>&1 | tee "$OUT/gdn_test_gpu.log"
rc=${PIPESTATUS[0]}

echo "==> call overhead"
python3 crates/gdn-py/tests/bench_overhead.py 2>&1 | tee "$OUT/gdn_overhead.log"

if [ "${PEERS:-0}" = 1 ] && [ -f .peers2/bench_peers.py ]; then
  if [ "$rc" = 0 ]; then
    echo "==> bench_peers.py all"
    # shellcheck disable=SC1091
    . .peers2/setup.sh
    python3 .peers2/bench_peers.py all 2>&1 | tail -60
  else
    echo "==> bench_peers.py skipped: test_gpu.py failed"
  fi
fi
if [ "${PEERS_MIX:-0}" = 1 ] && [ -f .peers2/bench_peers.py ]; then
  echo "==> peers_mix.py (FlashInfer and gdn on the contest-like mix)"
  # shellcheck disable=SC1091
  . .peers2/setup.sh
  python3 scripts/peers_mix.py 2>&1 | tee "$OUT/peers_mix.log" | tail -30
fi
if [ "${PEERS_SERVING:-0}" = 1 ] && [ -f .peers2/bench_peers.py ]; then
  echo "==> peers_serving.py (FlashInfer and gdn serving calls side by side)"
  # shellcheck disable=SC1091
  . .peers2/setup.sh
  python3 scripts/peers_serving.py 2>&1 | tee "$OUT/peers_serving.log" | tail -75
fi
exit "$rc"
