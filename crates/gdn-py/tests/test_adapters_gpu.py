"""GPU tests of gdn's engine adapters (gdn.fla, gdn.flashinfer, gdn.vllm, gdn.sglang, gdn.transformers) on torch CUDA
tensors. Skipped without torch, a CUDA device or gdn's CUDA backend. Run on the GPU machine by
`ADAPTERS=1 bash scripts/device_python.sh`; with .peers2 carried, FLA 0.6 and FlashInfer 0.7.2 are importable there.

What each call is checked against:
  * the float64 reference of test_adapters_fla.py (`reference`, K-first states, on the CPU), always: every element
    within atol = rtol = 1e-2 (the contest rule) and rel-L2 within a bound per kind of result (below). For gdn.vllm
    and gdn.sglang this is the only comparison: vLLM and sglang are not installed on the GPU machine.
  * the engine's own GPU kernels on the same inputs, where importable: FLA's chunk_gated_delta_rule and
    fused_recurrent_gated_delta_rule (Triton), FlashInfer's gdn_prefill.chunk_gated_delta_rule and the
    gdn_decode functions (CuTe-DSL), and transformers' own torch functions: every element within the contest
    tolerance of the peer's result, and rel-L2 against float64 no worse than the peer's own (at most 1.25x the
    peer's plus a floor: 4e-3 for bf16 outputs, 1e-5 for recurrent fp32 states, 1e-3 for prefill states). A peer
    call that raises is printed and recorded, not failed: it says nothing about gdn.
  * the decode paths that engines capture in CUDA graphs (vLLM packed decode and spec-decode verify with padded
    slots, FLA fused_recurrent decode, FlashInfer decode_pretranspose on a pool, sglang packed decode and decode):
    capture, then replay with the captured inputs and with new values (new pool rows and padding) copied into
    them; each replay equal bit for bit to an eager call from the same state.
  * host synchronisation: every adapter call on CUDA tensors runs under torch.cuda.set_sync_debug_mode("error"),
    so a synchronising torch operation inside it (a read of a device value on the host) fails the test.
  * HF transformers: a tiny random-weight Qwen3-Next model (3 GDN layers and 1 attention layer, 4 q/k and 8 value
    heads of 128) in bfloat16, patched, against the model's own torch path and FLA's in the same place: prefill
    logits of two 512-token prompts (rel-L2, top-1 agreement) and a 64-token greedy continuation.

rel-L2 bounds against float64: bf16 outputs 8e-3; decode and per-token states 1e-3 (with in-kernel q/k norm one
bf16 ulp of a normalised k moves a state by ~3e-4); prefill states 5e-3 (tensor-core products in the chunked
kernels); bfloat16 states 8e-3. These are test_gpu.py's bounds for the same kernels.

Each comparison's rel-L2 (gdn's, the peer's, gdn against the peer) is appended to $OUT/adapters_gpu_metrics.json
when OUT is set. A test runs all its comparisons and then fails once, listing every one that failed.
"""

import contextlib
import importlib
import inspect
import json
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import gdn  # noqa: E402

if gdn.cuda_unavailable_reason() is not None:
    pytest.skip(f"gdn CUDA backend unavailable: {gdn.cuda_unavailable_reason()}", allow_module_level=True)

import gdn.fla as gf  # noqa: E402
import gdn.flashinfer as gfi  # noqa: E402
import gdn.transformers as gtr  # noqa: E402
import gdn.vllm as gv  # noqa: E402
from gdn.sglang import GDNKernel  # noqa: E402
from test_adapters_fla import batch_ref, check_close, log_decay, make, raw_gates, reference  # noqa: E402


def _load(name):
    try:
        return importlib.import_module(name), None
    except Exception as e:  # noqa: BLE001 - any import failure means "not available here"
        return None, f"{name} is not importable here ({type(e).__name__}: {str(e)[:200]})"


FLA, FLA_WHY = _load("fla.ops.gated_delta_rule")
FI_PRE, FI_PRE_WHY = _load("flashinfer.gdn_prefill")
FI_DEC, FI_DEC_WHY = _load("flashinfer.gdn_decode")

DEV = torch.device("cuda")
H, HV, D = 4, 8, 128
W = (2 * H + HV) * D  # a token's row of the fused projection mixed_qkv: [q heads | k heads | v heads]
SCALE = D ** -0.5
BF = torch.bfloat16
NAN = float("nan")

OUT_L2, DEC_L2, PRE_L2, BF16_L2 = 8e-3, 1e-3, 5e-3, 8e-3
TOL = 1e-2
# slack of "no worse than the peer" (on top of 1.25x the peer's rel-L2): bf16 output rounding; a recurrent fp32
# state; a prefill state, whose ~2e-3 from tensor-core products is a property of the chunked kernels, not of an adapter
OUT_FLOOR, STATE_FLOOR, PRE_FLOOR = 4e-3, 1e-5, 1e-3


# ---------------------------------------------------------------------------------------------------------------
# bookkeeping

METRICS = []
RUN = {"device": torch.cuda.get_device_name(DEV), "torch": torch.__version__, "gdn": gdn.__version__,
       "fla": FLA_WHY or "ok", "flashinfer": FI_DEC_WHY or FI_PRE_WHY or "ok"}


def record(what, **vals):
    """Appends one comparison's figures to $OUT/adapters_gpu_metrics.json (rewritten each time: a run cut short keeps
    what it measured)."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    METRICS.append({"test": test, "what": what, **vals})
    out = os.environ.get("OUT")
    if out:
        try:
            with open(os.path.join(out, "adapters_gpu_metrics.json"), "w") as f:
                json.dump({**RUN, "metrics": METRICS}, f, indent=1)
        except (OSError, TypeError, ValueError) as e:
            print(f"adapters_gpu_metrics.json not written: {e}")


def rel_l2(got, want):
    g, w = got.detach().double().cpu(), want.detach().double().cpu()
    return float((g - w).norm() / max(float(w.norm()), 1e-30))


class Checks:
    """The comparisons of one test: each failure is collected, and `done` fails once listing all of them, so that
    one GPU run reports every number."""

    def __init__(self):
        self.failed = []

    def true(self, cond, what):
        if not cond:
            self.failed.append(what)

    def ref(self, got, want, what, rel, tol=TOL):
        """got (any device) against a float64 CPU reference."""
        e = rel_l2(got, want)
        record(what, rel_f64=e, bound=rel)
        try:
            check_close(got.detach().double().cpu(), want, what, rel=rel, tol=tol)
        except AssertionError as err:
            self.failed.append(str(err))
        return e

    def peer(self, name, got, peer, want, what, rel, floor):
        """gdn's result against the peer's (contest rule) and both against float64: gdn no worse than the peer."""
        e_gdn, e_peer, e_gp = rel_l2(got, want), rel_l2(peer, want), rel_l2(got, peer)
        record(what, peer=name, rel_f64=e_gdn, peer_rel_f64=e_peer, rel_vs_peer=e_gp)
        print(f"{what}: rel-L2 vs float64 gdn {e_gdn:.2e}, {name} {e_peer:.2e}; gdn vs {name} {e_gp:.2e}")
        try:
            check_close(got.detach().double().cpu(), peer.detach().double().cpu(), f"{what} vs {name}", rel=2 * rel,
                        tol=TOL)
        except AssertionError as err:
            self.failed.append(str(err))
        if not e_gdn <= 1.25 * e_peer + floor:
            self.failed.append(f"{what}: rel-L2 vs float64 {e_gdn:.3e} is worse than {name}'s {e_peer:.3e} "
                               f"(allowed 1.25x + {floor:.0e})")

    def done(self):
        if self.failed:
            pytest.fail("\n".join(self.failed), pytrace=False)


@contextlib.contextmanager
def no_host_sync():
    """Synchronising torch operations raise inside (torch.cuda.set_sync_debug_mode("error"))."""
    prev = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(prev)


def run_gdn(c, what, fn):
    """An adapter call with host synchronisation turned into an error. A call that synchronises is recorded as a
    failure and run again without the check, so that its results are still compared."""
    try:
        with no_host_sync():
            res = fn()
        torch.cuda.synchronize()
        return res
    except RuntimeError as e:
        if "synchroniz" not in str(e):
            raise
        c.failed.append(f"{what}: a host synchronisation inside the call ({str(e)[:200]})")
    res = fn()
    torch.cuda.synchronize()
    return res


def peer_call(name, fn):
    """The peer's result, or None when it raises (printed and recorded: a peer that cannot run a call says nothing
    about gdn)."""
    try:
        res = fn()
        torch.cuda.synchronize()
        return res
    except Exception as e:  # noqa: BLE001
        msg = f"{name} raised {type(e).__name__}: {str(e)[:400]}"
        print("peer:", msg)
        record("peer call failed", peer=name, error=msg)
        return None


# ---------------------------------------------------------------------------------------------------------------
# inputs and the float64 reference (k-last wrappers of test_adapters_fla.reference)

def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(g, *shape, scale=1.0, dtype=torch.float32):
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def cuda(*xs):
    return tuple(None if x is None else x.to(DEV) for x in xs)


def kl(S):
    """k-last [.., V, K] <-> K-first [.., K, V] (a view)."""
    return S.transpose(-1, -2)


def offsets(lens):
    c = [0]
    for n in lens:
        c.append(c[-1] + n)
    return c


def ref_seqs(q, k, v, g, beta, h0=None, cu=None, qk_norm=False, scale=None):
    """reference() over packed sequences with k-last states. q, k [T, H, D]; v [T, HV, D]; g (log decay), beta
    [T, HV]; h0 [N, HV, V, K] k-last or None; cu: a list. Returns (o [T, HV, V], final [N, HV, V, K]) float64."""
    h = None if h0 is None else kl(h0.detach().cpu().double())
    o, S = reference(q.cpu(), k.cpu(), v.cpu(), g.cpu(), beta.cpu(), scale=scale, h0=h, cu=cu, qk_norm=qk_norm)
    return o, kl(S)


def states_of(q, k, v, g, beta, h0, qk_norm, at):
    """The k-last state of one sequence (q [T, H, D], h0 [HV, V, K] k-last or None) after each token count in `at`,
    stacked [len(at), HV, V, K]."""
    out = []
    for n in at:
        _, S = ref_seqs(q[:n], k[:n], v[:n], g[:n], beta[:n], h0=None if h0 is None else h0[None], qk_norm=qk_norm)
        out.append(S[0])
    return torch.stack(out)


def mixed_buf(g, n, pad=16):
    """A [n, W + pad] bfloat16 buffer whose first W columns are vLLM / sglang's mixed_qkv (row stride > width)."""
    return randn(g, n, W + pad, dtype=BF)


def split(mq, lead):
    """q, k, v views of mixed_qkv shaped lead + [heads, D]."""
    q, k, v = torch.split(mq, [H * D, H * D, HV * D], dim=-1)
    return q.view(*lead, H, D), k.view(*lead, H, D), v.view(*lead, HV, D)


def raw_tok(n, seed):
    """Raw gates of n tokens: a, b [n, HV] bfloat16; A_log, dt_bias [HV] float32; and the float64 log decay and
    beta they give."""
    a, b, A_log, dt_bias = raw_gates(n, 1, HV, seed)
    a, b = a.view(n, HV), b.view(n, HV)
    return a, b, A_log, dt_bias, log_decay(a, A_log, dt_bias), torch.sigmoid(b.double())


def _decode_raw(B, T, seed):
    q, k, v, _, _ = make(B, T, H, HV, D, seed=seed)
    a, b, A_log, dt_bias = raw_gates(B, T, HV, seed + 1)
    return q, k, v, a, b, A_log, dt_bias, log_decay(a, A_log, dt_bias), torch.sigmoid(b.double())


def untouched(after, before, keep_rows):
    return torch.equal(after.cpu()[keep_rows], before.cpu()[keep_rows])


# ---------------------------------------------------------------------------------------------------------------
# CUDA graphs

def capture(call):
    """A CUDA graph of `call`, after one warm-up run on a side stream (kernel loading, cached tensors)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        res = call()
    torch.cuda.synchronize()
    return graph, res


def graph_vs_eager(c, what, call, static, variants, state):
    """call() runs the adapter on the `static` tensors and returns a tuple of its outputs; `state` are the tensors
    it updates in place. variants: lists of values for `static` (the first is what was captured). For each: the
    state restored, an eager call without host sync, the state restored again, the captured outputs filled with
    NaN, a replay; outputs and state must equal the eager call's bit for bit."""
    saved = [t.clone() for t in state]
    try:
        graph, captured = capture(call)
    except Exception as e:  # noqa: BLE001
        c.failed.append(f"{what}: capture failed: {type(e).__name__}: {str(e)[:400]}")
        return
    state_ptrs = {t.data_ptr() for t in state}
    for i, vals in enumerate(variants):
        for dst, src in zip(static, vals):
            dst.copy_(src)
        for t, s in zip(state, saved):
            t.copy_(s)
        eager = [t.clone() for t in run_gdn(c, f"{what} (eager, variant {i})", call)]
        eager_state = [t.clone() for t in state]
        for t, s in zip(state, saved):
            t.copy_(s)
        for t in captured:
            if t.data_ptr() not in state_ptrs and t.is_floating_point():
                t.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        equal = True
        for j, (x, y) in enumerate(zip(captured, eager)):
            if not torch.equal(x, y):
                equal = False
                c.failed.append(f"{what}: variant {i}: output {j} of the replay differs from the eager call (max "
                                f"|diff| {(x.double() - y.double()).abs().max().item():.3e})")
        for j, (x, y) in enumerate(zip(state, eager_state)):
            if not torch.equal(x, y):
                equal = False
                c.failed.append(f"{what}: variant {i}: state {j} after the replay differs from the eager call")
        record(what + f" (graph replay, variant {i})", equal=equal)


# ---------------------------------------------------------------------------------------------------------------
# gdn.vllm (reference only: vLLM is not installed on the GPU machine)

@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_vllm_packed_decode(state_dtype):
    """mixed_qkv as a column slice of a wider buffer, the pool one layer's row-strided view, slots 0 and -1 as
    padding, in-kernel q/k norm, bfloat16 dt_bias (widened and cached by the adapter)."""
    c = Checks()
    g = gen(10)
    B, slots, layers = 8, 24, 2
    mqb = mixed_buf(g, B)
    a, b, A_log, dt_bias, gl, beta = raw_tok(B, 11)
    dt_bias = dt_bias.to(BF)
    gl = log_decay(a, A_log, dt_bias.float())
    buf = randn(g, slots, layers, HV, D, D, scale=0.1, dtype=state_dtype)
    idx = torch.tensor([5, 0, 17, 3, -1, 9, 22, 1], dtype=torch.int32)
    mqb_d, a_d, b_d, A_d, dtb_d, buf_d, idx_d = cuda(mqb, a, b, A_log, dt_bias, buf, idx)
    pool = buf_d[:, 1]
    out = torch.full((B, 1, HV, D), NAN, dtype=BF, device=DEV)
    o, st = run_gdn(c, "packed decode", lambda: gv.fused_recurrent_gated_delta_rule_packed_decode(
        mqb_d[:, :W], a_d, b_d, A_d, dtb_d, SCALE, pool, out, idx_d, True))
    c.true(o is out and st is pool, "returns (out, initial_state) themselves")
    q, k, v = split(mqb[:, :W], (B,))
    live = [n for n in range(B) if idx[n] > 0]
    rows = idx[live].long()
    ro, rs = ref_seqs(q[live], k[live], v[live], gl[live], beta[live], h0=buf[rows, 1].float(),
                      cu=list(range(len(live) + 1)), qk_norm=True)
    oc, bc = out.cpu(), buf_d.cpu()
    c.ref(oc[live, 0], ro, "output", OUT_L2)
    st_rel, st_tol = (DEC_L2, TOL) if state_dtype is torch.float32 else (BF16_L2, 2e-2)
    c.ref(bc[rows, 1].float(), rs, "pool rows", st_rel, st_tol)
    c.true(bool((oc[[1, 4]] == 0).all()), "padded requests' output rows are zero")
    keep = torch.ones(slots, layers, dtype=torch.bool)
    keep[rows, 1] = False
    c.true(untouched(bc, buf, keep), "rows no request owns (and the other layer) are untouched")
    c.done()


@pytest.mark.parametrize("kind", ["sigmoid", "recurrent"])
def test_vllm_decode_1d_slots(kind):
    """vLLM's non-spec decode: q/k/v [1, L, ..] views of mixed_qkv, int32 cu_seqlens 0..N, more tokens than
    sequences (CUDA-graph padding), 1-D slots with NULL_BLOCK_ID padding."""
    c = Checks()
    g = gen(20)
    N, L, slots = 6, 8, 16
    mqb = mixed_buf(g, L)
    a, b, A_log, dt_bias, gl, beta = raw_tok(L, 21)
    pool0 = randn(g, slots, HV, D, D, scale=0.1)
    idx = torch.tensor([5, 2, 0, 11, 6, 3, 3, 3], dtype=torch.int32)
    cu = torch.arange(N + 1, dtype=torch.int32)
    mqb_d, a_d, b_d, A_d, dtb_d, pool, idx_d, cu_d = cuda(mqb, a, b, A_log, dt_bias, pool0, idx, cu)
    q_d, k_d, v_d = split(mqb_d[:, :W], (1, L))
    if kind == "sigmoid":
        o, st = run_gdn(c, "decode", lambda: gv.fused_sigmoid_gating_delta_rule_update(
            A_log=A_d, a=a_d, b=b_d, dt_bias=dtb_d, q=q_d, k=k_d, v=v_d, initial_state=pool, inplace_final_state=True,
            cu_seqlens=cu_d, ssm_state_indices=idx_d, use_qk_l2norm_in_kernel=True))
    else:
        gl_d, bt_d = cuda(gl.float()[None], beta.float()[None])
        o, st = run_gdn(c, "decode", lambda: gv.fused_recurrent_gated_delta_rule(
            q_d, k_d, v_d, gl_d, bt_d, initial_state=pool, inplace_final_state=True, cu_seqlens=cu_d,
            ssm_state_indices=idx_d, use_qk_l2norm_in_kernel=True))
    c.true(st is pool and tuple(o.shape) == (1, L, HV, D), "returns (o [1, L, HV, V], the pool)")
    q, k, v = split(mqb[:, :W], (L,))
    live = [n for n in range(N) if idx[n] > 0]
    rows = idx[live].long()
    ro, rs = ref_seqs(q[live], k[live], v[live], gl[live], beta[live], h0=pool0[rows], cu=list(range(len(live) + 1)),
                      qk_norm=True)
    oc, pc = o.cpu(), pool.cpu()
    c.ref(oc[0, live], ro, "output", OUT_L2)
    c.ref(pc[rows], rs, "pool rows", DEC_L2)
    c.true(bool((oc[0, 2] == 0).all()), "the padded sequence's output row is zero")
    c.true(bool((oc[0, N:] == 0).all()), "tokens past cu_seqlens[-1] are zero")
    keep = torch.ones(slots, dtype=torch.bool)
    keep[rows] = False
    c.true(untouched(pc, pool0, keep), "rows no sequence owns are untouched")
    c.done()


def _spec_inputs(seed, N=5, S=3, slots=40):
    """A vLLM spec-decode batch: N requests of S tokens (the last one padding: slots all 0, no tokens), slots
    [N + 1, S] (one more row than requests), num_accepted_tokens, int32 cu_seqlens."""
    g = gen(seed)
    L = N * S
    mqb = mixed_buf(g, L)
    a, b, A_log, dt_bias, gl, beta = raw_tok(L, seed + 1)
    pool0 = randn(g, slots, HV, D, D, scale=0.1)
    perm = (torch.randperm(slots - 1, generator=g) + 1).to(torch.int32)
    idx = perm[:(N + 1) * S].view(N + 1, S).clone()
    idx[N - 1:] = 0
    acc = torch.tensor([2, 3, 1, 2, 1, 1][:N + 1], dtype=torch.int32)
    cu = torch.tensor(offsets([S] * (N - 1) + [0]), dtype=torch.int32)
    return dict(mqb=mqb, a=a, b=b, A_log=A_log, dt_bias=dt_bias, gl=gl, beta=beta, pool0=pool0, idx=idx, acc=acc,
                cu=cu, N=N, S=S, L=L, slots=slots)


@pytest.mark.parametrize("kind", ["sigmoid", "recurrent"])
def test_vllm_spec_verify(kind):
    """Spec-decode verify on the pool: 2-D slots, num_accepted_tokens (read slot idx[n, acc - 1], the state after
    token t written to slot idx[n, t]), a padded request, in-kernel q/k norm."""
    c = Checks()
    x = _spec_inputs(30)
    N, S, L, slots = x["N"], x["S"], x["L"], x["slots"]
    mqb_d, a_d, b_d, A_d, dtb_d, pool, idx_d, acc_d, cu_d = cuda(x["mqb"], x["a"], x["b"], x["A_log"], x["dt_bias"],
                                                                 x["pool0"], x["idx"], x["acc"], x["cu"])
    q_d, k_d, v_d = split(mqb_d[:, :W], (1, L))
    kw = dict(initial_state=pool, inplace_final_state=True, cu_seqlens=cu_d, ssm_state_indices=idx_d,
              num_accepted_tokens=acc_d, use_qk_l2norm_in_kernel=True)
    if kind == "sigmoid":
        o, st = run_gdn(c, "verify", lambda: gv.fused_sigmoid_gating_delta_rule_update(
            A_log=A_d, a=a_d, b=b_d, dt_bias=dtb_d, q=q_d, k=k_d, v=v_d, **kw))
    else:
        gl_d, bt_d = cuda(x["gl"].float()[None], x["beta"].float()[None])
        o, st = run_gdn(c, "verify", lambda: gv.fused_recurrent_gated_delta_rule(q_d, k_d, v_d, gl_d, bt_d, **kw))
    c.true(st is pool, "returns the pool")
    q, k, v = split(x["mqb"][:, :W], (L,))
    oc, pc = o.cpu(), pool.cpu()
    idx, acc = x["idx"], x["acc"]
    written = set()
    for n in range(N):
        sl = slice(n * S, (n + 1) * S)
        if int(idx[n, 0]) <= 0:
            c.true(bool((oc[0, sl] == 0).all()), f"padded request {n}: output rows zero")
            continue
        src = int(idx[n, int(acc[n]) - 1])
        st_ref = states_of(q[sl], k[sl], v[sl], x["gl"][sl], x["beta"][sl], x["pool0"][src], True, range(1, S + 1))
        ro, _ = ref_seqs(q[sl], k[sl], v[sl], x["gl"][sl], x["beta"][sl], h0=x["pool0"][src][None], qk_norm=True)
        c.ref(oc[0, sl], ro, f"output of request {n}", OUT_L2)
        rows = idx[n].long()
        c.ref(pc[rows], st_ref, f"slots of request {n} (state after each token)", DEC_L2)
        written.update(rows.tolist())
    keep = torch.ones(slots, dtype=torch.bool)
    keep[sorted(written)] = False
    c.true(untouched(pc, x["pool0"], keep), "slots no token writes are untouched")
    c.done()


def test_vllm_per_token_states():
    """inplace_final_state=False: the state after every token in a new [tokens, HV, V, K] tensor, the pool not
    modified (2-D slots with num_accepted_tokens, one padded request)."""
    c = Checks()
    g = gen(40)
    N, S, slots = 3, 3, 12
    L = N * S
    q = randn(g, L, H, D, dtype=BF)
    k = F.normalize(randn(g, L, H, D), dim=-1).to(BF)  # no in-kernel norm in this call
    v = randn(g, L, HV, D, dtype=BF)
    gl = -torch.rand(L, HV, generator=g)
    beta = torch.rand(L, HV, generator=g)
    pool0 = randn(g, slots, HV, D, D, scale=0.1)
    idx = torch.tensor([[2, 3, 4], [0, 0, 0], [7, 8, 9]], dtype=torch.int32)
    acc = torch.tensor([3, 1, 2], dtype=torch.int32)
    cu = torch.arange(N + 1, dtype=torch.int32) * S
    q_d, k_d, v_d, gl_d, bt_d, pool, idx_d, acc_d, cu_d = cuda(q[None], k[None], v[None], gl[None], beta[None], pool0,
                                                              idx, acc, cu)
    o, final = run_gdn(c, "per-token states", lambda: gv.fused_recurrent_gated_delta_rule(
        q_d, k_d, v_d, gl_d, bt_d, initial_state=pool, inplace_final_state=False, cu_seqlens=cu_d,
        ssm_state_indices=idx_d, num_accepted_tokens=acc_d))
    c.true(torch.equal(pool.cpu(), pool0), "the pool is not modified")
    c.true(tuple(final.shape) == (L, HV, D, D) and final.dtype == torch.float32, "final [tokens, HV, V, K] float32")
    oc, fc = o.cpu(), final.cpu()
    for n in (0, 2):
        sl = slice(n * S, (n + 1) * S)
        src = int(idx[n, int(acc[n]) - 1])
        ro, _ = ref_seqs(q[sl], k[sl], v[sl], gl[sl], beta[sl], h0=pool0[src][None])
        c.ref(oc[0, sl], ro, f"output of sequence {n}", OUT_L2)
        c.ref(fc[sl], states_of(q[sl], k[sl], v[sl], gl[sl], beta[sl], pool0[src], False, range(1, S + 1)),
              f"states of sequence {n}", DEC_L2)
    c.done()


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16, None])
def test_vllm_chunk(state_dtype):
    """vLLM's prefill: varlen with a zero-length sequence, int32 cu_seqlens, in-kernel q/k norm, float32 /
    bfloat16 / no initial states, a core_attn_out buffer larger than the output."""
    c = Checks()
    g = gen(50)
    lens = [5, 0, 70, 130, 2]
    N, L = len(lens), sum(lens)
    cu = torch.tensor(offsets(lens), dtype=torch.int32)
    q, k, v = randn(g, L, H, D, dtype=BF), randn(g, L, H, D, dtype=BF), randn(g, L, HV, D, dtype=BF)
    gl = -torch.rand(L, HV, generator=g) * 0.5
    beta = torch.rand(L, HV, generator=g)
    init = None if state_dtype is None else randn(g, N, HV, D, D, scale=0.1, dtype=state_dtype)
    flat = torch.full((L * HV * D + 64,), 5.0, dtype=BF, device=DEV)
    q_d, k_d, v_d, gl_d, bt_d, init_d, cu_d = cuda(q[None], k[None], v[None], gl[None], beta[None], init, cu)
    o, final = run_gdn(c, "chunk", lambda: gv.chunk_gated_delta_rule(
        q_d, k_d, v_d, gl_d, bt_d, initial_state=init_d, output_final_state=True, cu_seqlens=cu_d,
        use_qk_l2norm_in_kernel=True, core_attn_out=flat))
    c.true(o.data_ptr() == flat.data_ptr() and bool((flat[L * HV * D:] == 5).all()),
           "the output is written into core_attn_out, nothing past it")
    c.true(final.dtype == torch.float32 and tuple(final.shape) == (N, HV, D, D), "final [N, HV, V, K] float32")
    if init_d is not None:
        c.true(torch.equal(init_d.cpu(), init), "the initial states are not modified")
    ro, rs = ref_seqs(q, k, v, gl, beta, h0=None if init is None else init.float(), cu=offsets(lens), qk_norm=True)
    fc = final.cpu()
    c.ref(o[0], ro, "output", OUT_L2)
    live = [n for n in range(N) if lens[n]]
    c.ref(fc[live], rs[live], "final states", PRE_L2)
    zero = torch.zeros(HV, D, D) if init is None else init[1].float()
    c.true(torch.equal(fc[1], zero), "a zero-length sequence's final state is its initial state")
    c.done()


def test_vllm_fi_chunk_checkpoints():
    """fi_chunk_gated_delta_rule (vLLM's FlashInfer prefill route): bfloat16 initial states, prefix-cache
    checkpoints every 64 tokens into a float32 buffer with a guard row."""
    c = Checks()
    g = gen(60)
    lens = [130, 64, 5]
    N, L = len(lens), sum(lens)
    cu = torch.tensor(offsets(lens), dtype=torch.int32)
    q, k, v = randn(g, L, H, D, dtype=BF), randn(g, L, H, D, dtype=BF), randn(g, L, HV, D, dtype=BF)
    gl = -torch.rand(L, HV, generator=g) * 0.3
    beta = torch.rand(L, HV, generator=g)
    init = randn(g, N, HV, D, D, scale=0.1, dtype=BF)
    counts = [n // 64 for n in lens]
    starts = torch.tensor(offsets(counts))
    C = int(starts[-1])
    ck = torch.full((C + 1, HV, D, D), NAN, device=DEV)
    q_d, k_d, v_d, gl_d, bt_d, init_d, cu_d, st_d = cuda(q[None], k[None], v[None], gl[None], beta[None], init, cu,
                                                        starts)
    o, final = run_gdn(c, "fi_chunk", lambda: gv.fi_chunk_gated_delta_rule(
        q=q_d, k=k_d, v=v_d, g=gl_d, beta=bt_d, initial_state=init_d, output_final_state=True, cu_seqlens=cu_d,
        use_qk_l2norm_in_kernel=True, state_checkpoints=ck, checkpoint_cu_starts=st_d, checkpoint_every_n_tokens=64))
    ro, rs = ref_seqs(q, k, v, gl, beta, h0=init.float(), cu=offsets(lens), qk_norm=True)
    c.ref(o[0], ro, "output", OUT_L2)
    c.ref(final, rs, "final states", PRE_L2)
    cu_l = offsets(lens)
    want = [states_of(q[cu_l[n]:cu_l[n + 1]], k[cu_l[n]:cu_l[n + 1]], v[cu_l[n]:cu_l[n + 1]],
                      gl[cu_l[n]:cu_l[n + 1]], beta[cu_l[n]:cu_l[n + 1]], init[n].float(), True,
                      [64 * (j + 1) for j in range(counts[n])]) for n in range(N) if counts[n]]
    c.ref(ck[:C], torch.cat(want), "checkpoints", PRE_L2)
    c.true(bool(torch.isnan(ck[C]).all()), "the row past the checkpoints is untouched")
    c.done()


# ---------------------------------------------------------------------------------------------------------------
# gdn.sglang (reference only: sglang is not installed on the GPU machine)

KER = GDNKernel()


def _envelope(g, slots, dtype=torch.float32, layers=3):
    """sglang's page-major pool: [slots, layers, HV, V, K]; layer 1's view has rows `layers` states apart."""
    return randn(g, slots, layers, HV, D, D, scale=0.1, dtype=dtype)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_sglang_decode(packed, state_dtype):
    c = Checks()
    g = gen(70 + packed)
    B, slots = 6, 10
    mqb = mixed_buf(g, B)
    a, b, A_log, dt_bias, _, beta = raw_tok(B, 72)
    dt_bias = dt_bias.to(BF)  # sglang's Qwen layers keep dt_bias in the model dtype
    gl = log_decay(a, A_log, dt_bias.float())
    buf = _envelope(g, slots, state_dtype)
    idx = torch.tensor([6, -1, 0, 3, -1, 9], dtype=torch.int32)  # slot 0 is a real slot in sglang
    mqb_d, a_d, b_d, A_d, dtb_d, buf_d, idx_d = cuda(mqb, a, b, A_log, dt_bias, buf, idx)
    pool = buf_d[:, 1]
    if packed:
        o = run_gdn(c, "packed_decode", lambda: KER.packed_decode(
            mqb_d[:, :W], a_d, b_d, A_log=A_d, dt_bias=dtb_d, scale=SCALE, ssm_states=pool, cache_indices=idx_d,
            num_v_heads=HV, head_v_dim=D))
    else:
        q_d, k_d, v_d = split(mqb_d[:, :W], (1, B))
        qsl = torch.arange(B + 1, dtype=torch.int32, device=DEV)
        o = run_gdn(c, "decode", lambda: KER.decode(q_d, k_d, v_d, a_d, b_d, A_log=A_d, dt_bias=dtb_d,
                                                    ssm_states=pool, cache_indices=idx_d, query_start_loc=qsl))
    c.true(tuple(o.shape) == (1, B, HV, D) and o.dtype == BF, "output [1, B, HV, V] bfloat16")
    q, k, v = split(mqb[:, :W], (B,))
    live = [n for n in range(B) if idx[n] >= 0]
    rows = idx[live].long()
    ro, rs = ref_seqs(q[live], k[live], v[live], gl[live], beta[live], h0=buf[rows, 1].float(),
                      cu=list(range(len(live) + 1)), qk_norm=True)
    oc, bc = o.cpu(), buf_d.cpu()
    c.ref(oc[0, live], ro, "output", OUT_L2)
    st_rel, st_tol = (DEC_L2, TOL) if state_dtype is torch.float32 else (BF16_L2, 2e-2)
    c.ref(bc[rows, 1].float(), rs, "pool rows", st_rel, st_tol)
    c.true(bool((oc[0, [1, 4]] == 0).all()), "padded requests' output rows are zero")
    keep = torch.ones(slots, 3, dtype=torch.bool)
    keep[rows, 1] = False
    c.true(untouched(bc, buf, keep), "rows no request owns (and the other layers) are untouched")
    c.done()


@pytest.mark.parametrize("layout", ["dense", "envelope"])
def test_sglang_extend(layout):
    """extend: the pool updated in place at cache_indices (-1 padding, a zero-length sequence), checkpoints every
    64 tokens returned as h, an output destination."""
    c = Checks()
    g = gen(80)
    lens = [130, 0, 64, 5, 3]
    N, L, slots = len(lens), sum(lens), 9
    mqb = mixed_buf(g, L)
    gl = -torch.rand(L, HV, generator=g) * 0.3
    beta = torch.rand(L, HV, generator=g)
    cu = torch.tensor(offsets(lens), dtype=torch.int32)
    if layout == "dense":
        allbuf = randn(g, 2, slots, HV, D, D, scale=0.1)  # [layers, slots, ..]: the layer's view is dense
        row = lambda t, r: t[1, r]  # noqa: E731
    else:
        allbuf = _envelope(g, slots)
        row = lambda t, r: t[r, 1]  # noqa: E731
    idx = torch.tensor([4, 2, 7, -1, 0], dtype=torch.int32)
    counts = [n // 64 for n in lens]
    starts = torch.tensor(offsets(counts), dtype=torch.int64)
    C = int(starts[-1])
    mqb_d, gl_d, bt_d, cu_d, all_d, idx_d, st_d = cuda(mqb, gl[None], beta[None], cu, allbuf, idx, starts)
    pool = all_d[1] if layout == "dense" else all_d[:, 1]
    q_d, k_d, v_d = split(mqb_d[:, :W], (1, L))
    out = torch.full((1, L, HV, D), NAN, dtype=BF, device=DEV)
    o, none, h = run_gdn(c, "extend", lambda: KER.extend(
        q_d, k_d, v_d, gl_d, bt_d, ssm_states=pool, cache_indices=idx_d, query_start_loc=cu_d,
        state_checkpoint_cu_starts=st_d, num_state_checkpoints=C, state_checkpoint_every_n_tokens=64, output=out,
        layer_id=3, extend_prefix_lens=None, track_state=None, track_chunk_idx=None))
    c.true(o is out and none is None and tuple(h.shape) == (1, C, HV, D, D), "returns (output, None, h [1, C, ..])")
    q, k, v = split(mqb[:, :W], (L,))
    cl = offsets(lens)
    oc, ac, hc = o.cpu(), all_d.cpu(), h.cpu()
    for n in range(N):
        sl = slice(cl[n], cl[n + 1])
        r = int(idx[n])
        if r < 0:
            c.true(bool((oc[0, sl] == 0).all()), f"padded sequence {n}: output rows zero")
            continue
        if lens[n] == 0:
            c.true(torch.equal(row(ac, r), row(allbuf, r)), "a zero-length sequence keeps its row")
            continue
        h0 = row(allbuf, r)
        ro, rs = ref_seqs(q[sl], k[sl], v[sl], gl[sl], beta[sl], h0=h0[None], qk_norm=True)
        c.ref(oc[0, sl], ro, f"output of sequence {n}", OUT_L2)
        c.ref(row(ac, r), rs[0], f"pool row {r}", PRE_L2)
        if counts[n]:
            want = states_of(q[sl], k[sl], v[sl], gl[sl], beta[sl], h0, True, [64 * (j + 1) for j in range(counts[n])])
            s0 = int(starts[n])
            c.ref(hc[0, s0:s0 + counts[n]], want, f"checkpoints of sequence {n}", PRE_L2)
    for r in range(slots):
        if r not in (4, 7, 0):
            c.true(torch.equal(row(ac, r), row(allbuf, r)), f"row {r} is untouched")
    c.done()


def test_sglang_extend_without_write_back():
    c = Checks()
    g = gen(90)
    lens = [6, 3, 70]
    L = sum(lens)
    mqb = mixed_buf(g, L)
    gl = -torch.rand(L, HV, generator=g) * 0.3
    beta = torch.rand(L, HV, generator=g)
    pool0 = randn(g, 5, HV, D, D, scale=0.1)
    idx = torch.tensor([3, -1, 1], dtype=torch.int32)
    mqb_d, gl_d, bt_d, pool, idx_d, cu_d = cuda(mqb, gl[None], beta[None], pool0, idx,
                                                torch.tensor(offsets(lens), dtype=torch.int32))
    q_d, k_d, v_d = split(mqb_d[:, :W], (1, L))
    o, _, h = run_gdn(c, "extend", lambda: KER.extend(q_d, k_d, v_d, gl_d, bt_d, ssm_states=pool, cache_indices=idx_d,
                                                      query_start_loc=cu_d, inplace_update=False))
    c.true(h is None and torch.equal(pool.cpu(), pool0), "the pool is left as it is")
    q, k, v = split(mqb[:, :W], (L,))
    cl = offsets(lens)
    oc = o.cpu()
    for n in range(3):
        sl = slice(cl[n], cl[n + 1])
        if idx[n] < 0:
            c.true(bool((oc[0, sl] == 0).all()), "padded sequence: output rows zero")
            continue
        ro, _ = ref_seqs(q[sl], k[sl], v[sl], gl[sl], beta[sl], h0=pool0[int(idx[n])][None], qk_norm=True)
        c.ref(oc[0, sl], ro, f"output of sequence {n}", OUT_L2)
    c.done()


def test_sglang_target_verify():
    """Verify: the state after every draft token into the intermediate buffer (positional rows), the pool not
    modified, a padded request (-1) running from a zero state; strided q/k/v views."""
    c = Checks()
    g = gen(100)
    Bn, T, slots = 3, 4, 7
    L = Bn * T
    mqb = mixed_buf(g, L)
    a, b, A_log, dt_bias, _, beta = raw_tok(L, 101)
    dt_bias = dt_bias.to(BF)
    gl = log_decay(a, A_log, dt_bias.float())
    buf = _envelope(g, slots)
    ib = torch.full((slots, T, HV, D, D), NAN, device=DEV)
    idx = torch.tensor([5, -1, 2], dtype=torch.int32)
    mqb_d, a_d, b_d, A_d, dtb_d, buf_d, idx_d = cuda(mqb, a, b, A_log, dt_bias, buf, idx)
    pos = torch.arange(slots, dtype=torch.int32, device=DEV)
    cu_d = torch.arange(Bn + 1, dtype=torch.int32, device=DEV) * T
    q_d, k_d, v_d = split(mqb_d[:, :W], (1, L))
    o = run_gdn(c, "target_verify", lambda: KER.target_verify(
        A_log=A_d, dt_bias=dtb_d, q=q_d, k=k_d, v=v_d, a=a_d, b=b_d, ssm_states=buf_d[:, 1], cache_indices=idx_d,
        query_start_loc=cu_d, intermediate_states_buffer=ib, intermediate_state_indices=pos, cache_steps=T,
        retrieve_parent_token=None, stable_rows=False))
    c.true(torch.equal(buf_d.cpu(), buf), "verify leaves the pool as it is")
    q, k, v = split(mqb[:, :W], (L,))
    oc, ibc = o.cpu(), ib.cpu()
    for n in range(Bn):
        sl = slice(n * T, (n + 1) * T)
        r = int(idx[n])
        h0 = None if r < 0 else buf[r, 1]
        ro, _ = ref_seqs(q[sl], k[sl], v[sl], gl[sl], beta[sl], h0=None if h0 is None else h0[None], qk_norm=True)
        c.ref(oc[0, sl], ro, f"output of request {n}", OUT_L2)
        c.ref(ibc[n], states_of(q[sl], k[sl], v[sl], gl[sl], beta[sl], h0, True, range(1, T + 1)),
              f"intermediate row {n}", DEC_L2)
    c.true(bool(torch.isnan(ibc[Bn:]).all()), "buffer rows of no request are untouched")
    c.done()


# ---------------------------------------------------------------------------------------------------------------
# gdn.fla against FLA 0.6 (Triton) and float64

def _fla_only():
    gf.unregister_backend()  # FLA's own kernels, not a gdn backend registered by another test


@pytest.mark.parametrize("variant", ["log_g", "raw_varlen"])
def test_fla_chunk(variant):
    """log_g: batch-first [2, 100], log decay and beta, K-first initial state, in-kernel q/k norm.
    raw_varlen: packed sequences with int64 cu_seqlens and cu_seqlens_cpu, use_gate_in_kernel (A_log, dt_bias) with
    use_beta_sigmoid_in_kernel, state_v_first (FLA's GatedDeltaNet layer, and bench_peers.py's call)."""
    _fla_only()
    c = Checks()
    if variant == "log_g":
        B, T = 2, 100
        q, k, v, g, beta = make(B, T, H, HV, D, seed=110)
        h0 = randn(gen(111), B, HV, D, D, scale=0.1)
        ro, rs = batch_ref(q, k, v, g, beta, h0=h0, qk_norm=True)
        x = cuda(q, k, v, g, beta)
        kw = dict(initial_state=cuda(h0)[0], output_final_state=True, use_qk_l2norm_in_kernel=True)
        state_ref = rs
    else:
        lens = [150, 37, 200, 64, 1]
        T = sum(lens)
        q, k, v, _, _ = make(1, T, H, HV, D, seed=112)
        a, b, A_log, dt_bias = raw_gates(1, T, HV, 113)
        h0 = randn(gen(114), len(lens), HV, D, D, scale=0.1)  # k-last
        cu = torch.tensor(offsets(lens), dtype=torch.int64)
        ro, rs = ref_seqs(q[0], k[0], v[0], log_decay(a, A_log, dt_bias)[0], torch.sigmoid(b.double())[0], h0=h0,
                          cu=offsets(lens))
        ro = ro[None]
        x = cuda(q, k, v, a, b)
        A_d, dtb_d, h0_d, cu_d = cuda(A_log, dt_bias, h0, cu)
        kw = dict(initial_state=h0_d, output_final_state=True, use_gate_in_kernel=True, A_log=A_d, dt_bias=dtb_d,
                  use_beta_sigmoid_in_kernel=True, state_v_first=True, cu_seqlens=cu_d, cu_seqlens_cpu=cu)
        state_ref = rs
    o, s = run_gdn(c, "chunk", lambda: gf.chunk_gated_delta_rule(*x, **kw))
    c.true(o.dtype == BF and s.dtype == torch.float32, "o bfloat16, final state float32")
    c.ref(o, ro, "o", OUT_L2)
    c.ref(s, state_ref, "final state", PRE_L2)
    if FLA is None:
        print("FLA:", FLA_WHY)
    else:
        res = peer_call("FLA chunk", lambda: FLA.chunk_gated_delta_rule(*x, **kw))
        if res is not None:
            c.peer("FLA", o, res[0], ro, "o", OUT_L2, OUT_FLOOR)
            c.peer("FLA", s, res[1], state_ref, "final state", PRE_L2, PRE_FLOOR)
    c.done()


def test_fla_chunk_varlen_lengths_on_device():
    """cu_seqlens on the device only (no cu_seqlens_cpu): no host read of the lengths; a zero-length sequence keeps
    its initial state (FLA's semantics), through gdn's pool mode."""
    _fla_only()
    c = Checks()
    lens = [40, 0, 90, 1]
    T, N = sum(lens), len(lens)
    q, k, v, g, beta = make(1, T, H, HV, D, seed=120)
    h0 = randn(gen(121), N, HV, D, D, scale=0.1)  # K-first
    x = cuda(q, k, v, g, beta)
    h0_d, cu_d = cuda(h0, torch.tensor(offsets(lens), dtype=torch.int64))
    o, s = run_gdn(c, "chunk", lambda: gf.chunk_gated_delta_rule(*x, initial_state=h0_d, output_final_state=True,
                                                                 cu_seqlens=cu_d, use_qk_l2norm_in_kernel=True))
    c.true(torch.equal(h0_d.cpu(), h0), "the initial state is not modified")
    ro, rs = reference(q[0], k[0], v[0], g[0], beta[0], h0=h0, cu=offsets(lens), qk_norm=True)
    c.ref(o[0], ro, "o", OUT_L2)
    sc = s.cpu()
    c.ref(sc[[0, 2, 3]], rs[[0, 2, 3]], "final states", PRE_L2)
    c.true(torch.equal(sc[1], h0[1]), "a zero-length sequence keeps its initial state")
    c.done()


# multi_token: gdn runs T > 1 on its chunked prefill (bf16 tensor-core operands), FLA's fused_recurrent token by token
# in fp32; on an H200 the final state's rel-L2 vs float64 was 1.6e-3 against FLA's 2.4e-4 (the output's 1.9e-3 is
# better than FLA's 2.2e-3). A known gap, kept visible: strict, so that closing it turns this test red.
_MULTI_TOKEN_GAP = pytest.mark.xfail(strict=True, reason="gdn's T > 1 fused_recurrent state is less exact than FLA's")


@pytest.mark.parametrize("variant", ["decode_log_g", "decode_raw_v_first",
                                     pytest.param("multi_token", marks=_MULTI_TOKEN_GAP)])
def test_fla_fused_recurrent(variant):
    """decode_log_g: T = 1, B = 16, log g, K-first state, in-kernel q/k norm. decode_raw_v_first: T = 1 with
    use_gate_in_kernel, use_beta_sigmoid_in_kernel and state_v_first (bench_peers.py's call). multi_token: T = 5."""
    _fla_only()
    c = Checks()
    B, T = (16, 1) if variant != "multi_token" else (3, 5)
    q, k, v, g, beta = make(B, T, H, HV, D, seed=130)
    h0 = randn(gen(131), B, HV, D, D, scale=0.1)
    if variant == "decode_raw_v_first":
        a, b, A_log, dt_bias = raw_gates(B, T, HV, 132)
        ro, rs = batch_ref(q, k, v, log_decay(a, A_log, dt_bias), torch.sigmoid(b.double()), h0=h0, qk_norm=True)
        rs = kl(rs)
        x = cuda(q, k, v)
        a_d, b_d, A_d, dtb_d, h0_d = cuda(a, b, A_log, dt_bias, kl(h0).contiguous())
        kw = dict(g=a_d, beta=b_d, initial_state=h0_d, output_final_state=True, use_qk_l2norm_in_kernel=True,
                  use_gate_in_kernel=True, A_log=A_d, dt_bias=dtb_d, use_beta_sigmoid_in_kernel=True,
                  state_v_first=True)
    else:
        ro, rs = batch_ref(q, k, v, g, beta, h0=h0, qk_norm=True)
        x = cuda(q, k, v)
        g_d, bt_d, h0_d = cuda(g, beta, h0)
        kw = dict(g=g_d, beta=bt_d, initial_state=h0_d, output_final_state=True, use_qk_l2norm_in_kernel=True)
    o, s = run_gdn(c, "fused_recurrent", lambda: gf.fused_recurrent_gated_delta_rule(*x, **kw))
    st_l2 = DEC_L2 if T == 1 else PRE_L2  # T > 1 runs gdn's prefill plans
    c.ref(o, ro, "o", OUT_L2)
    c.ref(s, rs, "final state", st_l2)
    if FLA is None:
        print("FLA:", FLA_WHY)
    else:
        res = peer_call("FLA fused_recurrent", lambda: FLA.fused_recurrent_gated_delta_rule(*x, **kw))
        if res is not None:
            c.peer("FLA", o, res[0], ro, "o", OUT_L2, OUT_FLOOR)
            # FLA's recurrent kernel keeps normalised q/k in float32, gdn rounds them to bfloat16 (FLA's chunk rule)
            c.peer("FLA", s, res[1], rs, "final state", st_l2, DEC_L2 if T == 1 else PRE_FLOOR)
    c.done()


@pytest.mark.skipif(FLA is None, reason=FLA_WHY or "")
def test_fla_backend_dispatches_cuda_calls_to_gdn():
    """register_backend(): FLA's own chunk_gated_delta_rule on CUDA tensors runs gdn (the same result as gdn.fla's)."""
    c = Checks()
    lens = [29, 71]
    T = sum(lens)
    q, k, v, _, _ = make(1, T, H, HV, D, seed=140)
    a, b, A_log, dt_bias = raw_gates(1, T, HV, 141)
    h0 = randn(gen(142), 2, HV, D, D, scale=0.1)
    x = cuda(q, k, v, a, b)
    A_d, dtb_d, h0_d, cu_d = cuda(A_log, dt_bias, h0, torch.tensor(offsets(lens)))
    kw = dict(initial_state=h0_d, output_final_state=True, use_qk_l2norm_in_kernel=True,
              use_beta_sigmoid_in_kernel=True, state_v_first=True, cu_seqlens=cu_d, use_gate_in_kernel=True,
              A_log=A_d, dt_bias=dtb_d)
    gf.register_backend()
    try:
        with torch.no_grad():
            o, s = FLA.chunk_gated_delta_rule(*x, **kw)
            o2, s2 = gf.chunk_gated_delta_rule(*x, **kw)
        torch.cuda.synchronize()
    finally:
        gf.unregister_backend()
    c.true(torch.equal(o, o2) and torch.equal(s, s2), "FLA's entry point returned gdn's result")
    c.done()
