"""Refit the chunk64 / cp constants of the prefill cost model (crates/gdn-cuda/src/plan/prefill/cost.rs) from harness sweeps
(no GPU needed).

    python3 tools/fit_cost.py MIXLONG.json [SINGLE.json] [--table] [--scan]
    python3 tools/fit_cost.py --fused MIXSHORT.json

MIXLONG.json: `prefill64_harness.py mixlong` output (the contest mix's 25 workloads of >= 2048 tokens: every fused
tile, chunk64, both cp walk forms at 7-8 segment lengths, CUPTI parts). SINGLE.json (optional): `cpab` output with
AB_BUILDS="base;base,WGS2" on single sequences (rows: ab, config "1xT", L, prep_us, pass1_us, pass3_us).

Mirrors cost.rs (`Lengths::of` with the longest length as hint, `cp_us`): prep, pass 1 and pass 3 are fitted on
squared log error, each part on its own (the fused constants are left alone: their kernel is separate).
Prints the constants, the error of each part and of the cp total, and with --table the measured rows of the cost
model's tests. --scan also fits the scan constants (SF/SS = SCAN_US fixed / step, by CTAs per head; refit them
whenever the scan kernel changes), from the mixlong rows only (the single-sequence cpab rows run the 8-CTA scan
whatever the planner would pick); otherwise they stay cost.rs's.
"""
import json, math, sys

import numpy as np

SMS, HV, C = 132, 8, 64
SCAN_US = {16: (1.976, 1.532), 8: (3.251, 1.942)}  # cost.rs SCAN_US: CTAs per head -> (fixed, per step)
SCAN_WAVE_US = 0.083


def lengths(T, N, longest):
    even = -(-T // N)
    longest = min(max(longest, even), max(T, even))
    return longest, max(1, min(N, T // longest))


def parts(T, N, longest, L, wg, p):
    """(prep, pass1, scan, pass3) of cp_us at segment length L; p = dict of the fitted constants."""
    longest, long_seqs = lengths(T, N, longest)
    nch = max(1, -(-longest // C))
    segs = -(-nch // L)
    W, S, CT, C3 = p[f"W{wg}"], p[f"S{wg}"], p[f"C{wg}"], p[f"C3_{wg}"]
    CS = p.get(f"CS{wg}", CT)  # per-CTA cost of a short sequence's pass-1 CTA (cost.rs short_cta_us)
    if segs < 2:  # the chunk64 plan: the plain walk (cost.rs CHUNK64_WALK_CHUNK_US)
        W = p["W0"]
    cph = 2 // wg
    chains = long_seqs * HV * cph
    prep = p["PF"] + p["PC"] * HV * (T / C + N / 2) / SMS
    short_tokens = T - long_seqs * longest
    short_seqs = N - long_seqs
    seg_walk = L * W + CT
    work1 = chains * seg_walk + 2 * chains * max(segs - 2, 0) * (L * S + CT) + \
        (short_tokens / C * W + short_seqs * (CS + W / 2)) * HV * cph
    pass1 = max(seg_walk, work1 / SMS)
    if segs < 2:
        return prep, pass1, 0.0, 0.0
    rest = (-(-short_tokens // C)) // L * HV * cph
    # the scan: one CTA per (sequence that can have three segments, head, row block): K = min(N, T // (128 L + 1))
    # sequences (registry.rs prefill64_scan_seqs); none: no launch
    need = 2 * C * L + 1  # tokens of the shortest sequence that needs the scan (registry.rs prefill64_scan_min_tokens)
    K = min(N, T // need)
    # the sequences the scan works on (cost.rs scan_work_seqs; host.rs cp_scan_kernel picks the 8-row scan when
    # theirs fit one wave)
    long = long_seqs if longest >= need else 0
    work = min(long + min((T - long * longest) // need, N - long), K)
    per_head = 16 if work * HV * 16 <= SMS else 8
    fixed, step = p.get(f"SF{per_head}", SCAN_US[per_head][0]), p.get(f"SS{per_head}", SCAN_US[per_head][1])
    # steps: one per segment after the second, for every wave of the long sequences' CTAs
    work_waves = -(-(long_seqs * HV * per_head) // SMS)  # (cost.rs: the long sequences' waves, not work's)
    scan = fixed + step * max(segs - 2, 0) * work_waves + p.get("SW", SCAN_WAVE_US) * (K * HV * per_head) / SMS \
        if K else 0.0
    pass3 = max(L * W + C3, (chains * (segs - 1) + rest) * seg_walk / SMS)
    return prep, pass1, scan, pass3


def points(mix, single):
    """(T, N, longest, L, wg, measured parts dict) for every cp / chunk64 measurement."""
    out = []
    for r in mix["timings"]:
        T, N, mx = r["T"], r["N"], r["max_len"]
        out.append((T, N, mx, -(-mx // C), 1, {"total": r["chunk64"]}))  # chunk64: one segment of the longest
        for k, v in r.items():
            if k.startswith(("cp_G", "cp2_G")):
                out.append((T, N, mx, v["L"], 2 if k.startswith("cp2") else 1,
                            {"prep": v["prep"], "pass1": v["pass1"], "scan": v["scan"], "pass3": v["pass3"],
                             "total": v["median_us"]}))
    for r in (single or {}).get("timings", []):
        T = int(r["config"].split("x")[1]) * int(r["config"].split("x")[0])
        N = int(r["config"].split("x")[0])
        wg = 2 if "WGS2" in r["ab"] else 1
        if r["L"] == 0:
            if wg == 1:
                out.append((T, N, T // N, -(-(T // N) // C), 1, {"total": r["median_us"]}))
            continue
        out.append((T, N, T // N, r["L"], wg, {"prep": r["prep_us"], "pass1": r["pass1_us"], "pass3": r["pass3_us"],
                                              "total": r["median_us"]}))
    return out


def loss(p, pts, keys):
    e = []
    for T, N, mx, L, wg, m in pts:
        pr, p1, sc, p3 = parts(T, N, mx, L, wg, p)
        est = {"prep": pr, "pass1": p1, "scan": sc, "pass3": p3}
        if "pass1" not in m and "pass1" in keys and wg == 1:  # chunk64 total = prep + walk
            e.append(math.log((pr + p1) / m["total"]))
        for k in keys:
            if k in m and est[k] > 0 and m[k] > 0:
                e.append(math.log(est[k] / m[k]))
    return float(np.mean(np.square(e))) if e else 0.0


def nelder_mead(f, x0, iters=300, step=0.15):
    n = len(x0)
    pts = [np.array(x0, float)] + [np.array(x0, float) * (1 + step * (np.arange(n) == i)) for i in range(n)]
    vals = [f(x) for x in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        cen = np.mean(pts[:-1], axis=0)
        xr = cen + (cen - pts[-1]); fr = f(xr)
        if fr < vals[0]:
            xe = cen + 2 * (cen - pts[-1]); fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = cen + 0.5 * (pts[-1] - cen); fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (x - pts[0]) for x in pts[1:]]
                vals = [vals[0]] + [f(x) for x in pts[1:]]
    i = int(np.argmin(vals))
    return pts[i], vals[i]


def fit(pts, p, names, keys):
    f = lambda x: loss({**p, **dict(zip(names, np.abs(x)))}, pts, keys)
    x, v = nelder_mead(f, [p[n] for n in names])
    p.update(dict(zip(names, np.abs(x))))
    return v


FUSED_CHUNK_US = {16: 0.495, 32: 0.605, 64: 0.875, 128: 1.14}  # cost.rs
FUSED_CTA_US = 4.0


def fused_us(T, N, longest, bv, c, cta):
    """cost.rs `fused_us` (the longest length as hint, HV = 8, 132 SMs)."""
    longest = min(max(longest, -(-T // N)), T)
    chain = math.ceil(longest / 16) * c + cta
    work = ((T / 16 + N / 2) * c + N * cta) * HV * (128 / bv) / SMS
    waves = math.ceil(N * HV * (128 // bv) / SMS) * (c + cta)
    return max(chain, work, waves)


def fit_fused(path):
    """--fused MIXSHORT.json: refit FUSED_CHUNK_US and FUSED_CTA_US on `mixshort` rows (MIX_ALL=1: every workload at
    every tile width), squared log error."""
    rows = json.load(open(path))["timings"]
    names = ["c16", "c32", "c64", "c128", "cta"]

    def err(x):
        c = dict(zip(names, np.abs(x)))
        e = [math.log(fused_us(r["T"], r["N"], r["max_len"], b, c[f"c{b}"], c["cta"]) / r[f"fused_bv{b}"])
             for r in rows for b in (16, 32, 64, 128)]
        return float(np.mean(np.square(e)))

    x0 = [FUSED_CHUNK_US[b] for b in (16, 32, 64, 128)] + [FUSED_CTA_US]
    print("fused rms log error at cost.rs's constants:", round(math.sqrt(err(x0)), 3))
    x, v = nelder_mead(err, x0, iters=600)
    print("fused fitted:", {n: round(float(abs(y)), 4) for n, y in zip(names, x)},
          "rms log error", round(math.sqrt(v), 3))
    for label, xs in (("cost.rs", x0), ("fitted", np.abs(x))):
        c = dict(zip(names, xs))
        worse, lost = 0, 0.0
        for r in rows:
            pick = min((16, 32, 64, 128), key=lambda b: fused_us(r["T"], r["N"], r["max_len"], b, c[f"c{b}"], c["cta"]))
            best = min(r[f"fused_bv{b}"] for b in (16, 32, 64, 128))
            worse += r[f"fused_bv{pick}"] > best * 1.02
            lost += r[f"fused_bv{pick}"] - best
        print(f"  {label}: tile picks more than 2% off the best {worse} of {len(rows)}, sum lost {lost:.1f} us")


def main():
    if sys.argv[1] == "--fused":
        fit_fused(sys.argv[2])
        return
    mix = json.load(open(sys.argv[1]))
    single = json.load(open(sys.argv[2])) if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else None
    pts = points(mix, single)
    # the fit's starting point (plausible values; the optimiser moves from here)
    p = {"PF": 7.0, "PC": 3.3, "W1": 2.6, "S1": 1.2, "C1": 6.2, "C3_1": 2.0, "W2": 3.5, "S2": 1.6, "C2": 8.1,
         "C3_2": 8.2, "W0": 2.6, "CS1": 6.2, "CS2": 8.1}
    p.update({f"SF{h}": f for h, (f, _) in SCAN_US.items()})
    p.update({f"SS{h}": st for h, (_, st) in SCAN_US.items()})
    p["SW"] = SCAN_WAVE_US
    rms = lambda: {k: round(math.sqrt(loss(p, pts, [k])), 3) for k in ("prep", "pass1", "scan", "pass3")}
    print("rms log error at the start:", rms())
    fit(pts, p, ["PF", "PC"], ["prep"])
    if "--scan" in sys.argv:  # the scan too (mixlong rows only: they run the scan kernel the planner picks)
        fit(pts, p, ["SF16", "SS16", "SF8", "SS8", "SW"], ["scan"])
    plain = [x for x in pts if "pass1" not in x[5]]  # chunk64 totals: the plain walk's W0
    cps = [x for x in pts if "pass1" in x[5]]
    for _ in range(2):  # pass 1 and pass 3 share W and C
        fit(plain, p, ["W0"], ["pass1"])
        fit(cps, p, ["W1", "S1", "C1", "CS1"], ["pass1"])
        fit(cps, p, ["C3_1"], ["pass3"])
        fit(cps, p, ["W2", "S2", "C2", "CS2"], ["pass1"])
        fit(cps, p, ["C3_2"], ["pass3"])
    print("fitted:", {k: round(float(v), 3) for k, v in p.items()})
    print("rms log error:", rms())
    errs = []
    for T, N, mx, L, wg, m in pts:
        est = sum(parts(T, N, mx, L, wg, p))
        errs.append(est / m["total"] - 1)
    errs = np.array(errs)
    print(f"total: rms {math.sqrt(np.mean(errs ** 2)):.3f} max {np.max(np.abs(errs)):.3f} "
          f"over {len(errs)} points")
    if "--table" in sys.argv:
        for r in mix["timings"]:
            f = [r[f"fused_bv{b}"] for b in (16, 32, 64, 128)]
            cp = [(v["L"], v["median_us"]) for k, v in r.items() if k.startswith("cp_G")]
            cp2 = [(v["L"], v["median_us"]) for k, v in r.items() if k.startswith("cp2_G")]
            dedup = lambda xs: list(dict(xs).items())  # the same L at two G: keep the last
            print(f'    ("{r["mix"]}", {r["T"]}, {r["N"]}, {r["max_len"]}, [{", ".join(f"{x:.1f}" for x in f)}], '
                  f'{r["chunk64"]:.1f},')
            print("     &[" + ", ".join(f"({l}, {u:.1f})" for l, u in dedup(cp)) + "],")
            print("     &[" + ", ".join(f"({l}, {u:.1f})" for l, u in dedup(cp2)) + "]),")


if __name__ == "__main__":
    main()
