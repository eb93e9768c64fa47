"""FlashInfer beside gdn on the contest-like prefill mix: the mean over the mix of FlashInfer's latency divided by
gdn's, measured rather than inferred from the eight anchor configurations.

Runs on the GPU machine through `PEERS_MIX=1 bash scripts/device_python.sh` (carry .whl/gdn and .peers2, after
a call that carried .peers1), which installs the wheel and sources .peers2/setup.sh.
Inputs: the 100 workloads of gdn_core::workload::contest_prefill_mix(qk4_v8, seed 0) (the mix `gdn bench` runs;
data/contest_mix.json), drawn by the peers' bench_peers.py `prefill_inputs` (normalised q/k, fp32 state).
Time: bench_peers.kernel_sum — CUPTI kernel time per call, every kernel of the call summed (FlashInfer's gate
preprocessing included), L2 flushed before each call.
Candidates: gdn given the longest length (`max_seqlen`, as a caller with host-side lengths), gdn without it,
FlashInfer chunk_gated_delta_rule. Sanity: each gdn output is compared with FlashInfer's (rel-L2).
Writes $OUT/peers_mix.json; prints one row per workload and the summary (mean and median of the per-workload
FlashInfer / gdn ratios, sums).
"""
import json, os, statistics, sys, time, traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.argv = sys.argv[:1] + ["prefill"]  # bench_peers reads its part from argv at import
sys.path.insert(0, os.path.join(HERE, "..", ".peers2"))
import bench_peers as bp  # noqa: E402
import gdn  # noqa: E402

OUT = os.environ.get("OUT", "/tmp/out")
ITERS = int(os.environ.get("MIX_ITERS", "10"))
BUDGET_S = float(os.environ.get("MIX_BUDGET_S", "420"))
MIX = json.load(open(os.path.join(HERE, "..", "data", "contest_mix.json")))


def main():
    bp._flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=bp.dev)
    fi = bp.load_fi()
    fi_chunk = bp.prefill_candidates(None, fi)["fi_chunk"]
    res = {"device": torch.cuda.get_device_name(), "iters": ITERS, "rows": [], "errors": []}
    t0 = time.time()
    for name, lens in MIX.items():
        if time.time() - t0 > BUDGET_S:
            res["errors"].append(f"time budget reached before {name}")
            break
        inp = bp.prefill_inputs(lens)
        longest = max(lens) if lens else 0
        cands = {
            "gdn_hint": lambda: gdn.prefill(*inp, max_seqlen=longest),
            "gdn_blind": lambda: gdn.prefill(*inp),
            "flashinfer": lambda: fi_chunk(*inp),
        }
        row = {"workload": name, "T": sum(lens), "N": len(lens), "longest": longest}
        try:
            ref_o, _ = cands["flashinfer"]()
            for k, fn in cands.items():
                o, _ = fn()
                if k != "flashinfer":
                    row[f"{k}_vs_fi_rel_l2"] = float(((o.float() - ref_o.float()).norm() /
                                                      (ref_o.float().norm() + 1e-30)).item())
                row[f"{k}_us"], _ = bp.kernel_sum(fn, iters=ITERS)
            row["speedup_hint"] = row["flashinfer_us"] / row["gdn_hint_us"]
            row["speedup_blind"] = row["flashinfer_us"] / row["gdn_blind_us"]
            print(f"{name:<24} T {row['T']:<5} N {row['N']:<3} gdn {row['gdn_hint_us']:7.1f} (blind "
                  f"{row['gdn_blind_us']:7.1f})  FI {row['flashinfer_us']:7.1f}  x{row['speedup_hint']:.2f}  "
                  f"agree {row['gdn_hint_vs_fi_rel_l2']:.1e}", flush=True)
        except Exception:
            res["errors"].append(f"{name}: " + traceback.format_exc()[-800:])
            print("ERROR", res["errors"][-1], flush=True)
        res["rows"].append(row)
    done = [r for r in res["rows"] if "speedup_hint" in r]
    if done:
        res["summary"] = {
            "workloads": len(done),
            "mean_speedup_hint": statistics.mean(r["speedup_hint"] for r in done),
            "median_speedup_hint": statistics.median(r["speedup_hint"] for r in done),
            "mean_speedup_blind": statistics.mean(r["speedup_blind"] for r in done),
            "sum_gdn_hint_us": sum(r["gdn_hint_us"] for r in done),
            "sum_gdn_blind_us": sum(r["gdn_blind_us"] for r in done),
            "sum_flashinfer_us": sum(r["flashinfer_us"] for r in done),
            "max_gdn_vs_fi_rel_l2": max(r["gdn_hint_vs_fi_rel_l2"] for r in done),
        }
        print(json.dumps(res["summary"], indent=1))
    with open(os.path.join(OUT, "peers_mix.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(f"errors: {len(res['errors'])}")


if __name__ == "__main__":
    main()
