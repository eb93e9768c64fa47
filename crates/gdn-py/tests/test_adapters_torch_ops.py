"""torch.ops.gdn (gdn._torch_ops) on torch CPU tensors: every op called with its optional mutated buffer
omitted and given, against the gdn function it wraps, and one torch.compile trace (fake implementations and
mutation annotations, aot_eager backend: no compiler needed). Runs with the adapters' tests (it needs torch):
pytest crates/gdn-py/tests/test_adapters_torch_ops.py."""

import pytest

torch = pytest.importorskip("torch")

import gdn  # noqa: E402
import gdn._torch_ops  # noqa: E402,F401  (registers torch.ops.gdn.*)

H, HV, D = 2, 4, 64
BF = torch.bfloat16


def rnd(*s, dtype=torch.float32, scale=1.0):
    return (torch.randn(*s) * scale).to(dtype)


def gates(*lead):
    return rnd(HV), rnd(*lead, HV, dtype=BF), rnd(HV), rnd(*lead, HV, dtype=BF)


def same(a, b, what):
    assert a.dtype == b.dtype and a.shape == b.shape, what
    assert torch.equal(a, b), f"{what}: differs from the gdn function's result"


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def prefill_inputs(lens=(64, 128)):
    T, N = sum(lens), len(lens)
    q, k, v = rnd(T, H, D, dtype=BF, scale=0.1), rnd(T, H, D, dtype=BF, scale=0.1), rnd(T, HV, D, dtype=BF)
    A, a, dtb, b = gates(T)
    cu = torch.tensor([0, lens[0], T])
    return q, k, v, rnd(N, HV, D, D, scale=0.1), A, a, dtb, b, cu


def mtp_inputs(B=2, T=3, pool=5):
    q, k, v = (rnd(B, T, H, D, dtype=BF, scale=0.1), rnd(B, T, H, D, dtype=BF, scale=0.1),
               rnd(B, T, HV, D, dtype=BF))
    A, a, dtb, b = gates(B, T)
    return q, k, v, rnd(pool, HV, D, D, scale=0.1), torch.tensor([3, 1], dtype=torch.int32), A, a, dtb, b


def test_prefill_without_and_with_checkpoints():
    x = prefill_inputs()
    o, s = torch.ops.gdn.prefill(*x)  # checkpoints omitted: a trailing mutated argument at its default
    ro, rs = gdn.prefill(*x)
    same(o, ro, "prefill output")
    same(s, rs, "prefill new_state")
    cs = torch.tensor([0, 1, 3], dtype=torch.int32)
    ck = torch.zeros(3, HV, D, D)
    o, s = torch.ops.gdn.prefill(*x, checkpoint_every=64, checkpoint_cu_starts=cs, checkpoints=ck)
    rk = torch.zeros_like(ck)
    gdn.prefill(*x, checkpoint_every=64, checkpoint_cu_starts=cs, checkpoints=rk)
    same(ck, rk, "prefill checkpoints")
    assert ck.abs().sum() > 0


def test_prefill_pool_without_checkpoints():
    q, k, v, _, A, a, dtb, b, cu = prefill_inputs()
    pool = rnd(4, HV, D, D, scale=0.1)
    idx = torch.tensor([2, 0], dtype=torch.int32)
    ref = pool.clone()
    o = torch.ops.gdn.prefill_pool(q, k, v, pool, idx, A, a, dtb, b, cu)
    ro, _ = gdn.prefill(q, k, v, ref, A, a, dtb, b, cu, state_indices=idx)
    same(o, ro, "prefill_pool output")
    same(pool, ref, "prefill_pool pool")


def test_mtp_without_and_with_buffer():
    x = mtp_inputs()
    o = torch.ops.gdn.mtp(*x)  # intermediate_states_buffer omitted
    ro, _ = gdn.mtp(*x)
    same(o, ro, "mtp output")
    inter, rinter = torch.zeros(5, 3, HV, D, D), torch.zeros(5, 3, HV, D, D)
    torch.ops.gdn.mtp(*x, None, inter)
    gdn.mtp(*x, None, rinter)
    same(inter, rinter, "mtp intermediate states")


def test_mtp_pool_without_buffer():
    x = mtp_inputs()
    ref = x[3].clone()
    o = torch.ops.gdn.mtp_pool(*x)
    ro, _ = gdn.mtp(*x[:3], ref, *x[4:], update_pool=True)
    same(o, ro, "mtp_pool output")
    same(x[3], ref, "mtp_pool pool")


def test_compiled_prefill_with_checkpoints():
    x = prefill_inputs()
    cs = torch.tensor([0, 1, 3], dtype=torch.int32)

    def f(ck, *t):
        return torch.ops.gdn.prefill(*t, checkpoint_every=64, checkpoint_cu_starts=cs, checkpoints=ck)

    ck, rk = torch.zeros(3, HV, D, D), torch.zeros(3, HV, D, D)
    o, _ = torch.compile(f, backend="aot_eager", fullgraph=True)(ck, *x)
    ro, _ = gdn.prefill(*x, checkpoint_every=64, checkpoint_cu_starts=cs, checkpoints=rk)
    same(o, ro, "compiled prefill output")
    same(ck, rk, "compiled prefill checkpoints (the mutation survives functionalization)")


# ---------------------------------------------------------------------------------------------------------------
# torch tensors as gdn reads them (DLPack's C exchange API where torch has it, torch's methods otherwise)

def decode_inputs(B=3):
    q, k, v = rnd(B, 1, H, D, dtype=BF, scale=0.1), rnd(B, 1, H, D, dtype=BF, scale=0.1), rnd(B, 1, HV, D, dtype=BF)
    A, a, dtb, b = gates(B, 1)
    return q, k, v, rnd(B, HV, D, D, scale=0.1), A, a, dtb, b


def test_tensor_kinds_give_the_same_call():
    x = decode_inputs()
    ro, rs = gdn.decode(*x)
    # parameters that require grad (as a model's A_log / dt_bias are), a view with strided rows, the state given
    # in place (new_state=state)
    params = [torch.nn.Parameter(t.clone()) for t in (x[4], x[6])]
    wide = torch.zeros(3, 1, H, 2 * D, dtype=BF)
    wide[..., :D] = x[0]
    with torch.no_grad():
        variants = [
            (x[0], x[1], x[2], x[3], params[0], x[5], params[1], x[7]),
            (wide[..., :D], *x[1:]),
        ]
        for i, y in enumerate(variants):
            out, ns = torch.empty_like(ro), torch.empty_like(rs)
            o, s = gdn.decode(*y, output=out, new_state=ns)
            assert o is out and s is ns
            same(out, ro, f"variant {i} output")
            same(ns, rs, f"variant {i} new_state")
        st = x[3].clone()
        o, s = gdn.decode(*x[:3], st, *x[4:], output=torch.empty_like(ro), new_state=st)
        assert s is st
        same(st, rs, "in-place new_state")

def test_errors_name_the_argument():
    x = list(decode_inputs())
    out = torch.empty(3, 1, HV, D, dtype=BF)
    with pytest.raises(TypeError, match="'q'"):
        gdn.decode(x[0].double(), *x[1:], output=out, new_state=torch.empty_like(x[3]))
    with pytest.raises(ValueError, match="'output'"):
        gdn.decode(*x, output=torch.empty(3, 1, HV, D, dtype=BF, device="meta"), new_state=torch.empty_like(x[3]))
    with pytest.raises(ValueError, match="'new_state'"):
        gdn.decode(*x, output=out, new_state=torch.empty(2, HV, D, D))
    with pytest.raises(TypeError, match="'scale'"):
        gdn.decode(*x, object(), output=out, new_state=torch.empty_like(x[3]))
    with pytest.raises(TypeError, match="use_qk_l2norm_in_kernel"):
        gdn.decode(*x, output=out, new_state=torch.empty_like(x[3]), use_qk_l2norm_in_kernel=1)
