"""CPU tests of the serving modes of the `gdn` Python module (NumPy + ml_dtypes, no GPU, no torch).

Every keyword of the serving API is checked on the host path against a float64 NumPy reference written here
from the serving contract (crates/gdn-core/src/serving.rs), and where one exists against the equivalent
definition-mode call (precomputed gates vs raw gates, a pool vs rows gathered by hand, k-first vs a transposed
k-last state, in-kernel q/k norm vs q/k normalised first). Pool rows no sequence writes and buffer rows no
checkpoint owns are guards: they must keep their exact values. Error paths name the argument and write nothing.
"""
import ml_dtypes
import numpy as np
import pytest

import gdn
from gdn import _gdn
from test_cpu import (BF16, D, OUT_L2, STATE_L2, check_close, decode_inputs, fake_descs, gates, mtp_inputs, normed,
                      prefill_inputs, ref_decode, ref_mtp, ref_prefill, rnd)

F64 = np.float64
SCALE = 1.0 / np.sqrt(D)


# ------------------------------------------------------------------ float64 reference of the serving contract
def raw_gates(A_log, a, dt_bias, b):
    """(log g, beta) in float64 from the definitions' raw inputs."""
    x = a.astype(F64) + dt_bias.astype(F64)
    return -np.exp(A_log.astype(F64)) * np.logaddexp(0.0, x), 1.0 / (1.0 + np.exp(-b.astype(F64)))


def l2norm_bf16(x, dtype=BF16):
    """The in-kernel q/k norm: x / sqrt(sum(x^2) + 1e-6) per (token, head), rounded to the input's dtype (bf16,
    or fp16 with `dtype`; through fp32, as the kernels round). Engines may differ by one ulp in a few elements
    (their sums and square roots round differently): comparisons after the norm use a tolerance that allows it
    (NORM_STATE_L2)."""
    x = x.astype(F64)
    return (x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)).astype(np.float32).astype(dtype).astype(F64)


NORM_STATE_L2 = 1e-3  # one bf16 ulp in one normalised k element moves a state by ~3e-4 (rel-L2)


def ref_tokens(q, k, v, S, logg, beta, norm=False, scale=SCALE):
    """One sequence: q,k [T,H,D], v [T,HV,D], logg/beta [T,HV] float64, S [HV,V,K] float64 (k-last).
    Returns (out [T,HV,D], final state, state after each token [T,HV,V,K])."""
    q, k = (l2norm_bf16(q), l2norm_bf16(k)) if norm else (q.astype(F64), k.astype(F64))
    v = v.astype(F64)
    H, HV = q.shape[1], v.shape[1]
    out, states = np.zeros(v.shape), np.zeros((q.shape[0],) + S.shape)
    for t in range(q.shape[0]):
        qq, kk = np.repeat(q[t], HV // H, axis=0), np.repeat(k[t], HV // H, axis=0)
        S = np.exp(logg[t])[:, None, None] * S
        delta = beta[t][:, None] * (v[t] - np.einsum("hvk,hk->hv", S, kk))
        S = S + delta[:, :, None] * kk[:, None, :]
        out[t] = scale * np.einsum("hvk,hk->hv", S, qq)
        states[t] = S
    return out, S, states


def kfirst(x):
    """A k-last state tensor [.., V, K] stored k-first [.., K, V] (or back)."""
    return np.ascontiguousarray(np.swapaxes(x, -1, -2))


def precomputed(x_a_log, x_a, x_dtb, x_b, beta_dtype=np.float32):
    """Precomputed gates as the engines pass them: g f32 (log decay), alpha f32, beta post-sigmoid."""
    logg, beta = raw_gates(x_a_log, x_a, x_dtb, x_b)
    return logg.astype(np.float32), np.exp(logg).astype(np.float32), beta.astype(beta_dtype)


def pool_of(r, slots, HV, dtype=np.float32):
    return (0.1 * r.standard_normal((slots, HV, D, D))).astype(dtype)


# ------------------------------------------------------------------ precomputed gates
@pytest.mark.parametrize("form", ["g", "alpha", "g_bf16_beta"])
def test_decode_precomputed_gates(form):
    q, k, v, state, A_log, a, dt_bias, b = decode_inputs(3, 4, 8, seed=40)
    g, alpha, beta = precomputed(A_log, a, dt_bias, b, BF16 if form == "g_bf16_beta" else np.float32)
    kw = dict(alpha=alpha) if form == "alpha" else dict(g=g)
    o, ns = gdn.decode(q, k, v, state, None, None, None, None, beta=beta, **kw)
    logg = np.log(alpha.astype(F64)) if form == "alpha" else g.astype(F64)
    for n in range(3):
        ro, rs, _ = ref_tokens(q[n], k[n], v[n], state[n].astype(F64), logg[n], beta[n].astype(F64))
        check_close(o[n], ro, f"output {n}", OUT_L2)
        check_close(ns[n], rs, f"new_state {n}", STATE_L2[np.float32])
    # the same gates given raw: the definition-mode call agrees
    o2, ns2 = gdn.decode(q, k, v, state, A_log, a, dt_bias, b)
    check_close(ns, ns2.astype(F64), "precomputed vs raw gates", 1e-5 if form != "g_bf16_beta" else 8e-3)


def test_prefill_and_mtp_precomputed_gates():
    q, k, v, state, A_log, a, dt_bias, b, cu = prefill_inputs([5, 0, 70], 2, 8, seed=41)
    g, _, beta = precomputed(A_log, a, dt_bias, b)
    o, ns = gdn.prefill(q, k, v, state, cu_seqlens=cu, g=g, beta=beta)
    o2, ns2 = gdn.prefill(q, k, v, state, A_log, a, dt_bias, b, cu)
    check_close(o, o2.astype(F64), "prefill output, g vs raw", OUT_L2)
    check_close(ns, ns2.astype(F64), "prefill new_state, g vs raw", 1e-5)
    x = list(mtp_inputs(2, 3, 4, 4, 8, seed=42))
    _, alpha, beta = precomputed(*(x[5:9]))
    o, _ = gdn.mtp(*x[:5], alpha=alpha, beta=beta)
    o2, _ = gdn.mtp(*x)
    check_close(o, o2.astype(F64), "mtp output, alpha vs raw", OUT_L2)


# ------------------------------------------------------------------ in-kernel q/k norm
def test_qk_l2norm_decode_and_prefill():
    x = decode_inputs(3, 4, 8, seed=43)  # randn q/k, |k|^2 ~ 128: the norm matters
    o, ns = gdn.decode(*x, use_qk_l2norm_in_kernel=True)
    q, k, v, state, A_log, a, dt_bias, b = x
    logg, beta = raw_gates(A_log, a, dt_bias, b)
    for n in range(3):
        ro, rs, _ = ref_tokens(q[n], k[n], v[n], state[n].astype(F64), logg[n], beta[n], norm=True)
        check_close(o[n], ro, f"output {n} (qk norm)", OUT_L2)
        check_close(ns[n], rs, f"new_state {n} (qk norm)", NORM_STATE_L2)
    # normalising by hand first, then the definition mode: the same within rounding
    r = rnd(44)
    T = 67
    q, k = r.standard_normal((T, 4, D)).astype(BF16), r.standard_normal((T, 4, D)).astype(BF16)
    v = r.standard_normal((T, 8, D)).astype(BF16)
    A_log, a, dt_bias, b = gates(r, 8, (T,))
    cu = np.array([0, 3, 67], np.int64)
    o, ns = gdn.prefill(q, k, v, None, A_log, a, dt_bias, b, cu, use_qk_l2norm_in_kernel=True)
    o2, ns2 = gdn.prefill(l2norm_bf16(q).astype(BF16), l2norm_bf16(k).astype(BF16), v, None, A_log, a, dt_bias, b, cu)
    check_close(o, o2.astype(F64), "prefill output, qk norm vs normalised first", OUT_L2)
    check_close(ns, ns2.astype(F64), "prefill state, qk norm vs normalised first", NORM_STATE_L2)


# ------------------------------------------------------------------ k-first states
def test_k_first_decode_prefill_mtp():
    x = list(decode_inputs(2, 4, 8, seed=45))
    o, ns = gdn.decode(*x)
    x[3] = kfirst(x[3])
    o2, ns2 = gdn.decode(*x, state_layout="k-first")
    check_close(o2, o.astype(F64), "decode output (k-first)", OUT_L2)
    check_close(kfirst(ns2), ns.astype(F64), "decode state (k-first, transposed back)", 1e-5)

    y = list(prefill_inputs([3, 65], 4, 8, seed=46, state_dtype=BF16))
    o, ns = gdn.prefill(*y)
    y[3] = kfirst(y[3])
    o2, ns2 = gdn.prefill(*y, state_layout="k-first")
    check_close(o2, o.astype(F64), "prefill output (k-first)", 8e-3)
    check_close(kfirst(ns2).astype(F64), ns.astype(F64), "prefill bf16 state (k-first)", 8e-3)

    z = list(mtp_inputs(2, 3, 4, 4, 8, seed=47))
    inter = np.full((4, 3, 8, D, D), 5.0, np.float32)
    o, _ = gdn.mtp(*z, None, inter)
    z[3] = kfirst(z[3])
    inter2 = np.full((4, 3, 8, D, D), 5.0, np.float32)
    o2, _ = gdn.mtp(*z, None, inter2, state_layout="k-first")
    check_close(o2, o.astype(F64), "mtp output (k-first)", OUT_L2)
    check_close(kfirst(inter2), inter.astype(F64), "mtp intermediate states (k-first)", 1e-5)


# ------------------------------------------------------------------ state pools (decode, prefill)
@pytest.mark.parametrize("pad,idx_dtype", [("negative", np.int32), ("negative", np.int64), ("null-slot", np.int32)])
def test_decode_pool(pad, idx_dtype):
    B, slots = 4, 7
    q, k, v, _, A_log, a, dt_bias, b = decode_inputs(B, 4, 8, seed=48)
    pool = pool_of(rnd(49), slots, 8)
    pad_idx = -1 if pad == "negative" else 0
    idx = np.array([5, pad_idx, 2, 6], idx_dtype)
    before = pool.copy()
    out = np.full((B, 1, 8, D), np.nan, BF16)
    o, ns = gdn.decode(q, k, v, pool, A_log, a, dt_bias, b, output=out, state_indices=idx, pad=pad)
    assert o is out and ns is pool
    logg, beta = raw_gates(A_log, a, dt_bias, b)
    for n, row in enumerate(idx.tolist()):
        if n == 1:
            assert not o[n].astype(np.float32).any(), "padding request: zero output rows"
            continue
        ro, rs, _ = ref_tokens(q[n], k[n], v[n], before[row].astype(F64), logg[n], beta[n])
        check_close(o[n], ro, f"output {n}", OUT_L2)
        check_close(pool[row], rs, f"pool row {row}", STATE_L2[np.float32])
    untouched = [r for r in range(slots) if r not in (5, 2, 6)]
    assert np.array_equal(pool[untouched], before[untouched]), "rows no request writes keep their values"
    # the pool call equals the definition call on the gathered rows
    rows = [5, 2, 6]
    o2, ns2 = gdn.decode(q[[0, 2, 3]], k[[0, 2, 3]], v[[0, 2, 3]], before[rows], A_log, a[[0, 2, 3]], dt_bias,
                         b[[0, 2, 3]])
    check_close(pool[rows], ns2.astype(F64), "pool rows vs definition call on gathered rows", 1e-5)


@pytest.mark.parametrize("flags_dtype", [np.int32, np.bool_])
def test_prefill_pool_has_initial_state(flags_dtype):
    lens, slots = [4, 0, 66, 2], 6
    q, k, v, _, A_log, a, dt_bias, b, cu = prefill_inputs(lens, 4, 8, seed=50)
    pool = pool_of(rnd(51), slots, 8, BF16)
    idx = np.array([3, 1, 0, -1], np.int64)
    fresh = np.array([1, 1, 0, 1], flags_dtype)
    before = pool.copy()
    o, ns = gdn.prefill(q, k, v, pool, A_log, a, dt_bias, b, cu.astype(np.int32), state_indices=idx,
                        has_initial_state=fresh, new_state=pool)
    assert ns is pool
    logg, beta = raw_gates(A_log, a, dt_bias, b)
    c = np.concatenate([[0], np.cumsum(lens)])
    for n, row in [(0, 3), (2, 0)]:
        s0, s1 = c[n], c[n + 1]
        init = np.zeros((8, D, D)) if n == 2 else before[row].astype(F64)  # has_initial_state 0: zeros
        ro, rs, _ = ref_tokens(q[s0:s1], k[s0:s1], v[s0:s1], init, logg[s0:s1], beta[s0:s1])
        check_close(o[s0:s1], ro, f"output of sequence {n}", OUT_L2)
        check_close(pool[row].astype(F64), rs, f"pool row {row}", STATE_L2[BF16])
    assert not o[c[3]:c[4]].astype(np.float32).any(), "padded sequence: zero output rows"
    for r in (1, 2, 4, 5):  # 1: a zero-length sequence's row; 2, 4, 5: no sequence
        assert np.array_equal(pool[r].view(np.uint16), before[r].view(np.uint16)), f"pool row {r} untouched"


def test_strided_pool_views():
    """sglang-style per-layer views: [slots, layers, HV, D, D] indexed [:, layer] (row stride = layers states),
    written in place; the other layer's rows are untouched."""
    B, slots, layers = 3, 5, 2
    buf = pool_of(rnd(52), slots * layers, 8).reshape(slots, layers, 8, D, D)
    before = buf.copy()
    view = buf[:, 1]
    assert not view.flags.c_contiguous
    q, k, v, _, A_log, a, dt_bias, b = decode_inputs(B, 4, 8, seed=53)
    idx = np.array([4, 0, 2], np.int32)
    o, ns = gdn.decode(q, k, v, view, A_log, a, dt_bias, b, state_indices=idx)
    assert ns is view
    o2, ns2 = gdn.decode(q, k, v, np.ascontiguousarray(before[idx, 1]), A_log, a, dt_bias, b)
    check_close(o, o2.astype(F64), "output (strided pool)", OUT_L2)
    check_close(buf[idx, 1], ns2.astype(F64), "written rows (strided pool)", 1e-5)
    assert np.array_equal(buf[:, 0], before[:, 0]), "the other layer is untouched"
    assert np.array_equal(buf[[1, 3], 1], before[[1, 3], 1]), "unindexed rows are untouched"
    # MTP on the other layer's strided view, pool updated in place
    x = list(mtp_inputs(2, 3, slots, 4, 8, seed=54))
    x[3] = buf[:, 0]
    x[4] = np.array([1, 3], np.int32)
    o, fin = gdn.mtp(*x, update_pool=True)
    assert fin is x[3]
    x[3] = np.ascontiguousarray(before[:, 0])
    o2, fin2 = gdn.mtp(*x, update_pool=True)
    check_close(buf[:, 0], fin2.astype(F64), "mtp pool (strided view)", 1e-5)
    check_close(o, o2.astype(F64), "mtp output (strided view)", OUT_L2)
    assert np.array_equal(buf[[0, 2, 4], 0], before[[0, 2, 4], 0])


def test_fused_qkv_views_with_a_pool_and_qk_norm():
    """vLLM's prefill and verify: q, k, v as views of one mixed_qkv buffer, the output a view with a padded
    token stride, with a strided pool, q/k norm in the kernel, precomputed gates, null-slot padding; the same
    as the call on dense copies, bit for bit, and the output view's gaps keep their values."""
    from test_cpu import fused_qkv, out_view
    lens, slots, layers = [4, 0, 66, 2], 6, 2
    q, k, v, _, A_log, a, dt_bias, b, cu = prefill_inputs(lens, 4, 8, seed=57)
    g, _, beta = precomputed(A_log, a, dt_bias, b)
    buf = pool_of(rnd(58), slots * layers, 8).reshape(slots, layers, 8, D, D)
    idx = np.array([3, 1, 0, 5], np.int32)
    kw = dict(cu_seqlens=cu, g=g, beta=beta, state_indices=idx, pad="null-slot", use_qk_l2norm_in_kernel=True)
    dense_pool = np.ascontiguousarray(buf[:, 1])
    o_dense, _ = gdn.prefill(q, k, v, dense_pool, **kw)
    (fq, fk, fv), _ = fused_qkv(q, k, v, pad=8)
    out, obuf = out_view(o_dense.shape, extra_heads=2)
    o, _ = gdn.prefill(fq, fk, fv, buf[:, 1], output=out, **kw)
    assert o is out
    assert np.array_equal(out, o_dense) and np.array_equal(buf[:, 1], dense_pool)
    assert (obuf[:, 8:].astype(np.float32) == 7.0).all()
    # spec-decode verify on the same layout: [B, T, ...] views (batch stride = T token strides)
    B, T = 2, 3
    q, k, v, _, _, A_log, a, dt_bias, b = mtp_inputs(B, T, slots, 4, 8, seed=59)
    sidx = np.array([[2, 5, 4], [1, 0, 0]], np.int32)
    acc = np.array([2, 1], np.int32)
    kw = dict(num_accepted_tokens=acc, pad="null-slot", use_qk_l2norm_in_kernel=True)
    pool_dense = pool_of(rnd(60), slots, 8)
    pool_views = pool_dense.copy()
    o_dense, _ = gdn.mtp(q, k, v, pool_dense, sidx, A_log, a, dt_bias, b, **kw)
    (fq, fk, fv), _ = fused_qkv(q, k, v)
    out, obuf = out_view(o_dense.shape)
    gdn.mtp(fq, fk, fv, pool_views, sidx, A_log, a, dt_bias, b, output=out, **kw)
    assert np.array_equal(out, o_dense) and np.array_equal(pool_views, pool_dense)
    assert (obuf[..., 8:, :].astype(np.float32) == 7.0).all()


# ------------------------------------------------------------------ MTP: spec-decode slots, has_initial_state
@pytest.mark.parametrize("pad", ["negative", "null-slot"])
def test_mtp_spec_decode_slots(pad):
    B, T, slots = 3, 3, 12
    q, k, v, _, _, A_log, a, dt_bias, b = mtp_inputs(B, T, slots, 4, 8, seed=55)
    pool = pool_of(rnd(56), slots, 8)
    P = -1 if pad == "negative" else 0
    idx = np.array([[2, 5, 7], [P, P, P], [9, 4, P]], np.int32)  # request 1 padded; request 2 writes 2 tokens
    acc = np.array([2, 1, 1], np.int32)
    before = pool.copy()
    o, fin = gdn.mtp(q, k, v, pool, idx, A_log, a, dt_bias, b, num_accepted_tokens=acc, pad=pad)
    assert fin is pool
    logg, beta = raw_gates(A_log, a, dt_bias, b)
    written = set()
    for r in (0, 2):
        src = idx[r, acc[r] - 1]
        ro, _, states = ref_tokens(q[r], k[r], v[r], before[src].astype(F64), logg[r], beta[r])
        check_close(o[r], ro, f"output of request {r}", OUT_L2)
        for t in range(T):
            if idx[r, t] != P:
                check_close(pool[idx[r, t]], states[t], f"slot [{r}, {t}]", STATE_L2[np.float32])
                written.add(int(idx[r, t]))
    assert not o[1].astype(np.float32).any(), "padded request: zero output"
    rest = sorted(set(range(slots)) - written)
    assert np.array_equal(pool[rest], before[rest]), "slots not written keep their values"


def test_mtp_has_initial_state():
    x = list(mtp_inputs(3, 2, 5, 4, 8, seed=57))
    flags = np.array([1, 0, 1], np.int32)
    o, _ = gdn.mtp(*x, update_pool=True, has_initial_state=flags.astype(np.bool_))
    q, k, v, pool, idx, A_log, a, dt_bias, b = mtp_inputs(3, 2, 5, 4, 8, seed=57)
    logg, beta = raw_gates(A_log, a, dt_bias, b)
    ro, rs, _ = ref_tokens(q[1], k[1], v[1], np.zeros((8, D, D)), logg[1], beta[1])
    check_close(o[1], ro, "output of a fresh request", OUT_L2)
    check_close(x[3][idx[1]], rs, "its pool row", STATE_L2[np.float32])


# ------------------------------------------------------------------ prefill checkpoints, int32 offsets
@pytest.mark.parametrize("state_dtype,ckpt_dtype", [(np.float32, np.float32), (BF16, np.float32), (BF16, BF16)])
def test_prefill_checkpoints(state_dtype, ckpt_dtype):
    lens, every = [130, 64, 10, 0, 200], 64
    q, k, v, state, A_log, a, dt_bias, b, cu = prefill_inputs(lens, 4, 8, seed=58, state_dtype=state_dtype)
    per = [n // every for n in lens]                     # 2, 1, 0, 0, 3
    starts = np.concatenate([[0], np.cumsum(per)]).astype(np.int32)
    ck = np.full((sum(per) + 1, 8, D, D), 7.0, ckpt_dtype)  # one spare row: a guard
    o, ns = gdn.prefill(q, k, v, state, A_log, a, dt_bias, b, cu, checkpoint_every=every,
                        checkpoint_cu_starts=starts, checkpoints=ck)
    logg, beta = raw_gates(A_log, a, dt_bias, b)
    c = np.concatenate([[0], np.cumsum(lens)])
    tol = STATE_L2[np.float32] if ckpt_dtype == np.float32 else STATE_L2[BF16]
    for n in range(len(lens)):
        s0, s1 = c[n], c[n + 1]
        if s1 == s0:
            continue
        _, _, states = ref_tokens(q[s0:s1], k[s0:s1], v[s0:s1], state[n].astype(F64), logg[s0:s1], beta[s0:s1])
        for j in range(per[n]):
            check_close(ck[starts[n] + j].astype(F64), states[(j + 1) * every - 1], f"checkpoint {j} of sequence {n}",
                        tol)
    assert (ck[-1].astype(np.float32) == 7.0).all(), "a row no sequence owns keeps its values"
    o2, ns2 = gdn.prefill(q, k, v, state, A_log, a, dt_bias, b, cu)
    check_close(o, o2.astype(F64), "output with checkpoints", OUT_L2)
    with pytest.raises(TypeError, match="'checkpoints'"):  # the state's dtype or float32
        gdn.prefill(q, k, v, state.astype(np.float32), A_log, a, dt_bias, b, cu, checkpoint_every=every,
                    checkpoint_cu_starts=starts, checkpoints=np.zeros(ck.shape, BF16))


def test_int32_cu_seqlens():
    x = list(prefill_inputs([0, 7, 64, 1], 2, 8, seed=59))
    o, ns = gdn.prefill(*x)
    x[8] = x[8].astype(np.int32)
    o2, ns2 = gdn.prefill(*x)
    assert np.array_equal(o.view(np.uint16), o2.view(np.uint16)) and np.array_equal(ns, ns2)
    x[8] = np.array([0, 7, 6, 72, 72], np.int32)
    with pytest.raises(ValueError, match="'cu_seqlens'"):
        gdn.prefill(*x)


# ------------------------------------------------------------------ fp16 activations and states
F16 = np.float16
OUT_L2_F16 = 1e-3  # fp16 output rounding (2^-11 relative) plus fp32 math
STATE_L2_F16 = 1e-3  # an fp16 state's rounding


def to_f16(x, r, act=True, state=False):
    """Decode / prefill / MTP inputs (the tuples of test_cpu) redrawn in fp16 with the full fp16 mantissa: q, k
    (normalised where they were), v, a, b when `act`; the state (or pool) when `state`. Shapes unchanged."""
    x = list(x)
    for i, e in enumerate(x):
        if e is None or not isinstance(e, np.ndarray):
            continue
        is_state = e.ndim >= 4 and e.shape[-1] == D and e.shape[-2] == D
        if is_state and state:
            x[i] = (0.1 * r.standard_normal(e.shape)).astype(F16)
        elif e.dtype == BF16 and act:
            y = r.standard_normal(e.shape)
            if i < 2 and np.abs(np.linalg.norm(e.astype(F64), axis=-1) - 1).max() < 1e-2:
                y = y / np.linalg.norm(y, axis=-1, keepdims=True)  # q, k were normalised
            x[i] = y.astype(F16)
    return x


@pytest.mark.parametrize("act,state", [(True, False), (False, True), (True, True)])
def test_fp16_decode_prefill_mtp(act, state):
    r = rnd(70)
    x = to_f16(decode_inputs(3, 4, 8, seed=71), r, act, state)
    o, ns = gdn.decode(*x)
    assert o.dtype == (F16 if act else BF16) and ns.dtype == (F16 if state else np.float32)
    ro, rs = ref_decode(*x, None)
    check_close(o, ro, "decode output", OUT_L2_F16 if act else OUT_L2)
    check_close(ns, rs, "decode new_state", STATE_L2_F16 if state else STATE_L2[np.float32])

    y = to_f16(prefill_inputs([5, 0, 70, 1], 2, 8, seed=72), r, act, state)
    o, ns = gdn.prefill(*y)
    assert o.dtype == (F16 if act else BF16) and ns.dtype == (F16 if state else np.float32)
    ro, rs = ref_prefill(*y, None)
    check_close(o, ro, "prefill output", OUT_L2_F16 if act else OUT_L2)
    check_close(ns, rs, "prefill new_state", STATE_L2_F16 if state else STATE_L2[np.float32])

    z = to_f16(mtp_inputs(3, 4, 6, 4, 8, seed=73), r, act, state)
    inter = np.zeros((6, 4, 8, D, D), np.float32)
    before = z[3].copy()
    o, fin = gdn.mtp(*z, intermediate_states_buffer=inter, update_pool=True)
    assert fin is z[3] and o.dtype == (F16 if act else BF16)
    ro, rf, ri = ref_mtp(*z[:3], before, *z[4:], None, inter=np.zeros_like(inter), serving=True)
    check_close(o, ro, "mtp output", OUT_L2_F16 if act else OUT_L2)
    check_close(fin, rf, "mtp pool", STATE_L2_F16 if state else STATE_L2[np.float32])
    check_close(inter, ri, "mtp intermediate states (float32)", 1e-5)


def test_fp16_pool_k_first_and_precomputed_gates():
    """fp16 activations and an fp16 pool together: padding, k-first, log g with an fp16 beta."""
    r = rnd(74)
    B, slots = 4, 7
    q, k, v, _, A_log, a, dt_bias, b = to_f16(decode_inputs(B, 4, 8, seed=75), r)
    pool = pool_of(r, slots, 8, F16)
    logg, _, beta = precomputed(A_log, a, dt_bias, b, F16)
    assert beta.dtype == F16
    idx = np.array([5, -1, 2, 6], np.int32)
    before = pool.copy()
    pool_kf = kfirst(pool)
    o, ns = gdn.decode(q, k, v, pool_kf, g=logg, beta=beta, state_indices=idx, state_layout="k-first")
    assert ns is pool_kf and o.dtype == F16 and ns.dtype == F16
    for n, row in enumerate(idx.tolist()):
        if row < 0:
            assert not o[n].astype(np.float32).any(), "padding request: zero output rows"
            continue
        ro, rs, _ = ref_tokens(q[n], k[n], v[n], before[row].astype(F64), logg[n].astype(F64), beta[n].astype(F64))
        check_close(o[n], ro, f"output {n}", OUT_L2_F16)
        check_close(kfirst(pool_kf[row]), rs, f"pool row {row}", STATE_L2_F16)
    untouched = [r_ for r_ in range(slots) if r_ not in (5, 2, 6)]
    assert np.array_equal(kfirst(pool_kf)[untouched], before[untouched]), "rows no request writes keep their values"


def test_fp16_qk_norm_rounds_to_fp16():
    r = rnd(76)
    T = 67
    q, k = r.standard_normal((T, 4, D)).astype(F16), r.standard_normal((T, 4, D)).astype(F16)
    v = r.standard_normal((T, 8, D)).astype(F16)
    A_log, a, dt_bias, b = gates(r, 8, (T,))
    a, b = a.astype(F16), b.astype(F16)
    cu = np.array([0, 3, 67], np.int64)
    o, ns = gdn.prefill(q, k, v, None, A_log, a, dt_bias, b, cu, use_qk_l2norm_in_kernel=True)
    o2, ns2 = gdn.prefill(l2norm_bf16(q, F16).astype(F16), l2norm_bf16(k, F16).astype(F16), v, None, A_log, a,
                          dt_bias, b, cu)
    check_close(o, o2.astype(F64), "prefill output, qk norm vs normalised first (fp16)", OUT_L2_F16)
    check_close(ns, ns2.astype(F64), "prefill state, qk norm vs normalised first (fp16)", NORM_STATE_L2)


@pytest.mark.parametrize("ckpt_dtype", [F16, np.float32])
def test_fp16_prefill_pool_checkpoints(ckpt_dtype):
    r = rnd(77)
    lens, every, slots = [130, 64, 10, 0, 200], 64, 8
    q, k, v, _, A_log, a, dt_bias, b, cu = to_f16(prefill_inputs(lens, 4, 8, seed=78), r)
    pool = pool_of(r, slots, 8, F16)
    idx = np.array([6, 1, 3, 2, 5], np.int64)
    per = [n // every for n in lens]
    starts = np.concatenate([[0], np.cumsum(per)]).astype(np.int64)
    ck = np.full((sum(per) + 1, 8, D, D), 7.0, ckpt_dtype)
    before = pool.copy()
    o, ns = gdn.prefill(q, k, v, pool, A_log, a, dt_bias, b, cu, state_indices=idx, checkpoint_every=every,
                        checkpoint_cu_starts=starts, checkpoints=ck)
    assert ns is pool and o.dtype == F16
    logg, beta = raw_gates(A_log, a, dt_bias, b)
    c = np.concatenate([[0], np.cumsum(lens)])
    ck_tol = STATE_L2_F16 if ckpt_dtype == F16 else 1e-5
    for n, row in enumerate(idx.tolist()):
        s0, s1 = c[n], c[n + 1]
        if s1 == s0:
            assert np.array_equal(pool[row], before[row]), "a zero-length pooled sequence leaves its row"
            continue
        ro, rs, states = ref_tokens(q[s0:s1], k[s0:s1], v[s0:s1], before[row].astype(F64), logg[s0:s1], beta[s0:s1])
        check_close(o[s0:s1], ro, f"output of sequence {n}", OUT_L2_F16)
        check_close(pool[row], rs, f"pool row {row}", STATE_L2_F16)
        for j in range(per[n]):
            check_close(ck[starts[n] + j], states[(j + 1) * every - 1], f"checkpoint {j} of sequence {n}", ck_tol)
    assert (ck[-1].astype(np.float32) == 7.0).all(), "a row no sequence owns keeps its values"
    assert np.array_equal(pool[[0, 4, 7]], before[[0, 4, 7]])


def test_fp16_mixed_dtypes_name_the_tensor():
    r = rnd(79)
    x = to_f16(decode_inputs(2, 4, 8, seed=80), r, act=True, state=True)
    names = ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b"]
    for i in [1, 2, 5, 7]:  # k, v, a, b in bf16 next to an fp16 q
        y = list(x)
        y[i] = y[i].astype(np.float32).astype(BF16)
        with pytest.raises(TypeError, match=f"argument '{names[i]}'.*float16"):
            gdn.decode(*y)
    y = list(x)
    y[0] = y[0].astype(np.float32).astype(BF16)  # a bf16 q names the first fp16 tensor after it
    with pytest.raises(TypeError, match="argument 'k'"):
        gdn.decode(*y)
    g, _, beta = precomputed(*x[4:8], BF16)
    with pytest.raises(TypeError, match="argument 'beta'.*float32 or float16"):
        gdn.decode(*x[:4], g=g, beta=beta)
    with pytest.raises(TypeError, match="'output'"):
        gdn.decode(*x, output=np.empty((2, 1, 8, D), BF16))
    with pytest.raises(TypeError, match="'new_state'"):
        gdn.decode(*x, new_state=np.empty((2, 8, D, D), BF16))
    q, k, v, state, A_log, a, dt_bias, b, cu = to_f16(prefill_inputs([64], 4, 8, seed=81), r, state=True)
    with pytest.raises(TypeError, match="'checkpoints'.*float16"):  # bf16 checkpoints with an fp16 state
        gdn.prefill(q, k, v, state, A_log, a, dt_bias, b, cu, checkpoint_every=64,
                    checkpoint_cu_starts=np.array([0, 1], np.int64), checkpoints=np.zeros((1, 8, D, D), BF16))
    with pytest.raises(TypeError, match="'state'"):
        gdn.prefill(q, k, v, state.astype(np.float64), A_log, a, dt_bias, b, cu)


# ------------------------------------------------------------------ errors: named, and nothing written
def pool_call(**over):
    """A decode pool call (pool of 6, indices [4, 1]) with overrides; returns (result, pool, output)."""
    q, k, v, _, A_log, a, dt_bias, b = decode_inputs(2, 4, 8, seed=60)
    kw = dict(q=q, k=k, v=v, state=pool_of(rnd(61), 6, 8), A_log=A_log, a=a, dt_bias=dt_bias, b=b,
              state_indices=np.array([4, 1], np.int32), output=np.full((2, 1, 8, D), np.nan, BF16))
    kw.update(over)
    return gdn.decode(**kw)


def refused(cls, arg, **over):
    """The call raises `cls` naming `arg`, and writes neither the pool nor the output."""
    pool = over.pop("state", None)
    pool = pool_of(rnd(61), 6, 8) if pool is None else pool
    out = np.full((2, 1, 8, D), np.nan, BF16)
    before = pool.copy()
    with pytest.raises(cls) as e:
        pool_call(state=pool, output=out, **over)
    assert f"'{arg}'" in str(e.value), str(e.value)
    assert np.array_equal(pool, before) and np.isnan(out.astype(np.float32)).all(), "nothing written"
    return str(e.value)


def test_gate_errors():
    x = decode_inputs(2, 4, 8, seed=60)
    g, alpha, beta = precomputed(*(x[4:8]))
    refused(ValueError, "alpha", A_log=None, a=None, dt_bias=None, b=None, g=g, alpha=alpha, beta=beta)
    refused(ValueError, "beta", A_log=None, a=None, dt_bias=None, b=None, g=g)
    refused(ValueError, "A_log", g=g, beta=beta)  # raw gates and precomputed gates together
    refused(ValueError, "beta", beta=beta)
    refused(TypeError, "g", A_log=None, a=None, dt_bias=None, b=None, g=g.astype(BF16), beta=beta)
    refused(ValueError, "g", A_log=None, a=None, dt_bias=None, b=None, g=g[:, 0], beta=beta)
    refused(ValueError, "a", a=None)
    odd = np.zeros(g.size * 4 + 1, np.uint8)[1:].view(np.float32).reshape(g.shape)  # misaligned view
    assert "aligned" in refused(ValueError, "g", A_log=None, a=None, dt_bias=None, b=None, g=odd, beta=beta)


def test_option_errors():
    refused(ValueError, "state_layout", state_layout="v-first")
    refused(TypeError, "state_layout", state_layout=1)
    refused(ValueError, "pad", pad="zero")
    refused(TypeError, "use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel=1)
    x = prefill_inputs([70], 4, 8, seed=62)
    ck, st = np.zeros((1, 8, D, D), np.float32), np.array([0, 1], np.int32)
    for every, cls in [(100, ValueError), (-64, ValueError), (True, TypeError)]:
        with pytest.raises(cls, match="'checkpoint_every'"):
            gdn.prefill(*x, checkpoint_every=every, checkpoint_cu_starts=st, checkpoints=ck)
    with pytest.raises(ValueError, match="'checkpoint_cu_starts'"):
        gdn.prefill(*x, checkpoint_every=64, checkpoints=ck)
    with pytest.raises(ValueError, match="'checkpoint_cu_starts'"):
        gdn.prefill(*x, checkpoint_every=64, checkpoint_cu_starts=np.array([0, 0], np.int32), checkpoints=ck)
    descs = fake_descs(list(zip("q k v state A_log a dt_bias b".split(), decode_inputs(2, 4, 8))), lambda n: -1)
    with pytest.raises(ValueError, match="'checkpoint_every'.*prefill only"):
        _gdn.plan("decode", descs, None, False, None, None, None, (False, "k-last", "negative", 64))
    with pytest.raises(ValueError, match="'pad'"):
        gdn.decode(*decode_inputs(2, 4, 8), pad="null-slot")  # no pool indices to pad


def test_pool_errors():
    refused(TypeError, "state_indices", state_indices=np.array([4.0, 1.0], np.float32))
    refused(ValueError, "state_indices", state_indices=np.array([4, 4], np.int32))
    refused(ValueError, "state_indices", state_indices=np.array([4, 6], np.int64))
    refused(ValueError, "state_indices", state_indices=np.array([4, 1, 2], np.int32))
    refused(ValueError, "has_initial_state", has_initial_state=np.array([1, 2], np.int32))
    refused(ValueError, "has_initial_state", has_initial_state=np.array([1], np.int32))
    refused(ValueError, "new_state", new_state=np.zeros((6, 8, D, D), np.float32))
    refused(ValueError, "state", state=np.zeros((6, 8, D, 2 * D), np.float32)[..., ::2])  # inner dims strided
    q = decode_inputs(2, 4, 8, seed=60)[0]
    qt = np.ascontiguousarray(q.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    assert "contiguous()" in refused(ValueError, "q", q=qt)
    with pytest.raises(ValueError, match="'has_initial_state'"):
        gdn.decode(*decode_inputs(2, 4, 8), has_initial_state=np.ones(2, np.int32))  # needs a pool
    x = list(decode_inputs(2, 4, 8))
    x[3] = np.zeros((2, 2, 8, D, D), np.float32)[:, 0]  # a strided state without indices
    with pytest.raises(ValueError, match="'state'.*state_indices"):
        gdn.decode(*x)


def test_mtp_slot_errors():
    q, k, v, pool, _, A_log, a, dt_bias, b = mtp_inputs(2, 2, 6, 4, 8, seed=63)
    slots, acc = np.array([[1, 2], [3, 4]], np.int32), np.array([2, 1], np.int32)
    call = lambda **kw: gdn.mtp(q, k, v, pool, kw.pop("idx", slots), A_log, a, dt_bias, b, **kw)
    before = pool.copy()
    for kw, cls, arg in [
        (dict(num_accepted_tokens=np.array([0, 1], np.int32)), ValueError, "num_accepted_tokens"),
        (dict(num_accepted_tokens=np.array([3, 1], np.int32)), ValueError, "num_accepted_tokens"),
        (dict(num_accepted_tokens=acc.astype(np.int64)), TypeError, "num_accepted_tokens"),
        (dict(idx=np.array([[1, 2], [2, 4]], np.int32), num_accepted_tokens=acc), ValueError, "initial_state_indices"),
        (dict(idx=np.array([1, 2], np.int32), num_accepted_tokens=acc), ValueError, "num_accepted_tokens"),
        (dict(idx=np.array([[1, -1], [3, 4]], np.int32), num_accepted_tokens=acc), ValueError,
         "initial_state_indices"),  # request 0 reads slot [0, 1], which is padding
    ]:
        with pytest.raises(cls, match=f"'{arg}'"):
            call(**kw)
        assert np.array_equal(pool, before)
    call(idx=np.array([1, 0], np.int32), pad="null-slot")  # padding by the rule in the definition mode too
    assert np.array_equal(pool, before)
    with pytest.raises(ValueError, match="'intermediate_states_buffer'"):
        call(num_accepted_tokens=acc, intermediate_states_buffer=np.zeros((6, 2, 8, D, D), np.float32))


def test_index_tensor_on_another_device():
    names = ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b"]
    x = list(zip(names, decode_inputs(2, 4, 8)))
    extra = [None] * 8
    extra[3] = (4096, (2,), (1,), "int32", 0)  # state_indices on cuda:0, everything else on the host
    with pytest.raises(ValueError, match="'state_indices'.*one device"):
        _gdn.plan("decode", fake_descs(x, lambda n: -1), None, False, None, None, tuple(extra), None)


def test_device_alignment_rules():
    """On a device, q/k/v/state/outputs and gates need 16-byte addresses (vector loads); the serving index
    tensors, read one element at a time, only element alignment (slices of an engine's index buffers)."""
    names = ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b"]
    x = list(zip(names, decode_inputs(2, 4, 8)))
    descs = fake_descs(x, lambda n: 0)
    descs[3] = (4096, (5, 8, D, D), (8 * D * D, D * D, D, 1), "float32", 0)  # a pool of 5
    extra = [None] * 8
    extra[3] = (4100, (2,), (1,), "int32", 0)                            # state_indices at +4 bytes: fine
    extra[4] = (4104, (2,), (1,), "int32", 0)                            # has_initial_state at +8: fine
    plan = _gdn.plan("decode", descs, None, False, None, None, tuple(extra), None)
    assert plan.device == 0 and tuple(plan.state_shape) == (5, 8, D, D)
    extra[3] = (4098, (2,), (1,), "int32", 0)
    with pytest.raises(ValueError, match="'state_indices'.*4-byte aligned"):
        _gdn.plan("decode", descs, None, False, None, None, tuple(extra), None)
    extra[3] = (4100, (2,), (1,), "int32", 0)
    descs[0] = (4100,) + tuple(descs[0][1:])
    with pytest.raises(ValueError, match="'q'.*16-byte aligned"):
        _gdn.plan("decode", descs, None, False, None, None, tuple(extra), None)
