"""FlashInfer's serving-mode GDN calls beside gdn's equivalent serving calls: same shapes, same inputs, same
timing method, each call checked for correctness before it is timed.

Runs on the GPU machine through `PEERS_SERVING=1 bash scripts/device_python.sh` (carry .whl/gdn and .peers2,
after a call that carried .peers1), which installs the wheel and sources .peers2/setup.sh.
`python3 scripts/peers_serving.py --help` works anywhere (torch, gdn and FlashInfer are imported after parsing).

Definitions: qk4_v8, d=128, k-last states ([.., HV, V, K]), bf16 q/k/v, fp32 A_log/dt_bias.
Time: the kernel tier of bench_peers.kernel_sum — CUPTI kernel time per call through torch.profiler, a 256 MiB
write flushing L2 before every call; per call the union of its kernels (overlap counted once) and also their
plain sum and the span (first start to last end). Memset/memcpy records are left out, as there. Here all the
candidates of one row run in one profiler session (each: 3 warm-up calls, then `iters` flushed calls); the
flush kernels split the record into calls. Ratio = FlashInfer us / gdn serving us (> 1: gdn is faster).

Rows:
  decode   B = 1, 4, 16, 64, 256 from a pool of 4096 slots (scattered int32 indices, slot 0 unused), fp32 and
           bf16 pools, use_qk_l2norm_in_kernel off and on; raw gates (A_log, a, dt_bias, b) for both.
  verify   B = 16, 64 x T = 2, 4, 8 from a 1024-slot fp32 pool: every token's state written to an
           intermediate buffer, pool not updated (l2norm off and on); verify+update also writes the final
           state back; spec = vLLM spec-decode slots (gdn num_accepted_tokens; FlashInfer's equivalent is
           ssm_state_indices with the read slot idx[b, acc-1] gathered outside the timed call).
  prefill  the contest-like mix (data/contest_mix.json, inputs from bench_peers.prefill_inputs as in
           scripts/peers_mix.py): "pool+ckpt" = linear gates alpha/beta (fp32, computed outside the timed
           call), state pool of 4096 slots with scattered state_indices, checkpoints every 64 tokens;
           "plain" = the same gates, packed [N] initial/final states, no checkpoints. Both get max_seqlen.
  The "gdn def" column is gdn's definition-mode call of the same shape (raw gates, packed states; for verify
  the definition's intermediate-buffer call).
Checks (small cases, before any timing): every call against a float64 reference written here (outputs, pool
rows, intermediate states, checkpoints), NaN-poisoned outputs, pool rows and buffer rows that must stay
untouched, a NaN guard row after the checkpoints (the padding check, pad-info, is informational). A call
that fails its check, or raises, is not timed; its cells say why ("unsupported: ..." for FlashInfer,
"error: ..." / "check failed: ..." otherwise). Each prefill workload is also cross-checked against gdn's
definition call before timing.
Writes $OUT/peers_serving.json after the checks and after every row (a run cut short keeps what it measured);
prints one line per row: label, gdn serving us, gdn def us, FlashInfer us, ratio. Every library call runs inside
try/except: a failure becomes that cell's reason and the run goes on.
Time budget (SERVING_BUDGET_S, seconds from the start): the checks always run; then each section gets an equal
share of what is left (time a section leaves unused goes to the next) and starts no row past its share; a row
already started warms up no further candidate past the budget plus min(30 s, 10 %). FlashInfer's CuTe-DSL kernels
compile on their first call in each process (in-memory cache only), so first calls (checks' "call_s") and the
first row of each shape are slow.
Env (flag): SERVING_ITERS (--iters, 20), SERVING_MIX_ITERS (--mix-iters, 10), SERVING_BUDGET_S (--budget, 230),
SERVING_MIX_STRIDE (--mix-stride, 1), SERVING_SECTIONS (--sections, decode,verify,prefill), SERVING_DECODE_B
(--decode-b, 1,4,16,64,256), SERVING_VERIFY_B (--verify-b, 16,64), SERVING_VERIFY_T (--verify-t, 2,4,8).

FlashInfer 0.7.2 entry points relied on (flashinfer/gdn_decode.py, flashinfer/gdn_prefill.py):
  gdn_decode.gated_delta_rule_decode_pretranspose(q, k, v, state, A_log, a, dt_bias, b, scale=None,
      output=None, use_qk_l2norm=True, initial_state=None, initial_state_indices=None,
      output_state_indices=None, intermediate_states_buffer=None, disable_state_update=False,
      backend="auto") -> (output, state_or_pool)
    pool mode: state=None, initial_state [pool, HV, V, K] updated in place at initial_state_indices [B]
    (int32; int64 is converted by an extra kernel); fp32 pool: T=1 legacy kernel, index -1 skipped with a zero
    output; bf16 pool (K=V=128): the bf16-state kernel, index -1 redirected to slot 0. backend "auto" tries
    the source-only Cake kernels first on SM100/SM103 only.
  gdn_decode.gated_delta_rule_mtp(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b,
      scale=None, output=None, intermediate_states_buffer=None, ssm_state_indices=None,
      disable_state_update=None, use_qk_l2norm=True, output_state_indices=None, cache_replayssm=False, ...)
      -> (output, initial_state)
    fp32 pool only; intermediate_states_buffer [>=B, T, HV, V, K] fp32 contiguous, indexed by batch row b
    (the kernel's flat row is (b*T + t)*HV + h, so dim 1 must be exactly T; gdn's buffer is [pool, T, HV, V, K]
    indexed by pool row); ssm_state_indices [B, T] int32 writes the state after token t to pool row
    ssm_state_indices[b, t] (needs disable_state_update=False, T >= 2, no buffer; the final write-back is
    skipped). The index tensors are compiled as 16-byte aligned (from_dlpack(assumed_align=16)): each is its
    own allocation here. disable_state_update=None warns and means True: always passed explicitly here.
  gdn_prefill.chunk_gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None,
      output_final_state=False, cu_seqlens=None, use_qk_l2norm_in_kernel=False, output=None,
      output_state=None, state_checkpoints=None, checkpoint_cu_starts=None, checkpoint_every_n_tokens=0,
      use_cp="auto", state_indices=None, _cp_chunk_len=None, backend="auto", max_seqlen=None)
      -> output | (output, final_state)
    g = linear decay alpha = exp(g_log) fp32 [T, HV], beta fp32 post-sigmoid; with state_indices the pool is
    both initial_state and output_state (must be passed); checkpoint j of sequence s (state after (j+1)*n
    tokens, n a multiple of 64) goes to row checkpoint_cu_starts[s] + j of state_checkpoints [C, HV, V, K].
    max_seqlen must be a Python int in [ceil(T/N), T]. On SM90 N*HV*2 < SMs (N <= 8 here on 132 SMs) takes the
    context-parallel path (four kernels), otherwise one fused kernel; both take state_indices and checkpoints.
  Not compared: FlashInfer's bf16-pool verify (gdn's intermediate buffer is fp32 only).
gdn calls: all in gdn_call() below (docs/python.md): decode/prefill take state_indices, alpha/beta,
use_qk_l2norm_in_kernel, checkpoint_every/checkpoint_cu_starts/checkpoints; mtp takes update_pool and
num_accepted_tokens.
"""
import argparse, json, math, os, statistics, sys, time, traceback
from types import SimpleNamespace as NS

HERE = os.path.dirname(os.path.abspath(__file__))
H, HV, D = 4, 8, 128
POOL_SLOTS = 4096  # decode and prefill pool
VERIFY_SLOTS = 1024  # verify pool (gdn's intermediate buffer has one row per pool slot)
CKPT_EVERY = 64
TOL = {"float32": 1e-2, "bfloat16": 2.5e-2}  # rel-L2 against the float64 reference
TOL_AGREE = 2e-2  # rel-L2 of a mix workload's serving call against gdn's definition call
SHORT = {"float32": "fp32", "bfloat16": "bf16"}

torch = F = gdn = bp = FI = None  # imported by setup(), after argument parsing
FI_REASON = "FlashInfer not loaded"
DEV = FLUSH = None
FLUSH_NAMES = set()
GATE = {}  # "<check>/<impl>" -> "ok" or why the call is not timed
RES = {"rows": [], "checks": [], "errors": [], "skipped": []}
T0 = time.time()
ARGS = None


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def save():
    with open(os.path.join(ARGS.out, "peers_serving.json"), "w") as f:
        json.dump(RES, f, indent=1)


def left():
    return ARGS.budget - (time.time() - T0)


def grace():
    """How far past the budget a row that started before it may go on warming up candidates."""
    return min(30.0, 0.1 * ARGS.budget)


# ---------------------------------------------------------------- adapters: every library call of the script
def gdn_call(kind, x, l2=False, update=False):
    """gdn's calls. x holds the tensors; outputs are preallocated (nothing allocated inside the timed call)."""
    if kind == "decode_pool":
        return gdn.decode(x.q, x.k, x.v, x.pool, x.A_log, x.a, x.dt_bias, x.b, x.scale, output=x.out,
                          state_indices=x.idx, use_qk_l2norm_in_kernel=l2)
    if kind == "decode_def":
        return gdn.decode(x.q, x.k, x.v, x.st, x.A_log, x.a, x.dt_bias, x.b, x.scale, output=x.out, new_state=x.st)
    if kind == "verify":  # l2=False, update=False: the definition's call
        kw = {"use_qk_l2norm_in_kernel": True} if l2 else {}
        if update:
            kw["update_pool"] = True
        return gdn.mtp(x.q, x.k, x.v, x.pool, x.idx, x.A_log, x.a, x.dt_bias, x.b, x.scale, x.buf_g,
                       output=x.out, **kw)
    if kind == "spec":
        return gdn.mtp(x.q, x.k, x.v, x.pool, x.idx2d, x.A_log, x.a, x.dt_bias, x.b, x.scale, None,
                       output=x.out, num_accepted_tokens=x.acc)
    if kind == "prefill_pool":
        return gdn.prefill(x.q, x.k, x.v, x.pool, None, None, None, None, x.cu, x.scale, output=x.out,
                           max_seqlen=x.longest, alpha=x.alpha, beta=x.beta, state_indices=x.idx,
                           checkpoint_every=CKPT_EVERY, checkpoint_cu_starts=x.cks, checkpoints=x.ck)
    if kind == "prefill_alpha":
        return gdn.prefill(x.q, x.k, x.v, x.st, None, None, None, None, x.cu, x.scale, output=x.out,
                           new_state=x.ns, max_seqlen=x.longest, alpha=x.alpha, beta=x.beta)
    if kind == "prefill_def":
        return gdn.prefill(x.q, x.k, x.v, x.st, x.A_log, x.a, x.dt_bias, x.b, x.cu, x.scale, output=x.out,
                           new_state=x.ns, max_seqlen=x.longest)
    raise ValueError(kind)


def fi_call(kind, x, l2=False, update=False):
    """FlashInfer's equivalent calls (signatures in the module docstring)."""
    if FI is None:
        raise RuntimeError(FI_REASON)
    dec, pre = FI.gdn_decode, FI.gdn_prefill
    if kind == "decode_pool":
        return dec.gated_delta_rule_decode_pretranspose(
            x.q, x.k, x.v, None, x.A_log, x.a, x.dt_bias, x.b, scale=x.scale, output=x.out, use_qk_l2norm=l2,
            initial_state=x.pool, initial_state_indices=x.idx)
    if kind == "verify":
        return dec.gated_delta_rule_mtp(
            x.q, x.k, x.v, x.pool, x.idx, x.A_log, x.a, x.dt_bias, x.b, scale=x.scale, output=x.out,
            intermediate_states_buffer=x.buf_f, disable_state_update=not update, use_qk_l2norm=l2)
    if kind == "spec":
        return dec.gated_delta_rule_mtp(
            x.q, x.k, x.v, x.pool, x.init_f, x.A_log, x.a, x.dt_bias, x.b, scale=x.scale, output=x.out,
            ssm_state_indices=x.idx2d, disable_state_update=False, use_qk_l2norm=False)
    if kind == "prefill_pool":
        return pre.chunk_gated_delta_rule(
            x.q, x.k, x.v, g=x.alpha, beta=x.beta, scale=x.scale, initial_state=x.pool, output_final_state=True,
            cu_seqlens=x.cu, output=x.out, output_state=x.pool, state_checkpoints=x.ck,
            checkpoint_cu_starts=x.cks, checkpoint_every_n_tokens=CKPT_EVERY, state_indices=x.idx,
            max_seqlen=x.longest)
    if kind == "prefill_plain":
        return pre.chunk_gated_delta_rule(
            x.q, x.k, x.v, g=x.alpha, beta=x.beta, scale=x.scale, initial_state=x.st, output_final_state=True,
            cu_seqlens=x.cu, output=x.out, output_state=x.ns, max_seqlen=x.longest)
    raise ValueError(kind)


# ---------------------------------------------------------------- float64 reference
def l2n(x):
    """The serving contract's in-kernel q/k norm: bf16(x / sqrt(sum x^2 + 1e-6)), sums in fp32."""
    xf = x.float()
    return (xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) + 1e-6)).bfloat16()


def gates_f64(A_log, a, dt_bias, b):
    """(alpha, beta) in float64 from the raw gates: alpha = exp(-exp(A_log) * softplus(a + dt_bias))."""
    x = a.double() + dt_bias.double()
    return torch.exp(-torch.exp(A_log.double()) * F.softplus(x)), torch.sigmoid(b.double())


def gates_f32(A_log, a, dt_bias, b):
    """FlashInfer's prefill gate domain as a caller computes it (fp32, outside the timed call)."""
    alpha = torch.exp(-torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float()))
    return alpha.contiguous(), torch.sigmoid(b.float()).contiguous()


def ref_tokens(q, k, v, h0, alpha, beta, scale, l2):
    """One sequence: q, k [T, H, D], v [T, HV, D], h0 [HV, V, K], alpha/beta [T, HV]. Per token
    S = alpha*S; S += (beta*(v - S k)) k^T; o = scale * S q, in float64. Returns (o [T, HV, D], states
    [T, HV, V, K]) with states[t] the state after token t."""
    if l2:
        q, k = l2n(q), l2n(k)
    rep = HV // H
    qe = q.double().repeat_interleave(rep, dim=1)
    ke = k.double().repeat_interleave(rep, dim=1)
    al, be = alpha.double(), beta.double()
    S = h0.double().clone()
    outs, states = [], []
    for t in range(q.shape[0]):
        S = al[t][:, None, None] * S
        kv = torch.einsum("hvk,hk->hv", S, ke[t])
        S = S + (be[t][:, None] * (v[t].double() - kv))[:, :, None] * ke[t][:, None, :]
        outs.append(scale * torch.einsum("hvk,hk->hv", S, qe[t]))
        states.append(S)
    return torch.stack(outs), torch.stack(states)


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / (b.norm() + 1e-30))


def finite(*ts):
    return all(bool(torch.isfinite(t).all()) for t in ts)


# ---------------------------------------------------------------- timing (kernel tier)
def learn_flush():
    """Kernel names of one flush (the marker that splits the profile into calls)."""
    from torch.profiler import profile, ProfilerActivity
    FLUSH.zero_()
    torch.cuda.synchronize()
    for _ in range(2):  # a second try in case the first session only started CUPTI
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            FLUSH.zero_()
            torch.cuda.synchronize()
        names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
        if any("FillFunctor" in n for n in names):  # the fill kernel alone, should anything else show up
            names = {n for n in names if "FillFunctor" in n}
        if names:
            FLUSH_NAMES.update(names)
            RES["flush_kernels"] = sorted(names)
            return
    raise RuntimeError("the profiler recorded no CUDA activity for the L2 flush")


def kernel_tier(fns, iters):
    """{label: {kernel_us, kernel_sum_us, span_us, kernels}} for every callable of `fns`, all in one profiler
    session: per candidate 3 warm-up calls, then `iters` calls each after an L2 flush."""
    from torch.profiler import profile, ProfilerActivity
    late = {}
    for label in list(fns):
        if left() < -grace():  # a started row may overrun the budget by the grace, no further
            late[label] = "not timed: time budget reached before its warm-up"
            fns = {k: f for k, f in fns.items() if k != label}
            continue
        for _ in range(3):
            fns[label]()
        torch.cuda.synchronize()
    if not fns:
        return late
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for fn in fns.values():
            for _ in range(iters):
                FLUSH.zero_()
                fn()
        torch.cuda.synchronize()
    evs = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        fl = e.name in FLUSH_NAMES
        if not fl and ("Memset" in e.name or "Memcpy" in e.name):
            continue
        evs.append((e.time_range.start, e.time_range.end, fl, e.name))
    return {**tier_stats(evs, list(fns), iters), **late}


def tier_stats(evs, labels, iters):
    """evs: (start, end, is_flush, name) of every recorded kernel; each flush opens the next call's group."""
    evs = sorted(evs)
    groups = []
    for st, en, fl, name in evs:
        if fl:
            groups.append([])
        elif groups:
            groups[-1].append((st, en, name))
    if len(groups) != len(labels) * iters:
        raise RuntimeError(f"kernel tier: {len(groups)} flushes recorded for {len(labels) * iters} calls")
    res = {}
    for i, label in enumerate(labels):
        calls = groups[i * iters:(i + 1) * iters]
        if any(not c for c in calls):
            res[label] = "error: a call launched no kernel"
            continue
        tu = ts = tsp = 0.0
        names = {}
        for c in calls:
            ts += sum(en - st for st, en, _ in c)
            tsp += max(en for _, en, _ in c) - min(st for st, _, _ in c)
            u, hi = 0.0, None
            for st, en, _ in sorted(c):
                if hi is None or st > hi:
                    u, hi = u + en - st, en
                elif en > hi:
                    u, hi = u + en - hi, en
            tu += u
            for _, _, n in c:
                names[n[:90]] = names.get(n[:90], 0) + 1
        res[label] = {"kernel_us": tu / iters, "kernel_sum_us": ts / iters, "span_us": tsp / iters,
                      "kernels": {n: k / iters for n, k in names.items()}}
    return res


def time_fns(fns, iters):
    """kernel_tier, falling back to one session per candidate so that one failing call costs only its cell."""
    if not fns:
        return {}
    try:
        return kernel_tier(fns, iters)
    except Exception:
        res = {}
        for k, f in fns.items():
            try:
                res.update(kernel_tier({k: f}, iters))
            except Exception as e:
                res[k] = f"error: {type(e).__name__}: {str(e)[:300]}"
        return res


# ---------------------------------------------------------------- checks
LAST_CALL_S = [None]  # wall time of the latest attempt() (a library's first call includes its JIT compile)


def attempt(call, x):
    t0 = time.time()
    try:
        call(x)
        if DEV.type == "cuda":
            torch.cuda.synchronize()
        return None
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:400]}"
    finally:
        LAST_CALL_S[0] = round(time.time() - t0, 3)


def record(tag, impl, m, tol, err):
    """Files a check: GATE["<tag>/<impl>"] = "ok" when no error, every bool holds and every float <= tol."""
    if err is not None:
        reason = ("unsupported: " if impl.startswith("fi") else "error: ") + err
    else:
        bad = [k for k, v in m.items() if (isinstance(v, bool) and not v) or (isinstance(v, float) and not v <= tol)]
        reason = "ok" if not bad else "check failed: " + ", ".join(f"{k}={m[k]}" for k in bad)
    GATE[f"{tag}/{impl}"] = reason
    RES["checks"].append({"check": tag, "impl": impl, "tol": tol, **m, "result": reason, "call_s": LAST_CALL_S[0]})
    log(f"check {tag:<22} {impl:<9}", reason if reason != "ok" else
        "ok " + " ".join(f"{k}={v:.1e}" for k, v in m.items() if isinstance(v, float)))


def gen(seed):
    return torch.Generator(device=DEV).manual_seed(seed)


def randn(g, *s):
    return torch.randn(*s, device=DEV, generator=g)


def slots(g, n, count):
    """`count` distinct pool rows in 1..n-1 (slot 0 stays unused: vLLM's null slot, FlashInfer's bf16 pad)."""
    return (torch.randperm(n - 1, generator=g, device=DEV)[:count] + 1).to(torch.int32)


def split_slots(perm, B, T):
    """(idx [B], idx2d [B, T]) from `perm`, each its own allocation: FlashInfer's MTP kernels are compiled
    with 16-byte-aligned index tensors (from_dlpack(..., assumed_align=16) in gdn_kernels/gdn_decode_mtp.py),
    and a view at offset 4*B is not aligned when B is odd."""
    return perm[:B].clone(), perm[B:B + B * T].view(B, T).clone()


def step_inputs(B, T, g, normalized):
    """Decode / verify inputs [B, T, ..] as bench_peers.decode_inputs draws them."""
    q, k = randn(g, B, T, H, D), randn(g, B, T, H, D)
    if normalized:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    return NS(q=q.bfloat16(), k=k.bfloat16(), v=randn(g, B, T, HV, D).bfloat16(),
              A_log=torch.log(torch.rand(HV, device=DEV, generator=g) * 15 + 1), dt_bias=randn(g, HV),
              a=randn(g, B, T, HV).bfloat16(), b=randn(g, B, T, HV).bfloat16(), scale=1.0 / math.sqrt(D))


def nan(*shape, dtype=None):
    return torch.full(shape, float("nan"), dtype=dtype or torch.float32, device=DEV)


def check_decode(sd, l2, pad=False):
    """B=5 from a 48-slot pool. pad: one index -1, padding rule "negative" (FlashInfer's fp32 rule); gates
    nothing (tag pad-info), it only records whether both leave the row's output zero and the pool alone."""
    tag = f"decode/{DTN[sd]}/pad-info" if pad else f"decode/{DTN[sd]}/l2={int(l2)}"
    g = gen(100 + 2 * int(l2) + int(pad))
    B, P = 5, 48
    x = step_inputs(B, 1, g, normalized=not l2)
    pool0 = (0.1 * randn(g, P, HV, D, D)).to(sd)
    idx_l = slots(g, P, B).tolist()
    if pad:
        idx_l[2] = -1
    idx = torch.tensor(idx_l, dtype=torch.int32, device=DEV)
    al, be = gates_f64(x.A_log, x.a, x.dt_bias, x.b)
    live = [i for i in range(B) if idx_l[i] >= 0]
    ref_out = torch.zeros(B, 1, HV, D, dtype=torch.float64, device=DEV)
    ref_st = []
    for i in live:
        o, s = ref_tokens(x.q[i], x.k[i], x.v[i], pool0[idx_l[i]], al[i], be[i], x.scale, l2)
        ref_out[i] = o
        ref_st.append(s[-1])
    ref_st = torch.stack(ref_st)
    rows = torch.tensor([idx_l[i] for i in live], dtype=torch.long, device=DEV)
    keep = torch.ones(P, dtype=torch.bool, device=DEV)
    keep[rows] = False
    for impl, call in (("gdn", lambda y: gdn_call("decode_pool", y, l2=l2)),
                       ("fi", lambda y: fi_call("decode_pool", y, l2=l2))):
        pool, out = pool0.clone(), nan(B, 1, HV, D, dtype=torch.bfloat16)
        err = attempt(call, NS(**vars(x), pool=pool, idx=idx, out=out))
        m = {} if err else {"out_rel": rel(out, ref_out), "state_rel": rel(pool[rows], ref_st),
                            "finite": finite(out, pool[rows]), "untouched": torch.equal(pool[keep], pool0[keep])}
        record(tag, impl, m, TOL[DTN[sd]], err)
    if not l2 and not pad:
        st, out = pool0[rows].clone(), nan(B, 1, HV, D, dtype=torch.bfloat16)
        err = attempt(lambda y: gdn_call("decode_def", y), NS(**vars(x), st=st, out=out))
        m = {} if err else {"out_rel": rel(out, ref_out), "state_rel": rel(st, ref_st), "finite": finite(out, st)}
        record(tag, "gdn_def", m, TOL[DTN[sd]], err)


def check_verify(l2):
    """B=3, T=4 from a 32-slot fp32 pool: verify (buffer, pool frozen); without l2norm also verify+update and
    spec-decode slots."""
    g = gen(200 + int(l2))
    B, T, P = 3, 4, 32
    x = step_inputs(B, T, g, normalized=not l2)
    pool0 = 0.1 * randn(g, P, HV, D, D)
    perm = slots(g, P, B + B * T)
    idx, idx2d = split_slots(perm, B, T)
    acc = torch.tensor([1, T, 2], dtype=torch.int32, device=DEV)
    al, be = gates_f64(x.A_log, x.a, x.dt_bias, x.b)

    def ref(start_rows):
        outs, sts = zip(*(ref_tokens(x.q[i], x.k[i], x.v[i], pool0[int(start_rows[i])], al[i], be[i], x.scale, l2)
                          for i in range(B)))
        return torch.stack(outs), torch.stack(sts)  # [B, T, HV, D], [B, T, HV, V, K]

    ref_out, ref_st = ref(idx.tolist())
    rows = idx.long()
    keep = torch.ones(P, dtype=torch.bool, device=DEV)
    keep[rows] = False
    for update in ((False, True) if not l2 else (False,)):
        tag = "verify_update" if update else f"verify/l2={int(l2)}"
        for impl in ("gdn", "fi"):
            pool, out = pool0.clone(), nan(B, T, HV, D, dtype=torch.bfloat16)
            y = NS(**vars(x), pool=pool, idx=idx, out=out, buf_g=nan(P, T, HV, D, D), buf_f=nan(B, T, HV, D, D))
            call = gdn_call if impl == "gdn" else fi_call
            err = attempt(lambda y: call("verify", y, l2=l2, update=update), y)
            m = {}
            if not err:
                inter = y.buf_g[rows] if impl == "gdn" else y.buf_f
                m = {"out_rel": rel(out, ref_out), "inter_rel": rel(inter, ref_st), "finite": finite(out, inter)}
                if impl == "gdn":
                    m["buffer_rows_untouched"] = bool(torch.isnan(y.buf_g[keep]).all())
                if update:
                    m["state_rel"] = rel(pool[rows], ref_st[:, -1])
                    m["untouched"] = torch.equal(pool[keep], pool0[keep])
                else:
                    m["pool_frozen"] = torch.equal(pool, pool0)
            record(tag, impl, m, TOL["float32"], err)
    if l2:
        return
    GATE["verify/l2=0/gdn_def"] = GATE.get("verify/l2=0/gdn", "not checked")
    # spec-decode slots: read row idx2d[b, acc-1], write the state after token t to row idx2d[b, t]
    init_f = idx2d.gather(1, (acc.long() - 1)[:, None]).squeeze(1).contiguous()
    ref_out, ref_st = ref(init_f.tolist())
    rows2 = idx2d.long()
    keep2 = torch.ones(P, dtype=torch.bool, device=DEV)
    keep2[rows2.flatten()] = False
    for impl in ("gdn", "fi"):
        pool, out = pool0.clone(), nan(B, T, HV, D, dtype=torch.bfloat16)
        y = NS(**vars(x), pool=pool, idx2d=idx2d, acc=acc, init_f=init_f, out=out)
        err = attempt(lambda y: (gdn_call if impl == "gdn" else fi_call)("spec", y), y)
        m = {} if err else {"out_rel": rel(out, ref_out), "state_rel": rel(pool[rows2], ref_st),
                            "finite": finite(out, pool[rows2]), "untouched": torch.equal(pool[keep2], pool0[keep2])}
        record("spec", impl, m, TOL["float32"], err)


def prefill_case(lens, g):
    T, N = sum(lens), len(lens)
    q = F.normalize(randn(g, T, H, D), dim=-1).bfloat16()
    k = F.normalize(randn(g, T, H, D), dim=-1).bfloat16()
    x = NS(q=q, k=k, v=randn(g, T, HV, D).bfloat16(), A_log=torch.log(torch.rand(HV, device=DEV, generator=g) * 15 + 1),
           dt_bias=randn(g, HV), a=randn(g, T, HV).bfloat16(), b=randn(g, T, HV).bfloat16(), scale=1.0 / math.sqrt(D),
           st0=0.1 * randn(g, N, HV, D, D))
    x.cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(N)], dtype=torch.int64, device=DEV)
    return x


def ckpt_starts(lens):
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n // CKPT_EVERY)
    return starts


def check_prefill():
    """Sequences of 150, 37, 200, 64 and 1 tokens from a 32-slot pool; 6 checkpoints and a NaN guard row."""
    g = gen(300)
    lens, P = [150, 37, 200, 64, 1], 32
    N = len(lens)
    x = prefill_case(lens, g)
    x.alpha, x.beta = gates_f32(x.A_log, x.a, x.dt_bias, x.b)
    x.longest = max(lens)
    starts = ckpt_starts(lens)
    C = starts[-1]
    x.cks = torch.tensor(starts, dtype=torch.int32, device=DEV)
    idx = slots(g, P, N)
    rows = idx.long()
    pool0 = 0.1 * randn(g, P, HV, D, D)
    pool0[rows] = x.st0
    keep = torch.ones(P, dtype=torch.bool, device=DEV)
    keep[rows] = False
    ref_out = torch.zeros(sum(lens), HV, D, dtype=torch.float64, device=DEV)
    ref_fin = torch.zeros(N, HV, D, D, dtype=torch.float64, device=DEV)
    ref_ck = torch.zeros(C, HV, D, D, dtype=torch.float64, device=DEV)
    cu = x.cu.tolist()
    for s in range(N):
        a0, a1 = cu[s], cu[s + 1]
        o, sts = ref_tokens(x.q[a0:a1], x.k[a0:a1], x.v[a0:a1], x.st0[s], x.alpha[a0:a1], x.beta[a0:a1], x.scale,
                            False)
        ref_out[a0:a1], ref_fin[s] = o, sts[-1]
        for j in range(lens[s] // CKPT_EVERY):
            ref_ck[starts[s] + j] = sts[(j + 1) * CKPT_EVERY - 1]
    for impl in ("gdn", "fi"):
        pool, out, ck = pool0.clone(), nan(sum(lens), HV, D, dtype=torch.bfloat16), nan(C + 1, HV, D, D)
        y = NS(**vars(x), pool=pool, idx=idx, out=out, ck=ck)
        err = attempt(lambda y: (gdn_call if impl == "gdn" else fi_call)("prefill_pool", y), y)
        m = {} if err else {"out_rel": rel(out, ref_out), "state_rel": rel(pool[rows], ref_fin),
                            "ckpt_rel": rel(ck[:C], ref_ck), "finite": finite(out, pool[rows], ck[:C]),
                            "untouched": torch.equal(pool[keep], pool0[keep]),
                            "guard_row": bool(torch.isnan(ck[C]).all())}
        record("prefill/pool", impl, m, TOL["float32"], err)
    for impl, call in (("gdn", lambda y: gdn_call("prefill_alpha", y)), ("fi", lambda y: fi_call("prefill_plain", y)),
                       ("gdn_def", lambda y: gdn_call("prefill_def", y))):
        out, ns = nan(sum(lens), HV, D, dtype=torch.bfloat16), nan(N, HV, D, D)
        err = attempt(call, NS(**vars(x), st=x.st0.clone(), ns=ns, out=out))
        m = {} if err else {"out_rel": rel(out, ref_out), "state_rel": rel(ns, ref_fin), "finite": finite(out, ns)}
        record("prefill/plain", impl, m, TOL["float32"], err)


# ---------------------------------------------------------------- timed rows
def cell(t, key, gate):
    """A timing dict, or why there is none."""
    why = GATE.get(gate, "not checked")
    if why != "ok":
        return why
    return t.get(key, "not timed")


def us(c):
    return c["kernel_us"] if isinstance(c, dict) else None


def add_row(section, label, params, gs, gd, fi):
    row = {"section": section, "label": label, **params, "gdn_serving": gs, "gdn_def": gd, "flashinfer": fi}
    if us(gs) and us(fi):
        row["ratio"] = us(fi) / us(gs)
    RES["rows"].append(row)
    return row


def fmt(c):
    if isinstance(c, dict):
        return f"{c['kernel_us']:.2f}"
    c = str(c)
    return "unsup" if c.startswith("unsupported") else "FAIL" if c.startswith(("check", "error")) else "-"


def line(row):
    r = f"x{row['ratio']:.2f}" if "ratio" in row else "-"
    cells = " ".join(f"{fmt(row[k]):>10}" for k in ("gdn_serving", "gdn_def", "flashinfer"))
    return f"{row['label']:<40} {cells} {r:>7}"


SECTION_END = [None]  # wall-clock end of the running section's share of the budget


def budget_ok(label):
    """Whether a row may start: before the total budget and before the section's share of it."""
    if left() <= 0:
        RES["skipped"].append(f"{label}: time budget reached")
        return False
    if SECTION_END[0] is not None and time.time() >= SECTION_END[0]:
        RES["skipped"].append(f"{label}: the section's share of the time budget reached")
        return False
    return True


def run_decode(pool32):
    g = gen(7)
    for sdn in ("float32", "bfloat16"):
        pool = pool32 if sdn == "float32" else pool32.bfloat16()
        tag = f"decode/{sdn}"
        for B in ARGS.decode_b:
            label = f"decode {SHORT[sdn]} B={B}"
            if not budget_ok(label):
                break
            x = step_inputs(B, 1, g, normalized=True)
            x.pool, x.idx, x.out = pool, slots(g, POOL_SLOTS, B), torch.empty(B, 1, HV, D, dtype=torch.bfloat16,
                                                                                device=DEV)
            x.st = pool[x.idx.long()].clone()
            fns = {}
            if GATE.get(f"{tag}/l2=0/gdn_def") == "ok":
                fns["gdn_def"] = lambda: gdn_call("decode_def", x)
            for l2 in (0, 1):
                if GATE.get(f"{tag}/l2={l2}/gdn") == "ok":
                    fns[f"gdn{l2}"] = lambda l2=l2: gdn_call("decode_pool", x, l2=bool(l2))
                if GATE.get(f"{tag}/l2={l2}/fi") == "ok":
                    fns[f"fi{l2}"] = lambda l2=l2: fi_call("decode_pool", x, l2=bool(l2))
            t = time_fns(fns, ARGS.iters)
            for l2 in (0, 1):
                row = add_row("decode", f"{label} l2norm={l2}", {"B": B, "state": sdn, "l2norm": l2},
                              cell(t, f"gdn{l2}", f"{tag}/l2={l2}/gdn"), cell(t, "gdn_def", f"{tag}/l2=0/gdn_def"),
                              cell(t, f"fi{l2}", f"{tag}/l2={l2}/fi"))
                log(line(row))
            save()
        del pool


def run_verify(pool32):
    g = gen(8)
    pool = pool32[:VERIFY_SLOTS]
    for B in ARGS.verify_b:
        for T in ARGS.verify_t:
            if not budget_ok(f"verify B={B} T={T}"):
                return
            x = step_inputs(B, T, g, normalized=True)
            perm = slots(g, VERIFY_SLOTS, B + B * T)
            x.pool = pool
            x.idx, x.idx2d = split_slots(perm, B, T)
            x.acc = torch.randint(1, T + 1, (B,), generator=g, device=DEV, dtype=torch.int32)
            x.init_f = x.idx2d.gather(1, (x.acc.long() - 1)[:, None]).squeeze(1).contiguous()
            x.out = torch.empty(B, T, HV, D, dtype=torch.bfloat16, device=DEV)
            x.buf_g = torch.empty(VERIFY_SLOTS, T, HV, D, D, device=DEV)
            x.buf_f = torch.empty(B, T, HV, D, D, device=DEV)
            spec = [("gdn_def", "verify/l2=0/gdn_def", lambda: gdn_call("verify", x)),
                    ("gdn1", "verify/l2=1/gdn", lambda: gdn_call("verify", x, l2=True)),
                    ("fi0", "verify/l2=0/fi", lambda: fi_call("verify", x)),
                    ("fi1", "verify/l2=1/fi", lambda: fi_call("verify", x, l2=True)),
                    ("gdn_upd", "verify_update/gdn", lambda: gdn_call("verify", x, update=True)),
                    ("fi_upd", "verify_update/fi", lambda: fi_call("verify", x, update=True)),
                    ("gdn_spec", "spec/gdn", lambda: gdn_call("spec", x)),
                    ("fi_spec", "spec/fi", lambda: fi_call("spec", x))]
            t = time_fns({k: fn for k, gate, fn in spec if GATE.get(gate) == "ok"}, ARGS.iters)
            gd = cell(t, "gdn_def", "verify/l2=0/gdn_def")
            p = {"B": B, "T": T}
            same = {"note": "without serving options gdn's verify call is the definition's call"}
            rows = [add_row("verify", f"verify B={B} T={T} l2norm=0", {**p, "l2norm": 0, **same}, gd, gd,
                            cell(t, "fi0", "verify/l2=0/fi")),
                    add_row("verify", f"verify B={B} T={T} l2norm=1", {**p, "l2norm": 1},
                            cell(t, "gdn1", "verify/l2=1/gdn"), gd, cell(t, "fi1", "verify/l2=1/fi")),
                    add_row("verify", f"verify+update B={B} T={T}", p, cell(t, "gdn_upd", "verify_update/gdn"), gd,
                            cell(t, "fi_upd", "verify_update/fi")),
                    add_row("verify", f"spec slots B={B} T={T}", p, cell(t, "gdn_spec", "spec/gdn"), gd,
                            cell(t, "fi_spec", "spec/fi"))]
            for row in rows:
                log(line(row))
            x = None  # frees the buffers before the next shape allocates its own
            save()


def run_prefill(pool32):
    if bp is None:
        RES["skipped"].append("prefill mix: bench_peers (its input generator) did not import")
        return
    mix = json.load(open(os.path.join(HERE, "..", "data", "contest_mix.json")))
    items = list(mix.items())[::ARGS.mix_stride]
    g = gen(9)
    for i, (name, lens) in enumerate(items):
        if not budget_ok(f"prefill {name} and the {len(items) - i - 1} workloads after it"):
            break
        try:
            prefill_workload(pool32, g, name, lens)
        except Exception:
            RES["errors"].append(f"prefill {name}: " + traceback.format_exc()[-800:])
            log("ERROR", RES["errors"][-1])
        save()


def prefill_workload(pool32, g, name, lens):
    q, k, v, st0, A_log, a, dt_bias, b, cu, scale = bp.prefill_inputs(lens)
    N, T = len(lens), sum(lens)
    alpha, beta = gates_f32(A_log, a, dt_bias, b)
    starts = ckpt_starts(lens)
    C = starts[-1]
    x = NS(q=q, k=k, v=v, A_log=A_log, a=a, dt_bias=dt_bias, b=b, cu=cu, scale=scale, alpha=alpha, beta=beta,
           longest=max(lens), pool=pool32, idx=slots(g, POOL_SLOTS, N), st=st0,
           cks=torch.tensor(starts, dtype=torch.int32, device=DEV), ck=torch.empty(max(C, 1), HV, D, D, device=DEV),
           out=torch.empty(T, HV, D, dtype=torch.bfloat16, device=DEV), ns=torch.empty(N, HV, D, D, device=DEV))
    rows = x.idx.long()
    cand = {"gdn_pool": ("prefill/pool/gdn", lambda: gdn_call("prefill_pool", x)),
            "fi_pool": ("prefill/pool/fi", lambda: fi_call("prefill_pool", x)),
            "gdn_alpha": ("prefill/plain/gdn", lambda: gdn_call("prefill_alpha", x)),
            "fi_plain": ("prefill/plain/fi", lambda: fi_call("prefill_plain", x)),
            "gdn_def": ("prefill/plain/gdn_def", lambda: gdn_call("prefill_def", x))}
    gate = {k: GATE.get(gk, "not checked") for k, (gk, _) in cand.items()}
    # this workload's calls against gdn's definition call (checked above against the float64 reference)
    agree = {}
    ref = None
    if gate["gdn_def"] == "ok":
        err = attempt(lambda y: gdn_call("prefill_def", y), x)
        if err:
            gate["gdn_def"] = "error: " + err
        else:
            ref = (x.out.clone(), x.ns.clone())
    cks = {}
    for key in ("gdn_pool", "fi_pool", "gdn_alpha", "fi_plain"):
        if gate[key] != "ok" or ref is None:
            continue
        pool_mode = key.endswith("pool")
        if pool_mode:
            pool32[rows] = st0
            x.ck.fill_(float("nan"))
        x.out.fill_(float("nan"))
        x.ns.fill_(float("nan"))
        err = attempt(lambda y: cand[key][1](), x)
        if err:
            gate[key] = ("unsupported: " if key.startswith("fi") else "error: ") + err
            continue
        fin = pool32[rows] if pool_mode else x.ns
        m = {"out_rel": rel(x.out, ref[0]), "state_rel": rel(fin, ref[1])}
        ok = m["out_rel"] <= TOL_AGREE and m["state_rel"] <= TOL_AGREE and finite(x.out, fin)
        if pool_mode and C:
            cks[key] = x.ck[:C].clone()
            ok = ok and finite(cks[key])
        agree[key] = m
        if not ok:
            gate[key] = f"check failed: differs from gdn's definition call {m}"
    if len(cks) == 2:
        agree["ckpt_gdn_vs_fi_rel"] = rel(cks["gdn_pool"], cks["fi_pool"])
    del cks
    t = time_fns({k: fn for k, (_, fn) in cand.items() if gate[k] == "ok"}, ARGS.mix_iters)
    c = {k: (t.get(k, "not timed") if gate[k] == "ok" else gate[k]) for k in cand}
    p = {"workload": name, "T": T, "N": N, "longest": max(lens), "checkpoints": C, "agreement": agree}
    r1 = add_row("prefill", f"{name} pool+ckpt", {**p, "mode": "pool+ckpt"}, c["gdn_pool"], c["gdn_def"],
                 c["fi_pool"])
    r2 = add_row("prefill", f"{name} plain", {**p, "mode": "plain"}, c["gdn_alpha"], c["gdn_def"], c["fi_plain"])
    if us(r2["gdn_def"]) and us(r2["flashinfer"]):
        r2["ratio_vs_def"] = us(r2["flashinfer"]) / us(r2["gdn_def"])
    log(f"{name:<24} T {T:<5} N {N:<3} pool+ckpt gdn {fmt(r1['gdn_serving'])} FI {fmt(r1['flashinfer'])} "
        f"{('x%.2f' % r1['ratio']) if 'ratio' in r1 else '-'} | plain gdn {fmt(r2['gdn_serving'])} def "
        f"{fmt(r2['gdn_def'])} FI {fmt(r2['flashinfer'])} {('x%.2f' % r2['ratio']) if 'ratio' in r2 else '-'}")


def prefill_summary():
    out = []
    for mode in ("pool+ckpt", "plain"):
        rows = [r for r in RES["rows"] if r["section"] == "prefill" and r.get("mode") == mode and "ratio" in r]
        if not rows:
            continue
        s = {"mode": mode, "workloads": len(rows),
             "sum_gdn_serving_us": sum(us(r["gdn_serving"]) for r in rows),
             "sum_gdn_def_us": sum(us(r["gdn_def"]) or 0.0 for r in rows),
             "sum_flashinfer_us": sum(us(r["flashinfer"]) for r in rows),
             "mean_ratio": statistics.mean(r["ratio"] for r in rows),
             "median_ratio": statistics.median(r["ratio"] for r in rows)}
        s["ratio_of_sums"] = s["sum_flashinfer_us"] / s["sum_gdn_serving_us"]
        out.append(s)
    RES["prefill_summary"] = out
    return out


# ---------------------------------------------------------------- main
DTN = {}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See the module docstring for rows, checks and FlashInfer signatures.")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"), help="output folder ($OUT)")
    ap.add_argument("--iters", type=int, default=int(os.environ.get("SERVING_ITERS", "20")),
                    help="timed calls per decode/verify candidate")
    ap.add_argument("--mix-iters", type=int, default=int(os.environ.get("SERVING_MIX_ITERS", "10")),
                    help="timed calls per prefill candidate")
    ap.add_argument("--budget", type=float, default=float(os.environ.get("SERVING_BUDGET_S", "230")),
                    help="seconds after which no new row starts")
    ap.add_argument("--mix-stride", type=int, default=int(os.environ.get("SERVING_MIX_STRIDE", "1")),
                    help="time every n-th workload of the mix")
    env = os.environ.get
    ap.add_argument("--sections", default=env("SERVING_SECTIONS", "decode,verify,prefill"),
                    help="comma-separated subset to time, in this order ($SERVING_SECTIONS)")
    ap.add_argument("--decode-b", default=env("SERVING_DECODE_B", "1,4,16,64,256"), help="($SERVING_DECODE_B)")
    ap.add_argument("--verify-b", default=env("SERVING_VERIFY_B", "16,64"), help="($SERVING_VERIFY_B)")
    ap.add_argument("--verify-t", default=env("SERVING_VERIFY_T", "2,4,8"), help="($SERVING_VERIFY_T)")
    ap.add_argument("--checks-only", action="store_true", help="run the correctness checks, time nothing")
    ap.add_argument("--device", default="cuda",
                    help="cuda; 'cpu' runs the checks of gdn's calls on its CPU path (no FlashInfer, no timing)")
    a = ap.parse_args(argv)
    for k in ("decode_b", "verify_b", "verify_t"):
        setattr(a, k, [int(v) for v in getattr(a, k).split(",") if v])
    a.sections = [s for s in a.sections.split(",") if s]
    return a


def setup():
    global torch, F, gdn, bp, FI, FI_REASON, DEV, FLUSH
    import torch as _torch
    import torch.nn.functional as _F
    torch, F = _torch, _F
    DTN.update({torch.float32: "float32", torch.bfloat16: "bfloat16"})
    DEV = torch.device(ARGS.device)
    import gdn as _gdn
    gdn = _gdn
    RES.update({"torch": torch.__version__, "gdn": gdn.__version__, "iters": ARGS.iters,
                "mix_iters": ARGS.mix_iters, "budget_s": ARGS.budget})
    if DEV.type != "cuda":
        FI_REASON = "FlashInfer needs CUDA"
        return
    RES.update({"device": torch.cuda.get_device_name(),
                "sm": torch.cuda.get_device_properties(0).multi_processor_count})
    argv = sys.argv
    sys.argv = argv[:1] + ["prefill"]  # bench_peers reads its part from argv at import
    sys.path.insert(0, os.path.join(HERE, "..", ".peers2"))
    try:
        import bench_peers as _bp
        bp = _bp
    except Exception as e:  # only the prefill mix needs it
        RES["errors"].append(f"bench_peers import failed (prefill mix skipped): {type(e).__name__}: {e}")
    finally:
        sys.argv = argv
    try:
        import flashinfer
        import flashinfer.gdn_decode
        import flashinfer.gdn_prefill
        FI = NS(gdn_decode=flashinfer.gdn_decode, gdn_prefill=flashinfer.gdn_prefill)
        RES["flashinfer"] = getattr(flashinfer, "__version__", "?")
    except Exception as e:
        FI_REASON = f"FlashInfer import failed: {type(e).__name__}: {str(e)[:300]}"
        RES["errors"].append(FI_REASON)
    # 256 MiB written before every timed call, as bench_peers flushes; float64 so that its fill kernel is one
    # that neither library launches (the flushes split the profile into calls)
    FLUSH = torch.empty(256 * 1024 * 1024 // 8, dtype=torch.float64, device=DEV)
    try:
        learn_flush()
    except Exception as e:  # the checks still run; every timing then fails with its own reason
        RES["errors"].append(f"learn_flush: {type(e).__name__}: {e}")


def run_checks():
    for name, fn in ((f"decode {sd}", lambda sd=sd: [check_decode(sd, l2) for l2 in (False, True)])
                     for sd in (torch.float32, torch.bfloat16)):
        safe(name, fn)
    safe("decode pad", lambda: check_decode(torch.float32, False, pad=True))
    safe("verify", lambda: [check_verify(l2) for l2 in (False, True)])
    safe("prefill", check_prefill)


def run_sections():
    pool32 = 0.1 * randn(gen(1), POOL_SLOTS, HV, D, D)  # 2 GiB fp32, shared by the three sections
    run = {"decode": run_decode, "verify": run_verify, "prefill": run_prefill}
    secs = [sec for sec in ARGS.sections if sec in run]
    RES["sections"] = {}
    for i, sec in enumerate(secs):
        # each section gets an equal share of what is left; time a section leaves unused goes to the next
        t0 = time.time()
        SECTION_END[0] = t0 + max(0.0, left()) / (len(secs) - i)
        safe(sec, lambda sec=sec: run[sec](pool32))
        RES["sections"][sec] = {"share_s": round(SECTION_END[0] - t0, 1), "used_s": round(time.time() - t0, 1)}
        save()
    prefill_summary()


def safe(name, fn):
    try:
        fn()
    except Exception:
        RES["errors"].append(f"{name}: " + traceback.format_exc()[-1200:])
        log("ERROR", RES["errors"][-1])


def main():
    global ARGS
    ARGS = parse_args()
    os.makedirs(ARGS.out, exist_ok=True)
    try:
        setup()
        log("gdn", RES["gdn"], "torch", RES["torch"], "flashinfer", RES.get("flashinfer", FI_REASON),
            RES.get("device", ""))
        if DEV.type == "cuda" and gdn.cuda_unavailable_reason():
            raise RuntimeError("gdn CUDA backend unavailable: " + gdn.cuda_unavailable_reason())
        run_checks()
        save()
        if ARGS.checks_only or DEV.type != "cuda":
            return
        run_sections()
    except Exception:
        RES["errors"].append(traceback.format_exc()[-1500:])
        log("ERROR", RES["errors"][-1])
    finally:
        save()
        report()


def report():
    """The compact table: failed checks, one line per decode/verify row, the prefill mix summary."""
    bad = [c for c in RES["checks"] if c["result"] != "ok"]
    print(f"\nchecks: {len(RES['checks']) - len(bad)} ok, {len(bad)} not ok")
    for c in bad:
        print(f"  {c['check']}/{c['impl']}: {c['result'][:220]}")
    print("\nkernel-tier us per call (L2 flushed); ratio = FlashInfer / gdn serving (> 1: gdn faster)")
    print(f"{'row':<40} {'gdn serv':>10} {'gdn def':>10} {'FlashInfer':>10} {'ratio':>7}")
    for row in RES["rows"]:
        if row["section"] != "prefill":
            print(line(row))
    for s in RES.get("prefill_summary", []):
        print(f"{'prefill mix ' + s['mode'] + ' (' + str(s['workloads']) + ' wl, sums)':<40} "
              f"{s['sum_gdn_serving_us']:>10.1f} {s['sum_gdn_def_us']:>10.1f} {s['sum_flashinfer_us']:>10.1f} "
              f"{'x%.2f' % s['mean_ratio']:>7}  (mean of ratios; median x{s['median_ratio']:.2f}, "
              f"ratio of sums x{s['ratio_of_sums']:.2f})")
    for e in RES["errors"]:
        print("ERROR:", e[-600:])
    for s in RES["skipped"]:
        print("skipped:", s)
    print(f"wrote {os.path.join(ARGS.out, 'peers_serving.json')} in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
