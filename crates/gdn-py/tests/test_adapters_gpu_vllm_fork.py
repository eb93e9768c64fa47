"""gdn.vllm against vLLM's own FLA fork on the GPU: the functions vLLM 0.33's Qwen3-Next / Qwen3.5 layer calls
(vllm/third_party/flash_linear_attention/ops, plain Python + Triton, taken verbatim from the vLLM wheel and run with
a stand-in `vllm` package by scripts/fetch_vllm_fla.sh), each called the way the layer calls it, on identical inputs
(each side with its own copy of the state pool).

Skipped without a CUDA device or gdn's CUDA backend, and without the fork: GDN_VLLM_FLA=<path of the vllm_fla folder>
(default <repo>/.peers3/vllm_fla; a GDN_VLLM_FLA that does not hold the fork is an error, not a skip).

Calls (H = 4 q/k heads, HV = 8 value heads, d = 128, bfloat16 activations, float32 k-last pool):
  * fused_recurrent_gated_delta_rule_packed_decode: B = 1 and B = 64, mixed_qkv a column slice of a wider buffer,
    bfloat16 dt_bias, in-kernel q/k norm, scattered pool rows updated in place, slot 0 = padding (B = 64).
  * fused_recurrent_gated_delta_rule (log g, beta) and fused_sigmoid_gating_delta_rule_update (raw gates) as
    spec-decode verify: [N + 1, S] slots, num_accepted_tokens, S = 2, 3, 4 draft tokens, a padded request with no
    tokens; and as non-spec decode: 1-D slots, more tokens than sequences (CUDA-graph padding), slot 0 padding.
  * chunk_gated_delta_rule as the layer's Triton/FLA prefill runs it: initial states gathered from the pool
    (zeroed where a sequence has none), varlen int32 cu_seqlens, log g and beta float32, q/k normalised before the
    call (use_qk_l2norm_in_kernel=False, as the layer) or in the kernel, final states scattered back to the pool.

Per result (output rows of live requests, pool rows written):
  * against the fork, the contest rule: an element fails only when |gdn - fork| > 1e-2 and > 1e-2 * |fork|;
  * against the float64 reference (test_adapters_fla.reference on the CPU): the same element rule, rel-L2 within
    test_adapters_gpu.py's bound for that kind of result, and no worse than the fork's own (<= 1.25 x the fork's
    rel-L2 + test_adapters_gpu.py's floor for that kind);
  * pool rows no request owns are left bit for bit as they were, by gdn (and by the fork); padded output rows of the
    packed decode are zero in both.
A fork call that raises fails the test (here the fork is the point of the comparison).

GDN_RECORD=<path>: one JSON with, per comparison, gdn's max |diff| against the fork, the number of elements outside
the contest rule, rel-L2 against float64 of gdn and of the fork, and the versions (rewritten after every comparison).
Run (GPU machine, wheel installed, .peers3 carried):
  GDN_VLLM_FLA=.peers3/vllm_fla GDN_RECORD=$OUT/vllm_fork.json python3 -m pytest -q -rfEs \
    crates/gdn-py/tests/test_adapters_gpu_vllm_fork.py
"""
import importlib
import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import gdn  # noqa: E402

if gdn.cuda_unavailable_reason() is not None:
    pytest.skip(f"gdn CUDA backend unavailable: {gdn.cuda_unavailable_reason()}", allow_module_level=True)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FORK_OPS = "vllm.third_party.flash_linear_attention.ops"


def load_fork(path=None):
    """vLLM's FLA fork from `path` (GDN_VLLM_FLA, else <repo>/.peers3/vllm_fla): (module, SOURCE.json dict), or
    (None, reason) when the default folder is absent. Raises when an explicit path does not hold the fork or when
    another `vllm` was imported first."""
    explicit = path or os.environ.get("GDN_VLLM_FLA")
    path = os.path.abspath(explicit or os.path.join(ROOT, ".peers3", "vllm_fla"))
    if not os.path.isdir(os.path.join(path, *FORK_OPS.split("."))):
        if explicit:
            raise FileNotFoundError(f"GDN_VLLM_FLA={explicit}: no {FORK_OPS.replace('.', '/')} there "
                                    "(bash scripts/fetch_vllm_fla.sh writes .peers3/vllm_fla)")
        return None, f"vLLM's FLA fork not found at {path} (bash scripts/fetch_vllm_fla.sh, carry .peers3)"
    if path not in sys.path:
        sys.path.insert(0, path)
    import vllm

    if not getattr(vllm, "STANDALONE_FLA_FORK", False):
        raise ImportError(f"`vllm` resolves to {vllm.__file__}, not the standalone fork in {path}")
    try:
        with open(os.path.join(path, "SOURCE.json")) as f:
            source = json.load(f)
    except (OSError, ValueError):
        source = {"vllm": getattr(vllm, "__version__", "?")}
    return importlib.import_module(FORK_OPS), source


try:
    FORK, SOURCE = load_fork()
except (OSError, ImportError) as e:
    pytest.fail(f"vLLM's FLA fork: {e}", pytrace=False)
if FORK is None:
    pytest.skip(SOURCE, allow_module_level=True)

import gdn.vllm as gv  # noqa: E402
from test_adapters_fla import log_decay  # noqa: E402
from test_adapters_gpu import (  # noqa: E402
    BF, D, DEC_L2, DEV, H, HV, NAN, OUT_FLOOR, OUT_L2, PRE_FLOOR, PRE_L2, SCALE, STATE_FLOOR, TOL, W, Checks, cuda, gen,
    mixed_buf, offsets, randn, raw_tok, ref_seqs, rel_l2, run_gdn, split, states_of,
)

# ---------------------------------------------------------------------------------------------------------------
# the record and the comparison

ROWS = []
RUN = {"device": torch.cuda.get_device_name(DEV), "torch": torch.__version__, "gdn": gdn.__version__,
       "vllm_fork": SOURCE}
try:
    import triton

    RUN["triton"] = triton.__version__
except ImportError:
    pass


def record(row):
    ROWS.append({"test": os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0], **row})
    path = os.environ.get("GDN_RECORD")
    if path:
        try:
            with open(path, "w") as f:
                json.dump({**RUN, "rows": ROWS}, f, indent=1)
        except (OSError, TypeError, ValueError) as e:
            print(f"GDN_RECORD {path} not written: {e}")


def outside(got, want, tol=TOL):
    """Elements outside the contest rule (|got - want| above both atol and rtol * |want|) and the worst one."""
    diff = (got - want).abs()
    bad = (diff > tol) & (diff > tol * want.abs())
    worst = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)) if diff.numel() else ()
    return int(bad.sum()), float(diff.max()) if diff.numel() else 0.0, worst


def compare(c, what, got, fork, want, rel, floor, tol=TOL):
    """gdn's result `got` and the fork's `fork` (same inputs, any device) against each other and against the
    float64 reference `want` (CPU)."""
    g, f, w = (x.detach().double().cpu() for x in (got, fork, want))
    if g.shape != f.shape or g.shape != w.shape:
        c.failed.append(f"{what}: shapes gdn {tuple(g.shape)}, fork {tuple(f.shape)}, float64 {tuple(w.shape)}")
        return
    n_bad, max_abs, worst = outside(g, f, tol)
    n_bad_ref, max_abs_ref, _ = outside(g, w, tol)
    e_gdn, e_fork, e_gf = rel_l2(g, w), rel_l2(f, w), rel_l2(g, f)
    nonfinite = int((~torch.isfinite(g)).sum())
    ok_peer = e_gdn <= 1.25 * e_fork + floor
    record({"what": what, "elements": g.numel(), "max_abs_vs_fork": max_abs, "outside_contest_vs_fork": n_bad,
            "gdn_rel_l2_f64": e_gdn, "fork_rel_l2_f64": e_fork, "gdn_vs_fork_rel_l2": e_gf,
            "max_abs_vs_f64": max_abs_ref, "bound_rel_l2_f64": rel,
            "ok": not (n_bad or n_bad_ref or nonfinite) and e_gdn <= rel and ok_peer})
    print(f"{what}: max|gdn - fork| {max_abs:.2e}; rel-L2 vs float64 gdn {e_gdn:.2e}, fork {e_fork:.2e}")
    if nonfinite:
        c.failed.append(f"{what}: {nonfinite} non-finite values")
    if n_bad:
        c.failed.append(f"{what}: {n_bad} elements outside atol = rtol = {tol} of the fork; worst {worst}: "
                        f"{g[worst].item():.6g} vs {f[worst].item():.6g}")
    if n_bad_ref:
        c.failed.append(f"{what}: {n_bad_ref} elements outside atol = rtol = {tol} of float64 (max {max_abs_ref:.2e})")
    if not e_gdn <= rel:
        c.failed.append(f"{what}: rel-L2 vs float64 {e_gdn:.3e} > {rel:.1e}")
    if not ok_peer:
        c.failed.append(f"{what}: rel-L2 vs float64 {e_gdn:.3e} is worse than the fork's {e_fork:.3e} "
                        f"(allowed 1.25x + {floor:.0e})")


def fork_call(c, what, fn):
    try:
        res = fn()
        torch.cuda.synchronize()
        return res
    except Exception as e:  # noqa: BLE001 - reported as this test's failure, with the fork's message
        c.failed.append(f"{what}: the fork raised {type(e).__name__}: {str(e)[:600]}")
        record({"what": what, "fork_error": f"{type(e).__name__}: {str(e)[:600]}"})
        return None


def same_rows(c, what, after, before, keep):
    """Pool rows no request owns (`keep`, a bool mask over rows) are bit for bit as before."""
    if not torch.equal(after.cpu()[keep], before[keep]):
        c.failed.append(f"{what}: pool rows no request owns were modified")


def distinct_rows(g, n, slots):
    """n distinct pool rows from 1..slots-1 (vLLM keeps slot 0 as NULL_BLOCK_ID), int32."""
    return (torch.randperm(slots - 1, generator=g)[:n] + 1).to(torch.int32)


# ---------------------------------------------------------------------------------------------------------------
# packed decode

@pytest.mark.parametrize("B", [1, 64])
def test_packed_decode(B):
    c = Checks()
    g = gen(1000 + B)
    slots = B + 40
    mqb = mixed_buf(g, B)
    a, b, A_log, dt_bias, _, beta = raw_tok(B, 1001 + B)
    dt_bias = dt_bias.to(BF)  # the layer's parameter dtype
    gl = log_decay(a, A_log, dt_bias.float())
    pool0 = randn(g, slots, HV, D, D, scale=0.1)
    idx = distinct_rows(g, B, slots)
    if B > 1:
        idx[[3, 17, 40]] = 0
    mqb_d, a_d, b_d, A_d, dtb_d, idx_d = cuda(mqb, a, b, A_log, dt_bias, idx)

    def call(mod, pool, out):
        return mod.fused_recurrent_gated_delta_rule_packed_decode(
            mixed_qkv=mqb_d[:, :W], a=a_d, b=b_d, A_log=A_d, dt_bias=dtb_d, scale=SCALE, initial_state=pool,
            out=out, ssm_state_indices=idx_d, use_qk_l2norm_in_kernel=True)

    pool_g, out_g = pool0.to(DEV, copy=True), torch.full((B, 1, HV, D), NAN, dtype=BF, device=DEV)
    run_gdn(c, "packed decode", lambda: call(gv, pool_g, out_g))
    pool_f, out_f = pool0.to(DEV, copy=True), torch.full((B, 1, HV, D), NAN, dtype=BF, device=DEV)
    if fork_call(c, "packed decode (fork)", lambda: call(FORK, pool_f, out_f)) is None:
        c.done()
    live = [n for n in range(B) if idx[n] > 0]
    rows = idx[live].long()
    q, k, v = split(mqb[:, :W], (B,))
    ro, rs = ref_seqs(q[live], k[live], v[live], gl[live], beta[live], h0=pool0[rows],
                      cu=list(range(len(live) + 1)), qk_norm=True)
    oc, ofc = out_g.cpu(), out_f.cpu()
    compare(c, f"packed decode B={B}: output", oc[live, 0], ofc[live, 0], ro, OUT_L2, OUT_FLOOR)
    compare(c, f"packed decode B={B}: pool rows", pool_g.cpu()[rows], pool_f.cpu()[rows], rs, DEC_L2, STATE_FLOOR)
    pad = [n for n in range(B) if idx[n] <= 0]
    if pad:
        c.true(bool((oc[pad] == 0).all()) and bool((ofc[pad] == 0).all()), "padded output rows are zero in both")
    keep = torch.ones(slots, dtype=torch.bool)
    keep[rows] = False
    same_rows(c, "packed decode (gdn)", pool_g, pool0, keep)
    same_rows(c, "packed decode (fork)", pool_f, pool0, keep)
    c.done()


# ---------------------------------------------------------------------------------------------------------------
# recurrent decode and spec-decode verify on the pool

def _call_recurrent(mod, kind, q, k, v, x, pool, **kw):
    """fused_sigmoid_gating_delta_rule_update (raw gates) or fused_recurrent_gated_delta_rule (log g, beta) with the
    layer's keywords."""
    if kind == "sigmoid":
        return mod.fused_sigmoid_gating_delta_rule_update(
            A_log=x["A_d"], a=x["a_d"], b=x["b_d"], dt_bias=x["dtb_d"], q=q, k=k, v=v, initial_state=pool,
            inplace_final_state=True, use_qk_l2norm_in_kernel=True, **kw)
    return mod.fused_recurrent_gated_delta_rule(q, k, v, x["gl_d"], x["bt_d"], initial_state=pool,
                                                inplace_final_state=True, use_qk_l2norm_in_kernel=True, **kw)


def _gates(L, seed):
    a, b, A_log, dt_bias, gl, beta = raw_tok(L, seed)
    a_d, b_d, A_d, dtb_d, gl_d, bt_d = cuda(a, b, A_log, dt_bias, gl.float()[None], beta.float()[None])
    return dict(a=a, b=b, gl=gl, beta=beta, a_d=a_d, b_d=b_d, A_d=A_d, dtb_d=dtb_d, gl_d=gl_d, bt_d=bt_d)


@pytest.mark.parametrize("S", [2, 3, 4])
@pytest.mark.parametrize("kind", ["recurrent", "sigmoid"])
def test_spec_verify(kind, S):
    """N requests of S tokens back to back (the last padded: slots 0, no tokens), slots [N + 1, S], read slot
    idx[n, num_accepted_tokens[n] - 1], the state after token t written to idx[n, t]."""
    c = Checks()
    g = gen(2000 + 10 * S + (kind == "sigmoid"))
    N, slots = 6, 64
    L = N * S
    mqb = mixed_buf(g, L)
    x = _gates(L, 2100 + S)
    pool0 = randn(g, slots, HV, D, D, scale=0.1)
    idx = distinct_rows(g, (N + 1) * S, slots).view(N + 1, S).clone()
    idx[N - 1:] = 0
    acc = torch.randint(1, S + 1, (N + 1,), generator=g, dtype=torch.int32)
    cu = torch.tensor(offsets([S] * (N - 1) + [0]), dtype=torch.int32)
    mqb_d, idx_d, acc_d, cu_d = cuda(mqb, idx, acc, cu)
    q_d, k_d, v_d = split(mqb_d[:, :W], (1, L))
    kw = dict(cu_seqlens=cu_d, ssm_state_indices=idx_d, num_accepted_tokens=acc_d)
    pool_g, pool_f = pool0.to(DEV, copy=True), pool0.to(DEV, copy=True)
    o_g, _ = run_gdn(c, "verify", lambda: _call_recurrent(gv, kind, q_d, k_d, v_d, x, pool_g, **kw))
    res = fork_call(c, "verify (fork)", lambda: _call_recurrent(FORK, kind, q_d, k_d, v_d, x, pool_f, **kw))
    if res is None:
        c.done()
    o_f = res[0]
    q, k, v = split(mqb[:, :W], (L,))
    oc, ofc, pg, pf = o_g.cpu(), o_f.cpu(), pool_g.cpu(), pool_f.cpu()
    written = []
    for n in range(N - 1):
        sl = slice(n * S, (n + 1) * S)
        src = int(idx[n, int(acc[n]) - 1])
        ro, _ = ref_seqs(q[sl], k[sl], v[sl], x["gl"][sl], x["beta"][sl], h0=pool0[src][None], qk_norm=True)
        st = states_of(q[sl], k[sl], v[sl], x["gl"][sl], x["beta"][sl], pool0[src], True, range(1, S + 1))
        rows = idx[n].long()
        compare(c, f"{kind} verify S={S} request {n}: output", oc[0, sl], ofc[0, sl], ro, OUT_L2, OUT_FLOOR)
        compare(c, f"{kind} verify S={S} request {n}: slots", pg[rows], pf[rows], st, DEC_L2, STATE_FLOOR)
        written += rows.tolist()
    keep = torch.ones(slots, dtype=torch.bool)
    keep[written] = False
    same_rows(c, "verify (gdn)", pool_g, pool0, keep)
    same_rows(c, "verify (fork)", pool_f, pool0, keep)
    c.done()


@pytest.mark.parametrize("kind", ["recurrent", "sigmoid"])
def test_decode_1d_slots(kind):
    """The layer's non-spec decode: q/k/v [1, L] views of mixed_qkv, cu_seqlens 0..N with L > N tokens (CUDA-graph
    padding at the back), 1-D slots, slot 0 padding."""
    c = Checks()
    g = gen(3000 + (kind == "sigmoid"))
    N, L, slots = 64, 68, 100
    mqb = mixed_buf(g, L)
    x = _gates(L, 3100)
    pool0 = randn(g, slots, HV, D, D, scale=0.1)
    idx = distinct_rows(g, L, slots)
    idx[[5, 30]] = 0
    cu = torch.arange(N + 1, dtype=torch.int32)
    mqb_d, idx_d, cu_d = cuda(mqb, idx, cu)
    q_d, k_d, v_d = split(mqb_d[:, :W], (1, L))
    kw = dict(cu_seqlens=cu_d, ssm_state_indices=idx_d)
    pool_g, pool_f = pool0.to(DEV, copy=True), pool0.to(DEV, copy=True)
    o_g, _ = run_gdn(c, "decode", lambda: _call_recurrent(gv, kind, q_d, k_d, v_d, x, pool_g, **kw))
    res = fork_call(c, "decode (fork)", lambda: _call_recurrent(FORK, kind, q_d, k_d, v_d, x, pool_f, **kw))
    if res is None:
        c.done()
    live = [n for n in range(N) if idx[n] > 0]
    rows = idx[live].long()
    q, k, v = split(mqb[:, :W], (L,))
    ro, rs = ref_seqs(q[live], k[live], v[live], x["gl"][live], x["beta"][live], h0=pool0[rows],
                      cu=list(range(len(live) + 1)), qk_norm=True)
    compare(c, f"{kind} decode: output", o_g.cpu()[0, live], res[0].cpu()[0, live], ro, OUT_L2, OUT_FLOOR)
    compare(c, f"{kind} decode: pool rows", pool_g.cpu()[rows], pool_f.cpu()[rows], rs, DEC_L2, STATE_FLOOR)
    keep = torch.ones(slots, dtype=torch.bool)
    keep[rows] = False
    same_rows(c, "decode (gdn)", pool_g, pool0, keep)
    same_rows(c, "decode (fork)", pool_f, pool0, keep)
    c.done()


# ---------------------------------------------------------------------------------------------------------------
# prefill as the layer's Triton/FLA backend runs it

@pytest.mark.parametrize("qk_norm", [False, True])
def test_chunk_prefill_on_pool(qk_norm):
    c = Checks()
    g = gen(4000 + qk_norm)
    lens = [7, 64, 130, 1, 250]
    N, T, slots = len(lens), sum(lens), 40
    q, k = randn(g, T, H, D), randn(g, T, H, D)
    if not qk_norm:  # the layer normalises q and k before the call (fused_post_conv_prep, apply_l2norm=True)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    q, k = q.to(BF), k.to(BF)
    v = randn(g, T, HV, D, dtype=BF)
    x = _gates(T, 4100)
    pool0 = randn(g, slots, HV, D, D, scale=0.1)
    idx = distinct_rows(g, N, slots)
    has_init = torch.tensor([True, False, True, True, False])
    cu = torch.tensor(offsets(lens), dtype=torch.int32)
    q_d, k_d, v_d, idx_d, has_d, cu_d = cuda(q[None], k[None], v[None], idx, has_init, cu)

    def gather(pool):
        init = pool[idx_d]
        init[~has_d, ...] = 0
        return init

    def call(mod, init):
        return mod.chunk_gated_delta_rule(q=q_d, k=k_d, v=v_d, g=x["gl_d"], beta=x["bt_d"], initial_state=init,
                                          output_final_state=True, cu_seqlens=cu_d, chunk_indices=None,
                                          chunk_offsets=None, use_qk_l2norm_in_kernel=qk_norm)

    # the gather (a boolean mask: a host sync) and the scatter around the call are the layer's own indexing
    pool_g, pool_f = pool0.to(DEV, copy=True), pool0.to(DEV, copy=True)
    init_g, init_f = gather(pool_g), gather(pool_f)
    o_g, last_g = run_gdn(c, "chunk", lambda: call(gv, init_g))
    pool_g[idx_d] = last_g.to(pool_g.dtype)
    res = fork_call(c, "chunk (fork)", lambda: call(FORK, init_f))
    if res is None:
        c.done()
    o_f, last_f = res
    pool_f[idx_d] = last_f.to(pool_f.dtype)
    torch.cuda.synchronize()
    rows = idx.long()
    h0 = pool0[rows] * has_init[:, None, None, None]
    ro, rs = ref_seqs(q, k, v, x["gl"], x["beta"], h0=h0, cu=offsets(lens), qk_norm=qk_norm)
    tag = "in-kernel q/k norm" if qk_norm else "q/k normalised before"
    compare(c, f"chunk ({tag}): output", o_g.cpu()[0], o_f.cpu()[0], ro, OUT_L2, OUT_FLOOR)
    compare(c, f"chunk ({tag}): pool rows", pool_g.cpu()[rows], pool_f.cpu()[rows], rs, PRE_L2, PRE_FLOOR)
    keep = torch.ones(slots, dtype=torch.bool)
    keep[rows] = False
    same_rows(c, "chunk (gdn)", pool_g, pool0, keep)
    same_rows(c, "chunk (fork)", pool_f, pool0, keep)
    c.done()

