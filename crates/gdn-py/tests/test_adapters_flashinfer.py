"""gdn.flashinfer (FlashInfer 0.7.2's chunk_gated_delta_rule, gated_delta_rule_decode_pretranspose,
gated_delta_rule_decode, gated_delta_rule_mtp) on torch CPU tensors against the float64 reference of
test_adapters_fla.py. FlashInfer itself needs a GPU (its kernels are CUDA only); the comparison against it runs
on the GPU machine.

Run: pytest crates/gdn-py/tests/test_adapters_flashinfer.py (needs torch and the gdn wheel)."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import gdn.flashinfer as gfi  # noqa: E402
from test_adapters_fla import check_close, reference  # noqa: E402

D = 64  # the CPU backend takes 64 or 128; the CUDA kernels 128


def tokens(T, H, HV, seed, d=D):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, H, d, generator=gen).bfloat16()
    k = F.normalize(torch.randn(T, H, d, generator=gen), dim=-1).bfloat16()
    v = torch.randn(T, HV, d, generator=gen).bfloat16()
    return q, k, v


def kl(S):
    """k-last [.., V, K] <-> K-first [.., K, V]"""
    return S.transpose(-1, -2)


def prefill_gates(T, HV, seed):
    gen = torch.Generator().manual_seed(seed)
    alpha = torch.exp(F.logsigmoid(torch.randn(T, HV, generator=gen) + 3.0))
    beta = torch.rand(T, HV, generator=gen)
    return alpha, beta


# ---------------------------------------------------------------------------------------------------------------
# chunk_gated_delta_rule

def test_prefill_float16():
    """float16 q, k, v (FlashInfer takes float16 or bfloat16): the output in float16, a float32 state."""
    cu = torch.tensor([0, 9, 30], dtype=torch.int32)
    T, N, H, HV = 30, 2, 2, 4
    q, k, v = (x.half() for x in tokens(T, H, HV, seed=5))
    alpha, beta = prefill_gates(T, HV, 6)
    h0 = torch.randn(N, HV, D, D) * 0.1
    o, s = gfi.chunk_gated_delta_rule(q, k, v, alpha, beta, initial_state=h0, output_final_state=True,
                                      cu_seqlens=cu)
    assert o.dtype == torch.float16 and s.dtype == torch.float32
    ro, rs = reference(q, k, v, torch.log(alpha), beta, h0=kl(h0), cu=cu.tolist())
    check_close(o, ro, "output (float16)")
    for n in range(N):
        check_close(kl(s[n]), rs[n], f"final state {n} (float16 inputs)", rel=1e-4, tol=1e-4)


@pytest.mark.parametrize("cu_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("H,HV", [(2, 2), (2, 4), (1, 4)])
@pytest.mark.parametrize("norm", [False, True])
def test_prefill(cu_dtype, H, HV, norm):
    lens = [9, 0, 33, 2]
    cu = torch.tensor([0, 9, 9, 42, 44], dtype=cu_dtype)
    T, N = 44, len(lens)
    q, k, v = tokens(T, H, HV, seed=H * 7 + HV)
    alpha, beta = prefill_gates(T, HV, 3)
    h0 = torch.randn(N, HV, D, D) * 0.1  # k-last
    o, s = gfi.chunk_gated_delta_rule(q, k, v, alpha, beta, initial_state=h0, output_final_state=True,
                                      cu_seqlens=cu, use_qk_l2norm_in_kernel=norm)
    assert o.shape == (T, HV, D) and o.dtype == torch.bfloat16
    assert s.shape == (N, HV, D, D) and s.dtype == torch.float32
    ro, rs = reference(q, k, v, torch.log(alpha), beta, h0=kl(h0), cu=cu.tolist(), qk_norm=norm)
    check_close(o, ro, "output")
    for n in (0, 2, 3):
        check_close(kl(s[n]), rs[n], f"final state {n}", rel=1e-4, tol=1e-4)
    o_only = gfi.chunk_gated_delta_rule(q, k, v, alpha, beta, initial_state=h0, cu_seqlens=cu,
                                        use_qk_l2norm_in_kernel=norm)
    assert isinstance(o_only, torch.Tensor) and torch.equal(o_only, o)


def test_prefill_defaults_and_scale_zero():
    """g / beta None mean ones; scale None and 0 both mean 1/sqrt(K)."""
    T, HV = 12, 2
    q, k, v = tokens(T, 2, HV, seed=11)
    cu = torch.tensor([0, 5, 12])
    o1 = gfi.chunk_gated_delta_rule(q, k, v, cu_seqlens=cu)
    o2 = gfi.chunk_gated_delta_rule(q, k, v, cu_seqlens=cu, scale=0.0)
    ro, _ = reference(q, k, v, torch.zeros(T, HV), torch.ones(T, HV), cu=cu.tolist())
    check_close(o1, ro, "output")
    assert torch.equal(o1, o2)
    o3 = gfi.chunk_gated_delta_rule(q, k, v, cu_seqlens=cu, scale=0.25)
    ro3, _ = reference(q, k, v, torch.zeros(T, HV), torch.ones(T, HV), scale=0.25, cu=cu.tolist())
    check_close(o3, ro3, "output scale=0.25")


def test_prefill_destinations_and_dtypes():
    T, H, HV, N = 20, 2, 4, 2
    q, k, v = tokens(T, H, HV, seed=21)
    alpha, beta = prefill_gates(T, HV, 4)
    cu = torch.tensor([0, 8, 20])
    h0 = torch.randn(N, HV, D, D) * 0.1
    ro, rs = reference(q, k, v, torch.log(alpha), beta, h0=kl(h0), cu=cu.tolist())
    out = torch.empty(T, HV, D, dtype=torch.bfloat16)
    # float32 output_state destination
    st = torch.empty(N, HV, D, D)
    o, s = gfi.chunk_gated_delta_rule(q, k, v, alpha, beta, initial_state=h0, output_final_state=True,
                                      cu_seqlens=cu, output=out, output_state=st)
    assert o is out and s is st
    check_close(o, ro, "output")
    check_close(kl(s), rs, "state", rel=1e-4, tol=1e-4)
    # in place (output_state is initial_state)
    h = h0.clone()
    _, s = gfi.chunk_gated_delta_rule(q, k, v, alpha, beta, initial_state=h, output_final_state=True,
                                      cu_seqlens=cu, output_state=h)
    assert s is h
    check_close(kl(h), rs, "state in place", rel=1e-4, tol=1e-4)
    # float32 state into a bfloat16 output_state: computed in float32, rounded at the store
    sb = torch.empty(N, HV, D, D, dtype=torch.bfloat16)
    _, s = gfi.chunk_gated_delta_rule(q, k, v, alpha, beta, initial_state=h0, output_final_state=True,
                                      cu_seqlens=cu, output_state=sb)
    assert s is sb and s.dtype == torch.bfloat16
    check_close(kl(s), rs, "bf16 state", rel=1e-2, tol=1e-2)
    # bfloat16 initial state, no destination: a float32 final state
    _, s = gfi.chunk_gated_delta_rule(q, k, v, alpha, beta, initial_state=h0.bfloat16(), output_final_state=True,
                                      cu_seqlens=cu)
    assert s.dtype == torch.float32
    _, rs_b = reference(q, k, v, torch.log(alpha), beta, h0=kl(h0.bfloat16().float()), cu=cu.tolist())
    check_close(kl(s), rs_b, "state from bf16", rel=1e-4, tol=1e-4)


def test_prefill_state_pool():
    T, H, HV, pool = 30, 2, 4, 6
    q, k, v = tokens(T, H, HV, seed=31)
    alpha, beta = prefill_gates(T, HV, 5)
    cu = torch.tensor([0, 11, 30])
    idx = torch.tensor([4, 1], dtype=torch.int32)
    P = torch.randn(pool, HV, D, D) * 0.1
    P0 = P.clone()
    o, s = gfi.chunk_gated_delta_rule(q, k, v, alpha, beta, initial_state=P, output_final_state=True,
                                      cu_seqlens=cu, output_state=P, state_indices=idx)
    assert s is P
    ro, rs = reference(q, k, v, torch.log(alpha), beta, h0=kl(P0[idx.long()]), cu=cu.tolist())
    check_close(o, ro, "output")
    check_close(kl(P[idx.long()]), rs, "pool rows", rel=1e-4, tol=1e-4)
    untouched = [i for i in range(pool) if i not in (4, 1)]
    assert torch.equal(P[untouched], P0[untouched])
    # no initial state: every sequence starts from zeros, final states into the pool
    Q = torch.full((pool, HV, D, D), 7.0)
    o2 = gfi.chunk_gated_delta_rule(q, k, v, alpha, beta, cu_seqlens=cu, output_state=Q, state_indices=idx)
    ro2, rs2 = reference(q, k, v, torch.log(alpha), beta, cu=cu.tolist())
    check_close(o2, ro2, "output from zeros")
    check_close(kl(Q[idx.long()]), rs2, "pool rows from zeros", rel=1e-4, tol=1e-4)


def test_prefill_checkpoints():
    T, H, HV = 200, 1, 2
    q, k, v = tokens(T, H, HV, seed=41)
    alpha, beta = prefill_gates(T, HV, 6)
    cu = torch.tensor([0, 130, 200])  # 2 and 1 checkpoints every 64 tokens
    starts = torch.tensor([0, 2, 3], dtype=torch.int32)
    ck = torch.full((3, HV, D, D), -1.0)
    o, s = gfi.chunk_gated_delta_rule(q, k, v, alpha, beta, output_final_state=True, cu_seqlens=cu,
                                      state_checkpoints=ck, checkpoint_cu_starts=starts,
                                      checkpoint_every_n_tokens=64)
    for row, (a, b) in enumerate([(0, 64), (0, 128), (130, 194)]):
        _, rs = reference(q[a:b], k[a:b], v[a:b], torch.log(alpha[a:b]), beta[a:b])
        check_close(kl(ck[row]), rs[0], f"checkpoint {row}", rel=1e-4, tol=1e-4)


def test_prefill_errors():
    T, HV = 8, 4
    q, k, v = tokens(T, 2, HV, seed=51)
    cu = torch.tensor([0, 8])
    P = torch.zeros(3, HV, D, D)
    idx = torch.tensor([1], dtype=torch.int32)
    c = gfi.chunk_gated_delta_rule
    for call, match in [
        (lambda: c(q.float(), k.float(), v.float(), cu_seqlens=cu), "float32"),
        (lambda: c(torch.cat([q, q], 1), k, v, cu_seqlens=cu), "GQA"),
        (lambda: c(q, k, v, cu_seqlens=cu, initial_state=torch.zeros(1, HV, D, D, dtype=torch.half)), "float16"),
        (lambda: c(q, k, v, cu_seqlens=cu, initial_state=P, state_indices=idx), "output_state"),
        (lambda: c(q, k, v, cu_seqlens=cu, initial_state=P, output_state=P.clone(), state_indices=idx), "other than"),
        (lambda: c(q, k, v, cu_seqlens=cu, output=torch.empty(T, HV, D, dtype=torch.float32)), "float32"),
    ]:
        with pytest.raises(NotImplementedError, match=match):
            call()
    for call, match in [
        (lambda: c(q, k, v), "cu_seqlens"),
        (lambda: c(q, k, v, cu_seqlens=cu, backend="other"), "backend"),
        (lambda: c(q, k, v, cu_seqlens=cu, use_cp="yes"), "use_cp"),
        (lambda: c(q, k, v, cu_seqlens=cu, checkpoint_every_n_tokens=32), "multiple"),
        (lambda: c(q, k, v, cu_seqlens=cu, checkpoint_every_n_tokens=64), "must both be provided"),
        (lambda: c(q, k, v, cu_seqlens=cu, initial_state=P, output_final_state=True, state_indices=idx),
         "explicit output_state"),
        (lambda: c(q, k, v, cu_seqlens=cu, max_seqlen=9), "max_seqlen"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()


# ---------------------------------------------------------------------------------------------------------------
# decode and MTP

def raw(B, T, HV, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(B, T, HV, generator=gen).bfloat16()
    b = torch.randn(B, T, HV, generator=gen).bfloat16()
    A_log = torch.log(torch.rand(HV, generator=gen) * 4 + 0.5)
    dt_bias = torch.randn(HV, generator=gen) * 0.5
    return A_log, a, dt_bias, b


def raw_ref(q, k, v, A_log, a, dt_bias, b, h0_kfirst, qk_norm=True, scale=None):
    """reference for [B, T, ...] requests (each its own sequence) with raw gates; h0 [B, HV, K, V] K-first."""
    B, T = q.shape[:2]
    g = -torch.exp(A_log.double()) * F.softplus(a.double() + dt_bias.double())
    beta = torch.sigmoid(b.double())
    f = lambda x: x.reshape((B * T,) + tuple(x.shape[2:]))  # noqa: E731
    o, S = reference(f(q), f(k), f(v), f(g), f(beta), scale=scale, h0=h0_kfirst,
                     cu=[i * T for i in range(B + 1)], qk_norm=qk_norm)
    return o.view(B, T, *o.shape[1:]), S


def req(B, T, H, HV, seed):
    q, k, v = tokens(B * T, H, HV, seed)
    return q.view(B, T, H, D), k.view(B, T, H, D), v.view(B, T, HV, D)


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("norm", [True, False])
def test_decode_pretranspose_state_in_place(state_dtype, norm):
    B, H, HV = 3, 2, 4
    q, k, v = req(B, 1, H, HV, seed=61)
    A_log, a, dt_bias, b = raw(B, 1, HV, 7)
    S = (torch.randn(B, HV, D, D) * 0.1).to(state_dtype)  # k-last
    S0 = S.clone()
    o, s = gfi.gated_delta_rule_decode_pretranspose(q, k, v, S, A_log, a, dt_bias.bfloat16(), b, use_qk_l2norm=norm)
    assert s is S and o.shape == (B, 1, HV, D)
    ro, rs = raw_ref(q, k, v, A_log, a, dt_bias.bfloat16().float(), b, kl(S0.float()), qk_norm=norm)
    check_close(o, ro, "output")
    tol = 1e-4 if state_dtype == torch.float32 else 1e-2
    check_close(kl(S.float()), rs, "state", rel=tol, tol=tol)


def test_decode_pretranspose_pool_with_padding():
    B, H, HV, pool = 4, 2, 4, 7
    q, k, v = req(B, 1, H, HV, seed=71)
    A_log, a, dt_bias, b = raw(B, 1, HV, 8)
    P = torch.randn(pool, HV, D, D) * 0.1
    P0 = P.clone()
    idx = torch.tensor([5, -1, 0, 2], dtype=torch.int64)
    out = torch.full((B, 1, HV, D), 3.0, dtype=torch.bfloat16)
    o, s = gfi.gated_delta_rule_decode_pretranspose(q, k, v, None, A_log, a, dt_bias, b, output=out,
                                                    initial_state=P, initial_state_indices=idx)
    assert s is P and o is out
    live = [0, 2, 3]
    rows = idx[live]
    ro, rs = raw_ref(q[live], k[live], v[live], A_log, a[live], dt_bias, b[live], kl(P0[rows]))
    check_close(o[live], ro, "output")
    check_close(kl(P[rows]), rs, "pool rows", rel=1e-4, tol=1e-4)
    assert not o[1].any(), "a padded entry's output rows are zero"
    rest = [i for i in range(pool) if i not in rows.tolist()]
    assert torch.equal(P[rest], P0[rest])


def test_decode_nontranspose_k_major():
    B, H, HV = 2, 2, 4
    q, k, v = req(B, 1, H, HV, seed=81)
    A_log, a, dt_bias, b = raw(B, 1, HV, 9)
    S = torch.randn(B, HV, D, D) * 0.1  # [B, HV, K, V]
    S0 = S.clone()
    o, s = gfi.gated_delta_rule_decode(q, k, v, S, A_log, a, dt_bias, b)
    assert s is S
    ro, rs = raw_ref(q, k, v, A_log, a, dt_bias, b, S0)
    check_close(o, ro, "output")
    check_close(S, rs, "state", rel=1e-4, tol=1e-4)


def test_decode_strided_state_copied_back():
    B, H, HV = 2, 1, 2
    q, k, v = req(B, 1, H, HV, seed=85)
    A_log, a, dt_bias, b = raw(B, 1, HV, 10)
    big = torch.randn(B, 2, HV, D, D) * 0.1
    S = big[:, 1]  # rows further apart than one state
    S0, big0 = S.clone(), big.clone()
    o, s = gfi.gated_delta_rule_decode_pretranspose(q, k, v, S, A_log, a, dt_bias, b)
    ro, rs = raw_ref(q, k, v, A_log, a, dt_bias, b, kl(S0))
    check_close(o, ro, "output")
    check_close(kl(big[:, 1]), rs, "state", rel=1e-4, tol=1e-4)
    assert torch.equal(big[:, 0], big0[:, 0]), "the other rows of the buffer are untouched"


@pytest.mark.parametrize("disable", [True, False])
@pytest.mark.parametrize("with_buffer", [True, False])
def test_mtp(disable, with_buffer):
    B, T, H, HV, pool = 3, 4, 2, 4, 6
    q, k, v = req(B, T, H, HV, seed=91)
    A_log, a, dt_bias, b = raw(B, T, HV, 11)
    P = torch.randn(pool, HV, D, D) * 0.1
    P0 = P.clone()
    idx = torch.tensor([4, -1, 1], dtype=torch.int32)
    buf = torch.full((B + 1, T, HV, D, D), 5.0) if with_buffer else None
    o, s = gfi.gated_delta_rule_mtp(q, k, v, P, idx, A_log, a, dt_bias, b, intermediate_states_buffer=buf,
                                    disable_state_update=disable)
    assert s is P
    live = [0, 2]
    rows = idx[live].long()
    ro, rs = raw_ref(q[live], k[live], v[live], A_log, a[live], dt_bias, b[live], kl(P0[rows]))
    check_close(o[live], ro, "output")
    assert not o[1].any()
    if disable:
        assert torch.equal(P, P0)
    else:
        check_close(kl(P[rows]), rs, "pool rows", rel=1e-4, tol=1e-4)
        rest = [i for i in range(pool) if i not in rows.tolist()]
        assert torch.equal(P[rest], P0[rest])
    if with_buffer:
        for j, bi in enumerate(live):  # row b of the buffer is batch entry b (FlashInfer's indexing)
            for t in range(T):
                _, st = raw_ref(q[bi:bi + 1, :t + 1], k[bi:bi + 1, :t + 1], v[bi:bi + 1, :t + 1], A_log,
                                a[bi:bi + 1, :t + 1], dt_bias, b[bi:bi + 1, :t + 1], kl(P0[rows[j:j + 1]]))
                check_close(kl(buf[bi, t]), st[0], f"intermediate b={bi} t={t}", rel=1e-4, tol=1e-4)
        assert (buf[1] == 5.0).all() and (buf[B] == 5.0).all(), "padding and rows past B are not written"


def test_mtp_default_disable_warns_and_keeps_pool():
    B, T, H, HV, pool = 2, 2, 1, 2, 3
    q, k, v = req(B, T, H, HV, seed=95)
    A_log, a, dt_bias, b = raw(B, T, HV, 12)
    P = torch.randn(pool, HV, D, D) * 0.1
    P0 = P.clone()
    with pytest.warns(FutureWarning, match="disable_state_update"):
        gfi.gated_delta_rule_mtp(q, k, v, P, torch.tensor([2, 0], dtype=torch.int64), A_log, a, dt_bias, b)
    assert torch.equal(P, P0)


def test_decode_pretranspose_multi_token():
    """T > 1 through decode_pretranspose: the pool path (as gated_delta_rule_mtp) and a per-batch bf16 state."""
    B, T, H, HV = 2, 3, 2, 4
    q, k, v = req(B, T, H, HV, seed=97)
    A_log, a, dt_bias, b = raw(B, T, HV, 13)
    S = (torch.randn(B, HV, D, D) * 0.1).bfloat16()
    S0 = S.clone()
    buf = torch.zeros(B, T, HV, D, D)
    with pytest.raises(NotImplementedError, match="bfloat16"):
        gfi.gated_delta_rule_decode_pretranspose(q, k, v, S, A_log, a, dt_bias, b,
                                                 intermediate_states_buffer=buf.bfloat16())
    o, s = gfi.gated_delta_rule_decode_pretranspose(q, k, v, S, A_log, a, dt_bias, b, intermediate_states_buffer=buf)
    assert s is S
    ro, rs = raw_ref(q, k, v, A_log, a, dt_bias, b, kl(S0.float()))
    check_close(o, ro, "output")
    check_close(kl(S.float()), rs, "state", rel=1e-2, tol=1e-2)
    check_close(kl(buf[:, T - 1]), rs, "last intermediate", rel=1e-4, tol=1e-4)


def test_decode_errors():
    B, H, HV = 2, 2, 4
    q, k, v = req(B, 1, H, HV, seed=99)
    A_log, a, dt_bias, b = raw(B, 1, HV, 14)
    S = torch.zeros(B, HV, D, D)
    P = torch.zeros(4, HV, D, D)
    idx = torch.tensor([1, 2], dtype=torch.int32)
    dp, mtp = gfi.gated_delta_rule_decode_pretranspose, gfi.gated_delta_rule_mtp
    for call, match in [
        (lambda: dp(q.float(), k.float(), v.float(), S, A_log, a, dt_bias, b), "float32"),
        (lambda: dp(q, k, v, S, A_log, a.float(), dt_bias, b), "float32"),
        (lambda: dp(q, k, v, S.half(), A_log, a, dt_bias, b), "float16"),
        (lambda: dp(q, k, v, S, A_log, a, dt_bias, b, scale=0.0), "scale=0"),
        (lambda: dp(q, k, v, None, A_log, a, dt_bias, b, initial_state=P, initial_state_indices=idx,
                    output_state_indices=idx.clone()), "output_state_indices"),
        (lambda: dp(q, k, v, None, A_log, a, dt_bias, b, initial_state=torch.zeros(4, HV, 2, D // 2, D),
                    initial_state_indices=idx), "uGPU"),
        (lambda: mtp(q, k, v, P, idx, A_log, a, dt_bias, b, ssm_state_indices=idx[:, None],
                     disable_state_update=False), "ssm_state_indices"),
        (lambda: mtp(q, k, v, P, idx, A_log, a, dt_bias, b, disable_state_update=True, cache_replayssm=True),
         "ReplaySSM"),
        (lambda: mtp(q, k, v, P, idx, A_log, a, dt_bias, b, disable_state_update=True,
                     intermediate_states_buffer=torch.zeros(B, 2, HV, D, D)), "steps"),
    ]:
        with pytest.raises(NotImplementedError, match=match):
            call()
    for call, match in [
        (lambda: dp(q, k, v, S, A_log, a, dt_bias, b, intermediate_states_buffer=torch.zeros(B, 1, HV, D, D)),
         "T > 1"),
        (lambda: dp(q, k, v, S, A_log, a, dt_bias, b, disable_state_update=True), "T > 1"),
        (lambda: dp(q, k, v, None, A_log, a, dt_bias, b, initial_state=P), "together"),
        (lambda: dp(q, k, v, S, A_log, a, dt_bias, b, backend="other"), "backend"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
