#!/usr/bin/env python3
"""Device harness for crates/gdn-cuda/kernels/recurrent.cu (GDN decode / MTP kernels).

Compiles recurrent.cu with NVRTC (harness_common: the library and options of the Rust runtime), launches the
kernels through the driver API with the RecurrentParams struct packed byte for byte (struct.pack, offsets asserted
below), checks every output element against the float64 reference, then times the kernels.

Timing method: pure GPU kernel time from CUPTI (torch.profiler), L2 flushed (256 MB zero_) before every call,
inputs rotated between two random sets, median + p10/p90 of N calls. The copy floor is measured in the same
profiler session: torch copy_ of the same bytes (a DtoD memcpy) and the harness's own 16-byte copy kernels
(tools/recurrent_probes.cu, appended to the source with latency probes of one decode mapping).

Usage (on the GPU machine, from the repository root):
  python3 tools/recurrent_harness.py [all|check|time|sanitize] [--quick|--final]
  (--final: only the kernels exported by recurrent.cu, full check matrix and timings; default: the sweep list
   of sweep_variants() plus the exported kernels. FLA is timed alongside when `fla` is importable.)
Writes $OUT/recurrent_sweep.json, $OUT/recurrent_log_<mode>.txt; prints a summary table last.
"""
import ctypes
import json
import math
import os
import struct
import sys
import traceback

import torch
import torch.nn.functional as F

import harness_common as hc
from harness_common import D, dev, log

MODE = sys.argv[1] if len(sys.argv) > 1 else "all"
QUICK = "--quick" in sys.argv
hc.log_to(os.path.join(hc.OUT, f"recurrent_log_{MODE}.txt"))
PROBES = os.path.join(hc.TOOLS, "recurrent_probes.cu")

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
    """The mappings timed beside the exported kernels by default: the leaders of the earlier sweeps (branch-free
    gates, gate inputs loaded first, no early return for padding)."""
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
    """The variants recurrent.cu exports: its GDN_REC_EXPORT / GDN_REC_EXPORT_EX lines."""
    out, prev = [], ""
    for line in src.splitlines():
        line, cont = line.strip(), prev.endswith("\\")  # (a macro definition's continuation line)
        prev = line
        if cont:
            continue
        if line.startswith("GDN_REC_EXPORT(") and "#define" not in line:
            a = [x.strip() for x in line[len("GDN_REC_EXPORT("):-1].split(",")]
            out.append((a[0], int(a[1]), a[2], int(a[3]), int(a[4]), int(a[5]), int(a[6]), 0, 0))
        elif line.startswith("GDN_REC_EXPORT_EX(") and "#define" not in line:
            a = [x.strip() for x in line[len("GDN_REC_EXPORT_EX("):-1].split(",")]
            out.append((a[0], int(a[1]), a[2], int(a[3]), int(a[4]), int(a[5]), int(a[6]), int(a[7]), int(a[8])))
    return out


def build_source(variants):
    """recurrent.cu, an export line for every variant it does not export itself, then the harness's kernels."""
    src = hc.kernel_source("recurrent")[1] + "\n"
    for (st, sb, tt, tf, vec, rpt, w, o, hnt) in sorted(set(variants) - set(parse_defaults(src))):
        src += f"GDN_REC_EXPORT_EX({st}, {sb}, {tt}, {tf}, {vec}, {rpt}, {w}, {o}, {hnt}, {SUFFIX[(o, hnt)]})\n"
    with open(PROBES) as f:
        return src + f.read()


# ----------------------------------------------------------------------------------------------- device
torch.backends.cuda.matmul.allow_tf32 = False
COPY_GRID = {"persistent": lambda n16: max(1, min((n16 + 255) // 256, 132 * 8)), "flat": lambda n16: (n16 + 255) // 256,
             "x4": lambda n16: (n16 + 1023) // 1024}


class Module:
    def __init__(self, variants):
        self.variants = variants
        self.mod = hc.load_module(hc.compile_cubin(build_source(variants), "recurrent.cu", "recurrent", lineinfo=True))
        self.fn, self.attrs = {}, {}
        for v in variants:
            n = vname_t(v)
            self.fn[n], self.attrs[n] = hc.function(self.mod, n)
        get = lambda n: hc.function(self.mod, n)[0]  # noqa: E731
        self.copy_fn = {"persistent": get("harness_copy16"), "flat": get("harness_copy16_flat"),
                        "x4": get("harness_copy16_x4")}
        self.empty_fn = get("harness_empty")
        self.probe_fn = {k: get(f"harness_probe{k}") for k in range(3)}
        self.names = list(self.fn.keys())
        bad = {k: a for k, a in self.attrs.items() if a["local_bytes"] != 0}
        assert not bad, f"local memory (spills) in {bad}"

    def launch_raw(self, f, grid, block, argbytes):
        hc.launch(f, grid, block, 0, argbytes)

    def copy16(self, src, dst, kind="persistent"):
        n16 = src.numel() * src.element_size() // 16
        hc.launch(self.copy_fn[kind], COPY_GRID[kind](n16), 256, 0,
                  [ctypes.c_uint64(src.data_ptr()), ctypes.c_uint64(dst.data_ptr()), ctypes.c_int64(n16)])

    def empty(self):
        hc.launch(self.empty_fn, 1, 32, 0, [ctypes.c_int64(0)])


# ----------------------------------------------------------------------------------------------- params
# RecurrentParams: 12 pointers, 2 x i64, f32, 3 x i32 = 128 bytes (offsets in recurrent.cu's comments), then the
# 72-byte ServingParams block (common/serving.cuh), zero here: the definition mode
PFMT = "<12Q2qf3i72x"
assert struct.calcsize(PFMT) == 200
_OFFS = {"q": 0, "k": 8, "v": 16, "a": 24, "b": 32, "A_log": 40, "dt_bias": 48, "state": 56, "new_state": 64,
         "intermediate": 72, "out": 80, "state_indices": 88, "batch": 96, "num_state_rows": 104, "scale": 112,
         "seq_len": 116, "num_qk_heads": 120, "num_v_heads": 124}


def pack_params(q, k, v, a, b, A_log, dt_bias, state, new_state, inter, out, idx, B, rows, scale, T, H, HV):
    p = hc.ptr
    by = struct.pack(PFMT, p(q), p(k), p(v), p(a), p(b), p(A_log), p(dt_bias), p(state), p(new_state), p(inter), p(out),
                     p(idx), B, rows, scale, T, H, HV)
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
    """The float64 reference (harness_common.reference, B sequences of T tokens). S0: float64 [B, HV, V, K]
    (already gathered) or None. Returns out [B, T, HV, V] float64, the list of states after each token
    [B, HV, V, K] float64."""
    q, k, v, a, b, A_log, dt_bias, scale = inp
    B, HV = q.shape[0], v.shape[2]
    flat = lambda x: x.reshape(B * T, *x.shape[2:])  # noqa: E731
    cu_ = torch.arange(0, B * T + 1, T, device=q.device, dtype=torch.int64)
    out, _, states = hc.reference(flat(q), flat(k), flat(v), S0, A_log, flat(a), dt_bias, flat(b), cu_, scale,
                                  keep_states=True)
    return out.reshape(B, T, HV, D), states


def cmp(x, y, what, rel_l2_max=None):
    """harness_common.compare; returns (ok, info)."""
    info = {"what": what, **hc.compare(x, y, rel_l2_max)}
    return info["ok"], info


# ----------------------------------------------------------------------------------------------- inputs
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
    with open(os.path.join(hc.OUT, fn), "w") as f:
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
_flush_sum = None


def do_flush(mode):
    global _flush_sum
    if mode == "dirty":
        hc.flush_l2()  # as the peers' bench_peers.py: L2 left full of dirty lines
    else:
        if _flush_sum is None:
            _flush_sum = torch.zeros((), dtype=torch.int64, device=dev)
        _flush_sum.add_(hc.flush_buffer().sum())  # read-only sweep: L2 left full of clean lines


def profile_seq(calls, iters, flush="dirty"):
    """calls: list of (label, fn, n_kernels_per_call). Runs iters rounds: for each label, flush L2 then call.
    Returns {label: [us per call ...]} from CUPTI, by launch order."""
    for _ in range(2):
        for (_, fn, _) in calls:
            fn(0)
    torch.cuda.synchronize()

    def body():
        for it in range(iters):
            for (_, fn, _) in calls:
                do_flush(flush)
                fn(it)
    # the kernels and copies measured (not the L2-flush kernels and memsets)
    evs = [e for e in hc.cuda_events(body) if e[1].startswith(("gdn_recurrent", "harness_")) or "Memcpy" in e[1]]
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
            row[lab] = hc.spread(xs)
        RESULTS["timing"].append(row)
        best = min(nb, key=lambda n: row[n]["median_us"])
        log(f"decode[{flush}] {st} B={B:5d}: best {best} {row[best]['median_us']:.2f}us  copy_torch "
            f"{row['copy_torch']['median_us']:.2f} x4 {row['copy16_x4']['median_us']:.2f} flat {row['copy16_flat']['median_us']:.2f} "
            f"persist {row['copy16_persist']['median_us']:.2f} empty {row['empty']['median_us']:.2f}")
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
                row[lab] = hc.spread(xs)
            RESULTS["timing"].append(row)
            best = min(names, key=lambda n: row[n]["median_us"])
            log(f"mtp {st} T={T} B={B:4d}: best {best} {row[best]['median_us']:.2f}us  floor(copy_torch) "
                f"{row['copy_torch']['median_us']:.2f}  copy16_x4 {row['copy16_x4']['median_us']:.2f}")
            save()
            del sets, fsrc, fdst


def launch_probe(M, k, inp, state, new_state, out, B):
    q, kk, v, a, b, A_log, dt_bias, scale = inp
    H, HV = q.shape[2], v.shape[2]
    by = pack_params(q, kk, v, a, b, A_log, dt_bias, state, new_state, None, out, None, B, B, scale, 1, H, HV)
    M.launch_raw(M.probe_fn[k], (B * 8, H, HV // H), (128, 1, 1), by)


def time_probes(M, Bs, iters):
    """Latency attribution on the fp32 v8r2w4 mapping (see recurrent_probes.cu)."""
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
            row[lab] = hc.spread(xs)
        RESULTS["probes"] = RESULTS.get("probes", []) + [row]
        log(f"probes B={B}: " + "  ".join(f"{lab.replace('harness_', '').replace('gdn_recurrent_', '')} "
                                          f"{row[lab]['median_us']:.2f}" for lab in res))
        save()


def try_fla():
    try:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
        return fused_recurrent_gated_delta_rule
    except Exception:
        RESULTS["errors"].append("fla import: " + traceback.format_exc()[-300:])
        return None


def time_peers_method(M, picks):
    """Our kernels and references timed with the peers' exact method, for comparability with the peers' own figures;
    FLA's fused_recurrent (the anchors' best decode peer) in the same process when it is importable."""
    H, HV = 4, 8
    rows = []
    e = hc.kernel_sum(lambda: M.empty())
    rows.append({"what": "empty", "us": e})
    fr = try_fla()
    for (st, B, n) in picks:
        sdt = torch.float32 if st == "f32" else torch.bfloat16
        inp = make_inputs(B, 1, H, HV, 7000 + B, normalize=False)
        state = make_state(B, HV, sdt, 8000 + B)
        new_state = torch.empty_like(state)
        out = torch.empty(B, 1, HV, D, dtype=torch.bfloat16, device=dev)
        us = hc.kernel_sum(lambda: launch(M, n, inp, state, new_state, None, out, None, B, 1))
        dst = torch.empty_like(state)
        cx4 = hc.kernel_sum(lambda: M.copy16(state, dst, "x4"))
        cfl = hc.kernel_sum(lambda: M.copy16(state, dst, "flat"))
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
                fla_us = hc.kernel_sum(fla_call)
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
        best = min(ks, key=lambda k: row[k]["median_us"])
        cp = min(row["copy_torch"]["median_us"], row["copy16_x4"]["median_us"])
        b = row[best]
        tgt = ""
        if row["kind"] == "decode" and row["state"] == "f32":
            tgt = f"tgt {tgt32[row['B']]}" if row["B"] in tgt32 else ("tgt 1.01x" if row["B"] >= 256 else "")
        if row["kind"] == "decode" and row["state"] == "bf16":
            tgt = "tgt 1.7" if row["B"] == 1 else ("tgt 1.05x" if row["B"] >= 64 else "")
        if row["kind"] == "mtp":
            tgt = "tgt 1.2x"
        lines.append(f"{row['kind'][:3]}{row.get('flush', 'dirty')[0]} {row['state']:4s} T={row.get('T', 1)} B={row['B']:5d} best {best:34s} "
                     f"{b['median_us']:8.2f}us [p10 {b['p10_us']:.2f} p90 {b['p90_us']:.2f}] bestcopy {cp:8.2f} "
                     f"x{b['median_us'] / cp:5.2f} {tgt}")
    return "\n".join(lines)


def main():
    global DEFAULTS
    DEFAULTS = parse_defaults(hc.kernel_source("recurrent")[1])
    RESULTS["device"] = torch.cuda.get_device_name()
    RESULTS["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
    RESULTS["method"] = ("CUPTI kernel time via torch.profiler; 256MB L2 flush (zero_) before every call; 2 rotating "
                         "input sets; median/p10/p90")
    log("device", RESULTS["device"], RESULTS["sm_count"], "SMs; torch", torch.__version__)
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
                    ks = sorted([k for k in row if k.startswith("gdn_")], key=lambda k: row[k]["median_us"])
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
