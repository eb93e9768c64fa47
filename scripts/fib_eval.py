#!/usr/bin/env python3
"""scripts/fib_eval.py — gdn's packed solutions evaluated by flashinfer-bench itself (run by scripts/fib_eval.sh on
the GPU machine; needs torch with CUDA, flashinfer-bench and apache-tvm-ffi importable, nvcc and ninja on PATH).

Usage: python3 scripts/fib_eval.py --dataset DIR --packs PACKS --out OUT [--warmup N] [--iterations N] [--trials N]

1. The solutions of PACKS (`gdn pack` output) are copied into DIR/solutions/, beside the dataset's definitions and
   workloads (a `gdn workloads` dataset);
2. each is built by the harness's own builder registry (`BuilderRegistry.build`: the TVM-FFI builder, nvcc with its
   default flags), timed;
3. the harness's `Benchmark.run_all` evaluates every workload of the packed definitions (its correctness rule,
   its timing), writing traces under DIR/traces/;
4. OUT/fib_summary.json and OUT/fib_summary.md: per definition the status counts, the median / mean latency, the
   median speedup over the definition's reference, and per workload its axes, status, latency, speedup and errors;
   the harness's version, its timing method, the device, torch and CUDA.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--packs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=300)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    import torch
    import flashinfer_bench as fib
    from flashinfer_bench.bench import Benchmark, BenchmarkConfig
    from flashinfer_bench.compile import BuilderRegistry
    from flashinfer_bench.data import Solution, TraceSet

    # 1. the solutions into the dataset
    names = []
    for base, _, files in os.walk(a.packs):
        for f in sorted(files):
            if f.endswith(".json"):
                sol = Solution.model_validate(json.load(open(os.path.join(base, f))))
                dst = os.path.join(a.dataset, "solutions", "gdn", sol.definition)
                os.makedirs(dst, exist_ok=True)
                shutil.copy(os.path.join(base, f), os.path.join(dst, f))
                names.append((sol.definition, sol.name))
    ts = TraceSet.from_path(a.dataset)
    defs = sorted({d for d, _ in names if d in ts.definitions and ts.workloads.get(d)})
    print(f"flashinfer-bench {getattr(fib, '__version__', '?')}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}; definitions with workloads: {defs}", flush=True)

    # 2. the harness's builder
    builds = {}
    reg = BuilderRegistry.get_instance()
    for d, s in names:
        sol = next(x for x in ts.solutions.get(d, []) if x.name == s)
        t0 = time.time()
        try:
            reg.build(ts.definitions[d], sol)
            builds[s] = {"ok": True, "seconds": round(time.time() - t0, 1)}
        except Exception as e:  # BuildError: the compiler's output
            builds[s] = {"ok": False, "seconds": round(time.time() - t0, 1), "error": str(e)[-4000:]}
        print(f"build {s}: {builds[s]}", flush=True)

    # 3. the harness's evaluation
    cfg = BenchmarkConfig(warmup_runs=a.warmup, iterations=a.iterations, num_trials=a.trials,
                          definitions=defs, solutions=[s for _, s in names], timeout_seconds=a.timeout)
    bench = Benchmark(ts, cfg)
    t0 = time.time()
    try:
        result = bench.run_all(True)
    finally:
        bench.close()
    seconds = time.time() - t0

    # 4. the summary
    rows, per_def = [], {}
    for d in defs:
        for tr in result.traces.get(d, []):
            if tr.solution not in {s for _, s in names} or tr.evaluation is None:
                continue
            ev = tr.evaluation
            perf, corr = ev.performance, ev.correctness
            row = {
                "definition": d, "workload": tr.workload.uuid, "axes": dict(tr.workload.axes),
                "status": ev.status.value,
                "latency_ms": perf.latency_ms if perf else None,
                "reference_latency_ms": perf.reference_latency_ms if perf else None,
                "speedup": perf.speedup_factor if perf else None,
                "max_abs_error": corr.max_absolute_error if corr else None,
                "max_rel_error": corr.max_relative_error if corr else None,
            }
            if ev.status.value != "PASSED":
                row["log"] = (ev.log or "")[-1500:]
            rows.append(row)
            per_def.setdefault(d, []).append(row)
    summary = {
        "harness": f"flashinfer-bench {getattr(fib, '__version__', '?')}",
        "timing": "flashinfer-bench 0.1.2 time_runnable: synchronises before every sample (host work counted)",
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "config": {"warmup": a.warmup, "iterations": a.iterations, "trials": a.trials},
        "builds": builds, "evaluation_seconds": round(seconds, 1), "definitions": {},
        "workloads": rows,
    }
    lines = [f"# gdn packed solutions in {summary['harness']}", "",
             f"{summary['device']}, torch {summary['torch']}, CUDA {summary['cuda']}; {summary['timing']}; "
             f"warmup {a.warmup}, iterations {a.iterations}, trials {a.trials}.", "",
             "| definition | workloads | passed | median µs | mean µs | median speedup vs reference |",
             "|---|---|---|---|---|---|"]
    for d, rs in per_def.items():
        lat = [r["latency_ms"] * 1000 for r in rs if r["status"] == "PASSED" and r["latency_ms"]]
        sp = [r["speedup"] for r in rs if r["status"] == "PASSED" and r["speedup"]]
        counts = {}
        for r in rs:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        summary["definitions"][d] = {
            "workloads": len(rs), "status": counts,
            "median_us": statistics.median(lat) if lat else None, "mean_us": statistics.mean(lat) if lat else None,
            "median_speedup": statistics.median(sp) if sp else None,
        }
        s = summary["definitions"][d]
        fmt = lambda x: "–" if x is None else f"{x:.1f}"  # noqa: E731
        lines.append(f"| {d} | {len(rs)} | {counts.get('PASSED', 0)} | {fmt(s['median_us'])} | {fmt(s['mean_us'])} | "
                     f"{fmt(s['median_speedup'])} |")
    failed = [r for r in rows if r["status"] != "PASSED"]
    lines += ["", f"{len(rows)} workloads, {len(failed)} not PASSED; builds: " +
              ", ".join(f"{k} {'ok' if v['ok'] else 'FAILED'} {v['seconds']} s" for k, v in builds.items())]
    for r in failed[:10]:
        lines.append(f"- {r['definition']} {r['axes']}: {r['status']} {r.get('log', '')[-300:]!r}")
    json.dump(summary, open(os.path.join(a.out, "fib_summary.json"), "w"), indent=1)
    open(os.path.join(a.out, "fib_summary.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    ok = all(v["ok"] for v in builds.values()) and rows and not failed
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
