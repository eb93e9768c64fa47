"""Device harness for the fused prefill kernels, crates/gdn-cuda/kernels/prefill_fused/ (GDN chunked varlen
prefill, sm_90a).

Run on the GPU machine from the repository root:
    PYTHONUNBUFFERED=1 python3 tools/prefill_harness.py [check] [time] [sweep] [small] [prof]
  ALT_KERNELS  also compile each comma-separated kernels folder (another version of crates/gdn-cuda/kernels, e.g.
               `git archive HEAD~1 crates/gdn-cuda/kernels | tar -x -C /tmp/prev` and ALT_KERNELS=
               /tmp/prev/crates/gdn-cuda/kernels) and check/time it beside the production build.
  SAVE_CUBIN=1 writes each module's CUBIN to $OUT (prefill<tag>.cubin) for cuobjdump -sass.
  SHORT=1      `time` also runs short single chains and a small batch (1x16, 1x64, 1x259, 1x589, 8x128).
  prof         three launches of one case for ncu / compute-sanitizer (PROF_CFG=NxLEN, default 1x1024; PROF_BV=16),
               compiled with -lineinfo; writes no JSON. Example:
               ncu --clock-control none --kernel-name regex:gdn_prefill --launch-skip 2 --launch-count 1 \\
                   --section WarpStateStats --section SchedulerStats --section SourceCounters -o $OUT/prof \\
                   python3 tools/prefill_harness.py prof
Stages (each wrapped so that one failure does not lose the others):
  compile  NVRTC through cuda.bindings (the production compiler), one module per kernels folder; prints the log.
  check    every variant vs a float64 token-by-token reference (vectorised over heads and sequences):
           lengths 0/1/63/64/65, 57 mixed sequences, every head ratio, state present/absent, extreme gates,
           a 16K-token slow-decay sequence, bf16-state variant, a short sequence beside a NaN neighbour,
           unnormalised q/k; outputs poisoned with NaN first.
  time     the eight anchor configurations (the peers' inputs), every tile width; pure kernel time through CUPTI
           (torch.profiler), L2 flushed (256 MB memset) before every call; median, p10, p90. `sweep` adds every
           bf16-state tile.
Writes $OUT/prefill_check.json, $OUT/prefill_sweep.json and prints a short table last.
"""
import os
import struct
import sys
import time

import torch

import harness_common as hc
from harness_common import log

ARGS = set(sys.argv[1:]) or {"check", "time"}
RES = hc.Results({"prefill_check.json": ("device", "checks", "errors", "compile"),
                  "prefill_sweep.json": ("device", "timings")}, checks=[], timings=[], compile={})
VARIANTS = [(st, bv) for st in ("f32", "bf16") for bv in (16, 32, 64, 128)]


def save():
    if ARGS & {"check", "time", "sweep"}:  # a pure `prof` run must not overwrite the last results
        RES.save()


class Module:
    """prefill_fused.cu compiled from the kernels folder `root`: the gdn_prefill_{f32,bf16}_bv{16..128} kernels,
    launched with the threads and shared memory of the module's own gdn_prefill_launch table."""

    def __init__(self, root=hc.KERNELS):
        self.tag = "" if root == hc.KERNELS else f"[alt:{root}]"  # label in logs and JSON
        name, src = hc.kernel_source("prefill_fused", root)
        t = time.time()
        cubin = hc.compile_cubin(src, name, "prefill_fused", lineinfo="prof" in ARGS, root=root)
        if os.environ.get("SAVE_CUBIN"):  # for cuobjdump -sass on the device
            with open(f"{hc.OUT}/prefill{self.tag.replace('/', '_') or '_prod'}.cubin", "wb") as f:
                f.write(cubin)
        self.module = hc.load_module(cubin)
        tab = hc.read_global(self.module, "gdn_prefill_launch")  # {BV, threads, dynamic smem} per tile width
        self.launch_tab = {tab[3 * i]: (tab[3 * i + 1], tab[3 * i + 2]) for i in range(len(tab) // 3)}
        self.fns, attrs = {}, {}
        for st, bv in VARIANTS:
            if self.launch_tab[bv][1] > hc.SMEM_MAX:
                continue
            kname = f"gdn_prefill_{st}_bv{bv}"
            self.fns[(st, bv)], attrs[kname] = hc.function(self.module, kname, self.launch_tab[bv][1])
        RES["compile"][self.tag or "production"] = {"seconds": time.time() - t, "attrs": attrs}
        log(f"compiled {self.tag or 'production'}: regs {sorted({a['regs'] for a in attrs.values()})} "
            f"local {sorted({a['local_bytes'] for a in attrs.values()})}")

    def launch(self, st, bv, q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, out, new_state):
        N = cu_seqlens.numel() - 1
        H, HV = q.shape[1], v.shape[1]
        p = hc.ptr
        raw = struct.pack("<11Qq f i i i", p(q), p(k), p(v), p(a), p(b), p(A_log), p(dt_bias), p(cu_seqlens),
                          p(state), p(new_state), p(out), N, float(scale), H, HV, min(q.shape[0], 16))  # lead_rows
        assert len(raw) == 112
        grid = N * HV * (128 // bv)
        if grid:
            block, smem = self.launch_tab[bv]
            hc.launch(self.fns[(st, bv)], grid, block, smem, raw)


def run_case(mod, st, bv, inp):
    """One launch on NaN-poisoned outputs; returns (out, new_state)."""
    q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
    sd = torch.bfloat16 if st == "bf16" else torch.float32
    out, ns = hc.outputs(q.shape[0], cu_.numel() - 1, v.shape[1], sd, fill=float("nan"))
    stt = state.to(sd) if state is not None else None
    mod.launch(st, bv, q, k, v, stt, A_log, a, dt_bias, b, cu_, scale, out, ns)
    torch.cuda.synchronize()
    return out, ns


def check(mods):
    _, _, cases = hc.prefill_check_cases()
    refs = {}
    for name, lens, H, HV, stp, gates in cases:
        inp = hc.make_inputs(lens, H, HV, seed=hash(name) % 1000, state=stp, gates=gates)
        refs[name] = (inp, hc.reference(*inp))
    log("references done")
    for mod in mods:
        for st, bv in VARIANTS:
            if (st, bv) not in mod.fns or (st == "bf16" and bv not in (32, 128)):
                continue
            for name, (inp, (ro, rs)) in refs.items():
                try:
                    o, ns = run_case(mod, st, bv, inp)
                    hc.check_row(RES, "check", name, f"{st}_bv{bv}{mod.tag}", o, ns, *hc.reference_for(st, inp, ro, rs))
                except Exception:
                    RES.error(f"check {name} {st}_bv{bv}")
            save()
    RES.stage("long", check_long, mods[0])
    RES.stage("isolation", check_isolation, mods[0])
    RES.stage("unnormalised", check_unnormalised, mods[0])
    save()


def check_long(mod):
    """16K tokens of slow decay on the narrowest and widest tile, then bitwise determinism (same inputs twice)."""
    inp = hc.make_inputs([16384], 4, 8, seed=11, state=True, gates="slow")
    ro, rs = hc.reference(*inp)
    for st, bv in [("f32", 16), ("f32", 128)]:
        o, ns = run_case(mod, st, bv, inp)
        hc.check_row(RES, "check", "long16k slow", f"{st}_bv{bv}{mod.tag}", o, ns, ro, rs,
                     out_last1k=hc.compare(o[-1024:], ro[-1024:]))
    o1, n1 = (x.clone() for x in run_case(mod, "f32", 32, inp))
    o2, n2 = run_case(mod, "f32", 32, inp)
    RES["checks"].append({"case": "determinism", "equal": bool(torch.equal(o1, o2) and torch.equal(n1, n2))})
    log("determinism", RES["checks"][-1])


def check_isolation(mod):
    """Sequence 0's first chunk is loaded before cu_seqlens is read: a 5-token sequence 0 followed by a sequence whose
    q/k/v/a/b are NaN; sequence 0's outputs and state must equal a run of it alone."""
    inp = list(hc.make_inputs([5, 20], 4, 8, seed=5, state=True, gates="bench"))
    for i in (0, 1, 2, 5, 7):
        inp[i] = inp[i].clone()
        inp[i][5:] = float("nan")
    alone = list(inp)
    for i in (0, 1, 2, 5, 7):
        alone[i] = inp[i][:5]
    alone[3], alone[8] = inp[3][:1], inp[8][:2]
    ro, rs = hc.reference(*alone)
    for st, bv in VARIANTS:
        if st == "f32" and (st, bv) in mod.fns:
            o, ns = run_case(mod, st, bv, inp)
            hc.check_row(RES, "check", "seq0 short, NaN neighbour", f"{st}_bv{bv}{mod.tag}", o[:5], ns[:1], ro, rs)


def check_unnormalised(mod):
    """Unnormalised q/k (the contest's 'random' workloads), short sequences."""
    inp = hc.make_inputs([6, 20, 40], 4, 8, seed=3, state=True, normalise=False, gates="bench")
    o, ns = run_case(mod, "f32", 32, inp)
    hc.check_row(RES, "check", "unnormalised qk short", "f32_bv32", o, ns, *hc.reference(*inp))


def timing(mods, sweep=False):
    configs = hc.anchor_configs()
    if os.environ.get("SHORT"):
        configs += [("1x16", [16]), ("1x64", [64]), ("1x259", [259]), ("1x589", [589]), ("8x128", [128] * 8)]
    best = {}
    for cname, lens in configs:
        inp = hc.bench_inputs(lens)
        T, N = sum(lens), len(lens)
        out, nsf = hc.outputs(T, N)
        nsb = hc.outputs(T, N, state_dtype=torch.bfloat16)[1]
        q, k, v, state, A_log, a, dt_bias, b, cu_, scale = inp
        stb = state.bfloat16()
        for mod in mods:
            for st, bv in VARIANTS:
                if (st == "bf16" and not sweep and bv != 32) or (st, bv) not in mod.fns:
                    continue
                try:
                    ns, s0 = (nsb, stb) if st == "bf16" else (nsf, state)
                    fn = lambda: mod.launch(st, bv, q, k, v, s0, A_log, a, dt_bias, b, cu_, scale, out, ns)  # noqa
                    row = {"config": cname, "T": T, "N": N, "variant": f"{st}_bv{bv}{mod.tag}",
                           **hc.spread(hc.kernel_times(fn, iters=15 if T > 30000 else 25))}
                    row["io_GBps"] = (T * 6144 + N * 8 * 65536 * (2 if st == "f32" else 1) * 2) / row["median_us"] / 1e3
                    RES["timings"].append(row)
                    log(f"time {cname:<8} {row['variant']:<10} median {row['median_us']:8.1f} us "
                        f"(p10 {row['p10_us']:.1f} p90 {row['p90_us']:.1f})")
                    if st == "f32" and (cname not in best or row["median_us"] < best[cname][0]):
                        best[cname] = (row["median_us"], row["variant"])
                except Exception:
                    RES.error(f"time {cname} {st}_bv{bv}")
        save()
    print("\n=== prefill, fp32 state, pure kernel time (CUPTI, L2 flushed), best variant per config ===")
    print(f"{'config':<9} {'best us':>9} {'variant':<10} {'target':>7} {'FlashInfer':>10}")
    for cname, _ in configs:
        if cname in best:
            print(f"{cname:<9} {best[cname][0]:9.1f} {best[cname][1]:<10} {hc.TARGET.get(cname, '-'):>7} "
                  f"{hc.PEERS.get(cname, '-'):>10}")


def prof(mod):
    """Three launches of one case (PROF_CFG, PROF_BV) for ncu / compute-sanitizer."""
    lens = hc.prof_config()
    bv = int(os.environ.get("PROF_BV", "16"))
    inp = hc.bench_inputs(lens)
    out, ns = hc.outputs(sum(lens), len(lens))
    for _ in range(3):
        mod.launch("f32", bv, *inp, out, ns)
    torch.cuda.synchronize()
    log("prof launches done")


def main():
    roots = [hc.KERNELS] + [p for p in os.environ.get("ALT_KERNELS", "").split(",") if p]
    mods = [m for m in (RES.stage(f"compile {r}", Module, r) for r in roots) if m is not None]
    save()
    if not mods:
        return
    if "prof" in ARGS:
        RES.stage("prof", prof, mods[0])
    if "check" in ARGS:
        RES.stage("check", check, mods[:1] if "small" in ARGS else mods)
    if "time" in ARGS or "sweep" in ARGS:
        RES.stage("timing", timing, mods, "sweep" in ARGS)
    save()
    hc.check_summary(RES)


if __name__ == "__main__":
    main()
