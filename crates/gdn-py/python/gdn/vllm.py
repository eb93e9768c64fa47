"""gdn.vllm: the GDN kernel functions that vLLM's Qwen3-Next / Qwen3.5 layer calls from its FLA fork
(``vllm/third_party/flash_linear_attention/ops``, re-exported as ``vllm.model_executor.layers.fla.ops``; read
at vLLM 0.33.0, commit 4ba787ec9), with the same names, signatures, defaults, shapes, in-place semantics and
return values, computed by gdn:

* ``chunk_gated_delta_rule``: prefill with precomputed log ``g`` and ``beta``, per-call k-last states
  ``[N, HV, V, K]``, int32 ``cu_seqlens``, optional ``core_attn_out`` buffer; final state float32.
* ``fi_chunk_gated_delta_rule``: the layer's own wrapper of FlashInfer's prefill (vLLM's default prefill
  backend on Hopper; model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py), with prefix-cache checkpoints.
* ``fused_recurrent_gated_delta_rule_packed_decode``: one decode step reading q / k / v straight out of
  ``mixed_qkv [B, 2*H*K + HV*V]``, raw gates, the state pool updated in place, slot ``<= 0`` = padding.
* ``fused_sigmoid_gating_delta_rule_update`` (raw gates) and ``fused_recurrent_gated_delta_rule`` (log ``g``
  and ``beta``): decode and spec-decode verify on the pool: 1-D slot indices (one token per sequence) or 2-D
  ``[N, S]`` slots with ``num_accepted_tokens``, ``inplace_final_state``.

Every call maps onto one ``gdn.decode`` / ``gdn.mtp`` / ``gdn.prefill`` call with the pool, slots and padding
rule (``pad="null-slot"``: vLLM's ``NULL_BLOCK_ID`` 0) handled inside the kernels; q, k, v and the outputs are
passed as views (no copy). With torch CUDA tensors nothing is read back to the host, so the calls can be
captured in CUDA graphs; the only allocations are those vLLM's functions make themselves (their outputs) and
copies of inputs gdn cannot take in place (a non-contiguous index or gate tensor, a bfloat16 ``dt_bias``
widened once and cached). torch CPU tensors run on gdn's CPU backend.

``patch()`` points vLLM's layer module at these functions (run it in every worker, e.g. from a
``vllm.general_plugins`` entry point); spec-decode verify reaches them with ``VLLM_GDN_DECODE_KERNEL=triton``
(vLLM's default, "cuda", runs its own fused MTP kernel instead).

What differs, and what raises:

* Sequences of a recurrent call (1-D or 2-D slots, ``cu_seqlens`` given) must each hold exactly S tokens
  (S = 1 for 1-D slots, S = the slot row width for 2-D), laid out back to back, except padded sequences (read
  slot ``<= 0``), whose tokens are not read. This is the layout of vLLM's decode and uniform spec-decode
  batches (including CUDA-graph padding at the back); ragged spec-decode batches (requests with different
  draft counts) cannot be expressed as one gdn call. On CPU tensors ``cu_seqlens`` is checked (``ValueError``);
  on CUDA its values stay on the device, unchecked.
* Output rows of padded sequences and of tokens past ``cu_seqlens[-1]`` are zero (vLLM leaves them
  uninitialised).
* ``NotImplementedError`` (naming the option) for: float32 activations, fp8 states,
  ``is_kda``, a softplus ``beta != 1`` or ``threshold != 20``, headwise ``beta [.., HV, V]``,
  ``num_accepted_tokens`` with 1-D slots, 1-D slots with more than one token per sequence in place,
  ``scale=0`` (gdn reads 0 as ``1/sqrt(K)``), autograd (inputs requiring grad while grad is enabled).
"""


import torch

import gdn as _gdn
from gdn import _adapt as _ad

__all__ = [
    "chunk_gated_delta_rule",
    "fi_chunk_gated_delta_rule",
    "fused_recurrent_gated_delta_rule",
    "fused_recurrent_gated_delta_rule_packed_decode",
    "fused_sigmoid_gating_delta_rule_update",
    "patch",
    "unpatch",
]

_F32 = torch.float32
_I32 = torch.int32
_PAD = "null-slot"  # vLLM's NULL_BLOCK_ID: slot 0 and negative slots are padding
_PACKED = _gdn._gdn.packed_decode  # the packed decode's one-step binding entry


# ---- small helpers (dtype policy, layouts) -------------------------------------------------------------

def _name(fn):
    return f"gdn.vllm.{fn}"


def _unsupported(fn, what):
    return _ad.unsupported(_name(fn), what)


def _dt(x):
    return str(x.dtype).replace("torch.", "")


def _bf16(fn, name, x):
    """q, k, v, outputs and raw gates: bfloat16 or float16."""
    _ad.need_act16(_name(fn), name, x)


def _state(fn, name, x):
    _ad.state_dtype(_name(fn), name, x)


def _gate_f32(fn, name, x):
    """A float32 operand: bfloat16 / float16 widened (exact)."""
    return _ad.gate_f32(_name(fn), name, x)


def _beta(fn, name, x):
    return _ad.beta_dtype(_name(fn), name, x)



def _param_f32(fn, name, x):
    """A_log / dt_bias: float32, contiguous, flat; a 16-bit parameter widened once and cached (_adapt.param_f32)."""
    return _ad.param_f32(_name(fn), name, x)


def _flat(x):
    """x as a flat contiguous view (a copy only when x is not contiguous), so that a prefix of its tokens can be
    viewed with canonical strides."""
    return (x if x.is_contiguous() else x.contiguous()).view(-1)


def _idx32(x):
    """An index tensor as gdn's MTP takes it: int32, contiguous."""
    if x.dtype is not _I32:
        x = x.to(_I32)
    return x if x.is_contiguous() else x.contiguous()


def _dense_idx(x):
    return x if x.is_contiguous() else x.contiguous()


def _scale(fn, scale, K):
    if scale is None:
        return K ** -0.5
    scale = float(scale)
    if scale == 0.0:
        raise _unsupported(fn, "scale=0 (gdn reads 0 as the default 1/sqrt(K))")
    return scale


def _no_grad(fn, *xs):
    if torch.is_grad_enabled():
        for x in xs:
            if x is not None and x.requires_grad:
                raise _unsupported(fn, "autograd (an input requires grad; gdn computes the forward pass only)")


def _check_layout_host(fn, cu, S, N, read_rows):
    """CPU tensors only: the recurrent calls need sequence n at tokens [n*S, (n+1)*S) unless it is padding
    (read slot <= 0); vLLM's kernels read the same tokens from cu_seqlens."""
    c = cu.tolist()
    pad = [r <= 0 for r in read_rows.tolist()] if read_rows is not None else [False] * N
    for n in range(N):
        if pad[n]:
            continue
        if c[n] != n * S or c[n + 1] != (n + 1) * S:
            raise ValueError(
                f"{_name(fn)}: argument 'cu_seqlens': sequence {n} spans tokens {c[n]}..{c[n + 1]}, but gdn "
                f"runs every non-padded sequence of this call with exactly {S} token(s) at {n * S}..{(n + 1) * S} "
                "(uniform decode / spec-decode batches; ragged batches are not supported)")


# ---- chunk_gated_delta_rule / fi_chunk_gated_delta_rule (prefill) ---------------------------------------

def _chunk(fn, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, use_qk_l2norm_in_kernel,
           core_attn_out, checkpoints=None, checkpoint_cu_starts=None, checkpoint_every=0):
    """The shared body of the two prefill functions: one gdn.prefill call. Returns (o, final_state)."""
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise TypeError(f"{_name(fn)}: q, k and v must share a dtype, got {_dt(q)}, {_dt(k)}, {_dt(v)}")
    _bf16(fn, "q", q)
    if beta.dim() != 3:
        raise ValueError(f"{_name(fn)}: argument 'beta': must be of shape [B, T, H], got {tuple(beta.shape)}")
    _no_grad(fn, q, k, v, g, beta, initial_state)
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    dev = q.device
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(
                f"{_name(fn)}: the batch size is expected to be 1 rather than {B} when using `cu_seqlens`; "
                "flatten variable-length inputs first")
        N = cu_seqlens.shape[0] - 1
        if initial_state is not None and initial_state.shape[0] != N:
            raise ValueError(
                f"{_name(fn)}: the number of initial states is expected to be equal to the number of input "
                f"sequences, i.e., {N} rather than {initial_state.shape[0]}")
        cu = cu_seqlens
        max_seqlen = None
    else:
        N = B
        if initial_state is not None and initial_state.shape[0] != N:
            raise ValueError(
                f"{_name(fn)}: argument 'initial_state': expected {N} states (one per batch row), "
                f"got {initial_state.shape[0]}")
        cu = torch.arange(0, B + 1, dtype=_I32, device=dev) * T if T else None
        max_seqlen = T
    scale = _scale(fn, scale, K)
    g = _gate_f32(fn, "g", g)
    _beta(fn, "beta", beta)
    L = B * T
    final = torch.empty(N, HV, V, K, dtype=_F32, device=dev)
    if initial_state is not None:
        _state(fn, "initial_state", initial_state)
        # vLLM returns a new float32 final state (the initial states are not modified) and a zero-length
        # sequence's final state is its initial state: the initial states are copied (widened if 16-bit) into
        # the result, which gdn then updates in place as a pool of N rows (a pool row of a zero-length sequence
        # keeps its value; without a pool gdn would zero it, as the definitions do)
        final.copy_(initial_state)
    if core_attn_out is not None:
        _bf16(fn, "core_attn_out", core_attn_out)
        buf = core_attn_out if core_attn_out.is_contiguous() else core_attn_out.contiguous()
        if buf.numel() < v.numel():
            raise ValueError(f"{_name(fn)}: core_attn_out too small: {buf.numel()} < {v.numel()}")
        o = buf.view(-1)[: v.numel()].view(v.shape)
    else:
        o = torch.empty(v.shape, dtype=v.dtype, device=dev)
    ck = {}
    if checkpoints is not None:
        every = int(checkpoint_every)
        if every <= 0 or every % 64:
            raise _unsupported(fn, f"checkpoint_every_n_tokens={every} (a positive multiple of 64)")
        if checkpoints.dtype is not _F32:
            raise _unsupported(fn, f"state_checkpoints of dtype {_dt(checkpoints)} (float32 only)")
        if checkpoint_cu_starts is None:
            raise ValueError(f"{_name(fn)}: state_checkpoints needs checkpoint_cu_starts")
        ck = dict(checkpoint_every=every, checkpoint_cu_starts=_dense_idx(checkpoint_cu_starts),
                  checkpoints=checkpoints)
    if L:
        gk = dict(g=_flat(g)[: L * HV].view(L, HV), beta=_flat(beta)[: L * HV].view(L, HV))
        args = (q.reshape(L, H, K), k.reshape(L, H, K), v.reshape(L, HV, V))
        opts = dict(cu_seqlens=cu, scale=scale, output=o.view(L, HV, V), max_seqlen=max_seqlen,
                    use_qk_l2norm_in_kernel=bool(use_qk_l2norm_in_kernel), **gk, **ck)
        if initial_state is not None:
            _gdn.prefill(*args, final, state_indices=torch.arange(N, dtype=_I32, device=dev), **opts)
        else:
            _gdn.prefill(*args, None, new_state=final, **opts)
    elif initial_state is None:
        final.zero_()
    return o, (final if output_final_state else None)


def chunk_gated_delta_rule(
    q,
    k,
    v,
    g,
    beta,
    scale=None,
    initial_state=None,
    output_final_state=False,
    cu_seqlens=None,
    chunk_indices=None,
    chunk_offsets=None,
    use_qk_l2norm_in_kernel=False,
    core_attn_out=None,
):
    """vLLM's ``chunk_gated_delta_rule`` (third_party/flash_linear_attention/ops/chunk.py) on gdn: the prefill
    of its Triton/FLA backend.

    q, k ``[B, T, H, K]`` and v ``[B, T, HV, V]`` bfloat16 or float16; g (log decay) and beta ``[B, T, HV]``;
    initial_state ``[N, HV, V, K]`` (k-last) or None (zeros); with ``cu_seqlens`` (int32 or int64, ``[N + 1]``)
    B must be 1. ``chunk_indices`` / ``chunk_offsets`` are FLA's precomputed chunk grid: gdn derives its own
    launch from ``cu_seqlens`` and ignores them. ``core_attn_out``: a buffer whose first ``v.numel()``
    elements receive the output (vLLM's in-place form). Returns ``(o [B, T, HV, V], final_state)`` with
    ``final_state`` float32 ``[N, HV, V, K]`` when ``output_final_state``, else None.
    """
    return _chunk("chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state, output_final_state,
                  cu_seqlens, use_qk_l2norm_in_kernel, core_attn_out)


def fi_chunk_gated_delta_rule(
    q,
    k,
    v,
    g,
    beta,
    initial_state,
    output_final_state,
    cu_seqlens=None,
    use_qk_l2norm_in_kernel=True,
    state_checkpoints=None,
    checkpoint_cu_starts=None,
    checkpoint_every_n_tokens=0,
    use_cp="auto",
):
    """vLLM's ``fi_chunk_gated_delta_rule`` (model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py, its
    FlashInfer prefill backend, the default on Hopper, and the path that writes prefix-cache checkpoints) on
    gdn. Arguments as ``chunk_gated_delta_rule`` with B = 1 (log ``g``; the initial states required), plus
    ``state_checkpoints`` float32 ``[C, HV, V, K]``: the state after every ``checkpoint_every_n_tokens`` (a
    multiple of 64) tokens of sequence n goes to row ``checkpoint_cu_starts[n] + j``, in place. ``use_cp``
    (FlashInfer's context-parallel route) is a plan hint: gdn chooses its own plan. Returns
    ``(o [1, T, HV, V], final_state float32 or None)``.
    """
    fn = "fi_chunk_gated_delta_rule"
    if initial_state is None:
        raise ValueError(f"{_name(fn)}: argument 'initial_state': required")
    if q.dim() != 4 or q.shape[0] != 1:
        raise ValueError(f"{_name(fn)}: q must be [1, T, H, K], got {tuple(q.shape)}")
    return _chunk(fn, q, k, v, g, beta, None, initial_state, output_final_state, cu_seqlens,
                  use_qk_l2norm_in_kernel, None, state_checkpoints, checkpoint_cu_starts, checkpoint_every_n_tokens)


# ---- packed decode --------------------------------------------------------------------------------------

def fused_recurrent_gated_delta_rule_packed_decode(
    mixed_qkv,
    a,
    b,
    A_log,
    dt_bias,
    scale,
    initial_state,
    out,
    ssm_state_indices,
    use_qk_l2norm_in_kernel=False,
):
    """vLLM's packed decode (third_party/flash_linear_attention/ops/fused_recurrent.py) on gdn.

    mixed_qkv ``[B, 2*H*K + HV*V]`` bfloat16 or float16 (per token ``[q heads | k heads | v heads]``; rows may be
    further apart than one row's width), read in place through q / k / v views; a, b ``[B, HV]``; A_log, dt_bias
    ``[HV]``; initial_state: the pool ``[slots, HV, V, K]`` (rows may be further apart than one state), updated
    in place at ``ssm_state_indices [B]`` (``<= 0``: padding, output row zero); out ``[B, 1, HV, V]``
    contiguous, written in place. Returns ``(out, initial_state)``.
    """
    # one binding call derives q / k / v / a / b from mixed_qkv, a, b, checks and launches; None: an input it does
    # not take as it is, for the general path below (which raises the errors or makes the copies)
    r = _PACKED(mixed_qkv, a, b, initial_state, A_log, dt_bias, scale, out, ssm_state_indices,
                use_qk_l2norm_in_kernel, _PAD, _widen_packed)
    if r is not None:
        return r
    return _packed_decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
                          use_qk_l2norm_in_kernel)


def _widen_packed(name, x):
    return _param_f32("fused_recurrent_gated_delta_rule_packed_decode", name, x)


def _packed_decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
                   use_qk_l2norm_in_kernel):
    """The packed decode's general path: the checks that raise, the copies of strided gates / indices."""
    fn = "fused_recurrent_gated_delta_rule_packed_decode"
    if mixed_qkv.dim() != 2:
        raise ValueError(f"{_name(fn)}: `mixed_qkv` must be a 2D tensor (got ndim={mixed_qkv.dim()})")
    if mixed_qkv.stride(-1) != 1:
        raise ValueError(f"{_name(fn)}: `mixed_qkv` must be contiguous in the last dim")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"{_name(fn)}: `a` and `b` must be 2D tensors (got a.ndim={a.dim()}, b.ndim={b.dim()})")
    if A_log.dim() != 1 or dt_bias.dim() != 1:
        raise ValueError(f"{_name(fn)}: `A_log`/`dt_bias` must be 1D tensors")
    if ssm_state_indices.dim() != 1:
        raise ValueError(
            f"{_name(fn)}: `ssm_state_indices` must be 1D for packed decode (got ndim={ssm_state_indices.dim()})")
    if not out.is_contiguous():
        raise ValueError(f"{_name(fn)}: `out` must be contiguous")
    if initial_state.dim() != 4:
        raise ValueError(f"{_name(fn)}: `initial_state` must be a 4D tensor (got ndim={initial_state.dim()})")
    Bn = mixed_qkv.shape[0]
    HV, V, K = initial_state.shape[1:]
    if a.shape != (Bn, HV) or b.shape != (Bn, HV):
        raise ValueError(
            f"{_name(fn)}: `a`/`b` must have shape [B, HV] = [{Bn}, {HV}] "
            f"(got a.shape={tuple(a.shape)}, b.shape={tuple(b.shape)})")
    if ssm_state_indices.shape[0] != Bn:
        raise ValueError(
            f"{_name(fn)}: `ssm_state_indices` must have shape [B] (got {tuple(ssm_state_indices.shape)}; "
            f"expected ({Bn},))")
    if tuple(out.shape) != (Bn, 1, HV, V):
        raise ValueError(f"{_name(fn)}: `out` must have shape {(Bn, 1, HV, V)} (got out.shape={tuple(out.shape)})")
    qk = mixed_qkv.shape[1] - HV * V
    if qk <= 0 or qk % 2 or (qk // 2) % K:
        raise ValueError(f"{_name(fn)}: invalid packed `mixed_qkv` last dim={mixed_qkv.shape[1]} for HV={HV}, "
                         f"V={V}, K={K}")
    H = qk // 2 // K
    if HV % H:
        raise ValueError(f"{_name(fn)}: invalid head config inferred from mixed_qkv: H={H}, HV={HV}")
    _bf16(fn, "mixed_qkv", mixed_qkv)
    _bf16(fn, "a", a)
    _bf16(fn, "b", b)
    _bf16(fn, "out", out)
    _state(fn, "initial_state", initial_state)
    scale = _scale(fn, scale, K)
    if Bn == 0:
        return out, initial_state
    hk = H * K
    _gdn.decode(
        mixed_qkv[:, :hk].view(Bn, 1, H, K),
        mixed_qkv[:, hk:2 * hk].view(Bn, 1, H, K),
        mixed_qkv[:, 2 * hk:2 * hk + HV * V].view(Bn, 1, HV, V),
        initial_state,
        _param_f32(fn, "A_log", A_log),
        _flat(a).view(Bn, 1, HV),
        _param_f32(fn, "dt_bias", dt_bias),
        _flat(b).view(Bn, 1, HV),
        scale,
        output=out,
        state_indices=_dense_idx(ssm_state_indices),
        pad=_PAD,
        use_qk_l2norm_in_kernel=bool(use_qk_l2norm_in_kernel),
    )
    return out, initial_state


# ---- recurrent decode / spec-decode verify --------------------------------------------------------------

def _recurrent(fn, q, k, v, gates, scale, initial_state, inplace_final_state, cu_seqlens, ssm_state_indices,
               num_accepted_tokens, use_qk_l2norm_in_kernel):
    """The shared body of fused_recurrent_gated_delta_rule and fused_sigmoid_gating_delta_rule_update.
    gates: {"A_log", "a", "dt_bias", "b"} (raw) or {"g", "beta"} (precomputed), each a flat token-major
    tensor [tokens * HV] (A_log / dt_bias [HV])."""
    _bf16(fn, "q", q)
    _bf16(fn, "k", k)
    _bf16(fn, "v", v)
    if initial_state is None:
        raise ValueError(f"{_name(fn)}: argument 'initial_state': required (the state pool or per-sequence states)")
    _state(fn, "initial_state", initial_state)
    Bq, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if cu_seqlens is not None:
        if Bq != 1:
            raise ValueError(
                f"{_name(fn)}: the batch size is expected to be 1 rather than {Bq} when using `cu_seqlens`; "
                "flatten variable-length inputs first")
        N = cu_seqlens.shape[0] - 1
    else:
        N = Bq
    L = Bq * T
    scale = _scale(fn, scale, K)
    idx = ssm_state_indices
    acc = num_accepted_tokens
    if idx is not None and idx.dim() == 1 and acc is not None:
        raise _unsupported(fn, "num_accepted_tokens with 1-D ssm_state_indices (spec-decode slots are [N, S])")
    dev = q.device
    o = torch.empty(Bq, T, HV, V, dtype=v.dtype, device=dev)
    o_flat = o.view(L, HV, V)

    if inplace_final_state:
        if idx is None:
            raise ValueError(
                f"{_name(fn)}: inplace_final_state=True needs ssm_state_indices (the pool rows to update)")
        if idx.dim() == 1:
            S = 1
            if cu_seqlens is None and T != 1:
                raise _unsupported(
                    fn, f"1-D ssm_state_indices with {T} tokens per sequence in place (one slot per sequence "
                        "holds one token's state; pass [N, S] slots)")
            rows_idx = idx[:N]
            read_rows = rows_idx
        else:
            S = idx.shape[1] if cu_seqlens is not None else T
            if S > idx.shape[1]:
                raise ValueError(f"{_name(fn)}: argument 'ssm_state_indices': {idx.shape[1]} slots per "
                                 f"sequence for {S} tokens")
            rows_idx = idx[:N, :S]
            if acc is not None:
                acc = acc[:N]
            read_rows = rows_idx[:, 0]
        n_tok = N * S
        if n_tok > L:
            raise ValueError(f"{_name(fn)}: {N} sequences of {S} token(s) need {n_tok} tokens, q has {L}")
        if dev.type != "cuda" and idx.dim() == 2 and acc is not None and N:
            # vLLM skips a request whose read slot idx[n, acc - 1] is padding, gdn one whose idx[n, 0] is: the
            # two agree on every batch vLLM builds (a request's slots are all real or all NULL_BLOCK_ID)
            src = rows_idx.gather(1, (acc.long() - 1).clamp(0, S - 1).unsqueeze(1)).squeeze(1)
            if bool(((read_rows <= 0) != (src <= 0)).any()):
                raise _unsupported(fn, "a request whose first slot and read slot (num_accepted_tokens - 1) "
                                       "disagree on padding")
        if cu_seqlens is not None and dev.type != "cuda":
            _check_layout_host(fn, cu_seqlens, S, N, read_rows)
        if n_tok < L:
            o_flat[n_tok:].zero_()
        if N == 0:
            return o, initial_state
        qv = q.reshape(L, H, K)[:n_tok]
        kv = k.reshape(L, H, K)[:n_tok]
        vv = v.reshape(L, HV, V)[:n_tok]
        gk = _gate_views(gates, n_tok, N, S, HV)
        common = dict(scale=scale, pad=_PAD, use_qk_l2norm_in_kernel=bool(use_qk_l2norm_in_kernel), **gk)
        if S == 1:
            # one token per sequence: a decode step on the pool (read and write slot idx[n] / idx[n, 0])
            si = rows_idx if rows_idx.dim() == 1 else rows_idx.reshape(N)
            _gdn.decode(qv.unsqueeze(1), kv.unsqueeze(1), vv.unsqueeze(1), initial_state,
                        output=o_flat[:n_tok].unsqueeze(1), state_indices=_dense_idx(si), **common)
        else:
            if acc is None:
                acc = torch.ones(N, dtype=_I32, device=dev)
            _gdn.mtp(qv.view(N, S, H, K), kv.view(N, S, H, K), vv.view(N, S, HV, V), initial_state,
                     _idx32(rows_idx), output=o_flat[:n_tok].view(N, S, HV, V),
                     num_accepted_tokens=_idx32(acc), **common)
        return o, initial_state

    # inplace_final_state=False: the state after every token goes to row (first token of its sequence + t) of a
    # new [tokens, HV, V, K] tensor; the initial state of sequence n is the slot it names, or without slots row
    # (first token of n) of initial_state.
    if cu_seqlens is None and Bq != 1:
        raise _unsupported(fn, f"inplace_final_state=False with a batch of {Bq} equal-length sequences "
                               "(vLLM sizes the per-token state tensor by T, not B*T)")
    if cu_seqlens is not None:
        if N == 0 or L % N:
            raise _unsupported(fn, f"inplace_final_state=False with {L} tokens over {N} sequences (gdn runs "
                                   "equal-length sequences here)")
        S = L // N
    else:
        S = T
    if idx is None:
        read_rows = torch.arange(N, device=dev, dtype=torch.int64) * S
        valid = None
    elif idx.dim() == 1:
        read_rows = idx[:N].long()
        valid = read_rows > 0
    elif acc is not None:
        read_rows = idx[:N].long().gather(1, (acc[:N].long() - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        valid = read_rows > 0
    else:
        read_rows = idx[:N, 0].long()
        valid = read_rows > 0
    if cu_seqlens is not None and dev.type != "cuda":
        _check_layout_host(fn, cu_seqlens, S, N, read_rows if valid is not None else None)
    final = torch.empty(L, HV, V, K, dtype=_F32, device=dev)
    if N and S:
        init = initial_state.index_select(0, read_rows.clamp(min=0)).to(_F32)
        gk = _gate_views(gates, L, N, S, HV)
        common = dict(scale=scale, use_qk_l2norm_in_kernel=bool(use_qk_l2norm_in_kernel), **gk)
        if S == 1:
            _gdn.decode(q.reshape(L, 1, H, K), k.reshape(L, 1, H, K), v.reshape(L, 1, HV, V), init,
                        output=o_flat.unsqueeze(1), new_state=final, **common)
        else:
            sel = torch.arange(N, dtype=_I32, device=dev)
            if valid is not None:
                sel = torch.where(valid, sel, torch.full_like(sel, -1))
            _gdn.mtp(q.reshape(N, S, H, K), k.reshape(N, S, H, K), v.reshape(N, S, HV, V), init, sel,
                     intermediate_states_buffer=final.view(N, S, HV, V, K), output=o_flat.view(N, S, HV, V),
                     **common)
    if initial_state.dtype is not _F32:
        final = final.to(initial_state.dtype)
    return o, final


def _gate_views(gates, n_tok, N, S, HV):
    """The gate keywords of a gdn call: the first n_tok tokens of each flat gate tensor, viewed [N, S, HV] (or
    [N, 1, HV] for a decode call with S = 1, the same view)."""
    out = {}
    for key, x in gates.items():
        if key in ("A_log", "dt_bias"):
            out[key] = x
        else:
            out[key] = x[: n_tok * HV].view(N, S, HV)
    return out


def fused_recurrent_gated_delta_rule(
    q,
    k,
    v,
    g,
    beta=None,
    scale=None,
    initial_state=None,
    inplace_final_state=True,
    cu_seqlens=None,
    ssm_state_indices=None,
    num_accepted_tokens=None,
    use_qk_l2norm_in_kernel=False,
):
    """vLLM's ``fused_recurrent_gated_delta_rule`` (third_party/flash_linear_attention/ops/fused_recurrent.py)
    on gdn: precomputed log decay ``g`` and ``beta`` (``[B, T, HV]``; beta None means ones).

    q, k ``[B, T, H, K]``, v ``[B, T, HV, V]`` bfloat16 or float16 (B = 1 with ``cu_seqlens``).
    ``inplace_final_state=True``:
    ``initial_state`` is the pool ``[slots, HV, V, K]``, updated in place; ``ssm_state_indices`` ``[N]``
    (one token per sequence: read and write slot idx[n]) or ``[N, S]`` (S tokens per sequence: read slot
    ``idx[n, num_accepted_tokens[n] - 1]`` (or ``idx[n, 0]``), write the state after token t to slot
    ``idx[n, t]``); slots ``<= 0`` are padding. ``inplace_final_state=False``: the state after every token is
    returned as a new ``[tokens, HV, V, K]`` tensor. Returns ``(o [B, T, HV, V], final_state)``.
    """
    fn = "fused_recurrent_gated_delta_rule"
    _no_grad(fn, q, k, v, g, beta, initial_state)
    if beta is not None and beta.dim() == v.dim():
        raise _unsupported(fn, "headwise beta of shape [B, T, HV, V]")
    HV = v.shape[2]
    L = q.shape[0] * q.shape[1]
    gf = _flat(_gate_f32(fn, "g", g))
    if beta is None:
        bf = torch.ones(L * HV, dtype=_F32, device=q.device)
    else:
        bf = _flat(_beta(fn, "beta", beta))
    if scale is not None and not float(scale) > 0:
        raise ValueError(f"{_name(fn)}: argument 'scale': must be positive, got {scale}")
    return _recurrent(fn, q, k, v, {"g": gf, "beta": bf}, scale, initial_state, inplace_final_state, cu_seqlens,
                      ssm_state_indices, num_accepted_tokens, use_qk_l2norm_in_kernel)


def fused_sigmoid_gating_delta_rule_update(
    A_log,
    a,
    b,
    dt_bias,
    q,
    k,
    v,
    beta=1.0,
    threshold=20.0,
    scale=None,
    initial_state=None,
    inplace_final_state=True,
    cu_seqlens=None,
    ssm_state_indices=None,
    num_accepted_tokens=None,
    use_qk_l2norm_in_kernel=False,
    is_kda=False,
):
    """vLLM's ``fused_sigmoid_gating_delta_rule_update`` (third_party/flash_linear_attention/ops/
    fused_sigmoid_gating.py) on gdn: raw gates ``g = -exp(A_log) * softplus(a + dt_bias)``, ``beta =
    sigmoid(b)`` computed in the kernel; a, b hold ``HV`` values per token (``[tokens, HV]`` or ``[B, T, HV]``).

    ``beta`` and ``threshold`` are the softplus parameters: gdn computes torch's softplus (beta 1, threshold 20)
    and raises for others. Slots, padding, ``inplace_final_state`` and the return value as
    ``fused_recurrent_gated_delta_rule``.
    """
    fn = "fused_sigmoid_gating_delta_rule_update"
    if is_kda:
        raise _unsupported(fn, "is_kda=True (per-key gates)")
    if float(beta) != 1.0:
        raise _unsupported(fn, f"softplus beta={beta} (torch's softplus, beta=1.0, only)")
    if float(threshold) != 20.0:
        raise _unsupported(fn, f"softplus threshold={threshold} (torch's softplus, threshold=20.0, only)")
    _no_grad(fn, q, k, v, a, b, initial_state)
    _bf16(fn, "a", a)
    _bf16(fn, "b", b)
    if scale is not None and not float(scale) > 0:
        raise ValueError(f"{_name(fn)}: argument 'scale': must be positive, got {scale}")
    gates = {"A_log": _param_f32(fn, "A_log", A_log), "a": _flat(a), "dt_bias": _param_f32(fn, "dt_bias", dt_bias),
             "b": _flat(b)}
    return _recurrent(fn, q, k, v, gates, scale, initial_state, inplace_final_state, cu_seqlens, ssm_state_indices,
                      num_accepted_tokens, use_qk_l2norm_in_kernel)


# ---- swapping vLLM's layer onto gdn ----------------------------------------------------------------------

_LAYER_MODULE = "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn"
# the names the Qwen3-Next / Qwen3.5 layer module calls, as that module binds them
_SWAP = {
    "fla_chunk_gated_delta_rule": "chunk_gated_delta_rule",
    "fi_chunk_gated_delta_rule": "fi_chunk_gated_delta_rule",
    "fused_sigmoid_gating_delta_rule_update": "fused_sigmoid_gating_delta_rule_update",
    "fused_recurrent_gated_delta_rule_packed_decode": "fused_recurrent_gated_delta_rule_packed_decode",
}
_SAVED = {}


def patch():
    """Points vLLM's Qwen3-Next / Qwen3.5 GDN layer (``vllm/model_executor/layers/mamba/gdn/
    qwen_gdn_linear_attn.py``) at gdn: the module-level names it calls for prefill (both the Triton/FLA and the
    FlashInfer backend), decode, packed decode and spec-decode verify are replaced by this module's functions.
    Run it in every process that runs the model (a ``vllm.general_plugins`` entry point does that); calling it
    again does nothing. Returns the patched module. ``unpatch()`` restores vLLM's functions."""
    import importlib

    mod = importlib.import_module(_LAYER_MODULE)
    missing = [name for name in _SWAP if not hasattr(mod, name)]
    if missing:
        raise RuntimeError(f"gdn.vllm.patch: {_LAYER_MODULE} has no {', '.join(missing)} (gdn.vllm follows the "
                           "layout of vLLM 0.33)")
    ours = globals()
    for name, own in _SWAP.items():
        cur = getattr(mod, name)
        if cur is not ours[own]:
            _SAVED[name] = cur
            setattr(mod, name, ours[own])
    return mod


def unpatch():
    """Restores the functions ``patch()`` replaced."""
    import sys

    mod = sys.modules.get(_LAYER_MODULE)
    if mod is not None:
        for name, orig in _SAVED.items():
            setattr(mod, name, orig)
    _SAVED.clear()
