"""Compare fused builds on the contest-like mix from a `prefill64_harness.py mixshort` run (MIX_ALL=1).

    python3 tools/mix_compare.py $OUT/prefill64_sweep.json PEERS_MIX.json

For every build tag in the sweep (the production build and each ALT_KERNELS folder), takes the best fused tile
width per workload ("oracle over tiles") and prints the mean latency ratio FlashInfer / gdn over all workloads and
over those of < 256 tokens, and the summed time. PEERS_MIX.json: FlashInfer's times on the same workloads, as
scripts/peers_mix.py writes them (compare only runs on one device).
"""
import json
import statistics
import sys

if len(sys.argv) != 3:
    sys.exit(__doc__)
d = json.load(open(sys.argv[1]))
fim = {r["workload"]: r for r in json.load(open(sys.argv[2]))["rows"] if "flashinfer_us" in r}
tags = sorted({k[k.index("["):] if "[" in k else "" for r in d["timings"] for k in r if k.startswith("fused_")})
for tag in tags:
    ratios, short, total = [], [], 0.0
    for r in d["timings"]:
        if r.get("mix") not in fim:
            continue
        fi = fim[r["mix"]]["flashinfer_us"]
        v = [t for k, t in r.items() if k.startswith("fused_") and ((tag and k.endswith(tag)) or (not tag and "[" not in k))]
        best = min(v)
        ratios.append(fi / best)
        total += best
        if fim[r["mix"]]["T"] < 256:
            short.append(fi / best)
    print(f"{tag or 'prod':40s} n {len(ratios):3d}  oracle mean {statistics.mean(ratios):.3f}  "
          f"<256 {statistics.mean(short):.3f}  sum {total:.0f} us")
