"""Device harness for crates/gdn-cuda/kernels/prefill64.cu (chunk-64 prep + split-K walk, sm_90a).

Run on the GPU machine from the repository root:
    PYTHONUNBUFFERED=1 python3 crates/gdn-cuda/kernels/harness/prefill64_harness.py [selftest] [check] [time]
(`selftest`: the wgmma descriptor layouts against torch matmuls; `ablate`: walk time with loads removed;
CONFIGS=1x1024,... limits `time`; `mixlong`: every plan on the contest-like mix's 25 workloads of >= 2048 tokens;
`mixshort`: the fused kernel at every tile width on its 75 workloads of < 2048 tokens (MIX_ALL=1: all 100;
MIX_BUILDS=1+GDN_MINB=4,2: also modules with -DGDN_NP=n and defines, e.g. the occupancy experiments);
`contest_mix.json` = the lengths of gdn_core::workload::contest_prefill_mix(qk4_v8, seed 0), the seed `gdn bench` uses;
`cpab`: A/B of builds on the chunk64 and cp plans — AB_BUILDS="alt;base;base,SCAN8" (';' between builds, ',' between
defines; `alt` compiles ALT_SRC, e.g. the previous commit's prefill64.cu; SCAN8 selects the 8-row scan, WGS2 the
two-warpgroup cp passes), CP_GS segment
counts, CONFIGS; MOD_DEFS=... sets the module `check` and `time` use.)
Reuses prefill_harness.py (inputs, float64 reference, comparison, bench inputs) and times prefill.cu's
policy variant beside it in the same process. Kernel time = CUPTI (torch.profiler) sum of both kernels per call,
L2 flushed (256 MB memset) before every call — the same method as shared/peers/bench_peers.py.
Writes $OUT/prefill64_check.json and $OUT/prefill64_sweep.json.
"""
import ctypes, json, os, random, re, statistics, struct, sys, time, traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import prefill_harness as ph  # noqa: E402
import torch  # noqa: E402
from cuda.bindings import driver as cu  # noqa: E402

OUT = ph.OUT
dev = ph.dev
ARGS = set(sys.argv[1:]) or {"check", "time"}
RES = {"device": torch.cuda.get_device_name(), "checks": [], "timings": [], "errors": [], "compile": {}}
log = ph.log
C = 64
SCAN_SMEM = 139264  # before session 20 (v6-v9 scans); v10 sources state theirs (read, like the record, prep and walk
# sizes, from the compiled source: Module.scan_smem)


def cp_seg_slots(T, N, L):
    return (T // C + N + 1) // L + N + 1


def scan_seqs(T, N, L):
    """Sequences that can need the cp scan (more than 2L chunks): registry.rs prefill64_scan_seqs."""
    return min(N, T // (2 * C * max(L, 1) + 1))


def scan_work_seqs(T, N, longest, L):
    """cost.rs scan_work_seqs: the sequences the cp scan is taken to work on, given the longest length (policy.rs
    cp_scan_kernel takes 8-row CTAs when theirs fit one wave)."""
    even = -(-T // N)
    longest = min(max(longest, even), max(T, even))
    long_seqs = max(1, min(N, T // longest))
    need = 2 * C * max(L, 1) + 1
    long = long_seqs if longest >= need else 0
    return min(long + min((T - long * longest) // need, N - long), scan_seqs(T, N, L))


def cp_segments_for(N, T, HV, sms=132, automatic=True):
    """policy.rs cp_segments: the largest G (3..64) with pass 3 (chains·(G−1) CTAs) in one wave, pass 1
    (chains·(2G−3)) in two, and (automatic) segments of >= 8 chunks."""
    chains, nch = N * HV * 2, max(1, -(-(T // max(N, 1)) // C))
    g = 3
    while g < 64 and chains * g <= sms and chains * (2 * g - 1) <= 2 * sms and (not automatic or nch // (g + 1) >= 8):
        g += 1
    return g


def cp_L_for(N, T, HV, G=None):
    G = G or cp_segments_for(N, T, HV)
    chunks = -(-(T // max(N, 1)) // C)
    return max(1, -(-chunks // G))


def save():
    with open(f"{OUT}/prefill64_check.json", "w") as f:
        json.dump({k: RES[k] for k in ("device", "checks", "errors", "compile")}, f, indent=1)
    with open(f"{OUT}/prefill64_sweep.json", "w") as f:
        json.dump({"device": RES["device"], "timings": RES["timings"]}, f, indent=1)


class Module64:
    def __init__(self, defines=(), selftest=False, src_path=None):
        src = open(src_path or os.path.join(ph.KDIR, "prefill64.cu")).read()
        # pseudo-define SCAN8: the cp plan's scan with 8 value rows per CTA (gdn_prefill64_cp_scan8, grid N·HV·16);
        # WGS2: the cp passes with two warpgroups per CTA (gdn_prefill64_cp_pass{1,3}w_*, one CTA per head)
        self.scan8 = "SCAN8" in defines
        self.wgs = 2 if "WGS2" in defines else 1
        # CARVE<n>: the prep kernel's preferred shared-memory carveout, n percent (session 18: does the driver's
        # default give the prep its register-allowed CTAs per SM?)
        carve = next((int(d[5:]) for d in defines if d.startswith("CARVE")), None)
        # ONE: launch the one-warpgroup walks and passes with 116 KB of dynamic shared memory, so that one CTA fits an
        # SM (v11 layouts need 110616 bytes: two fit; session 21's A/B of the occupancy)
        self.one_per_sm = "ONE" in defines
        defines = tuple(d for d in defines if d not in ("SCAN8", "WGS2", "ONE") and not d.startswith("CARVE"))
        # layout constants from the source (an A/B baseline from git may differ): record bytes, walk smem
        self.ws_chunk = int(re.search(r"WS_CHUNK_BYTES == (\d+)", src).group(1))
        ws = re.search(r"WALK_SMEM == (\d+)", src)
        self.walk_smem = int(ws.group(1))
        w2 = re.search(r"WALK2_SMEM == (\d+)", src)
        self.walk2_smem = int(w2.group(1)) if w2 else None
        self.prep_smem = int(re.search(r"PREP_SMEM == (\d+)", src).group(1))
        sc = re.search(r"SCAN_SMEM == (\d+)", src)
        self.scan_smem = int(sc.group(1)) if sc else SCAN_SMEM
        self.prep_linear = "blockIdx.x % (unsigned)HV" in src
        # v11 scans (session 21) find their sequence: the grid covers only K = min(N, T // (128 L + 1)) of them
        self.scan_long_seqs = "scan_find_seq" in src
        if selftest:
            src += ('\nextern "C" __global__ void __launch_bounds__(128, 1) gdn_wgmma_selftest(const __nv_bfloat16* A, '
                    'const __nv_bfloat16* B, float* D1, float* D2, float* D3) { gdn_prefill64::wg_selftest(A, B, D1, D2, D3); }\n')
        # the source's two compilation units: the runtime's module "prefill64" and, with GDN_PREFILL64_WIDE, module
        # "prefill64_wide" (the two-warpgroup cp passes). GDN_CP_WGS2 builds them into one unit in session-12 sources
        # (an ALT_SRC from git); later sources ignore it.
        units = [[b"-DGDN_CP_WGS2"]] + ([[b"-DGDN_PREFILL64_WIDE=1"]] if "GDN_PREFILL64_WIDE" in src else [])
        t = time.time()
        self.modules = []
        for unit in units:
            opts = [b"-arch=sm_90a", b"-std=c++17", b"-lineinfo"] + unit + [f"-D{d}".encode() for d in defines] + \
                [f"-I{d}".encode() for d in ph.include_dirs()]
            cubin = ph.compile_cubin(src, "prefill64.cu", opts)
            self.modules.append(ph._ok(cu.cuModuleLoadData(cubin), "load"))
        self.walk_launch = max(self.walk_smem, 116 * 1024) if self.one_per_sm else self.walk_smem
        WS = self.walk_launch
        A = cu.CUfunction_attribute
        self.fns, regs = {}, {}
        names = [("gdn_prefill64_prep", self.prep_smem), ("gdn_prefill64_walk_f32", WS),
                 ("gdn_prefill64_walk_bf16", WS), ("gdn_prefill64_cp_scan", self.scan_smem)] + \
            [(f"gdn_prefill64_cp_pass{i}_{st}", WS) for i in (1, 3) for st in ("f32", "bf16")] + \
            ([("gdn_prefill64_cp_scan8", self.scan_smem)] if "gdn_prefill64_cp_scan8" in src else []) + \
            ([(f"gdn_prefill64_cp_pass{i}w_{st}", self.walk2_smem) for i in (1, 3) for st in ("f32", "bf16")]
             if self.walk2_smem else [])
        if selftest:
            names.append(("gdn_wgmma_selftest", 64 * 1024))
        for name, sm in names:
            found = [cu.cuModuleGetFunction(m, name.encode()) for m in self.modules]
            f = next((r[1] for r in found if r[0] == cu.CUresult.CUDA_SUCCESS), None)
            if f is None:
                raise RuntimeError(f"{name}: in none of the compiled units")
            ph._ok((cu.cuFuncSetAttribute(f, A.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, sm)[0], None), "smem")
            regs[name] = (ph._ok(cu.cuFuncGetAttribute(A.CU_FUNC_ATTRIBUTE_NUM_REGS, f), "regs"),
                          ph._ok(cu.cuFuncGetAttribute(A.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f), "local"))
            self.fns[name] = f
        pf = self.fns["gdn_prefill64_prep"]
        if carve is not None:
            ph._ok((cu.cuFuncSetAttribute(pf, A.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carve)[0], None),
                   "carveout")
        occ = ph._ok(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(pf, 128, self.prep_smem), "occupancy")
        log(f"prep: {occ} CTAs per SM by the occupancy API (carveout {carve})")
        RES["compile"] = {"seconds": time.time() - t, "regs_local": regs}
        log(f"compiled prefill64 in {time.time() - t:.2f}s regs/local {regs}")
        self.ws = None

    def launch(self, st, q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, out, new_state, ws_poison=False,
               cp_L=0, wgs=None, scan8=None):
        """cp_L = 0: prep + plain walk; cp_L = L >= 1: prep + context-parallel pass 1, scan, pass 3 (wgs: warpgroups
        per cp walk CTA, default the module's)."""
        wgs = wgs or self.wgs
        scan8 = self.scan8 if scan8 is None else scan8
        N = cu_seqlens.numel() - 1
        T, H, HV = q.shape[0], q.shape[1], v.shape[1]
        slots = T // C + N + 1
        need = slots * HV * self.ws_chunk
        G = cp_seg_slots(T, N, cp_L) if cp_L else 0
        # after the records: cp's states, or (chunk64, v13) the walk's order, i64 [N] rounded up to 256 bytes
        need += 3 * G * HV * 65536 if cp_L else -(-N * 8 // 256) * 256
        if self.ws is None or self.ws.numel() < need:
            self.ws = torch.empty(need, dtype=torch.uint8, device=dev)
        if ws_poison:
            self.ws[:need].fill_(0xFF)  # NaN bf16 / f32 patterns: a record the walk reads but prep did not write shows
        ptr = lambda x: 0 if x is None else x.data_ptr()
        raw = struct.pack("<12Qqq f i i i", ptr(q), ptr(k), ptr(v), ptr(a), ptr(b), ptr(A_log), ptr(dt_bias),
                          ptr(cu_seqlens), ptr(state), ptr(new_state), ptr(out), self.ws.data_ptr(), N, T,
                          float(scale), H, HV, cp_L)
        assert len(raw) == 128
        bufp = ctypes.create_string_buffer(raw, len(raw))
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(bufp))
        stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
        if N == 0:
            return
        pg = (slots * HV, 1) if self.prep_linear else (slots, HV)
        err, = cu.cuLaunchKernel(self.fns["gdn_prefill64_prep"], *pg, 1, 128, 1, 1, self.prep_smem, stream,
                                 ctypes.addressof(argv), 0)
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"prep launch: {err}")
        if cp_L:
            cph, wt, w = 2 // wgs, 128 * wgs, "w" if wgs == 2 else ""
            wsm = self.walk2_smem if wgs == 2 else self.walk_launch
            K = scan_seqs(T, N, cp_L) if self.scan_long_seqs else N
            for name, grid, block, sm in ((f"gdn_prefill64_cp_pass1{w}_{st}", (G, HV, 2 * cph), wt, wsm),
                                          ("gdn_prefill64_cp_scan8", (K * HV * 16, 1, 1), 256, self.scan_smem)
                                          if scan8 else ("gdn_prefill64_cp_scan", (K * HV * 8, 1, 1), 256, self.scan_smem),
                                          (f"gdn_prefill64_cp_pass3{w}_{st}", (G, HV, cph), wt, wsm)):
                if grid[0] == 0:
                    continue  # (no sequence can need the scan)
                err, = cu.cuLaunchKernel(self.fns[name], *grid, block, 1, 1, sm, stream, ctypes.addressof(argv), 0)
                if err != cu.CUresult.CUDA_SUCCESS:
                    raise RuntimeError(f"{name} launch: {err}")
            return
        err, = cu.cuLaunchKernel(self.fns[f"gdn_prefill64_walk_{st}"], N * HV * 2, 1, 1, 128, 1, 1,
                                 self.walk_launch, stream, ctypes.addressof(argv), 0)
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"walk launch: {err}")


def run64(mod, st, inp, poison_ws=True, cp_L=0, wgs=None):
    q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
    T, HV, N = q.shape[0], v.shape[1], cu_.numel() - 1
    sd = torch.bfloat16 if st == "bf16" else torch.float32
    out = torch.full((T, HV, 128), float("nan"), dtype=torch.bfloat16, device=dev)
    ns = torch.full((N, HV, 128, 128), float("nan"), dtype=sd, device=dev)
    stt = state.to(sd) if state is not None else None
    mod.launch(st, q, k, v, stt, A_log, a, dt_bias, b, cu_, scale, out, ns, ws_poison=poison_ws, cp_L=cp_L, wgs=wgs)
    torch.cuda.synchronize()
    return out, ns


def check(mod):
    rnd = random.Random(7)
    mixed57 = [rnd.choice([0, 1, 2, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 129, 255, 300]) for _ in range(57)]
    # 1,100 short sequences and five that need the cp scan at L 1-2 (> 128 L tokens), two of them past the scan's
    # first 1,024-sequence search pass (v11: a scan CTA finds the k-th such sequence)
    many = [rnd.choice([0, 1, 5, 17, 40]) for _ in range(1100)]
    for i, n in ((3, 300), (1023, 129), (1024, 260), (1030, 520), (1099, 390)):
        many[i] = n
    cases = [
        ("many1100 1/2 slow", many, 1, 2, True, "slow"),
        ("edge 4/8 state", [0, 1, 63, 64, 65], 4, 8, True, "bench"),
        ("edge 4/8 nostate slow", [65, 0, 1, 64, 63], 4, 8, False, "slow"),
        ("mixed57 4/8 slow", mixed57, 4, 8, True, "slow"),
        ("mixed 8/16 slow", mixed57[:12], 8, 16, True, "slow"),
        ("mixed 16/32 bench", mixed57[12:20], 16, 32, True, "bench"),
        ("mixed 2/8 slow", mixed57[20:30], 2, 8, True, "slow"),
        ("odd HV 1/3 slow", [130, 7, 64], 1, 3, True, "slow"),
        ("extreme 4/8", [1, 17, 64, 200], 4, 8, True, "extreme"),
        ("extreme 2/8 nostate", [300, 5], 2, 8, False, "extreme"),
        ("long 2x1500 slow", [1500, 1237], 4, 8, True, "slow"),
    ]
    for name, lens, H, HV, stp, gates in cases:
        try:
            inp = ph.make_inputs(lens, H, HV, seed=hash(name) % 1000, state=stp, gates=gates)
            ro, rs = ph.reference(*inp)
            runs = [(st, 0, 1) for st in ("f32", "bf16")] + [("f32", 1, 1), ("f32", 2, 1), ("bf16", 3, 1)]
            if mod.walk2_smem:  # the cp passes with two warpgroups per CTA
                runs += [("f32", 1, 2), ("bf16", 3, 2)]
            for st, L, wgs in runs:
                if st == "bf16" and not name.startswith(("edge 4/8 state", "mixed57", "long")):
                    continue
                o, ns = run64(mod, st, inp, cp_L=L, wgs=wgs)
                if st == "bf16" and inp[3] is not None:
                    inp2 = list(inp)
                    inp2[3] = inp2[3].bfloat16().float()
                    ro2, rs2 = ph.reference(*inp2)
                else:
                    ro2, rs2 = ro, rs
                vname = st + (f" cp{'w' if wgs == 2 else ''} L={L}" if L else "")
                row = {"case": name, "variant": vname, "out": ph.compare(o, ro2), "state": ph.compare(ns, rs2)}
                RES["checks"].append(row)
                ok = row["out"]["n_fail_tol"] == 0 and row["state"]["n_fail_tol"] == 0
                log(f"check64 {vname:<13} {name:<24} out {row['out']['rel_l2']:.2e} state {row['state']['rel_l2']:.2e} "
                    f"fails {row['out']['n_fail_tol']}/{row['state']['n_fail_tol']} nan {row['out']['n_nan']}/"
                    f"{row['state']['n_nan']} {'OK' if ok else 'FAIL'}")
        except Exception:
            RES["errors"].append(f"check {name}: " + traceback.format_exc()[-2000:])
            log("ERROR", RES["errors"][-1])
        save()
    try:
        inp = ph.make_inputs([16384], 4, 8, seed=11, state=True, gates="slow")
        ro, rs = ph.reference(*inp)
        o, ns = run64(mod, "f32", inp)
        row = {"case": "long16k slow", "variant": "f32", "out": ph.compare(o, ro),
               "out_last1k": ph.compare(o[-1024:], ro[-1024:]), "state": ph.compare(ns, rs)}
        RES["checks"].append(row)
        log(f"check64 long16k out {row['out']['rel_l2']:.2e} last1k {row['out_last1k']['rel_l2']:.2e} "
            f"state {row['state']['rel_l2']:.2e} fails {row['out']['n_fail_tol']}/{row['state']['n_fail_tol']}")
        o2, n2 = run64(mod, "f32", inp, poison_ws=False)
        RES["checks"].append({"case": "determinism", "equal": bool(torch.equal(o, o2) and torch.equal(ns, n2))})
        log("determinism", RES["checks"][-1])
        first = {}
        # context parallel: 16 and 6 segments of the 256 chunks (and 16 with two warpgroups per CTA), compared at
        # intervals; the two-warpgroup passes must equal the one-warpgroup ones bitwise
        for L, wgs in ((16, 1), (51, 1)) + (((16, 2),) if mod.walk2_smem else ()):
            o3, n3 = run64(mod, "f32", inp, cp_L=L, wgs=wgs)
            if L in first:
                RES["checks"].append({"case": f"cp L={L} two warpgroups bitwise", "equal": bool(
                    torch.equal(o3, first[L][0]) and torch.equal(n3, first[L][1]))})
                log("determinism", RES["checks"][-1])
            first[L] = (o3, n3)
            row = {"case": "long16k slow", "variant": f"f32 cp{'w' if wgs == 2 else ''} L={L}", "out": ph.compare(o3, ro),
                   "out_last1k": ph.compare(o3[-1024:], ro[-1024:]), "state": ph.compare(n3, rs),
                   "out_by_4k": [ph.compare(o3[i:i + 4096], ro[i:i + 4096])["rel_l2"] for i in range(0, 16384, 4096)]}
            RES["checks"].append(row)
            log(f"check64 long16k cp{'w' if wgs == 2 else ''} L={L} out {row['out']['rel_l2']:.2e} last1k {row['out_last1k']['rel_l2']:.2e} "
                f"state {row['state']['rel_l2']:.2e} by 4k {['%.2e' % x for x in row['out_by_4k']]} "
                f"fails {row['out']['n_fail_tol']}/{row['state']['n_fail_tol']}")
            o4, n4 = run64(mod, "f32", inp, poison_ws=False, cp_L=L, wgs=wgs)
            RES["checks"].append({"case": f"determinism cp{'w' if wgs == 2 else ''} L={L}", "equal": bool(torch.equal(o3, o4) and torch.equal(n3, n4))})
            log("determinism", RES["checks"][-1])
    except Exception:
        RES["errors"].append("long: " + traceback.format_exc()[-2000:])
        log("ERROR", RES["errors"][-1])
    save()


def times(fn, iters):
    from torch.profiler import profile, ProfilerActivity
    if ph._flush is None:
        ph._flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=dev)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            ph._flush.zero_()
            fn()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.name.startswith("gdn_prefill")]
    dur = lambda e: e.device_time if hasattr(e, "device_time") else e.cuda_time
    prep = [dur(e) for e in ev if "prep" in e.name]
    walk = [dur(e) for e in ev if "walk" in e.name]
    other = [dur(e) for e in ev if "prep" not in e.name and "walk" not in e.name]
    if not walk and prep:  # context parallel: the walk is pass 1 + scan + pass 3 of each call (v11: a call whose
        # sequences cannot need the scan launches none; it counts 0)
        calls = []
        for e in ev:
            if "prep" in e.name:
                calls.append({"pass1": 0.0, "scan": 0.0, "pass3": 0.0})
            elif calls:
                calls[-1][next(k for k in ("pass1", "scan", "pass3") if k in e.name)] += dur(e)
        walk = [sum(c.values()) for c in calls]
        other = {k: [c[k] for c in calls] for k in ("pass1", "scan", "pass3")}
    return prep, walk, other


def timing(mod, v5):
    rnd = random.Random(5)
    mix = [rnd.randint(8, 600) for _ in range(30)]
    configs = [("1x128", [128]), ("1x1024", [1024]), ("1x8192", [8192]), ("4x2048", [2048] * 4),
               ("32x256", [256] * 32), ("mix30", mix), ("1x65536", [65536]), ("64x1024", [1024] * 64),
               # around the context-parallel thresholds (not ANCHORS configurations)
               ("1x2048", [2048]), ("1x4096", [4096]), ("1x16384", [16384]), ("2x16384", [16384] * 2),
               ("2x4096", [4096, 4096])]
    only = os.environ.get("CONFIGS")
    if only:
        configs = [c for c in configs if c[0] in only.split(",")]
    table = []
    for cname, lens in configs:
        try:
            inp = ph.bench_inputs(lens)
            T, N = sum(lens), len(lens)
            q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
            out = torch.empty(T, 8, 128, dtype=torch.bfloat16, device=dev)
            ns = torch.empty(N, 8, 128, 128, dtype=torch.float32, device=dev)
            iters = 15 if T > 30000 else 25
            row = {"config": cname, "T": T, "N": N, "n": iters, "target_us": ph.TARGET.get(cname, '-'),
                   "flashinfer_us": ph.PEERS.get(cname, '-')}
            for walk in ("wg",):
                prep, wk, _ = times(lambda: mod.launch("f32", q, k, v, state, A_log, a, dt_bias, b, cu_, scale, out, ns),
                                    iters)
                tot = sorted(p + w for p, w in zip(prep, wk))
                row[walk] = {"median_us": statistics.median(tot), "p10_us": tot[len(tot) // 10],
                             "p90_us": tot[(9 * len(tot)) // 10], "prep_median_us": statistics.median(prep),
                             "walk_median_us": statistics.median(wk)}
            if N * 8 * 2 <= 132 // 2:  # few chains: context parallel at the policy's segment count and around it
                G0 = cp_segments_for(N, T, 8)
                for G in sorted({3, G0 - 2, G0 - 1, G0, G0 + 1, G0 + 2}):
                    if G < 3:
                        continue
                    L = cp_L_for(N, T, 8, G)
                    prep, wk, parts = times(lambda: mod.launch("f32", q, k, v, state, A_log, a, dt_bias, b, cu_, scale,
                                                               out, ns, cp_L=L), iters)
                    tot = sorted(p_ + w_ for p_, w_ in zip(prep, wk))
                    med = {k_: statistics.median(v_) for k_, v_ in parts.items()}
                    row[f"cp_G{G}"] = {"L": L, "median_us": statistics.median(tot), "p10_us": tot[len(tot) // 10],
                                       "p90_us": tot[(9 * len(tot)) // 10], "prep_median_us": statistics.median(prep),
                                       "walk_median_us": statistics.median(wk), "policy": G == G0,
                                       **{f"{k_}_median_us": v_ for k_, v_ in med.items()}}
                    log(f"time {cname:<8} cp G={G:<2} L={L:<4} total {row[f'cp_G{G}']['median_us']:.1f} "
                        f"(prep {statistics.median(prep):.1f} + pass1 {med['pass1']:.1f} + scan {med['scan']:.1f} + "
                        f"pass3 {med['pass3']:.1f}; p10 {tot[len(tot) // 10]:.1f} p90 {tot[(9 * len(tot)) // 10]:.1f})"
                        + ("  <- policy" if G == G0 else ""))
            chains = N * 8
            bv = next((x for x in (128, 64, 32) if chains * 128 // x >= 0.9 * 132), 16)
            _, _, v5t = times(lambda: v5.launch("f32", bv, q, k, v, state, A_log, a, dt_bias, b, cu_, scale, out, ns), iters)
            v5t.sort()
            row["v5_variant"] = f"f32_bv{bv}"
            row["v5_median_us"] = statistics.median(v5t)
            RES["timings"].append(row)
            table.append(row)
            log(f"time {cname:<8} " + "  ".join(
                f"{w_} {row[w_]['median_us']:.1f} (prep {row[w_]['prep_median_us']:.1f} + walk "
                f"{row[w_]['walk_median_us']:.1f}; p10 {row[w_]['p10_us']:.1f} p90 {row[w_]['p90_us']:.1f})" for w_ in ("wg",))
                + f"  v5 {bv} {row['v5_median_us']:.1f}  target {ph.TARGET.get(cname, '-')}  FI {ph.PEERS.get(cname, '-')}")
        except Exception:
            RES["errors"].append(f"time {cname}: " + traceback.format_exc()[-2000:])
            log("ERROR", RES["errors"][-1])
        save()
    print("\n=== chunk64 plan (prep + walk) vs fused v5, fp32 state, CUPTI kernel-time sum, L2 flushed; device above ===")
    print(f"{'config':<9} " + " ".join(f"{w_ + ' total':>11} {w_ + ' prep':>10} {w_ + ' walk':>10}" for w_ in ("wg",))
          + f" {'v5':>8} {'target':>7} {'FI':>7}")
    for r in table:
        print(f"{r['config']:<9} " + " ".join(f"{r[w_]['median_us']:11.1f} {r[w_]['prep_median_us']:10.1f} "
                                             f"{r[w_]['walk_median_us']:10.1f}" for w_ in ("wg",))
              + f" {r['v5_median_us']:8.1f} {r['target_us']!s:>7} {r['flashinfer_us']!s:>7}"
              + "".join(f"  cp G={k[4:]} {x['median_us']:.1f}" + ("*" if x["policy"] else "")
                        for k, x in r.items() if k.startswith("cp_G")))


def cpab():
    """A/B of walk/prep builds on the cp and chunk64 plans: AB_BUILDS = "base;GDN_WG_SLOTS=1,GDN_PREP_LINEAR;..."
    (';' between builds, ',' between defines, 'base' = no define), CP_GS = segment counts, CONFIGS = anchors.
    Also checks every build's cp output against the first build's (bitwise expected)."""
    builds = [b for b in os.environ.get("AB_BUILDS", "base").split(";") if b]
    alt = os.environ.get("ALT_SRC")  # builds named alt[,DEFINE...] compile that source (e.g. the previous commit's)
    mk = lambda b: Module64(tuple(d for d in b.split(",") if d not in ("base", "alt")),
                            src_path=alt if b.split(",")[0] == "alt" else None)
    mods = [(b, mk(b)) for b in builds]
    gs = [int(x) for x in os.environ.get("CP_GS", "9").split(",")]
    cfgs = {"1x8192": [8192], "1x16384": [16384], "1x65536": [65536], "2x16384": [16384] * 2, "1x4096": [4096],
            "64x1024": [1024] * 64, "4x2048": [2048] * 4, "1x2048": [2048], "1x1024": [1024], "1x1536": [1536],
            "2x8192": [8192] * 2, "40x205": [205] * 40, "57x144": [144] * 57, "12x683": [683] * 12}
    mixl = json.load(open(os.path.join(HERE, "contest_mix.json")))
    for cname in os.environ.get("CONFIGS", "1x8192,1x65536").split(","):
        lens = mixl[cname] if cname.startswith("prefill_") else cfgs[cname]  # (a contest-mix workload by name)
        inp = ph.bench_inputs(lens)
        T, N = sum(lens), len(lens)
        q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
        iters = 15 if T > 30000 else 25
        # (CP_ALLN=1: the cp plans for many sequences too)
        plans = [0] + [cp_L_max(lens, G) for G in gs] if N <= 4 or os.environ.get("CP_ALLN") else [0]
        for L in plans:
            ref = None
            for tag, mod in mods:
                out = torch.full((T, 8, 128), float("nan"), dtype=torch.bfloat16, device=dev)
                ns = torch.full((N, 8, 128, 128), float("nan"), dtype=torch.float32, device=dev)
                mod.launch("f32", q, k, v, state, A_log, a, dt_bias, b, cu_, scale, out, ns, cp_L=L)
                torch.cuda.synchronize()
                same = "ref" if ref is None else ("bitwise" if torch.equal(out, ref[0]) and torch.equal(ns, ref[1])
                                                  else f"DIFF out {(out.float() - ref[0].float()).abs().max().item():.3g}")
                nan = bool(torch.isnan(out).any() or torch.isnan(ns).any())
                if ref is None:
                    ref = (out.clone(), ns.clone())
                prep, wk, parts = times(lambda: mod.launch("f32", q, k, v, state, A_log, a, dt_bias, b, cu_, scale,
                                                           out, ns, cp_L=L), iters)
                tot = sorted(p_ + w_ for p_, w_ in zip(prep, wk))
                med = {k_: statistics.median(v_) for k_, v_ in parts.items()} if L else {}
                row = {"ab": tag, "config": cname, "L": L, "median_us": statistics.median(tot),
                       "p10_us": tot[len(tot) // 10], "p90_us": tot[(9 * len(tot)) // 10],
                       "prep_us": statistics.median(prep), **{f"{k_}_us": v_ for k_, v_ in med.items()}, "same": same,
                       "nan": nan}
                RES["timings"].append(row)
                log(f"ab {cname:<8} L={L:<4} {tag:<32} total {row['median_us']:7.1f} (p10 {row['p10_us']:.1f} "
                    f"p90 {row['p90_us']:.1f}) prep {row['prep_us']:.1f} " +
                    " ".join(f"{k_} {v_:.1f}" for k_, v_ in med.items()) + f"  [{same}{' NAN' if nan else ''}]")
        save()


def cp_L_max(lens, G):
    """Segment length (chunks) that cuts the longest sequence into G segments."""
    chunks = -(-max(lens) // C)
    return max(1, -(-chunks // G))


def mix_fused_row(mods, name, lens):
    """Inputs (bench_peers') and outputs of one mix workload, and a row with the fused kernel's median time at
    every tile width of every module in `mods` (key fused_bv<BV><module tag>): what `mixlong` and `mixshort`
    both start from."""
    inp = ph.bench_inputs(lens)
    T, N = sum(lens), len(lens)
    q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
    out = torch.empty(T, 8, 128, dtype=torch.bfloat16, device=dev)
    ns = torch.empty(N, 8, 128, 128, dtype=torch.float32, device=dev)
    row = {"mix": name, "T": T, "N": N, "max_len": max(lens), "n": 15}
    for m in mods:
        for bv in (16, 32, 64, 128):
            if ("f32", bv) not in m.fns:
                continue
            _, _, t5 = times(lambda: m.launch("f32", bv, q, k, v, state, A_log, a, dt_bias, b, cu_, scale, out, ns), 15)
            row[f"fused_bv{bv}{m.tag}"] = statistics.median(t5)
    return inp, out, ns, row


def mix_modules():
    """The production fused module, then one per MIX_BUILDS item: 'NP[+DEFINE...]' (e.g. MIX_BUILDS=1+GDN_MINB=4,2):
    -DGDN_NP=NP plus the defines — occupancy experiments (fewer producers, smaller ring, more CTAs per SM) — and one
    per ALT_SRC file (another version of prefill.cu, see prefill_harness.py)."""
    mods = [ph.Module(None)]
    for item in (x for x in os.environ.get("MIX_BUILDS", "").split(",") if x):
        np_, *defs = item.split("+")
        mods.append(ph.Module(int(np_), defines=tuple(defs)))
    for path in (x for x in os.environ.get("ALT_SRC", "").split(",") if x):  # other prefill.cu versions (A/B)
        mods.append(ph.Module(None, src_path=path))
    return mods


def mixlong(mod, v5):
    """Plans on mixed-length workloads (one long sequence among short ones is typical): fused at every tile width,
    chunk64, and cp with L cut from the LONGEST sequence (G segments of it) — the data for a length-aware rule."""
    mix = json.load(open(os.path.join(HERE, "contest_mix.json")))
    for name, lens in ((n, l) for n, l in mix.items() if sum(l) >= 2048):
        try:
            inp, out, ns, row = mix_fused_row([v5], name, lens)
            q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
            prep, wk, _ = times(lambda: mod.launch("f32", q, k, v, state, A_log, a, dt_bias, b, cu_, scale, out, ns), 15)
            row["chunk64"] = statistics.median([p_ + w_ for p_, w_ in zip(prep, wk)])
            # cp with one warpgroup per walk CTA (cp_G*) and with two (cp2_G*: one CTA per head, twice the segments)
            for wgs, key, gs in ((1, "cp", (2, 3, 4, 6, 9, 12, 16)), (2, "cp2", (3, 4, 6, 9, 12, 16, 24, 32))):
                if wgs == 2 and not mod.walk2_smem:
                    continue
                for G in gs:
                    L = cp_L_max(lens, G)
                    s8 = scan_work_seqs(sum(lens), len(lens), max(lens), L) * 8 * 16 <= 132  # the scan policy.rs picks
                    prep, wk, parts = times(lambda: mod.launch("f32", q, k, v, state, A_log, a, dt_bias, b, cu_, scale,
                                                               out, ns, cp_L=L, wgs=wgs, scan8=s8), 15)
                    row[f"{key}_G{G}"] = {"L": L, "median_us": statistics.median([p_ + w_ for p_, w_ in zip(prep, wk)]),
                                          "prep": statistics.median(prep),
                                          **{k_: statistics.median(v_) for k_, v_ in parts.items()}}
            RES["timings"].append(row)
            best_cp = min((k_ for k_ in row if k_.startswith(("cp_G", "cp2_G"))), key=lambda k_: row[k_]["median_us"])
            log(f"mixlong {name:<22} max {max(lens):<5} " + " ".join(f"bv{bv} {row[f'fused_bv{bv}']:.1f}" for bv in (16, 32, 64, 128))
                + f" chunk64 {row['chunk64']:.1f} " + " ".join(f"{k_}/L{row[k_]['L']} {row[k_]['median_us']:.1f}"
                                                               for k_ in row if k_.startswith(("cp_G", "cp2_G")))
                + f"  best cp {best_cp}")
        except Exception:
            RES["errors"].append(f"mixlong {name}: " + traceback.format_exc()[-2000:])
            log("ERROR", RES["errors"][-1])
        save()


def mixshort(mods):
    """The fused kernel at every tile width (of every module in `mods`) on the contest-like mix's 75 workloads of
    < 2048 tokens (where cp and chunk64 never win; MIX_ALL=1: all 100): the data for the cost model's short and
    medium range (tests/cost.rs) and for the occupancy experiments (`mix_modules`)."""
    mix = json.load(open(os.path.join(HERE, "contest_mix.json")))
    every = bool(os.environ.get("MIX_ALL"))
    for name, lens in ((n, l) for n, l in mix.items() if every or sum(l) < 2048):
        try:
            _, _, _, row = mix_fused_row(mods, name, lens)
            RES["timings"].append(row)
            fused = {k_[len("fused_"):]: v_ for k_, v_ in row.items() if k_.startswith("fused_")}
            best = min(fused, key=fused.get)
            log(f"mixshort {name:<22} N {row['N']:<3} T {row['T']:<5} max {row['max_len']:<5} "
                + " ".join(f"{k_} {v_:.1f}" for k_, v_ in fused.items()) + f"  best {best} {fused[best]:.1f}")
        except Exception:
            RES["errors"].append(f"mixshort {name}: " + traceback.format_exc()[-2000:])
            log("ERROR", RES["errors"][-1])
    save()


def ablate():
    """Walk time of the wgmma walker with loads removed (results wrong; timing only): is it load- or issue-bound?"""
    cfgs = [("1x1024", [1024]), ("1x8192", [8192]), ("64x1024", [1024] * 64)]
    for tag, defs in (("full", []), ("no K/Q/V", ["GDN_WG_NOKQV"]), ("no record", ["GDN_WG_NOREC"]),
                      ("no loads", ["GDN_WG_NOKQV", "GDN_WG_NOREC"])):
        try:
            m = Module64(defines=defs)
            for cname, lens in cfgs:
                inp = ph.bench_inputs(lens)
                T, N = sum(lens), len(lens)
                q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
                out = torch.empty(T, 8, 128, dtype=torch.bfloat16, device=dev)
                ns = torch.empty(N, 8, 128, 128, dtype=torch.float32, device=dev)
                prep, wk, _ = times(lambda: m.launch("f32", q, k, v, state, A_log, a, dt_bias, b, cu_, scale, out, ns), 15)
                row = {"ablation": tag, "config": cname, "walk_median_us": statistics.median(wk),
                       "per_chunk_us": statistics.median(wk) / ((max(lens) + 63) // 64)}
                RES["timings"].append(row)
                log(f"ablate {tag:<10} {cname:<8} walk {row['walk_median_us']:8.1f} us  per chunk {row['per_chunk_us']:.3f}")
        except Exception:
            RES["errors"].append(f"ablate {tag}: " + traceback.format_exc()[-2000:])
            log("ERROR", RES["errors"][-1])
    save()


def selftest():
    """The wgmma operand layouts (128-byte swizzle, K-major and MN-major descriptors) against torch matmuls, for the
    compiled LBO/SBO of the MN-major update operand and the swapped pair."""
    g = torch.Generator(device="cpu").manual_seed(3)
    A = torch.randn(64, 128, generator=g).bfloat16().to(dev)
    B = torch.randn(128, 128, generator=g).bfloat16().to(dev)
    Af, Bf = A.double(), B.double()
    want = {"D1 K-major n128": Af @ Bf.T, "D2 MN-major n128": Af[:, :64] @ Bf[:64, :],
            "D3 K-major n64": Af[:, :64] @ Bf[:64, :64].T}
    for tag, defs in (("lbo16384_sbo1024", ["GDN_WGMMA_SELFTEST"]),
                      ("lbo1024_sbo16384", ["GDN_WGMMA_SELFTEST", "WG_UPD_LBO=1024", "WG_UPD_SBO=16384"])):
        try:
            m = Module64(defines=defs, selftest=True)
            D = [torch.full((64, 128), float("nan"), dtype=torch.float32, device=dev) for _ in range(3)]
            ptrs = [ctypes.c_void_p(x.data_ptr()) for x in [A, B] + D]
            argv = (ctypes.c_void_p * 5)(*[ctypes.addressof(x) for x in ptrs])
            err, = cu.cuLaunchKernel(m.fns["gdn_wgmma_selftest"], 1, 1, 1, 128, 1, 1, 64 * 1024,
                                     cu.CUstream(torch.cuda.current_stream().cuda_stream), ctypes.addressof(argv), 0)
            torch.cuda.synchronize()
            res = {}
            for (name, ref), d in zip(want.items(), D):
                got = d[:, :ref.shape[1]].double()
                res[name] = float(((got - ref).norm() / ref.norm()).item()) if torch.isfinite(got).all() else float("nan")
            RES["checks"].append({"case": "wgmma selftest", "variant": tag, "launch": str(err), "rel_l2": res})
            log(f"selftest {tag}: {err} " + " ".join(f"{k} {v:.2e}" for k, v in res.items()))
        except Exception:
            RES["errors"].append(f"selftest {tag}: " + traceback.format_exc()[-2000:])
            log("ERROR", RES["errors"][-1])
    save()


def main():
    if "selftest" in ARGS:
        selftest()
    if "ablate" in ARGS:
        ablate()
    try:
        md = os.environ.get("MOD_DEFS")  # the module `check` / `time` use (default: no define)
        mod = Module64(tuple(md.split(",")) if md else ())
    except Exception:
        RES["errors"].append("compile: " + traceback.format_exc()[-4000:])
        log("COMPILE ERROR", RES["errors"][-1])
        save()
        return
    if "prof" in ARGS:  # three launches of 1x1024 for ncu (PROF_CFG=NxLEN, PROF_L: the cp plan's segment chunks)
        n, l = (int(x) for x in os.environ.get("PROF_CFG", "1x1024").split("x"))
        cp_L = int(os.environ.get("PROF_L", "0"))
        inp = ph.bench_inputs([l] * n)
        q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
        out = torch.empty(n * l, 8, 128, dtype=torch.bfloat16, device=dev)
        ns = torch.empty(n, 8, 128, 128, dtype=torch.float32, device=dev)
        for _ in range(3):
            mod.launch("f32", q, k, v, state, A_log, a, dt_bias, b, cu_, scale, out, ns, cp_L=cp_L)
        torch.cuda.synchronize()
        log("prof launches done")
        return
    if "cpab" in ARGS:
        try:
            cpab()
        except Exception:
            RES["errors"].append("cpab: " + traceback.format_exc()[-2000:])
            log("ERROR", RES["errors"][-1])
    if "check" in ARGS:
        check(mod)
    if "mixlong" in ARGS:
        try:
            mixlong(mod, ph.Module(None))
        except Exception:
            RES["errors"].append("mixlong: " + traceback.format_exc()[-2000:])
            log("ERROR", RES["errors"][-1])
    if "mixshort" in ARGS:
        try:
            mixshort(mix_modules())
        except Exception:
            RES["errors"].append("mixshort: " + traceback.format_exc()[-2000:])
            log("ERROR", RES["errors"][-1])
    if "time" in ARGS:
        try:
            v5 = ph.Module(None)
            timing(mod, v5)
        except Exception:
            RES["errors"].append("timing: " + traceback.format_exc()[-2000:])
            log("ERROR", RES["errors"][-1])
    save()
    fails = [c for c in RES["checks"] if "out" in c and (c["out"]["n_fail_tol"] or c["state"]["n_fail_tol"])]
    print(f"\nchecks: {len(RES['checks'])} rows, {len(fails)} with tolerance failures; errors: {len(RES['errors'])}")
    for e in RES["errors"][:4]:
        print("  ", e[-600:])


if __name__ == "__main__":
    main()
