"""The packed decode of gdn.vllm and gdn.sglang (q / k / v / a / b derived from ``mixed_qkv``, a, b by the binding's
descriptor arithmetic, one binding call) against ``gdn.decode`` on explicit torch views of the same tensors, on
torch CPU tensors: bit-identical outputs and pools, for row-strided ``mixed_qkv`` with padding slots; inputs the
one-call path does not take (strided gates, 16-bit dt_bias) and the errors of gdn's validation, which must be
the ones ``gdn.decode`` raises on the views."""

import pytest

torch = pytest.importorskip("torch")

import gdn  # noqa: E402
from gdn import sglang as gs  # noqa: E402
from gdn import vllm as gv  # noqa: E402

D = 128


def inputs(seed, B, H, HV, act=torch.bfloat16, state=torch.float32, pad_cols=40, slots=9):
    g = torch.Generator().manual_seed(seed)
    w = 2 * H * D + HV * D
    mq = torch.randn(B, w + pad_cols, generator=g).to(act)[:, :w]  # rows further apart than one row
    a = torch.randn(B, HV, generator=g).to(act)
    b = torch.randn(B, HV, generator=g).to(act)
    A_log = torch.randn(HV, generator=g) * 0.5
    dt_bias = torch.randn(HV, generator=g) * 0.5
    pool = (torch.randn(slots, HV, D, D, generator=g) * 0.1).to(state)
    return mq, a, b, A_log, dt_bias, pool


def views(mq, H, HV):
    B = mq.shape[0]
    hk = H * D
    return (mq[:, :hk].view(B, 1, H, D), mq[:, hk:2 * hk].view(B, 1, H, D),
            mq[:, 2 * hk:2 * hk + HV * D].view(B, 1, HV, D))


def reference(mq, a, b, A_log, dt_bias, pool, idx, scale, norm, pad, H, HV):
    """gdn.decode on explicit views: the output and the pool after the step."""
    B = mq.shape[0]
    q, k, v = views(mq, H, HV)
    out = torch.full((B, 1, HV, D), 3.0, dtype=mq.dtype)
    pool = pool.clone()
    gdn.decode(q, k, v, pool, A_log.float().contiguous(), a.contiguous().view(B, 1, HV),
               dt_bias.float().contiguous(), b.contiguous().view(B, 1, HV), scale, output=out, state_indices=idx.contiguous(), pad=pad,
               use_qk_l2norm_in_kernel=norm)
    return out, pool


@pytest.mark.parametrize("B,H,HV,act,state", [
    (5, 2, 4, torch.bfloat16, torch.float32),
    (1, 1, 2, torch.bfloat16, torch.bfloat16),
    (3, 2, 2, torch.float16, torch.float16),
])
@pytest.mark.parametrize("norm", [False, True])
def test_vllm_packed_is_decode_on_views(B, H, HV, act, state, norm):
    mq, a, b, A_log, dt_bias, pool = inputs(B * 10 + H, B, H, HV, act, state)
    idx = torch.tensor([3, 0, 7, -1, 2][:B], dtype=torch.int32)  # 0 (NULL_BLOCK_ID) and -1: padding
    if B == 1:
        idx = torch.tensor([5], dtype=torch.int32)
    ro, rp = reference(mq, a, b, A_log, dt_bias, pool, idx, D ** -0.5, norm, "null-slot", H, HV)
    out = torch.full((B, 1, HV, D), 3.0, dtype=act)
    # the one-call entry takes these inputs as they are
    assert gdn._gdn.packed_decode(mq, a, b, pool.clone(), A_log, dt_bias, None, out, idx, norm, "null-slot",
                                  None) is not None
    out = torch.full((B, 1, HV, D), 3.0, dtype=act)
    p = pool.clone()
    o, st = gv.fused_recurrent_gated_delta_rule_packed_decode(mq, a, b, A_log, dt_bias, None, p, out, idx, norm)
    assert o is out and st is p
    assert torch.equal(out, ro)
    assert torch.equal(p, rp)
    for n in range(B):
        if int(idx[n]) <= 0:
            assert bool((out[n] == 0).all()), "a padded request's output row is zero"


def test_vllm_packed_fallbacks_match():
    """16-bit dt_bias (widened, cached), strided gates and indices (copied by the adapter), a row-strided pool."""
    B, H, HV = 4, 2, 4
    mq, a, b, A_log, dt_bias, pool = inputs(7, B, H, HV)
    big = torch.randn(B, 3 * HV).to(torch.bfloat16)
    a2, b2 = big[:, :HV], big[:, HV:2 * HV]  # strided rows
    idx = torch.tensor([[2, 0], [5, 0], [-1, 0], [8, 0]], dtype=torch.int32)[:, 0]  # strided
    buf = (torch.randn(9, 2, HV, D, D) * 0.1)
    for A, dtb, ga, gb in [(A_log, dt_bias.bfloat16(), a, b), (A_log, dt_bias, a2, b2)]:
        pool = buf[:, 1].clone()
        ro, rp = reference(mq, ga, gb, A, dtb, pool, idx, 0.125, True, "null-slot", H, HV)
        p = buf.clone()[:, 1]
        out = torch.empty(B, 1, HV, D, dtype=torch.bfloat16)
        gv.fused_recurrent_gated_delta_rule_packed_decode(mq, ga, gb, A, dtb, 0.125, p, out, idx, True)
        assert torch.equal(out, ro)
        assert torch.equal(p, rp)


def test_vllm_packed_errors_are_decodes():
    """gdn's validation errors on the derived descriptors are the ones gdn.decode raises on the views."""
    B, H, HV = 2, 2, 4
    mq, a, b, A_log, dt_bias, pool = inputs(3, B, H, HV)
    idx = torch.tensor([1, 2], dtype=torch.int32)
    out = torch.empty(B, 1, HV, D, dtype=torch.bfloat16)
    cases = [
        dict(a=a.half()),  # a's dtype differs from q's
        dict(idx=idx.float()),  # a float index tensor
        dict(A_log=torch.randn(HV + 1)),  # A_log of the wrong length
    ]
    for case in cases:
        ca, ci, cA = case.get("a", a), case.get("idx", idx), case.get("A_log", A_log)
        with pytest.raises(Exception) as want:
            reference(mq, ca, b, cA, dt_bias, pool, ci, 0.1, False, "null-slot", H, HV)
        with pytest.raises(type(want.value)) as got:
            gv.fused_recurrent_gated_delta_rule_packed_decode(mq, ca, b, cA, dt_bias, 0.1, pool, out, ci)
        assert str(got.value) == str(want.value)
    with pytest.raises(NotImplementedError, match="argument 'dt_bias'"):
        gv.fused_recurrent_gated_delta_rule_packed_decode(mq, a, b, A_log, dt_bias.int(), 0.1, pool, out, idx)


def test_sglang_packed_is_decode_on_views(monkeypatch):
    taken = []
    monkeypatch.setattr(gs, "_PACKED", lambda *args: taken.append(gdn._gdn.packed_decode(*args)) or taken[-1])
    B, H, HV = 4, 2, 4
    mq, a, b, A_log, dt_bias, pool = inputs(11, B, H, HV)
    dt_bias = dt_bias.bfloat16()  # sglang keeps dt_bias in the model dtype
    idx = torch.tensor([6, -1, 1, 3], dtype=torch.int64)  # -1: padding
    ro, rp = reference(mq, a, b, A_log, dt_bias, pool, idx, None, True, "negative", H, HV)
    kernel = gs.GDNKernel()
    for scale in (None, D ** -0.5):
        p = pool.clone()
        o = kernel.packed_decode(mq, a, b, A_log=A_log, dt_bias=dt_bias, scale=scale, ssm_states=p,
                                 cache_indices=idx, num_v_heads=HV, head_v_dim=D)
        assert tuple(o.shape) == (1, B, HV, D)
        assert torch.equal(o.transpose(0, 1), ro)
        assert torch.equal(p, rp)
    assert len(taken) == 2 and all(r is not None for r in taken), "the one-call path takes these inputs"
    with pytest.raises(ValueError, match="num_v_heads"):
        kernel.packed_decode(mq, a, b, A_log=A_log, dt_bias=dt_bias, scale=None, ssm_states=p,
                             cache_indices=idx, num_v_heads=HV * 2, head_v_dim=D)
