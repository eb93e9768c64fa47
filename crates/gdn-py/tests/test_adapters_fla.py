"""gdn.fla (FLA 0.6's chunk_gated_delta_rule / fused_recurrent_gated_delta_rule) on torch CPU tensors, against an
independent float64 implementation of the recurrence (`reference`, also used by the FlashInfer and transformers
adapter tests), and, where flash-linear-attention is installed, against FLA's own pure-torch reference and
through FLA's backend registry.

Run: pytest crates/gdn-py/tests/test_adapters_fla.py (needs torch and the gdn wheel)."""

import os
import warnings

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import gdn.fla as gf  # noqa: E402

try:  # FLA's own code, only when installed
    import fla  # noqa: F401
    import fla.backends as fla_backends
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
    from fla.ops.gated_delta_rule import naive_recurrent_gated_delta_rule as fla_naive
    FLA_SKIP = None
except Exception as e:  # noqa: BLE001 - any import failure means "not available here"
    FLA_SKIP = f"flash-linear-attention is not importable here ({type(e).__name__}: {e})"


# ---------------------------------------------------------------------------------------------------------------
# float64 reference of the gated delta rule (K-first state S[k, v])

def reference(q, k, v, g, beta, scale=None, h0=None, cu=None, qk_norm=False):
    """q, k [T, H, K]; v [T, HV, V]; g [T, HV] log decay; beta [T, HV]; h0 [N, HV, K, V] or None; cu: list of N+1
    offsets (None = one sequence). qk_norm: x / sqrt(sum x^2 + 1e-6), rounded to bfloat16 (gdn's contract).
    Value head h reads q/k head h // (HV / H). Returns (o [T, HV, V], S [N, HV, K, V]) in float64."""
    q, k, v, g, beta = (x.detach().double() for x in (q, k, v, g, beta))
    if qk_norm:
        q = (q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)).to(torch.bfloat16).double()
        k = (k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)).to(torch.bfloat16).double()
    T, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    r = HV // H
    q, k = q.repeat_interleave(r, 1), k.repeat_interleave(r, 1)
    scale = K ** -0.5 if scale is None else scale
    cu = [0, T] if cu is None else [int(c) for c in cu]
    N = len(cu) - 1
    o = torch.zeros(T, HV, V, dtype=torch.float64)
    S_all = torch.zeros(N, HV, K, V, dtype=torch.float64)
    for n in range(N):
        S = h0[n].detach().double().clone() if h0 is not None else torch.zeros(HV, K, V, dtype=torch.float64)
        for t in range(cu[n], cu[n + 1]):
            S = S * torch.exp(g[t])[:, None, None]
            u = torch.einsum("hkv,hk->hv", S, k[t])
            delta = beta[t][:, None] * (v[t] - u)
            S = S + torch.einsum("hk,hv->hkv", k[t], delta)
            o[t] = scale * torch.einsum("hkv,hk->hv", S, q[t])
        S_all[n] = S
    return o, S_all


def check_close(got, want, what, rel=5e-3, tol=1e-2):
    """bf16 outputs: relative L2 error below `rel` and every element within atol = rtol = `tol` (the contest's
    rule); float32 states: pass rel=tol=1e-4."""
    got, want = got.detach().double(), want.double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    nonfinite = int((~torch.isfinite(got)).sum())
    assert nonfinite == 0, f"{what}: {nonfinite} non-finite values"
    diff = (got - want).abs()
    worst = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    where = f"worst element {worst}: {got[worst].item():.6g} vs {want[worst].item():.6g}"
    err = (got - want).norm() / max(want.norm().item(), 1e-30)
    assert err <= rel, f"{what}: rel-L2 {err:.3e} > {rel:.1e}; {where}"
    bad = diff > tol + tol * want.abs()
    assert not bad.any(), f"{what}: {int(bad.sum())} elements outside atol = rtol = {tol}; {where}"


def make(B, T, H, HV, D=64, seed=0, gate_lo=-0.5):
    """bf16 q, k, v [B, T, ., D]; float32 log decay g and beta [B, T, HV]."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, D, generator=gen).bfloat16()
    k = F.normalize(torch.randn(B, T, H, D, generator=gen), dim=-1).bfloat16()
    v = torch.randn(B, T, HV, D, generator=gen).bfloat16()
    g = F.logsigmoid(torch.randn(B, T, HV, generator=gen) + 3.0) + gate_lo * torch.rand(B, T, HV, generator=gen)
    beta = torch.rand(B, T, HV, generator=gen)
    return q, k, v, g, beta


def flat(x):
    return x.reshape((-1,) + tuple(x.shape[2:]))


def batch_ref(q, k, v, g, beta, h0=None, **kw):
    """reference over a batch-first call without cu_seqlens: B sequences of T tokens."""
    B, T = q.shape[:2]
    cu = [b * T for b in range(B + 1)]
    o, S = reference(flat(q), flat(k), flat(v), flat(g), flat(beta), h0=h0, cu=cu, **kw)
    return o.view(B, T, *o.shape[1:]), S


# ---------------------------------------------------------------------------------------------------------------
# chunk_gated_delta_rule

@pytest.mark.parametrize("fn", ["chunk", "recurrent"])
def test_float16_activations_gates_and_state(fn):
    """float16 q, k, v (as FLA takes them), a float16 log decay and a float16 initial state (widened: exact): the
    output in float16, the final state float32, as FLA returns them."""
    B, T, H, HV, D = 2, 19, 2, 4, 64
    q, k, v, g, beta = make(B, T, H, HV, D, seed=77)
    q, k, v, g16, b16 = q.half(), k.half(), v.half(), g.half(), beta.half()
    h0 = (torch.randn(B, HV, D, D) * 0.1).half()
    call = gf.chunk_gated_delta_rule if fn == "chunk" else gf.fused_recurrent_gated_delta_rule
    o, s = call(q, k, v, g16, beta=b16, initial_state=h0, output_final_state=True)
    assert o.dtype == torch.float16 and o.shape == (B, T, HV, D)
    assert s.dtype == torch.float32 and s.shape == (B, HV, D, D)
    ro, rs = batch_ref(q, k, v, g16.float(), b16.float(), h0=h0.float())
    check_close(o, ro, "o (float16)")
    check_close(s, rs, "final_state (float16 inputs)", rel=1e-4, tol=1e-4)


@pytest.mark.parametrize("H,HV", [(2, 2), (2, 4), (1, 4)])
@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("norm", [False, True])
def test_chunk_batch_first(H, HV, with_h0, norm):
    B, T, D = 2, 23, 64
    q, k, v, g, beta = make(B, T, H, HV, D, seed=H * 10 + HV)
    h0 = torch.randn(B, HV, D, D) * 0.1 if with_h0 else None
    o, s = gf.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                     use_qk_l2norm_in_kernel=norm)
    assert o.dtype == torch.bfloat16 and o.shape == (B, T, HV, D)
    assert s.dtype == torch.float32 and s.shape == (B, HV, D, D)
    ro, rs = batch_ref(q, k, v, g, beta, h0=h0, qk_norm=norm)
    check_close(o, ro, "o")
    check_close(s, rs, "final_state", rel=1e-4, tol=1e-4)
    o2, s2 = gf.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, use_qk_l2norm_in_kernel=norm)
    assert s2 is None
    assert torch.equal(o2, o)


def test_chunk_head_dim_128_and_scale():
    q, k, v, g, beta = make(1, 9, 2, 4, 128, seed=3)
    for scale in (None, 0.5):
        o, s = gf.chunk_gated_delta_rule(q, k, v, g, beta, scale=scale, output_final_state=True)
        ro, rs = batch_ref(q, k, v, g, beta, scale=scale)
        check_close(o, ro, f"o scale={scale}")
        check_close(s, rs, "state", rel=1e-4, tol=1e-4)


@pytest.mark.parametrize("host_lengths", [False, True])
@pytest.mark.parametrize("cu_dtype", [torch.int64, torch.int32])
def test_chunk_varlen(host_lengths, cu_dtype):
    lens = [5, 0, 31, 1, 12]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=cu_dtype)
    T, N, H, HV, D = int(cu[-1]), len(lens), 2, 4, 64
    q, k, v, g, beta = make(1, T, H, HV, D, seed=7)
    h0 = torch.randn(N, HV, D, D) * 0.1
    h0_copy = h0.clone()
    kw = dict(cu_seqlens_cpu=cu) if host_lengths else {}
    o, s = gf.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu,
                                     use_qk_l2norm_in_kernel=True, **kw)
    assert torch.equal(h0, h0_copy), "the initial state must not be modified"
    ro, rs = reference(q[0], k[0], v[0], g[0], beta[0], h0=h0, cu=cu.tolist(), qk_norm=True)
    check_close(o[0], ro, "o")
    check_close(s, rs, "final_state", rel=1e-4, tol=1e-4)
    assert torch.equal(s[1], h0[1]), "a zero-length sequence keeps its initial state (FLA)"


def test_chunk_varlen_no_initial_state():
    cu = torch.tensor([0, 17, 17, 40])
    q, k, v, g, beta = make(1, 40, 2, 2, 64, seed=8)
    o, s = gf.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, cu_seqlens=cu)
    ro, rs = reference(q[0], k[0], v[0], g[0], beta[0], cu=cu.tolist())
    check_close(o[0], ro, "o")
    check_close(s, rs, "final_state", rel=1e-4, tol=1e-4)
    assert not s[1].any()


def test_chunk_state_v_first_and_deprecated_alias():
    B, T, H, HV, D = 2, 11, 2, 4, 64
    q, k, v, g, beta = make(B, T, H, HV, D, seed=11)
    h0 = torch.randn(B, HV, D, D) * 0.1  # K-first
    ro, rs = batch_ref(q, k, v, g, beta, h0=h0)
    o, s = gf.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0.transpose(-1, -2).contiguous(),
                                     output_final_state=True, state_v_first=True)
    check_close(o, ro, "o")
    check_close(s.transpose(-1, -2), rs, "final_state [V, K]", rel=1e-4, tol=1e-4)
    with pytest.warns(DeprecationWarning, match="transpose_state_layout"):
        o2, s2 = gf.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0.transpose(-1, -2).contiguous(),
                                           output_final_state=True, transpose_state_layout=True)
    assert torch.equal(o2, o) and torch.equal(s2, s)
    with pytest.raises(ValueError, match="Cannot pass both"):
        gf.chunk_gated_delta_rule(q, k, v, g, beta, state_v_first=True, transpose_state_layout=True)


def raw_gates(B, T, HV, seed, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(B, T, HV, generator=gen).to(dtype)
    b = torch.randn(B, T, HV, generator=gen).to(dtype)
    A_log = torch.log(torch.rand(HV, generator=gen) * 4 + 0.5)
    dt_bias = torch.randn(HV, generator=gen) * 0.5
    return a, b, A_log, dt_bias


def log_decay(a, A_log, dt_bias):
    x = a.double() + (dt_bias.double() if dt_bias is not None else 0.0)
    return -torch.exp(A_log.double()) * F.softplus(x)


@pytest.mark.parametrize("gate_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("with_dt_bias", [True, False])
@pytest.mark.parametrize("fn", ["chunk", "recurrent"])
def test_gate_in_kernel(gate_dtype, with_dt_bias, fn):
    """use_gate_in_kernel + use_beta_sigmoid_in_kernel (FLA's GatedDeltaNet layer: raw a and b logits)."""
    B, T, H, HV, D = 2, 13, 2, 4, 64
    q, k, v, _, _ = make(B, T, H, HV, D, seed=21)
    a, b, A_log, dt_bias = raw_gates(B, T, HV, 5, gate_dtype)
    dt_bias = dt_bias if with_dt_bias else None
    h0 = torch.randn(B, HV, D, D) * 0.1
    f = gf.chunk_gated_delta_rule if fn == "chunk" else gf.fused_recurrent_gated_delta_rule
    o, s = f(q, k, v, g=a, beta=b, initial_state=h0.transpose(-1, -2).contiguous(), output_final_state=True,
             use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
             use_beta_sigmoid_in_kernel=True, state_v_first=True)
    ro, rs = batch_ref(q, k, v, log_decay(a, A_log, dt_bias), torch.sigmoid(b.double()), h0=h0, qk_norm=True)
    check_close(o, ro, "o")
    check_close(s.transpose(-1, -2), rs, "final_state", rel=1e-4, tol=1e-4)


def test_beta_sigmoid_with_log_decay():
    B, T, H, HV, D = 1, 19, 2, 4, 64
    q, k, v, g, _ = make(B, T, H, HV, D, seed=31)
    logits = torch.randn(B, T, HV).bfloat16()
    o, s = gf.chunk_gated_delta_rule(q, k, v, g.bfloat16(), logits, output_final_state=True,
                                     use_beta_sigmoid_in_kernel=True)
    ro, rs = batch_ref(q, k, v, g.bfloat16(), torch.sigmoid(logits.double()))
    check_close(o, ro, "o")
    check_close(s, rs, "final_state", rel=1e-4, tol=1e-4)


def test_bf16_initial_state_gives_f32_final_state():
    q, k, v, g, beta = make(2, 6, 2, 2, 64, seed=41)
    h0 = (torch.randn(2, 2, 64, 64) * 0.1).bfloat16()
    o, s = gf.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    assert s.dtype == torch.float32
    ro, rs = batch_ref(q, k, v, g, beta, h0=h0.float())
    check_close(o, ro, "o")
    check_close(s, rs, "final_state", rel=1e-4, tol=1e-4)


def test_qkv_views_of_a_fused_projection():
    """q, k, v as torch.split views of one [B, T, (2H + HV) * D] projection reach gdn without a copy."""
    B, T, H, HV, D = 2, 7, 2, 4, 64
    mixed = torch.randn(B, T, (2 * H + HV) * D).bfloat16()
    q, k, v = torch.split(mixed, [H * D, H * D, HV * D], dim=-1)
    q, k, v = q.view(B, T, H, D), k.view(B, T, H, D), v.view(B, T, HV, D)
    _, _, _, g, beta = make(B, T, H, HV, D, seed=51)
    o, s = gf.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
    o2, s2 = gf.chunk_gated_delta_rule(q.contiguous(), k.contiguous(), v.contiguous(), g, beta,
                                       output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert torch.equal(o, o2) and torch.equal(s, s2)


# ---------------------------------------------------------------------------------------------------------------
# fused_recurrent_gated_delta_rule

@pytest.mark.parametrize("T", [1, 5])
def test_recurrent(T):
    B, H, HV, D = 3, 2, 4, 64
    q, k, v, g, beta = make(B, T, H, HV, D, seed=61 + T)
    h0 = torch.randn(B, HV, D, D) * 0.1
    o, s = gf.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=h0, output_final_state=True,
                                               use_qk_l2norm_in_kernel=True)
    ro, rs = batch_ref(q, k, v, g, beta, h0=h0, qk_norm=True)
    check_close(o, ro, "o")
    check_close(s, rs, "final_state", rel=1e-4, tol=1e-4)


def test_recurrent_defaults_no_decay_unit_beta():
    B, T, H, HV, D = 2, 4, 2, 2, 64
    q, k, v, _, _ = make(B, T, H, HV, D, seed=71)
    o, s = gf.fused_recurrent_gated_delta_rule(q, k, v, output_final_state=True)
    ro, rs = batch_ref(q, k, v, torch.zeros(B, T, HV), torch.ones(B, T, HV))
    check_close(o, ro, "o")
    check_close(s, rs, "final_state", rel=1e-4, tol=1e-4)


def test_recurrent_varlen_decode_steps():
    """vLLM-style varlen of one token per sequence (cu_seqlens = 0..N) with a K-first state."""
    N, H, HV, D = 4, 2, 4, 64
    q, k, v, g, beta = make(1, N, H, HV, D, seed=81)
    cu = torch.arange(N + 1)
    h0 = torch.randn(N, HV, D, D) * 0.1
    o, s = gf.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=h0, output_final_state=True,
                                               cu_seqlens=cu)
    ro, rs = reference(q[0], k[0], v[0], g[0], beta[0], h0=h0, cu=cu.tolist())
    check_close(o[0], ro, "o")
    check_close(s, rs, "final_state", rel=1e-4, tol=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# errors

def test_errors_unsupported_options():
    q, k, v, g, beta = make(1, 4, 2, 4, 64, seed=91)
    c, r = gf.chunk_gated_delta_rule, gf.fused_recurrent_gated_delta_rule
    cases = [
        (lambda: c(q, k, v, g, beta, allow_neg_eigval=True, use_beta_sigmoid_in_kernel=True), "allow_neg_eigval"),
        (lambda: c(q, k, v, g, beta, cp_context=object()), "cp_context"),
        (lambda: r(q, k, v, g, gk=torch.zeros(1, 4, 4, 64), beta=beta), "gk"),
        (lambda: r(q, k, v, g, gv=torch.zeros(1, 4, 4, 64), beta=beta), "gv"),
        (lambda: r(q, k, v, g, beta=torch.rand(1, 4, 4, 64)), r"\[B, T, HV, V\]"),
        (lambda: c(q.float(), k.float(), v.float(), g, beta), "float32"),
        (lambda: c(q, k, v, g.double(), beta), "float64"),
        (lambda: c(q, k, v, g, beta, initial_state=torch.zeros(1, 4, 64, 64, dtype=torch.double)), "float64"),
        (lambda: c(q, k, v[..., :32], g, beta), "K != V"),
        (lambda: c(q, k, v, g, beta, scale=0.0), "scale=0"),
    ]
    for call, match in cases:
        with pytest.raises(NotImplementedError, match=match):
            call()


def test_errors_as_fla_raises_them():
    q, k, v, g, beta = make(2, 4, 2, 4, 64, seed=92)
    c = gf.chunk_gated_delta_rule
    with pytest.raises(ValueError, match="same number of heads"):
        c(q, k[:, :, :1], v, g, beta)
    with pytest.raises(ValueError, match="divisible"):
        c(q, k, v[:, :, :3], g[..., :3], beta[..., :3])
    with pytest.raises(ValueError, match="batch size is expected to be 1"):
        c(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="number of initial states"):
        c(q[:1], k[:1], v[:1], g[:1], beta[:1], cu_seqlens=torch.tensor([0, 1, 4]),
          initial_state=torch.zeros(3, 4, 64, 64))
    with pytest.raises(ValueError, match="chunk_size"):
        c(q, k, v, g, beta, chunk_size=128)
    with pytest.raises(DeprecationWarning, match="head_first"):
        c(q, k, v, g, beta, head_first=False)
    with pytest.raises(ValueError, match="A_log"):
        c(q, k, v, g, beta, use_gate_in_kernel=True)
    with pytest.raises(ValueError, match="requires `use_beta_sigmoid_in_kernel=True`"):
        c(q, k, v, g, beta, allow_neg_eigval=True)


def test_autograd_forward_runs_backward_raises():
    q, k, v, g, beta = make(1, 5, 2, 2, 64, seed=93)
    q.requires_grad_(True)
    o, s = gf.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    assert o.requires_grad
    with torch.no_grad():
        o2, _ = gf.chunk_gated_delta_rule(q, k, v, g, beta)
    assert torch.equal(o.detach(), o2)
    with pytest.raises(NotImplementedError, match="backward"):
        o.float().sum().backward()


# ---------------------------------------------------------------------------------------------------------------
# against FLA itself (when installed) and FLA's backend registry

@pytest.mark.skipif(FLA_SKIP is not None, reason=FLA_SKIP or "")
@pytest.mark.parametrize("H,HV", [(2, 2), (2, 4)])
def test_against_fla_naive_recurrent(H, HV):
    B, T, D = 2, 17, 64
    q, k, v, g, beta = make(B, T, H, HV, D, seed=101)
    h0 = torch.randn(B, HV, D, D) * 0.1
    o, s = gf.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    r = HV // H
    fo, fs = fla_naive(q.repeat_interleave(r, 2), k.repeat_interleave(r, 2), v, beta, g, initial_state=h0,
                       output_final_state=True)
    ro, rs = batch_ref(q, k, v, g, beta, h0=h0)
    check_close(o, fo, "o vs FLA naive")
    check_close(s, fs, "state vs FLA naive", rel=1e-4, tol=1e-4)
    # gdn no further from float64 than FLA's own float32 reference, within bf16 output rounding
    e_gdn = ((o.double() - ro).norm() / ro.norm()).item()
    e_fla = ((fo.double() - ro).norm() / ro.norm()).item()
    assert e_gdn <= max(e_fla, 4e-3), (e_gdn, e_fla)


@pytest.fixture
def gdn_backend():
    be = gf.register_backend()
    try:
        yield be
    finally:
        gf.unregister_backend()


@pytest.mark.skipif(FLA_SKIP is not None, reason=FLA_SKIP or "")
def test_fla_backend_dispatches_to_gdn(gdn_backend):
    assert gdn_backend.backend_type == "gdn"
    reg = fla_backends._get_operation_registry("gated_delta_rule")
    assert reg._backends.get("gdn") is gdn_backend
    B, T, H, HV, D = 1, 29, 2, 4, 64
    q, k, v, _, _ = make(B, T, H, HV, D, seed=111)
    a, b, A_log, dt_bias = raw_gates(B, T, HV, 9)
    cu = torch.tensor([0, 10, 29])
    h0 = torch.randn(2, HV, D, D) * 0.1
    kw = dict(initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
              use_beta_sigmoid_in_kernel=True, state_v_first=True, cu_seqlens=cu, use_gate_in_kernel=True,
              A_log=A_log, dt_bias=dt_bias)
    with torch.no_grad():
        o, s = fla_chunk(q, k, v, a, b, **kw)  # FLA's own entry point: its triton kernels cannot run on the CPU
        o2, s2 = gf.chunk_gated_delta_rule(q, k, v, a, b, **kw)
    assert torch.equal(o, o2) and torch.equal(s, s2)


@pytest.mark.skipif(FLA_SKIP is not None, reason=FLA_SKIP or "")
def test_fla_backend_verifier_declines(gdn_backend):
    q, k, v, g, beta = make(1, 8, 2, 4, 64, seed=121)
    verify = lambda *a, **kw: gdn_backend.verify("chunk_gated_delta_rule", *a, **kw)  # noqa: E731
    assert verify(q, k, v, g, beta) == (True, None)
    assert verify(q, k, v, g, beta, 1.0, None, True) == (True, None)
    declined = [
        ((q.float(), k.float(), v.float(), g, beta), {}),
        ((q.double(), k.double(), v.double(), g, beta), {}),
        ((q, k, v, g, beta), dict(use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True)),
        ((q, k, v, g, beta), dict(cp_context=object())),
        ((q, k, v, g, beta), dict(head_first=False)),
        ((q[..., :32], k[..., :32], v[..., :32], g, beta), {}),
        ((q, k, v[..., :32], g, beta), {}),
        ((q.requires_grad_(True), k, v, g, beta), {}),
    ]
    for args, kw in declined:
        ok, why = verify(*args, **kw)
        assert not ok and why, (kw, why)
    with torch.no_grad():
        assert verify(q, k, v, g, beta)[0], "no graph is recorded under no_grad: accepted"
    os.environ["FLA_GDN"] = "0"
    try:
        assert not gdn_backend.is_enabled()
    finally:
        del os.environ["FLA_GDN"]
    assert gdn_backend.is_enabled()


@pytest.mark.skipif(FLA_SKIP is not None, reason=FLA_SKIP or "")
def test_fla_backend_register_is_idempotent_and_removable():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gf.register_backend()
        gf.register_backend(priority=2)
    reg = fla_backends._get_operation_registry("gated_delta_rule")
    assert reg._backends["gdn"].priority == 2
    assert gf.unregister_backend()
    assert "gdn" not in reg._backends
    assert not gf.unregister_backend()
