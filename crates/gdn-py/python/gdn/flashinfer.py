"""FlashInfer's gated-delta-rule API on gdn: ``chunk_gated_delta_rule`` (``flashinfer.gdn_prefill``),
``gated_delta_rule_decode_pretranspose``, ``gated_delta_rule_decode`` and ``gated_delta_rule_mtp``
(``flashinfer.gdn_decode``) with the signatures, defaults and results of FlashInfer 0.7.2.

Swap: ``from gdn.flashinfer import chunk_gated_delta_rule, gated_delta_rule_decode_pretranspose,
gated_delta_rule_mtp`` in place of the ``flashinfer`` imports. Semantics are FlashInfer's:

* prefill: packed ``q, k [T, H, K]``, ``v [T, HV, V]`` with int32 or int64 ``cu_seqlens``; ``g`` is the
  *linear* decay ``alpha = exp(log decay)`` and ``beta`` the post-sigmoid gate, both float32 ``[T, HV]``
  (ones when None); states are k-last ``[N, HV, V, K]``; ``scale`` None or 0 means ``1/sqrt(K)``;
  ``use_qk_l2norm_in_kernel`` rounds the normalised rows to the input dtype; ``output`` / ``output_state``
  destinations; ``state_indices`` reads and writes a state pool in place; prefix-cache checkpoints
  (``state_checkpoints``, ``checkpoint_cu_starts``, ``checkpoint_every_n_tokens``). Returns ``output``, or
  ``(output, final_state)`` with ``output_final_state=True``.
* decode: raw gates ``A_log``, ``a``, ``dt_bias``, ``b`` computed in the kernel, q/k L2 norm on by default
  (``use_qk_l2norm=True``), the state updated in place (k-last for ``_pretranspose``, k-major ``[B, HV, K, V]``
  for ``gated_delta_rule_decode``), or a pool (``initial_state`` + ``initial_state_indices``, -1 = padding).
  T > 1 is multi-token verify; ``intermediate_states_buffer`` ``[>= B, T, HV, V, K]`` receives the state after
  each token of batch entry b in row b; ``disable_state_update`` leaves the pool as it is.

gdn computes these with bfloat16 or float16 activations and float32 or bfloat16 states, HV a multiple of H (value head h
reads q/k head ``h // (HV // H)``), K = V. ``NotImplementedError`` names what it does not compute: float32
activations, float16 / fp8 states (FlashInfer's kernels keep float32 or bfloat16 states), GQA (more q than k
heads), ``output_state_indices`` other than ``initial_state_indices``, ``ssm_state_indices``, ReplaySSM
caching, uGPU (5-D) pools, an intermediate buffer with more steps than T or in bfloat16, and for prefill with
``state_indices`` an ``output_state`` other than the pool itself (gdn updates the pool in place). ``backend``,
``use_cp`` and ``_cp_chunk_len`` choose among FlashInfer's implementations: their values are checked as FlashInfer
does and gdn picks its own plan.

Where gdn's result differs from FlashInfer's only where FlashInfer leaves it undefined or to the caller:
padding entries (index < 0) read and write no state and get zero output rows (FlashInfer's bfloat16-state
kernels redirect them to pool slot 0, whose output is undefined; its MTP kernel leaves the caller's output rows).

Host work beyond one gdn call: a bfloat16 ``dt_bias`` is widened to float32 (exact, ``[HV]``); int64 MTP indices
are narrowed to int32; ``g`` / ``beta`` None allocate ones as FlashInfer does; a prefill whose ``output_state``
dtype differs from the initial state's is computed in float32 and rounded into it; an MTP call with an
intermediate buffer on a pool gathers the B rows it reads (the buffer is indexed by batch entry, gdn's by pool
row), and with ``disable_state_update=False`` runs a second pass to update the pool.
"""

import warnings

import torch

from . import _adapt as A
from . import decode as _decode
from . import mtp as _mtp
from . import prefill as _prefill

__all__ = [
    "chunk_gated_delta_rule", "gated_delta_rule_decode_pretranspose", "gated_delta_rule_decode",
    "gated_delta_rule_mtp",
]

_PREFILL = "gdn.flashinfer.chunk_gated_delta_rule"
_DEC_PT = "gdn.flashinfer.gated_delta_rule_decode_pretranspose"
_DEC_NT = "gdn.flashinfer.gated_delta_rule_decode"
_MTP = "gdn.flashinfer.gated_delta_rule_mtp"


def _heads(fn, q, k, v, ndim):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != ndim:
            raise ValueError(f"{fn}: argument '{name}': expected a {ndim}-D tensor")
    H, Hk, HV = q.shape[-2], k.shape[-2], v.shape[-2]
    if H != Hk:
        raise A.unsupported(fn, f"GQA / different q and k head counts (num_q_heads={H}, num_k_heads={Hk})")
    if HV % H:
        raise ValueError(f"{fn}: num_v_heads ({HV}) must be a multiple of num_q_heads ({H})")
    for name, x in (("q", q), ("k", k), ("v", v)):
        A.need_act16(fn, name, x)
    if q.shape[-1] != v.shape[-1]:
        raise A.unsupported(fn, f"K != V (K={q.shape[-1]}, V={v.shape[-1]}; gdn's state is square)")


def _out(fn, output):
    if output is not None:
        A.need_act16(fn, "output", output)
    return output


def _dt_bias(fn, dt_bias):
    return dt_bias if dt_bias.dtype is torch.float32 else A.gate_f32(fn, "dt_bias", dt_bias)


def _raw_gates(fn, a, b, scale):
    A.need_act16(fn, "a", a)
    A.need_act16(fn, "b", b)
    if scale is not None and float(scale) == 0.0:
        # the decode / MTP kernels multiply q by the scale as given; gdn reads 0 as 1/sqrt(K)
        raise A.unsupported(fn, "scale=0")


# ---------------------------------------------------------------------------------------------------------------
# prefill

def chunk_gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None, output_final_state=False,
                           cu_seqlens=None, use_qk_l2norm_in_kernel=False, output=None, output_state=None,
                           state_checkpoints=None, checkpoint_cu_starts=None, checkpoint_every_n_tokens=0,
                           use_cp="auto", state_indices=None, _cp_chunk_len=None, backend="auto", max_seqlen=None):
    """FlashInfer 0.7.2's ``chunk_gated_delta_rule`` on gdn (module doc): ``g`` is the linear decay alpha."""
    fn = _PREFILL
    if backend not in ("auto", "flashinfer", "cake_gdn", "cudnn"):
        raise ValueError(f"unsupported GDN backend: {backend!r}")
    if use_cp not in ("auto", True, False):
        raise ValueError(f'use_cp must be "auto", True, or False, got {use_cp!r}')
    if checkpoint_every_n_tokens < 0:
        raise ValueError(f"checkpoint_every_n_tokens must be non-negative, got {checkpoint_every_n_tokens}")
    if checkpoint_every_n_tokens > 0:
        if checkpoint_every_n_tokens % 64 != 0:
            raise ValueError("checkpoint_every_n_tokens must be a multiple of the chunk size (64), "
                             f"got {checkpoint_every_n_tokens}")
        if state_checkpoints is None or checkpoint_cu_starts is None:
            raise ValueError("state_checkpoints and checkpoint_cu_starts must both be provided "
                             "when checkpoint_every_n_tokens > 0")
        A.state_dtype(fn, "state_checkpoints", state_checkpoints, fp16=False)
    elif state_checkpoints is not None or checkpoint_cu_starts is not None:
        raise ValueError("state_checkpoints and checkpoint_cu_starts must be None when checkpoint_every_n_tokens == 0")
    if cu_seqlens is None:
        raise ValueError(f"{fn}: cu_seqlens is required for varlen mode")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"cu_seqlens must be int32 or int64, got {cu_seqlens.dtype}")
    _heads(fn, q, k, v, 3)
    N = cu_seqlens.shape[0] - 1
    T, HV = q.shape[0], v.shape[1]
    if N <= 0:
        raise ValueError("cu_seqlens must contain at least two entries")
    if max_seqlen is not None:
        if type(max_seqlen) is not int or max_seqlen < 0:
            raise ValueError("max_seqlen must be a nonnegative integer")
        if T and max_seqlen == 0:
            raise ValueError("max_seqlen must be positive when q is nonempty")
        if max_seqlen < (T + N - 1) // N:
            raise ValueError("max_seqlen cannot be smaller than ceil(total_seq_len / num_seqs)")
        if max_seqlen > T:
            raise ValueError("max_seqlen cannot exceed total_seq_len")
    _out(fn, output)
    if scale is not None and float(scale) == 0.0:
        scale = None  # FlashInfer's rule too: 0 means 1/sqrt(K)
    dev = q.device
    alpha = A.dense(A.gate_f32(fn, "g", g)) if g is not None else torch.ones((T, HV), dtype=torch.float32, device=dev)
    bt = A.dense(A.beta_dtype(fn, "beta", beta)) if beta is not None else \
        torch.ones((T, HV), dtype=torch.float32, device=dev)
    for name, x in (("initial_state", initial_state), ("output_state", output_state)):
        if x is not None:
            A.state_dtype(fn, name, x, fp16=False)
    common = dict(cu_seqlens=cu_seqlens, scale=scale, output=output, max_seqlen=max_seqlen, alpha=alpha, beta=bt,
                  use_qk_l2norm_in_kernel=bool(use_qk_l2norm_in_kernel),
                  checkpoint_every=int(checkpoint_every_n_tokens), checkpoint_cu_starts=checkpoint_cu_starts,
                  checkpoints=state_checkpoints)

    if state_indices is not None:
        if state_indices.shape != (N,):
            raise ValueError(f"state_indices must have shape {(N,)}, got {tuple(state_indices.shape)}")
        if output_state is None:
            if output_final_state:
                raise ValueError(
                    "state_indices requires an explicit output_state pool sized like the state pool "
                    "([N_pool, H, V, K]); refusing to auto-allocate a compact [num_seqs, ...] tensor that would "
                    "be indexed out of bounds.")
            raise A.unsupported(fn, "state_indices without output_state (gdn writes the final states into the "
                                "pool in place: pass output_state=initial_state)")
        if initial_state is not None and output_state is not initial_state:
            raise A.unsupported(fn, "state_indices with an output_state pool other than initial_state (gdn "
                                "reads and writes one pool in place)")
        his = A.zeros_i32(N, dev) if initial_state is None else None  # start every sequence from zeros
        o, pool = _prefill(q, k, v, output_state, state_indices=state_indices, has_initial_state=his, **common)
        return (o, pool) if output_final_state else o

    state = initial_state
    dest = output_state
    if state is not None:
        state = A.dense(state)
    st_dt = state.dtype if state is not None else torch.float32
    round_into = None
    if dest is not None and dest.dtype is not st_dt:
        # FlashInfer reads the state, computes in float32 and stores in output_state's dtype: a bfloat16 state
        # is widened (exact); a bfloat16 destination receives the float32 result rounded
        if state is not None and state.dtype is torch.bfloat16:
            state = state.float()
        if dest.dtype is not torch.float32:
            round_into, dest = dest, None
    elif dest is None and state is not None and state.dtype is torch.bfloat16:
        state = state.float()  # FlashInfer allocates a float32 output_state
    o, s = _prefill(q, k, v, state, new_state=dest, **common)
    if round_into is not None:
        round_into.copy_(s)
        s = round_into
    return (o, s) if output_final_state else o


# ---------------------------------------------------------------------------------------------------------------
# decode and MTP

def _mtp_run(fn, q, k, v, pool, idx, A_log, a, dt_bias, b, scale, output, ibuf, update, qk_norm, batch_rows):
    """gdn.mtp with FlashInfer's intermediate buffer, which is indexed by batch entry (gdn's by pool row).
    batch_rows: the pool's row b is batch entry b (a per-batch state), so the buffer's rows match as they are."""
    B, T = q.shape[0], q.shape[1]
    if idx.dtype is torch.int64:
        idx = idx.to(torch.int32)
    kw = dict(use_qk_l2norm_in_kernel=qk_norm)
    if ibuf is None:
        return _mtp(q, k, v, pool, idx, A_log, a, dt_bias, b, scale, output=output, update_pool=update, **kw)[0]
    if ibuf.dim() != 5 or ibuf.shape[0] < B or ibuf.shape[1] < T:
        raise ValueError(f"{fn}: intermediate_states_buffer must be [>= B, >= T, HV, V, K] (B={B}, T={T}), "
                         f"got {list(ibuf.shape)}")
    if ibuf.dtype is not torch.float32:
        raise A.unsupported(fn, f"an intermediate_states_buffer of dtype {str(ibuf.dtype).replace('torch.', '')} "
                            "(float32 only)")
    if ibuf.shape[1] != T:
        raise A.unsupported(fn, f"an intermediate_states_buffer with {ibuf.shape[1]} steps for T={T} (gdn writes "
                            "a [rows, T, HV, V, K] buffer)")
    if not ibuf.is_contiguous():
        raise ValueError(f"{fn}: intermediate_states_buffer must be contiguous")
    buf = ibuf[:B]
    if batch_rows:
        return _mtp(q, k, v, pool, idx, A_log, a, dt_bias, b, scale, buf, output=output, update_pool=update,
                    **kw)[0]
    # the B rows this call reads, in batch order; padded entries (idx < 0) stay padding
    rows = pool.index_select(0, idx.clamp(min=0).long())
    local = torch.where(idx >= 0, A.iota(B, q.device), torch.full_like(idx, -1))
    out = _mtp(q, k, v, rows, local, A_log, a, dt_bias, b, scale, buf, output=output, update_pool=False, **kw)[0]
    if update:
        # the final states go to the pool rows in place (gdn skips padding); same inputs, same outputs
        _mtp(q, k, v, pool, idx, A_log, a, dt_bias, b, scale, output=out, update_pool=True, **kw)
    return out


def gated_delta_rule_decode_pretranspose(q, k, v, state, A_log, a, dt_bias, b, scale=None, output=None,
                                         use_qk_l2norm=True, initial_state=None, initial_state_indices=None,
                                         output_state_indices=None, intermediate_states_buffer=None,
                                         disable_state_update=False, backend="auto"):
    """FlashInfer 0.7.2's ``gated_delta_rule_decode_pretranspose`` on gdn: k-last state ``[B, HV, V, K]`` updated in
    place, or a pool ``initial_state [pool, HV, V, K]`` with ``initial_state_indices [B]`` (-1 = padding).
    T = 1 is one decode step; T > 1 verifies T tokens (``intermediate_states_buffer``, ``disable_state_update``).
    Returns ``(output [B, T, HV, V], state or initial_state)``."""
    fn = _DEC_PT
    _heads(fn, q, k, v, 4)
    B, T = q.shape[0], q.shape[1]
    if T == 1 and intermediate_states_buffer is not None:
        raise ValueError("intermediate_states_buffer is supported only for T > 1")
    if T == 1 and disable_state_update:
        raise ValueError("disable_state_update is supported only for T > 1")
    if backend not in ("auto", "flashinfer", "cake_gdn", "rubin"):
        raise ValueError(f"unsupported GDN backend: {backend!r}")
    use_pool = initial_state is not None
    if use_pool != (initial_state_indices is not None):
        raise ValueError("initial_state and initial_state_indices must be provided together")
    if output_state_indices is not None:
        if not use_pool:
            raise ValueError("output_state_indices can only be used with initial_state (pool mode)")
        if output_state_indices is not initial_state_indices:
            raise A.unsupported(fn, "output_state_indices other than initial_state_indices (gdn writes each state "
                                "back to the row it read)")
    _raw_gates(fn, a, b, scale)
    _out(fn, output)
    dt_bias = _dt_bias(fn, dt_bias)
    qk = bool(use_qk_l2norm)
    if use_pool:
        if initial_state.dim() == 5:
            raise A.unsupported(fn, "a uGPU-localized 5-D initial_state pool")
        A.state_dtype(fn, "initial_state", initial_state, fp16=False)
        if T == 1:
            out, _ = _decode(q, k, v, initial_state, A_log, a, dt_bias, b, scale, output=output,
                             state_indices=initial_state_indices, use_qk_l2norm_in_kernel=qk)
        else:
            out = _mtp_run(fn, q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale, output,
                           intermediate_states_buffer, not disable_state_update, qk, batch_rows=False)
        return out, initial_state
    if state is None:
        raise ValueError("Either state or initial_state must be provided")
    A.state_dtype(fn, "state", state, fp16=False)
    work = A.dense(state)  # FlashInfer too works on a contiguous copy of a strided state and copies it back
    if T == 1:
        out, _ = _decode(q, k, v, work, A_log, a, dt_bias, b, scale, output=output, new_state=work,
                         use_qk_l2norm_in_kernel=qk)
    else:
        out = _mtp_run(fn, q, k, v, work, A.iota(B, q.device), A_log, a, dt_bias, b, scale, output,
                       intermediate_states_buffer, not disable_state_update, qk, batch_rows=True)
    if work is not state:
        state.copy_(work)
    return out, state


def gated_delta_rule_decode(q, k, v, state, A_log, a, dt_bias, b, scale=None, output=None, use_qk_l2norm=True,
                            backend="auto"):
    """FlashInfer 0.7.2's ``gated_delta_rule_decode`` (k-major state ``[B, HV, K, V]``, float32, updated in place) on
    gdn. Returns ``(output [B, 1, HV, V], state)``."""
    fn = _DEC_NT
    _heads(fn, q, k, v, 4)
    if q.shape[1] != 1:
        raise ValueError(f"Decode only supports T=1, got T={q.shape[1]}")
    if backend not in ("auto", "flashinfer", "cake_gdn"):
        raise ValueError(f"unsupported GDN backend: {backend!r}")
    _raw_gates(fn, a, b, scale)
    _out(fn, output)
    A.state_dtype(fn, "state", state, fp16=False)
    work = A.dense(state)
    out, _ = _decode(q, k, v, work, A_log, a, _dt_bias(fn, dt_bias), b, scale, output=output, new_state=work,
                     use_qk_l2norm_in_kernel=bool(use_qk_l2norm), state_layout="k-first")
    if work is not state:
        state.copy_(work)
    return out, state


def gated_delta_rule_mtp(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale=None,
                         output=None, intermediate_states_buffer=None, ssm_state_indices=None,
                         disable_state_update=None, use_qk_l2norm=True, output_state_indices=None,
                         cache_replayssm=False, replayssm_rawv=None, replayssm_rawk=None, replayssm_g=None,
                         replayssm_beta=None):
    """FlashInfer 0.7.2's ``gated_delta_rule_mtp`` on gdn: T tokens per request from the k-last pool
    ``initial_state [pool, HV, V, K]`` at ``initial_state_indices [B]`` (negative = padding);
    ``disable_state_update`` (None warns and means True, as in FlashInfer 0.7.2) leaves the pool as it is;
    ``intermediate_states_buffer [>= B, T, HV, V, K]`` float32 receives batch entry b's state after each token
    in row b. Returns ``(output [B, T, HV, V], initial_state)``."""
    fn = _MTP
    if disable_state_update is None:
        warnings.warn("gated_delta_rule_mtp(): the 'disable_state_update' parameter currently defaults to True, "
                      "but this default will change to False in FlashInfer 0.8.0. Please pass "
                      "disable_state_update=True or disable_state_update=False explicitly to suppress this warning.",
                      FutureWarning, stacklevel=2)
        disable_state_update = True
    if ssm_state_indices is not None:
        raise A.unsupported(fn, "ssm_state_indices (per-token pool scatter)")
    if output_state_indices is not None and output_state_indices is not initial_state_indices:
        raise A.unsupported(fn, "output_state_indices other than initial_state_indices (gdn writes each state "
                            "back to the row it read)")
    if cache_replayssm or any(x is not None for x in (replayssm_rawv, replayssm_rawk, replayssm_g, replayssm_beta)):
        raise A.unsupported(fn, "ReplaySSM caching (cache_replayssm / replayssm_*)")
    _heads(fn, q, k, v, 4)
    _raw_gates(fn, a, b, scale)
    _out(fn, output)
    A.state_dtype(fn, "initial_state", initial_state, fp16=False)
    if initial_state_indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"initial_state_indices must be int32 or int64, got {initial_state_indices.dtype}")
    out = _mtp_run(fn, q, k, v, initial_state, initial_state_indices, A_log, a, _dt_bias(fn, dt_bias), b, scale,
                   output, intermediate_states_buffer, not disable_state_update, bool(use_qk_l2norm),
                   batch_rows=False)
    return out, initial_state
