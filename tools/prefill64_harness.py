"""Device harness for the chunk-64 prefill kernels, crates/gdn-cuda/kernels/prefill_chunk64/ (prep + walk: the
chunk64 plan; prep + cp pass 1 + scan + pass 3: the context-parallel plans cp and cp2; sm_90a).

Run on the GPU machine from the repository root:
    PYTHONUNBUFFERED=1 python3 tools/prefill64_harness.py [check] [time] [mixlong] [mixshort] [cpab] [prof]
  check     every plan (chunk64; cp with one and two warpgroups per walk CTA) vs the float64 reference.
  time      the anchor configurations plus some around the cp thresholds (CONFIGS=1x1024,... limits them):
            chunk64, cp at the policy's segment count and around it, and the fused kernels' tile of the same
            width rule beside them.
  mixlong   every plan on the contest-like mix's 25 workloads of >= 2048 tokens (data/contest_mix.json: the lengths
            of gdn_core::workload::contest_prefill_mix(qk4_v8, seed 0), the mix `gdn bench` runs); the data
            fit_cost.py refits the cost model's chunk64 / cp constants from.
  mixshort  the fused kernel at every tile width on the mix's 75 workloads of < 2048 tokens (MIX_ALL=1: all 100),
            with each ALT_KERNELS folder beside the production build (see prefill_harness.py); fit_cost.py --fused.
  cpab      A/B of builds on the chunk64 and cp plans: AB_BUILDS="base;base,SCAN8;alt" (';' between builds; 'alt'
            compiles the ALT_KERNELS folder; SCAN8: the cp scan with 8 value rows per CTA, WGS2: the two-warpgroup
            cp passes), CP_GS segment counts, CONFIGS (anchor names or contest-mix workload names); every build's
            output is compared bitwise with the first's.
  prof      three launches of one case for ncu (PROF_CFG=NxLEN, PROF_L: the cp plan's segment length in chunks).
Kernel time = CUPTI (torch.profiler) sum of the call's kernels, L2 flushed (256 MB memset) before every call.
Writes $OUT/prefill64_check.json and $OUT/prefill64_sweep.json.
"""
import os
import re
import statistics
import struct
import sys
import time

import torch

import harness_common as hc
import prefill_harness as ph
from harness_common import dev, log

ARGS = set(sys.argv[1:]) or {"check", "time"}
RES = hc.Results({"prefill64_check.json": ("device", "checks", "errors", "compile"),
                  "prefill64_sweep.json": ("device", "timings")}, checks=[], timings=[], compile={})
C = 64  # tokens per chunk
SMS = 132


def cp_seg_slots(T, N, L):
    return (T // C + N + 1) // L + N + 1


def scan_seqs(T, N, L):
    """Sequences that can need the cp scan (more than 2L chunks): the registry's prefill64_scan_seqs."""
    return min(N, T // (2 * C * max(L, 1) + 1))


def scan_work_seqs(T, N, longest, L):
    """The cost model's scan_work_seqs: the sequences the cp scan is taken to work on, given the longest length (the
    policy's cp_scan_kernel takes 8-row CTAs when theirs fit one wave)."""
    even = -(-T // N)
    longest = min(max(longest, even), max(T, even))
    long_seqs = max(1, min(N, T // longest))
    need = 2 * C * max(L, 1) + 1
    long = long_seqs if longest >= need else 0
    return min(long + min((T - long * longest) // need, N - long), scan_seqs(T, N, L))


def cp_segments_for(N, T, HV, sms=SMS, automatic=True):
    """The policy's cp_segments: the largest G (3..64) with pass 3 (chains·(G−1) CTAs) in one wave, pass 1
    (chains·(2G−3)) in two, and (automatic) segments of >= 8 chunks."""
    chains, nch = N * HV * 2, max(1, -(-(T // max(N, 1)) // C))
    g = 3
    while g < 64 and chains * g <= sms and chains * (2 * g - 1) <= 2 * sms and (not automatic or nch // (g + 1) >= 8):
        g += 1
    return g


def seg_chunks(length, G):
    """Segment length (chunks) that cuts a sequence of `length` tokens into G segments."""
    chunks = -(-length // C)
    return max(1, -(-chunks // G))


def cp_L_for(N, T, HV, G=None):
    return seg_chunks(T // max(N, 1), G or cp_segments_for(N, T, HV))


def cp_L_max(lens, G):
    return seg_chunks(max(lens), G)


class Module64:
    """prefill_chunk64.cu's two compilation units, as the runtime builds them: module "prefill64" (prep, walks,
    one-warpgroup cp passes, scans) and, with GDN_PREFILL64_WIDE=1, "prefill64_wide" (the two-warpgroup cp
    passes). Flags (launch choices, not defines): SCAN8 (the 8-row scan), WGS2 (the two-warpgroup passes)."""

    def __init__(self, flags=(), root=hc.KERNELS):
        self.scan8 = "SCAN8" in flags
        self.wgs = 2 if "WGS2" in flags else 1
        name, src = hc.kernel_source("prefill_chunk64", root)
        # layout constants as the sources assert them (an A/B baseline may differ)
        text = hc.family_text("prefill_chunk64", root)

        def const(c):
            m = re.search(rf"\b{c} == (\d+)", text)
            if not m:
                raise RuntimeError(f"no `static_assert({c} == <bytes>)` in kernels/prefill_chunk64 or kernels/common")
            return int(m.group(1))

        self.ws_chunk, self.prep_smem, self.scan_smem = const("WS_CHUNK_BYTES"), const("PREP_SMEM"), const("SCAN_SMEM")
        self.walk_smem, self.walk2_smem = const("WALK_SMEM"), const("WALK2_SMEM")
        t = time.time()
        build = lambda defines: hc.compile_cubin(src, name, "prefill_chunk64", defines, lineinfo=True, root=root)  # noqa
        self.modules = [hc.load_module(build(defines)) for defines in ((), ("GDN_PREFILL64_WIDE=1",))]
        names = [("gdn_prefill64_prep", self.prep_smem), ("gdn_prefill64_cp_scan", self.scan_smem),
                 ("gdn_prefill64_cp_scan8", self.scan_smem)] + \
            [(f"gdn_prefill64_walk_{st}", self.walk_smem) for st in ("f32", "bf16")] + \
            [(f"gdn_prefill64_cp_pass{i}_{st}", self.walk_smem) for i in (1, 3) for st in ("f32", "bf16")] + \
            [(f"gdn_prefill64_cp_pass{i}w_{st}", self.walk2_smem) for i in (1, 3) for st in ("f32", "bf16")]
        self.fns, attrs = {}, {}
        for kname, smem in names:
            self.fns[kname], attrs[kname] = hc.function(self.modules, kname, smem)
        RES["compile"][root] = {"seconds": time.time() - t, "attrs": attrs}
        log(f"compiled prefill_chunk64 in {time.time() - t:.2f}s regs/local "
            f"{ {k: (a['regs'], a['local_bytes']) for k, a in attrs.items()} }")
        self.ws = None

    def launch(self, st, q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, out, new_state, ws_poison=False,
               cp_L=0, wgs=None, scan8=None):
        """cp_L = 0: prep + walk (chunk64); cp_L = L >= 1: prep + cp pass 1, scan, pass 3 with segments of L chunks
        (wgs: warpgroups per cp walk CTA, default the module's)."""
        wgs = wgs or self.wgs
        scan8 = self.scan8 if scan8 is None else scan8
        N = cu_seqlens.numel() - 1
        T, H, HV = q.shape[0], q.shape[1], v.shape[1]
        slots = T // C + N + 1
        G = cp_seg_slots(T, N, cp_L) if cp_L else 0
        # after the records: cp's states, or (chunk64) the walk's order, i64 [N] rounded up to 256 bytes
        need = slots * HV * self.ws_chunk + (3 * G * HV * 65536 if cp_L else -(-N * 8 // 256) * 256)
        if self.ws is None or self.ws.numel() < need:
            self.ws = torch.empty(need, dtype=torch.uint8, device=dev)
        if ws_poison:
            self.ws[:need].fill_(0xFF)  # NaN bf16 / f32 patterns: a record the walk reads but prep did not write shows
        p = hc.ptr
        raw = struct.pack("<12Qqq f i i i", p(q), p(k), p(v), p(a), p(b), p(A_log), p(dt_bias), p(cu_seqlens),
                          p(state), p(new_state), p(out), self.ws.data_ptr(), N, T, float(scale), H, HV, cp_L)
        assert len(raw) == 128
        if N == 0:
            return
        hc.launch(self.fns["gdn_prefill64_prep"], slots * HV, 128, self.prep_smem, raw)
        if not cp_L:
            hc.launch(self.fns[f"gdn_prefill64_walk_{st}"], N * HV * 2, 128, self.walk_smem, raw)
            return
        cph, wt, w = 2 // wgs, 128 * wgs, "w" if wgs == 2 else ""
        wsm = self.walk2_smem if wgs == 2 else self.walk_smem
        K = scan_seqs(T, N, cp_L)
        scan = ("gdn_prefill64_cp_scan8", K * HV * 16) if scan8 else ("gdn_prefill64_cp_scan", K * HV * 8)
        hc.launch(self.fns[f"gdn_prefill64_cp_pass1{w}_{st}"], (G, HV, 2 * cph), wt, wsm, raw)
        if K:  # (no sequence can need the scan: none launched)
            hc.launch(self.fns[scan[0]], scan[1], 256, self.scan_smem, raw)
        hc.launch(self.fns[f"gdn_prefill64_cp_pass3{w}_{st}"], (G, HV, cph), wt, wsm, raw)


def run64(mod, st, inp, poison_ws=True, cp_L=0, wgs=None):
    q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
    sd = torch.bfloat16 if st == "bf16" else torch.float32
    out, ns = hc.outputs(q.shape[0], cu_.numel() - 1, v.shape[1], sd, fill=float("nan"))
    stt = state.to(sd) if state is not None else None
    mod.launch(st, q, k, v, stt, A_log, a, dt_bias, b, cu_, scale, out, ns, ws_poison=poison_ws, cp_L=cp_L, wgs=wgs)
    torch.cuda.synchronize()
    return out, ns


def plan_name(st, L, wgs):
    return st + (f" cp{'w' if wgs == 2 else ''} L={L}" if L else "")


def check(mod):
    rnd, mixed57, cases = hc.prefill_check_cases()
    # 1,100 short sequences and five that need the cp scan at L 1-2 (> 128 L tokens), two of them past the scan's
    # first 1,024-sequence search pass (a scan CTA finds the k-th such sequence)
    many = [rnd.choice([0, 1, 5, 17, 40]) for _ in range(1100)]
    for i, n in ((3, 300), (1023, 129), (1024, 260), (1030, 520), (1099, 390)):
        many[i] = n
    cases = [("many1100 1/2 slow", many, 1, 2, True, "slow")] + cases + \
        [("odd HV 1/3 slow", [130, 7, 64], 1, 3, True, "slow"), ("long 2x1500 slow", [1500, 1237], 4, 8, True, "slow")]
    runs = [(st, 0, 1) for st in ("f32", "bf16")] + [("f32", 1, 1), ("f32", 2, 1), ("bf16", 3, 1)] + \
        [("f32", 1, 2), ("bf16", 3, 2)]  # (state, segment length (0: chunk64), warpgroups per cp walk CTA)
    for name, lens, H, HV, stp, gates in cases:
        try:
            inp = hc.make_inputs(lens, H, HV, seed=hash(name) % 1000, state=stp, gates=gates)
            ro, rs = hc.reference(*inp)
            for st, L, wgs in runs:
                if st == "bf16" and not name.startswith(("edge 4/8 state", "mixed57", "long")):
                    continue
                o, ns = run64(mod, st, inp, cp_L=L, wgs=wgs)
                hc.check_row(RES, "check64", name, plan_name(st, L, wgs), o, ns, *hc.reference_for(st, inp, ro, rs))
        except Exception:
            RES.error(f"check {name}")
        RES.save()
    RES.stage("long", check_long, mod)
    RES.save()


def check_long(mod):
    """16K tokens of slow decay on chunk64 and on cp at 16 and 51 segment chunks (and 16 with two warpgroups per CTA,
    which must equal one warpgroup bitwise), compared by 4K-token windows; each run repeated for determinism."""
    inp = hc.make_inputs([16384], 4, 8, seed=11, state=True, gates="slow")
    ro, rs = hc.reference(*inp)
    first = {}
    for L, wgs in ((0, 1), (16, 1), (51, 1), (16, 2)):
        o, ns = run64(mod, "f32", inp, cp_L=L, wgs=wgs)
        if L in first:
            RES["checks"].append({"case": f"cp L={L} two warpgroups bitwise", "equal": bool(
                torch.equal(o, first[L][0]) and torch.equal(ns, first[L][1]))})
            log("determinism", RES["checks"][-1])
        first[L] = (o, ns)
        hc.check_row(RES, "check64", "long16k slow", plan_name("f32", L, wgs), o, ns, ro, rs,
                     out_last1k=hc.compare(o[-1024:], ro[-1024:]),
                     out_by_4k=[hc.compare(o[i:i + 4096], ro[i:i + 4096])["rel_l2"] for i in range(0, 16384, 4096)])
        o2, n2 = run64(mod, "f32", inp, poison_ws=False, cp_L=L, wgs=wgs)
        RES["checks"].append({"case": f"determinism {plan_name('f32', L, wgs)}",
                              "equal": bool(torch.equal(o, o2) and torch.equal(ns, n2))})
        log("determinism", RES["checks"][-1])


def times(fn, iters):
    """(prep, walk, parts) per call: the walk is the plain walk's time, or for cp pass 1 + scan + pass 3 (a call
    whose sequences cannot need the scan launches none: it counts 0), parts {pass1, scan, pass3}; for a fused
    call, walk is empty and parts the fused kernel's times."""
    ev = [(n, us) for _, n, us in hc.timed_events(fn, iters) if n.startswith("gdn_prefill")]
    prep = [us for n, us in ev if "prep" in n]
    walk = [us for n, us in ev if "walk" in n]
    other = [us for n, us in ev if "prep" not in n and "walk" not in n]
    if not walk and prep:
        calls = []
        for n, us in ev:
            if "prep" in n:
                calls.append({"pass1": 0.0, "scan": 0.0, "pass3": 0.0})
            elif calls:
                calls[-1][next(k for k in ("pass1", "scan", "pass3") if k in n)] += us
        walk = [sum(c.values()) for c in calls]
        other = {k: [c[k] for c in calls] for k in ("pass1", "scan", "pass3")}
    return prep, walk, other


def plan_row(mod, inp, out, ns, iters, **kw):
    """Times one plan of mod on inp: total (prep + walk) spread, prep and walk medians and cp parts' medians."""
    prep, wk, parts = times(lambda: mod.launch("f32", *inp, out, ns, **kw), iters)
    row = {**hc.spread([p_ + w_ for p_, w_ in zip(prep, wk)]), "prep_us": statistics.median(prep),
           "walk_us": statistics.median(wk)}
    if kw.get("cp_L"):
        row.update({f"{k_}_us": statistics.median(v_) for k_, v_ in parts.items()})
    return row


def timing(mod, fused):
    configs = hc.anchor_configs() + [  # around the context-parallel thresholds
        ("1x2048", [2048]), ("1x4096", [4096]), ("1x16384", [16384]), ("2x16384", [16384] * 2), ("2x4096", [4096] * 2)]
    only = os.environ.get("CONFIGS")
    if only:
        configs = [c for c in configs if c[0] in only.split(",")]
    table = []
    for cname, lens in configs:
        try:
            inp = hc.bench_inputs(lens)
            T, N = sum(lens), len(lens)
            out, ns = hc.outputs(T, N)
            iters = 15 if T > 30000 else 25
            row = {"config": cname, "T": T, "N": N, "target_us": hc.TARGET.get(cname, '-'),
                   "flashinfer_us": hc.PEERS.get(cname, '-'), "chunk64": plan_row(mod, inp, out, ns, iters)}
            if N * 8 * 2 <= SMS // 2:  # few chains: context parallel at the policy's segment count and around it
                G0 = cp_segments_for(N, T, 8)
                for G in sorted({3, G0 - 2, G0 - 1, G0, G0 + 1, G0 + 2} - {0, 1, 2}):
                    L = cp_L_for(N, T, 8, G)
                    r = row[f"cp_G{G}"] = {"L": L, "policy": G == G0, **plan_row(mod, inp, out, ns, iters, cp_L=L)}
                    log(f"time {cname:<8} cp G={G:<2} L={L:<4} total {r['median_us']:.1f} (prep {r['prep_us']:.1f} + "
                        f"pass1 {r['pass1_us']:.1f} + scan {r['scan_us']:.1f} + pass3 {r['pass3_us']:.1f}; p10 "
                        f"{r['p10_us']:.1f} p90 {r['p90_us']:.1f})" + ("  <- policy" if G == G0 else ""))
            bv = next((x for x in (128, 64, 32) if N * 8 * 128 // x >= 0.9 * SMS), 16)
            _, _, ft = times(lambda: fused.launch("f32", bv, *inp, out, ns), iters)
            row["fused_variant"], row["fused_median_us"] = f"f32_bv{bv}", statistics.median(ft)
            RES["timings"].append(row)
            table.append(row)
            c = row["chunk64"]
            log(f"time {cname:<8} chunk64 {c['median_us']:.1f} (prep {c['prep_us']:.1f} + walk {c['walk_us']:.1f}; "
                f"p10 {c['p10_us']:.1f} p90 {c['p90_us']:.1f})  fused bv{bv} {row['fused_median_us']:.1f}  "
                f"target {row['target_us']}  FI {row['flashinfer_us']}")
        except Exception:
            RES.error(f"time {cname}")
        RES.save()
    print("\n=== chunk64 plan (prep + walk) vs the fused kernels, fp32 state, CUPTI kernel-time sum, L2 flushed ===")
    print(f"{'config':<9} {'total':>9} {'prep':>8} {'walk':>8} {'fused':>8} {'target':>7} {'FI':>7}")
    for r in table:
        c = r["chunk64"]
        print(f"{r['config']:<9} {c['median_us']:9.1f} {c['prep_us']:8.1f} {c['walk_us']:8.1f} "
              f"{r['fused_median_us']:8.1f} {r['target_us']!s:>7} {r['flashinfer_us']!s:>7}"
              + "".join(f"  cp G={k[4:]} {x['median_us']:.1f}" + ("*" if x["policy"] else "")
                        for k, x in r.items() if k.startswith("cp_G")))


def cpab():
    """A/B of builds on the chunk64 and cp plans (see the module doc); also checks every build's output against
    the first build's (bitwise expected)."""
    alt = os.environ.get("ALT_KERNELS", "").split(",")[0] or hc.KERNELS
    mods = [(b, Module64(tuple(b.split(",")[1:]), root=alt if b.split(",")[0] == "alt" else hc.KERNELS))
            for b in os.environ.get("AB_BUILDS", "base").split(";") if b]
    gs = [int(x) for x in os.environ.get("CP_GS", "9").split(",")]
    cfgs = {"1x8192": [8192], "1x16384": [16384], "1x65536": [65536], "2x16384": [16384] * 2, "1x4096": [4096],
            "64x1024": [1024] * 64, "4x2048": [2048] * 4, "1x2048": [2048], "1x1024": [1024], "1x1536": [1536],
            "2x8192": [8192] * 2, "40x205": [205] * 40, "57x144": [144] * 57, "12x683": [683] * 12}
    mixl = hc.contest_mix()
    for cname in os.environ.get("CONFIGS", "1x8192,1x65536").split(","):
        lens = mixl[cname] if cname.startswith("prefill_") else cfgs[cname]
        inp = hc.bench_inputs(lens)
        T, N = sum(lens), len(lens)
        iters = 15 if T > 30000 else 25
        # (CP_ALLN=1: the cp plans for many sequences too)
        plans = [0] + [cp_L_max(lens, G) for G in gs] if N <= 4 or os.environ.get("CP_ALLN") else [0]
        for L in plans:
            ref = None
            for tag, mod in mods:
                out, ns = hc.outputs(T, N, fill=float("nan"))
                mod.launch("f32", *inp, out, ns, cp_L=L)
                torch.cuda.synchronize()
                diff = lambda: (out.float() - ref[0].float()).abs().max().item()  # noqa: E731
                same = "ref" if ref is None else ("bitwise" if torch.equal(out, ref[0]) and torch.equal(ns, ref[1])
                                                  else f"DIFF out {diff():.3g}")
                nan = bool(torch.isnan(out).any() or torch.isnan(ns).any())
                ref = ref or (out.clone(), ns.clone())
                row = {"ab": tag, "config": cname, "L": L, **plan_row(mod, inp, out, ns, iters, cp_L=L), "same": same,
                       "nan": nan}
                RES["timings"].append(row)
                log(f"ab {cname:<8} L={L:<4} {tag:<32} total {row['median_us']:7.1f} (p10 {row['p10_us']:.1f} "
                    f"p90 {row['p90_us']:.1f}) prep {row['prep_us']:.1f} " +
                    " ".join(f"{k_} {row[f'{k_}_us']:.1f}" for k_ in ("pass1", "scan", "pass3") if L) +
                    f"  [{same}{' NAN' if nan else ''}]")
        RES.save()


def mix_fused_row(mods, name, lens):
    """Inputs (the peers') and outputs of one mix workload, and a row with the fused kernel's median time at every
    tile width of every module in `mods` (key fused_bv<BV><module tag>): what `mixlong` and `mixshort` start from."""
    inp = hc.bench_inputs(lens)
    out, ns = hc.outputs(sum(lens), len(lens))
    row = {"mix": name, "T": sum(lens), "N": len(lens), "max_len": max(lens), "n": 15}
    for m in mods:
        for bv in (16, 32, 64, 128):
            if ("f32", bv) in m.fns:
                _, _, t = times(lambda: m.launch("f32", bv, *inp, out, ns), 15)
                row[f"fused_bv{bv}{m.tag}"] = statistics.median(t)
    return inp, out, ns, row


def mixlong(mod, fused):
    """Plans on mixed-length workloads (one long sequence among short ones is typical): fused at every tile width,
    chunk64, and cp with L cut from the LONGEST sequence (G segments of it): the data for a length-aware rule."""
    for name, lens in ((n, l_) for n, l_ in hc.contest_mix().items() if sum(l_) >= 2048):
        try:
            inp, out, ns, row = mix_fused_row([fused], name, lens)
            row["chunk64"] = plan_row(mod, inp, out, ns, 15)["median_us"]
            # cp with one warpgroup per walk CTA (cp_G*) and with two (cp2_G*: one CTA per head, twice the segments)
            for wgs, key, gs in ((1, "cp", (2, 3, 4, 6, 9, 12, 16)), (2, "cp2", (3, 4, 6, 9, 12, 16, 24, 32))):
                for G in gs:
                    L = cp_L_max(lens, G)
                    s8 = scan_work_seqs(sum(lens), len(lens), max(lens), L) * 8 * 16 <= SMS  # the policy's scan
                    r = plan_row(mod, inp, out, ns, 15, cp_L=L, wgs=wgs, scan8=s8)
                    row[f"{key}_G{G}"] = {"L": L, "median_us": r["median_us"], "prep": r["prep_us"],
                                          **{k_: r[f"{k_}_us"] for k_ in ("pass1", "scan", "pass3")}}
            RES["timings"].append(row)
            cps = [k_ for k_ in row if k_.startswith(("cp_G", "cp2_G"))]
            best_cp = min(cps, key=lambda k_: row[k_]["median_us"])
            log(f"mixlong {name:<22} max {max(lens):<5} " + " ".join(f"bv{bv} {row[f'fused_bv{bv}']:.1f}"
                                                                     for bv in (16, 32, 64, 128))
                + f" chunk64 {row['chunk64']:.1f} " + " ".join(f"{k_}/L{row[k_]['L']} {row[k_]['median_us']:.1f}"
                                                               for k_ in cps) + f"  best cp {best_cp}")
        except Exception:
            RES.error(f"mixlong {name}")
        RES.save()


def mixshort(mods):
    """The fused kernel at every tile width (of every module in `mods`) on the contest-like mix's workloads of
    < 2048 tokens (where cp and chunk64 never win; MIX_ALL=1: all 100): the data for the cost model's short and
    medium range and for A/B of fused-kernel changes (ALT_KERNELS)."""
    every = bool(os.environ.get("MIX_ALL"))
    for name, lens in ((n, l_) for n, l_ in hc.contest_mix().items() if every or sum(l_) < 2048):
        try:
            _, _, _, row = mix_fused_row(mods, name, lens)
            RES["timings"].append(row)
            fused = {k_[len("fused_"):]: v_ for k_, v_ in row.items() if k_.startswith("fused_")}
            best = min(fused, key=fused.get)
            log(f"mixshort {name:<22} N {row['N']:<3} T {row['T']:<5} max {row['max_len']:<5} "
                + " ".join(f"{k_} {v_:.1f}" for k_, v_ in fused.items()) + f"  best {best} {fused[best]:.1f}")
        except Exception:
            RES.error(f"mixshort {name}")
    RES.save()


def prof(mod):
    lens = hc.prof_config()
    inp = hc.bench_inputs(lens)
    out, ns = hc.outputs(sum(lens), len(lens))
    for _ in range(3):
        mod.launch("f32", *inp, out, ns, cp_L=int(os.environ.get("PROF_L", "0")))
    torch.cuda.synchronize()
    log("prof launches done")


def main():
    mod = RES.stage("compile", Module64)
    if mod is None:
        RES.save()
        return
    if "prof" in ARGS:
        return prof(mod)
    if "cpab" in ARGS:
        RES.stage("cpab", cpab)
    if "check" in ARGS:
        check(mod)
    fused = ph.Module() if ARGS & {"mixlong", "time"} else None
    if "mixlong" in ARGS:
        RES.stage("mixlong", mixlong, mod, fused)
    if "mixshort" in ARGS:
        RES.stage("mixshort", lambda: mixshort([ph.Module(r) for r in [hc.KERNELS] + [
            p for p in os.environ.get("ALT_KERNELS", "").split(",") if p]]))
    if "time" in ARGS:
        RES.stage("timing", timing, mod, fused)
    RES.save()
    hc.check_summary(RES)


if __name__ == "__main__":
    main()
