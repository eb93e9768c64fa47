"""Host cost of gdn's Python calls without a GPU: torch CPU tensors, the run skipped (`gdn._gdn._skip_run`).

torch CPU tensors take the binding's path for CUDA tensors up to the launch (read through DLPack's C exchange API,
validated, destinations checked), so this separates what a call costs on the host before the launch:
  describe+validate - `gdn._gdn.plan` on the inputs (reading them and the memoised validation)
  entry             - the binding's entry point alone (`gdn._gdn.decode` with gdn.decode's 19 arguments)
  whole             - `gdn.decode` / `prefill` / `mtp` with outputs given, as an engine calls them
  python frame      - a Python function of gdn.decode's signature handing its arguments to a builtin
Thread CPU time per call (time.thread_time: other processes on the machine do not count), the minimum over 15
runs of 5,000 calls, in microseconds. The launch itself (cuLaunchKernelEx and its argument setup) is what
bench_overhead.py's host_us adds on a GPU. Run: python crates/gdn-py/tests/bench_host.py (needs torch)."""
import math
import time

import torch

import gdn
from gdn import _gdn

H, HV, D = 4, 8, 128
S = 1 / math.sqrt(D)


def per_call(fn, n=5000, reps=15):
    for _ in range(500):
        fn()
    best = float("inf")
    for _ in range(reps):
        t = time.thread_time()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time() - t) / n * 1e6)
    return best


def r(*s, dtype=torch.float32):
    return torch.randn(*s).to(dtype)


def frame(q, k, v, state, A_log=None, a=None, dt_bias=None, b=None, scale=None, *, output=None, new_state=None,
          g=None, alpha=None, beta=None, use_qk_l2norm_in_kernel=False, state_layout="k-last", state_indices=None,
          pad="negative", has_initial_state=None):
    return len((q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state, g, alpha, beta,
                use_qk_l2norm_in_kernel, state_layout, state_indices, pad, has_initial_state))


def main():
    bf = torch.bfloat16
    dec = (r(1, 1, H, D, dtype=bf), r(1, 1, H, D, dtype=bf), r(1, 1, HV, D, dtype=bf), r(1, HV, D, D), r(HV),
           r(1, 1, HV, dtype=bf), r(HV), r(1, 1, HV, dtype=bf))
    out, ns = torch.empty(1, 1, HV, D, dtype=bf), torch.empty(1, HV, D, D)
    T = 128
    pre = (r(T, H, D, dtype=bf), r(T, H, D, dtype=bf), r(T, HV, D, dtype=bf), r(1, HV, D, D), r(HV),
           r(T, HV, dtype=bf), r(HV), r(T, HV, dtype=bf), torch.tensor([0, T]))
    pout, pns = torch.empty(T, HV, D, dtype=bf), torch.empty(1, HV, D, D)
    B, TT = 16, 4
    mtp = (r(B, TT, H, D, dtype=bf), r(B, TT, H, D, dtype=bf), r(B, TT, HV, D, dtype=bf), r(B, HV, D, D),
           torch.arange(B, dtype=torch.int32), r(HV), r(B, TT, HV, dtype=bf), r(HV), r(B, TT, HV, dtype=bf), S,
           torch.empty(B, TT, HV, D, D))
    mout = torch.empty(B, TT, HV, D, dtype=bf)
    pq, pk, pv = r(B, 1, H, D, dtype=bf), r(B, 1, H, D, dtype=bf), r(B, 1, HV, D, dtype=bf)
    pool, idx = r(64, HV, D, D), torch.arange(1, B + 1, dtype=torch.int32)
    pg, pb, po = r(B, 1, HV), torch.rand(B, 1, HV), torch.empty(B, 1, HV, D, dtype=bf)
    entry = dec + (S, out, ns, None, None, None, False, "k-last", None, "negative", None)
    rows = [("describe+validate  _gdn.plan decode (8 inputs)",
             lambda: _gdn.plan("decode", dec, S, False, None, gdn._NAMES["decode"]))]
    if hasattr(_gdn, "decode"):
        rows.append(("entry              _gdn.decode (8 inputs + 2 outputs)", lambda: _gdn.decode(*entry)))
    rows += [
        ("whole              gdn.decode B=1", lambda: gdn.decode(*dec, S, output=out, new_state=ns)),
        ("whole              gdn.prefill 1x128", lambda: gdn.prefill(*pre, S, output=pout, new_state=pns)),
        ("whole              gdn.mtp B=16 T=4", lambda: gdn.mtp(*mtp, output=mout)),
        ("whole              gdn.decode pool B=16, g/beta, qk norm, null-slot",
         lambda: gdn.decode(pq, pk, pv, pool, output=po, g=pg, beta=pb, use_qk_l2norm_in_kernel=True,
                            state_indices=idx, pad="null-slot")),
        ("python frame       gdn.decode's signature", lambda: frame(*dec, S, output=out, new_state=ns)),
    ]
    _gdn._skip_run(True)
    try:
        for name, fn in rows:
            print(f"{per_call(fn):7.3f} us  {name}", flush=True)
    finally:
        _gdn._skip_run(False)


if __name__ == "__main__":
    main()
