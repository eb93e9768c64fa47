"""CPU tests of the `gdn` Python module (run in CI: no GPU, no torch; NumPy + ml_dtypes).

Checks the CPU backend against a NumPy float64 reference written here from the definitions' math, every
validation error class (TypeError / ValueError naming the argument), and that a missing GPU is a clear
RuntimeError.
"""
import math

import ml_dtypes
import numpy as np
import pytest

import gdn
from gdn import _gdn

BF16 = ml_dtypes.bfloat16
HEADS = [(4, 8), (2, 8), (16, 32)]
D = 128


# ------------------------------------------------------------------ float64 reference (the definitions' recurrence)
def ref_seq(q, k, v, S, A_log, a, dt_bias, b, scale, inter=None):
    """One sequence, token-major: q,k [T,H,D], v [T,HV,D], a,b [T,HV], S [HV,V,K] float64 (updated).
    Returns out [T,HV,D] float64 and the final state; inter (if given) receives the state after each token."""
    f = lambda x: np.asarray(x).astype(np.float64)
    q, k, v, a, b = f(q), f(k), f(v), f(a), f(b)
    H, HV = q.shape[1], v.shape[1]
    g = np.exp(-np.exp(f(A_log)) * np.logaddexp(0.0, a + f(dt_bias)))
    beta = 1.0 / (1.0 + np.exp(-b))
    out = np.zeros(v.shape)
    for t in range(q.shape[0]):
        qq = np.repeat(q[t], HV // H, axis=0)
        kk = np.repeat(k[t], HV // H, axis=0)
        S = g[t][:, None, None] * S
        u = np.einsum("hvk,hk->hv", S, kk)
        delta = beta[t][:, None] * (v[t] - u)
        S = S + delta[:, :, None] * kk[:, None, :]
        out[t] = scale * np.einsum("hvk,hk->hv", S, qq)
        if inter is not None:
            inter[t] = S
    return out, S


def _scale(scale):
    return 1.0 / math.sqrt(D) if scale is None or scale == 0 else scale


def ref_prefill(q, k, v, state, A_log, a, dt_bias, b, cu, scale):
    N, HV = len(cu) - 1, v.shape[1]
    out = np.zeros(v.shape)
    ns = np.zeros((N, HV, D, D))
    for n in range(N):
        s0, s1 = cu[n], cu[n + 1]
        if s1 == s0:
            continue  # the definition skips empty sequences: their new_state row stays zero
        S = np.zeros((HV, D, D)) if state is None else state[n].astype(np.float64)
        out[s0:s1], ns[n] = ref_seq(q[s0:s1], k[s0:s1], v[s0:s1], S, A_log, a[s0:s1], dt_bias, b[s0:s1],
                                    _scale(scale))
    return out, ns


def ref_decode(q, k, v, state, A_log, a, dt_bias, b, scale):
    B = q.shape[0]
    cu = np.arange(B + 1)
    out, ns = ref_prefill(q[:, 0], k[:, 0], v[:, 0], state, A_log, a[:, 0], dt_bias, b[:, 0], cu, scale)
    return out[:, None], ns


def ref_mtp(q, k, v, pool, idx, A_log, a, dt_bias, b, scale, inter=None, serving=False):
    """Returns (output, final pool, intermediate buffer) in float64."""
    B, T, HV = q.shape[0], q.shape[1], v.shape[2]
    out = np.zeros(v.shape)
    fin = pool.astype(np.float64).copy()
    ib = None if inter is None else inter.astype(np.float64).copy()
    for r in range(B):
        i = int(idx[r])
        if i < 0:
            continue
        it = np.zeros((T, HV, D, D)) if ib is not None else None
        out[r], S = ref_seq(q[r], k[r], v[r], pool[i].astype(np.float64), A_log, a[r], dt_bias, b[r],
                            _scale(scale), it)
        if ib is not None:
            ib[i] = it
        if serving:
            fin[i] = S
    return out, fin, ib


# ------------------------------------------------------------------ inputs and comparison
def rnd(seed):
    return np.random.default_rng(seed)


def normed(r, *shape):
    x = r.standard_normal(shape)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(BF16)


def gates(r, HV, lead):
    A_log = np.log(r.random(HV) * 15 + 1).astype(np.float32)
    dt_bias = r.standard_normal(HV).astype(np.float32)
    a = r.standard_normal(lead + (HV,)).astype(BF16)
    b = r.standard_normal(lead + (HV,)).astype(BF16)
    return A_log, a, dt_bias, b


def decode_inputs(B, H, HV, seed=0, raw=True, state_dtype=np.float32, with_state=True):
    r = rnd(seed)
    if raw:  # the contest's random workloads: randn q/k, not normalised (|k|^2 ~ 128)
        q = r.standard_normal((B, 1, H, D)).astype(BF16)
        k = r.standard_normal((B, 1, H, D)).astype(BF16)
    else:
        q, k = normed(r, B, 1, H, D), normed(r, B, 1, H, D)
    v = r.standard_normal((B, 1, HV, D)).astype(BF16)
    state = (0.1 * r.standard_normal((B, HV, D, D))).astype(state_dtype) if with_state else None
    A_log, a, dt_bias, b = gates(r, HV, (B, 1))
    return q, k, v, state, A_log, a, dt_bias, b


def prefill_inputs(lens, H, HV, seed=0, state_dtype=np.float32, with_state=True):
    r = rnd(seed)
    T, N = sum(lens), len(lens)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    q, k = normed(r, T, H, D), normed(r, T, H, D)
    v = r.standard_normal((T, HV, D)).astype(BF16)
    state = (0.1 * r.standard_normal((N, HV, D, D))).astype(state_dtype) if with_state else None
    A_log, a, dt_bias, b = gates(r, HV, (T,))
    return q, k, v, state, A_log, a, dt_bias, b, cu


def mtp_inputs(B, T, pool, H, HV, seed=0, state_dtype=np.float32):
    r = rnd(seed)
    q, k = normed(r, B, T, H, D), normed(r, B, T, H, D)
    v = r.standard_normal((B, T, HV, D)).astype(BF16)
    st = (0.1 * r.standard_normal((pool, HV, D, D))).astype(state_dtype)
    idx = r.permutation(pool)[:B].astype(np.int32)
    A_log, a, dt_bias, b = gates(r, HV, (B, T))
    return q, k, v, st, idx, A_log, a, dt_bias, b


def check_close(x, y, what, rel_l2):
    """Contest rule (fail only if |x-y| > 1e-2 and |x-y|/(|y|+1e-8) > 1e-2), finiteness, and a rel-L2 bound."""
    x = np.asarray(x).astype(np.float64)
    y = np.asarray(y, dtype=np.float64)
    assert x.shape == y.shape, f"{what}: shape {x.shape} vs {y.shape}"
    assert np.isfinite(x).all(), f"{what}: {np.count_nonzero(~np.isfinite(x))} non-finite values"
    d = np.abs(x - y)
    bad = (d > 1e-2) & (d / (np.abs(y) + 1e-8) > 1e-2)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, d, 0)), d.shape)
        pytest.fail(f"{what}: {bad.sum()} elements out of tolerance; worst at {i}: {x[i]} vs {y[i]}")
    rel = np.linalg.norm(x - y) / (np.linalg.norm(y) + 1e-30)
    assert rel <= rel_l2, f"{what}: rel-L2 {rel:.2e} > {rel_l2:.0e}"


OUT_L2 = 8e-3  # bf16 output rounding (2^-9 relative) plus fp32 math
STATE_L2 = {np.float32: 1e-5, BF16: 8e-3}


# ------------------------------------------------------------------ numerics
def test_import():
    assert isinstance(gdn.__version__, str)
    assert callable(gdn.decode) and callable(gdn.prefill) and callable(gdn.mtp)


@pytest.mark.parametrize("H,HV", HEADS)
@pytest.mark.parametrize("scale", [None, 0.0, 0.05])
@pytest.mark.parametrize("B", [1, 3])
def test_decode(H, HV, scale, B):
    x = decode_inputs(B, H, HV, seed=B)
    o, ns = gdn.decode(*x, scale)
    ro, rs = ref_decode(*x, scale)
    assert o.dtype == BF16 and o.shape == (B, 1, HV, D)
    assert ns.dtype == np.float32 and ns.shape == (B, HV, D, D)
    check_close(o, ro, "output", OUT_L2)
    check_close(ns, rs, "new_state", STATE_L2[np.float32])


@pytest.mark.parametrize("H,HV", HEADS)
def test_decode_zero_state_and_normalised(H, HV):
    x = decode_inputs(4, H, HV, seed=7, raw=False, with_state=False)
    o, ns = gdn.decode(*x)
    ro, rs = ref_decode(*x, None)
    check_close(o, ro, "output", OUT_L2)
    check_close(ns, rs, "new_state", STATE_L2[np.float32])


def test_decode_in_place_and_given_outputs():
    x = list(decode_inputs(3, 4, 8, seed=3))
    ro, rs = ref_decode(*x, None)
    state = x[3]
    out = np.full((3, 1, 8, D), np.nan, dtype=BF16)
    o, ns = gdn.decode(*x, output=out, new_state=state)
    assert o is out and ns is state
    check_close(out, ro, "output", OUT_L2)
    check_close(state, rs, "new_state (in place)", STATE_L2[np.float32])


@pytest.mark.parametrize("H,HV", HEADS)
def test_decode_bf16_state(H, HV):
    x = decode_inputs(3, H, HV, seed=11, state_dtype=BF16)
    o, ns = gdn.decode(*x)
    ro, rs = ref_decode(*x, None)
    assert ns.dtype == BF16
    check_close(o, ro, "output", OUT_L2)
    check_close(ns, rs, "new_state bf16", STATE_L2[BF16])


LENS = [0, 1, 63, 64, 65]


@pytest.mark.parametrize("H,HV", HEADS)
@pytest.mark.parametrize("scale", [None, 0.0, 0.07])
def test_prefill(H, HV, scale):
    x = prefill_inputs(LENS, H, HV, seed=5)
    o, ns = gdn.prefill(*x, scale)
    ro, rs = ref_prefill(*x, scale)
    assert o.shape == (sum(LENS), HV, D) and ns.shape == (len(LENS), HV, D, D)
    check_close(o, ro, "output", OUT_L2)
    check_close(ns, rs, "new_state", STATE_L2[np.float32])
    assert not ns[0].any(), "a zero-length sequence leaves its new_state row zero"


def test_prefill_zero_state_in_place_bf16():
    x = prefill_inputs([65, 0, 3], 4, 8, seed=6, with_state=False)
    o, ns = gdn.prefill(*x)
    ro, rs = ref_prefill(*x, None)
    check_close(o, ro, "output (state None)", OUT_L2)
    check_close(ns, rs, "new_state (state None)", STATE_L2[np.float32])

    x = list(prefill_inputs([2, 64, 1], 2, 8, seed=8))
    ro, rs = ref_prefill(*x, None)
    st = x[3]
    o, ns = gdn.prefill(*x, new_state=st)
    assert ns is st
    check_close(st, rs, "new_state (in place)", STATE_L2[np.float32])

    x = prefill_inputs([5, 64], 4, 8, seed=9, state_dtype=BF16)
    o, ns = gdn.prefill(*x)
    ro, rs = ref_prefill(*x, None)
    assert ns.dtype == BF16
    check_close(o, ro, "output (bf16 state)", OUT_L2)
    check_close(ns, rs, "new_state (bf16 state)", STATE_L2[BF16])


def test_prefill_length_hint():
    # max_seqlen steers the CUDA plan only: any value up to T gives the same results; above T it is refused
    x = prefill_inputs([70, 3, 0, 20], 4, 8, seed=21)
    ro, rs = ref_prefill(*x, None)
    for hint in (None, 70, 1, 93):
        o, ns = gdn.prefill(*x, max_seqlen=hint)
        check_close(o, ro, f"output (max_seqlen={hint})", OUT_L2)
        check_close(ns, rs, f"new_state (max_seqlen={hint})", STATE_L2[np.float32])
    with pytest.raises(ValueError, match="argument 'max_seqlen': 94 exceeds the 93 tokens"):
        gdn.prefill(*x, max_seqlen=94)
    with pytest.raises(TypeError, match="max_seqlen"):
        gdn.prefill(*x, max_seqlen=True)
    with pytest.raises(TypeError, match="max_seqlen"):
        gdn.prefill(*x, max_seqlen=70.0)


def test_prefill_no_sequences():
    x = prefill_inputs([], 4, 8, seed=1)
    o, ns = gdn.prefill(*x)
    assert o.shape == (0, 8, D) and ns.shape == (0, 8, D, D)


@pytest.mark.parametrize("H,HV", HEADS)
@pytest.mark.parametrize("with_inter", [False, True])
def test_mtp_definition_mode(H, HV, with_inter):
    B, T, pool = 3, 4, 5
    x = mtp_inputs(B, T, pool, H, HV, seed=12)
    pool0 = x[3].copy()
    inter = np.full((pool, T, HV, D, D), 7.0, dtype=np.float32) if with_inter else None
    o, fin = gdn.mtp(*x, None, inter)
    ro, rfin, ri = ref_mtp(*x, None, inter)
    assert fin is x[3], "definition mode returns the pool itself"
    assert np.array_equal(x[3], pool0), "definition mode leaves the pool untouched"
    check_close(o, ro, "output", OUT_L2)
    if with_inter:
        check_close(inter, ri, "intermediate_states_buffer", STATE_L2[np.float32])
        untouched = sorted(set(range(pool)) - set(x[4].tolist()))
        assert (inter[untouched] == 7.0).all(), "rows of unused pool slots keep their values"


@pytest.mark.parametrize("state_dtype", [np.float32, BF16])
def test_mtp_serving_padding(state_dtype):
    B, T, pool = 4, 3, 6
    x = list(mtp_inputs(B, T, pool, 4, 8, seed=13, state_dtype=state_dtype))
    x[4] = np.array([3, -1, 0, 5], dtype=np.int32)
    inter = np.zeros((pool, T, 8, D, D), dtype=np.float32)
    ro, rfin, ri = ref_mtp(*x, 0.0, inter, serving=True)
    pool_ref = x[3]
    o, fin = gdn.mtp(*x, 0.0, inter, update_pool=True)
    assert fin is pool_ref
    assert not o[1].astype(np.float32).any(), "padding request: output rows are zero"
    check_close(o, ro, "output", OUT_L2)
    check_close(fin, rfin, "final_state (pool)", STATE_L2[state_dtype])
    check_close(inter, ri, "intermediate_states_buffer", STATE_L2[np.float32])


def test_mtp_given_output():
    x = mtp_inputs(2, 2, 2, 4, 8, seed=14)
    out = np.empty((2, 2, 8, D), dtype=BF16)
    o, _ = gdn.mtp(*x, output=out)
    assert o is out
    check_close(out, ref_mtp(*x, None)[0], "output", OUT_L2)


# ------------------------------------------------------------------ validation errors
def decode_args(**over):
    names = ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b"]
    d = dict(zip(names, decode_inputs(2, 4, 8, seed=1)))
    d.update(over)
    return d


def call_decode(**over):
    d = decode_args(**over)
    kw = {n: d.pop(n) for n in ("output", "new_state", "scale") if n in d}
    return gdn.decode(*d.values(), **kw)


def err(cls, arg, fn, **over):
    with pytest.raises(cls) as e:
        fn(**over)
    assert f"'{arg}'" in str(e.value), str(e.value)
    return str(e.value)


@pytest.mark.parametrize("arg,bad", [
    ("q", np.float32), ("k", np.float16), ("v", np.float32), ("state", np.float64), ("A_log", BF16),
    ("a", np.float32), ("dt_bias", np.float64), ("b", np.int32),
])
def test_decode_wrong_dtype(arg, bad):
    d = decode_args()
    msg = err(TypeError, arg, call_decode, **{arg: d[arg].astype(bad)})
    assert msg.startswith("gdn.decode: argument") and "expected dtype" in msg


def test_decode_output_errors():
    err(TypeError, "output", call_decode, output=np.empty((2, 1, 8, D), np.float32))
    err(ValueError, "output", call_decode, output=np.empty((2, 1, 8, 64), BF16))
    err(TypeError, "new_state", call_decode, new_state=np.empty((2, 8, D, D), BF16))
    err(ValueError, "new_state", call_decode, new_state=np.empty((3, 8, D, D), np.float32))
    ro = np.empty((2, 1, 8, D), BF16)
    ro.flags.writeable = False
    err(ValueError, "output", call_decode, output=ro)


def test_decode_shape_errors():
    d = decode_args()
    err(ValueError, "k", call_decode, k=d["k"][:1])
    err(ValueError, "q", call_decode, q=d["q"][:, 0])
    err(ValueError, "v", call_decode, v=np.zeros((2, 1, 6, D), BF16))  # 6 value heads for 4 q heads
    err(ValueError, "state", call_decode, state=d["state"][:, :, :64])
    err(ValueError, "A_log", call_decode, A_log=d["A_log"][:4])
    err(ValueError, "b", call_decode, b=d["b"][:, :, :3])
    err(ValueError, "q", call_decode, q=np.zeros((2, 2, 4, D), BF16))  # decode has seq_len 1


def test_validation_is_not_reused_across_metadata():
    # The binding reuses the last validation of an op when shapes, strides, dtypes, devices and alignment all
    # match (memo.rs). Between good calls, every kind of change must still be caught.
    d = decode_args()
    call_decode()
    err(TypeError, "A_log", call_decode, A_log=d["A_log"].astype(BF16))
    call_decode()
    err(ValueError, "state", call_decode, state=np.zeros((2, 8, D, 2 * D), np.float32)[..., ::2])
    call_decode()
    odd = np.zeros(2 * 2 * 8 + 1, np.uint8)[1:].view(BF16).reshape(2, 1, 8)  # bf16 at an odd address
    assert "aligned" in err(ValueError, "a", call_decode, a=odd)
    call_decode()
    err(ValueError, "k", call_decode, k=d["k"][:1])
    o, s = call_decode()
    o2, s2 = call_decode()
    assert np.array_equal(o, o2) and np.array_equal(s, s2)


def test_contiguity_errors():
    d = decode_args()
    kt = np.ascontiguousarray(d["k"].transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    msg = err(ValueError, "k", call_decode, k=kt)
    assert "contiguous" in msg
    st = np.zeros((2, 8, D, 2 * D), np.float32)[..., ::2]
    err(ValueError, "state", call_decode, state=st)


def test_non_array_and_scale_errors():
    d = decode_args()
    err(TypeError, "v", call_decode, v=d["v"].tolist())
    err(TypeError, "scale", call_decode, scale="big")
    err(ValueError, "scale", call_decode, scale=float("nan"))
    with pytest.raises(ValueError, match="'q'"):
        call_decode(q=None)


def prefill_call(**over):
    names = ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "cu_seqlens"]
    d = dict(zip(names, prefill_inputs([3, 0, 4], 4, 8, seed=2)))
    d.update(over)
    return gdn.prefill(*d.values())


def test_prefill_errors():
    err(TypeError, "cu_seqlens", prefill_call, cu_seqlens=np.array([0, 3, 3, 7], np.int16))  # int64 or int32
    err(ValueError, "cu_seqlens", prefill_call, cu_seqlens=np.array([1, 3, 3, 7], np.int64))
    err(ValueError, "cu_seqlens", prefill_call, cu_seqlens=np.array([0, 3, 2, 7], np.int64))
    err(ValueError, "cu_seqlens", prefill_call, cu_seqlens=np.array([0, 3, 3, 6], np.int64))
    err(ValueError, "state", prefill_call, cu_seqlens=np.array([0, 3, 7], np.int64))
    err(ValueError, "k", prefill_call, k=np.zeros((6, 4, D), BF16))


def mtp_call(**over):
    names = ["q", "k", "v", "initial_state", "initial_state_indices", "A_log", "a", "dt_bias", "b"]
    d = dict(zip(names, mtp_inputs(3, 2, 4, 4, 8, seed=3)))
    kw = {n: over.pop(n) for n in ("intermediate_states_buffer", "update_pool") if n in over}
    d.update(over)
    return gdn.mtp(*d.values(), **kw)


def test_mtp_errors():
    idx = lambda *i: np.array(i, np.int32)
    err(TypeError, "initial_state_indices", mtp_call, initial_state_indices=idx(0, 1, 2).astype(np.int64))
    err(ValueError, "initial_state_indices", mtp_call, initial_state_indices=idx(0, 1, 4))
    mtp_call(initial_state_indices=idx(0, -1, 2))  # a negative index is padding in both modes
    inter = np.zeros((4, 2, 8, D, D), np.float32)
    err(ValueError, "initial_state_indices", mtp_call, initial_state_indices=idx(0, 2, 2),
        intermediate_states_buffer=inter)
    err(ValueError, "initial_state_indices", mtp_call, initial_state_indices=idx(1, 1, 2), update_pool=True)
    mtp_call(initial_state_indices=idx(1, 1, 2))  # duplicates are fine when nothing is written per row
    err(TypeError, "intermediate_states_buffer", mtp_call, intermediate_states_buffer=inter.astype(BF16))
    err(ValueError, "intermediate_states_buffer", mtp_call, intermediate_states_buffer=inter[:, :1])
    r = rnd(0)
    err(ValueError, "q", mtp_call, q=normed(r, 3, 1, 4, D), k=normed(r, 3, 1, 4, D),
        v=np.zeros((3, 1, 8, D), BF16), a=np.zeros((3, 1, 8), BF16), b=np.zeros((3, 1, 8), BF16))
    with pytest.raises(ValueError, match="'initial_state'"):
        mtp_call(initial_state=None)


def fake_descs(op_inputs, device_of):
    """Descriptors for _gdn.plan (definition order) with fake, never dereferenced addresses."""
    out = []
    for n, x in op_inputs:
        isz = x.dtype.itemsize
        out.append((4096, x.shape, tuple(s // isz for s in x.strides), x.dtype.name, device_of(n)))
    return out


def test_mixed_devices_and_missing_gpu():
    names = ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b"]
    x = list(zip(names, decode_inputs(2, 4, 8)))
    with pytest.raises(ValueError, match="'k'.*one device"):
        _gdn.plan("decode", fake_descs(x, lambda n: -1 if n == "q" else 0))
    # Everything "on cuda:0": validation passes; running needs the GPU runtime, absent here -> RuntimeError.
    plan = _gdn.plan("decode", fake_descs(x, lambda n: 0))
    assert plan.device == 0 and tuple(plan.output_shape) == (2, 1, 8, D)
    o = (8192, (2, 1, 8, D), (8 * D, 8 * D, D, 1), "bfloat16", 0)
    s = (16384, (2, 8, D, D), (8 * D * D, D * D, D, 1), "float32", 0)
    reason = gdn.cuda_unavailable_reason()
    if reason is None:
        pytest.skip("a GPU is present: the fake device addresses must not be launched on")
    assert isinstance(reason, str) and reason
    with pytest.raises(RuntimeError):
        plan.run(o, s, 0)


def test_workspace_only_on_cuda():
    names = ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "cu_seqlens"]
    x = list(zip(names, prefill_inputs([5, 700], 4, 8)))
    host = _gdn.plan("prefill", fake_descs(x, lambda n: -1))
    assert host.workspace_bytes == 0  # the CPU backend needs no scratch
    plan = _gdn.plan("prefill", fake_descs(x, lambda n: 0))
    o = (8192, (705, 8, D), (8 * D, D, 1), "bfloat16", 0)
    s = (16384, (2, 8, D, D), (8 * D * D, D * D, D, 1), "float32", 0)
    w = (32768, (64,), (1,), "float32", 0)
    with pytest.raises(TypeError, match="'workspace'.*uint8"):
        plan.run(o, s, 0, w)
    with pytest.raises(ValueError, match="'workspace'.*device"):
        plan.run(o, s, 0, (32768, (64,), (1,), "uint8", 1))
    if gdn.cuda_unavailable_reason() is None:
        pytest.skip("a GPU is present: the fake device addresses must not be launched on")
    with pytest.raises(RuntimeError):
        plan.workspace_bytes  # opening the (absent) GPU fails with the reason


# ------------------------------------------------------------------ q, k, v and output as strided views
def fused_qkv(q, k, v, pad=0):
    """q, k, v copied into one fused projection buffer (vLLM's mixed_qkv: per token [q heads | k heads | v heads]
    and `pad` spare elements) and returned as views of it, with the buffer."""
    lead, H, HV = q.shape[:-2], q.shape[-2], v.shape[-2]
    mixed = np.full(lead + ((2 * H + HV) * D + pad,), np.nan, dtype=BF16)
    parts = []
    for x, start, n in ((q, 0, H), (k, H * D, H), (v, 2 * H * D, HV)):
        mixed[..., start:start + n * D] = x.reshape(lead + (n * D,))
        view = mixed[..., start:start + n * D].reshape(lead + (n, D))
        assert np.shares_memory(view, mixed) and not view.flags.c_contiguous
        parts.append(view)
    return parts, mixed


def out_view(shape, extra_heads=1):
    """An output view [.., HV, D] of a guard-filled buffer with `extra_heads` spare rows after each token's."""
    buf = np.full(shape[:-2] + (shape[-2] + extra_heads, D), 7.0, dtype=BF16)
    return buf[..., :shape[-2], :], buf


@pytest.mark.parametrize("op", ["decode", "prefill", "mtp"])
def test_strided_views_match_the_dense_call(op):
    if op == "decode":
        x = list(decode_inputs(3, 4, 8, seed=60))
        fn = gdn.decode
    elif op == "prefill":
        x = list(prefill_inputs([5, 0, 70], 4, 8, seed=61))
        fn = gdn.prefill
    else:
        x = list(mtp_inputs(3, 4, 5, 2, 8, seed=62))
        fn = gdn.mtp
    o_dense, s_dense = fn(*[np.copy(t) if isinstance(t, np.ndarray) else t for t in x])
    (q, k, v), mixed = fused_qkv(*x[:3], pad=8)
    out, buf = out_view(o_dense.shape)
    o, s = fn(q, k, v, *x[3:], output=out)
    assert o is out
    assert np.array_equal(out, o_dense) and np.array_equal(s, s_dense)
    assert (buf[..., 8:, :].astype(np.float32) == 7.0).all(), "the gaps of the output view keep their values"
    assert np.isnan(mixed[..., -8:].astype(np.float32)).all(), "the inputs are not written"


def test_strided_views_head_major_output_and_broadcast_head():
    x = list(prefill_inputs([3, 64], 4, 8, seed=63))
    T = x[0].shape[0]
    q1 = np.copy(x[0][:, :1])
    qb = np.broadcast_to(q1, x[0].shape)  # head stride 0: every head reads the same row (a legal read)
    assert qb.strides[1] == 0
    o_dense, s_dense = gdn.prefill(np.ascontiguousarray(qb), *x[1:])
    buf = np.full((8, T + 1, D), 7.0, dtype=BF16)  # head-major: [HV, T + 1, D] seen as [T, HV, D]
    out = buf[:, :T].transpose(1, 0, 2)
    o, s = gdn.prefill(qb, *x[1:], output=out)
    assert np.array_equal(out, o_dense) and np.array_equal(s, s_dense)
    assert (buf[:, T].astype(np.float32) == 7.0).all()


def test_strided_view_errors():
    d = decode_args()
    q, k, v = d["q"], d["k"], d["v"]
    (fq, fk, fv), _ = fused_qkv(q, k, v, pad=4)  # token stride (2H + HV)·D + 4: not 16-byte rows
    msg = err(ValueError, "q", call_decode, q=fq, k=fk, v=fv)
    assert "token stride 2052 elements breaks 16-byte alignment" in msg, msg
    kt = np.ascontiguousarray(k.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    assert "last dimension (head size) must be contiguous" in err(ValueError, "k", call_decode, k=kt)
    assert "non-negative" in err(ValueError, "v", call_decode, v=v[::-1])
    # an output whose rows overlap: token stride 64 elements for 8 heads of 128
    base = np.zeros(4096, dtype=BF16)
    bad = np.lib.stride_tricks.as_strided(base, (2, 1, 8, D), (128, 128, 256, 2))
    assert "rows overlap" in err(ValueError, "output", call_decode, output=bad)
    zero = np.lib.stride_tricks.as_strided(base, (2, 1, 8, D), (0, 0, 256, 2))
    assert "rows overlap" in err(ValueError, "output", call_decode, output=zero)
    # MTP: the batch stride must be T token strides (token t of request b is row b·T + t)
    x = list(mtp_inputs(3, 2, 4, 4, 8, seed=64))
    wide = np.zeros((3, 3, 4, D), dtype=BF16)
    wide[:, :2] = x[0]
    with pytest.raises(ValueError, match="'q': batch stride 1536 must be seq_len x token stride"):
        gdn.mtp(wide[:, :2], *x[1:])


def test_strided_views_on_cuda_validate_before_launch():
    # fake CUDA descriptors: the view rules are checked when the call is planned (no GPU needed)
    names = ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b"]
    x = list(zip(names, decode_inputs(2, 4, 8)))
    W = (2 * 4 + 8) * D
    descs = fake_descs(x, lambda n: 0)
    for i, (n, heads) in enumerate((("q", 4), ("k", 4), ("v", 8))):
        descs[i] = (4096 + 2 * i * 4 * D, (2, 1, heads, D), (W, W, D, 1), "bfloat16", 0)
    plan = _gdn.plan("decode", descs)  # q, k, v as views of one fused buffer
    assert tuple(plan.output_shape) == (2, 1, 8, D)
    descs[0] = (4096, (2, 1, 4, D), (W + 4, W + 4, D, 1), "bfloat16", 0)
    with pytest.raises(ValueError, match="'q': token stride 2052 elements breaks 16-byte alignment"):
        _gdn.plan("decode", descs)
    descs[0] = (4096 + 8, (2, 1, 4, D), (W, W, D, 1), "bfloat16", 0)  # the view's start: 16-byte aligned
    with pytest.raises(ValueError, match="'q': data address must be 16-byte aligned"):
        _gdn.plan("decode", descs)
    descs[0] = (4096, (2, 1, 4, D), (W, W, D, 1), "bfloat16", 0)
    plan = _gdn.plan("decode", descs)
    s = (16384, (2, 8, D, D), (8 * D * D, D * D, D, 1), "float32", 0)
    with pytest.raises(ValueError, match="'output': rows overlap"):
        plan.run((8192, (2, 1, 8, D), (64, 64, D, 1), "bfloat16", 0), s, 0)
