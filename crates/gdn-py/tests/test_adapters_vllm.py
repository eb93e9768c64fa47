"""gdn.vllm on torch CPU tensors (gdn's CPU backend) against a float64 torch reference of the recurrence written
here from vLLM's kernel semantics (vllm/third_party/flash_linear_attention/ops at vLLM 0.33.0): pool gather and
scatter, slot 0 / negative slots as padding, spec-decode slots with accepted counts, per-token state buffers,
row-strided pool views, q/k/v as views of vLLM's mixed_qkv, and the errors of what gdn does not run.
vLLM itself is not imported."""

import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import gdn  # noqa: E402
from gdn import vllm as gv  # noqa: E402

H, HV, D = 2, 4, 128
BF = torch.bfloat16


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(g, *shape, scale=1.0, dtype=torch.float32):
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def mixed(g, n, pad_cols=16, dtype=BF):
    """vLLM's fused projection after the conv: [n, 2*H*D + HV*D] per token [q heads | k heads | v heads], here a
    column slice of a wider buffer (row stride > width) so that every view below is a real strided view."""
    w = 2 * H * D + HV * D
    buf = randn(g, n, w + pad_cols, dtype=dtype)
    return buf[:, :w]


def split(mq, lead):
    """q, k, v views of mixed_qkv shaped lead + [heads, D] (no copy)."""
    q, k, v = torch.split(mq, [H * D, H * D, HV * D], dim=-1)
    return q.view(*lead, H, D), k.view(*lead, H, D), v.view(*lead, HV, D)


def raw_gates(g, n, dtype=BF):
    a = randn(g, n, HV, dtype=dtype)
    b = randn(g, n, HV, dtype=dtype)
    A_log = randn(g, HV, scale=0.5)
    dt_bias = randn(g, HV, scale=0.5)
    return A_log, a, dt_bias, b


def gates_from_raw(A_log, a, dt_bias, b):
    x = a.double() + dt_bias.double()
    return -torch.exp(A_log.double()) * F.softplus(x), torch.sigmoid(b.double())


def ref_seq(state, q, k, v, g, beta, scale, l2norm):
    """One sequence in float64. state [HV, V, K] (None = zeros); q, k [T, H, K]; v [T, HV, V]; g (log decay),
    beta [T, HV]. Returns (out [T, HV, V], states after each token [T, HV, V, K])."""
    T = q.shape[0]
    rep = HV // H
    S = torch.zeros(HV, D, D, dtype=torch.float64) if state is None else state.double().clone()
    outs, states = [], []
    for t in range(T):
        qt, kt = q[t].double(), k[t].double()
        if l2norm:
            qt = qt / torch.sqrt((qt * qt).sum(-1, keepdim=True) + 1e-6)
            kt = kt / torch.sqrt((kt * kt).sum(-1, keepdim=True) + 1e-6)
        qh, kh = qt.repeat_interleave(rep, 0), kt.repeat_interleave(rep, 0)
        S = S * torch.exp(g[t].double())[:, None, None]
        u = torch.einsum("hvk,hk->hv", S, kh)
        delta = beta[t].double()[:, None] * (v[t].double() - u)
        S = S + delta[:, :, None] * kh[:, None, :]
        outs.append(scale * torch.einsum("hvk,hk->hv", S, qh))
        states.append(S.clone())
    return torch.stack(outs), torch.stack(states)


def close(x, ref, tol=2e-2, what=""):
    x = x.double()
    err = (x - ref).abs()
    bound = tol + tol * ref.abs()
    assert torch.isfinite(x).all(), f"{what}: non-finite values"
    assert bool((err <= bound).all()), f"{what}: max err {err.max().item():.3e} (worst at {err.argmax().item()})"


SCALE = D ** -0.5


# ---- fused_recurrent_gated_delta_rule_packed_decode -----------------------------------------------------

@pytest.mark.parametrize("state_dtype,act", [(torch.float32, BF), (torch.bfloat16, BF),
                                             (torch.float32, torch.float16), (torch.float16, torch.float16)])
def test_packed_decode_pool_view_padding(state_dtype, act):
    g = gen(1)
    B, slots, layers, layer = 5, 9, 3, 1
    mq = mixed(g, B, dtype=act)
    A_log, a, dt_bias, b = raw_gates(g, B, dtype=act)
    dt_bias = dt_bias.to(act)  # vLLM keeps dt_bias in the model dtype
    # the pool is one layer's view of a [slots, layers, HV, V, K] buffer: its rows are `layers` states apart
    buf = randn(g, slots, layers, HV, D, D, scale=0.1, dtype=state_dtype)
    pool = buf[:, layer]
    before = buf.clone()
    idx = torch.tensor([3, 0, 7, 1, -1], dtype=torch.int32)  # 0 (NULL_BLOCK_ID) and -1 are padding
    out = torch.full((B, 1, HV, D), 7.0, dtype=act)
    o, st = gv.fused_recurrent_gated_delta_rule_packed_decode(
        mixed_qkv=mq, a=a, b=b, A_log=A_log, dt_bias=dt_bias, scale=SCALE, initial_state=pool, out=out,
        ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    assert o is out and st is pool
    q, k, v = split(mq, (B, 1))
    gl, beta = gates_from_raw(A_log, a, dt_bias, b)
    tol = 2e-2 if state_dtype is torch.float32 else 4e-2
    for n in range(B):
        r = int(idx[n])
        if r <= 0:
            assert bool((out[n] == 0).all()), "padded request's output row must be zero"
            continue
        ro, rs = ref_seq(before[r, layer], q[n], k[n], v[n], gl[n:n + 1], beta[n:n + 1], SCALE, True)
        close(out[n], ro, what=f"out[{n}]")
        close(buf[r, layer], rs[-1], tol=tol, what=f"pool row {r}")
    touched = {int(r) for r in idx if r > 0}
    for r in range(slots):
        for lay in range(layers):
            if lay == layer and r in touched:
                continue
            assert torch.equal(buf[r, lay], before[r, lay]), f"row {r} of layer {lay} must be untouched"


def test_packed_decode_errors():
    g = gen(2)
    B = 2
    mq = mixed(g, B)
    A_log, a, dt_bias, b = raw_gates(g, B)
    pool = torch.zeros(4, HV, D, D)
    idx = torch.tensor([1, 2], dtype=torch.int32)
    out = torch.empty(B, 1, HV, D, dtype=BF)
    kw = dict(a=a, b=b, A_log=A_log, dt_bias=dt_bias, scale=SCALE, initial_state=pool, out=out,
              ssm_state_indices=idx)
    with pytest.raises(NotImplementedError, match="float32"):
        gv.fused_recurrent_gated_delta_rule_packed_decode(mixed_qkv=mq.float(), **kw)
    with pytest.raises(NotImplementedError, match="float64"):
        gv.fused_recurrent_gated_delta_rule_packed_decode(mixed_qkv=mq, **{**kw, "initial_state": pool.double()})
    with pytest.raises(ValueError, match="out"):
        gv.fused_recurrent_gated_delta_rule_packed_decode(mixed_qkv=mq, **{**kw, "out": out[:1]})
    with pytest.raises(ValueError, match="ssm_state_indices"):
        gv.fused_recurrent_gated_delta_rule_packed_decode(mixed_qkv=mq, **{**kw, "ssm_state_indices": idx[None]})
    with pytest.raises(NotImplementedError, match="scale=0"):
        gv.fused_recurrent_gated_delta_rule_packed_decode(mixed_qkv=mq, **{**kw, "scale": 0.0})
    assert bool((pool == 0).all()), "a refused call writes nothing"


# ---- fused_sigmoid_gating_delta_rule_update / fused_recurrent_gated_delta_rule: decode ------------------

def _pool(g, slots, dtype=torch.float32):
    return randn(g, slots, HV, D, D, scale=0.1, dtype=dtype)


@pytest.mark.parametrize("kind", ["sigmoid", "recurrent"])
def test_decode_varlen_1d_slots(kind):
    """vLLM's non-spec decode: q/k/v [1, L, H, D] views of mixed_qkv, cu_seqlens 0..N int32, 1-D slots with
    NULL_BLOCK_ID padding at the back, more tokens than sequences (CUDA-graph padding)."""
    g = gen(3)
    N, L = 4, 6
    mq = mixed(g, L)
    q, k, v = split(mq, (1, L))
    A_log, a, dt_bias, b = raw_gates(g, L)
    pool = _pool(g, 8)
    before = pool.clone()
    idx = torch.tensor([5, 2, 6, 0, 3, 3], dtype=torch.int32)  # [:N] used; the last sequence is padding
    cu = torch.arange(N + 1, dtype=torch.int32)
    gl, beta = gates_from_raw(A_log, a, dt_bias, b)
    if kind == "sigmoid":
        o, st = gv.fused_sigmoid_gating_delta_rule_update(
            A_log=A_log, a=a, b=b, dt_bias=dt_bias, q=q, k=k, v=v, initial_state=pool, inplace_final_state=True,
            cu_seqlens=cu, ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    else:
        o, st = gv.fused_recurrent_gated_delta_rule(
            q=q, k=k, v=v, g=gl.float()[None], beta=beta.float()[None], initial_state=pool,
            inplace_final_state=True, cu_seqlens=cu, ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    assert st is pool and o.shape == (1, L, HV, D) and o.dtype == BF
    for n in range(N):
        r = int(idx[n])
        if r <= 0:
            assert bool((o[0, n] == 0).all())
            continue
        ro, rs = ref_seq(before[r], q[0, n:n + 1], k[0, n:n + 1], v[0, n:n + 1], gl[n:n + 1], beta[n:n + 1],
                         SCALE, True)
        close(o[0, n], ro[0], what=f"o[{n}]")
        close(pool[r], rs[-1], what=f"pool[{r}]")
    assert bool((o[0, N:] == 0).all()), "tokens past cu_seqlens[-1] are zero"
    for r in range(8):
        if r not in {5, 2, 6}:
            assert torch.equal(pool[r], before[r])


def test_decode_non_varlen_with_scale():
    """[B, 1, H, D] without cu_seqlens, log g / beta, explicit scale, no in-kernel norm."""
    g = gen(4)
    B = 3
    q = F.normalize(randn(g, B, 1, H, D), dim=-1).to(BF)
    k = F.normalize(randn(g, B, 1, H, D), dim=-1).to(BF)
    v = randn(g, B, 1, HV, D, dtype=BF)
    gl = -torch.rand(B, 1, HV, generator=g)
    beta = torch.rand(B, 1, HV, generator=g).to(BF)
    pool = _pool(g, 5)
    before = pool.clone()
    idx = torch.tensor([4, 1, 2], dtype=torch.int64)
    o, st = gv.fused_recurrent_gated_delta_rule(q, k, v, gl, beta, scale=0.05, initial_state=pool,
                                                ssm_state_indices=idx)
    for n in range(B):
        ro, rs = ref_seq(before[int(idx[n])], q[n], k[n], v[n], gl[n].double(), beta[n].double(), 0.05, False)
        close(o[n], ro, what=f"o[{n}]")
        close(pool[int(idx[n])], rs[-1], what="pool")


# ---- spec-decode verify: 2-D slots with num_accepted_tokens ----------------------------------------------

@pytest.mark.parametrize("kind", ["sigmoid", "recurrent"])
@pytest.mark.parametrize("with_acc", [True, False])
def test_spec_slots(kind, with_acc):
    """vLLM's spec path: slots [R, S] (R >= N rows, the tail NULL_BLOCK_ID), num_accepted_tokens, uniform S tokens
    per request, the last request padding (CUDA-graph padding: zero-length, slots all 0)."""
    g = gen(5 + with_acc)
    S, N = 3, 4  # 5 slot rows for 4 sequences
    L = N * S
    mq = mixed(g, L)
    q, k, v = split(mq, (1, L))
    A_log, a, dt_bias, b = raw_gates(g, L)
    gl, beta = gates_from_raw(A_log, a, dt_bias, b)
    slots = 24
    pool = _pool(g, slots)
    before = pool.clone()
    idx = torch.tensor([[3, 9, 11], [4, 5, 6], [20, 21, 22], [0, 0, 0], [0, 0, 0]], dtype=torch.int32)
    acc = torch.tensor([2, 3, 1, 1, 1], dtype=torch.int32)
    cu = torch.tensor([0, 3, 6, 9, 9], dtype=torch.int32)  # the padded request has no tokens
    kw = dict(initial_state=pool, inplace_final_state=True, cu_seqlens=cu, ssm_state_indices=idx,
              num_accepted_tokens=acc if with_acc else None, use_qk_l2norm_in_kernel=True)
    if kind == "sigmoid":
        o, st = gv.fused_sigmoid_gating_delta_rule_update(A_log=A_log, a=a, b=b, dt_bias=dt_bias, q=q, k=k, v=v,
                                                          **kw)
    else:
        o, st = gv.fused_recurrent_gated_delta_rule(q, k, v, gl.float()[None], beta.float()[None], **kw)
    assert st is pool
    written = set()
    for n in range(N):
        if int(idx[n, 0]) <= 0:
            assert bool((o[0, n * S:(n + 1) * S] == 0).all())
            continue
        src = int(idx[n, int(acc[n]) - 1]) if with_acc else int(idx[n, 0])
        sl = slice(n * S, (n + 1) * S)
        ro, rs = ref_seq(before[src], q[0, sl], k[0, sl], v[0, sl], gl[sl], beta[sl], SCALE, True)
        close(o[0, sl], ro, what=f"o of request {n}")
        for t in range(S):
            r = int(idx[n, t])
            close(pool[r], rs[t], what=f"slot [{n}, {t}]")
            written.add(r)
    for r in range(slots):
        if r not in written:
            assert torch.equal(pool[r], before[r]), f"slot {r} must be untouched"


def test_spec_slots_non_varlen_noncontiguous_table():
    """[B, T, ..] without cu_seqlens; the slots are columns of a wider block table (a strided view)."""
    g = gen(7)
    B, T = 2, 4
    q = randn(g, B, T, H, D, dtype=BF)
    k = randn(g, B, T, H, D, dtype=BF)
    v = randn(g, B, T, HV, D, dtype=BF)
    A_log, a, dt_bias, b = raw_gates(g, B * T)
    a, b = a.view(B, T, HV), b.view(B, T, HV)
    gl, beta = gates_from_raw(A_log, a, dt_bias, b)
    pool = _pool(g, 12)
    before = pool.clone()
    table = torch.tensor([[1, 2, 3, 4, 99, 99], [5, 6, 7, 8, 99, 99]], dtype=torch.int32)
    idx = table[:, :T]
    acc = torch.tensor([4, 1], dtype=torch.int32)
    o, st = gv.fused_sigmoid_gating_delta_rule_update(A_log, a, b, dt_bias, q, k, v, initial_state=pool,
                                                      ssm_state_indices=idx, num_accepted_tokens=acc,
                                                      use_qk_l2norm_in_kernel=True)
    for n in range(B):
        ro, rs = ref_seq(before[int(idx[n, int(acc[n]) - 1])], q[n], k[n], v[n], gl[n], beta[n], SCALE, True)
        close(o[n], ro, what=f"o[{n}]")
        for t in range(T):
            close(pool[int(idx[n, t])], rs[t], what=f"slot [{n}, {t}]")


def test_spec_slots_bf16_pool():
    g = gen(8)
    S, N = 2, 2
    L = N * S
    q = randn(g, 1, L, H, D, dtype=BF)
    k = randn(g, 1, L, H, D, dtype=BF)
    v = randn(g, 1, L, HV, D, dtype=BF)
    gl = -torch.rand(1, L, HV, generator=g)
    beta = torch.rand(1, L, HV, generator=g)
    pool = _pool(g, 6, dtype=BF)
    before = pool.clone()
    idx = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    acc = torch.tensor([1, 2], dtype=torch.int32)
    cu = torch.tensor([0, 2, 4], dtype=torch.int32)
    gv.fused_recurrent_gated_delta_rule(q, k, v, gl, beta, initial_state=pool, cu_seqlens=cu,
                                        ssm_state_indices=idx, num_accepted_tokens=acc,
                                        use_qk_l2norm_in_kernel=True)
    for n in range(N):
        sl = slice(n * S, (n + 1) * S)
        _, rs = ref_seq(before[int(idx[n, int(acc[n]) - 1])], q[0, sl], k[0, sl], v[0, sl], gl[0, sl], beta[0, sl],
                        SCALE, True)
        for t in range(S):
            close(pool[int(idx[n, t])], rs[t], tol=4e-2, what=f"slot [{n}, {t}]")


# ---- inplace_final_state=False: per-token states -------------------------------------------------------

@pytest.mark.parametrize("slots", ["2d_acc", "1d", "none"])
def test_per_token_states(slots):
    g = gen(9)
    S, N = 3, 3
    L = N * S
    q = randn(g, 1, L, H, D, dtype=BF)
    k = randn(g, 1, L, H, D, dtype=BF)
    v = randn(g, 1, L, HV, D, dtype=BF)
    gl = -torch.rand(1, L, HV, generator=g)
    beta = torch.rand(1, L, HV, generator=g)
    pool = _pool(g, L + 2)
    before = pool.clone()
    cu = torch.arange(N + 1, dtype=torch.int32) * S
    acc = None
    if slots == "2d_acc":
        idx = torch.tensor([[2, 3, 4], [0, 0, 0], [7, 8, 9]], dtype=torch.int32)
        acc = torch.tensor([3, 1, 2], dtype=torch.int32)
        src = [int(idx[n, int(acc[n]) - 1]) for n in range(N)]
    elif slots == "1d":
        idx = torch.tensor([6, 1, 0], dtype=torch.int32)
        src = [int(i) for i in idx]
    else:
        idx = None
        src = [n * S for n in range(N)]  # vLLM reads row (first token of the sequence)
    o, final = gv.fused_recurrent_gated_delta_rule(q, k, v, gl, beta, initial_state=pool,
                                                   inplace_final_state=False, cu_seqlens=cu,
                                                   ssm_state_indices=idx, num_accepted_tokens=acc)
    assert torch.equal(pool, before), "the initial states are not modified"
    assert final.shape == (L, HV, D, D) and final.dtype == torch.float32
    for n in range(N):
        if src[n] <= 0 and idx is not None:
            continue  # padding: vLLM leaves its rows uninitialised
        sl = slice(n * S, (n + 1) * S)
        ro, rs = ref_seq(before[src[n]], q[0, sl], k[0, sl], v[0, sl], gl[0, sl], beta[0, sl], SCALE, False)
        close(o[0, sl], ro, what=f"o of sequence {n}")
        close(final[sl], rs, what=f"states of sequence {n}")


def test_per_token_states_decode_bf16():
    """One token per sequence (a decode call without a pool), bfloat16 initial states: the per-token states
    come back in the initial state's dtype."""
    g = gen(10)
    N = 3
    q = randn(g, 1, N, H, D, dtype=BF)
    k = randn(g, 1, N, H, D, dtype=BF)
    v = randn(g, 1, N, HV, D, dtype=BF)
    A_log, a, dt_bias, b = raw_gates(g, N)
    gl, beta = gates_from_raw(A_log, a, dt_bias, b)
    pool = _pool(g, 5, dtype=BF)
    idx = torch.tensor([4, 2, 3], dtype=torch.int32)
    cu = torch.arange(N + 1, dtype=torch.int32)
    o, final = gv.fused_sigmoid_gating_delta_rule_update(A_log, a, b, dt_bias, q, k, v, initial_state=pool,
                                                         inplace_final_state=False, cu_seqlens=cu,
                                                         ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    assert final.dtype == BF and final.shape == (N, HV, D, D)
    for n in range(N):
        ro, rs = ref_seq(pool[int(idx[n])], q[0, n:n + 1], k[0, n:n + 1], v[0, n:n + 1], gl[n:n + 1],
                         beta[n:n + 1], SCALE, True)
        close(o[0, n], ro[0], what="o")
        close(final[n], rs[0], tol=4e-2, what="state")


# ---- chunk_gated_delta_rule ----------------------------------------------------------------------------

@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16, None])
@pytest.mark.parametrize("l2norm", [False, True])
def test_chunk_varlen(state_dtype, l2norm):
    g = gen(11)
    lens = [5, 0, 70, 2]
    N, L = len(lens), sum(lens)
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(N)], dtype=torch.int32)
    q = randn(g, 1, L, H, D, dtype=BF)
    k = randn(g, 1, L, H, D, dtype=BF)
    if not l2norm:
        q, k = F.normalize(q.float(), dim=-1).to(BF), F.normalize(k.float(), dim=-1).to(BF)
    v = randn(g, 1, L, HV, D, dtype=BF)
    gl = -torch.rand(1, L, HV, generator=g) * 0.5
    beta = torch.rand(1, L, HV, generator=g)
    init = None if state_dtype is None else randn(g, N, HV, D, D, scale=0.1, dtype=state_dtype)
    o, final = gv.chunk_gated_delta_rule(q, k, v, gl, beta, initial_state=init, output_final_state=True,
                                         cu_seqlens=cu, use_qk_l2norm_in_kernel=l2norm)
    assert o.shape == v.shape and o.dtype == BF and final.dtype == torch.float32 and final.shape == (N, HV, D, D)
    for n in range(N):
        sl = slice(int(cu[n]), int(cu[n + 1]))
        s0 = None if init is None else init[n]
        if lens[n] == 0:
            ref = torch.zeros(HV, D, D, dtype=torch.float64) if s0 is None else s0.double()
            close(final[n], ref, what="zero-length sequence's state")
            continue
        ro, rs = ref_seq(s0, q[0, sl], k[0, sl], v[0, sl], gl[0, sl], beta[0, sl], SCALE, l2norm)
        close(o[0, sl], ro, what=f"o of sequence {n}")
        close(final[n], rs[-1], what=f"final state {n}")
    o2, f2 = gv.chunk_gated_delta_rule(q, k, v, gl, beta, initial_state=init, cu_seqlens=cu,
                                       use_qk_l2norm_in_kernel=l2norm)
    assert f2 is None and torch.equal(o2, o)


def test_chunk_core_attn_out_and_batch():
    """core_attn_out as vLLM passes it (a larger flat buffer, or [T, HV, V]); B > 1 without cu_seqlens; q, k, v
    as views of mixed_qkv."""
    g = gen(12)
    T = 9
    mq = mixed(g, T)
    q, k, v = split(mq, (1, T))
    gl = -torch.rand(1, T, HV, generator=g)
    beta = torch.rand(1, T, HV, generator=g).to(BF)
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    init = randn(g, 2, HV, D, D, scale=0.1)
    flat = torch.full((T * HV * D + 100,), 5.0, dtype=BF)
    o, final = gv.chunk_gated_delta_rule(q, k, v, gl, beta, initial_state=init, output_final_state=True,
                                         cu_seqlens=cu, use_qk_l2norm_in_kernel=True, core_attn_out=flat)
    assert o.data_ptr() == flat.data_ptr() and bool((flat[T * HV * D:] == 5).all())
    shaped = torch.empty(T, HV, D, dtype=BF)
    o2, _ = gv.chunk_gated_delta_rule(q, k, v, gl, beta, initial_state=init, cu_seqlens=cu,
                                      use_qk_l2norm_in_kernel=True, core_attn_out=shaped)
    assert o2.data_ptr() == shaped.data_ptr() and torch.equal(o2, o)
    for n in range(2):
        sl = slice(int(cu[n]), int(cu[n + 1]))
        ro, rs = ref_seq(init[n], q[0, sl], k[0, sl], v[0, sl], gl[0, sl], beta[0, sl], SCALE, True)
        close(o[0, sl], ro, what="o")
        close(final[n], rs[-1], what="state")
    # the same two sequences as a batch of equal length 4 (the first 4 tokens of each)
    qb = torch.stack([q[0, 0:4], q[0, 4:8]])
    kb = torch.stack([k[0, 0:4], k[0, 4:8]])
    vb = torch.stack([v[0, 0:4], v[0, 4:8]])
    gb = torch.stack([gl[0, 0:4], gl[0, 4:8]])
    bb = torch.stack([beta[0, 0:4], beta[0, 4:8]])
    ob, fb = gv.chunk_gated_delta_rule(qb, kb, vb, gb, bb, scale=0.1, initial_state=init, output_final_state=True)
    for n in range(2):
        ro, rs = ref_seq(init[n], qb[n], kb[n], vb[n], gb[n], bb[n], 0.1, False)
        close(ob[n], ro, what="batched o")
        close(fb[n], rs[-1], what="batched state")


# ---- what gdn does not run, and bad input ----------------------------------------------------------------

def _decode_args(g, N=2):
    q = randn(g, 1, N, H, D, dtype=BF)
    k = randn(g, 1, N, H, D, dtype=BF)
    v = randn(g, 1, N, HV, D, dtype=BF)
    A_log, a, dt_bias, b = raw_gates(g, N)
    pool = torch.zeros(4, HV, D, D)
    return dict(A_log=A_log, a=a, b=b, dt_bias=dt_bias, q=q, k=k, v=v, initial_state=pool,
                cu_seqlens=torch.arange(N + 1, dtype=torch.int32),
                ssm_state_indices=torch.arange(1, N + 1, dtype=torch.int32))


@pytest.mark.parametrize("change, err, match", [
    (dict(is_kda=True), NotImplementedError, "is_kda"),
    (dict(beta=2.0), NotImplementedError, "beta=2.0"),
    (dict(threshold=10.0), NotImplementedError, "threshold=10.0"),
    (dict(num_accepted_tokens=torch.ones(2, dtype=torch.int32)), NotImplementedError, "num_accepted_tokens"),
    (dict(ssm_state_indices=None), ValueError, "ssm_state_indices"),
    (dict(initial_state=None), ValueError, "initial_state"),
    (dict(initial_state=torch.zeros(4, HV, D, D, dtype=torch.float64)), NotImplementedError, "float64"),
    (dict(scale=0.0), ValueError, "scale"),
    (dict(cu_seqlens=torch.tensor([0, 2, 2], dtype=torch.int32)), ValueError, "cu_seqlens"),
])
def test_sigmoid_errors(change, err, match):
    kw = _decode_args(gen(13))
    kw.update(change)
    with pytest.raises(err, match=match):
        gv.fused_sigmoid_gating_delta_rule_update(**kw)
    if kw["initial_state"] is not None:
        assert bool((kw["initial_state"] == 0).all())


def test_recurrent_errors():
    g = gen(14)
    q = randn(g, 2, 3, H, D, dtype=BF)
    k = randn(g, 2, 3, H, D, dtype=BF)
    v = randn(g, 2, 3, HV, D, dtype=BF)
    gl = -torch.rand(2, 3, HV, generator=g)
    beta = torch.rand(2, 3, HV, generator=g)
    pool = torch.zeros(8, HV, D, D)
    with pytest.raises(NotImplementedError, match="headwise beta"):
        gv.fused_recurrent_gated_delta_rule(q, k, v, gl, torch.rand(2, 3, HV, D), initial_state=pool,
                                            ssm_state_indices=torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(NotImplementedError, match="1-D ssm_state_indices with 3 tokens"):
        gv.fused_recurrent_gated_delta_rule(q, k, v, gl, beta, initial_state=pool,
                                            ssm_state_indices=torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(NotImplementedError, match="float32"):
        gv.fused_recurrent_gated_delta_rule(q.float(), k.float(), v.float(), gl, beta, initial_state=pool,
                                            ssm_state_indices=torch.tensor([[1, 2, 3], [4, 5, 6]],
                                                                           dtype=torch.int32))
    with pytest.raises(ValueError, match="batch size"):
        gv.fused_recurrent_gated_delta_rule(q, k, v, gl, beta, initial_state=pool,
                                            cu_seqlens=torch.tensor([0, 3, 6], dtype=torch.int32),
                                            ssm_state_indices=torch.tensor([1, 2], dtype=torch.int32))
    ragged = torch.tensor([0, 2, 6], dtype=torch.int32)  # a spec batch with 2 and 4 tokens: not one gdn call
    with pytest.raises(ValueError, match="ragged"):
        gv.fused_recurrent_gated_delta_rule(q.reshape(1, 6, H, D), k.reshape(1, 6, H, D), v.reshape(1, 6, HV, D),
                                            gl.reshape(1, 6, HV), beta.reshape(1, 6, HV), initial_state=pool,
                                            cu_seqlens=ragged,
                                            ssm_state_indices=torch.tensor([[1, 2, 3], [4, 5, 6]],
                                                                           dtype=torch.int32),
                                            num_accepted_tokens=torch.tensor([1, 1], dtype=torch.int32))
    qg = q.float().requires_grad_()
    with pytest.raises(NotImplementedError, match="autograd"):
        gv.fused_recurrent_gated_delta_rule(qg, k, v, gl, beta, initial_state=pool)
    assert bool((pool == 0).all())


def test_chunk_errors():
    g = gen(15)
    q = randn(g, 1, 4, H, D, dtype=BF)
    v = randn(g, 1, 4, HV, D, dtype=BF)
    gl = -torch.rand(1, 4, HV, generator=g)
    beta = torch.rand(1, 4, HV, generator=g)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="float32"):
        gv.chunk_gated_delta_rule(q.float(), q.float(), v.float(), gl, beta, cu_seqlens=cu)
    with pytest.raises(NotImplementedError, match="float32"):
        gv.chunk_gated_delta_rule(q.float(), q.float(), v.float(), gl, beta, cu_seqlens=cu)
    with pytest.raises(ValueError, match="beta"):
        gv.chunk_gated_delta_rule(q, q, v, gl, beta[0], cu_seqlens=cu)
    with pytest.raises(ValueError, match="number of initial states"):
        gv.chunk_gated_delta_rule(q, q, v, gl, beta, initial_state=torch.zeros(2, HV, D, D), cu_seqlens=cu)
    with pytest.raises(NotImplementedError, match="float64"):
        gv.chunk_gated_delta_rule(q, q, v, gl.double(), beta, cu_seqlens=cu)
    with pytest.raises(NotImplementedError, match="scale=0"):
        gv.chunk_gated_delta_rule(q, q, v, gl, beta, scale=0, cu_seqlens=cu)


def test_signatures_match_vllm():
    """Names, order and defaults of vLLM 0.33's functions (copied here as data, so that a change is seen)."""
    import inspect

    want = {
        "chunk_gated_delta_rule": [
            ("q", None), ("k", None), ("v", None), ("g", None), ("beta", None), ("scale", None),
            ("initial_state", None), ("output_final_state", False), ("cu_seqlens", None),
            ("chunk_indices", None), ("chunk_offsets", None), ("use_qk_l2norm_in_kernel", False),
            ("core_attn_out", None)],
        "fused_recurrent_gated_delta_rule": [
            ("q", None), ("k", None), ("v", None), ("g", None), ("beta", None), ("scale", None),
            ("initial_state", None), ("inplace_final_state", True), ("cu_seqlens", None),
            ("ssm_state_indices", None), ("num_accepted_tokens", None), ("use_qk_l2norm_in_kernel", False)],
        "fused_recurrent_gated_delta_rule_packed_decode": [
            ("mixed_qkv", None), ("a", None), ("b", None), ("A_log", None), ("dt_bias", None), ("scale", None),
            ("initial_state", None), ("out", None), ("ssm_state_indices", None),
            ("use_qk_l2norm_in_kernel", False)],
        "fused_sigmoid_gating_delta_rule_update": [
            ("A_log", None), ("a", None), ("b", None), ("dt_bias", None), ("q", None), ("k", None), ("v", None),
            ("beta", 1.0), ("threshold", 20.0), ("scale", None), ("initial_state", None),
            ("inplace_final_state", True), ("cu_seqlens", None), ("ssm_state_indices", None),
            ("num_accepted_tokens", None), ("use_qk_l2norm_in_kernel", False), ("is_kda", False)],
    }
    for name, params in want.items():
        sig = inspect.signature(getattr(gv, name))
        got = [(p.name, None if p.default is inspect.Parameter.empty else p.default)
               for p in sig.parameters.values()]
        assert got == params, name
    assert math.isclose(SCALE, 128 ** -0.5)
    assert gdn.vllm is gv


# ---- fi_chunk_gated_delta_rule (the FlashInfer prefill route, with checkpoints) ----------------------------

def test_fi_chunk_checkpoints():
    g = gen(16)
    lens = [130, 64, 5]
    N, L = len(lens), sum(lens)
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(N)], dtype=torch.int32)
    q = randn(g, 1, L, H, D, dtype=BF)
    k = randn(g, 1, L, H, D, dtype=BF)
    v = randn(g, 1, L, HV, D, dtype=BF)
    gl = -torch.rand(1, L, HV, generator=g) * 0.3
    beta = torch.rand(1, L, HV, generator=g)
    init = randn(g, N, HV, D, D, scale=0.1, dtype=BF)
    every = 64
    counts = [n // every for n in lens]
    starts = torch.tensor([0] + [sum(counts[:i + 1]) for i in range(N)])
    ck = torch.full((int(starts[-1]) + 1, HV, D, D), 4.0)
    o, final = gv.fi_chunk_gated_delta_rule(q=q, k=k, v=v, g=gl, beta=beta, initial_state=init,
                                            output_final_state=True, cu_seqlens=cu, use_qk_l2norm_in_kernel=True,
                                            state_checkpoints=ck, checkpoint_cu_starts=starts,
                                            checkpoint_every_n_tokens=every, use_cp=False)
    assert o.shape == (1, L, HV, D) and final.dtype == torch.float32
    for n in range(N):
        sl = slice(int(cu[n]), int(cu[n + 1]))
        ro, rs = ref_seq(init[n], q[0, sl], k[0, sl], v[0, sl], gl[0, sl], beta[0, sl], SCALE, True)
        close(o[0, sl], ro, what=f"o of sequence {n}")
        close(final[n], rs[-1], what=f"final state {n}")
        for j in range(counts[n]):
            close(ck[int(starts[n]) + j], rs[(j + 1) * every - 1], what=f"checkpoint {j} of sequence {n}")
    assert bool((ck[-1] == 4.0).all()), "rows past the checkpoints are untouched"
    with pytest.raises(NotImplementedError, match="checkpoint_every_n_tokens=32"):
        gv.fi_chunk_gated_delta_rule(q, k, v, gl, beta, init, True, cu, state_checkpoints=ck,
                                     checkpoint_cu_starts=starts, checkpoint_every_n_tokens=32)
    with pytest.raises(ValueError, match="initial_state"):
        gv.fi_chunk_gated_delta_rule(q, k, v, gl, beta, None, True, cu)
    o2, f2 = gv.fi_chunk_gated_delta_rule(q, k, v, gl, beta, init, False, cu)
    assert f2 is None
    close(o2[0], o[0].double(), tol=1e-6, what="same output without checkpoints")


def test_fi_chunk_signature():
    import inspect

    got = [(p.name, None if p.default is inspect.Parameter.empty else p.default)
           for p in inspect.signature(gv.fi_chunk_gated_delta_rule).parameters.values()]
    assert got == [("q", None), ("k", None), ("v", None), ("g", None), ("beta", None), ("initial_state", None),
                   ("output_final_state", None), ("cu_seqlens", None), ("use_qk_l2norm_in_kernel", True),
                   ("state_checkpoints", None), ("checkpoint_cu_starts", None), ("checkpoint_every_n_tokens", 0),
                   ("use_cp", "auto")]


def test_bf16_dt_bias_cache_follows_updates():
    """The float32 copy of a bfloat16 dt_bias is cached per parameter and remade after an in-place update."""
    g = gen(17)
    B = 2
    mq = mixed(g, B)
    A_log, a, dt_bias, b = raw_gates(g, B)
    dt_bias = dt_bias.to(BF)
    idx = torch.tensor([1, 2], dtype=torch.int32)

    pool0 = randn(g, 3, HV, D, D, scale=0.1)

    def run():
        pool = pool0.clone()  # a non-zero state, so that the decay (and so dt_bias) matters
        out = torch.empty(B, 1, HV, D, dtype=BF)
        gv.fused_recurrent_gated_delta_rule_packed_decode(mq, a, b, A_log, dt_bias, SCALE, pool, out, idx, True)
        return pool

    p1 = run()
    assert torch.equal(run(), p1)
    with torch.no_grad():
        dt_bias.add_(3.0)
    p2 = run()
    q, k, v = split(mq, (B, 1))
    gl, beta = gates_from_raw(A_log, a, dt_bias, b)
    _, rs = ref_seq(pool0[1], q[0], k[0], v[0], gl[0:1], beta[0:1], SCALE, True)
    close(p2[1], rs[-1], what="state after the dt_bias update")
    assert not torch.equal(p1, p2)


def test_patch_swaps_the_layer_module(monkeypatch):
    """patch() replaces the names vLLM's layer module calls (a stand-in module here: vLLM is not imported)."""
    import sys
    import types

    name = "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn"
    fake = types.ModuleType(name)
    originals = {}
    for attr in ("fla_chunk_gated_delta_rule", "fi_chunk_gated_delta_rule", "fused_sigmoid_gating_delta_rule_update",
                 "fused_recurrent_gated_delta_rule_packed_decode"):
        originals[attr] = object()
        setattr(fake, attr, originals[attr])
    monkeypatch.setitem(sys.modules, name, fake)
    assert gv.patch() is fake
    assert fake.fla_chunk_gated_delta_rule is gv.chunk_gated_delta_rule
    assert fake.fi_chunk_gated_delta_rule is gv.fi_chunk_gated_delta_rule
    assert fake.fused_sigmoid_gating_delta_rule_update is gv.fused_sigmoid_gating_delta_rule_update
    assert fake.fused_recurrent_gated_delta_rule_packed_decode is gv.fused_recurrent_gated_delta_rule_packed_decode
    gv.patch()  # idempotent: the originals stay saved
    gv.unpatch()
    for attr, orig in originals.items():
        assert getattr(fake, attr) is orig
    del fake.fi_chunk_gated_delta_rule
    with pytest.raises(RuntimeError, match="fi_chunk_gated_delta_rule"):
        gv.patch()
