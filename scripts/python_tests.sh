#!/usr/bin/env bash
# python_tests.sh — builds the `gdn` wheel with maturin in a venv, installs it and runs the CPU pytest suite
# (crates/gdn-py/tests/test_cpu.py). The CI entry for Python; no GPU, no torch needed.
# Usage: bash scripts/python_tests.sh [extra pytest args]     (VENV=... to choose the venv, default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
case $VENV in /*) ;; *) VENV="$PWD/$VENV" ;; esac
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "python_tests.sh: $PY not found" >&2; exit 1; }
command -v cargo >/dev/null || { echo "python_tests.sh: cargo not found (needed to build the wheel)" >&2; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" || { echo "python_tests.sh: '$PY -m venv' failed (install python3-venv)" >&2; exit 1; }
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  maturin==1.16.0 numpy==2.4.6 ml_dtypes==0.6.0 pytest==9.2.0
rm -rf .whl/gdn && mkdir -p .whl/gdn
"$VENV/bin/maturin" build --release -m crates/gdn-py/Cargo.toml -o .whl/gdn
WHEEL=$(ls .whl/gdn/gdn-*.whl)
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$WHEEL"
echo "python_tests.sh: installed $WHEEL"
# Run from the tests folder so that `import gdn` resolves to the installed wheel, not the source tree.
cd crates/gdn-py/tests
"$VENV/bin/python" -m pytest -q -p no:cacheprovider test_cpu.py test_cpu_serving.py "$@"
