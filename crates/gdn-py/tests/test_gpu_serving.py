"""GPU tests of the serving modes of the `gdn` Python module (skipped unless torch and a CUDA device are available;
run on the device machine by scripts/device_python.sh): precomputed gates, in-kernel q/k norm, K-first states, pools
with padding rules and strided per-layer views, int32 offsets, has_initial_state, spec-decode slots, checkpoints, a
pool call in a CUDA graph, the pool custom ops under torch.compile, q/k/v/output as strided views, fp16 activations
and states, each against a float64 reference of the serving contract. The definition-mode reference, inputs and
graph helpers come from test_gpu.py.
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

from test_gpu import *  # noqa: E402,F401,F403  (reference, inputs, tolerances, graph helpers)


# ------------------------------------------------------------------ serving modes (crates/gdn-core/src/serving.rs)
# Each mode on CUDA tensors against a float64 reference of the serving contract; pool rows no sequence writes
# and checkpoint rows no sequence owns are guards that must keep their exact values.
def raw_gates(A_log, a, dt_bias, b):
    """(log g, beta) in float64 from the raw inputs."""
    return -torch.exp(A_log.double()) * F.softplus(a.double() + dt_bias.double()), torch.sigmoid(b.double())


def l2norm_bf16(x):
    """The in-kernel q/k norm, rounded to bf16 through fp32 as the kernels do."""
    x = x.double()
    return (x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)).float().bfloat16().double()


@torch.no_grad()
def sref(q, k, v, S, logg, beta, norm=False, scale=1.0 / math.sqrt(D)):
    """One sequence: q,k [T,H,D], v [T,HV,D], logg/beta [T,HV] float64, S [HV,V,K] float64 k-last.
    Returns (out [T,HV,D], final state, state after each token [T,HV,V,K])."""
    q, k = (l2norm_bf16(q), l2norm_bf16(k)) if norm else (q.double(), k.double())
    H, HV = q.shape[1], v.shape[1]
    out = torch.zeros(v.shape, dtype=torch.float64, device=dev)
    states = torch.zeros((q.shape[0],) + tuple(S.shape), dtype=torch.float64, device=dev)
    for t in range(q.shape[0]):
        qq, kk = q[t].repeat_interleave(HV // H, 0), k[t].repeat_interleave(HV // H, 0)
        S = torch.exp(logg[t])[:, None, None] * S
        delta = beta[t][:, None] * (v[t].double() - torch.einsum("hvk,hk->hv", S, kk))
        S = S + delta[:, :, None] * kk[:, None, :]
        out[t] = scale * torch.einsum("hvk,hk->hv", S, qq)
        states[t] = S
    return out, S, states


def kf(x):
    """k-last [.., V, K] <-> k-first [.., K, V], dense."""
    return x.transpose(-1, -2).contiguous()


NORM_L2 = 1e-3  # one bf16 ulp of a normalised k element between engines moves a state by ~3e-4


@pytest.mark.parametrize("form", ["g", "alpha", "g_bf16_beta"])
def test_serving_precomputed_gates(form):
    q, k, v, st, A_log, a, dt_bias, b = decode_inputs(33, 4, 8, seed=40)
    logg, beta = raw_gates(A_log, a, dt_bias, b)
    bt = beta.to(torch.bfloat16 if form == "g_bf16_beta" else torch.float32)
    gate = dict(alpha=torch.exp(logg).float()) if form == "alpha" else dict(g=logg.float())
    o, ns = gdn.decode(q, k, v, st, None, None, None, None, beta=bt, **gate)
    lg = torch.log(gate["alpha"].double()) if form == "alpha" else gate["g"].double()
    for n in (0, 17, 32):
        ro, rs, _ = sref(q[n], k[n], v[n], st[n].double(), lg[n], bt[n].double())
        close(o[n], ro, f"decode output {n}", OUT_L2)
        close(ns[n], rs, f"decode new_state {n}", F32_L2)
    x = prefill_inputs([100, 0, 37], 4, 8, seed=41)
    logg, beta = raw_gates(*x[4:8])
    g32, bt = logg.float(), beta.to(bt.dtype)
    o, ns = gdn.prefill(*x[:4], None, None, None, None, x[8], g=g32, beta=bt)
    for n, (s0, s1) in enumerate([(0, 100), (100, 100), (100, 137)]):
        ro, rs, _ = sref(x[0][s0:s1], x[1][s0:s1], x[2][s0:s1], x[3][n].double(), g32[s0:s1].double(),
                         bt[s0:s1].double())
        close(o[s0:s1], ro, f"prefill output {n} (g)", OUT_L2)
        if s1 > s0:
            close(ns[n], rs, f"prefill new_state {n} (g)", PREFILL_STATE_L2)
    assert not ns[1].any()


def test_serving_qk_norm():
    x = decode_inputs(5, 4, 8, seed=42)  # randn q/k
    o, ns = gdn.decode(*x, use_qk_l2norm_in_kernel=True)
    logg, beta = raw_gates(*x[4:8])
    for n in range(5):
        ro, rs, _ = sref(x[0][n], x[1][n], x[2][n], x[3][n].double(), logg[n], beta[n], norm=True)
        close(o[n], ro, f"decode output {n} (qk norm)", OUT_L2)
        close(ns[n], rs, f"decode new_state {n} (qk norm)", NORM_L2)
    g = gen(43)
    T, cu = 230, torch.tensor([0, 30, 230], dtype=torch.int64, device=dev)
    q, k = randn(g, T, 4, D).bfloat16(), randn(g, T, 4, D).bfloat16()
    v = randn(g, T, 8, D).bfloat16()
    A_log, a, dt_bias, b = gates(g, 8, (T,))
    o, ns = gdn.prefill(q, k, v, None, A_log, a, dt_bias, b, cu, use_qk_l2norm_in_kernel=True)
    ro, rs = ref_prefill(l2norm_bf16(q), l2norm_bf16(k), v, None, A_log, a, dt_bias, b, cu, None)
    close(o, ro, "prefill output (qk norm)", OUT_L2)
    close(ns, rs, "prefill new_state (qk norm)", PREFILL_STATE_L2)


def test_serving_k_first():
    x = decode_inputs(9, 4, 8, seed=44)
    ro, rs = ref_decode(*x, None)
    o, ns = gdn.decode(*x[:3], kf(x[3]), *x[4:], state_layout="k-first")
    close(o, ro, "decode output (k-first)", OUT_L2)
    close(kf(ns), rs, "decode new_state (k-first)", F32_L2)
    y = prefill_inputs([64, 3, 130], 4, 8, seed=45)
    ro, rs = ref_prefill(*y, None)
    o, ns = gdn.prefill(*y[:3], kf(y[3]), *y[4:], state_layout="k-first")
    close(o, ro, "prefill output (k-first)", OUT_L2)
    close(kf(ns), rs, "prefill new_state (k-first)", PREFILL_STATE_L2)
    z = mtp_inputs(3, 4, 5, 4, 8, seed=46)
    inter = torch.full((5, 4, 8, D, D), 7.0, device=dev)
    ro, _, ri = ref_mtp(*z, None, inter)
    o, _ = gdn.mtp(*z[:3], kf(z[3]), *z[4:], None, inter, state_layout="k-first")
    close(o, ro, "mtp output (k-first)", OUT_L2)
    close(kf(inter), ri, "mtp intermediate (k-first)", F32_L2)


@pytest.mark.parametrize("pad,idx_dtype,state_dtype", [("negative", torch.int32, torch.float32),
                                                       ("null-slot", torch.int64, torch.float32),
                                                       ("negative", torch.int64, torch.bfloat16)])
def test_serving_decode_pool(pad, idx_dtype, state_dtype):
    B, slots = 40, 64
    q, k, v, _, A_log, a, dt_bias, b = decode_inputs(B, 4, 8, seed=47)
    pool = (0.1 * randn(gen(48), slots, 8, D, D)).to(state_dtype)
    P = -1 if pad == "negative" else 0
    rows = torch.randperm(slots - 1, device=dev, generator=gen(49))[:B] + 1
    rows[3] = rows[11] = P  # two padded requests
    idx = rows.to(idx_dtype)
    before = pool.clone()
    o, ns = gdn.decode(q, k, v, pool, A_log, a, dt_bias, b, state_indices=idx, pad=pad)
    assert ns is pool
    logg, beta = raw_gates(A_log, a, dt_bias, b)
    tol = F32_L2 if state_dtype == torch.float32 else BF16_L2
    for n in (0, 3, 11, 39):
        r = int(rows[n])
        if r == P:
            assert not o[n].any(), "padding request: zero output"
            continue
        ro, rs, _ = sref(q[n], k[n], v[n], before[r].double(), logg[n], beta[n])
        close(o[n], ro, f"output {n}", OUT_L2)
        close(pool[r], rs, f"pool row {r}", tol)
    written = torch.zeros(slots, dtype=torch.bool, device=dev)
    written[rows[rows != P]] = True
    assert torch.equal(pool[~written], before[~written]), "rows no request writes keep their values"


def test_serving_prefill_strided_pool_int32_offsets():
    """sglang-style: a per-layer view of a [slots, layers, HV, V, K] buffer (row stride = 2 states), int32
    cu_seqlens, has_initial_state, -1 padding, a zero-length sequence."""
    lens, slots = [70, 0, 5, 130, 9], 8
    x = prefill_inputs(lens, 4, 8, seed=50)
    buf = 0.1 * randn(gen(51), slots, 2, 8, D, D)
    before = buf.clone()
    pool = buf[:, 1]
    assert not pool.is_contiguous() and pool.stride(0) == 2 * 8 * D * D
    idx = torch.tensor([6, 2, -1, 0, 3], dtype=torch.int32, device=dev)
    flags = torch.tensor([1, 1, 1, 0, 1], dtype=torch.int32, device=dev)
    cu32 = x[8].to(torch.int32)
    o, ns = gdn.prefill(*x[:3], pool, *x[4:8], cu32, state_indices=idx, has_initial_state=flags)
    assert ns is pool
    logg, beta = raw_gates(*x[4:8])
    c = [0] + torch.cumsum(torch.tensor(lens), 0).tolist()
    for n, r in [(0, 6), (3, 0), (4, 3)]:
        s0, s1 = c[n], c[n + 1]
        init = torch.zeros(8, D, D, dtype=torch.float64, device=dev) if n == 3 else before[r, 1].double()
        ro, rs, _ = sref(x[0][s0:s1], x[1][s0:s1], x[2][s0:s1], init, logg[s0:s1], beta[s0:s1])
        close(o[s0:s1], ro, f"output of sequence {n}", OUT_L2)
        close(buf[r, 1], rs, f"pool row {r}", PREFILL_STATE_L2)
    assert not o[c[2]:c[3]].any(), "padded sequence: zero output"
    assert torch.equal(buf[:, 0], before[:, 0]), "the other layer is untouched"
    for r in (1, 2, 4, 5, 7):  # 2: a zero-length sequence's row
        assert torch.equal(buf[r, 1], before[r, 1]), f"pool row {r} untouched"


@pytest.mark.parametrize("pad", ["negative", "null-slot"])
def test_serving_mtp_spec_slots(pad):
    B, T, slots = 4, 3, 16
    q, k, v, _, _, A_log, a, dt_bias, b = mtp_inputs(B, T, slots, 4, 8, seed=52)
    buf = 0.1 * randn(gen(53), slots, 2, 8, D, D)  # [slots, layers, ...]: a strided per-layer view
    pool = buf[:, 1]
    other = buf[:, 0].clone()
    P = -1 if pad == "negative" else 0
    idx = torch.tensor([[2, 5, 7], [P, P, P], [9, 4, P], [11, 12, 13]], dtype=torch.int32, device=dev)
    acc = torch.tensor([2, 1, 1, 3], dtype=torch.int32, device=dev)
    before = pool.clone()
    o, fin = gdn.mtp(q, k, v, pool, idx, A_log, a, dt_bias, b, num_accepted_tokens=acc, pad=pad)
    assert fin is pool
    logg, beta = raw_gates(A_log, a, dt_bias, b)
    written = set()
    for r in (0, 2, 3):
        src = int(idx[r, int(acc[r]) - 1])
        ro, _, states = sref(q[r], k[r], v[r], before[src].double(), logg[r], beta[r])
        close(o[r], ro, f"output of request {r}", OUT_L2)
        for t in range(T):
            if int(idx[r, t]) != P:
                close(pool[int(idx[r, t])], states[t], f"slot [{r}, {t}]", F32_L2)
                written.add(int(idx[r, t]))
    assert not o[1].any()
    rest = sorted(set(range(slots)) - written)
    assert torch.equal(pool[rest], before[rest]) and torch.equal(buf[:, 0], other)


@pytest.mark.parametrize("starts_dtype,state_dtype", [(torch.int32, torch.float32), (torch.int64, torch.bfloat16)])
def test_serving_prefill_checkpoints(starts_dtype, state_dtype):
    lens, every = [130, 64, 10, 0, 200], 64
    x = prefill_inputs(lens, 4, 8, seed=54, state_dtype=state_dtype)
    per = [n // every for n in lens]
    starts = torch.tensor([0] + torch.cumsum(torch.tensor(per), 0).tolist(), dtype=starts_dtype, device=dev)
    ck = torch.full((sum(per) + 1, 8, D, D), 7.0, device=dev)  # f32 checkpoints; one guard row
    o, ns = gdn.prefill(*x, checkpoint_every=every, checkpoint_cu_starts=starts, checkpoints=ck)
    ro, rs = ref_prefill(*x, None)
    close(o, ro, "output (checkpoints)", OUT_L2)
    logg, beta = raw_gates(*x[4:8])
    c = [0] + torch.cumsum(torch.tensor(lens), 0).tolist()
    for n in (0, 1, 4):
        s0, s1 = c[n], c[n + 1]
        _, _, states = sref(x[0][s0:s1], x[1][s0:s1], x[2][s0:s1], x[3][n].double(), logg[s0:s1], beta[s0:s1])
        for j in range(per[n]):
            close(ck[int(starts[n]) + j], states[(j + 1) * every - 1], f"checkpoint {j} of sequence {n}",
                  PREFILL_STATE_L2 if state_dtype == torch.float32 else BF16_L2)
    assert (ck[-1] == 7.0).all(), "a row no sequence owns keeps its values"


def test_serving_decode_pool_graph_capture():
    """A vLLM-style decode step (pool, null-slot padding, in-kernel norm) captured in a CUDA graph, replayed
    with other indices."""
    B, slots = 16, 40
    x = decode_inputs(B, 4, 8, seed=55)
    pool = 0.1 * randn(gen(56), slots, 8, D, D)
    idx = torch.arange(1, B + 1, dtype=torch.int32, device=dev)
    out = torch.empty(B, 1, 8, D, dtype=torch.bfloat16, device=dev)
    kw = dict(output=out, state_indices=idx, pad="null-slot", use_qk_l2norm_in_kernel=True)
    graph = captured(lambda: gdn.decode(x[0], x[1], x[2], pool, *x[4:], **kw))
    new_idx = torch.randperm(slots - 1, device=dev, generator=gen(57))[:B].to(torch.int32) + 1
    new_idx[5] = 0
    before = pool.clone()
    replay_with(graph, [idx], [new_idx], poisoned=(out,))
    logg, beta = raw_gates(*x[4:8])
    for n in (0, 5, 15):
        r = int(new_idx[n])
        if r == 0:
            assert not out[n].any()
            continue
        ro, rs, _ = sref(x[0][n], x[1][n], x[2][n], before[r].double(), logg[n], beta[n], norm=True)
        close(out[n], ro, f"output {n} (graph replay)", OUT_L2)
        close(pool[r], rs, f"pool row {r} (graph replay)", NORM_L2)


def test_serving_errors_on_cuda():
    x = decode_inputs(2, 4, 8, seed=58)
    pool = torch.zeros(4, 8, D, D, device=dev)
    idx = torch.tensor([1, 2], dtype=torch.int32, device=dev)
    with pytest.raises(TypeError, match="'has_initial_state'.*int32"):
        gdn.decode(*x[:3], pool, *x[4:], state_indices=idx, has_initial_state=torch.ones(2, dtype=torch.bool,
                                                                                              device=dev))
    with pytest.raises(ValueError, match="'state_indices'.*one device"):
        gdn.decode(*x[:3], pool, *x[4:], state_indices=idx.cpu())
    qt = x[0].transpose(2, 3).contiguous().transpose(2, 3)
    with pytest.raises(ValueError, match=r"'q'.*contiguous\(\)"):
        gdn.decode(qt, *x[1:])
    with pytest.raises(ValueError, match="'alpha'"):
        logg, beta = raw_gates(*x[4:8])
        gdn.decode(*x[:4], None, None, None, None, g=logg.float(), alpha=logg.exp().float(), beta=beta.float())
    with pytest.raises(ValueError, match="'state'"):  # a strided state needs state_indices
        gdn.decode(*x[:3], torch.zeros(2, 2, 8, D, D, device=dev)[:, 0], *x[4:])
    y = prefill_inputs([70], 4, 8, seed=59)
    with pytest.raises(ValueError, match="'checkpoint_every'"):
        gdn.prefill(*y, checkpoint_every=96, checkpoint_cu_starts=torch.tensor([0, 1], device=dev),
                    checkpoints=torch.zeros(1, 8, D, D, device=dev))


def test_serving_torch_ops():
    import gdn._torch_ops  # noqa: F401

    x = decode_inputs(3, 4, 8, seed=60, raw=False)
    logg, beta = raw_gates(*x[4:8])
    o, ns = torch.ops.gdn.decode(*x[:4], None, None, None, None, None, g=logg.float(), beta=beta.float())
    ro, rs = ref_decode(*x, None)
    close(o, ro, "torch.ops.gdn.decode (g, beta)", OUT_L2)
    close(ns, rs, "torch.ops.gdn.decode new_state (g, beta)", F32_L2)
    pool = 0.1 * randn(gen(61), 6, 8, D, D)
    before = pool.clone()
    idx = torch.tensor([4, 1, 2], dtype=torch.int32, device=dev)
    step = torch.compile(lambda *t: torch.ops.gdn.decode_pool(*t), fullgraph=True)
    o = step(x[0], x[1], x[2], pool, idx, *x[4:])
    ro, rs = ref_decode(*x[:3], before[idx.long()], *x[4:], None)
    close(o, ro, "decode_pool output (compiled)", OUT_L2)
    close(pool[idx.long()], rs, "decode_pool rows (compiled, in place)", F32_L2)
    assert torch.equal(pool[[0, 3, 5]], before[[0, 3, 5]])


# ------------------------------------------------------------------ q, k, v and output as strided views
# vLLM splits one fused projection mixed_qkv [T, (2H + HV)·D] into q, k, v views and passes them as they are;
# gdn reads the rows at the views' strides (no copy). The gaps hold NaN (a read outside the rows poisons the
# output) and the output views' gaps a guard value (a write outside the rows is seen).
def fused_views(q, k, v, pad=8):
    """q, k, v copied into one NaN-filled fused buffer (per token [q heads | k heads | v heads], then `pad`
    spare elements) and returned as views of it."""
    lead, H, HV = q.shape[:-2], q.shape[-2], v.shape[-2]
    mixed = torch.full(lead + ((2 * H + HV) * D + pad,), float("nan"), dtype=torch.bfloat16, device=dev)
    views = []
    for x, start, n in ((q, 0, H), (k, H * D, H), (v, 2 * H * D, HV)):
        part = mixed[..., start:start + n * D]
        part.copy_(x.reshape(lead + (n * D,)))
        views.append(part.view(lead + (n, D)))
        assert not views[-1].is_contiguous() and views[-1].data_ptr() % 16 == 0
    return views


def out_view(shape, extra_heads=1):
    """A [.., HV, D] output view of a 7.0-filled buffer with `extra_heads` spare rows after each token's."""
    buf = torch.full(tuple(shape[:-2]) + (shape[-2] + extra_heads, D), 7.0, dtype=torch.bfloat16, device=dev)
    return buf[..., :shape[-2], :], buf


def guards_kept(buf, HV):
    assert (buf[..., HV:, :] == 7.0).all(), "the gaps of the output view keep their values"


@pytest.mark.parametrize("H,HV", [(4, 8), (16, 32)])
def test_strided_views_decode(H, HV):
    x = decode_inputs(33, H, HV, seed=70)
    ro, rs = ref_decode(*x, None)
    q, k, v = fused_views(*x[:3])
    out, buf = out_view((33, 1, HV, D))
    o, ns = gdn.decode(q, k, v, *x[3:], output=out)
    assert o is out
    close(out, ro, "output (fused views)", OUT_L2)
    close(ns, rs, "new_state (fused views)", F32_L2)
    guards_kept(buf, HV)


@pytest.mark.parametrize("lens", [[70, 0, 130], [5, 700, 64], [1000]])
def test_strided_views_prefill(lens):
    x = prefill_inputs(lens, 4, 8, seed=71)
    ro, rs = ref_prefill(*x, None)
    q, k, v = fused_views(*x[:3])
    out, buf = out_view((sum(lens), 8, D), extra_heads=2)
    o, ns = gdn.prefill(q, k, v, *x[3:], output=out, max_seqlen=max(lens))
    close(out, ro, "output (fused views)", OUT_L2)
    close(ns, rs, "new_state (fused views)", PREFILL_STATE_L2)
    guards_kept(buf, 8)
    o2, ns2 = gdn.prefill(q, k, v, *x[3:])  # the device plan (no length hint), a dense output
    close(o2, ro, "output (fused views, device plan)", OUT_L2)


def test_strided_views_mtp_and_head_major_output():
    B, T, pool = 4, 3, 6
    x = mtp_inputs(B, T, pool, 4, 8, seed=72)
    inter = torch.zeros(pool, T, 8, D, D, device=dev)
    ro, rfin, ri = ref_mtp(*x, None, inter, serving=True)
    q, k, v = fused_views(*x[:3])
    assert q.stride(0) == T * q.stride(1)  # batch stride = T token strides
    buf = torch.full((8, B * T + 1, D), 7.0, dtype=torch.bfloat16, device=dev)  # head-major [HV, B·T + 1, D]
    out = buf[:, :B * T].view(8, B, T, D).permute(1, 2, 0, 3)
    o, fin = gdn.mtp(q, k, v, *x[3:], None, inter, output=out, update_pool=True)
    close(out, ro, "output (fused views, head-major output)", OUT_L2)
    close(fin, rfin, "final_state (fused views)", F32_L2)
    close(inter, ri, "intermediate (fused views)", F32_L2)
    assert (buf[:, B * T] == 7.0).all()


def test_strided_views_vllm_serving_calls():
    """vLLM's calls on mixed_qkv views: prefill with a null-slot pool, has_initial_state, g / beta and in-kernel
    q/k norm; a decode step with the pool captured in a CUDA graph (the strided path allocates nothing)."""
    lens, slots = [70, 0, 5, 130], 8
    x = prefill_inputs(lens, 4, 8, seed=73)
    pool = 0.1 * randn(gen(74), slots, 8, D, D)
    before = pool.clone()
    idx = torch.tensor([6, 2, 0, 3], dtype=torch.int32, device=dev)
    flags = torch.tensor([1, 1, 1, 0], dtype=torch.int32, device=dev)
    logg, beta = raw_gates(*x[4:8])
    q, k, v = fused_views(*x[:3])
    out, buf = out_view((sum(lens), 8, D))
    gdn.prefill(q, k, v, pool, cu_seqlens=x[8].to(torch.int32), g=logg.float(), beta=beta.float(), output=out,
                state_indices=idx, pad="null-slot", has_initial_state=flags, use_qk_l2norm_in_kernel=True,
                max_seqlen=130)
    c = [0] + torch.cumsum(torch.tensor(lens), 0).tolist()
    for n, r in [(0, 6), (3, 3)]:
        s0, s1 = c[n], c[n + 1]
        init = torch.zeros(8, D, D, dtype=torch.float64, device=dev) if n == 3 else before[r].double()
        ro, rs, _ = sref(x[0][s0:s1], x[1][s0:s1], x[2][s0:s1], init, logg[s0:s1], beta[s0:s1], norm=True)
        close(out[s0:s1], ro, f"output of sequence {n}", OUT_L2)
        close(pool[r], rs, f"pool row {r}", PREFILL_STATE_L2)
    assert not out[c[2]:c[3]].any(), "padded sequence: zero output"
    guards_kept(buf, 8)

    B = 16
    y = decode_inputs(B, 4, 8, seed=75)
    pool = 0.1 * randn(gen(77), B + 1, 8, D, D)  # slot 0 is the null slot; rows 1..B hold the requests
    q, k, v = fused_views(*y[:3])
    didx = torch.arange(1, B + 1, dtype=torch.int32, device=dev)
    out, buf = out_view((B, 1, 8, D))
    kw = dict(output=out, state_indices=didx, pad="null-slot", use_qk_l2norm_in_kernel=True)
    graph = captured(lambda: gdn.decode(q, k, v, pool, *y[4:], **kw))
    before = pool.clone()
    replay_with(graph, [], [])
    lg, bt = raw_gates(*y[4:8])
    for n in (0, 15):
        r = int(didx[n])
        ro, rs, _ = sref(y[0][n], y[1][n], y[2][n], before[r].double(), lg[n], bt[n], norm=True)
        close(out[n], ro, f"decode output {n} (graph replay, views)", OUT_L2)
        close(pool[r], rs, f"decode pool row {r} (graph replay, views)", NORM_L2)
    guards_kept(buf, 8)


def test_strided_views_torch_ops():
    import gdn._torch_ops  # noqa: F401

    x = prefill_inputs([64, 37], 4, 8, seed=76)
    ro, rs = ref_prefill(*x, None)
    q, k, v = fused_views(*x[:3])
    o, ns = torch.ops.gdn.prefill(q, k, v, *x[3:], None)
    close(o, ro, "torch.ops.gdn.prefill output (views)", OUT_L2)
    close(ns, rs, "torch.ops.gdn.prefill new_state (views)", PREFILL_STATE_L2)


def test_strided_view_errors_on_cuda():
    x = decode_inputs(2, 4, 8, seed=77)
    q, k, v = fused_views(*x[:3], pad=4)  # token stride (2H + HV)·D + 4: rows not 16-byte aligned
    with pytest.raises(ValueError, match="'q': token stride 2052 elements breaks 16-byte alignment"):
        gdn.decode(q, k, v, *x[3:])
    q, k, v = fused_views(*x[:3])
    base = torch.zeros(4096, dtype=torch.bfloat16, device=dev)
    with pytest.raises(ValueError, match="'output': rows overlap"):
        gdn.decode(q, k, v, *x[3:], output=base.as_strided((2, 1, 8, D), (64, 64, D, 1)))
    z = mtp_inputs(3, 2, 4, 4, 8, seed=78)
    wide = torch.zeros(3, 3, 4, D, dtype=torch.bfloat16, device=dev)
    with pytest.raises(ValueError, match="'q': batch stride"):
        gdn.mtp(wide[:, :2], *z[1:])


# ------------------------------------------------------------------ fp16 activations and states
# q, k, v, a, b (and so the output, and a 16-bit beta) in fp16, states in fp16 (math in fp32): the kernels take
# them in their serving builds (SV_ACT_F16, SV_STATE_F16; an fp16 state runs on the bf16-state kernels, which
# convert at load and store). fp16 activations are rounded to bf16 inside the kernels (the operand type of every
# product, and of the decode kernels' loads), so their outputs are held to the bf16 bounds; an fp16 state keeps its
# precision (math in fp32).
F16_OUT_L2 = OUT_L2  # fp16 activations: bf16-rounded inputs, fp16-rounded output
F16_STATE_L2 = 2e-3  # an fp16 state's rounding (bf16 activations)
F16_ACT_STATE_L2 = PREFILL_STATE_L2  # a state updated from bf16-rounded fp16 inputs


def to_f16(x, act=True, state=False):
    """Inputs (lists of decode_inputs / prefill_inputs / mtp_inputs) with q, k, v, a, b redrawn in fp16 when
    `act` and the state / pool in fp16 when `state`; redrawn from the bf16 values plus fp16-resolution noise so
    that the low mantissa bits are used."""
    y = list(x)
    g = gen(99)
    for i, t in enumerate(y):
        if not torch.is_tensor(t):
            continue
        if t.dtype == torch.bfloat16 and act:
            n = t.float() * (1 + 2e-3 * randn(g, *t.shape))
            if i < 2 and (t.float().norm(dim=-1) - 1).abs().max() < 1e-2:
                n = F.normalize(n, dim=-1)  # q, k were normalised
            y[i] = n.half()
        elif t.dim() >= 4 and t.shape[-1] == D and t.shape[-2] == D and state:
            y[i] = t.half()
    return y


@pytest.mark.parametrize("act,state", [(True, False), (False, True), (True, True)])
def test_fp16_decode_mtp(act, state):
    x = to_f16(decode_inputs(33, 4, 8, seed=90), act, state)
    o, ns = gdn.decode(*x)
    assert o.dtype == (torch.float16 if act else torch.bfloat16)
    assert ns.dtype == (torch.float16 if state else torch.float32)
    ro, rs = ref_decode(*x, None)
    close(o, ro, "decode output", F16_OUT_L2 if act else OUT_L2)
    close(ns, rs, "decode new_state", F16_ACT_STATE_L2 if act else F16_STATE_L2 if state else F32_L2)
    B, T, pool = 5, 4, 8
    z = to_f16(mtp_inputs(B, T, pool, 4, 8, seed=91), act, state)
    z[4] = torch.tensor([3, -1, 0, 7, 5], dtype=torch.int32, device=dev)
    inter = torch.zeros(pool, T, 8, D, D, device=dev)
    ro, rfin, ri = ref_mtp(*z, None, inter, serving=True)
    o, fin = gdn.mtp(*z, None, inter, update_pool=True)
    assert fin is z[3] and not o[1].any()
    close(o, ro, "mtp output", F16_OUT_L2 if act else OUT_L2)
    close(fin, rfin, "mtp pool", F16_ACT_STATE_L2 if act else F16_STATE_L2 if state else F32_L2)
    close(inter, ri, "mtp intermediate (fp32)", F16_ACT_STATE_L2 if act else F32_L2)


# Each prefill plan: fused (short sequences), chunk64 (odd HV), cp (few long sequences).
@pytest.mark.parametrize("act,state", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("lens,H,HV", [([100, 0, 37, 64], 4, 8), ([700, 0, 900], 1, 3), ([3000, 5000], 1, 2)])
def test_fp16_prefill_plans(act, state, lens, H, HV):
    x = to_f16(prefill_inputs(lens, H, HV, seed=92), act, state)
    o, ns = gdn.prefill(*x)
    assert o.dtype == (torch.float16 if act else torch.bfloat16)
    assert ns.dtype == (torch.float16 if state else torch.float32)
    ro, rs = ref_prefill(*x, None)
    close(o, ro, "prefill output", OUT_L2)
    close(ns, rs, "prefill new_state", PREFILL_STATE_L2)


def test_fp16_pool_k_first_gates_and_checkpoints():
    """fp16 everywhere with a pool: k-first, log g with an fp16 beta, -1 padding, fp16 and f32 checkpoints."""
    lens, every, slots = [130, 64, 10, 0, 200], 64, 9
    x = to_f16(prefill_inputs(lens, 4, 8, seed=93), True, False)
    logg, beta = raw_gates(*x[4:8])
    g32, bt = logg.float(), beta.half()
    pool = (0.1 * randn(gen(94), slots, 8, D, D)).half()
    idx = torch.tensor([6, 1, -1, 2, 5], dtype=torch.int64, device=dev)
    per = [n // every for n in lens]
    starts = torch.tensor([0] + torch.cumsum(torch.tensor(per), 0).tolist(), dtype=torch.int64, device=dev)
    c = [0] + torch.cumsum(torch.tensor(lens), 0).tolist()
    for ck_dtype in (torch.float16, torch.float32):
        pool_kf = kf(pool)
        before = pool_kf.clone()
        ck = torch.full((sum(per) + 1, 8, D, D), 7.0, dtype=ck_dtype, device=dev)  # k-first; one guard row
        o, ns = gdn.prefill(*x[:3], pool_kf, None, None, None, None, x[8], g=g32, beta=bt, state_indices=idx,
                            state_layout="k-first", checkpoint_every=every, checkpoint_cu_starts=starts,
                            checkpoints=ck)
        assert ns is pool_kf and o.dtype == torch.float16
        for n, r in enumerate(idx.tolist()):
            s0, s1 = c[n], c[n + 1]
            if r < 0:
                assert not o[s0:s1].any()
                continue
            if s1 == s0:
                continue
            ro, rs, states = sref(x[0][s0:s1], x[1][s0:s1], x[2][s0:s1], kf(before[r]).double(),
                                  g32[s0:s1].double(), bt[s0:s1].double())
            close(o[s0:s1], ro, f"output {n}", OUT_L2)
            close(kf(pool_kf[r]), rs, f"pool row {r}", PREFILL_STATE_L2)
            for j in range(per[n]):
                close(kf(ck[int(starts[n]) + j]), states[(j + 1) * every - 1],
                      f"{ck_dtype} checkpoint {j} of sequence {n}", PREFILL_STATE_L2)
        assert torch.equal(pool_kf[[0, 2, 3, 4, 7, 8]], before[[0, 2, 3, 4, 7, 8]])
        assert (ck[-1] == 7.0).all(), "a row no sequence owns keeps its values"


def test_fp16_graph_capture_and_torch_ops():
    import gdn._torch_ops  # noqa: F401

    B = 16
    x = to_f16(decode_inputs(B, 4, 8, seed=95), True, True)
    out = torch.empty(B, 1, 8, D, dtype=torch.float16, device=dev)
    ns = torch.empty(B, 8, D, D, dtype=torch.float16, device=dev)
    graph = captured(lambda: gdn.decode(*x, output=out, new_state=ns))
    replay_with(graph, [], [], poisoned=(out, ns))
    ro, rs = ref_decode(*x, None)
    close(out, ro, "decode output (fp16, graph replay)", F16_OUT_L2)
    close(ns, rs, "decode new_state (fp16, graph replay)", F16_ACT_STATE_L2)
    o, s = torch.ops.gdn.decode(*x, None)
    assert o.dtype == torch.float16 and s.dtype == torch.float16
    close(o, ro, "torch.ops.gdn.decode output (fp16)", F16_OUT_L2)


def test_fp16_errors_on_cuda():
    x = to_f16(decode_inputs(2, 4, 8, seed=96), True, True)
    for i, name in [(1, "k"), (2, "v"), (5, "a"), (7, "b")]:
        y = list(x)
        y[i] = y[i].bfloat16()
        with pytest.raises(TypeError, match=f"'{name}'.*float16"):
            gdn.decode(*y)
    logg, beta = raw_gates(*x[4:8])
    with pytest.raises(TypeError, match="'beta'"):
        gdn.decode(*x[:4], None, None, None, None, g=logg.float(), beta=beta.bfloat16())
    with pytest.raises(TypeError, match="'output'"):
        gdn.decode(*x, output=torch.empty(2, 1, 8, D, dtype=torch.bfloat16, device=dev))
    with pytest.raises(TypeError, match="'new_state'"):
        gdn.decode(*x, new_state=torch.empty(2, 8, D, D, dtype=torch.bfloat16, device=dev))
    y = to_f16(prefill_inputs([64], 4, 8, seed=97), True, True)
    with pytest.raises(TypeError, match="'checkpoints'"):
        gdn.prefill(*y, checkpoint_every=64, checkpoint_cu_starts=torch.tensor([0, 1], device=dev),
                    checkpoints=torch.zeros(1, 8, D, D, dtype=torch.bfloat16, device=dev))
