"""Device harness for crates/gdn-cuda/kernels/prefill.cu (GDN chunked varlen prefill, sm_90a).

Run on the GPU machine from the repository root:
    PYTHONUNBUFFERED=1 [NP_SWEEP=3,4,5] python3 crates/gdn-cuda/kernels/harness/prefill_harness.py [check] [time] [sweep] [small] [prof]
  NP_SWEEP   also compile modules with -DGDN_NP=n (n = 1..6; every variant forced to n producers) and check/time them.
  DEFS_SWEEP also compile one module per comma-separated item, each a '+'-joined list of defines (e.g.
             DEFS_SWEEP=GDN_WGMMA=0,GDN_WGMMA=0+GDN_UPD_HILO=1; not GDN_NP: use NP_SWEEP), and check/time them
             beside the production build.
  ALT_SRC    also compile each comma-separated file as prefill.cu (e.g. the previous version, `git show
             HEAD~1:crates/gdn-cuda/kernels/prefill.cu > /tmp/prev.cu`; it must sit beside nothing else: the include
             path is this folder) and check/time it beside the production build.
  SAVE_CUBIN=1 writes each module's CUBIN to $OUT (prefill<tag>.cubin) for cuobjdump -sass.
  SHORT=1    `time` also runs short single chains and a small batch (1x16, 1x64, 1x259, 1x589, 8x128).
  repro      raw-q/k [3,1,2] investigation: 50 bitwise runs per case/BV interleaved with unrelated launches, error vs
             the fp64 reference and vs an fp64 emulation of the kernel's bf16 rounding points, v5 vs GDN_UPD_HILO=1
             (also timed at 1x128 / 1x1024). `dump` (REPRO_TAG=name, REPRO_HILO=1): one launch saved for a
             compute-sanitizer vs plain bitwise comparison.
  stalls     steady-state accounting from a -DGDN_TRACE build (gdn_trace3): per chunk, what the state walker,
             output walker and producer 0 wait on and how long their loops take (STALL_DEFS=A+B adds defines).
  trace      timelines from a -DGDN_TRACE build (clock64 at fixed points of walker 0 and producer 0, phases inside a
             chunk; prefill.cu explains the events): cold / code-warm / warm runs of 1x16 .. n19_t277; prints them
             and writes $OUT/prefill_trace.json.
  prof       three launches of one case for ncu/compute-sanitizer (PROF_CFG=NxLEN, default 1x1024; PROF_BV=16),
             compiled with -lineinfo; writes no JSON. Example (what produced the v4 profile):
             ncu --clock-control none --kernel-name regex:gdn_prefill --launch-skip 2 --launch-count 1 \
                 --section WarpStateStats --section SchedulerStats --section SourceCounters -o $OUT/prof python3 <this> prof
Stages (each wrapped so that one failure does not lose the others):
  compile  NVRTC through cuda.bindings (the production compiler), one module per GDN_NP; prints the log.
  check    every variant vs a float64 token-by-token reference (vectorised over heads and sequences):
           lengths 0/1/63/64/65, 57 mixed sequences, every head ratio, state present/absent, extreme gates,
           a 16K-token slow-decay sequence, bf16-state variant; outputs poisoned with NaN first.
  time     the eight ANCHORS.md configurations (bench_peers inputs), every BV variant; pure kernel time
           through CUPTI (torch.profiler), L2 flushed (256 MB memset) before every call; median, p10, p90.
Writes $OUT/prefill_check.json, $OUT/prefill_sweep.json and prints a short table last.
The launch passes PrefillParams by value as packed bytes through cuLaunchKernel (cuda.bindings.driver),
exactly as the Rust runtime will.
"""
import ctypes, itertools, json, math, os, random, statistics, struct, sys, time, traceback

import torch
import torch.nn.functional as F

OUT = os.environ.get("OUT", "/tmp/out")
os.makedirs(OUT, exist_ok=True)
HERE = os.path.dirname(os.path.abspath(__file__))
KDIR = os.path.dirname(HERE)
dev = torch.device("cuda")
ARGS = set(sys.argv[1:]) or {"check", "time"}
T0 = time.time()
RES = {"device": torch.cuda.get_device_name(), "checks": [], "timings": [], "errors": [], "compile": {}}


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def save():
    if not ARGS & {"check", "time", "sweep"}:  # a pure `prof` run must not overwrite the last results
        return
    with open(f"{OUT}/prefill_check.json", "w") as f:
        json.dump({k: RES[k] for k in ("device", "checks", "errors", "compile")}, f, indent=1)
    with open(f"{OUT}/prefill_sweep.json", "w") as f:
        json.dump({"device": RES["device"], "timings": RES["timings"]}, f, indent=1)


# ------------------------------------------------------------------ compile (NVRTC) + launch (driver API)
from cuda.bindings import driver as cu
from cuda.bindings import nvrtc

SRC = open(os.path.join(KDIR, "prefill.cu")).read()
VARIANTS = [("f32", 16), ("f32", 32), ("f32", 64), ("f32", 128), ("bf16", 16), ("bf16", 32), ("bf16", 64), ("bf16", 128)]
torch.zeros(1, device=dev)  # make torch's primary context current on this thread


def _ok(r, what):
    err = r[0]
    if int(err) != 0:
        raise RuntimeError(f"{what}: {err}")
    return r[1] if len(r) == 2 else r[1:]


NP_DEFAULT = {16: 5, 32: 4, 64: 5, 128: 4}  # prefill.cu producers<BV>() without -DGDN_NP (v9; labels only: the
# launch itself reads threads and shared memory from the module's gdn_prefill_launch table)


def np_of(bv, forced):
    return forced if forced else NP_DEFAULT[bv]


SMEM_MAX = 232448  # sm_90 opt-in dynamic shared memory per block


def include_dirs():
    dirs = [KDIR]
    for d in ["/usr/local/cuda/include"]:
        if os.path.isdir(d):
            dirs.append(d)
    try:
        import nvidia
        for b in nvidia.__path__:
            d = os.path.join(b, "cu13", "include")
            if os.path.isdir(d):
                dirs.append(d)
    except Exception:
        pass
    return dirs


def compile_cubin(src, name, opts):
    """NVRTC: `src` (file name `name`) with `opts` (bytes) to a CUBIN; the log goes to `log`, a failure raises."""
    prog = _ok(nvrtc.nvrtcCreateProgram(src.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
    n = _ok(nvrtc.nvrtcGetProgramLogSize(prog), "logsize")
    buf = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, buf)
    logtxt = buf.decode(errors="replace").strip("\x00 \n")
    if logtxt:
        log("NVRTC log:", logtxt[:3000])
    if int(rc) != 0:
        raise RuntimeError(f"NVRTC failed ({name}): {logtxt[:3000]}")
    n = _ok(nvrtc.nvrtcGetCUBINSize(prog), "cubinsize")
    cubin = b" " * n
    _ok((nvrtc.nvrtcGetCUBIN(prog, cubin)[0], None), "getcubin")
    return cubin


class Module:
    def __init__(self, np_, defines=(), src_path=None):
        self.np = np_  # None: the per-variant defaults (production); n: -DGDN_NP=n for every variant
        self.tag = (f"NP{np_}f" if np_ else "") + "".join(f"[{d}]" for d in defines)  # label in logs and JSON
        src = SRC
        if src_path:  # another version of prefill.cu (ALT_SRC), e.g. the previous commit's, for an A/B in one process
            src = open(src_path).read()
            self.tag += f"[alt:{os.path.basename(src_path)}]"
        # a source that defines GDN_PERSIST first (session 32's experiment) runs bv64/bv128 as persistent CTAs: launch
        # at most one wave of them (one CTA per SM)
        self.persist = src.startswith("#define GDN_PERSIST")
        opts = [b"-arch=sm_90a", b"-std=c++17"] + ([f"-DGDN_NP={np_}".encode()] if np_ else []) + \
            [f"-D{d}".encode() for d in defines] + [f"-I{d}".encode() for d in include_dirs()]
        if "prof" in ARGS:
            opts.append(b"-lineinfo")
        t = time.time()
        cubin = compile_cubin(src, "prefill.cu", opts)
        if os.environ.get("SAVE_CUBIN"):  # for cuobjdump -sass on the device
            with open(f"{OUT}/prefill{self.tag or '_prod'}.cubin", "wb") as f:
                f.write(cubin)
        self.module = _ok(cu.cuModuleLoadData(cubin), "cuModuleLoadData")
        # the module's own launch table (v8: gdn_prefill_launch = {BV, threads, dynamic smem} per variant), so that
        # experiments with any defines launch exactly what they compiled
        tptr, tsize = _ok(cu.cuModuleGetGlobal(self.module, b"gdn_prefill_launch"), "gdn_prefill_launch")
        tab = (ctypes.c_int * (tsize // 4))()
        _ok((cu.cuMemcpyDtoH(ctypes.addressof(tab), tptr, tsize)[0], None), "launch table")
        self.launch_tab = {tab[3 * i]: (tab[3 * i + 1], tab[3 * i + 2]) for i in range(tsize // 12)}
        self.fns = {}
        regs, local = {}, {}
        A = cu.CUfunction_attribute
        for st, bv in VARIANTS:
            name = f"gdn_prefill_{st}_bv{bv}"
            if self.launch_tab[bv][1] > SMEM_MAX:
                continue
            f = _ok(cu.cuModuleGetFunction(self.module, name.encode()), name)
            _ok((cu.cuFuncSetAttribute(f, A.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.launch_tab[bv][1])[0], None), "smem attr")
            regs[name] = _ok(cu.cuFuncGetAttribute(A.CU_FUNC_ATTRIBUTE_NUM_REGS, f), "regs")
            local[name] = _ok(cu.cuFuncGetAttribute(A.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f), "local")
            self.fns[(st, bv)] = f
        RES["compile"][f"NP{np_}{self.tag}"] = {"seconds": time.time() - t, "regs": regs, "local_bytes": local}
        log(f"compiled NP={np_} in {time.time() - t:.2f}s regs {set(regs.values())} local {set(local.values())}")

    def launch(self, st, bv, q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, out, new_state):
        N = cu_seqlens.numel() - 1
        H, HV = q.shape[1], v.shape[1]
        ptr = lambda x: 0 if x is None else x.data_ptr()
        raw = struct.pack("<11Qq f i i i", ptr(q), ptr(k), ptr(v), ptr(a), ptr(b), ptr(A_log), ptr(dt_bias),
                          ptr(cu_seqlens), ptr(state), ptr(new_state), ptr(out), N, float(scale), H, HV,
                          min(q.shape[0], 16))  # lead_rows
        assert len(raw) == 112
        buf = ctypes.create_string_buffer(raw, len(raw))
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
        f = self.fns[(st, bv)]
        grid = N * HV * (128 // bv)
        if grid == 0:
            return
        if self.persist and bv >= 64:
            grid = min(grid, torch.cuda.get_device_properties(dev).multi_processor_count)
        block, smem = self.launch_tab[bv]
        stream = torch.cuda.current_stream().cuda_stream
        err, = cu.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, smem,
                                 cu.CUstream(stream), ctypes.addressof(argv), 0)
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuLaunchKernel: {err}")


# ------------------------------------------------------------------ inputs and reference
def make_inputs(lens, H=4, HV=8, seed=0, state=True, normalise=True, gates="bench", state_dtype=torch.float32,
                bscale=3.0):
    gen = torch.Generator(device=dev).manual_seed(seed)
    r = lambda *s: torch.randn(*s, device=dev, generator=gen)
    T, N = sum(lens), len(lens)
    cu_ = torch.tensor([0] + list(itertools.accumulate(lens)), device=dev, dtype=torch.int64)
    q, k = r(T, H, 128), r(T, H, 128)
    if normalise:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    q, k, v = q.bfloat16(), k.bfloat16(), r(T, HV, 128).bfloat16()
    st = (0.1 * r(N, HV, 128, 128)).to(state_dtype) if state else None
    if gates == "bench":  # bench_peers: fast decay (g ~ 1e-3 .. 0.5)
        A_log = torch.log(torch.rand(HV, device=dev, generator=gen) * 15 + 1)
        dt_bias, a = r(HV), r(T, HV)
    elif gates == "slow":  # long memory: g ~ 0.9 .. 0.999
        A_log = -1.0 - 2.0 * torch.rand(HV, device=dev, generator=gen)
        dt_bias, a = r(HV) * 0.5 - 2.0, r(T, HV) - 1.0
    else:  # extreme: A_log up to 5, a up to +40 (decays underflow to 0), some a very negative (g -> 1)
        A_log = torch.linspace(-3, 5, HV, device=dev)
        dt_bias = r(HV)
        a = torch.rand(T, HV, device=dev, generator=gen) * 80 - 40
    a = a.bfloat16()
    b = (r(T, HV) * bscale).bfloat16()
    return q, k, v, st, A_log.float(), a, dt_bias.float(), b, cu_, 1.0 / math.sqrt(128)


def reference(q, k, v, state, A_log, a, dt_bias, b, cu_, scale):
    """float64 token-by-token recurrence (definition semantics), all sequences and heads at once."""
    T, H, D = q.shape
    HV = v.shape[1]
    N = cu_.numel() - 1
    x = a.double() + dt_bias.double()
    g = torch.exp(-torch.exp(A_log.double()) * F.softplus(x))
    beta = torch.sigmoid(b.double())
    qe = q.double().repeat_interleave(HV // H, dim=1)
    ke = k.double().repeat_interleave(HV // H, dim=1)
    vd = v.double()
    cl = cu_.tolist()
    lens = torch.tensor([cl[i + 1] - cl[i] for i in range(N)], device=dev)
    starts = cu_[:-1]
    S = torch.zeros(N, HV, D, D, dtype=torch.float64, device=dev)  # [N, HV, K, V]
    if state is not None:
        S = state.double().transpose(-1, -2).clone()
    out = torch.zeros(T, HV, D, dtype=torch.float64, device=dev)
    maxlen = int(lens.max().item()) if N else 0
    for i in range(maxlen):
        act = (lens > i).nonzero().squeeze(1)
        t = starts[act] + i
        Sa = S[act] * g[t][:, :, None, None]
        kk, vv, qq = ke[t], vd[t], qe[t]
        u = torch.einsum("nhk,nhkv->nhv", kk, Sa)
        dlt = beta[t][:, :, None] * (vv - u)
        Sa = Sa + kk[:, :, :, None] * dlt[:, :, None, :]
        out[t] = scale * torch.einsum("nhk,nhkv->nhv", qq, Sa)
        S[act] = Sa
    ns = S.transpose(-1, -2).contiguous()
    ns[lens == 0] = 0.0
    return out, ns


def compare(x, y):
    x, y = x.double(), y.double()
    d = (x - y).abs()
    nan = int((~torch.isfinite(x)).sum().item())
    bad = (d > 1e-2) & (d > 1e-2 * (y.abs() + 1e-8))
    rel = (d.norm() / (y.norm() + 1e-300)).item()
    worst = int(torch.nan_to_num(d, nan=1e30).argmax().item()) if d.numel() else -1
    return {"rel_l2": rel, "max_abs": float(torch.nan_to_num(d, nan=float("inf")).max().item()) if d.numel() else 0.0,
            "n_fail_tol": int(bad.sum().item()) + nan, "n_nan": nan, "worst_idx": worst, "n": d.numel()}


def run_case(mod, st, bv, inp, out=None, ns=None):
    q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
    T, HV, N = q.shape[0], v.shape[1], cu_.numel() - 1
    sd = torch.bfloat16 if st == "bf16" else torch.float32
    if out is None:
        out = torch.empty(T, HV, 128, dtype=torch.bfloat16, device=dev)
        ns = torch.empty(N, HV, 128, 128, dtype=sd, device=dev)
    out.fill_(float("nan"))
    ns.fill_(float("nan"))
    stt = state.to(sd) if state is not None else None
    mod.launch(st, bv, q, k, v, stt, A_log, a, dt_bias, b, cu_, scale, out, ns)
    torch.cuda.synchronize()
    return out, ns


def check(mods):
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
    refs = {}
    for name, lens, H, HV, stp, gates in cases:
        inp = make_inputs(lens, H, HV, seed=hash(name) % 1000, state=stp, gates=gates)
        refs[name] = (inp, reference(*inp))
    log("references done")
    for mod in mods:
        for st, bv in VARIANTS:
            if (st, bv) not in mod.fns or (st == "bf16" and (bv not in (32, 128) or mod.np is not None)):
                continue
            for name, (inp, (ro, rs)) in refs.items():
                try:
                    o, ns = run_case(mod, st, bv, inp)
                    if st == "bf16":  # reference from the bf16-rounded initial state
                        inp2 = list(inp)
                        if inp2[3] is not None:
                            inp2[3] = inp2[3].bfloat16().float()
                        ro2, rs2 = reference(*inp2)
                    else:
                        ro2, rs2 = ro, rs
                    row = {"case": name, "variant": f"{st}_bv{bv}{mod.tag}", "NP": np_of(bv, mod.np),
                           "out": compare(o, ro2), "state": compare(ns, rs2)}
                    RES["checks"].append(row)
                    ok = row["out"]["n_fail_tol"] == 0 and row["state"]["n_fail_tol"] == 0
                    log(f"check NP{np_of(bv, mod.np)}{mod.tag} {st}_bv{bv:<3} {name:<24} out {row['out']['rel_l2']:.2e} "
                        f"state {row['state']['rel_l2']:.2e} fails {row['out']['n_fail_tol']}/{row['state']['n_fail_tol']} "
                        f"nan {row['out']['n_nan']}/{row['state']['n_nan']} {'OK' if ok else 'FAIL'}")
                except Exception:
                    RES["errors"].append(f"check {name} {st}_bv{bv}: " + traceback.format_exc()[-1500:])
                    log("ERROR", RES["errors"][-1])
            save()
    # long sequence, slow decay: 16K tokens, one variant per module
    try:
        inp = make_inputs([16384], 4, 8, seed=11, state=True, gates="slow")
        ro, rs = reference(*inp)
        for mod in mods[:1]:
            for st, bv in [("f32", 16), ("f32", 128)]:
                o, ns = run_case(mod, st, bv, inp)
                row = {"case": "long16k slow", "variant": f"{st}_bv{bv}{mod.tag}", "NP": np_of(bv, mod.np),
                       "out": compare(o, ro), "out_last1k": compare(o[-1024:], ro[-1024:]), "state": compare(ns, rs)}
                RES["checks"].append(row)
                log(f"check long16k {st}_bv{bv} out {row['out']['rel_l2']:.2e} last1k {row['out_last1k']['rel_l2']:.2e} "
                    f"state {row['state']['rel_l2']:.2e} fails {row['out']['n_fail_tol']}/{row['state']['n_fail_tol']}")
        # determinism: same inputs twice, bitwise
        o1, n1 = run_case(mods[0], "f32", 32, inp)
        o1, n1 = o1.clone(), n1.clone()
        o2, n2 = run_case(mods[0], "f32", 32, inp)
        RES["checks"].append({"case": "determinism", "equal": bool(torch.equal(o1, o2) and torch.equal(n1, n2))})
        log("determinism", RES["checks"][-1])
    except Exception:
        RES["errors"].append("long: " + traceback.format_exc()[-1500:])
        log("ERROR", RES["errors"][-1])
    # isolation (v6: sequence 0's first chunk is loaded before cu_seqlens): a 5-token sequence 0 followed by a
    # sequence whose q/k/v/a/b are NaN; sequence 0's outputs and state must equal a run of it alone.
    try:
        inp = list(make_inputs([5, 20], 4, 8, seed=5, state=True, gates="bench"))
        for i in (0, 1, 2, 5, 7):
            inp[i] = inp[i].clone()
            inp[i][5:] = float("nan")
        alone = list(inp)
        for i in (0, 1, 2, 5, 7):
            alone[i] = inp[i][:5]
        alone[3], alone[8] = inp[3][:1], inp[8][:2]
        ro, rs = reference(*alone)
        for mod in mods[:1]:
            for st, bv in VARIANTS:
                if st != "f32" or (st, bv) not in mod.fns:
                    continue
                o, ns = run_case(mod, st, bv, inp)
                row = {"case": "seq0 short, NaN neighbour", "variant": f"{st}_bv{bv}{mod.tag}",
                       "out": compare(o[:5], ro), "state": compare(ns[:1], rs)}
                RES["checks"].append(row)
                ok = row["out"]["n_fail_tol"] == 0 and row["state"]["n_fail_tol"] == 0
                log(f"check isolation {st}_bv{bv} out {row['out']['rel_l2']:.2e} state {row['state']['rel_l2']:.2e} "
                    f"fails {row['out']['n_fail_tol']}/{row['state']['n_fail_tol']} {'OK' if ok else 'FAIL'}")
    except Exception:
        RES["errors"].append("isolation: " + traceback.format_exc()[-1500:])
        log("ERROR", RES["errors"][-1])
    # unnormalised q/k (contest 'random' workloads), short
    try:
        inp = make_inputs([6, 20, 40], 4, 8, seed=3, state=True, normalise=False, gates="bench")
        ro, rs = reference(*inp)
        o, ns = run_case(mods[0], "f32", 32, inp)
        row = {"case": "unnormalised qk short", "variant": "f32_bv32", "out": compare(o, ro), "state": compare(ns, rs)}
        RES["checks"].append(row)
        log("unnormalised", row)
    except Exception:
        RES["errors"].append("unnorm: " + traceback.format_exc()[-1500:])
    save()


# ------------------------------------------------------------------ repro (raw q/k new_state failures, v5.1)
def emulate_single_chunk(inp, round_s=True, round_u=True):
    """fp64 emulation of the kernel's arithmetic for sequences of <= 16 tokens (one chunk) with the kernel's bf16
    rounding points switchable: round_s = S rounded to bf16 in Z = S K^T and Y = S Q^T; round_u = the update
    operand Vn e^{γC-γ} rounded to ONE bf16 (v5; v5.1 carries hi+lo ~ exact). T, Tb, Tg, Z, P, Vn in the output
    are hi+lo (~fp32) in the kernel and exact here. Returns (out, new_state) like reference()."""
    q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
    T, H, D = q.shape
    HV = v.shape[1]
    N = cu_.numel() - 1
    bf = lambda x: x.to(torch.bfloat16).double()
    out = torch.zeros(T, HV, D, dtype=torch.float64, device=dev)
    ns = torch.zeros(N, HV, D, D, dtype=torch.float64, device=dev)
    cl = cu_.tolist()
    for n in range(N):
        s0, e0 = cl[n], cl[n + 1]
        L = e0 - s0
        assert L <= 16
        for h in range(HV):
            S = state[n, h].double() if state is not None else torch.zeros(D, D, dtype=torch.float64, device=dev)
            if L == 0:
                ns[n, h] = 0.0
                continue
            hq = h // (HV // H)
            K, Q, V = k[s0:e0, hq].double(), q[s0:e0, hq].double(), v[s0:e0, h].double()
            lg = -torch.exp(A_log[h].double()) * F.softplus(a[s0:e0, h].double() + dt_bias[h].double())
            be = torch.sigmoid(b[s0:e0, h].double())
            gam = torch.cumsum(lg, 0)
            gC = gam[-1]
            dec = torch.exp(torch.clamp(gam[:, None] - gam[None, :], max=0.0))
            A = torch.tril(be[:, None] * (K @ K.T) * dec, -1)
            Tm = torch.linalg.inv(torch.eye(L, dtype=torch.float64, device=dev) + A)
            Tb, Tg = Tm * be[None, :], Tm * (be * torch.exp(gam))[None, :]
            Sb = bf(S) if round_s else S  # [V, K]
            Z, Y = Sb @ K.T, Sb @ Q.T  # [V, L]
            X, U = Z @ Tg.T, V.T @ Tb.T
            Vn = U - X
            u = Vn * torch.exp(gC - gam)[None, :]
            if round_u:
                u = bf(u)
            ns[n, h] = torch.exp(gC) * S + u @ K
            P = scale * (Q @ K.T) * dec * torch.tril(torch.ones(L, L, dtype=torch.float64, device=dev))
            out[s0:e0, h] = (scale * torch.exp(gam)[None, :] * Y + Vn @ P.T).T
    return out, ns


def repro(mods):
    """Bitwise determinism (50 runs, interleaved with unrelated large launches that rewrite shared memory and
    change the SM schedule), error vs the fp64 reference, and the fp64 emulation of the rounding points."""
    mod_old = mods[0]  # production build (GDN_UPD_HILO=0, = v5)
    mod_new = Module(None, defines=("GDN_UPD_HILO=1",))  # update operand hi + lo
    poison = make_inputs([1024, 700, 77], 4, 8, seed=99, normalise=False, gates="slow")
    po = torch.empty(sum([1024, 700, 77]), 8, 128, dtype=torch.bfloat16, device=dev)
    pn = torch.empty(3, 8, 128, 128, dtype=torch.float32, device=dev)
    rows = []
    cases = [("raw [3,1,2] runtime-like", [3, 1, 2], False, 1.0)] + \
        [(f"raw [3,1,2] seed{s}", [3, 1, 2], False, 1.0) for s in range(1, 6)] + \
        [("raw [17,33,15]", [17, 33, 15], False, 1.0), ("norm [3,1,2]", [3, 1, 2], True, 1.0),
         ("norm [17,33,15]", [17, 33, 15], True, 1.0)]
    for ci, (name, lens, normq, bsc) in enumerate(cases):
        inp = make_inputs(lens, 4, 8, seed=1000 + ci, state=True, normalise=normq, gates="bench", bscale=bsc)
        ro, rs = reference(*inp)
        emus = {}
        if max(lens) <= 16:
            for key, rs_, ru_ in (("exact", False, False), ("S_bf16", True, False), ("S_bf16+u_bf16", True, True)):
                emus[key] = emulate_single_chunk(inp, rs_, ru_)
            log(f"repro {name}: emulation(exact) vs reference: out {compare(emus['exact'][0], ro)['rel_l2']:.1e} "
                f"state {compare(emus['exact'][1], rs)['rel_l2']:.1e} (self-check of the emulation)")
            for key in ("S_bf16", "S_bf16+u_bf16"):
                log(f"   emulation {key:<14} vs ref: state {compare(emus[key][1], rs)}")
        for tag, mod in (("v5(old)", mod_old), ("v5.1(hilo)", mod_new)):
            for bv in (16, 32, 128):
                o0, n0 = run_case(mod, "f32", bv, inp)
                o0, n0 = o0.clone(), n0.clone()
                ndiff = 0
                for it in range(50):
                    if it % 2 == 0:  # unrelated large launch first: different smem contents / SM occupancy
                        mod.launch("f32", 16 if it % 4 == 0 else 128, *poison[:4], *poison[4:9], poison[9], po, pn)
                    o1, n1 = run_case(mod, "f32", bv, inp)
                    if not (torch.equal(o1.view(torch.int16), o0.view(torch.int16)) and
                            torch.equal(n1.view(torch.int32), n0.view(torch.int32))):
                        ndiff += 1
                row = {"case": name, "kernel": tag, "bv": bv, "runs_differing_bitwise": ndiff,
                       "out": compare(o0, ro), "state": compare(n0, rs)}
                if emus and bv == 16:
                    row["state_vs_emu"] = {k2: compare(n0, e[1])["rel_l2"] for k2, e in emus.items()}
                    row["state_vs_emu_maxabs"] = {k2: compare(n0, e[1])["max_abs"] for k2, e in emus.items()}
                    wi = row["state"]["worst_idx"]
                    row["worst"] = {"gpu": n0.flatten()[wi].item(), "ref": rs.flatten()[wi].item(),
                                    **{k2: e[1].flatten()[wi].item() for k2, e in emus.items()},
                                    "max_abs_ref_state": rs.abs().max().item()}
                rows.append(row)
                log(f"repro {name:<26} {tag:<10} bv{bv:<3} differing runs {ndiff}/50  out fails {row['out']['n_fail_tol']} "
                    f"rel {row['out']['rel_l2']:.2e} | state fails {row['state']['n_fail_tol']} rel {row['state']['rel_l2']:.2e} "
                    f"maxabs {row['state']['max_abs']:.3e}" + (f" | vs emu {row['state_vs_emu']} worst {row['worst']}" if 'worst' in row else ""))
    # v5 vs v5.1 kernel time, 1x128 and 1x1024 (bench inputs), bv16 and bv32, interleaved twice
    for rep in range(2):
        for cname, lens in (("1x128", [128]), ("1x1024", [1024])):
            inp = bench_inputs(lens)
            T = sum(lens)
            out = torch.empty(T, 8, 128, dtype=torch.bfloat16, device=dev)
            ns = torch.empty(1, 8, 128, 128, dtype=torch.float32, device=dev)
            for tag, mod in (("v5(old)", mod_old), ("v5.1(hilo)", mod_new)):
                for bv in (16, 32):
                    ts = sorted(kernel_times(lambda: mod.launch("f32", bv, *inp, out, ns), iters=25))
                    rows.append({"time": cname, "kernel": tag, "bv": bv, "rep": rep, "median_us": statistics.median(ts)})
                    log(f"time {cname:<7} {tag:<10} bv{bv:<3} rep{rep} median {statistics.median(ts):7.2f} us "
                        f"(p10 {ts[len(ts) // 10]:.2f} p90 {ts[9 * len(ts) // 10]:.2f})")
    with open(f"{OUT}/prefill_repro.json", "w") as f:
        json.dump(rows, f, indent=1)


def dump(mods):
    """One launch of the runtime-like raw [3,1,2] case (bv16) -> $OUT/<REPRO_TAG>.pt, for running under
    compute-sanitizer and comparing bitwise with a plain run. REPRO_HILO=1: the GDN_UPD_HILO=1 build."""
    mod = Module(None, defines=("GDN_UPD_HILO=1",)) if os.environ.get("REPRO_HILO") else mods[0]
    inp = make_inputs([3, 1, 2], 4, 8, seed=1000, state=True, normalise=False, gates="bench", bscale=1.0)
    o, n = run_case(mod, "f32", 16, inp)
    ro, rs = reference(*inp)
    log("dump state", compare(n, rs))
    torch.save({"out": o.cpu(), "ns": n.cpu()}, f"{OUT}/{os.environ.get('REPRO_TAG', 'dump')}.pt")


# ------------------------------------------------------------------ timing
_flush = None


def kernel_times(fn, iters=20):
    """Per-call pure kernel time (us) via CUPTI, L2 flushed before every call; returns list."""
    from torch.profiler import profile, ProfilerActivity
    global _flush
    if _flush is None:
        _flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=dev)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            _flush.zero_()
            fn()
        torch.cuda.synchronize()
    ts = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.name.startswith("gdn_prefill"):
            ts.append(e.device_time if hasattr(e, "device_time") else e.cuda_time)
    return ts


EV = ["gt0", "clk0", "sync", "p:seqlens", "p:landed0", "p:prep0", "p:landed1", "p:prep1", "w:full0", "w:walk0",
      "w:full1", "w:walk1", "w:last", "w:stored", "clk_end", "gt_end"]


# (name, from, to) over the 32 trace columns: 0..15 gdn_trace, 16..31 gdn_trace2
PHASES = [("p0:gates", 16, 17), ("p0:KK+A+P", 17, 18), ("p0:T", 18, 19), ("p0:arrive", 19, 5),
          ("p1:gates", 20, 21), ("p1:KK+A+P", 21, 22), ("p1:T", 22, 23),
          ("w0:to-Vn", 8, 24), ("w0:upd+O", 24, 25), ("w0:store", 25, 9), ("w1:to-Vn", 10, 26), ("w1:upd+O", 26, 27),
          ("w1:store", 27, 11), ("w5:upd+O", 28, 29)]


def trace(mods):
    """Timelines from a -DGDN_TRACE build (see prefill.cu): per config and tile, three ways of running the same
    call — `cold` (L2 flushed first: data and code from DRAM, as `time` measures), `code-warm` (L2 flushed, then
    the same kernel on another small input, then the call: code in L2 and the SMs' caches, data cold) and `warm`
    (the call twice, no flush). Prints event times (ns from CTA entry) for CTA 0 and the median over CTAs."""
    m = Module(None, defines=("GDN_TRACE",), src_path=os.environ.get("TRACE_SRC") or None)  # TRACE_SRC: as ALT_SRC
    dptr, size = _ok(cu.cuModuleGetGlobal(m.module, b"gdn_trace"), "gdn_trace")
    dptr2, size2 = _ok(cu.cuModuleGetGlobal(m.module, b"gdn_trace2"), "gdn_trace2")
    global _flush
    if _flush is None:
        _flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=dev)
    mix = json.load(open(os.path.join(HERE, "contest_mix.json")))
    cfgs = [("1x16", [16], (16, 32)), ("1x64", [64], (16,)), ("1x128", [128], (16,)), ("1x1024", [1024], (16, 64)),
            ("n19_t277", mix["prefill_18_n19_t277"], (64, 128)), ("n11_t372", mix["prefill_98_n11_t372"], (128,))]
    # TRACE_CFGS=NxLEN:BV[,...] (e.g. 32x256:128) replaces the list; TRACE_MODES=cold[,warm,...] the modes
    if os.environ.get("TRACE_CFGS"):
        cfgs = []
        for item in os.environ["TRACE_CFGS"].split(","):
            shape, bv_ = item.split(":")
            n_, l_ = (int(x) for x in shape.split("x"))
            cfgs.append((shape, [l_] * n_, (int(bv_),)))
    modes = tuple(os.environ.get("TRACE_MODES", "cold,code-warm,warm").split(","))
    dummy = bench_inputs([16], seed=7)
    dout = torch.empty(16, 8, 128, dtype=torch.bfloat16, device=dev)
    dns = torch.empty(1, 8, 128, 128, dtype=torch.float32, device=dev)
    for cname, lens, bvs in cfgs:
        inp, out, ns = bench_case(lens)
        N = len(lens)
        for bv in bvs:
            for mode in modes:
                rows = []
                for rep in range(5):
                    torch.cuda.synchronize()
                    if mode == "warm":
                        m.launch("f32", bv, *inp, out, ns)
                    else:
                        _flush.zero_()
                        if mode == "code-warm":
                            m.launch("f32", bv, *dummy, dout, dns)
                    _ok((cu.cuMemsetD8(dptr, 0, size)[0], None), "memset")
                    _ok((cu.cuMemsetD8(dptr2, 0, size2)[0], None), "memset2")
                    m.launch("f32", bv, *inp, out, ns)
                    torch.cuda.synchronize()
                    buf = torch.empty(size // 8, dtype=torch.int64)
                    _ok((cu.cuMemcpyDtoH(buf.data_ptr(), dptr, size)[0], None), "dtoh")
                    buf2 = torch.empty(size2 // 8, dtype=torch.int64)
                    _ok((cu.cuMemcpyDtoH(buf2.data_ptr(), dptr2, size2)[0], None), "dtoh2")
                    rows.append(torch.cat([buf.view(256, 16), buf2.view(256, 16)], 1)[: min(256, N * 8 * (128 // bv))].clone())
                tr = rows[-1]
                ghz = float(((tr[:, 14] - tr[:, 1]).double() / (tr[:, 15] - tr[:, 0]).double()).median())
                rel = lambda r, e: [(float(x) - float(c)) / ghz if x else float("nan") for x, c in zip(r[:, e], r[:, 1])]
                span = [(float(r[:, 15].max()) - float(r[:, 0].min())) for r in rows]
                disp = [(float(r[:, 0].max()) - float(r[:, 0].min())) for r in rows]
                rec = {"config": cname, "bv": bv, "mode": mode, "ghz": ghz, "span_ns": span, "dispatch_spread_ns": disp,
                       "cta0_ns": {EV[e]: statistics.median(rel(r, e)[0] for r in rows) for e in range(2, 15)},
                       "median_ns": {EV[e]: statistics.median(statistics.median([x for x in rel(r, e) if x == x] or [float("nan")])
                                                          for r in rows) for e in range(2, 15)}}
                # waves (CTAs ordered by entry; the first gridDim-limited wave starts together): per CTA, from its
                # entry: walker 0's first FULL (fill), its last chunk walked, its exit; and the gap from the
                # earliest exit to each later-wave entry (the SM's turnaround)
                waves = []
                for r in rows:
                    t0 = float(r[:, 0].min())
                    ent = [(float(x[0]) - t0, (float(x[8]) - float(x[1])) / ghz, (float(x[12]) - float(x[1])) / ghz,
                            float(x[15]) - t0) for x in r if x[0] and x[15]]
                    ent.sort()
                    exits = sorted(e[3] for e in ent)
                    w1 = [e for e in ent if e[0] < exits[0]]
                    w2 = [e for e in ent if e[0] >= exits[0]]
                    waves.append({"n_wave1": len(w1), "n_later": len(w2),
                                  "wave1_fill_ns": statistics.median(e[1] for e in w1),
                                  "wave1_walked_ns": statistics.median(e[2] for e in w1),
                                  "wave1_exit_ns": statistics.median(e[3] - e[0] for e in w1),
                                  "wave1_last_exit_ns": max(e[3] for e in w1),
                                  "later_entry_first_ns": min((e[0] for e in w2), default=float("nan")),
                                  "later_fill_ns": statistics.median([e[1] for e in w2] or [float("nan")]),
                                  "later_exit_ns": statistics.median([e[3] - e[0] for e in w2] or [float("nan")]),
                                  "later_turnaround_ns": statistics.median(
                                      [e[0] - exits[i] for i, e in enumerate(w2) if i < len(exits)] or [float("nan")]),
                                  "last_exit_ns": exits[-1]})
                rec["waves"] = {k: statistics.median(w[k] for w in waves) for k in waves[0]}
                RES.setdefault("traces", []).append(rec)
                log(f"{'':>34} waves " + " ".join(f"{k} {v:.0f}" for k, v in rec["waves"].items()))
                log(f"trace {cname:<9} bv{bv:<3} {mode:<9} span {statistics.median(span):7.0f} ns dispatch {statistics.median(disp):6.0f} "
                    f"ghz {ghz:.2f} | cta0 " + " ".join(f"{k} {v:.0f}" for k, v in rec["cta0_ns"].items() if v == v))
                log(f"{'':>34} median " + " ".join(f"{k} {v:.0f}" for k, v in rec["median_ns"].items() if v == v))
                # phases inside a chunk (CTA 0, median over the repetitions), ns
                ph_ = {}
                for name, a_, b_ in PHASES:
                    d = [(float(r[0, b_]) - float(r[0, a_])) / ghz for r in rows if r[0, a_] and r[0, b_]]
                    if d:
                        ph_[name] = statistics.median(d)
                rec["phases_cta0_ns"] = ph_
                log(f"{'':>34} phases " + " ".join(f"{k} {v:.0f}" for k, v in ph_.items()))
    with open(f"{OUT}/prefill_trace.json", "w") as f:
        json.dump({"device": RES["device"], "traces": RES["traces"]}, f, indent=1)


STALLS = ["state FULL wait", "state Z-exchange wait", "state loop", "output FULL+VN wait", "output loop",
          "producer EMPTY wait", "producer landed wait", "producer loop", "producer chunk math", "chunks",
          "state1 Z-exchange wait", "state wait+Z", "state X..Vn", "state VN arrive"]


def stalls(mods):
    """Steady-state accounting from a -DGDN_TRACE build (gdn_trace3, see prefill.cu): per config and tile, CTA 0's
    (and the median CTA's) cycles spent waiting and working, summed over its chunks, printed in ns per chunk."""
    defs = tuple(d for d in os.environ.get("STALL_DEFS", "").split("+") if d)
    m = Module(None, defines=("GDN_TRACE",) + defs)
    dptr, size = _ok(cu.cuModuleGetGlobal(m.module, b"gdn_trace3"), "gdn_trace3")
    cfgs = [("1x128", [128], (16, 32)), ("1x1024", [1024], (16, 32, 64)), ("1x8192", [8192], (16,))]
    for cname, lens, bvs in cfgs:
        inp, out, ns = bench_case(lens)
        N = len(lens)
        for bv in bvs:
            if ("f32", bv) not in m.fns:
                continue
            m.launch("f32", bv, *inp, out, ns)  # warm-up
            _ok((cu.cuMemsetD8(dptr, 0, size)[0], None), "memset3")
            m.launch("f32", bv, *inp, out, ns)
            torch.cuda.synchronize()
            buf = torch.empty(size // 8, dtype=torch.int64)
            _ok((cu.cuMemcpyDtoH(buf.data_ptr(), dptr, size)[0], None), "dtoh3")
            tr = buf.view(256, 16)[: min(256, N * 8 * (128 // bv))].double()
            if not tr[0, 9]:  # only KSPLIT walkers are instrumented (bv16; bv32 with STALL_DEFS=GDN_SCHEME32=2)
                log(f"stalls {cname:<7} bv{bv:<3} not instrumented (walk scheme without gdn_trace3 points)")
                continue
            nch = float(tr[0, 9])
            ghz = 1.8  # SM clock measured by `trace` (~1.80 GHz on the H200)
            cta0 = {STALLS[e]: float(tr[0, e]) / ghz / nch for e in range(14) if e != 9}
            med = {STALLS[e]: float(tr[:, e].median()) / ghz / nch for e in range(14) if e != 9}
            RES.setdefault("stalls", []).append({"config": cname, "bv": bv, "defs": list(defs), "chunks": nch,
                                                 "cta0_ns_per_chunk": cta0, "median_ns_per_chunk": med})
            log(f"stalls {cname:<7} bv{bv:<3} {''.join(defs)} chunks {nch:.0f} ns/chunk (cta0): " +
                ", ".join(f"{k} {v:.0f}" for k, v in cta0.items()))
    save()


def bench_case(lens):
    """bench_inputs(lens) plus an output and an fp32 new-state buffer of the right shapes (qk4_v8)."""
    out = torch.empty(sum(lens), 8, 128, dtype=torch.bfloat16, device=dev)
    ns = torch.empty(len(lens), 8, 128, 128, dtype=torch.float32, device=dev)
    return bench_inputs(lens), out, ns


def bench_inputs(lens, seed=0):  # identical to shared/peers/bench_peers.py prefill_inputs
    gen = torch.Generator(device=dev).manual_seed(seed)
    r = lambda *s: torch.randn(*s, device=dev, generator=gen)
    T, N = sum(lens), len(lens)
    cu_ = torch.tensor([0] + list(itertools.accumulate(lens)), device=dev, dtype=torch.int64)
    q = F.normalize(r(T, 4, 128), dim=-1).bfloat16()
    k = F.normalize(r(T, 4, 128), dim=-1).bfloat16()
    v = r(T, 8, 128).bfloat16()
    state = 0.1 * r(N, 8, 128, 128)
    A_log = torch.log(torch.rand(8, device=dev, generator=gen) * 15 + 1)
    dt_bias = r(8)
    a = r(T, 8).bfloat16()
    b = r(T, 8).bfloat16()
    return q, k, v, state, A_log, a, dt_bias, b, cu_, 1.0 / math.sqrt(128)


TARGET = {"1x128": 8, "1x1024": 20, "1x8192": 60, "4x2048": 60, "32x256": 25, "mix30": 30, "1x65536": 200, "64x1024": 150}
PEERS = {"1x128": 52.3, "1x1024": 69.8, "1x8192": 131.9, "4x2048": 147.7, "32x256": 66.9, "mix30": 76.4,
         "1x65536": 423, "64x1024": 243}  # FlashInfer SM90, ANCHORS.md (H200)


def timing(mods, sweep=False):
    rnd = random.Random(5)
    mix = [rnd.randint(8, 600) for _ in range(30)]
    configs = [("1x128", [128]), ("1x1024", [1024]), ("1x8192", [8192]), ("4x2048", [2048] * 4),
               ("32x256", [256] * 32), ("mix30", mix), ("1x65536", [65536]), ("64x1024", [1024] * 64)]
    if os.environ.get("SHORT"):
        configs += [("1x16", [16]), ("1x64", [64]), ("1x259", [259]), ("1x589", [589]), ("8x128", [128] * 8)]
    best = {}
    for cname, lens in configs:
        inp = bench_inputs(lens)
        T, N = sum(lens), len(lens)
        out = torch.empty(T, 8, 128, dtype=torch.bfloat16, device=dev)
        nsf = torch.empty(N, 8, 128, 128, dtype=torch.float32, device=dev)
        nsb = torch.empty(N, 8, 128, 128, dtype=torch.bfloat16, device=dev)
        stb = inp[3].bfloat16()
        q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
        for mod in mods:
            for st, bv in VARIANTS:
                if st == "bf16" and not sweep and bv != 32:
                    continue
                if (mod.np is not None and st == "bf16") or (st, bv) not in mod.fns:
                    continue
                try:
                    ns, s0 = (nsb, stb) if st == "bf16" else (nsf, state)
                    fn = lambda: mod.launch(st, bv, q, k, v, s0, A_log, a, dt_bias, b, cu_, scale, out, ns)
                    ts = kernel_times(fn, iters=15 if T > 30000 else 25)
                    ts.sort()
                    row = {"config": cname, "T": T, "N": N, "variant": f"{st}_bv{bv}{mod.tag}", "NP": np_of(bv, mod.np),
                           "median_us": statistics.median(ts), "p10_us": ts[len(ts) // 10],
                           "p90_us": ts[(9 * len(ts)) // 10], "n": len(ts),
                           "io_GBps": (T * 6144 + N * 8 * 65536 * (2 if st == "f32" else 1) * 2) / statistics.median(ts) / 1e3}
                    RES["timings"].append(row)
                    log(f"time {cname:<8} NP{np_of(bv, mod.np)}{mod.tag} {st}_bv{bv:<3} median {row['median_us']:8.1f} us "
                        f"(p10 {row['p10_us']:.1f} p90 {row['p90_us']:.1f})")
                    if st == "f32":
                        key = cname
                        if key not in best or row["median_us"] < best[key][0]:
                            best[key] = (row["median_us"], f"NP{np_of(bv, mod.np)}{mod.tag}_bv{bv}")
                except Exception:
                    RES["errors"].append(f"time {cname} {st}_bv{bv}: " + traceback.format_exc()[-1500:])
                    log("ERROR", RES["errors"][-1])
        save()
    print("\n=== prefill, fp32 state, pure kernel time (CUPTI, L2 flushed), best variant per config ===")
    print(f"{'config':<9} {'best us':>9} {'variant':<10} {'target':>7} {'FlashInfer':>10}")
    for cname, _ in configs:
        if cname in best:
            print(f"{cname:<9} {best[cname][0]:9.1f} {best[cname][1]:<10} {TARGET.get(cname, '-'):>7} {PEERS.get(cname, '-'):>10}")


def main():
    mods = []
    nps = [None] + [int(x) for x in os.environ.get("NP_SWEEP", "").split(",") if x]
    builds = [(n, ()) for n in nps] + [(None, tuple(d.split("+"))) for d in os.environ.get("DEFS_SWEEP", "").split(",") if d]
    builds += [(None, (), path) for path in os.environ.get("ALT_SRC", "").split(",") if path]
    for np_, defs, *alt in builds:
        try:
            mods.append(Module(np_, defines=defs, src_path=alt[0] if alt else None))
        except Exception as e:
            RES["errors"].append(f"compile NP{np_}: " + repr(e)[-4000:])
            log("COMPILE ERROR", repr(e)[-4000:])
    save()
    if not mods:
        return
    if "prof" in ARGS:  # a few launches of one case for ncu: PROF_CFG=1x1024 PROF_BV=16
        try:
            n, l = (int(x) for x in os.environ.get("PROF_CFG", "1x1024").split("x"))
            bv = int(os.environ.get("PROF_BV", "16"))
            inp = bench_inputs([l] * n)
            q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
            out = torch.empty(n * l, 8, 128, dtype=torch.bfloat16, device=dev)
            ns = torch.empty(n, 8, 128, 128, dtype=torch.float32, device=dev)
            for _ in range(3):
                mods[0].launch("f32", bv, q, k, v, state, A_log, a, dt_bias, b, cu_, scale, out, ns)
            torch.cuda.synchronize()
            log("prof launches done")
        except Exception:
            RES["errors"].append("prof: " + traceback.format_exc()[-1500:])
            log("ERROR", RES["errors"][-1])
    def stage(name, fn):  # one failing stage does not lose the others
        try:
            fn()
        except Exception:
            RES["errors"].append(f"{name}: " + traceback.format_exc()[-1500:])
            log("ERROR", RES["errors"][-1])

    if "stalls" in ARGS:
        stage("stalls", lambda: stalls(mods))
    if "trace" in ARGS:
        stage("trace", lambda: trace(mods))
    if "dump" in ARGS:
        dump(mods)
        return
    if "repro" in ARGS:
        stage("repro", lambda: repro(mods))
    if "check" in ARGS:
        stage("check", lambda: check(mods[:1] if "small" in ARGS else mods))
    if "time" in ARGS or "sweep" in ARGS:
        stage("timing", lambda: timing(mods, sweep="sweep" in ARGS))
    save()
    # check summary last
    fails = [c for c in RES["checks"] if "out" in c and (c["out"]["n_fail_tol"] or c["state"]["n_fail_tol"])]
    worst_o = max((c["out"]["rel_l2"] for c in RES["checks"] if "out" in c), default=float("nan"))
    worst_s = max((c["state"]["rel_l2"] for c in RES["checks"] if "state" in c), default=float("nan"))
    print(f"\nchecks: {len(RES['checks'])} rows, {len(fails)} with tolerance failures; worst out rel-L2 {worst_o:.2e}, "
          f"worst state rel-L2 {worst_s:.2e}; errors: {len(RES['errors'])}")
    for e in RES["errors"][:3]:
        print("  ", e[-400:])


if __name__ == "__main__":
    main()
