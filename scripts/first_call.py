"""first_call.py — time to the first result: the first ``gdn.decode`` of a fresh process on a machine whose gdn cache is
empty, which opens the device and loads every kernel module (from the CUBINs shipped in the wheel, ``gdn/cubin/``,
or compiled by NVRTC for what is not shipped), then the second call.

Usage (GPU machine, wheel installed):  python3 scripts/first_call.py [--jit]
  Each measurement runs in a child process with GDN_CACHE_DIR set to a new empty folder and CUDA_CACHE_DISABLE=1 (no
  NVRTC compute cache either). --jit also measures with shipped CUBINs turned off (GDN_CUBIN_DIR=0): every module
  compiled, ~38 s on an H200. Prints one JSON object per measurement: seconds for the CUDA context (torch), the gdn
  import, the first and second decode (B=1, qk4_v8, bf16, fp32 state), and how many modules NVRTC compiled (the
  entries the call wrote into the empty cache; 0 when every module came from the wheel).
"""

import json
import os
import subprocess
import sys
import tempfile
import time


def child():
    import math

    import torch
    import torch.nn.functional as F

    t = time.perf_counter()
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    ctx_s = time.perf_counter() - t

    t = time.perf_counter()
    import gdn

    import_s = time.perf_counter() - t

    B, H, HV, D = 1, 4, 8, 128
    g = torch.Generator(device=dev).manual_seed(0)

    def r(*s):
        return torch.randn(*s, device=dev, generator=g)

    q = F.normalize(r(B, 1, H, D), dim=-1).bfloat16()
    k = F.normalize(r(B, 1, H, D), dim=-1).bfloat16()
    v, st = r(B, 1, HV, D).bfloat16(), 0.1 * r(B, HV, D, D)
    A, dtb = torch.log(torch.rand(HV, device=dev, generator=g) * 15 + 1), r(HV)
    a, b = r(B, 1, HV).bfloat16(), r(B, 1, HV).bfloat16()
    args = (q, k, v, st, A, a, dtb, b, 1 / math.sqrt(D))
    times = []
    for _ in range(2):
        t = time.perf_counter()
        out, _new_state = gdn.decode(*args)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    cache = os.path.join(os.environ["GDN_CACHE_DIR"], "nvrtc")
    compiled = len([f for f in os.listdir(cache) if f.endswith(".gdnbin")]) if os.path.isdir(cache) else 0
    print(json.dumps({
        "shipped": os.environ.get("GDN_CUBIN_DIR") != "0",
        "context_s": round(ctx_s, 3),
        "import_s": round(import_s, 3),
        "first_decode_s": round(times[0], 3),
        "second_decode_s": round(times[1], 5),
        "modules_compiled": compiled,
        "finite": bool(torch.isfinite(out.float()).all()),
        "device": torch.cuda.get_device_name(),
        "gdn": gdn.__version__,
    }))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child()
        return 0
    runs = [{}] + ([{"GDN_CUBIN_DIR": "0"}] if "--jit" in sys.argv[1:] else [])
    rc = 0
    for extra in runs:
        with tempfile.TemporaryDirectory(prefix="gdn-empty-cache-") as empty:
            env = dict(os.environ, GDN_CACHE_DIR=empty, CUDA_CACHE_DISABLE="1", **extra)
            rc |= subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=env).returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
