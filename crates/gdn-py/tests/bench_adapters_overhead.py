"""Host cost per call of gdn's engine adapters on torch CUDA tensors. Run on the GPU machine by
`ADAPTERS=1 bash scripts/device_python.sh` (or directly: python3 crates/gdn-py/tests/bench_adapters_overhead.py).

Rows: gdn.decode / gdn.prefill called directly, and each adapter's decode, verify and prefill entry points
(gdn.fla, gdn.flashinfer, gdn.vllm, gdn.sglang, gdn.transformers), qk4_v8 heads, d = 128, decode batches of 16 from
a 64-slot pool, prefill of two 64-token sequences. Outputs are passed wherever the engine's signature takes them
(column "outputs": given / allocated by the call, as the engine's own function does).

Per call, under torch.no_grad() as inference runs, in microseconds (the method of bench_overhead.py):
  host_us     - wall time of one Python call on the host (argument handling, validation, launches): bursts of 100
                calls with no synchronisation inside (the GPU queue absorbs them), a synchronize between bursts;
                the median over 20 bursts (2,000 calls) after 50 warm-up calls
  cpu_us      - CPU time of the calling thread over the same bursts (time.thread_time), median per call
  call_p50_us - the median of 2,000 calls timed one by one (perf_counter_ns around each; a synchronize every 100
                calls, outside the timing)
  gpu_us      - CUDA events around each call, median of 200: the call as the stream sees it. Where gpu_us is above
                host_us the GPU sets the pace of a burst; host_us stays the host's own cost as long as the launch
                queue does not fill (100 calls of a few launches each do not).
Targets (issue 44): <= 5 us per decode call and <= 8 us per prefill call of host time with outputs given.
Prints a table and writes $OUT/adapters_overhead.json (OUT defaults to /tmp/out).
"""
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import gdn
from gdn import fla as gfla
from gdn import flashinfer as gfi
from gdn import sglang as gsg
from gdn import transformers as gtr
from gdn import vllm as gv

DEV = torch.device("cuda")
H, HV, D = 4, 8, 128
W = (2 * H + HV) * D
SCALE = 1.0 / math.sqrt(D)
B, SLOTS, T_VERIFY = 16, 64, 4
LENS = [64, 64]
BF = torch.bfloat16
OUT = os.environ.get("OUT", "/tmp/out")
WARMUP, BURST, BURSTS, SINGLE, EVENTS = 50, 100, 20, 2000, 200
TARGET = {"decode": 5.0, "prefill": 8.0}


# ---------------------------------------------------------------------------------------------------------------
# timing

def host(fn):
    """(wall us, thread CPU us) per call: the median over BURSTS bursts of BURST calls."""
    wall, cpu = [], []
    for _ in range(BURSTS):
        torch.cuda.synchronize()
        t, c = time.perf_counter(), time.thread_time()
        for _ in range(BURST):
            fn()
        wall.append((time.perf_counter() - t) / BURST * 1e6)
        cpu.append((time.thread_time() - c) / BURST * 1e6)
        torch.cuda.synchronize()
    return statistics.median(wall), statistics.median(cpu)


def single(fn):
    """The median of SINGLE calls timed one by one (us)."""
    ts = []
    clock = time.perf_counter_ns
    for i in range(SINGLE):
        if i % BURST == 0:
            torch.cuda.synchronize()
        t = clock()
        fn()
        ts.append(clock() - t)
    torch.cuda.synchronize()
    return statistics.median(ts) / 1e3


def events(fn):
    st = [torch.cuda.Event(enable_timing=True) for _ in range(EVENTS)]
    en = [torch.cuda.Event(enable_timing=True) for _ in range(EVENTS)]
    torch.cuda.synchronize()
    for i in range(EVENTS):
        st[i].record()
        fn()
        en[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(st, en))


# ---------------------------------------------------------------------------------------------------------------
# inputs

def rn(*s, dtype=torch.float32, scale=1.0):
    return (torch.randn(*s, device=DEV) * scale).to(dtype)


def unit(*s):
    return F.normalize(torch.randn(*s, device=DEV), dim=-1).to(BF)


def gates_raw(*lead):
    """A_log, a, dt_bias, b as the layers hold them (dt_bias float32 here; vLLM / sglang cases pass bfloat16)."""
    return (torch.log(torch.rand(HV, device=DEV) * 15 + 1), rn(*lead, HV, dtype=BF), rn(HV),
            rn(*lead, HV, dtype=BF))


def gates_log(*lead):
    return -torch.rand(*lead, HV, device=DEV) * 0.5, torch.rand(*lead, HV, device=DEV)


def pool():
    return rn(SLOTS, HV, D, D, scale=0.1)


def slots(n, null_slot=False):
    """n distinct pool rows (from 1 with vLLM's null slot 0 kept free)."""
    lo = 1 if null_slot else 0
    return (torch.randperm(SLOTS - lo, device=DEV)[:n] + lo).to(torch.int32)


def cu_of(lens, dtype=torch.int32):
    c = [0]
    for n in lens:
        c.append(c[-1] + n)
    return torch.tensor(c, dtype=dtype, device=DEV)


# ---------------------------------------------------------------------------------------------------------------
# cases: (name, kind, outputs, builder); each builder returns the callable

def c_gdn_decode():
    q, k, v = unit(B, 1, H, D), unit(B, 1, H, D), rn(B, 1, HV, D, dtype=BF)
    st = rn(B, HV, D, D, scale=0.1)
    A_log, a, dt_bias, b = gates_raw(B, 1)
    out, ns = torch.empty_like(v), torch.empty_like(st)
    return lambda: gdn.decode(q, k, v, st, A_log, a, dt_bias, b, SCALE, output=out, new_state=ns)


def c_gdn_decode_pool():
    q, k, v = rn(B, 1, H, D, dtype=BF), rn(B, 1, H, D, dtype=BF), rn(B, 1, HV, D, dtype=BF)
    P, idx = pool(), slots(B, True)
    A_log, a, dt_bias, b = gates_raw(B, 1)
    out = torch.empty_like(v)
    return lambda: gdn.decode(q, k, v, P, A_log, a, dt_bias, b, SCALE, output=out, state_indices=idx,
                              pad="null-slot", use_qk_l2norm_in_kernel=True)


def c_gdn_prefill():
    T, N = sum(LENS), len(LENS)
    q, k, v = unit(T, H, D), unit(T, H, D), rn(T, HV, D, dtype=BF)
    st = rn(N, HV, D, D, scale=0.1)
    A_log, a, dt_bias, b = gates_raw(T)
    cu = cu_of(LENS, torch.int64)
    out, ns = torch.empty_like(v), torch.empty_like(st)
    return lambda: gdn.prefill(q, k, v, st, A_log, a, dt_bias, b, cu, SCALE, output=out, new_state=ns,
                               max_seqlen=max(LENS))


def c_fla_recurrent():
    q, k, v = rn(B, 1, H, D, dtype=BF), rn(B, 1, H, D, dtype=BF), rn(B, 1, HV, D, dtype=BF)
    g, beta = gates_log(B, 1)
    h0 = rn(B, HV, D, D, scale=0.1)
    return lambda: gfla.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=h0,
                                                         output_final_state=True, use_qk_l2norm_in_kernel=True)


def c_fla_recurrent_raw():
    q, k, v = rn(B, 1, H, D, dtype=BF), rn(B, 1, H, D, dtype=BF), rn(B, 1, HV, D, dtype=BF)
    A_log, a, dt_bias, b = gates_raw(B, 1)
    h0 = rn(B, HV, D, D, scale=0.1)
    return lambda: gfla.fused_recurrent_gated_delta_rule(
        q, k, v, g=a, beta=b, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True, state_v_first=True)


def c_fla_chunk_varlen():
    T, N = sum(LENS), len(LENS)
    q, k, v = rn(1, T, H, D, dtype=BF), rn(1, T, H, D, dtype=BF), rn(1, T, HV, D, dtype=BF)
    A_log, a, dt_bias, b = gates_raw(1, T)
    h0 = rn(N, HV, D, D, scale=0.1)
    cu = cu_of(LENS, torch.int64)
    cu_cpu = cu.cpu()
    return lambda: gfla.chunk_gated_delta_rule(
        q, k, v, a, b, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True, state_v_first=True,
        cu_seqlens=cu, cu_seqlens_cpu=cu_cpu)


def c_fla_chunk_batch():
    n, L = len(LENS), LENS[0]
    q, k, v = rn(n, L, H, D, dtype=BF), rn(n, L, H, D, dtype=BF), rn(n, L, HV, D, dtype=BF)
    g, beta = gates_log(n, L)
    h0 = rn(n, HV, D, D, scale=0.1)
    return lambda: gfla.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                               use_qk_l2norm_in_kernel=True)


def c_fi_decode_state():
    q, k, v = rn(B, 1, H, D, dtype=BF), rn(B, 1, H, D, dtype=BF), rn(B, 1, HV, D, dtype=BF)
    A_log, a, dt_bias, b = gates_raw(B, 1)
    S = rn(B, HV, D, D, scale=0.1)
    out = torch.empty_like(v)
    return lambda: gfi.gated_delta_rule_decode_pretranspose(q, k, v, S, A_log, a, dt_bias, b, output=out)


def c_fi_decode_pool():
    q, k, v = rn(B, 1, H, D, dtype=BF), rn(B, 1, H, D, dtype=BF), rn(B, 1, HV, D, dtype=BF)
    A_log, a, dt_bias, b = gates_raw(B, 1)
    P, idx = pool(), slots(B)
    out = torch.empty_like(v)
    return lambda: gfi.gated_delta_rule_decode_pretranspose(q, k, v, None, A_log, a, dt_bias, b, output=out,
                                                            initial_state=P, initial_state_indices=idx)


def c_fi_decode_kmajor():
    q, k, v = rn(B, 1, H, D, dtype=BF), rn(B, 1, H, D, dtype=BF), rn(B, 1, HV, D, dtype=BF)
    A_log, a, dt_bias, b = gates_raw(B, 1)
    S = rn(B, HV, D, D, scale=0.1)
    out = torch.empty_like(v)
    return lambda: gfi.gated_delta_rule_decode(q, k, v, S, A_log, a, dt_bias, b, output=out)


def c_fi_mtp():
    T = T_VERIFY
    q, k, v = rn(B, T, H, D, dtype=BF), rn(B, T, H, D, dtype=BF), rn(B, T, HV, D, dtype=BF)
    A_log, a, dt_bias, b = gates_raw(B, T)
    P, idx = pool(), slots(B)
    out, buf = torch.empty_like(v), torch.empty(B, T, HV, D, D, device=DEV)
    return lambda: gfi.gated_delta_rule_mtp(q, k, v, P, idx, A_log, a, dt_bias, b, output=out,
                                            intermediate_states_buffer=buf, disable_state_update=True)


def c_fi_prefill():
    T, N = sum(LENS), len(LENS)
    q, k, v = rn(T, H, D, dtype=BF), unit(T, H, D), rn(T, HV, D, dtype=BF)
    alpha, beta = torch.exp(gates_log(T)[0]), torch.rand(T, HV, device=DEV)
    h0 = rn(N, HV, D, D, scale=0.1)
    cu = cu_of(LENS, torch.int64)
    out, ost = torch.empty_like(v), torch.empty_like(h0)
    return lambda: gfi.chunk_gated_delta_rule(q, k, v, alpha, beta, initial_state=h0, output_final_state=True,
                                              cu_seqlens=cu, output=out, output_state=ost, max_seqlen=max(LENS))


def _mixed(n):
    return rn(n, W + 16, dtype=BF)[:, :W]


def _split(mq, lead):
    q, k, v = torch.split(mq, [H * D, H * D, HV * D], dim=-1)
    return q.view(*lead, H, D), k.view(*lead, H, D), v.view(*lead, HV, D)


def c_vllm_packed():
    mq = _mixed(B)
    A_log, a, dt_bias, b = gates_raw(B)
    dt_bias = dt_bias.to(BF)
    P, idx = pool(), slots(B, True)
    out = torch.empty(B, 1, HV, D, dtype=BF, device=DEV)
    return lambda: gv.fused_recurrent_gated_delta_rule_packed_decode(mq, a, b, A_log, dt_bias, SCALE, P, out, idx,
                                                                     True)


def c_vllm_sigmoid_decode():
    mq = _mixed(B)
    q, k, v = _split(mq, (1, B))
    A_log, a, dt_bias, b = gates_raw(B)
    dt_bias = dt_bias.to(BF)
    P, idx = pool(), slots(B, True)
    cu = torch.arange(B + 1, dtype=torch.int32, device=DEV)
    return lambda: gv.fused_sigmoid_gating_delta_rule_update(
        A_log=A_log, a=a, b=b, dt_bias=dt_bias, q=q, k=k, v=v, initial_state=P, inplace_final_state=True,
        cu_seqlens=cu, ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)


def c_vllm_recurrent_decode():
    mq = _mixed(B)
    q, k, v = _split(mq, (1, B))
    g, beta = gates_log(1, B)
    P, idx = pool(), slots(B, True)
    cu = torch.arange(B + 1, dtype=torch.int32, device=DEV)
    return lambda: gv.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=P, inplace_final_state=True,
                                                       cu_seqlens=cu, ssm_state_indices=idx,
                                                       use_qk_l2norm_in_kernel=True)


def c_vllm_spec_verify():
    S = T_VERIFY
    mq = _mixed(B * S)
    q, k, v = _split(mq, (1, B * S))
    A_log, a, dt_bias, b = gates_raw(B * S)
    dt_bias = dt_bias.to(BF)
    P = rn(B * S + 1, HV, D, D, scale=0.1)
    idx = (torch.randperm(B * S, device=DEV) + 1).to(torch.int32).view(B, S)
    acc = torch.randint(1, S + 1, (B,), dtype=torch.int32, device=DEV)
    cu = torch.arange(B + 1, dtype=torch.int32, device=DEV) * S
    return lambda: gv.fused_sigmoid_gating_delta_rule_update(
        A_log=A_log, a=a, b=b, dt_bias=dt_bias, q=q, k=k, v=v, initial_state=P, inplace_final_state=True,
        cu_seqlens=cu, ssm_state_indices=idx, num_accepted_tokens=acc, use_qk_l2norm_in_kernel=True)


def c_vllm_chunk():
    T, N = sum(LENS), len(LENS)
    mq = _mixed(T)
    q, k, v = _split(mq, (1, T))
    g, beta = gates_log(1, T)
    h0 = rn(N, HV, D, D, scale=0.1)
    cu = cu_of(LENS)
    core = torch.empty(T, HV, D, dtype=BF, device=DEV)
    return lambda: gv.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                             cu_seqlens=cu, use_qk_l2norm_in_kernel=True, core_attn_out=core)


def c_vllm_fi_chunk():
    T, N = sum(LENS), len(LENS)
    mq = _mixed(T)
    q, k, v = _split(mq, (1, T))
    g, beta = gates_log(1, T)
    h0 = rn(N, HV, D, D, scale=0.1)
    cu = cu_of(LENS)
    return lambda: gv.fi_chunk_gated_delta_rule(q, k, v, g, beta, h0, True, cu, True)


KER = gsg.GDNKernel()


def c_sglang_packed():
    mq = _mixed(B)
    A_log, a, dt_bias, b = gates_raw(B)
    dt_bias = dt_bias.to(BF)
    P, idx = pool(), slots(B)
    return lambda: KER.packed_decode(mq, a, b, A_log=A_log, dt_bias=dt_bias, scale=SCALE, ssm_states=P,
                                     cache_indices=idx, num_v_heads=HV, head_v_dim=D)


def c_sglang_decode():
    mq = _mixed(B)
    q, k, v = _split(mq, (1, B))
    A_log, a, dt_bias, b = gates_raw(B)
    dt_bias = dt_bias.to(BF)
    P, idx = pool(), slots(B)
    qsl = torch.arange(B + 1, dtype=torch.int32, device=DEV)
    return lambda: KER.decode(q, k, v, a, b, A_log=A_log, dt_bias=dt_bias, ssm_states=P, cache_indices=idx,
                              query_start_loc=qsl)


def c_sglang_verify():
    S = T_VERIFY
    mq = _mixed(B * S)
    q, k, v = _split(mq, (1, B * S))
    A_log, a, dt_bias, b = gates_raw(B * S)
    dt_bias = dt_bias.to(BF)
    P, idx = pool(), slots(B)
    ib = torch.empty(B, S, HV, D, D, device=DEV)
    pos = torch.arange(B, dtype=torch.int32, device=DEV)
    cu = torch.arange(B + 1, dtype=torch.int32, device=DEV) * S
    return lambda: KER.target_verify(A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=P,
                                     cache_indices=idx, query_start_loc=cu, intermediate_states_buffer=ib,
                                     intermediate_state_indices=pos, cache_steps=S, retrieve_parent_token=None)


def c_sglang_extend():
    T, N = sum(LENS), len(LENS)
    mq = _mixed(T)
    q, k, v = _split(mq, (1, T))
    g, beta = gates_log(1, T)
    P, idx = pool(), slots(N)
    cu = cu_of(LENS)
    out = torch.empty(1, T, HV, D, dtype=BF, device=DEV)
    return lambda: KER.extend(q, k, v, g, beta, ssm_states=P, cache_indices=idx, query_start_loc=cu, output=out)


def c_tr_recurrent():
    q, k, v = rn(B, 1, HV, D, dtype=BF), rn(B, 1, HV, D, dtype=BF), rn(B, 1, HV, D, dtype=BF)
    g, beta = gates_log(B, 1)
    beta = beta.to(BF)
    h0 = rn(B, HV, D, D, scale=0.1)
    return lambda: gtr.recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True,
                                                  use_qk_l2norm_in_kernel=True, cu_seqlens=None)


def c_tr_chunk():
    n, L = len(LENS), LENS[0]
    q, k, v = rn(n, L, HV, D, dtype=BF), rn(n, L, HV, D, dtype=BF), rn(n, L, HV, D, dtype=BF)
    g, beta = gates_log(n, L)
    beta = beta.to(BF)
    return lambda: gtr.chunk_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=None, output_final_state=True,
                                              use_qk_l2norm_in_kernel=True, cu_seqlens=None)


CASES = [
    ("gdn.decode (definition)", "decode", "given", c_gdn_decode),
    ("gdn.decode (pool, null slot, q/k norm)", "decode", "given", c_gdn_decode_pool),
    ("fla.fused_recurrent (T=1, log g)", "decode", "allocated", c_fla_recurrent),
    ("fla.fused_recurrent (T=1, raw gates, v-first)", "decode", "allocated", c_fla_recurrent_raw),
    ("flashinfer.decode_pretranspose (state)", "decode", "given", c_fi_decode_state),
    ("flashinfer.decode_pretranspose (pool)", "decode", "given", c_fi_decode_pool),
    ("flashinfer.gated_delta_rule_decode (k-major)", "decode", "given", c_fi_decode_kmajor),
    ("vllm.packed_decode", "decode", "given", c_vllm_packed),
    ("vllm.fused_sigmoid_gating (decode)", "decode", "allocated", c_vllm_sigmoid_decode),
    ("vllm.fused_recurrent (decode)", "decode", "allocated", c_vllm_recurrent_decode),
    ("sglang.packed_decode", "decode", "allocated", c_sglang_packed),
    ("sglang.decode", "decode", "allocated", c_sglang_decode),
    ("transformers.recurrent (T=1)", "decode", "allocated", c_tr_recurrent),
    ("flashinfer.gated_delta_rule_mtp (T=4)", "verify", "given", c_fi_mtp),
    ("vllm.fused_sigmoid_gating (spec, T=4)", "verify", "allocated", c_vllm_spec_verify),
    ("sglang.target_verify (T=4)", "verify", "allocated", c_sglang_verify),
    ("gdn.prefill (definition)", "prefill", "given", c_gdn_prefill),
    ("fla.chunk (varlen, raw gates, cu_seqlens_cpu)", "prefill", "allocated", c_fla_chunk_varlen),
    ("fla.chunk (batch [2, 64], log g)", "prefill", "allocated", c_fla_chunk_batch),
    ("flashinfer.chunk_gated_delta_rule", "prefill", "given", c_fi_prefill),
    ("vllm.chunk_gated_delta_rule", "prefill", "given", c_vllm_chunk),
    ("vllm.fi_chunk_gated_delta_rule", "prefill", "allocated", c_vllm_fi_chunk),
    ("sglang.extend", "prefill", "given", c_sglang_extend),
    ("transformers.chunk ([2, 64])", "prefill", "allocated", c_tr_chunk),
]


def measure(build):
    fn = build()
    with torch.no_grad():
        for _ in range(WARMUP):
            fn()
        torch.cuda.synchronize()
        wall, cpu = host(fn)
        return {"host_us": wall, "cpu_us": cpu, "call_p50_us": single(fn), "gpu_us": events(fn)}


def main():
    torch.manual_seed(0)
    z = torch.zeros(1, device=DEV)
    tiny = {"host_us": host(lambda: z.add_(1))[0], "gpu_us": events(lambda: z.add_(1))}
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | gdn {gdn.__version__}")
    print(f"torch tiny kernel (z.add_(1)): host {tiny['host_us']:.2f} us, gpu {tiny['gpu_us']:.2f} us")
    head = f"{'call':<48} {'kind':<8} {'outputs':<9} {'host':>7} {'cpu':>7} {'p50':>7} {'gpu':>7}  target"
    print(head)
    print("-" * len(head))
    rows = []
    for name, kind, outs, build in CASES:
        row = {"call": name, "kind": kind, "outputs": outs}
        try:
            row.update(measure(build))
        except Exception as e:  # report and go on
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        tgt = TARGET.get(kind)
        if tgt is not None and "host_us" in row:
            row["target_us"] = tgt
            row["meets_target"] = row["host_us"] <= tgt
        rows.append(row)
        if "error" in row:
            print(f"{name:<48} {kind:<8} {outs:<9} error: {row['error']}", flush=True)
        else:
            verdict = "-" if tgt is None else f"<= {tgt:g}: {'yes' if row['meets_target'] else 'NO'}"
            print(f"{name:<48} {kind:<8} {outs:<9} {row['host_us']:7.2f} {row['cpu_us']:7.2f} "
                  f"{row['call_p50_us']:7.2f} {row['gpu_us']:7.2f}  {verdict}", flush=True)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "adapters_overhead.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "gdn": gdn.__version__,
                   "shapes": {"H": H, "HV": HV, "D": D, "decode_B": B, "pool_slots": SLOTS, "verify_T": T_VERIFY,
                              "prefill_lens": LENS},
                   "method": {"warmup": WARMUP, "burst": BURST, "bursts": BURSTS, "single": SINGLE,
                              "events": EVENTS},
                   "targets_us": TARGET, "tiny": tiny, "rows": rows}, f, indent=1)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
