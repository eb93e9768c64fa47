"""gdn.sglang.GDNKernel on torch CPU tensors (gdn's CPU backend) against a float64 torch reference of the
recurrence written here from sglang's kernel semantics (sglang 0.5.23: TritonGDNKernel / FlashInferGDNKernel):
the layer's pool as a view of the all-layer buffer (dense, and a page-major envelope whose rows are further
apart than one state), -1 padding, in-place prefill with checkpoints, multi-item scoring without write-back,
target verify into the intermediate buffer with the pool untouched, q/k/v as views of mixed_qkv, and the
errors of what gdn does not run. sglang itself is not imported."""

import inspect

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from gdn.sglang import GDNKernel  # noqa: E402

H, HV, D = 2, 4, 128
BF = torch.bfloat16
SCALE = D ** -0.5


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(g, *shape, scale=1.0, dtype=torch.float32):
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def mixed(g, n, pad_cols=16):
    """The projection after the conv, [n, 2*H*D + HV*D], per token [q heads | k heads | v heads], as a column
    slice of a wider buffer (row stride > width)."""
    w = 2 * H * D + HV * D
    return randn(g, n, w + pad_cols, dtype=BF)[:, :w]


def split(mq):
    """q, k, v as sglang's backend makes them: [1, n, heads, D] views of mixed_qkv."""
    n = mq.shape[0]
    q, k, v = torch.split(mq, [H * D, H * D, HV * D], dim=-1)
    return q.view(1, n, H, D), k.view(1, n, H, D), v.view(1, n, HV, D)


def raw_gates(g, n):
    a = randn(g, n, HV, dtype=BF)
    b = randn(g, n, HV, dtype=BF)
    A_log = randn(g, HV, scale=0.5)
    dt_bias = randn(g, HV, scale=0.5).to(BF)  # sglang's Qwen layers keep dt_bias in the model dtype
    return A_log, a, dt_bias, b


def gates_from_raw(A_log, a, dt_bias, b):
    return (-torch.exp(A_log.double()) * F.softplus(a.double() + dt_bias.double()), torch.sigmoid(b.double()))


def ref_seq(state, q, k, v, g, beta, scale=SCALE, l2norm=True):
    """One sequence in float64: state [HV, V, K] or None; q, k [T, H, K]; v [T, HV, V]; g (log decay), beta
    [T, HV]. Returns (out [T, HV, V], states after each token [T, HV, V, K])."""
    rep = HV // H
    S = torch.zeros(HV, D, D, dtype=torch.float64) if state is None else state.double().clone()
    outs, states = [], []
    for t in range(q.shape[0]):
        qt, kt = q[t].double(), k[t].double()
        if l2norm:
            qt = qt / torch.sqrt((qt * qt).sum(-1, keepdim=True) + 1e-6)
            kt = kt / torch.sqrt((kt * kt).sum(-1, keepdim=True) + 1e-6)
        qh, kh = qt.repeat_interleave(rep, 0), kt.repeat_interleave(rep, 0)
        S = S * torch.exp(g[t].double())[:, None, None]
        delta = beta[t].double()[:, None] * (v[t].double() - torch.einsum("hvk,hk->hv", S, kh))
        S = S + delta[:, :, None] * kh[:, None, :]
        outs.append(scale * torch.einsum("hvk,hk->hv", S, qh))
        states.append(S.clone())
    return torch.stack(outs), torch.stack(states)


def close(x, ref, tol=2e-2, what=""):
    x = x.double()
    err = (x - ref).abs()
    assert torch.isfinite(x).all(), f"{what}: non-finite values"
    assert bool((err <= tol + tol * ref.abs()).all()), f"{what}: max err {err.max().item():.3e}"


def envelope(g, slots, layers=3, layer=1, dtype=torch.float32):
    """A page-major pool: [slots, layers, HV, V, K], this layer's view has rows `layers` states apart."""
    buf = randn(g, slots, layers, HV, D, D, scale=0.1, dtype=dtype)
    return buf, buf[:, layer]


KER = GDNKernel()


# ---- decode ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_decode_envelope_pool_padding(packed, state_dtype):
    g = gen(1 + packed)
    B, slots = 5, 8
    mq = mixed(g, B)
    A_log, a, dt_bias, b = raw_gates(g, B)
    buf, pool = envelope(g, slots, dtype=state_dtype)
    before = buf.clone()
    idx = torch.tensor([6, -1, 0, 3, -1], dtype=torch.int32)  # slot 0 is a real slot in sglang; -1 is padding
    if packed:
        o = KER.packed_decode(mq, a, b, A_log=A_log, dt_bias=dt_bias, scale=SCALE, ssm_states=pool,
                              cache_indices=idx, num_v_heads=HV, head_v_dim=D, replayssm_d=None, replayssm_k=None,
                              replayssm_g=None, replayssm_write_pos=None, replayssm_force_flush=None)
    else:
        q, k, v = split(mq)
        o = KER.decode(q, k, v, a, b, A_log=A_log, dt_bias=dt_bias, ssm_states=pool, cache_indices=idx,
                       query_start_loc=torch.arange(B + 1, dtype=torch.int32))
    assert o.shape == (1, B, HV, D) and o.dtype == BF
    q, k, v = split(mq)
    gl, beta = gates_from_raw(A_log, a, dt_bias, b)
    tol = 2e-2 if state_dtype is torch.float32 else 4e-2
    for n in range(B):
        r = int(idx[n])
        if r < 0:
            assert bool((o[0, n] == 0).all())
            continue
        ro, rs = ref_seq(before[r, 1], q[0, n:n + 1], k[0, n:n + 1], v[0, n:n + 1], gl[n:n + 1], beta[n:n + 1])
        close(o[0, n], ro[0], what=f"o[{n}]")
        close(buf[r, 1], rs[-1], tol=tol, what=f"pool row {r}")
    for r in range(slots):
        for lay in range(3):
            if lay == 1 and r in (6, 0, 3):
                continue
            assert torch.equal(buf[r, lay], before[r, lay]), f"row {r}, layer {lay} must be untouched"


# ---- extend ----------------------------------------------------------------------------------------------

def _extend_inputs(g, lens):
    L = sum(lens)
    mq = mixed(g, L)
    q, k, v = split(mq)
    gl = -torch.rand(1, L, HV, generator=g) * 0.3
    beta = torch.rand(1, L, HV, generator=g)
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32)
    return q, k, v, gl, beta, cu


@pytest.mark.parametrize("layout", ["dense", "envelope"])
def test_extend_in_place_with_checkpoints(layout):
    g = gen(3)
    lens = [130, 0, 64, 5, 3]
    q, k, v, gl, beta, cu = _extend_inputs(g, lens)
    N = len(lens)
    slots = 9
    if layout == "dense":
        allbuf = randn(g, 2, slots, HV, D, D, scale=0.1)  # [layers, slots, ...]: the layer's view is dense
        buf, pool = allbuf, allbuf[1]
        row = lambda r: allbuf[1, r]  # noqa: E731
        before_row = lambda bb, r: bb[1, r]  # noqa: E731
    else:
        buf, pool = envelope(g, slots)
        row = lambda r: buf[r, 1]  # noqa: E731
        before_row = lambda bb, r: bb[r, 1]  # noqa: E731
    before = buf.clone()
    idx = torch.tensor([4, 2, 7, -1, 0], dtype=torch.int32)
    every = 64
    counts = [n // every for n in lens]
    starts = torch.tensor([0] + [sum(counts[:i + 1]) for i in range(N)], dtype=torch.int64)
    C = int(starts[-1])
    out = torch.full((1, sum(lens), HV, D), 3.0, dtype=BF)
    o, none, h = KER.extend(q, k, v, gl, beta, ssm_states=pool, cache_indices=idx, query_start_loc=cu,
                            state_checkpoint_cu_starts=starts, num_state_checkpoints=C,
                            state_checkpoint_every_n_tokens=every, output=out, layer_id=3,
                            extend_prefix_lens=torch.zeros(N, dtype=torch.int32), track_state=None,
                            track_chunk_idx=None)
    assert o is out and none is None and h.shape == (1, C, HV, D, D) and h.dtype == torch.float32
    for n in range(N):
        r = int(idx[n])
        sl = slice(int(cu[n]), int(cu[n + 1]))
        if r < 0:
            assert bool((o[0, sl] == 0).all())
            continue
        if lens[n] == 0:
            assert torch.equal(row(r), before_row(before, r)), "a zero-length sequence keeps its row"
            continue
        ro, rs = ref_seq(before_row(before, r), q[0, sl], k[0, sl], v[0, sl], gl[0, sl], beta[0, sl])
        close(o[0, sl], ro, what=f"o of sequence {n}")
        close(row(r), rs[-1], what=f"pool row {r}")
        for j in range(counts[n]):
            close(h[0, int(starts[n]) + j], rs[(j + 1) * every - 1], what=f"checkpoint {j} of sequence {n}")
    for r in range(slots):
        if r not in (4, 7, 0):
            assert torch.equal(row(r), before_row(before, r))


def test_extend_without_write_back():
    """inplace_update=False (multi-item scoring): outputs from the pool's rows, the pool unchanged."""
    g = gen(4)
    lens = [6, 3, 2]
    q, k, v, gl, beta, cu = _extend_inputs(g, lens)
    pool = randn(g, 5, HV, D, D, scale=0.1)
    before = pool.clone()
    idx = torch.tensor([3, -1, 1], dtype=torch.int32)
    o, _, h = KER.extend(q, k, v, gl, beta, ssm_states=pool, cache_indices=idx, query_start_loc=cu,
                         inplace_update=False)
    assert h is None and torch.equal(pool, before)
    for n in range(3):
        sl = slice(int(cu[n]), int(cu[n + 1]))
        if int(idx[n]) < 0:
            assert bool((o[0, sl] == 0).all())
            continue
        ro, _ = ref_seq(before[int(idx[n])], q[0, sl], k[0, sl], v[0, sl], gl[0, sl], beta[0, sl])
        close(o[0, sl], ro, what=f"o of sequence {n}")


# ---- target verify ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("strided", [True, False])
def test_target_verify(strided):
    g = gen(5 + strided)
    Bn, T, pool_size = 3, 3, 6
    L = Bn * T
    mq = mixed(g, L)
    if strided:
        q, k, v = split(mq)  # sglang's strided route (supports_strided_target_verify_qkv)
    else:
        q, k, v = (x.contiguous() for x in split(mq))
    A_log, a, dt_bias, b = raw_gates(g, L)
    buf, pool = envelope(g, pool_size + 1)
    before = buf.clone()
    ib = torch.full((pool_size + 1, T, HV, D, D), 9.0)
    positional = torch.arange(pool_size + 1, dtype=torch.int32)  # sglang's default verify row table
    idx = torch.tensor([5, -1, 2], dtype=torch.int32)
    cu = torch.arange(Bn + 1, dtype=torch.int32) * T
    o = KER.target_verify(A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=pool,
                          cache_indices=idx, query_start_loc=cu, intermediate_states_buffer=ib,
                          intermediate_state_indices=positional, cache_steps=T, retrieve_parent_token=None,
                          stable_rows=False)
    assert o.shape == (1, L, HV, D)
    assert torch.equal(buf, before), "verify leaves the pool as it is"
    gl, beta = gates_from_raw(A_log, a, dt_bias, b)
    for n in range(Bn):
        sl = slice(n * T, (n + 1) * T)
        r = int(idx[n])
        ro, rs = ref_seq(None if r < 0 else before[r, 1], q[0, sl], k[0, sl], v[0, sl], gl[sl], beta[sl])
        close(o[0, sl], ro, what=f"o of request {n}")
        close(ib[n], rs, what=f"intermediate row {n}")  # a padded request runs from a zero state, as sglang's
    assert bool((ib[Bn:] == 9.0).all()), "rows of other requests are untouched"


# ---- errors and interface ------------------------------------------------------------------------------------

def _verify_kw(g, **change):
    Bn, T = 2, 2
    L = Bn * T
    q, k, v = split(mixed(g, L))
    A_log, a, dt_bias, b = raw_gates(g, L)
    kw = dict(A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, ssm_states=torch.zeros(4, HV, D, D),
              cache_indices=torch.tensor([1, 2], dtype=torch.int32),
              query_start_loc=torch.tensor([0, 2, 4], dtype=torch.int32),
              intermediate_states_buffer=torch.zeros(4, T, HV, D, D),
              intermediate_state_indices=torch.arange(4, dtype=torch.int32), cache_steps=T,
              retrieve_parent_token=None)
    kw.update(change)
    return kw


@pytest.mark.parametrize("change, err, match", [
    (dict(retrieve_parent_token=torch.zeros(2, 2, dtype=torch.int64)), NotImplementedError, "retrieve_parent_token"),
    (dict(stable_rows=True), NotImplementedError, "stable_rows"),
    (dict(intermediate_states_buffer=torch.zeros(4, 2, HV, D, D, dtype=BF)), NotImplementedError, "bfloat16"),
    (dict(intermediate_states_buffer=torch.zeros(4, 3, HV, D, D)), NotImplementedError, "draft tokens"),
    (dict(intermediate_state_indices=torch.tensor([1, 0, 2, 3], dtype=torch.int32)), NotImplementedError,
     "positional"),
    (dict(ssm_states=torch.zeros(4, HV, D, D, dtype=torch.float64)), NotImplementedError, "float64"),
    (dict(new_feature=torch.zeros(1)), NotImplementedError, "new_feature"),
    (dict(cache_steps=3), ValueError, "cache_steps"),
])
def test_verify_errors(change, err, match):
    kw = _verify_kw(gen(7), **change)
    with pytest.raises(err, match=match):
        KER.target_verify(**kw)
    assert bool((kw["intermediate_states_buffer"] == 0).all())


def test_extend_and_decode_errors():
    g = gen(8)
    q, k, v, gl, beta, cu = _extend_inputs(g, [70])
    pool = torch.zeros(3, HV, D, D)
    base = dict(ssm_states=pool, cache_indices=torch.tensor([1], dtype=torch.int32), query_start_loc=cu)
    with pytest.raises(NotImplementedError, match="state_checkpoint_every_n_tokens=100"):
        KER.extend(q, k, v, gl, beta, state_checkpoint_cu_starts=torch.tensor([0, 0]), num_state_checkpoints=1,
                   state_checkpoint_every_n_tokens=100, **base)
    with pytest.raises(NotImplementedError, match="track_state"):
        KER.extend(q, k, v, gl, beta, track_state=torch.zeros(1, HV, D, D),
                   track_chunk_idx=torch.zeros(1, dtype=torch.int32), **base)
    with pytest.raises(NotImplementedError, match="float32"):
        KER.extend(q.float(), k.float(), v.float(), gl, beta, **base)
    with pytest.raises(NotImplementedError, match="float64"):
        KER.extend(q, k, v, gl.double(), beta, **base)
    with pytest.raises(ValueError, match="output shape"):
        KER.extend(q, k, v, gl, beta, output=torch.empty(1, 3, HV, D, dtype=BF), **base)
    mq = mixed(g, 2)
    A_log, a, dt_bias, b = raw_gates(g, 2)
    with pytest.raises(NotImplementedError, match="replayssm_d"):
        KER.packed_decode(mq, a, b, A_log=A_log, dt_bias=dt_bias, scale=SCALE, ssm_states=pool,
                          cache_indices=torch.tensor([1, 2], dtype=torch.int32), num_v_heads=HV, head_v_dim=D,
                          replayssm_d=torch.zeros(1))
    with pytest.raises(NotImplementedError, match="float32"):
        KER.packed_decode(mq.float(), a, b, A_log=A_log, dt_bias=dt_bias, scale=SCALE, ssm_states=pool,
                          cache_indices=torch.tensor([1, 2], dtype=torch.int32), num_v_heads=HV, head_v_dim=D)
    assert bool((pool == 0).all())


def test_interface_matches_sglang():
    """Method names, parameter kinds and defaults of sglang 0.5.23's kernel interface (copied here as data)."""
    want = {
        "packed_decode": ["self", "mixed_qkv", "a", "b", "*", "A_log", "dt_bias", "scale", "ssm_states",
                          "cache_indices", "num_v_heads", "head_v_dim"],
        "decode": ["self", "q", "k", "v", "a", "b", "*", "A_log", "dt_bias", "ssm_states", "cache_indices",
                   "query_start_loc"],
        "extend": ["self", "q", "k", "v", "g", "beta", "*", "ssm_states", "cache_indices", "query_start_loc",
                   "inplace_update=True"],
        "target_verify": ["self", "A_log", "dt_bias", "q", "k", "v", "a", "b", "*", "ssm_states", "cache_indices",
                          "query_start_loc", "intermediate_states_buffer", "intermediate_state_indices",
                          "cache_steps", "retrieve_parent_token"],
    }
    for name, params in want.items():
        sig = inspect.signature(getattr(GDNKernel, name))
        got, star = [], False
        for p in sig.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                continue
            if p.kind is p.KEYWORD_ONLY and not star:
                got.append("*")
                star = True
            got.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
        # sglang's keyword-only parameters come first; gdn's class may accept more optional keywords after them
        assert got[:len(params)] == params, name
        assert any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()), name
    assert GDNKernel.supports_packed_decode and GDNKernel.uses_state_checkpoints
    assert not GDNKernel.supports_track_state_snapshot


def test_patch_wraps_the_dispatcher(monkeypatch):
    """patch() makes new GDNKernelDispatchers use GDNKernel (a stand-in module here: sglang is not imported)."""
    import sys
    import types

    from gdn import sglang as gs

    name = "sglang.srt.layers.attention.linear.gdn_backend"
    fake = types.ModuleType(name)
    triton = object()

    class GDNKernelDispatcher:
        def __init__(self, decode_backend, prefill_backend, verify_backend=None):
            self.decode_kernel = self.extend_kernel = self.verify_kernel = self.tree_verify_kernel = triton
            self.verify_kernel_is_flashinfer = False
            self.supports_packed_decode = False

        @property
        def extend_uses_state_checkpoints(self):
            return self.extend_kernel.uses_state_checkpoints

    fake.GDNKernelDispatcher = GDNKernelDispatcher
    monkeypatch.setitem(sys.modules, name, fake)
    orig = GDNKernelDispatcher.__init__
    assert gs.patch() is fake
    gs.patch()
    d = GDNKernelDispatcher("triton", "triton")
    assert isinstance(d.decode_kernel, GDNKernel) and d.extend_kernel is d.decode_kernel is d.verify_kernel
    assert d.tree_verify_kernel is triton and d.supports_packed_decode and d.extend_uses_state_checkpoints
    gs.unpatch()
    assert GDNKernelDispatcher.__init__ is orig
    assert GDNKernelDispatcher("triton", "triton").decode_kernel is triton
