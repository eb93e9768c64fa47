"""adapters_vs_peers.py — each gdn engine adapter beside the engine's own kernels on one GPU: GPU kernel time per call
(decode at B = 1 and B = 64, and the contest-like prefill mix) and host time per call.

  python3 scripts/adapters_vs_peers.py --out $OUT/adapters_vs_peers [--quick] [--budget-s 200]
  -> $OUT/adapters_vs_peers.json and $OUT/adapters_vs_peers.md

Pairs (the same inputs, each side called as its engine calls it; a peer that is not importable is skipped and said so):
  gdn.fla        vs FLA 0.6 (fla.ops.gated_delta_rule: fused_recurrent / chunk, as HF transformers calls them: log g,
                 beta, in-kernel q/k norm; FLA's default K-first dense states; .peers2)
  gdn.vllm       vs vLLM 0.33's FLA fork (vllm/third_party/flash_linear_attention/ops, standalone from
                 .peers3/vllm_fla or GDN_VLLM_FLA; scripts/fetch_vllm_fla.sh): the packed decode on the pool, and
                 chunk_gated_delta_rule as the layer's Triton/FLA prefill calls it (q/k normalised before,
                 per-sequence k-last states, chunk indices precomputed as vLLM's metadata builder does)
  gdn.flashinfer vs FlashInfer 0.7.2 (gated_delta_rule_decode_pretranspose on the pool, chunk_gated_delta_rule with
                 output / output_state given; .peers1 + .peers2)
  gdn.sglang     vs vLLM's fork too: sglang 0.5.23's TritonGDNKernel calls its own FLA fork, whose packed decode kernel
                 is vLLM's (it differs in the padding rule, -1 against 0, and in rounding beta to bfloat16) and whose
                 prefill is the same FLA chunk pipeline reading the pool inside its kernels (initial_state_indices).
                 The peer is therefore the fork's packed decode (output allocated per call, as sglang does) and the
                 fork's chunk with in-kernel q/k norm on per-sequence states (no gather / scatter counted), against
                 GDNKernel.packed_decode and GDNKernel.extend on the pool.
Shapes: decode with Qwen3-Next's heads (H = 16 q/k, HV = 32 value heads, d = 128), bfloat16 activations, a float32
k-last pool of 4096 slots, the B rows drawn at random (FLA has no pool: dense [B, HV, K, V] states). Prefill: the
contest-like mix (data/contest_mix.json, the 100 workloads of gdn_core::workload::contest_prefill_mix, qk4_v8 heads
unless --prefill-heads), inputs from the peers' bench_peers.prefill_inputs (normalised q/k, float32 states), the
pool for sglang's extend 4096 slots. --quick: 12 workloads spread over the mix and fewer timed calls.
Time:
  kernel_us - torch.profiler (CUPTI) per call: the sum of the durations of the call's kernels (copies and memsets
              not counted), a 256 MB buffer written between calls (the L2 flushed; its fill kernel also separates
              the calls), the median over --iters calls. One profiler session per shape covers every candidate.
  host_us   - wall time per call of a tight loop without synchronisation (bench_adapters_overhead.host: the median
              of 20 bursts of 100 calls), outputs given wherever the signature takes them; decode at B = 1 and 64,
              prefill on two 64-token sequences.
  agree     - max |gdn - peer| and rel-L2 of the first output of each pair from the same state (a sanity check; the
              tests compare against float64).
Budget: --budget-s (default 200 s) bounds the whole run; the prefill mix stops at the budget and the JSON says how
many workloads it covered. Triton kernels are compiled on the first call of each candidate (outside the timing).
"""
import argparse
import importlib
import json
import math
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "crates", "gdn-py", "tests"))

import gdn  # noqa: E402
from gdn import fla as gfla  # noqa: E402
from gdn import flashinfer as gfi  # noqa: E402
from gdn import vllm as gv  # noqa: E402
from gdn.sglang import GDNKernel  # noqa: E402
from bench_adapters_overhead import host  # noqa: E402  (host time per call, the method of bench_overhead.py)

DEV = torch.device("cuda")
D = 128
SLOTS = 4096
DECODE_B = (1, 64)
BF = torch.bfloat16
T0 = time.time()
FLUSH = None  # 256 MB, int16 so that its fill kernel is told apart from any kernel a candidate launches
FLUSH_TAG = "FillFunctor<short>"


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# peers

def load_bench_peers():
    """The peers' bench_peers.py (carried in .peers2, or ../shared/peers here) for prefill_inputs; None if absent."""
    for d in (os.path.join(ROOT, ".peers2"), os.path.join(ROOT, "..", "shared", "peers")):
        if os.path.isfile(os.path.join(d, "bench_peers.py")):
            sys.path.insert(0, d)
            argv, sys.argv = sys.argv, sys.argv[:1] + ["prefill"]  # it reads its part from argv at import
            try:
                return importlib.import_module("bench_peers"), None
            except Exception as e:  # noqa: BLE001
                return None, f"bench_peers import: {type(e).__name__}: {str(e)[:300]}"
            finally:
                sys.argv = argv
    return None, "bench_peers.py not found (.peers2 or ../shared/peers)"


def load_fork():
    path = os.path.abspath(os.environ.get("GDN_VLLM_FLA") or os.path.join(ROOT, ".peers3", "vllm_fla"))
    if not os.path.isdir(os.path.join(path, "vllm", "third_party", "flash_linear_attention", "ops")):
        return None, f"vLLM's FLA fork not found at {path} (scripts/fetch_vllm_fla.sh; carry .peers3)"
    sys.path.insert(0, path)
    try:
        import vllm

        if not getattr(vllm, "STANDALONE_FLA_FORK", False):
            return None, f"`vllm` resolves to {vllm.__file__}, not the standalone fork"
        ops = importlib.import_module("vllm.third_party.flash_linear_attention.ops")
        index = importlib.import_module("vllm.third_party.flash_linear_attention.ops.index")
        try:
            with open(os.path.join(path, "SOURCE.json")) as f:
                src = json.load(f)
        except (OSError, ValueError):
            src = {"vllm": getattr(vllm, "__version__", "?")}
        return (ops, index, src), None
    except Exception as e:  # noqa: BLE001
        return None, f"fork import: {type(e).__name__}: {str(e)[:300]}"


def load(name):
    try:
        return importlib.import_module(name), None
    except Exception as e:  # noqa: BLE001
        return None, f"{name}: {type(e).__name__}: {str(e)[:300]}"


# ---------------------------------------------------------------------------------------------------------------
# timing

def kernel_us(calls, iters):
    """calls: [(key, fn)]. Each fn runs twice untimed, then, in one profiler session, `iters` times per key, each call
    after the flush. Returns {key: median over its calls of the summed kernel durations (us)} plus, under key
    "_kernels", {key: kernels per call}. Raises when the kernels cannot be split into the expected calls."""
    from torch.profiler import ProfilerActivity, profile

    for _, fn in calls:
        fn()
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _, fn in calls:
            for _ in range(iters):
                FLUSH.fill_(1)
                fn()
        torch.cuda.synchronize()
    evs = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if "Memcpy" in e.name or "Memset" in e.name:
            continue
        evs.append((e.time_range.start, e.time_range.end, FLUSH_TAG in e.name))
    evs.sort()
    groups, cur = [], None
    for st, en, is_flush in evs:
        if is_flush:
            if cur is not None:
                groups.append(cur)
            cur = []
        elif cur is not None:
            cur.append(en - st)
    if cur is not None:
        groups.append(cur)
    if len(groups) != len(calls) * iters or any(not g for g in groups):
        raise RuntimeError(f"profiler: {len(groups)} call groups for {len(calls)} x {iters} calls")
    out, nk = {}, {}
    for i, (key, _) in enumerate(calls):
        mine = groups[i * iters:(i + 1) * iters]
        out[key] = statistics.median(sum(g) for g in mine)
        nk[key] = len(mine[0])
    out["_kernels"] = nk
    return out


def agree(a, b):
    a, b = a.detach().float(), b.detach().float()
    d = (a - b).abs()
    outside = int(((d > 1e-2) & (d > 1e-2 * b.abs())).sum())
    return {"max_abs": float(d.max()) if d.numel() else 0.0,
            "rel_l2": float(d.norm() / max(float(b.norm()), 1e-30)), "outside_contest": outside}


# ---------------------------------------------------------------------------------------------------------------
# decode (Qwen3-Next heads, pool of SLOTS rows)

def decode_pairs(B, P, H, HV, fork, fla, fi):
    """[(pair, gdn_fn, peer_fn or None, why, state_rows or None, outputs given)] for one batch size. Each fn
    returns its output tensor. state_rows: pool rows the calls update in place (saved and restored around the
    agreement check)."""
    g = torch.Generator(device=DEV).manual_seed(B)
    r = lambda *s: torch.randn(*s, device=DEV, generator=g)  # noqa: E731
    W = (2 * H + HV) * D
    scale = D ** -0.5
    idx = (torch.randperm(SLOTS - 1, device=DEV, generator=g)[:B] + 1).to(torch.int32)
    mixed = r(B, W).to(BF)
    a, b = r(B, HV).to(BF), r(B, HV).to(BF)
    A_log = torch.log(torch.rand(HV, device=DEV, generator=g) * 15 + 1)
    dt = r(HV)
    dt_bf = dt.to(BF)  # vLLM / sglang keep dt_bias in the model dtype
    out_g = torch.empty(B, 1, HV, D, dtype=BF, device=DEV)
    out_p = torch.empty_like(out_g)
    q4, k4 = F.normalize(r(B, 1, H, D), dim=-1).to(BF), r(B, 1, H, D).to(BF)
    v4 = r(B, 1, HV, D).to(BF)
    a3, b3 = a.view(B, 1, HV), b.view(B, 1, HV)
    gl = (-torch.exp(A_log) * F.softplus(a3.float() + dt)).contiguous()
    beta = torch.sigmoid(b3.float())
    h_kf = 0.1 * r(B, HV, D, D)  # FLA's default K-first states
    ker = GDNKernel()
    pairs = []

    vkw = dict(mixed_qkv=mixed, a=a, b=b, A_log=A_log, dt_bias=dt_bf, scale=scale, initial_state=P,
               ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    fork_ops = fork[0] if fork else None
    pairs.append(("vllm packed_decode",
                  lambda: gv.fused_recurrent_gated_delta_rule_packed_decode(out=out_g, **vkw)[0],
                  (lambda: fork_ops.fused_recurrent_gated_delta_rule_packed_decode(out=out_p, **vkw)[0])
                  if fork_ops else None, idx, True))
    pairs.append(("sglang packed_decode",
                  lambda: ker.packed_decode(mixed, a, b, A_log=A_log, dt_bias=dt_bf, scale=scale, ssm_states=P,
                                            cache_indices=idx, num_v_heads=HV, head_v_dim=D),
                  (lambda: fork_ops.fused_recurrent_gated_delta_rule_packed_decode(
                      out=mixed.new_empty(B, 1, HV, D), **vkw)[0].transpose(0, 1)) if fork_ops else None,
                  idx, False))
    fikw = dict(scale=scale, use_qk_l2norm=True, initial_state=P, initial_state_indices=idx)
    pairs.append(("flashinfer decode_pretranspose (pool)",
                  lambda: gfi.gated_delta_rule_decode_pretranspose(q4, k4, v4, None, A_log, a3, dt, b3, output=out_g,
                                                                   **fikw)[0],
                  (lambda: fi[0].gated_delta_rule_decode_pretranspose(q4, k4, v4, None, A_log, a3, dt, b3,
                                                                      output=out_p, **fikw)[0]) if fi else None,
                  idx, True))
    flkw = dict(initial_state=h_kf, output_final_state=True, use_qk_l2norm_in_kernel=True)
    pairs.append(("fla fused_recurrent (dense states)",
                  lambda: gfla.fused_recurrent_gated_delta_rule(q4, k4, v4, gl, beta=beta, **flkw)[0],
                  (lambda: fla.fused_recurrent_gated_delta_rule(q4, k4, v4, gl, beta=beta, **flkw)[0])
                  if fla else None, None, False))
    return pairs


# ---------------------------------------------------------------------------------------------------------------
# prefill (one workload of the mix)

def prefill_pairs(lens, bp, PP, fork, fla, fi, seed=0):
    q, k, v, state, A_log, a, dt, b, cu, scale = bp.prefill_inputs(lens, seed=seed)
    T, N, HV = q.shape[0], len(lens), v.shape[1]
    gl = -torch.exp(A_log) * F.softplus(a.float() + dt)
    beta = torch.sigmoid(b.float())
    alpha = torch.exp(gl)
    cu32 = cu.to(torch.int32)
    q1, k1, v1, gl1, beta1 = q[None], k[None], v[None], gl[None], beta[None]
    qr = (q.float() * 3.0).to(BF)[None]  # un-normalised q / k for the in-kernel norm calls
    kr = (k.float() * 2.0).to(BF)[None]
    s_kf = state.transpose(-1, -2).contiguous()
    g = torch.Generator(device=DEV).manual_seed(seed + 7)
    idx = (torch.randperm(PP.shape[0], device=DEV, generator=g)[:N]).to(torch.int32)
    PP[idx.long()] = state  # sglang's extend reads these rows; every other candidate starts from `state` itself
    ker = GDNKernel()
    o_buf, s_buf = torch.empty(T, HV, D, dtype=BF, device=DEV), torch.empty_like(state)
    o_buf2, s_buf2 = torch.empty_like(o_buf), torch.empty_like(state)
    pairs = []
    if fork:
        ops, index = fork[0], fork[1]
        ci, co = index.prepare_chunk_indices(cu32, 64), index.prepare_chunk_offsets(cu32, 64)
    vkw = dict(initial_state=state, output_final_state=True, cu_seqlens=cu32, use_qk_l2norm_in_kernel=False)
    if fork:
        vkw.update(chunk_indices=ci, chunk_offsets=co)
    pairs.append(("vllm chunk", lambda: gv.chunk_gated_delta_rule(q1, k1, v1, gl1, beta1, **vkw)[0],
                  (lambda: ops.chunk_gated_delta_rule(q1, k1, v1, gl1, beta1, **vkw)[0]) if fork else None, None,
                  False))
    skw = dict(vkw, use_qk_l2norm_in_kernel=True)
    pairs.append(("sglang extend (pool)",
                  lambda: ker.extend(qr, kr, v1, gl1, beta1, ssm_states=PP, cache_indices=idx, query_start_loc=cu32)[0],
                  (lambda: ops.chunk_gated_delta_rule(qr, kr, v1, gl1, beta1, **skw)[0]) if fork else None, idx,
                  False))
    fkw = dict(initial_state=s_kf, output_final_state=True, cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
    pairs.append(("fla chunk", lambda: gfla.chunk_gated_delta_rule(qr, kr, v1, gl1, beta1, **fkw)[0],
                  (lambda: fla.chunk_gated_delta_rule(qr, kr, v1, gl1, beta1, **fkw)[0]) if fla else None, None,
                  False))
    ikw = dict(g=alpha, beta=beta, scale=scale, initial_state=state, output_final_state=True, cu_seqlens=cu)
    pairs.append(("flashinfer chunk",
                  lambda: gfi.chunk_gated_delta_rule(q, k, v, output=o_buf, output_state=s_buf, **ikw)[0],
                  (lambda: fi[1].chunk_gated_delta_rule(q, k, v, output=o_buf2, output_state=s_buf2, **ikw)[0])
                  if fi else None, None, True))
    return pairs


# ---------------------------------------------------------------------------------------------------------------

def check_pair(pair, gfn, pfn, rows, pool):
    """Both outputs from the same pool rows (restored after each call)."""
    saved = pool[rows.long()].clone() if rows is not None else None
    og = gfn().clone()
    if saved is not None:
        pool[rows.long()] = saved
    op = pfn().clone()
    if saved is not None:
        pool[rows.long()] = saved
    torch.cuda.synchronize()
    return agree(og.reshape(op.shape), op)


def run_shape(res, part, shape, pairs, pool, iters, why, do_host):
    """Agreement, kernel time and (do_host) host time of every pair of one shape; rows appended to res."""
    calls, rows = [], {}
    for pair, gfn, pfn, st_rows, outs in pairs:
        row = {"part": part, "shape": shape, "pair": pair, "outputs_given": outs}
        rows[pair] = row
        res["rows"].append(row)
        saved = pool[st_rows.long()].clone() if st_rows is not None else None
        try:
            gfn()  # the first call (compiles, plans), from the pool rows as they are
            torch.cuda.synchronize()
            calls.append((pair + "|gdn", gfn))
        except Exception:  # noqa: BLE001
            row["gdn_error"] = traceback.format_exc()[-700:]
            continue
        finally:
            if saved is not None:
                pool[st_rows.long()] = saved
        if pfn is None:
            row["peer_missing"] = why.get(pair.split(" ")[0], "not importable")
            continue
        try:
            pfn()
            torch.cuda.synchronize()
            row["agree"] = check_pair(pair, gfn, pfn, st_rows, pool)
            calls.append((pair + "|peer", pfn))
        except Exception:  # noqa: BLE001
            row["peer_error"] = traceback.format_exc()[-700:]
    try:
        t = kernel_us(calls, iters)
        for key, _ in calls:
            pair, side = key.split("|")
            rows[pair][f"{side}_kernel_us"] = t[key]
            rows[pair][f"{side}_kernels"] = t["_kernels"][key]
    except Exception:  # noqa: BLE001
        res["errors"].append(f"{part} {shape} kernel time: " + traceback.format_exc()[-700:])
    if do_host:
        for key, fn in calls:
            pair, side = key.split("|")
            try:
                rows[pair][f"{side}_host_us"] = host(fn)[0]
            except Exception:  # noqa: BLE001
                res["errors"].append(f"{part} {shape} {key} host time: " + traceback.format_exc()[-500:])
    for pair, row in rows.items():
        if "gdn_kernel_us" in row and "peer_kernel_us" in row:
            row["peer_over_gdn"] = row["peer_kernel_us"] / row["gdn_kernel_us"]
    return rows


PEER_OF = {"vllm": "vLLM 0.33 FLA fork", "sglang": "vLLM 0.33 FLA fork (stands in for sglang's own fork)",
           "fla": "FLA 0.6", "flashinfer": "FlashInfer 0.7.2"}


def markdown(res):
    fmt = lambda x, p=1: "-" if x is None else f"{x:.{p}f}"  # noqa: E731
    lines = [f"# gdn adapters beside their peers ({res['device']})", "",
             f"torch {res['torch']}, gdn {res['gdn']}, peers: "
             + ", ".join(f"{k} {v}" for k, v in res["peers"].items()),
             "", "kernel us: profiler kernel-time sum per call, L2 flushed, median; host us: wall time per call of a "
             "tight loop, no sync.", "",
             "| part | shape | pair | peer | gdn kernel us | peer kernel us | peer / gdn | gdn host us | peer host us "
             "| max abs diff |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        if r["part"] == "prefill":
            continue
        lines.append(f"| {r['part']} | {r['shape']} | {r['pair']} | {PEER_OF[r['pair'].split(' ')[0]]} | "
                     f"{fmt(r.get('gdn_kernel_us'))} | {fmt(r.get('peer_kernel_us'))} | "
                     f"{fmt(r.get('peer_over_gdn'), 2)} | {fmt(r.get('gdn_host_us'))} | {fmt(r.get('peer_host_us'))} | "
                     f"{fmt(r.get('agree', {}).get('max_abs'), 4)} |")
    s = res.get("prefill_summary", {})
    if s:
        lines += ["", f"## Prefill mix ({res['prefill_workloads_done']} of {res['prefill_workloads']} workloads)", "",
                  "| pair | peer | workloads | sum gdn us | sum peer us | mean peer / gdn | median peer / gdn | "
                  "max abs diff |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for pair, v in s.items():
            lines.append(f"| {pair} | {PEER_OF[pair.split(' ')[0]]} | {v['workloads']} | {fmt(v['sum_gdn_us'])} | "
                         f"{fmt(v['sum_peer_us'])} | {fmt(v['mean_ratio'], 2)} | {fmt(v['median_ratio'], 2)} | "
                         f"{fmt(v['max_abs'], 4)} |")
    for pair, why in res["missing"].items():
        lines.append(f"\n{pair}: peer not measured: {why}")
    if res["errors"]:
        lines.append(f"\n{len(res['errors'])} errors (see the JSON).")
    return "\n".join(lines) + "\n"


def main():
    global FLUSH
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output path without extension: writes OUT.json and OUT.md")
    ap.add_argument("--quick", action="store_true", help="12 workloads of the mix, fewer timed calls")
    ap.add_argument("--budget-s", type=float, default=200.0, help="time budget of the whole run (s)")
    ap.add_argument("--iters", type=int, default=None, help="timed calls per candidate (default 20, quick 10)")
    ap.add_argument("--prefill-heads", default="4,8", help="H,HV of the prefill mix (default 4,8: qk4_v8)")
    args = ap.parse_args()
    iters = args.iters or (10 if args.quick else 20)
    try:
        pH, pHV = (int(x) for x in args.prefill_heads.split(","))
    except ValueError:
        ap.error(f"--prefill-heads: expected H,HV, got {args.prefill_heads!r}")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    FLUSH = torch.empty(256 * 1024 * 1024 // 2, dtype=torch.int16, device=DEV)

    fork, why_fork = load_fork()
    fla, why_fla = load("fla.ops.gated_delta_rule")
    fi_d, why_fid = load("flashinfer.gdn_decode")
    fi_p, why_fip = load("flashinfer.gdn_prefill")
    fi = (fi_d, fi_p) if fi_d is not None and fi_p is not None else None
    bp, why_bp = load_bench_peers()
    why = {"vllm": why_fork, "sglang": why_fork, "fla": why_fla, "flashinfer": why_fid or why_fip}
    peers = {"vllm_fork": fork[2].get("vllm") if fork else None}
    for name in ("fla", "flashinfer"):
        try:
            peers[name] = importlib.import_module(name).__version__
        except Exception:  # noqa: BLE001
            peers[name] = None
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "gdn": gdn.__version__,
           "peers": peers, "quick": args.quick, "iters": iters, "budget_s": args.budget_s,
           "decode_heads": [16, 32], "prefill_heads": [pH, pHV], "pool_slots": SLOTS,
           "missing": {k: v for k, v in why.items() if v}, "rows": [], "errors": []}
    if why_bp:
        res["errors"].append(why_bp)
    log(res["device"], "| peers", peers, "| missing", res["missing"])

    def save():
        with open(args.out + ".json", "w") as f:
            json.dump(res, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(markdown(res))

    # decode: one pool for every candidate (rows are updated in place; the agreement check restores them)
    with torch.no_grad():
        P = 0.1 * torch.randn(SLOTS, 32, D, D, device=DEV)
        for B in DECODE_B:
            rows = run_shape(res, "decode", f"B={B}", decode_pairs(B, P, 16, 32, fork, fla, fi), P, iters, why, True)
            log(f"decode B={B}:", {p: (fmt_us(r.get("gdn_kernel_us")), fmt_us(r.get("peer_kernel_us"))) for p, r in
                                   rows.items()})
            save()
        del P
        torch.cuda.empty_cache()
        if bp is None:
            res["errors"].append("prefill mix skipped: bench_peers.py unavailable")
            save()
            return 1
        bp.H, bp.HV = pH, pHV  # prefill_inputs reads these module globals
        mix = json.load(open(os.path.join(ROOT, "data", "contest_mix.json")))
        names = sorted(mix, key=lambda n: sum(mix[n]))
        if args.quick and len(names) > 12:
            names = [names[round(i * (len(names) - 1) / 11)] for i in range(12)]
        res["prefill_workloads"] = len(names)
        PP = 0.1 * torch.randn(SLOTS, pHV, D, D, device=DEV)
        # host time on a small workload (two 64-token sequences), kernel time over the mix
        run_shape(res, "prefill-host", "2x64", prefill_pairs([64, 64], bp, PP, fork, fla, fi), PP, iters, why, True)
        save()
        done = 0
        for i, name in enumerate(names):
            if time.time() - T0 > args.budget_s:
                res["errors"].append(f"time budget {args.budget_s:.0f} s reached after {done} workloads")
                break
            lens = mix[name]
            try:
                rows = run_shape(res, "prefill", name, prefill_pairs(lens, bp, PP, fork, fla, fi, seed=i), PP,
                                 iters, why, False)
            except Exception:  # noqa: BLE001
                res["errors"].append(f"prefill {name}: " + traceback.format_exc()[-700:])
                continue
            done += 1
            if i % 10 == 0 or args.quick:
                log(f"prefill {name} T={sum(lens)}:", {p: (fmt_us(r.get("gdn_kernel_us")),
                                                          fmt_us(r.get("peer_kernel_us"))) for p, r in rows.items()})
        res["prefill_workloads_done"] = done
        summary = {}
        for r in res["rows"]:
            if r["part"] != "prefill" or "peer_over_gdn" not in r:
                continue
            s = summary.setdefault(r["pair"], {"ratios": [], "sum_gdn_us": 0.0, "sum_peer_us": 0.0, "max_abs": 0.0})
            s["ratios"].append(r["peer_over_gdn"])
            s["sum_gdn_us"] += r["gdn_kernel_us"]
            s["sum_peer_us"] += r["peer_kernel_us"]
            s["max_abs"] = max(s["max_abs"], r.get("agree", {}).get("max_abs", 0.0))
        for s in summary.values():
            rs = s.pop("ratios")
            s.update(workloads=len(rs), mean_ratio=statistics.mean(rs), median_ratio=statistics.median(rs),
                     geomean_ratio=math.exp(statistics.mean(math.log(x) for x in rs)))
        res["prefill_summary"] = summary
    res["wall_s"] = time.time() - T0
    save()
    print(markdown(res))
    log(f"wrote {args.out}.json and {args.out}.md; {len(res['errors'])} errors")
    for e in res["errors"]:
        print("ERROR:", e[-400:])
    return 0


def fmt_us(x):
    return None if x is None else round(x, 1)


if __name__ == "__main__":
    sys.exit(main())
