#!/usr/bin/env python3
"""scripts/bench_compare.py — two or more `gdn bench --json` files side by side, one row per workload.

Usage: python3 scripts/bench_compare.py [--tier cupti] [--op prefill] A.json B.json [C.json ...]

Prints each workload's median (µs) in the chosen tier for every file, and each later file's ratio to the first,
with the kernel / plan the first file names. Used for A/B runs of kernel changes on the device (the same
process order and machine for every file: compare only files from one call).
"""
import argparse
import json
import signal


def medians(path, tier, op):
    d = json.load(open(path))
    out = {}
    for cls in d["classes"]:
        if op and cls.get("op") != op:
            continue
        for w in cls["workloads"]:
            for t in w["tiers"]:
                if t["tier"] == tier:
                    out[(cls["name"], w["label"])] = (t["median_us"], w.get("kernel") or "")
    return out


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    ap = argparse.ArgumentParser()
    ap.add_argument("--tier", default="cupti")
    ap.add_argument("--op", default="")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    runs = [medians(f, a.tier, a.op) for f in a.files]
    keys = [k for k in runs[0] if all(k in r for r in runs[1:])]
    head = f"{'class':<22} {'workload':<24}" + "".join(f" {i:>9}" for i in range(len(runs)))
    print(head + "".join(f"  r{i}/r0" for i in range(1, len(runs))) + "  kernel (file 0)")
    for k in keys:
        vals = [r[k][0] for r in runs]
        line = f"{k[0][:22]:<22} {k[1][:24]:<24}" + "".join(f" {v:9.1f}" for v in vals)
        line += "".join(f"  {v / vals[0]:6.3f}" for v in vals[1:])
        print(line + "  " + runs[0][k][1][:40])


if __name__ == "__main__":
    main()
