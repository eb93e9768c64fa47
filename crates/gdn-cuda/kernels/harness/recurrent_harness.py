#!/usr/bin/env python3
"""Device harness for crates/gdn-cuda/kernels/recurrent.cu (GDN decode / MTP kernels).

Compiles recurrent.cu with NVRTC (cuda.bindings.nvrtc, the same library and options as the Rust runtime;
CuPy's RawModule as a fallback), launches the kernels through the driver API with the RecurrentParams
struct packed byte for byte (struct.pack, offsets asserted below), checks every output element against a
float64 PyTorch reference written from the definitions' math, then times the kernels.

Timing method: pure GPU kernel time from CUPTI (torch.profiler), L2 flushed (256 MB zero_) before every
call, inputs rotated between two random sets, median + p10/p90 of N calls. The copy floor is measured in
the same profiler session: torch copy_ of the same bytes (a DtoD memcpy) and our own 16-byte copy kernel.

Usage (on the GPU machine, from the repository root):
  python3 crates/gdn-cuda/kernels/harness/recurrent_harness.py [all|check|time|sanitize] [--quick|--final]
  (--final: only the kernels exported by recurrent.cu, full check matrix and timings; default: the sweep list
   of sweep_variants() plus the exported kernels. FLA is timed alongside when `fla` is importable.)
Writes $OUT/recurrent_sweep.json, $OUT/recurrent_log.txt; prints a summary table last.
"""
import json
import math
import os
import statistics
import struct
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
KDIR = os.path.dirname(HERE)
SRC = os.path.join(KDIR, "recurrent.cu")
OUT = os.environ.get("OUT", "/tmp/out")
os.makedirs(OUT, exist_ok=True)
MODE = sys.argv[1] if len(sys.argv) > 1 else "all"
QUICK = "--quick" in sys.argv
T0 = time.time()
LOGF = open(os.path.join(OUT, f"recurrent_log_{MODE}.txt"), "w")


def log(*a):
    s = f"[{time.time() - T0:7.1f}s] " + " ".join(str(x) for x in a)
    print(s, flush=True)
    LOGF.write(s + "\n")
    LOGF.flush()


# ----------------------------------------------------------------------------------------------- variants
# (st, sbytes, tt, tfix, vec, rpt, warps, order, hint); names as in recurrent.cu's header.
SUFFIX = {(0, 0): "", (1, 0): "_lin", (0, 1): "_cs", (1, 1): "_lincs"}


def vname(st, tt, vec, rpt, w, order=0, hint=0):
    return f"gdn_recurrent_{st}_{tt}_v{vec}r{rpt}w{w}{SUFFIX[(order, hint)]}"


def vname_t(v):
    return vname(v[0], v[2], v[4], v[5], v[6], v[7], v[8])


def cfg_of(name):
    # gdn_recurrent_f32_t1_v4r1w4 -> dict
    parts = name.split("_")
    st, tt, rest = parts[2], parts[3], parts[4]
    suf = parts[5] if len(parts) > 5 else ""
    order = 1 if suf.startswith("lin") else 0
    hint = 1 if suf.endswith("cs") else 0
    vec = int(rest[1:rest.index("r")])
    rpt = int(rest[rest.index("r") + 1:rest.index("w")])
    w = int(rest[rest.index("w") + 1:])
    rows_cta = w * rpt * vec // 4
    return dict(name=name, st=st, tt=tt, vec=vec, rpt=rpt, warps=w, rows_cta=rows_cta, cph=128 // rows_cta,
                threads=32 * w, sbytes=4 if st == "f32" else 2, order=order, hint=hint)


DEFAULTS = []  # filled from the source's GDN_REC_EXPORT lines


def sweep_variants():
    """Round 4 (rounds 1-3 in results/recurrent_kernels.md): the leaders of rounds 1-3 only, re-timed after the
    gate-latency change (branch-free gates, gate inputs loaded first, no early return for padding)."""
    v = set()

    def add(name):
        c = cfg_of(name)
        st, tt = c["st"], c["tt"]
        v.add((st, 4 if st == "f32" else 2, tt, 1 if tt == "t1" else 0, c["vec"], c["rpt"], c["warps"], c["order"],
               c["hint"]))
    for n in """f32_t1_v4r2w8 f32_t1_v8r2w4 f32_t1_v8r1w8 f32_t1_v16r1w4 f32_t1_v4r2w4 f32_t1_v8r2w4_lin
                f32_t1_v8r2w2_lin f32_t1_v16r1w4_lin f32_t1_v8r4w1_lin f32_t1_v8r4w4_lin f32_t1_v8r4w2_lin
                f32_t1_v16r2w1_lin f32_t1_v8r4w1 f32_t1_v4r4w4 f32_t1_v4r1w4
                bf16_t1_v8r2w4 bf16_t1_v16r1w4 bf16_t1_v8r1w8 bf16_t1_v8r1w4 bf16_t1_v16r2w4 bf16_t1_v8r4w1_cs
                bf16_t1_v8r4w2 bf16_t1_v8r4w4 bf16_t1_v8r4w4_lin bf16_t1_v8r4w2_lin bf16_t1_v16r2w2_lin
                bf16_t1_v8r4w1_lin bf16_t1_v16r4w1_lin
                f32_tn_v4r2w8 f32_tn_v16r2w2 f32_tn_v4r2w2 f32_tn_v8r4w2 f32_tn_v8r4w2_lin f32_tn_v4r4w2_lin
                f32_tn_v4r8w1_lin f32_tn_v4r4w2 bf16_tn_v4r4w2 bf16_tn_v4r4w2_lin bf16_tn_v8r1w4
                bf16_tn_v4r8w2_lin""".split():
        add("gdn_recurrent_" + n)
    return sorted(v)


def parse_defaults(src):
    out = []
    block = src[src.index("#ifndef GDN_REC_NO_DEFAULT_EXPORTS"):]
    block = block[:block.index("#endif")]
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("GDN_REC_EXPORT(") and "#define" not in line:
            a = [x.strip() for x in line[len("GDN_REC_EXPORT("):-1].split(",")]
            st, sb, tt, tf, vec, rpt, w = a[0], int(a[1]), a[2], int(a[3]), int(a[4]), int(a[5]), int(a[6])
            out.append((st, sb, tt, tf, vec, rpt, w, 0, 0))
        elif line.startswith("GDN_REC_EXPORT_EX(") and "#define" not in line:
            a = [x.strip() for x in line[len("GDN_REC_EXPORT_EX("):-1].split(",")]
            out.append((a[0], int(a[1]), a[2], int(a[3]), int(a[4]), int(a[5]), int(a[6]), int(a[7]), int(a[8])))
    return out


EXTRA_SRC = r"""
// ---- harness-only: a plain 16-byte copy (grid-stride), the in-method copy floor ----
extern "C" __global__ void __launch_bounds__(256) harness_copy16(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                                                 long long n16) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
// one 16-byte element per thread, one block per 256 elements (no loop)
extern "C" __global__ void __launch_bounds__(256) harness_copy16_flat(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                                                      long long n16) {
    const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i < n16) dst[i] = src[i];
}
// four 16-byte elements per thread (all loads before the stores), one block per 1024 elements
extern "C" __global__ void __launch_bounds__(256) harness_copy16_x4(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                                                    long long n16) {
    const long long base = (long long)blockIdx.x * 1024 + threadIdx.x;
    uint4 x[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) if (base + u * 256 < n16) x[u] = src[base + u * 256];
#pragma unroll
    for (int u = 0; u < 4; ++u) if (base + u * 256 < n16) dst[base + u * 256] = x[u];
}
extern "C" __global__ void harness_empty(long long unused) {}

// ---- harness-only latency probes: the fp32 v8r2w4 decode mapping with parts of the work removed ----
// STAGE 0: state load -> store (same grid/lanes/addresses as the real kernel)
// STAGE 1: + all token inputs loaded and folded in without reductions or gates
// STAGE 2: + the shuffle reductions and the delta/output/state update, gates replaced by plain arithmetic
// (STAGE 3 = the real kernel gdn_recurrent_f32_t1_v8r2w4)
namespace probe {
using namespace gdn_rec;
template <int STAGE>
__device__ __forceinline__ void body(const RecurrentParams& p) {
    using C = Cfg<4, 8, 2, 4>;
    constexpr int RPT = 2, VEC = 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int grp = lane / C::LPR, j = lane % C::LPR;
    const u32 bx = blockIdx.x;
    const int tile = (int)(bx % C::CPH);
    const i64 bq = bx / C::CPH;
    const int hq = blockIdx.y, h = hq * (int)gridDim.z + blockIdx.z;
    const int row0 = tile * C::ROWS_CTA + (warp * C::GPW + grp) * RPT, kofs = j * C::CW;
    const i64 HV = p.num_v_heads;
    const i64 sofs = ((bq * HV + h) * KD + row0) * KD + kofs;
    u32 sraw[RPT][C::NC][4];
    const char* sp = reinterpret_cast<const char*>(p.state) + sofs * 4;
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int c = 0; c < C::NC; ++c) ld_words<4>(sraw[i][c], sp + (i64)(i * KD + c * C::CW * C::LPR) * 4);
    float s[RPT][VEC];
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int c = 0; c < C::NC; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[i][c * 4 + e] = __uint_as_float(sraw[i][c][e]);
    if constexpr (STAGE >= 1) {
        TokRaw<C, RPT> cur;
        load_tok<C, RPT>(cur, p, bq, 0, 1, h, hq, row0, kofs);
        const float a_log = __ldg(p.A_log + h), dt_b = __ldg(p.dt_bias + h);
        float kf[VEC], qf[VEC];
#pragma unroll
        for (int c = 0; c < C::NC; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                kf[c * 4 + e] = (e & 1) ? bf_hi(cur.k[c][e >> 1]) : bf_lo(cur.k[c][e >> 1]);
                qf[c * 4 + e] = (e & 1) ? bf_hi(cur.q[c][e >> 1]) : bf_lo(cur.q[c][e >> 1]);
            }
        const float g = 1.0f - 0.01f * (bf_lo(cur.a) + dt_b + a_log);  // stand-in gates (no SFU chain)
        const float beta = 0.5f + 0.01f * bf_lo(cur.b);
        float o[RPT];
        if constexpr (STAGE == 1) {
#pragma unroll
            for (int i = 0; i < RPT; ++i) {
                const float vv = (i & 1) ? bf_hi(cur.v[i >> 1]) : bf_lo(cur.v[i >> 1]);
                o[i] = vv * g;
#pragma unroll
                for (int e = 0; e < VEC; ++e) s[i][e] = fmaf(beta * vv, kf[e] + qf[e], g * s[i][e]);
            }
        } else {
            float red[2 * RPT + 1];
            float kq = 0.f;
#pragma unroll
            for (int e = 0; e < VEC; ++e) kq = fmaf(kf[e], qf[e], kq);
            red[2 * RPT] = kq;
#pragma unroll
            for (int i = 0; i < RPT; ++i) {
                float sk = 0.f, sq = 0.f;
#pragma unroll
                for (int e = 0; e < VEC; ++e) { sk = fmaf(s[i][e], kf[e], sk); sq = fmaf(s[i][e], qf[e], sq); }
                red[2 * i] = sk;
                red[2 * i + 1] = sq;
            }
#pragma unroll
            for (int off = C::LPR / 2; off >= 1; off >>= 1)
#pragma unroll
                for (int r = 0; r < 2 * RPT + 1; ++r) red[r] += __shfl_xor_sync(0xffffffffu, red[r], off);
#pragma unroll
            for (int i = 0; i < RPT; ++i) {
                const float vv = (i & 1) ? bf_hi(cur.v[i >> 1]) : bf_lo(cur.v[i >> 1]);
                const float delta = beta * (vv - g * red[2 * i]);
                o[i] = p.scale * fmaf(delta, red[2 * RPT], g * red[2 * i + 1]);
#pragma unroll
                for (int e = 0; e < VEC; ++e) s[i][e] = fmaf(delta, kf[e], g * s[i][e]);
            }
        }
        if (j == 0) {
            __nv_bfloat16* outp = reinterpret_cast<__nv_bfloat16*>(p.out) + (bq * HV + h) * KD + row0;
            u32 ow[1] = {bf_pack(o[0], o[1])};
            st_bf16_run<RPT>(outp, ow);
        }
    }
    char* np = reinterpret_cast<char*>(p.new_state) + sofs * 4;
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int c = 0; c < C::NC; ++c) {
            u32 w[4];
#pragma unroll
            for (int x = 0; x < 4; ++x) w[x] = __float_as_uint(s[i][c * 4 + x]);
            st_words<4>(np + (i64)(i * KD + c * C::CW * C::LPR) * 4, w);
        }
}
}  // namespace probe
extern "C" __global__ void __launch_bounds__(128) harness_probe0(const RecurrentParams p) { probe::body<0>(p); }
extern "C" __global__ void __launch_bounds__(128) harness_probe1(const RecurrentParams p) { probe::body<1>(p); }
extern "C" __global__ void __launch_bounds__(128) harness_probe2(const RecurrentParams p) { probe::body<2>(p); }
"""


def build_source(variants):
    src = open(SRC).read()
    body = "#define GDN_REC_NO_DEFAULT_EXPORTS\n" + src + "\n"
    for (st, sb, tt, tf, vec, rpt, w, o, hnt) in variants:
        suf = SUFFIX[(o, hnt)]
        body += f"GDN_REC_EXPORT_EX({st}, {sb}, {tt}, {tf}, {vec}, {rpt}, {w}, {o}, {hnt}, {suf})\n"
    return body + EXTRA_SRC


def cuda_include_dirs():
    cands = ["/usr/local/cuda/include"]
    try:
        import nvidia  # noqa
        for p in getattr(nvidia, "__path__", []):
            cands.append(os.path.join(p, "cu13", "include"))
    except Exception:
        pass
    return [c for c in cands if os.path.exists(os.path.join(c, "cuda_bf16.h"))]


NVRTC_OPTS = ["-arch=sm_90a", "-std=c++17", "-lineinfo"]


def compile_nvrtc(code):
    from cuda.bindings import nvrtc
    inc = cuda_include_dirs()
    opts = NVRTC_OPTS + [f"-I{KDIR}"] + [f"-I{i}" for i in inc[:1]]
    t = time.time()
    err, prog = nvrtc.nvrtcCreateProgram(code.encode(), b"recurrent.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    bopts = [o.encode() for o in opts]
    err, = nvrtc.nvrtcCompileProgram(prog, len(bopts), bopts)
    _, n = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, buf)
    logtxt = buf.decode(errors="replace").rstrip("\0")
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError("NVRTC failed:\n" + logtxt[:5000])
    _, n = nvrtc.nvrtcGetCUBINSize(prog)
    cub = b" " * n
    nvrtc.nvrtcGetCUBIN(prog, cub)
    log(f"NVRTC ok in {time.time() - t:.2f}s, cubin {n} bytes, opts {opts}", ("log: " + logtxt[:500]) if logtxt.strip() else "")
    return cub


# ----------------------------------------------------------------------------------------------- device
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False
torch.zeros(1, device=dev)  # create the primary context before the driver calls
import cupy  # noqa: E402
from cupy.cuda import driver as cudrv  # noqa: E402

cupy.cuda.Device(0).use()


class Module:
    def __init__(self, variants):
        self.variants = variants
        code = build_source(variants)
        self.raw = None
        try:
            self.cubin = compile_nvrtc(code)
            self.mod = cudrv.moduleLoadData(self.cubin)
            getf = lambda n: cudrv.moduleGetFunction(self.mod, n)  # noqa: E731
        except ImportError:  # no cuda.bindings: CuPy's RawModule is NVRTC too
            log("cuda.bindings missing: compiling with cupy.RawModule")
            opts = tuple(NVRTC_OPTS + [f"-I{KDIR}"] + [f"-I{i}" for i in cuda_include_dirs()[:1]])
            self.raw = cupy.RawModule(code=code, options=opts, backend="nvrtc")
            getf = lambda n: self.raw.get_function(n).ptr  # noqa: E731
        self.fn = {}
        self.attrs = {}
        for v in variants:
            n = vname_t(v)
            f = getf(n)
            self.fn[n] = f
            self.attrs[n] = dict(regs=cudrv.funcGetAttribute(4, f), local_bytes=cudrv.funcGetAttribute(3, f),
                                 max_threads=cudrv.funcGetAttribute(0, f))
        self.copy_fn = getf("harness_copy16")
        self.copy_flat_fn = getf("harness_copy16_flat")
        self.copy_x4_fn = getf("harness_copy16_x4")
        self.empty_fn = getf("harness_empty")
        self.probe_fn = {k: getf(f"harness_probe{k}") for k in range(3)}
        self.names = list(self.fn.keys())
        bad = {k: a for k, a in self.attrs.items() if a["local_bytes"] != 0}
        assert not bad, f"local memory (spills) in {bad}"

    def launch_raw(self, f, grid, block, argbytes, stream=None):
        import ctypes
        buf = ctypes.create_string_buffer(argbytes, len(argbytes))
        argv = (ctypes.c_void_p * 1)(ctypes.cast(buf, ctypes.c_void_p))
        s = torch.cuda.current_stream().cuda_stream if stream is None else stream
        cudrv.launchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, s,
                           ctypes.addressof(argv), 0)

    def copy16(self, src, dst, kind="persistent"):
        import ctypes
        n16 = src.numel() * src.element_size() // 16
        # three pointer-sized args: pack each separately
        a0 = ctypes.c_uint64(src.data_ptr())
        a1 = ctypes.c_uint64(dst.data_ptr())
        a2 = ctypes.c_int64(n16)
        argv = (ctypes.c_void_p * 3)(ctypes.cast(ctypes.pointer(a0), ctypes.c_void_p),
                                     ctypes.cast(ctypes.pointer(a1), ctypes.c_void_p),
                                     ctypes.cast(ctypes.pointer(a2), ctypes.c_void_p))
        if kind == "persistent":
            f, grid = self.copy_fn, max(1, min((n16 + 255) // 256, 132 * 8))
        elif kind == "flat":
            f, grid = self.copy_flat_fn, (n16 + 255) // 256
        else:
            f, grid = self.copy_x4_fn, (n16 + 1023) // 1024
        cudrv.launchKernel(f, grid, 1, 1, 256, 1, 1, 0, torch.cuda.current_stream().cuda_stream,
                           ctypes.addressof(argv), 0)

    def empty(self):
        import ctypes
        a0 = ctypes.c_uint64(0)
        argv = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(a0), ctypes.c_void_p))
        cudrv.launchKernel(self.empty_fn, 1, 1, 1, 32, 1, 1, 0, torch.cuda.current_stream().cuda_stream,
                           ctypes.addressof(argv), 0)


# RecurrentParams: 12 pointers, 2 x i64, f32, 3 x i32 = 128 bytes (offsets in recurrent.cu's comments)
PFMT = "<12Q2qf3i"
assert struct.calcsize(PFMT) == 128
_OFFS = {"q": 0, "k": 8, "v": 16, "a": 24, "b": 32, "A_log": 40, "dt_bias": 48, "state": 56, "new_state": 64,
         "intermediate": 72, "out": 80, "state_indices": 88, "batch": 96, "num_state_rows": 104, "scale": 112,
         "seq_len": 116, "num_qk_heads": 120, "num_v_heads": 124}


def ptr(t):
    return 0 if t is None else t.data_ptr()


def pack_params(q, k, v, a, b, A_log, dt_bias, state, new_state, inter, out, idx, B, rows, scale, T, H, HV):
    by = struct.pack(PFMT, ptr(q), ptr(k), ptr(v), ptr(a), ptr(b), ptr(A_log), ptr(dt_bias), ptr(state),
                     ptr(new_state), ptr(inter), ptr(out), ptr(idx), B, rows, scale, T, H, HV)
    # offsets self-check (matches the comments in recurrent.cu)
    assert struct.unpack_from("<q", by, _OFFS["batch"])[0] == B
    assert struct.unpack_from("<f", by, _OFFS["scale"])[0] == struct.unpack("<f", struct.pack("<f", scale))[0]
    assert struct.unpack_from("<i", by, _OFFS["num_v_heads"])[0] == HV
    return by


def launch(M, name, inp, state, new_state, inter, out, idx, rows, T):
    c = cfg_of(name)
    q, k, v, a, b, A_log, dt_bias, scale = inp
    B, _, H, _ = q.shape
    HV = v.shape[2]
    by = pack_params(q, k, v, a, b, A_log, dt_bias, state, new_state, inter, out, idx, B, rows, scale, T, H, HV)
    grid = (B * c["cph"], H, HV // H) if c["order"] == 0 else (B * HV * c["cph"], 1, 1)
    M.launch_raw(M.fn[name], grid, (c["threads"], 1, 1), by)


# ----------------------------------------------------------------------------------------------- reference
def ref_run(inp, S0, T):
    """float64 reference from the definitions' math. S0: float64 [B, HV, V, K] (already gathered) or None.
    Returns out [B, T, HV, V] float64, list of states after each token [B, HV, V, K] float64."""
    q, k, v, a, b, A_log, dt_bias, scale = inp
    B, _, H, K = q.shape
    HV = v.shape[2]
    x = a.double() + dt_bias.double()
    g = torch.exp(-torch.exp(A_log.double()) * F.softplus(x))  # [B,T,HV]
    beta = torch.sigmoid(b.double())
    qe = q.double().repeat_interleave(HV // H, dim=2)
    ke = k.double().repeat_interleave(HV // H, dim=2)
    S = torch.zeros(B, HV, K, K, dtype=torch.float64, device=q.device) if S0 is None else S0.clone()
    outs, states = [], []
    for t in range(T):
        S = g[:, t, :, None, None] * S
        u = torch.einsum("bhvk,bhk->bhv", S, ke[:, t])
        delta = beta[:, t, :, None] * (v[:, t].double() - u)
        S = S + delta[..., :, None] * ke[:, t, :, None, :]
        outs.append(scale * torch.einsum("bhvk,bhk->bhv", S, qe[:, t]))
        states.append(S)
    return torch.stack(outs, 1), states


def cmp(x, y, what, rel_l2_max=None):
    """contest tolerance on every element + NaN/inf + optional rel-L2; returns (ok, info)."""
    x = x.double()
    y = y.double()
    nonfinite = int((~torch.isfinite(x)).sum().item())
    d = (x - y).abs()
    bad = (d > 1e-2) & (d > 1e-2 * (y.abs() + 1e-8))
    nbad = int(bad.sum().item()) + nonfinite
    rel = (d.nan_to_num(1e30).norm() / (y.norm() + 1e-300)).item()
    info = {"what": what, "n": x.numel(), "nbad": nbad, "nonfinite": nonfinite, "rel_l2": rel,
            "max_abs": d.nan_to_num(1e30).max().item() if x.numel() else 0.0}
    if nbad:
        flat = (d.nan_to_num(1e30) * bad.double() + (~torch.isfinite(x)).double() * 1e30).flatten()
        i = int(flat.argmax().item())
        idx = []
        for s in reversed(x.shape):
            idx.append(i % s)
            i //= s
        info["worst_index"] = list(reversed(idx))
        info["worst_x"] = x.flatten()[int(flat.argmax().item())].item()
        info["worst_y"] = y.flatten()[int(flat.argmax().item())].item()
    ok = nbad == 0 and (rel_l2_max is None or rel <= rel_l2_max)
    info["ok"] = ok
    return ok, info


# ----------------------------------------------------------------------------------------------- inputs
D = 128


def make_inputs(B, T, H, HV, seed, normalize, gen_dev=dev):
    g = torch.Generator(device=gen_dev).manual_seed(seed)
    r = lambda *s: torch.randn(*s, device=gen_dev, generator=g)  # noqa: E731
    q = r(B, T, H, D)
    k = r(B, T, H, D)
    if normalize:
        q = F.normalize(q, dim=-1)
        k = F.normalize(k, dim=-1)
    q, k = q.bfloat16(), k.bfloat16()
    v = r(B, T, HV, D).bfloat16()
    a = r(B, T, HV).bfloat16()
    b = r(B, T, HV).bfloat16()
    A_log = torch.log(torch.rand(HV, device=gen_dev, generator=g) * 15 + 1)
    dt_bias = r(HV)
    scale = 1.0 / math.sqrt(D)
    return (q, k, v, a, b, A_log, dt_bias, scale)


def make_state(rows, HV, sdt, seed):
    g = torch.Generator(device=dev).manual_seed(seed + 1000)
    return (0.1 * torch.randn(rows, HV, D, D, device=dev, generator=g)).to(sdt)


RESULTS = {"checks": [], "fails": [], "timing": [], "attrs": {}, "errors": []}


def save():
    fn = "recurrent_sweep.json" if MODE == "all" else f"recurrent_sweep_{MODE}.json"
    with open(os.path.join(OUT, fn), "w") as f:
        json.dump(RESULTS, f, indent=1)


def run_case(M, names, *, B, T=1, H=4, HV=8, sdt=torch.float32, normalize=False, has_state=True,
             inplace=False, write_new=True, inter=False, pad=False, pool_extra=0, big_idx=None, seed=0, tag=""):
    """One test configuration, run on every kernel in `names`; every output element checked."""
    inp = make_inputs(B, T, H, HV, seed, normalize)
    use_idx = pad or pool_extra > 0 or big_idx is not None
    if big_idx is not None:
        rows = big_idx[0]
        idx_list = big_idx[1]
        assert len(idx_list) == B
    else:
        rows = B + pool_extra
        if use_idx:
            gperm = torch.Generator().manual_seed(seed + 7)
            perm = torch.randperm(rows, generator=gperm)[:B].tolist()
            idx_list = [(-1 if (pad and i % 3 == 1) else perm[i]) for i in range(B)]
        else:
            idx_list = list(range(B))
    idx = torch.tensor(idx_list, dtype=torch.int32, device=dev) if use_idx else None
    valid = [i for i in range(B) if idx_list[i] >= 0]
    vrows = [idx_list[i] for i in valid]
    pool0 = make_state(rows, HV, sdt, seed) if has_state else None
    # reference on the gathered valid rows
    S0 = None
    if has_state:
        S0 = torch.zeros(B, HV, D, D, dtype=torch.float64, device=dev)
        if valid:
            S0[valid] = pool0[vrows].double()
    ro, rstates = ref_run(inp, S0, T)
    res_all = True
    sfloat = sdt == torch.float32
    state_rel = 1e-6 if sfloat else 4e-3
    for n in names:
        c = cfg_of(n)
        if c["tt"] == "t1" and T != 1:
            continue
        if (c["st"] == "f32") != sfloat:
            continue
        state = pool0.clone() if has_state else None
        if inplace:
            assert has_state
            new_state = state
        elif write_new:
            new_state = torch.full((rows, HV, D, D), float("nan"), dtype=sdt, device=dev)
        else:
            new_state = None
        interb = torch.full((rows, T, HV, D, D), float("nan"), dtype=torch.float32, device=dev) if inter else None
        out = torch.full((B, T, HV, D), float("nan"), dtype=torch.bfloat16, device=dev)
        launch(M, n, inp, state, new_state, interb, out, idx, rows, T)
        torch.cuda.synchronize()
        infos = []
        ok = True
        # outputs: valid requests vs reference, padded requests exactly zero
        o1, i1 = cmp(out[valid].float(), ro[valid], "out")
        ok &= o1
        infos.append(i1)
        padded = [i for i in range(B) if idx_list[i] < 0]
        if padded:
            z = out[padded]
            zok = bool((z == 0).all().item())
            ok &= zok
            infos.append({"what": "pad_out_zero", "ok": zok})
        if new_state is not None:
            o2, i2 = cmp(new_state[vrows].float(), rstates[-1][valid], "new_state", state_rel)
            ok &= o2
            infos.append(i2)
            others = sorted(set(range(rows)) - set(vrows))
            if others:
                if inplace:
                    uok = bool((new_state[others] == pool0[others]).all().item())
                else:
                    uok = bool(torch.isnan(new_state[others].float()).all().item())
                ok &= uok
                infos.append({"what": "untouched_rows", "ok": uok})
        if has_state and not inplace:
            sok = bool((state == pool0).all().item())  # input state never written out-of-place
            ok &= sok
            if not sok:
                infos.append({"what": "input_state_modified", "ok": False})
        if inter:
            for t in range(T):
                o3, i3 = cmp(interb[vrows, t], rstates[t][valid], f"inter[t={t}]", 1e-6 * (t + 1))
                ok &= o3
                if not o3 or t == T - 1:
                    infos.append(i3)
            others = sorted(set(range(rows)) - set(vrows))
            if others:
                uok = bool(torch.isnan(interb[others]).all().item())
                ok &= uok
                infos.append({"what": "inter_untouched_rows", "ok": uok})
        rec = {"kernel": n, "tag": tag, "B": B, "T": T, "H": H, "HV": HV, "state": "f32" if sfloat else "bf16",
               "normalize": normalize, "has_state": has_state, "inplace": inplace, "write_new": write_new,
               "inter": inter, "pad": pad, "rows": rows, "ok": bool(ok), "infos": infos}
        RESULTS["checks"].append(rec)
        if not ok:
            RESULTS["fails"].append(rec)
            log("FAIL", n, tag, {k: rec[k] for k in ("B", "T", "H", "HV", "state", "inplace", "inter", "pad")},
                [i for i in infos if not i.get("ok", True)][:3])
        res_all &= ok
        del state, new_state, interb, out
    return res_all


def run_checks(M, quick=False):
    names = M.names
    defaults = [vname_t(v) for v in DEFAULTS]
    n0 = len(RESULTS["checks"])
    Bs = [1, 2, 3, 4, 7, 8, 16, 33, 64, 128, 256, 1024]
    if quick:
        Bs = [1, 3, 33]
    for B in Bs:  # qk4_v8, raw randn q/k (as flashinfer-bench draws them), fp32 + bf16 state
        nm = names if B <= 256 else defaults
        run_case(M, nm, B=B, seed=B, tag="decode_raw")
        run_case(M, nm, B=B, sdt=torch.bfloat16, seed=B + 1, tag="decode_raw_bf16")
    for (H, HV) in [(16, 32), (8, 16), (2, 8), (1, 1)]:
        for B in ([1, 7, 64] if not quick else [7]):
            run_case(M, names, B=B, H=H, HV=HV, seed=B * 3 + H, tag=f"heads{H}_{HV}")
            run_case(M, defaults, B=B, H=H, HV=HV, sdt=torch.bfloat16, seed=B * 5 + H, tag=f"heads{H}_{HV}_bf16")
    for B in [4, 256]:
        run_case(M, names, B=B, normalize=True, seed=11 + B, tag="decode_norm")
    for B in [3, 64]:
        run_case(M, names, B=B, has_state=False, seed=21 + B, tag="no_state")
        run_case(M, names, B=B, has_state=False, sdt=torch.bfloat16, seed=22 + B, tag="no_state_bf16")
    for B in [5, 128]:
        run_case(M, names, B=B, inplace=True, seed=31 + B, tag="inplace")
        run_case(M, names, B=B, inplace=True, sdt=torch.bfloat16, seed=32 + B, tag="inplace_bf16")
    for B in [9, 64]:
        run_case(M, names, B=B, inplace=True, pad=True, pool_extra=5, seed=41 + B, tag="pad_perm_inplace")
        run_case(M, names, B=B, pad=True, pool_extra=3, inter=True, seed=42 + B, tag="pad_perm_inter_T1")
        run_case(M, names, B=B, pad=True, pool_extra=4, sdt=torch.bfloat16, seed=43 + B, tag="pad_perm_bf16")
    # MTP (T > 1): normalised q/k (raw randn k makes the recurrence blow up over tokens)
    tn = [n for n in names if cfg_of(n)["tt"] == "tn"]
    for T in range(2, 9):
        for B in ([1, 3, 16, 64] if not quick else [3]):
            run_case(M, tn, B=B, T=T, normalize=True, pad=(B >= 3), pool_extra=2, inter=True, write_new=False,
                     seed=100 * T + B, tag="mtp_inter_nopool")
        run_case(M, tn, B=5, T=T, normalize=True, pad=True, pool_extra=2, inter=False, inplace=True,
                 seed=100 * T + 55, tag="mtp_inplace")
        run_case(M, tn, B=6, T=T, normalize=True, pool_extra=1, inter=True, write_new=True,
                 seed=100 * T + 66, tag="mtp_inter_new")
    for T in (2, 4, 8):
        run_case(M, tn, B=16, T=T, normalize=True, sdt=torch.bfloat16, pad=True, pool_extra=2, inter=True,
                 inplace=True, seed=500 + T, tag="mtp_bf16")
        run_case(M, tn, B=7, T=T, H=16, HV=32, normalize=True, pad=True, pool_extra=2, inter=True,
                 write_new=False, seed=600 + T, tag="mtp_heads16_32")
        run_case(M, tn, B=4, T=T, has_state=False, normalize=True, inter=True, seed=700 + T, tag="mtp_nostate")
    if not quick:
        # a pool past 2^31 elements (int32 offset overflow, FlashInfer #3230): 17000 rows x 8 heads x 64 KB
        try:
            run_case(M, defaults, B=4, big_idx=(17000, [16999, 8191, 4103, -1]), inplace=True, seed=900,
                     tag="big_pool")
        except torch.OutOfMemoryError:
            RESULTS["errors"].append("big_pool: OOM")
    chk = RESULTS["checks"][n0:]
    log(f"checks: {len(chk)} runs, {sum(1 for c in chk if not c['ok'])} failed")
    worst = {}
    for c in chk:
        for i in c["infos"]:
            if "rel_l2" in i:
                key = (c["state"], i["what"].split("[")[0], c["normalize"], c["T"] > 1)
                worst[key] = max(worst.get(key, 0.0), i["rel_l2"])
    RESULTS["worst_rel_l2"] = {str(k): v for k, v in worst.items()}
    log("worst rel-L2 by (state, tensor, normalised, T>1):", RESULTS["worst_rel_l2"])
    save()


# ----------------------------------------------------------------------------------------------- timing
_flush = None
_flush_sum = None


def do_flush(mode):
    if mode == "dirty":
        _flush.zero_()          # as shared/peers/bench_peers.py: L2 left full of dirty lines
    else:
        _flush_sum.add_(_flush.sum())  # read-only sweep: L2 left full of clean lines


def profile_seq(calls, iters, flush="dirty"):
    """calls: list of (label, fn, n_kernels_per_call). Runs iters rounds: for each label, flush L2 then call.
    Returns {label: [us per call ...]} from CUPTI, by launch order."""
    from torch.profiler import profile, ProfilerActivity
    for _ in range(2):
        for (_, fn, _) in calls:
            fn(0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for it in range(iters):
            for (_, fn, _) in calls:
                do_flush(flush)
                fn(it)
        torch.cuda.synchronize()
    evs = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        n = e.name
        if not (n.startswith("gdn_recurrent") or n.startswith("harness_") or "Memcpy" in n):
            continue  # L2-flush kernels / memsets
        evs.append((e.time_range.start, n, e.device_time if hasattr(e, "device_time") else e.cuda_time))
    evs.sort()
    expected = []
    for it in range(iters):
        for (lab, _, nk) in calls:
            expected += [lab] * nk
    res = {lab: [] for (lab, _, _) in calls}
    if len(evs) != len(expected):
        RESULTS["errors"].append(f"profile: {len(evs)} events for {len(expected)} expected")
        log("WARN profile event count", len(evs), len(expected))
        return None
    for (st, n, d), lab in zip(evs, expected):
        if (lab.startswith("gdn_recurrent") or lab.startswith("harness")) and n != lab:
            RESULTS["errors"].append(f"profile order mismatch {n} vs {lab}")
            return None
        res[lab].append(d)
    return res


def stats(xs):
    xs = sorted(xs)
    if not xs:
        return None
    q = lambda p: xs[min(len(xs) - 1, max(0, int(round(p * (len(xs) - 1)))))]  # noqa: E731
    return {"med": statistics.median(xs), "p10": q(0.1), "p90": q(0.9), "n": len(xs)}


def floor_calls(M, src, dst):
    return [("copy_torch", (lambda it: dst.copy_(src)), 1),
            ("copy16_persist", (lambda it: M.copy16(src, dst, "persistent")), 1),
            ("copy16_flat", (lambda it: M.copy16(src, dst, "flat")), 1),
            ("copy16_x4", (lambda it: M.copy16(src, dst, "x4")), 1),
            ("empty", (lambda it: M.empty()), 1)]


def time_decode(M, sdt, Bs, iters, names=None, flush="dirty"):
    st = "f32" if sdt == torch.float32 else "bf16"
    if names is None:
        names = [n for n in M.names if cfg_of(n)["st"] == st and cfg_of(n)["tt"] == "t1"]
        names += [n for n in M.names if cfg_of(n)["st"] == st and cfg_of(n)["tt"] == "tn"
                  and cfg_of(n)["hint"] == 0 and cfg_of(n)["order"] == 0][:3]
    H, HV = 4, 8
    for B in Bs:
        nb = names[B] if isinstance(names, dict) else names
        sets = []
        for sidx in range(2):
            inp = make_inputs(B, 1, H, HV, 1000 + sidx + B, normalize=False)
            state = make_state(B, HV, sdt, 2000 + sidx + B)
            new_state = torch.empty_like(state)
            out = torch.empty(B, 1, HV, D, dtype=torch.bfloat16, device=dev)
            sets.append((inp, state, new_state, out))
        calls = []
        for n in nb:
            calls.append((n, (lambda it, n=n: launch(M, n, sets[it % 2][0], sets[it % 2][1], sets[it % 2][2], None,
                                                      sets[it % 2][3], None, B, 1)), 1))
        dst = torch.empty_like(sets[0][1])
        calls += floor_calls(M, sets[0][1], dst)
        res = profile_seq(calls, iters, flush)
        if res is None:
            continue
        row = {"kind": "decode", "flush": flush, "state": st, "B": B, "H": H, "HV": HV,
               "state_bytes": sets[0][1].numel() * sets[0][1].element_size()}
        for lab, xs in res.items():
            row[lab] = stats(xs)
        RESULTS["timing"].append(row)
        best = min(nb, key=lambda n: row[n]["med"])
        log(f"decode[{flush}] {st} B={B:5d}: best {best} {row[best]['med']:.2f}us  copy_torch "
            f"{row['copy_torch']['med']:.2f} x4 {row['copy16_x4']['med']:.2f} flat {row['copy16_flat']['med']:.2f} "
            f"persist {row['copy16_persist']['med']:.2f} empty {row['empty']['med']:.2f}")
        save()
        del sets, dst


def time_mtp(M, sdt, Bs, Ts, iters):
    st = "f32" if sdt == torch.float32 else "bf16"
    names = [n for n in M.names if cfg_of(n)["st"] == st and cfg_of(n)["tt"] == "tn"]
    H, HV = 4, 8
    for T in Ts:
        for B in Bs:
            sets = []
            for sidx in range(2):
                inp = make_inputs(B, T, H, HV, 3000 + sidx + B + T, normalize=True)
                pool = make_state(B, HV, sdt, 4000 + sidx + B)
                idx = torch.randperm(B, device=dev).to(torch.int32)
                inter = torch.empty(B, T, HV, D, D, dtype=torch.float32, device=dev)
                out = torch.empty(B, T, HV, D, dtype=torch.bfloat16, device=dev)
                sets.append((inp, pool, idx, inter, out))
            calls = []
            for n in names:
                calls.append((n, (lambda it, n=n: launch(M, n, sets[it % 2][0], sets[it % 2][1], None, sets[it % 2][3],
                                                          sets[it % 2][4], sets[it % 2][2], B, T)), 1))
            sbytes = sets[0][1].numel() * sets[0][1].element_size()
            ibytes = sets[0][3].numel() * 4
            # floor: read the state once + write T fp32 states = a copy of (sbytes + ibytes) / 2 bytes
            nfl = (sbytes + ibytes) // 2 // 4
            fsrc = torch.randn(nfl, device=dev)
            fdst = torch.empty_like(fsrc)
            calls += floor_calls(M, fsrc, fdst)
            res = profile_seq(calls, iters)
            if res is None:
                continue
            row = {"kind": "mtp", "state": st, "B": B, "T": T, "H": H, "HV": HV, "bytes": sbytes + ibytes}
            for lab, xs in res.items():
                row[lab] = stats(xs)
            RESULTS["timing"].append(row)
            best = min(names, key=lambda n: row[n]["med"])
            log(f"mtp {st} T={T} B={B:4d}: best {best} {row[best]['med']:.2f}us  floor(copy_torch) "
                f"{row['copy_torch']['med']:.2f}  copy16_x4 {row['copy16_x4']['med']:.2f}")
            save()
            del sets, fsrc, fdst


def launch_probe(M, k, inp, state, new_state, out, B):
    q, kk, v, a, b, A_log, dt_bias, scale = inp
    H, HV = q.shape[2], v.shape[2]
    by = pack_params(q, kk, v, a, b, A_log, dt_bias, state, new_state, None, out, None, B, B, scale, 1, H, HV)
    M.launch_raw(M.probe_fn[k], (B * 8, H, HV // H), (128, 1, 1), by)


def time_probes(M, Bs, iters):
    """Latency attribution on the fp32 v8r2w4 mapping (see EXTRA_SRC)."""
    H, HV = 4, 8
    for B in Bs:
        sets = []
        for sidx in range(2):
            inp = make_inputs(B, 1, H, HV, 5000 + sidx + B, normalize=False)
            state = make_state(B, HV, torch.float32, 6000 + sidx + B)
            sets.append((inp, state, torch.empty_like(state), torch.empty(B, 1, HV, D, dtype=torch.bfloat16, device=dev)))
        calls = []
        for k in range(3):
            calls.append((f"harness_probe{k}", (lambda it, k=k: launch_probe(M, k, *sets[it % 2], B)), 1))
        n = "gdn_recurrent_f32_t1_v8r2w4"
        if n in M.fn:
            calls.append((n, (lambda it: launch(M, n, sets[it % 2][0], sets[it % 2][1], sets[it % 2][2], None,
                                                sets[it % 2][3], None, B, 1)), 1))
        dst = torch.empty_like(sets[0][1])
        calls += floor_calls(M, sets[0][1], dst)
        res = profile_seq(calls, iters)
        if res is None:
            continue
        row = {"kind": "probe", "state": "f32", "B": B}
        for lab, xs in res.items():
            row[lab] = stats(xs)
        RESULTS["probes"] = RESULTS.get("probes", []) + [row]
        log(f"probes B={B}: " + "  ".join(f"{lab.replace('harness_', '').replace('gdn_recurrent_', '')} "
                                          f"{row[lab]['med']:.2f}" for lab in res))
        save()


def kernel_sum_peers(fn, iters=20):
    """shared/peers/bench_peers.py's kernel_sum, verbatim method (Memcpy/Memset/Fill excluded, sum / iters)."""
    from torch.profiler import profile, ProfilerActivity
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            _flush.zero_()
            fn()
        torch.cuda.synchronize()
    tot = 0.0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        n = e.name
        if "FillFunctor<int>" in n or "Memset" in n or "Memcpy" in n:
            continue
        tot += e.device_time if hasattr(e, "device_time") else e.cuda_time
    return tot / iters


def try_fla():
    try:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
        return fused_recurrent_gated_delta_rule
    except Exception:
        RESULTS["errors"].append("fla import: " + traceback.format_exc()[-300:])
        return None


def time_peers_method(M, picks):
    """Our kernels and references timed with the peers' exact method, for comparability with ANCHORS.md;
    FLA's fused_recurrent (the anchors' best decode peer) in the same process when it is importable."""
    H, HV = 4, 8
    rows = []
    e = kernel_sum_peers(lambda: M.empty())
    rows.append({"what": "empty", "us": e})
    fr = try_fla()
    for (st, B, n) in picks:
        sdt = torch.float32 if st == "f32" else torch.bfloat16
        inp = make_inputs(B, 1, H, HV, 7000 + B, normalize=False)
        state = make_state(B, HV, sdt, 8000 + B)
        new_state = torch.empty_like(state)
        out = torch.empty(B, 1, HV, D, dtype=torch.bfloat16, device=dev)
        us = kernel_sum_peers(lambda: launch(M, n, inp, state, new_state, None, out, None, B, 1))
        dst = torch.empty_like(state)
        cx4 = kernel_sum_peers(lambda: M.copy16(state, dst, "x4"))
        cfl = kernel_sum_peers(lambda: M.copy16(state, dst, "flat"))
        fla_us = None
        if fr is not None and st == "f32":
            q, k, v, a, b, A_log, dt_bias, scale = inp
            st2 = state.clone()

            def fla_call():
                return fr(q, k, v, g=a, beta=b, scale=scale, initial_state=st2, output_final_state=True,
                          use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True,
                          state_v_first=True)
            try:
                fo, fs = fla_call()
                # FLA's answer against ours on the same inputs (sanity of the comparison)
                launch(M, n, inp, state, new_state, None, out, None, B, 1)
                torch.cuda.synchronize()
                rows.append({"what": "fla_vs_ours", "B": B, "out_maxdiff": (fo.float().reshape(out.shape) - out.float()).abs().max().item(),
                             "state_maxdiff": (fs.float().reshape(new_state.shape) - new_state).abs().max().item()})
                fla_us = kernel_sum_peers(fla_call)
            except Exception:
                RESULTS["errors"].append("fla call: " + traceback.format_exc()[-400:])
        rows.append({"what": n, "state": st, "B": B, "us": us, "copy16_x4": cx4, "copy16_flat": cfl, "fla_us": fla_us})
        log(f"peers-method {st} B={B}: {n} {us:.2f}us  FLA {fla_us}  copy16_x4 {cx4:.2f} flat {cfl:.2f}  (empty {e:.2f})")
    RESULTS["peers_method"] = rows
    save()


def summary():
    lines = []
    tgt32 = {1: 1.8, 4: 2.3, 16: 4.2, 64: 18.5}
    for row in RESULTS["timing"]:
        ks = [k for k in row if k.startswith("gdn_recurrent")]
        if not ks:
            continue
        best = min(ks, key=lambda k: row[k]["med"])
        cp = min(row["copy_torch"]["med"], row["copy16_x4"]["med"])
        b = row[best]
        tgt = ""
        if row["kind"] == "decode" and row["state"] == "f32":
            tgt = f"tgt {tgt32[row['B']]}" if row["B"] in tgt32 else ("tgt 1.01x" if row["B"] >= 256 else "")
        if row["kind"] == "decode" and row["state"] == "bf16":
            tgt = "tgt 1.7" if row["B"] == 1 else ("tgt 1.05x" if row["B"] >= 64 else "")
        if row["kind"] == "mtp":
            tgt = "tgt 1.2x"
        lines.append(f"{row['kind'][:3]}{row.get('flush', 'dirty')[0]} {row['state']:4s} T={row.get('T', 1)} B={row['B']:5d} best {best:34s} "
                     f"{b['med']:8.2f}us [p10 {b['p10']:.2f} p90 {b['p90']:.2f}] bestcopy {cp:8.2f} "
                     f"x{b['med'] / cp:5.2f} {tgt}")
    return "\n".join(lines)


def main():
    global DEFAULTS, _flush
    src = open(SRC).read()
    DEFAULTS = parse_defaults(src)
    RESULTS["device"] = torch.cuda.get_device_name()
    RESULTS["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
    RESULTS["method"] = ("CUPTI kernel time via torch.profiler; 256MB L2 flush (zero_) before every call; 2 rotating "
                         "input sets; median/p10/p90")
    log("device", RESULTS["device"], RESULTS["sm_count"], "SMs; torch", torch.__version__, "cupy", cupy.__version__)
    if MODE == "sanitize":
        M = Module(DEFAULTS)
        names = M.names
        run_case(M, names, B=3, pad=True, pool_extra=2, inplace=True, seed=1, tag="san")
        run_case(M, names, B=2, sdt=torch.bfloat16, pad=False, pool_extra=1, seed=2, tag="san_bf16")
        run_case(M, [n for n in names if "_tn_" in n], B=3, T=3, normalize=True, pad=True, pool_extra=1, inter=True,
                 write_new=False, seed=3, tag="san_mtp")
        run_case(M, names, B=2, has_state=False, seed=4, tag="san_nostate")
        log("sanitize run done; fails:", len(RESULTS["fails"]))
        return
    FINAL = "--final" in sys.argv  # only the exported kernels, full checks and timings
    variants = sorted(set(sweep_variants()) | set(DEFAULTS)) if not (QUICK or FINAL) else DEFAULTS
    M = Module(variants)
    RESULTS["attrs"] = M.attrs
    log("kernels:", len(M.names), "regs:", {n: a["regs"] for n, a in M.attrs.items()})
    save()
    if MODE in ("all", "check"):
        run_checks(M, quick=QUICK)
    if MODE in ("all", "time"):
        _flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=dev)
        global _flush_sum
        _flush_sum = torch.zeros((), dtype=torch.int64, device=dev)
        iters = 25
        Bs = [1, 2, 4, 8, 16, 32, 48, 64, 128, 256, 512, 1024] if not QUICK else [1, 64]
        time_probes(M, [1, 4, 16] if not QUICK else [1], iters)
        time_decode(M, torch.float32, Bs, iters)
        time_decode(M, torch.bfloat16, Bs, iters)
        time_mtp(M, torch.float32, [1, 4, 16, 64, 256] if not QUICK else [64], [2, 4, 8] if not QUICK else [4], iters)
        time_mtp(M, torch.bfloat16, [16, 64, 256] if not QUICK else [64], [4], iters)
        # the same decode timings with a read-only L2 flush (clean L2), best 6 variants per B of the dirty run
        for st, sdt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            best = {}
            for row in RESULTS["timing"]:
                if row["kind"] == "decode" and row["state"] == st and row.get("flush") == "dirty":
                    ks = sorted([k for k in row if k.startswith("gdn_")], key=lambda k: row[k]["med"])
                    best[row["B"]] = ks[:6]
            cb = [b for b in (1, 4, 16, 64, 256, 1024) if b in best]
            time_decode(M, sdt, cb, iters, names=best, flush="clean")
            if st == "f32":
                time_peers_method(M, [("f32", b, best[b][0]) for b in cb])
    save()
    log("SUMMARY (pure kernel time, L2 flushed, H=4 HV=8)\n" + summary())
    log("checks failed:", len(RESULTS["fails"]), "of", len(RESULTS["checks"]), "errors:", RESULTS["errors"][:5])


if __name__ == "__main__":
    try:
        main()
    except Exception:
        log("EXCEPTION", traceback.format_exc())
        RESULTS["errors"].append(traceback.format_exc())
        save()
        sys.exit(1)
