"""GPU tests of the `gdn` Python module (skipped unless torch and a CUDA device are available; run on the
device machine by scripts/device_python.sh).

Compares gdn's CUDA kernels, called on torch CUDA tensors, with a reference equivalent to the definitions'
PyTorch `run` code (embedded here: the definitions are not on the device machine), and checks CUDA-graph
capture and replay, a non-default stream, in-place state, odd batch sizes, MTP, zero-length prefill
sequences and the three prefill plans (fused; chunk64 and cp with their torch-allocated workspaces). The serving
modes are in test_gpu_serving.py, on this file's reference and inputs.
"""
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import gdn  # noqa: E402

if gdn.cuda_unavailable_reason() is not None:
    pytest.skip(f"gdn CUDA backend unavailable: {gdn.cuda_unavailable_reason()}", allow_module_level=True)

dev = torch.device("cuda")
D = 128
HEADS = [(4, 8), (2, 8), (16, 32)]


# ------------------------------------------------------------------ reference (the definitions' math)
@torch.no_grad()
def ref_seq(q, k, v, S, A_log, a, dt_bias, b, scale, inter=None):
    """q,k [T,H,D], v [T,HV,D], a,b [T,HV] (any dtype), S [HV,V,K] float64. Per token, as the definitions:
    old = g*S(kv); old_v = k@old; new_v = beta*v + (1-beta)*old_v; S = old - k^T old_v + k^T new_v;
    out = scale * q@S. Computed in float64 in the k-last orientation."""
    H, HV = q.shape[1], v.shape[1]
    x = a.double() + dt_bias.double()
    g = torch.exp(-torch.exp(A_log.double()) * F.softplus(x))
    beta = torch.sigmoid(b.double())
    out = torch.zeros(v.shape, dtype=torch.float64, device=q.device)
    for t in range(q.shape[0]):
        qq = q[t].double().repeat_interleave(HV // H, dim=0)
        kk = k[t].double().repeat_interleave(HV // H, dim=0)
        old = g[t][:, None, None] * S
        old_v = torch.einsum("hvk,hk->hv", old, kk)
        new_v = beta[t][:, None] * v[t].double() + (1 - beta[t][:, None]) * old_v
        S = old + (new_v - old_v)[:, :, None] * kk[:, None, :]
        out[t] = scale * torch.einsum("hvk,hk->hv", S, qq)
        if inter is not None:
            inter[t] = S
    return out, S


def resolve(scale):
    return 1.0 / math.sqrt(D) if scale is None or scale == 0 else scale


def ref_prefill(q, k, v, state, A_log, a, dt_bias, b, cu, scale):
    cu = cu.tolist()
    N, HV = len(cu) - 1, v.shape[1]
    out = torch.zeros(v.shape, dtype=torch.float64, device=q.device)
    ns = torch.zeros(N, HV, D, D, dtype=torch.float64, device=q.device)
    for n in range(N):
        s0, s1 = cu[n], cu[n + 1]
        if s1 == s0:
            continue  # the reference skips empty sequences: new_state row stays zero
        S = torch.zeros(HV, D, D, dtype=torch.float64, device=q.device) if state is None else state[n].double()
        out[s0:s1], ns[n] = ref_seq(q[s0:s1], k[s0:s1], v[s0:s1], S, A_log, a[s0:s1], dt_bias, b[s0:s1],
                                    resolve(scale))
    return out, ns


def ref_decode(q, k, v, state, A_log, a, dt_bias, b, scale):
    """Batched over requests (one token each)."""
    B, H, HV = q.shape[0], q.shape[2], v.shape[2]
    S = torch.zeros(B, HV, D, D, dtype=torch.float64, device=q.device) if state is None else state.double()
    g = torch.exp(-torch.exp(A_log.double()) * F.softplus(a[:, 0].double() + dt_bias.double()))
    beta = torch.sigmoid(b[:, 0].double())
    qq = q[:, 0].double().repeat_interleave(HV // H, dim=1)
    kk = k[:, 0].double().repeat_interleave(HV // H, dim=1)
    old = g[..., None, None] * S
    old_v = torch.einsum("bhvk,bhk->bhv", old, kk)
    new_v = beta[..., None] * v[:, 0].double() + (1 - beta[..., None]) * old_v
    S = old + (new_v - old_v)[..., None] * kk[..., None, :]
    out = resolve(scale) * torch.einsum("bhvk,bhk->bhv", S, qq)
    return out[:, None], S


def ref_mtp(q, k, v, pool, idx, A_log, a, dt_bias, b, scale, inter=None, serving=False):
    B, T, HV = q.shape[0], q.shape[1], v.shape[2]
    out = torch.zeros(v.shape, dtype=torch.float64, device=q.device)
    fin = pool.double().clone()
    ib = None if inter is None else inter.double().clone()
    for r, i in enumerate(idx.tolist()):
        if i < 0:
            continue
        it = torch.zeros(T, HV, D, D, dtype=torch.float64, device=q.device) if ib is not None else None
        out[r], S = ref_seq(q[r], k[r], v[r], pool[i].double(), A_log, a[r], dt_bias, b[r], resolve(scale), it)
        if ib is not None:
            ib[i] = it
        if serving:
            fin[i] = S
    return out, fin, ib


def close(x, y, what, rel_l2):
    """Contest rule (fail only if |x-y| > 1e-2 and |x-y|/(|y|+1e-8) > 1e-2), finiteness, rel-L2 bound."""
    x, y = x.double(), y.double()
    assert x.shape == y.shape, f"{what}: shape {tuple(x.shape)} vs {tuple(y.shape)}"
    assert torch.isfinite(x).all(), f"{what}: {(~torch.isfinite(x)).sum().item()} non-finite values"
    d = (x - y).abs()
    bad = (d > 1e-2) & (d / (y.abs() + 1e-8) > 1e-2)
    if bad.any():
        i = torch.argmax(torch.where(bad, d, torch.zeros_like(d))).item()
        pytest.fail(f"{what}: {bad.sum().item()} elements out of tolerance; worst flat index {i}: "
                    f"{x.flatten()[i].item()} vs {y.flatten()[i].item()}")
    rel = ((x - y).norm() / (y.norm() + 1e-30)).item()
    assert rel <= rel_l2, f"{what}: rel-L2 {rel:.2e} > {rel_l2:.0e}"


OUT_L2, F32_L2, BF16_L2 = 8e-3, 1e-5, 8e-3
# The chunked prefill kernel forms the state update with tensor-core products of bf16/tf32 operands: its fp32
# state carries ~2e-3 relative L2 error (FLA 1.8e-3, FlashInfer 2.3e-3 on the same kind of input).
PREFILL_STATE_L2 = 5e-3


# ------------------------------------------------------------------ inputs
def gen(seed):
    return torch.Generator(device=dev).manual_seed(seed)


def randn(g, *shape):
    return torch.randn(*shape, device=dev, generator=g)


def gates(g, HV, lead):
    A_log = torch.log(torch.rand(HV, device=dev, generator=g) * 15 + 1)
    return A_log, randn(g, *lead, HV).bfloat16(), randn(g, HV), randn(g, *lead, HV).bfloat16()


def decode_inputs(B, H, HV, seed=0, raw=True, state_dtype=torch.float32, with_state=True):
    g = gen(seed)
    q, k = randn(g, B, 1, H, D), randn(g, B, 1, H, D)
    if not raw:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    v = randn(g, B, 1, HV, D).bfloat16()
    state = (0.1 * randn(g, B, HV, D, D)).to(state_dtype) if with_state else None
    A_log, a, dt_bias, b = gates(g, HV, (B, 1))
    return [q.bfloat16(), k.bfloat16(), v, state, A_log, a, dt_bias, b]


def prefill_inputs(lens, H, HV, seed=0, state_dtype=torch.float32, with_state=True):
    g = gen(seed)
    T, N = sum(lens), len(lens)
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(N)], dtype=torch.int64, device=dev)
    q = F.normalize(randn(g, T, H, D), dim=-1).bfloat16()
    k = F.normalize(randn(g, T, H, D), dim=-1).bfloat16()
    v = randn(g, T, HV, D).bfloat16()
    state = (0.1 * randn(g, N, HV, D, D)).to(state_dtype) if with_state else None
    A_log, a, dt_bias, b = gates(g, HV, (T,))
    return [q, k, v, state, A_log, a, dt_bias, b, cu]


def mtp_inputs(B, T, pool, H, HV, seed=0, state_dtype=torch.float32):
    g = gen(seed)
    q = F.normalize(randn(g, B, T, H, D), dim=-1).bfloat16()
    k = F.normalize(randn(g, B, T, H, D), dim=-1).bfloat16()
    v = randn(g, B, T, HV, D).bfloat16()
    st = (0.1 * randn(g, pool, HV, D, D)).to(state_dtype)
    idx = torch.randperm(pool, device=dev, generator=g)[:B].to(torch.int32)
    A_log, a, dt_bias, b = gates(g, HV, (B, T))
    return [q, k, v, st, idx, A_log, a, dt_bias, b]


# ------------------------------------------------------------------ decode
@pytest.mark.parametrize("H,HV", HEADS)
@pytest.mark.parametrize("B", [1, 3, 33, 257])
def test_decode(H, HV, B):
    x = decode_inputs(B, H, HV, seed=B)
    o, ns = gdn.decode(*x, None)
    torch.cuda.synchronize()
    ro, rs = ref_decode(*x, None)
    assert o.dtype == torch.bfloat16 and o.device == x[0].device and ns.dtype == torch.float32
    close(o, ro, "output", OUT_L2)
    close(ns, rs, "new_state", F32_L2)


@pytest.mark.parametrize("scale", [0.0, 0.05])
def test_decode_variants(scale):
    x = decode_inputs(5, 4, 8, seed=2, raw=False, with_state=False)
    o, ns = gdn.decode(*x, scale)
    ro, rs = ref_decode(*x, scale)
    close(o, ro, "output (zero state)", OUT_L2)
    close(ns, rs, "new_state (zero state)", F32_L2)
    x = decode_inputs(33, 4, 8, seed=3, state_dtype=torch.bfloat16)
    o, ns = gdn.decode(*x, scale)
    ro, rs = ref_decode(*x, scale)
    assert ns.dtype == torch.bfloat16
    close(o, ro, "output (bf16 state)", OUT_L2)
    close(ns, rs, "new_state (bf16 state)", BF16_L2)


def test_decode_in_place():
    x = decode_inputs(64, 4, 8, seed=4)
    ro, rs = ref_decode(*x, None)
    st = x[3]
    out = torch.empty(64, 1, 8, D, dtype=torch.bfloat16, device=dev)
    o, ns = gdn.decode(*x, output=out, new_state=st)
    assert o is out and ns is st
    close(out, ro, "output", OUT_L2)
    close(st, rs, "new_state (in place)", F32_L2)


def captured(call):
    """A CUDA graph of `call`, after one warm-up run off the capture (it loads / compiles the kernels)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph


def replay_with(graph, captured_inputs, new_inputs, poisoned=()):
    """Copies `new_inputs` into the buffers the graph captured, fills `poisoned` with NaN (so every element the
    replay should write is seen to be written), replays and waits."""
    for dst, src in zip(captured_inputs, new_inputs):
        dst.copy_(src)
    for t in poisoned:
        t.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()


def test_cuda_graph_capture_and_replay():
    B = 33
    x = decode_inputs(B, 4, 8, seed=5)
    out = torch.empty(B, 1, 8, D, dtype=torch.bfloat16, device=dev)
    new_state = torch.empty(B, 8, D, D, device=dev)
    graph = captured(lambda: gdn.decode(*x, output=out, new_state=new_state))
    for seed in (6, 7):  # new inputs copied into the captured buffers, then replay
        y = decode_inputs(B, 4, 8, seed=seed)
        replay_with(graph, x, y)
        ro, rs = ref_decode(*y, None)
        close(out, ro, f"output (graph replay, seed {seed})", OUT_L2)
        close(new_state, rs, f"new_state (graph replay, seed {seed})", F32_L2)


def test_non_default_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = decode_inputs(257, 4, 8, seed=8)  # produced on s: the launch must be ordered after them on s
        x[3].mul_(1.5)
        o, ns = gdn.decode(*x)
        o2 = o.float() * 1.0  # consumer on the same stream
    s.synchronize()
    ro, rs = ref_decode(*x, None)
    close(o2, ro, "output (side stream)", OUT_L2)
    close(ns, rs, "new_state (side stream)", F32_L2)


# ------------------------------------------------------------------ prefill
@pytest.mark.parametrize("H,HV", HEADS)
def test_prefill(H, HV):
    x = prefill_inputs([0, 1, 63, 64, 65, 0], H, HV, seed=9)
    o, ns = gdn.prefill(*x, None)
    ro, rs = ref_prefill(*x, None)
    close(o, ro, "output", OUT_L2)
    close(ns, rs, "new_state", PREFILL_STATE_L2)
    assert not ns[0].any() and not ns[5].any(), "zero-length sequences leave new_state rows zero"


def test_prefill_variants():
    x = prefill_inputs([100, 37, 64, 1], 4, 8, seed=10, with_state=False)
    o, ns = gdn.prefill(*x, 0.0)
    ro, rs = ref_prefill(*x, 0.0)
    close(o, ro, "output (zero state)", OUT_L2)
    close(ns, rs, "new_state (zero state)", PREFILL_STATE_L2)
    x = prefill_inputs([3, 0, 130], 4, 8, seed=11)
    ro, rs = ref_prefill(*x, 0.1)
    st = x[3]
    o, ns = gdn.prefill(*x, 0.1, new_state=st)
    assert ns is st
    close(o, ro, "output (in place)", OUT_L2)
    close(st, rs, "new_state (in place)", PREFILL_STATE_L2)
    x = prefill_inputs([0, 0], 4, 8, seed=12)  # only empty sequences
    o, ns = gdn.prefill(*x)
    torch.cuda.synchronize()
    assert o.shape == (0, 8, D) and not ns.any()


# The two-kernel chunk64 plan (prep + wgmma walk, workspace from torch's caching allocator) is what the policy
# runs for an odd number of value heads (the fused kernels need HV even), so these shapes exercise it for real.
@pytest.mark.parametrize("H,HV,state_dtype", [(1, 3, torch.float32), (1, 5, torch.bfloat16), (3, 9, torch.float32)])
def test_prefill_chunk64(H, HV, state_dtype):
    x = prefill_inputs([700, 0, 900], H, HV, seed=13, state_dtype=state_dtype)  # mean 533
    o, ns = gdn.prefill(*x)
    ro, rs = ref_prefill(*x, None)
    close(o, ro, "output (chunk64)", OUT_L2)
    close(ns.float(), rs, "new_state (chunk64)", PREFILL_STATE_L2 if state_dtype == torch.float32 else BF16_L2)
    assert ns.dtype == state_dtype and not ns[1].any()


# The context-parallel plan (prep, pass 1, scan, pass 3; workspace from torch) is what the policy runs for few
# long sequences: here 2 sequences x 2 value heads = 8 walk chains, 4000 tokens each on average, cut by the
# prefill cost model into segments of 7 chunks: 7 and 12 segments of these two sequences.
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_prefill_context_parallel(state_dtype):
    x = prefill_inputs([3000, 5000], 1, 2, seed=16, state_dtype=state_dtype)
    o, ns = gdn.prefill(*x)
    ro, rs = ref_prefill(*x, None)
    close(o, ro, "output (cp)", OUT_L2)
    close(ns.float(), rs, "new_state (cp)", PREFILL_STATE_L2 if state_dtype == torch.float32 else BF16_L2)


def _workspace_bytes(x, hint):
    """Scratch the planned call needs (> 0: chunk64 / cp; 0: fused), through the binding's planner."""
    names = ("q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "cu_seqlens")
    descs = [None if t is None else gdn._desc(t, n, "prefill") for n, t in zip(names, x)]
    return gdn._gdn.plan("prefill", descs, None, False, hint).workspace_bytes


# A long sequence among short ones: with max_seqlen the host cuts the long one into segments (cp, whose workspace
# adds the segment states); without it the device plan decides from cu_seqlens on the device, with a
# workspace that serves its chunk64 and cp routes. Same results either way, and with a hint that is wrong (too small).
def test_prefill_length_hint():
    lens = [3700, 40, 300, 0, 860]
    x = prefill_inputs(lens, 4, 8, seed=19)
    assert _workspace_bytes(x, 3700) > 0 and _workspace_bytes(x, None) > 0
    ro, rs = ref_prefill(*x, None)
    for hint in (None, 3700, 1):
        o, ns = gdn.prefill(*x, max_seqlen=hint)
        close(o, ro, f"output (max_seqlen={hint})", OUT_L2)
        close(ns, rs, f"new_state (max_seqlen={hint})", PREFILL_STATE_L2)
    assert not ns[3].any()
    with pytest.raises(ValueError, match="max_seqlen"):
        gdn.prefill(*x, max_seqlen=sum(lens) + 1)


# The two plans with a workspace, captured in a CUDA graph (the workspace comes from the graph's private pool; no
# host sync): chunk64 by an odd HV, cp by two long sequences (see above: four launches).
@pytest.mark.parametrize("plan,lens,HV,seeds",
                         [("chunk64", [1024, 640], 3, (14, 15)), ("cp", [4100, 2500], 2, (17, 18))])
def test_prefill_workspace_plan_graph_capture(plan, lens, HV, seeds):
    x = prefill_inputs(lens, 1, HV, seed=seeds[0])
    out = torch.empty_like(x[2])
    new_state = torch.empty_like(x[3])
    graph = captured(lambda: gdn.prefill(*x, output=out, new_state=new_state))
    y = prefill_inputs(lens, 1, HV, seed=seeds[1])
    replay_with(graph, x, y)
    ro, rs = ref_prefill(*y, None)
    close(out, ro, f"output ({plan}, graph replay)", OUT_L2)
    close(new_state, rs, f"new_state ({plan}, graph replay)", PREFILL_STATE_L2)


# The device plan inside a CUDA graph: captured with one split of 8192 tokens over 12 sequences, replayed with others.
# Each launch decides from the cu_seqlens in memory at replay time. The splits are chosen so that the three routes
# (fused, cp, chunk64) are likely to run (longest 683, 5002, 1999 tokens); the results must match the reference
# whichever route runs, so a refit of the cost model does not change what this test guards.
def test_prefill_device_plan_graph_replay_with_other_lengths():
    splits = ([683] * 11 + [679], [5002] + [290] * 11, [1999] + [563] * 11)
    assert all(sum(l) == 8192 and len(l) == 12 for l in splits)
    x = prefill_inputs(splits[0], 4, 8, seed=31)
    out = torch.empty_like(x[2])
    new_state = torch.empty_like(x[3])
    graph = captured(lambda: gdn.prefill(*x, output=out, new_state=new_state))  # (compiles the device-plan builds)
    for i, lens in enumerate(splits):
        y = prefill_inputs(lens, 4, 8, seed=32 + i)
        replay_with(graph, x, y, poisoned=(out, new_state))
        ro, rs = ref_prefill(*y, None)
        close(out, ro, f"output (device plan, split {i}, graph replay)", OUT_L2)
        close(new_state, rs, f"new_state (device plan, split {i}, graph replay)", PREFILL_STATE_L2)


# ------------------------------------------------------------------ MTP
@pytest.mark.parametrize("B", [1, 3, 33])
@pytest.mark.parametrize("with_inter", [False, True])
def test_mtp_definition_mode(B, with_inter):
    T, pool = 4, B + 2
    x = mtp_inputs(B, T, pool, 4, 8, seed=13)
    pool0 = x[3].clone()
    inter = torch.full((pool, T, 8, D, D), 7.0, device=dev) if with_inter else None
    o, fin = gdn.mtp(*x, None, inter)
    ro, _, ri = ref_mtp(*x, None, inter)
    assert fin is x[3] and torch.equal(x[3], pool0)
    close(o, ro, "output", OUT_L2)
    if with_inter:
        close(inter, ri, "intermediate_states_buffer", F32_L2)


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_mtp_serving_padding(state_dtype):
    B, T, pool = 4, 3, 6
    x = mtp_inputs(B, T, pool, 4, 8, seed=14, state_dtype=state_dtype)
    x[4] = torch.tensor([3, -1, 0, 5], dtype=torch.int32, device=dev)
    inter = torch.zeros(pool, T, 8, D, D, device=dev)
    ro, rfin, ri = ref_mtp(*x, None, inter, serving=True)
    o, fin = gdn.mtp(*x, None, inter, update_pool=True)
    assert fin is x[3]
    assert not o[1].any(), "padding request: zero output rows"
    close(o, ro, "output", OUT_L2)
    close(fin, rfin, "final_state (pool)", F32_L2 if state_dtype == torch.float32 else BF16_L2)
    close(inter, ri, "intermediate_states_buffer", F32_L2)


def test_side_by_side_benchmark_call_forms():
    """The exact call forms the side-by-side benchmark against FLA and FlashInfer uses (positional scale,
    keyword intermediate_states_buffer)."""
    x = decode_inputs(4, 4, 8, seed=15)
    sc = 1.0 / math.sqrt(D)
    o, ns = gdn.decode(*x[:8], sc)
    close(o, ref_decode(*x, sc)[0], "decode", OUT_L2)
    y = prefill_inputs([100, 37, 64, 1], 4, 8, seed=16)
    o, ns = gdn.prefill(*y, sc)
    close(o, ref_prefill(*y, sc)[0], "prefill", OUT_L2)
    z = mtp_inputs(4, 2, 4, 4, 8, seed=17) + [sc, torch.empty(4, 2, 8, D, D, device=dev)]
    o, fin = gdn.mtp(*z[:10], intermediate_states_buffer=z[10])
    close(o, ref_mtp(*z[:10])[0], "mtp", OUT_L2)


# ------------------------------------------------------------------ errors and the CPU path under torch
def test_errors_on_cuda():
    x = decode_inputs(2, 4, 8)
    y = list(x)
    y[1] = x[1].cpu()
    with pytest.raises(ValueError, match="'k'"):
        gdn.decode(*y)
    y = prefill_inputs([3, 4], 4, 8)
    y[8] = y[8].float()
    with pytest.raises(TypeError, match="'cu_seqlens'"):
        gdn.prefill(*y)
    y = list(x)
    y[0] = torch.empty(2, 1, 4, 2 * D, dtype=torch.bfloat16, device=dev)[..., ::2]
    with pytest.raises(ValueError, match="'q'"):
        gdn.decode(*y)


def test_torch_cpu_tensors_use_cpu_backend():
    x = [None if t is None else t.cpu() for t in decode_inputs(3, 4, 8, seed=18)]
    o, ns = gdn.decode(*x)
    assert o.device.type == "cpu"
    ro, rs = ref_decode(*x, None)
    close(o, ro, "output (cpu)", OUT_L2)
    close(ns, rs, "new_state (cpu)", F32_L2)


def test_torch_custom_ops_and_compile():
    import gdn._torch_ops  # noqa: F401  (registers torch.ops.gdn.*)

    x = decode_inputs(3, 4, 8, seed=19)
    o, ns = torch.ops.gdn.decode(*x, None)
    ro, rs = ref_decode(*x, None)
    close(o, ro, "torch.ops.gdn.decode output", OUT_L2)
    close(ns, rs, "torch.ops.gdn.decode new_state", F32_L2)

    def step(q, k, v, s, A, a, dtb, b):
        o, ns = torch.ops.gdn.decode(q, k, v, s, A, a, dtb, b, None)
        return o.float() * 2.0, ns

    o2, ns2 = torch.compile(step, fullgraph=True)(*x)
    close(o2 / 2.0, ro, "compiled output", OUT_L2)
    close(ns2, rs, "compiled new_state", F32_L2)

    y = mtp_inputs(2, 3, 3, 4, 8, seed=20)
    inter = torch.zeros(3, 3, 8, D, D, device=dev)
    o = torch.ops.gdn.mtp(*y, None, inter)
    ro, _, ri = ref_mtp(*y, None, inter)
    close(o, ro, "torch.ops.gdn.mtp output", OUT_L2)
    close(inter, ri, "torch.ops.gdn.mtp intermediate", F32_L2)
