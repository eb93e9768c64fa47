#!/usr/bin/env bash
# scripts/pack_tests.sh — `gdn pack`'s solutions checked without a GPU (run by .ci/run after `gdn kernels`;
# standalone: bash scripts/pack_tests.sh [path/to/gdn]). Every pack here compiles into a fresh NVRTC cache of its
# own, so that step 2 compares two compiles made now: a long-lived ~/.cache/gdn was seen holding a decode-module
# CUBIN that loads and runs but differs in some bytes from a fresh compile under the same key.
#  1. every GDN definition of ../shared is packed; flashinfer-bench 0.1.2's data models validate each solution
#     (scripts/validate_solutions.py: Solution, entry point exported with the definition's parameters in order,
#     sources complete, CUBINs intact, config.toml), and its self-test shows broken solutions are reported;
#  2. the decode solution is packed again with another empty NVRTC cache: its kernels must be byte for byte the same
#     (the embedded CUBINs are what NVRTC makes of the library's module sources, not a stale cache entry);
#  3. each solution is built as flashinfer-bench's TVM-FFI builder builds it — its .cu with nvcc from the CUDA 13.0
#     wheels (-gencode=arch=compute_90,code=sm_90, -std=c++17 -O2), its .cpp with c++, linked with -ltvm_ffi and
#     the CUDA runtime only — then its library must export the tvm-ffi entry symbol and nothing of gdn's host code
#     (solutions loaded into one process must not share state), and loaded with tvm-ffi, its `run` must take the
#     definition's inputs and outputs.
# Wheels go into private folders under ${XDG_CACHE_HOME:-~/.cache}/gdn (flashinfer-bench's data models as in
# .ci/run; nvcc 13.0.88, nvvm, crt, cudart 13.0.96 and apache-tvm-ffi 0.1.15.post2: about 330 MB installed).
set -euo pipefail
cd "$(dirname "$0")/.."
gdn=${1:-target/release/gdn}
defs=../shared/flashinfer-trace/definitions/gdn
cache="${XDG_CACHE_HOME:-$HOME/.cache}/gdn"
fib_dir="$cache/flashinfer-bench"
cuda_dir="$cache/nvcc13"
pipi=(python3 -m pip install --quiet --disable-pip-version-check --no-deps --upgrade)
[ -x "$gdn" ] || { echo "pack_tests.sh: no gdn binary at $gdn (cargo build --release -p gdn-cli)" >&2; exit 1; }
[ -d "$defs" ] || { echo "pack_tests.sh: $defs is missing" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== pack every definition"
GDN_CACHE_DIR="$work/cache" "$gdn" pack --definition all --out "$work/packs" --definitions "$defs"

echo "== flashinfer-bench 0.1.2 data models"
"${pipi[@]}" --target "$fib_dir" flashinfer-bench==0.1.2 pydantic==2.14.4 pydantic-core==2.50.5 \
  annotated-types==0.8.0 typing-extensions==4.16.0 typing-inspection==0.4.5
export PYTHONPATH="$fib_dir${PYTHONPATH:+:$PYTHONPATH}"
python3 scripts/validate_solutions.py --definitions "$defs" "$work/packs"
python3 scripts/validate_solutions.py --definitions "$defs" --self-test "$work/packs"

echo "== the decode kernels from an empty NVRTC cache"
GDN_CACHE_DIR="$work/cold-cache" CUDA_CACHE_DISABLE=1 \
  "$gdn" pack --definition gdn_decode_qk4_v8_d128_k_last --out "$work/cold" --definitions "$defs"
python3 scripts/validate_solutions.py --definitions "$defs" --same-kernels "$work/packs" "$work/cold"

echo "== build with nvcc 13.0 and tvm-ffi, as the harness's TVM-FFI builder does"
"${pipi[@]}" --target "$cuda_dir" nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
  nvidia-cuda-runtime==13.0.96 apache-tvm-ffi==0.1.15.post2
cu="$cuda_dir/nvidia/cu13"
export GDN_PACK_NVCC="$cu/bin/nvcc" GDN_PACK_CUDA_INC="$cu/include" GDN_PACK_CUDART="$cu/lib/libcudart.so.13" \
  GDN_PACK_TVM_FFI="$cuda_dir/tvm_ffi"
python3 - "$work/packs" "$work/build" "$defs" <<'PY'
import concurrent.futures as cf, json, os, re, subprocess, sys
packs, build, defs = sys.argv[1:4]
nvcc, inc, cudart, tvm = (os.environ[k] for k in ("GDN_PACK_NVCC", "GDN_PACK_CUDA_INC", "GDN_PACK_CUDART", "GDN_PACK_TVM_FFI"))
jobs = []
for base, _, files in os.walk(packs):
    for f in files:
        if f.endswith(".json"):
            sol = json.load(open(os.path.join(base, f)))
            d = os.path.join(build, sol["definition"])
            os.makedirs(d)
            for s in sol["sources"]:
                open(os.path.join(d, s["path"]), "w").write(s["content"])
            jobs.append((sol, d))

def compile_one(job):
    sol, d = job
    inc_flags = [f"-I{inc}", f"-I{tvm}/include", f"-I{d}"]
    objs = []
    for s in sol["sources"]:
        src, obj = os.path.join(d, s["path"]), os.path.join(d, s["path"] + ".o")
        if s["path"].endswith(".cu"):
            cmd = [nvcc, "-Xcompiler", "-fPIC", "-std=c++17", "-O2", "-gencode=arch=compute_90,code=sm_90", *inc_flags, "-c", src, "-o", obj]
        elif s["path"].endswith(".cpp"):
            cmd = ["c++", "-std=c++17", "-fPIC", "-O2", *inc_flags, "-c", src, "-o", obj]
        else:
            continue
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0 or r.stderr.strip():
            return f"{sol['definition']}: {' '.join(cmd[:1])} {s['path']}: exit {r.returncode}\n{r.stderr[-3000:]}"
        objs.append(obj)
    so = os.path.join(d, "solution.so")
    r = subprocess.run(["c++", "-shared", *objs, f"-L{tvm}/lib", "-ltvm_ffi", cudart, "-o", so], capture_output=True, text=True)
    return f"{sol['definition']}: link: {r.stderr[-2000:]}" if r.returncode else None

with cf.ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as ex:
    errors = [e for e in ex.map(compile_one, jobs) if e]
for e in errors:
    print("error:", e, file=sys.stderr)
if errors:
    sys.exit(1)
print(f"{len(jobs)} solutions built")
PY
# what each library exports: the entry point's tvm-ffi symbol and nothing of gdn's host code. The harness loads
# every solution it evaluates into one process; an exported gdn symbol (an inline function's static is an
# STB_GNU_UNIQUE symbol, bound process-wide even under RTLD_LOCAL) would be shared by all of them
python3 - "$work/build" <<'PY'
import os, subprocess, sys
bad = 0
for d in sorted(os.listdir(sys.argv[1])):
    so = os.path.join(sys.argv[1], d, "solution.so")
    out = subprocess.run(["nm", "-D", "--defined-only", "-C", so], capture_output=True, text=True, check=True).stdout
    names = [line.split(None, 2)[2] for line in out.splitlines() if len(line.split(None, 2)) == 3]
    own = [n for n in names if "gdn" in n or n.startswith("run(")]
    if own or "__tvm_ffi_run" not in names:
        print(f"error: {d}: exports {own[:6]}{' and no __tvm_ffi_run' if '__tvm_ffi_run' not in names else ''}",
              file=sys.stderr)
        bad += 1
    else:
        print(f"{d}: exports __tvm_ffi_run and no gdn symbol")
sys.exit(1 if bad else 0)
PY
# load each with tvm-ffi (libcudart from the wheel; no GPU is touched before a call reaches the device check)
LD_LIBRARY_PATH="$cu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONPATH="$cuda_dir:$PYTHONPATH" \
  python3 - "$work/packs" "$work/build" "$defs" <<'PY'
import json, os, re, sys
import tvm_ffi
packs, build, defs = sys.argv[1:4]
bad = 0
for base, _, files in sorted(os.walk(packs)):
    for f in files:
        if not f.endswith(".json"):
            continue
        sol = json.load(open(os.path.join(base, f)))
        symbol = sol["spec"]["entry_point"].split("::")[1]
        d = json.load(open(os.path.join(defs, sol["definition"] + ".json")))
        want = len(d["inputs"]) + len(d["outputs"])
        fn = getattr(tvm_ffi.load_module(os.path.join(build, sol["definition"], "solution.so")), symbol)
        try:
            fn()
            msg = "called with no arguments"
        except Exception as e:  # tvm-ffi names the typed signature in its arity error
            msg = str(e)
        m = re.search(r"Expected (\d+) but got 0", msg)
        if not m or int(m.group(1)) != want:
            print(f"error: {sol['definition']}: {symbol} arity: {msg[:300]}", file=sys.stderr)
            bad += 1
        else:
            print(f"{sol['definition']}: {symbol} loaded, {want} parameters")
sys.exit(1 if bad else 0)
PY
echo "pack tests: ok"
