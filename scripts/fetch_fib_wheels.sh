#!/usr/bin/env bash
# scripts/fetch_fib_wheels.sh — HERE (a machine with the internet and NVRTC): fills the ignored folder .fib/ with
# what scripts/fib_eval.sh needs on the GPU machine, which has no internet (python 3.12, torch, nvcc, ninja there):
#   .fib/wheels/  flashinfer-bench 0.1.2 (the PyPI release = git tag v0.1.2) and the packages it imports that a
#                 torch install may lack: pydantic + pydantic-core, annotated-types, typing-extensions,
#                 typing-inspection, safetensors, docstring-parser, apache-tvm-ffi 0.1.15.post2 (CPython 3.12,
#                 manylinux x86_64 builds; about 7 MB);
#   .fib/packs/   `gdn pack` of the qk4_v8 definitions (decode, prefill, MTP; about 24 MB);
#   .fib/definitions/  the published GDN definition JSONs (../shared/flashinfer-trace/definitions/gdn);
# and lists every file with its size. Carry [".fib", "target/release/gdn"] (about 35 MB; one call carries 64 MiB).
# Usage: bash scripts/fetch_fib_wheels.sh [gdn binary]   (default target/release/gdn, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
gdn=${1:-target/release/gdn}
py=(--only-binary=:all: --no-deps --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
wheels=(flashinfer-bench==0.1.2 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
  typing-extensions==4.16.0 typing-inspection==0.4.5 safetensors==0.6.2 docstring-parser==0.17.0
  apache-tvm-ffi==0.1.15.post2)
rm -rf .fib/wheels .fib/packs .fib/definitions
mkdir -p .fib/wheels
python3 -m pip download --quiet --disable-pip-version-check "${py[@]}" -d .fib/wheels "${wheels[@]}"
[ -x "$gdn" ] || cargo build --release -q -p gdn-cli
"$gdn" pack --definition gdn_decode_qk4_v8_d128_k_last --definition gdn_prefill_qk4_v8_d128_k_last \
  --definition gdn_mtp_qk4_v8_d128_k_last --out .fib/packs
cp -r ../shared/flashinfer-trace/definitions/gdn .fib/definitions
find .fib -type f -printf '%10s  %p\n' | sort -k2
du -sh .fib
