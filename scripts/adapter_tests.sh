#!/usr/bin/env bash
# adapter_tests.sh — the engine adapters (gdn.fla, gdn.flashinfer, gdn.transformers, gdn.vllm, gdn.sglang) on torch
# CPU tensors: each against a float64 reference of the recurrence and, where the engine's own code is pure torch
# (FLA's naive reference and registry, HF transformers' Qwen3-Next / Qwen3.5 layers), against that code. The CI
# entry for the adapters; no GPU.
# Needs the gdn wheel in the venv (run scripts/python_tests.sh first); installs torch, transformers and fla-core
# there. torch from PyPI is its CUDA build (about 4.5 GB with its NVIDIA libraries; it runs on the CPU here).
# Usage: bash scripts/adapter_tests.sh [extra pytest args]     (VENV=... as python_tests.sh, default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
case $VENV in /*) ;; *) VENV="$PWD/$VENV" ;; esac
[ -x "$VENV/bin/python" ] || { echo "adapter_tests.sh: no venv at $VENV (run scripts/python_tests.sh first)" >&2; exit 1; }
"$VENV/bin/python" -c "import gdn" 2>/dev/null \
  || { echo "adapter_tests.sh: gdn is not installed in $VENV (run scripts/python_tests.sh first)" >&2; exit 1; }
start=$(date +%s)
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  torch==2.15.0 transformers==5.24.0 fla-core==0.6.0 einops==0.8.2
echo "adapter_tests.sh: torch, transformers, fla-core installed in $(( $(date +%s) - start )) s"
cd crates/gdn-py/tests
"$VENV/bin/python" -m pytest -q -p no:cacheprovider test_adapters_*.py "$@"
