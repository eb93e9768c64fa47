#!/usr/bin/env bash
# fetch_vllm_fla.sh — vLLM's own FLA fork as a peer for the GPU machine (no vLLM install, no internet there).
#
#   bash scripts/fetch_vllm_fla.sh            # HERE (dev machine), from anywhere: writes .peers3/vllm_fla/ (ignored)
#
# vLLM ships a copy of flash-linear-attention's GDN kernels as plain Python + Triton in its wheel
# (vllm/third_party/flash_linear_attention/ops; re-exported as vllm.model_executor.layers.fla.ops). This script takes
# those files verbatim from the wheel (VLLM_VERSION, default 0.33.0; VLLM_WHEEL=path reuses a wheel already
# downloaded) and adds a stand-in `vllm` package of a few small modules of our own (vllm.triton_utils, vllm.platforms,
# vllm.utils.*, vllm.model_executor.*) that provide the names those files import, so that
#
#   PYTHONPATH=.peers3/vllm_fla python3 -c "import vllm.third_party.flash_linear_attention.ops as fork"
#
# runs the fork's functions with torch and Triton alone. The stand-ins are checked here against every `from vllm...`
# import in the copied files (a newer vLLM that needs more fails this script, naming the missing name). The folder
# is ~0.3 MB; carry it as `.peers3` (crates/gdn-py/tests/test_adapters_gpu_vllm_fork.py and
# scripts/adapters_vs_peers.py find it there, or through GDN_VLLM_FLA=<path of vllm_fla>).
set -euo pipefail
whl=${VLLM_WHEEL:-}
if [ -n "$whl" ]; then whl=$(realpath "$whl"); fi
cd "$(dirname "$0")/.."
VER=${VLLM_VERSION:-0.33.0}
DEST=.peers3/vllm_fla
FORK=vllm/third_party/flash_linear_attention
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -z "$whl" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$tmp" "vllm==$VER" \
    || { echo "fetch_vllm_fla.sh: pip download vllm==$VER failed" >&2; exit 1; }
  whl=$(ls "$tmp"/vllm-*.whl | head -1)
fi
[ -f "$whl" ] || { echo "fetch_vllm_fla.sh: no wheel at '$whl' (VLLM_WHEEL)" >&2; exit 1; }
case $(basename "$whl") in
  vllm-"$VER"-*) ;;
  *) echo "fetch_vllm_fla.sh: $whl is not vllm $VER (set VLLM_VERSION to match VLLM_WHEEL)" >&2; exit 1 ;;
esac

rm -rf "$DEST" && mkdir -p "$DEST"
command -v unzip >/dev/null || { echo "fetch_vllm_fla.sh: unzip not found" >&2; exit 1; }
mkdir -p "$tmp/w" && unzip -q "$whl" "$FORK/*" -d "$tmp/w"
[ -d "$tmp/w/$FORK/ops" ] || { echo "fetch_vllm_fla.sh: $whl has no $FORK/ops" >&2; exit 1; }
mkdir -p "$DEST/$FORK"
cp -r "$tmp/w/$FORK/." "$DEST/$FORK/"
find "$DEST" -name '__pycache__' -prune -exec rm -rf {} +
touch "$DEST/vllm/third_party/__init__.py"

# ---- the stand-in `vllm` package (our own code; each module says what it stands in for) ----------------------------
S=$DEST/vllm
mkdir -p "$S/triton_utils" "$S/platforms" "$S/utils" "$S/model_executor/warmup"
cat > "$S/__init__.py" <<EOF
"""A stand-in for the \`vllm\` package that holds only vLLM $VER's FLA fork (third_party/flash_linear_attention, copied
verbatim from the wheel) and the few vLLM names it imports, written by scripts/fetch_vllm_fla.sh so that the fork runs
with torch and Triton alone. Not vLLM: nothing else of it is here."""
import importlib.util as _iu
import sys as _sys
import types as _types

__version__ = "$VER"
STANDALONE_FLA_FORK = True

if _iu.find_spec("einops") is None:
    # ops/layernorm_guard.py imports einops.rearrange for its torch reference of the gated RMSNorm, which the GDN
    # functions never call: without einops installed, the name exists and says so when used.
    _m = _types.ModuleType("einops")

    def _rearrange(*args, **kwargs):
        raise NotImplementedError("einops is not installed (standalone vLLM FLA fork)")

    _m.rearrange = _rearrange
    _sys.modules["einops"] = _m

import torch as _torch

if not hasattr(getattr(_torch, "accelerator", None), "device_index"):
    # ops/utils.py's input_guard enters torch.accelerator.device_index(i); a torch without it has the CUDA form
    _torch.accelerator.device_index = _torch.cuda.device
EOF
cat > "$S/triton_utils/__init__.py" <<'EOF'
"""Stand-in for vllm.triton_utils: Triton itself (the fork needs a working Triton; vLLM's placeholders for a
missing Triton are not reproduced)."""
import triton
import triton.language as tl

try:
    import triton.language.extra.libdevice as tldevice
except ImportError:  # older Triton layouts
    from triton.language.extra.cuda import libdevice as tldevice

HAS_TRITON = True
LOG2E = 1.4426950408889634
LOGE2 = 0.6931471805599453
EOF
cat > "$S/platforms/__init__.py" <<'EOF'
"""Stand-in for vllm.platforms.current_platform: the queries the FLA fork makes, answered from torch for the local
CUDA (or ROCm) device."""
import torch


class _Platform:
    def is_cuda(self):
        return torch.version.cuda is not None and torch.cuda.is_available()

    def is_rocm(self):
        return torch.version.hip is not None and torch.cuda.is_available()

    def is_cuda_alike(self):
        return torch.cuda.is_available()

    def is_xpu(self):
        return False

    def is_cpu(self):
        return not torch.cuda.is_available()

    def get_device_capability(self, device_id=0):
        if not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_capability(device_id)

    def is_device_capability_family(self, capability, device_id=0):
        """True when the device is <capability // 10>.x (e.g. 100 for every 10.x device)."""
        cap = self.get_device_capability(device_id)
        return cap is not None and cap[0] == capability // 10

    def is_arch_support_pdl(self):
        cap = self.get_device_capability(0) if self.is_cuda() else None
        return cap is not None and cap[0] >= 9

    def num_compute_units(self, device_id=0):
        return torch.cuda.get_device_properties(device_id).multi_processor_count


current_platform = _Platform()
EOF
cat > "$S/platforms/rocm.py" <<'EOF'
"""Stand-in for vllm.platforms.rocm (imported by the fork on ROCm only)."""


def on_gfx1x():
    return False
EOF
echo '"""Stand-in for vllm.utils: the helpers the FLA fork imports."""' > "$S/utils/__init__.py"
cat > "$S/utils/math_utils.py" <<'EOF'
"""Stand-in for vllm.utils.math_utils."""
import math

RCP_LN2 = 1.0 / math.log(2.0)


def cdiv(a, b):
    return -(a // -b)


def next_power_of_2(n):
    return 1 if n < 1 else 1 << (n - 1).bit_length()
EOF
cat > "$S/utils/platform_utils.py" <<'EOF'
"""Stand-in for vllm.utils.platform_utils."""
import torch


def num_compute_units(device_id=0):
    return torch.cuda.get_device_properties(device_id).multi_processor_count
EOF
cat > "$S/utils/gpu_sync_debug.py" <<'EOF'
"""Stand-in for vllm.utils.gpu_sync_debug: vLLM's sync checker is off unless enabled, so this is a no-op context."""
import contextlib


def gpu_sync_allowed(first_only=False):
    return contextlib.nullcontext()
EOF
cat > "$S/utils/torch_utils.py" <<'EOF'
"""Stand-in for vllm.utils.torch_utils."""
import torch


def async_tensor_h2d(data, device=None, dtype=None, out=None):
    """A host list / array / tensor copied to `device` without waiting (through pinned memory when CUDA is there)."""
    if dtype is None and out is not None:
        dtype = out.dtype
    t = data if isinstance(data, torch.Tensor) else torch.as_tensor(data)
    if dtype is not None:
        t = t.to(dtype)
    dst = out.device if out is not None else torch.device(device) if device is not None else t.device
    if dst.type == "cuda" and t.device.type == "cpu":
        t = t.contiguous().pin_memory()
    if out is not None:
        return out.copy_(t, non_blocking=True)
    return t.to(dst, non_blocking=True)
EOF
echo '"""Stand-in for vllm.model_executor (only what the FLA fork imports)."""' > "$S/model_executor/__init__.py"
cat > "$S/model_executor/custom_op.py" <<'EOF'
"""Stand-in for vllm.model_executor.custom_op.CustomOp: the base class of the fork's FusedRMSNormGated (a layer, not a
GDN function). Registration is a no-op; running such a layer is not supported here."""
import torch


class CustomOp(torch.nn.Module):
    @classmethod
    def register(cls, name):
        def deco(op_cls):
            return op_cls

        return deco

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}: vLLM custom ops do not run in the standalone FLA fork")
EOF
echo '"""Stand-in for vllm.model_executor.warmup."""' > "$S/model_executor/warmup/__init__.py"
cat > "$S/model_executor/warmup/jit_warmup.py" <<'EOF'
"""Stand-in for vllm.model_executor.warmup.jit_warmup.VllmJitKernel: the base class of the fork's layer-norm kernel
wrapper (gated RMSNorm, not a GDN function); instances can be created, their compile paths are not provided."""
from typing import Generic, TypeVar

K = TypeVar("K")


class VllmJitKernel(Generic[K]):
    def __init__(self):
        self._compiled_cache = {}

    def __getattr__(self, name):
        raise NotImplementedError(f"{type(self).__name__}.{name}: vLLM's JIT warm-up is not part of the standalone "
                                  "FLA fork")
EOF
cat > "$S/model_executor/warmup/jit_warmup_triton_helper.py" <<'EOF'
"""Stand-in for the names the fork's layernorm_guard.py imports from vllm.model_executor.warmup.
jit_warmup_triton_helper (used only by its warm-up compile keys)."""


class TritonPointerInputVariant(tuple):
    @classmethod
    def from_alignment(cls, **aligned):
        return cls(sorted(aligned.items()))


class TritonWarmupTensor:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("TritonWarmupTensor: vLLM's JIT warm-up is not part of the standalone FLA fork")


def triton_scalar_specialization_rep(value):
    """Triton's integer specialisation classes: 1, a multiple of 16, anything else."""
    value = int(value)
    return 1 if value == 1 else (16 if value % 16 == 0 else 0)
EOF

# ---- provenance, then the checks ------------------------------------------------------------------------------------
sha=$(sha256sum "$whl" | cut -d' ' -f1)
nfiles=$(find "$DEST/$FORK" -name '*.py' | wc -l)
cat > "$DEST/SOURCE.json" <<EOF
{"vllm": "$VER", "wheel": "$(basename "$whl")", "wheel_sha256": "$sha", "fork": "$FORK", "fork_py_files": $nfiles,
 "shim": "vllm/__init__.py, triton_utils, platforms, utils/*, model_executor/* (scripts/fetch_vllm_fla.sh)"}
EOF

# every absolute `vllm.` import of the copied files must name a stand-in module that defines the imported names
python3 - "$DEST" "$FORK" <<'EOF'
import ast, os, sys
root, fork = sys.argv[1], sys.argv[2]
missing = []
for dirpath, _, files in os.walk(os.path.join(root, fork)):
    for fn in files:
        if not fn.endswith(".py"):
            continue
        path = os.path.join(dirpath, fn)
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "vllm":
                mod = node.module
                base = os.path.join(root, *mod.split("."))
                src = base + ".py" if os.path.isfile(base + ".py") else os.path.join(base, "__init__.py")
                if not os.path.isfile(src):
                    missing.append(f"{os.path.relpath(path, root)}: module {mod}")
                    continue
                tree = ast.parse(open(src).read(), src)
                defined = set()
                for n in ast.walk(tree):
                    if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                        defined.add(n.name)
                    elif isinstance(n, ast.Assign):
                        defined.update(t.id for t in n.targets if isinstance(t, ast.Name))
                    elif isinstance(n, (ast.Import, ast.ImportFrom)):
                        defined.update((a.asname or a.name).split(".")[0] for a in n.names)
                for a in node.names:
                    if a.name not in defined:
                        missing.append(f"{os.path.relpath(path, root)}: {mod}.{a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "vllm":
                        missing.append(f"{os.path.relpath(path, root)}: import {a.name}")
if missing:
    sys.exit("fetch_vllm_fla.sh: the stand-in vllm package lacks:\n  " + "\n  ".join(sorted(set(missing))))
print("fetch_vllm_fla.sh: every vllm.* import of the fork resolves to the stand-in package")
EOF

# an import test where torch and Triton are installed (the GPU machine always; here when present)
if python3 -c "import torch, triton" >/dev/null 2>&1; then
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$DEST" python3 -c "
import vllm, vllm.third_party.flash_linear_attention.ops as f
assert getattr(vllm, 'STANDALONE_FLA_FORK', False), vllm.__file__
print('fetch_vllm_fla.sh: imports:', ', '.join(sorted(n for n in f.__all__)))"
else
  echo "fetch_vllm_fla.sh: torch / Triton not installed here: import test skipped"
fi
echo "fetch_vllm_fla.sh: vLLM $VER FLA fork ($nfiles files) in $DEST: $(du -sh "$DEST" | cut -f1)"
