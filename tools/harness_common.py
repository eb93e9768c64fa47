"""What the device harnesses share: kernel source paths, NVRTC compilation and module loading, launches with a
params struct packed byte for byte, CUPTI kernel timing with the L2 flushed, the float64 reference of the gated
delta rule, the element-wise comparison at the contest tolerance, and the prefill inputs and workloads.

Used by prefill_harness.py (kernels/prefill_fused), prefill64_harness.py (kernels/prefill_chunk64),
recurrent_harness.py (kernels/recurrent.cu) and the probes. Runs on the GPU machine (torch, cuda.bindings):
importing it makes torch's primary CUDA context current, which the driver calls below then use.

Compilation goes through NVRTC via cuda.bindings, the library the Rust runtime uses, with the same include
folders: kernels/, kernels/common/ and the kernel family's own folder. Launches pass the kernel's params struct by
value as packed bytes through cuLaunchKernel, exactly as the Rust runtime does.
"""
import ctypes
import itertools
import json
import math
import os
import random
import statistics
import time
import traceback

import torch
import torch.nn.functional as F
from cuda.bindings import driver as cu
from cuda.bindings import nvrtc

TOOLS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TOOLS)
KERNELS = os.path.join(REPO, "crates", "gdn-cuda", "kernels")
CONTEST_MIX = os.path.join(REPO, "data", "contest_mix.json")
OUT = os.environ.get("OUT", "/tmp/out")
os.makedirs(OUT, exist_ok=True)
SMEM_MAX = 232448  # sm_90 opt-in dynamic shared memory per block
D = 128  # head dimension (K = V = 128)

dev = torch.device("cuda")
torch.zeros(1, device=dev)  # make torch's primary context current on this thread
T0 = time.time()
_log_file = None


def log(*a):
    s = f"[{time.time() - T0:7.1f}s] " + " ".join(str(x) for x in a)
    print(s, flush=True)
    if _log_file:
        _log_file.write(s + "\n")
        _log_file.flush()


def log_to(path):
    """Also write every log line to `path`."""
    global _log_file
    _log_file = open(path, "w")


class Results(dict):
    """A harness's JSON record: `files` maps each file written under $OUT to the keys it holds."""

    def __init__(self, files, **fields):
        super().__init__(device=torch.cuda.get_device_name(), errors=[], **fields)
        self.files = files

    def save(self):
        for name, keys in self.files.items():
            with open(os.path.join(OUT, name), "w") as f:
                json.dump({k: self[k] for k in keys if k in self}, f, indent=1)

    def error(self, what):
        """Records the exception being handled (call from an `except` block)."""
        self["errors"].append(f"{what}: " + traceback.format_exc()[-2000:])
        log("ERROR", self["errors"][-1])

    def stage(self, what, fn, *args):
        """fn(*args); an exception is recorded, so that one failing stage does not lose the others."""
        try:
            return fn(*args)
        except Exception:
            self.error(what)


# ------------------------------------------------------------------ sources and compilation
def kernel_source(family, root=KERNELS):
    """(file name, text) of a kernel family's top-level source under the kernels folder `root`: 'recurrent'
    (recurrent.cu), 'prefill_fused' or 'prefill_chunk64' (<family>/<family>.cu). Another `root` is another version
    of the kernels for an A/B, e.g. `git archive HEAD~1 crates/gdn-cuda/kernels | tar -x -C /tmp/prev`."""
    rel = "recurrent.cu" if family == "recurrent" else os.path.join(family, family + ".cu")
    with open(os.path.join(root, rel)) as f:
        return os.path.basename(rel), f.read()


def family_text(family, root=KERNELS):
    """The family's sources and headers with kernels/common's, concatenated: where a harness looks up the layout
    constants the sources assert (`static_assert(WALK_SMEM == ...)`)."""
    dirs = [os.path.join(root, "common")] + ([os.path.join(root, family)] if family != "recurrent" else [])
    top, text = kernel_source(family, root)
    parts = [text]
    for d in dirs:
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if name.endswith((".cuh", ".cu")) and name != top:
                with open(os.path.join(d, name)) as f:
                    parts.append(f.read())
    return "\n".join(parts)


def cuda_include_dirs():
    """Folders holding cuda_bf16.h: the toolkit's, then the NVRTC wheel's."""
    cands = ["/usr/local/cuda/include"]
    try:
        import nvidia
        cands += [os.path.join(p, "cu13", "include") for p in getattr(nvidia, "__path__", [])]
    except Exception:
        pass
    return [c for c in cands if os.path.exists(os.path.join(c, "cuda_bf16.h"))]


def include_dirs(family=None, root=KERNELS):
    """-I folders for a family's source: kernels/, kernels/common/, the family's folder, then CUDA's."""
    if family is None:
        return cuda_include_dirs()
    dirs = [root, os.path.join(root, "common")]
    if family != "recurrent":
        dirs.append(os.path.join(root, family))
    return dirs + cuda_include_dirs()


def ok(r, what):
    """A cuda.bindings result tuple: raises on an error code, else returns the value(s)."""
    if int(r[0]) != 0:
        raise RuntimeError(f"{what}: {r[0]}")
    return r[1] if len(r) == 2 else r[1:]


def compile_cubin(src, name, family=None, defines=(), lineinfo=False, root=KERNELS):
    """NVRTC for sm_90a: `src` (file name `name`) to a CUBIN; the log is printed, a failure raises."""
    opts = ["-arch=sm_90a", "-std=c++17"] + (["-lineinfo"] if lineinfo else []) + [f"-D{d}" for d in defines] + \
        [f"-I{d}" for d in include_dirs(family, root)]
    opts = [o.encode() for o in opts]
    t = time.time()
    prog = ok(nvrtc.nvrtcCreateProgram(src.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
    buf = b" " * ok(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
    nvrtc.nvrtcGetProgramLog(prog, buf)
    logtxt = buf.decode(errors="replace").strip("\x00 \n")
    if int(rc) != 0:
        raise RuntimeError(f"NVRTC failed ({name}): {logtxt[:5000]}")
    cubin = b" " * ok(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
    ok((nvrtc.nvrtcGetCUBIN(prog, cubin)[0], None), "get cubin")
    log(f"NVRTC {name} {' '.join(d for d in defines)} in {time.time() - t:.2f}s, {len(cubin)} bytes",
        ("log: " + logtxt[:3000]) if logtxt else "")
    return cubin


def load_module(cubin):
    return ok(cu.cuModuleLoadData(cubin), "cuModuleLoadData")


def function(modules, name, smem=0):
    """Kernel `name` from the first of `modules` (one or a list) that has it, its dynamic shared memory opted in to
    `smem` bytes; returns (function, {regs, local_bytes, max_threads})."""
    for m in modules if isinstance(modules, (list, tuple)) else [modules]:
        err, f = cu.cuModuleGetFunction(m, name.encode())
        if err == cu.CUresult.CUDA_SUCCESS:
            break
    else:
        raise RuntimeError(f"{name}: in none of the compiled modules")
    A = cu.CUfunction_attribute
    if smem:
        ok((cu.cuFuncSetAttribute(f, A.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)[0], None), "smem attr")
    attrs = {"regs": ok(cu.cuFuncGetAttribute(A.CU_FUNC_ATTRIBUTE_NUM_REGS, f), "regs"),
             "local_bytes": ok(cu.cuFuncGetAttribute(A.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f), "local"),
             "max_threads": ok(cu.cuFuncGetAttribute(A.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), "threads")}
    return f, attrs


def read_global(module, name, ctype=ctypes.c_int):
    """A `__device__` array of the module, copied to the host as a list."""
    ptr, size = ok(cu.cuModuleGetGlobal(module, name.encode()), name)
    arr = (ctype * (size // ctypes.sizeof(ctype)))()
    ok((cu.cuMemcpyDtoH(ctypes.addressof(arr), ptr, size)[0], None), name)
    return list(arr)


def ptr(t):
    return 0 if t is None else t.data_ptr()


def launch(f, grid, block, smem, params):
    """cuLaunchKernel on torch's current stream. `params`: the bytes of one by-value params struct, or a list of
    ctypes values, one per kernel argument."""
    if isinstance(params, (bytes, bytearray)):
        keep = [ctypes.create_string_buffer(bytes(params), len(params))]
    else:
        keep = list(params)
    argv = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(x) for x in keep])
    grid = tuple(grid) + (1,) * (3 - len(grid)) if isinstance(grid, tuple) else (grid, 1, 1)
    block = tuple(block) + (1,) * (3 - len(block)) if isinstance(block, tuple) else (block, 1, 1)
    stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
    err, = cu.cuLaunchKernel(f, *grid, *block, smem, stream, ctypes.addressof(argv), 0)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernel: {err}")


# ------------------------------------------------------------------ timing
_flush = None


def flush_buffer():
    """256 MB, more than 4x the L2: writing it evicts every line a previous call left."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=dev)
    return _flush


def flush_l2():
    flush_buffer().zero_()


def cuda_events(body):
    """Runs body() under torch.profiler (CUPTI); returns its GPU activities by start time: [(start, name, us)]."""
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        body()
        torch.cuda.synchronize()
    evs = [(e.time_range.start, e.name, e.device_time if hasattr(e, "device_time") else e.cuda_time)
           for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted(evs)


def timed_events(fn, iters, warmup=3):
    """GPU activities of `iters` calls of fn, the L2 flushed before each (the flush kernels included)."""
    flush_buffer()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()

    def body():
        for _ in range(iters):
            flush_l2()
            fn()
    return cuda_events(body)


def kernel_times(fn, iters=20, prefix="gdn_prefill"):
    """Pure kernel time (us) of every kernel named `prefix`... in `iters` calls of fn, L2 flushed before each."""
    return [us for _, name, us in timed_events(fn, iters) if name.startswith(prefix)]


def kernel_sum(fn, iters=20):
    """The peers' bench_peers.py method: every kernel of a call summed (fills, memsets, copies left out), per call."""
    evs = timed_events(fn, iters)
    return sum(us for _, n, us in evs if not ("FillFunctor<int>" in n or "Memset" in n or "Memcpy" in n)) / iters


def spread(ts):
    """Median, p10, p90 (us) and count of a list of times."""
    ts = sorted(ts)
    return {"median_us": statistics.median(ts), "p10_us": ts[len(ts) // 10], "p90_us": ts[(9 * len(ts)) // 10],
            "n": len(ts)}


# ------------------------------------------------------------------ reference and comparison
def reference(q, k, v, state, A_log, a, dt_bias, b, cu_, scale, keep_states=False):
    """float64 token-by-token recurrence (the definition's semantics), every sequence and head at once.
    Varlen layout: q, k [T, H, K], v [T, HV, V], a, b [T, HV], state [N, HV, V, K] or None, cu_ [N + 1].
    Returns (out [T, HV, V], final state [N, HV, V, K]) and, with keep_states (equal lengths), the list of states
    after each token step."""
    T, H, K = q.shape
    HV = v.shape[1]
    N = cu_.numel() - 1
    g = torch.exp(-torch.exp(A_log.double()) * F.softplus(a.double() + dt_bias.double()))
    beta = torch.sigmoid(b.double())
    qe = q.double().repeat_interleave(HV // H, dim=1)
    ke = k.double().repeat_interleave(HV // H, dim=1)
    vd = v.double()
    cl = cu_.tolist()
    lens = torch.tensor([cl[i + 1] - cl[i] for i in range(N)], device=q.device)
    starts = cu_[:-1]
    S = torch.zeros(N, HV, K, K, dtype=torch.float64, device=q.device)  # [N, HV, K, V]
    if state is not None:
        S = state.double().transpose(-1, -2).clone()
    out = torch.zeros(T, HV, K, dtype=torch.float64, device=q.device)
    states = []
    for i in range(int(lens.max().item()) if N else 0):
        act = (lens > i).nonzero().squeeze(1)
        t = starts[act] + i
        Sa = S[act] * g[t][:, :, None, None]
        kk, vv, qq = ke[t], vd[t], qe[t]
        u = torch.einsum("nhk,nhkv->nhv", kk, Sa)
        dlt = beta[t][:, :, None] * (vv - u)
        Sa = Sa + kk[:, :, :, None] * dlt[:, :, None, :]
        out[t] = scale * torch.einsum("nhk,nhkv->nhv", qq, Sa)
        S[act] = Sa
        if keep_states:
            states.append(S.transpose(-1, -2).clone())
    ns = S.transpose(-1, -2).contiguous()
    ns[lens == 0] = 0.0
    return (out, ns, states) if keep_states else (out, ns)


def reference_for(st, inp, ro, rs):
    """The reference a kernel with state dtype `st` must match: with a bf16 state, from the bf16-rounded input
    state (ro, rs: the reference from the input as given)."""
    if st != "bf16" or inp[3] is None:
        return ro, rs
    inp2 = list(inp)
    inp2[3] = inp2[3].bfloat16().float()
    return reference(*inp2)


def compare(x, y, rel_l2_max=None):
    """Every element at the contest tolerance (|d| <= 1e-2 or <= 1e-2 |y|), non-finite values counted as
    failures, and the rel-L2; `ok` also requires rel_l2 <= rel_l2_max when given."""
    x, y = x.double(), y.double()
    d = (x - y).abs()
    finite = torch.isfinite(x)
    nan = int((~finite).sum().item())
    bad = (d > 1e-2) & (d > 1e-2 * (y.abs() + 1e-8))
    dn = torch.nan_to_num(d, nan=1e30, posinf=1e30)
    rel = (dn.norm() / (y.norm() + 1e-300)).item()
    info = {"rel_l2": rel, "max_abs": float(dn.max().item()) if d.numel() else 0.0,
            "n_fail_tol": int(bad.sum().item()) + nan, "n_nan": nan, "n": d.numel()}
    worst = int((dn * (bad | ~finite).double() + dn * 1e-300).flatten().argmax().item()) if d.numel() else -1
    info["worst_idx"] = worst
    if info["n_fail_tol"]:
        idx, i = [], worst
        for s in reversed(x.shape):
            idx.append(i % s)
            i //= s
        info.update(worst_index=list(reversed(idx)), worst_x=x.flatten()[worst].item(),
                    worst_y=y.flatten()[worst].item())
    info["ok"] = info["n_fail_tol"] == 0 and (rel_l2_max is None or rel <= rel_l2_max)
    return info


def check_row(res, prefix, case, variant, o, ns, ro, rs, **extra):
    """Compares one run's output and new state with the reference, records and logs the row."""
    row = {"case": case, "variant": variant, "out": compare(o, ro), "state": compare(ns, rs), **extra}
    res["checks"].append(row)
    log(f"{prefix} {variant:<14} {case:<24} out {row['out']['rel_l2']:.2e} state {row['state']['rel_l2']:.2e} "
        f"fails {row['out']['n_fail_tol']}/{row['state']['n_fail_tol']} nan {row['out']['n_nan']}/"
        f"{row['state']['n_nan']} {'OK' if row['out']['ok'] and row['state']['ok'] else 'FAIL'}")
    return row


def check_summary(res):
    fails = [c for c in res["checks"] if "out" in c and not (c["out"]["ok"] and c["state"]["ok"])]
    worst_o = max((c["out"]["rel_l2"] for c in res["checks"] if "out" in c), default=float("nan"))
    worst_s = max((c["state"]["rel_l2"] for c in res["checks"] if "state" in c), default=float("nan"))
    print(f"\nchecks: {len(res['checks'])} rows, {len(fails)} with tolerance failures; worst out rel-L2 {worst_o:.2e}, "
          f"worst state rel-L2 {worst_s:.2e}; errors: {len(res['errors'])}")
    for e in res["errors"][:4]:
        print("  ", e[-600:])


# ------------------------------------------------------------------ prefill inputs and workloads
def make_inputs(lens, H=4, HV=8, seed=0, state=True, normalise=True, gates="bench", state_dtype=torch.float32,
                bscale=3.0):
    """Varlen prefill inputs (q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale). gates: 'bench' (fast
    decay, g ~ 1e-3 .. 0.5), 'slow' (long memory, g ~ 0.9 .. 0.999) or 'extreme' (decays that underflow to 0 and
    gates near 1)."""
    gen = torch.Generator(device=dev).manual_seed(seed)
    r = lambda *s: torch.randn(*s, device=dev, generator=gen)  # noqa: E731
    T, N = sum(lens), len(lens)
    cu_ = torch.tensor([0] + list(itertools.accumulate(lens)), device=dev, dtype=torch.int64)
    q, k = r(T, H, D), r(T, H, D)
    if normalise:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    q, k, v = q.bfloat16(), k.bfloat16(), r(T, HV, D).bfloat16()
    st = (0.1 * r(N, HV, D, D)).to(state_dtype) if state else None
    if gates == "bench":
        A_log = torch.log(torch.rand(HV, device=dev, generator=gen) * 15 + 1)
        dt_bias, a = r(HV), r(T, HV)
    elif gates == "slow":
        A_log = -1.0 - 2.0 * torch.rand(HV, device=dev, generator=gen)
        dt_bias, a = r(HV) * 0.5 - 2.0, r(T, HV) - 1.0
    else:
        A_log = torch.linspace(-3, 5, HV, device=dev)
        dt_bias = r(HV)
        a = torch.rand(T, HV, device=dev, generator=gen) * 80 - 40
    b = (r(T, HV) * bscale).bfloat16()
    return q, k, v, st, A_log.float(), a.bfloat16(), dt_bias.float(), b, cu_, 1.0 / math.sqrt(D)


def bench_inputs(lens, seed=0):
    """The peers' benchmark inputs (bench_peers.py prefill_inputs: qk4_v8, normalised q/k, fp32 state, the same
    draws in the same order)."""
    return make_inputs(lens, 4, 8, seed, bscale=1.0)


def outputs(T, N, HV=8, state_dtype=torch.float32, fill=None):
    """Output [T, HV, V] bf16 and new-state [N, HV, V, K] buffers (filled with `fill`, e.g. NaN, when given)."""
    mk = torch.empty if fill is None else (lambda *s, **kw: torch.full(s, fill, **kw))
    return (mk(T, HV, D, dtype=torch.bfloat16, device=dev), mk(N, HV, D, D, dtype=state_dtype, device=dev))


def anchor_configs():
    """The eight anchor prefill workloads (name, lengths): the configurations the peers are compared on."""
    rnd = random.Random(5)
    mix = [rnd.randint(8, 600) for _ in range(30)]
    return [("1x128", [128]), ("1x1024", [1024]), ("1x8192", [8192]), ("4x2048", [2048] * 4),
            ("32x256", [256] * 32), ("mix30", mix), ("1x65536", [65536]), ("64x1024", [1024] * 64)]


TARGET = {"1x128": 8, "1x1024": 20, "1x8192": 60, "4x2048": 60, "32x256": 25, "mix30": 30, "1x65536": 200,
          "64x1024": 150}  # the project's goals, us
PEERS = {"1x128": 52.3, "1x1024": 69.8, "1x8192": 131.9, "4x2048": 147.7, "32x256": 66.9, "mix30": 76.4,
         "1x65536": 423, "64x1024": 243}  # FlashInfer chunk_gated_delta_rule (SM90) on the H200, us


def contest_mix():
    """{workload name: sequence lengths} of the contest-like prefill mix (the 100 workloads `gdn bench` runs)."""
    with open(CONTEST_MIX) as f:
        return json.load(f)


def prefill_check_cases():
    """(rnd, mixed57, cases) shared by the prefill harnesses' `check`: cases are (name, lengths, H, HV, with
    initial state, gates); rnd continues the draw for harness-specific cases."""
    rnd = random.Random(7)
    mixed57 = [rnd.choice([0, 1, 2, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 129, 255, 300]) for _ in range(57)]
    cases = [
        ("edge 4/8 state", [0, 1, 63, 64, 65], 4, 8, True, "bench"),
        ("edge 4/8 nostate slow", [65, 0, 1, 64, 63], 4, 8, False, "slow"),
        ("mixed57 4/8 slow", mixed57, 4, 8, True, "slow"),
        ("mixed 8/16 slow", mixed57[:12], 8, 16, True, "slow"),
        ("mixed 16/32 bench", mixed57[12:20], 16, 32, True, "bench"),
        ("mixed 2/8 slow", mixed57[20:30], 2, 8, True, "slow"),
        ("extreme 4/8", [1, 17, 64, 200], 4, 8, True, "extreme"),
        ("extreme 2/8 nostate", [300, 5], 2, 8, False, "extreme"),
    ]
    return rnd, mixed57, cases


def prof_config():
    """PROF_CFG=NxLEN (default 1x1024): the lengths a `prof` run launches."""
    n, length = (int(x) for x in os.environ.get("PROF_CFG", "1x1024").split("x"))
    return [length] * n
