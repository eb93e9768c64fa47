"""gdn.sglang: ``GDNKernel``, a GDN kernel with the interface of sglang's linear-attention kernels
(``LinearAttnKernelBase`` in sglang/srt/layers/attention/linear/kernels/kernel_backend.py; read at sglang 0.5.23:
``TritonGDNKernel`` in gdn_triton.py, ``FlashInferGDNKernel`` in gdn_flashinfer.py, called by
``GDNKernelDispatcher`` / ``GDNAttnBackend`` in gdn_backend.py), computed by gdn:

* ``packed_decode``: one decode step reading q / k / v out of ``mixed_qkv [B, 2*H*K + HV*V]``, raw gates, the
  layer's state pool updated in place at ``cache_indices`` (-1 = padding).
* ``decode``: the same from q / k / v ``[1, B, H, D]`` views.
* ``extend``: prefill with log ``g`` / ``beta`` from the pool, final states written back in place
  (``inplace_update``), prefix-cache checkpoints (``state_checkpoint_*``, returned as ``h``).
* ``target_verify``: spec-decode verify: the state after every draft token into
  ``intermediate_states_buffer``, the pool left as it is (sglang's ``disable_state_update``).

The pool is the layer's view of sglang's ``[layers, slots + 1, HV, V, K]`` buffer (k-last) and may have rows
further apart than one state (a page-major envelope): gdn takes the row stride as it is. Padding is -1 (gdn's
``pad="negative"``). q, k, v and ``mixed_qkv`` are read in place through views; q / k are L2-normalised in the
kernel (sglang always asks for it). Torch CUDA tensors: nothing is read back to the host, every call is
graph-capturable; torch CPU tensors run on gdn's CPU backend.

``patch()`` makes every GDN kernel dispatcher sglang builds use one ``GDNKernel`` (tree verify keeps sglang's
Triton kernel); run it in every process that builds the model.

What differs, and what raises:

* Output rows of padded requests (-1) are zero; sglang's Triton kernels compute them from a zero state
  (both are discarded by the engine).
* ``target_verify`` gathers the requests' initial states into a ``[B, HV, V, K]`` scratch (one read of B
  states): gdn's verify indexes the pool and the intermediate buffer with one index tensor, sglang with two
  (``cache_indices`` and the positional ``intermediate_state_indices``).
* ``target_verify`` needs sglang's default, positional ``intermediate_state_indices`` (buffer row n for request
  n; checked on CPU tensors, the caller's contract on CUDA), hence ``stable_rows`` raises.
* ``extend`` returns as ``h`` the checkpoints sglang asks for (``uses_state_checkpoints`` is True, as for
  FlashInfer's kernel), float32, not FLA's per-chunk states.
* ``NotImplementedError`` (naming the option) for: float32 activations, fp8 states, a
  16-bit intermediate buffer, an intermediate buffer with room for more steps than draft tokens (adaptive
  draft counts), tree verify (``retrieve_parent_token``), ``stable_rows``, ReplaySSM rings, ``track_state``,
  a checkpoint interval that is not a multiple of 64, one draft token, and any keyword sglang adds that this
  class does not know.
"""


import torch

import gdn as _gdn
from gdn import _adapt as _ad

__all__ = ["GDNKernel", "patch", "unpatch"]

_F32 = torch.float32
_I32 = torch.int32


def _name(fn):
    return f"gdn.sglang.GDNKernel.{fn}"


def _unsupported(fn, what):
    return _ad.unsupported(_name(fn), what)


def _dt(x):
    return str(x.dtype).replace("torch.", "")


def _bf16(fn, name, x):
    """q, k, v, outputs and raw gates: bfloat16 or float16."""
    _ad.need_act16(_name(fn), name, x)


def _state(fn, name, x):
    _ad.state_dtype(_name(fn), name, x)


def _gate(fn, name, x):
    """A float32 operand: bfloat16 / float16 widened (exact)."""
    return _ad.gate_f32(_name(fn), name, x)



def _param_f32(fn, name, x):
    """A_log / dt_bias: float32, contiguous, flat; a 16-bit parameter widened once and cached (_adapt.param_f32)."""
    return _ad.param_f32(_name(fn), name, x)


def _flat(x):
    return (x if x.is_contiguous() else x.contiguous()).view(-1)


_PACKED = _gdn._gdn.packed_decode  # the packed decode's one-step binding entry


def _widen_packed(name, x):
    return _param_f32("packed_decode", name, x)


def _idx(x):
    return x if x.is_contiguous() else x.contiguous()


def _idx32(x):
    if x.dtype is not _I32:
        x = x.to(_I32)
    return x if x.is_contiguous() else x.contiguous()


def _no_extra(fn, kwargs, ignored=()):
    """sglang passes every kernel a few keywords; the informational ones are ignored, None / False ones are the
    features' off state, anything else is a feature gdn does not implement."""
    for key, val in kwargs.items():
        if key in ignored or val is None or val is False:
            continue
        raise _unsupported(fn, f"keyword '{key}'")


class GDNKernel:
    """sglang's GDN kernel interface on gdn (module doc). Stateless: one instance serves every layer; it can
    stand in for ``TritonGDNKernel`` / ``FlashInferGDNKernel`` as the dispatcher's decode, extend and verify
    kernel."""

    supports_packed_decode = True
    supports_target_verify = True
    supports_strided_target_verify_qkv = True  # q / k / v views with any token stride
    supports_fused_chain_verify = False
    supports_track_state_snapshot = False
    uses_state_checkpoints = True  # extend returns the requested checkpoints as h (FlashInfer's contract)

    # ---- decode --------------------------------------------------------------------------------------------

    def packed_decode(self, mixed_qkv, a, b, *, A_log, dt_bias, scale, ssm_states, cache_indices, num_v_heads,
                      head_v_dim, **kwargs):
        """One decode step from the packed projection: mixed_qkv ``[B, 2*H*K + HV*V]`` bfloat16 or float16 (rows may be
        further apart than one row's width), a, b ``[B, HV]``, A_log / dt_bias ``[HV]``, the pool
        ``ssm_states [slots, HV, V, K]`` updated in place at ``cache_indices [B]`` (-1: padding). Returns the
        output ``[1, B, HV, V]`` (a view of a ``[B, 1, HV, V]`` tensor, as sglang's kernel returns it)."""
        fn = "packed_decode"
        _no_extra(fn, kwargs)
        try:
            out = mixed_qkv.new_empty(mixed_qkv.shape[0], 1, num_v_heads, head_v_dim)
        except Exception:  # (an input the checks below refuse)
            out = None
        # one binding call derives q / k / v / a / b from mixed_qkv, a, b, checks and launches; None: an input it
        # does not take as it is, for the general path below (which raises the errors or makes the copies)
        if out is not None and _PACKED(mixed_qkv, a, b, ssm_states, A_log, dt_bias, scale, out, cache_indices, True,
                                       "negative", _widen_packed, (num_v_heads, head_v_dim), False) is not None:
            return out.transpose(0, 1)
        _bf16(fn, "mixed_qkv", mixed_qkv)
        _bf16(fn, "a", a)
        _bf16(fn, "b", b)
        _state(fn, "ssm_states", ssm_states)
        Bn = mixed_qkv.shape[0]
        HV, V, K = ssm_states.shape[1:]
        if HV != num_v_heads or V != head_v_dim:
            raise ValueError(f"{_name(fn)}: ssm_states {tuple(ssm_states.shape)} does not match num_v_heads="
                             f"{num_v_heads}, head_v_dim={head_v_dim}")
        qk = mixed_qkv.shape[1] - HV * V
        if qk <= 0 or qk % 2 or (qk // 2) % K:
            raise ValueError(f"{_name(fn)}: invalid packed mixed_qkv last dim={mixed_qkv.shape[1]} for HV={HV}, "
                             f"V={V}, K={K}")
        H = qk // 2 // K
        if out is None or tuple(out.shape) != (Bn, 1, HV, V):
            out = mixed_qkv.new_empty(Bn, 1, HV, V)
        if Bn:
            hk = H * K
            _gdn.decode(
                mixed_qkv[:, :hk].view(Bn, 1, H, K), mixed_qkv[:, hk:2 * hk].view(Bn, 1, H, K),
                mixed_qkv[:, 2 * hk:2 * hk + HV * V].view(Bn, 1, HV, V), ssm_states,
                _param_f32(fn, "A_log", A_log), _flat(a).view(Bn, 1, HV), _param_f32(fn, "dt_bias", dt_bias),
                _flat(b).view(Bn, 1, HV), _scale(fn, scale), output=out, state_indices=_idx(cache_indices),
                use_qk_l2norm_in_kernel=True)
        return out.transpose(0, 1)

    def decode(self, q, k, v, a, b, *, A_log, dt_bias, ssm_states, cache_indices, query_start_loc, **kwargs):
        """One decode step: q, k ``[1, B, H, K]``, v ``[1, B, HV, V]`` (views of the projection), a, b
        ``[B, HV]``, the pool updated in place at ``cache_indices [B]`` (-1: padding). One token per request:
        ``query_start_loc`` is ``0..B`` and not read (as FlashInfer's kernel in sglang). Returns the output
        ``[1, B, HV, V]``."""
        fn = "decode"
        _no_extra(fn, kwargs)
        for name, x in (("q", q), ("k", k), ("v", v), ("a", a), ("b", b)):
            _bf16(fn, name, x)
        _state(fn, "ssm_states", ssm_states)
        Bn = q.shape[1]
        HV, V = v.shape[2], v.shape[3]
        if q.shape[0] != 1 or cache_indices.shape[0] < Bn:
            raise ValueError(f"{_name(fn)}: q {tuple(q.shape)} must be [1, B, H, K] (one token for each request) "
                             f"with a cache index for each ({cache_indices.shape[0]} given)")
        o = q.new_empty(1, Bn, HV, V)
        if Bn:
            _gdn.decode(q[0].unsqueeze(1), k[0].unsqueeze(1), v[0].unsqueeze(1), ssm_states,
                        _param_f32(fn, "A_log", A_log), _flat(a).view(Bn, 1, HV), _param_f32(fn, "dt_bias", dt_bias),
                        _flat(b).view(Bn, 1, HV), output=o[0].unsqueeze(1), state_indices=_idx(cache_indices[:Bn]),
                        use_qk_l2norm_in_kernel=True)
        return o

    # ---- extend (prefill) ----------------------------------------------------------------------------------

    def extend(self, q, k, v, g, beta, *, ssm_states, cache_indices, query_start_loc, inplace_update=True,
               state_checkpoint_cu_starts=None, num_state_checkpoints=0, state_checkpoint_every_n_tokens=0,
               output=None, track_state=None, track_chunk_idx=None, **kwargs):
        """Prefill of packed sequences: q, k ``[1, T, H, K]``, v ``[1, T, HV, V]`` (views allowed), g (log decay)
        and beta ``[1, T, HV]``, ``query_start_loc [N + 1]`` (int32), the pool ``ssm_states`` read at
        ``cache_indices [N]`` (-1: padding) and, with ``inplace_update``, updated there in place (False, sglang's
        multi-item scoring: the pool is left as it is). ``num_state_checkpoints > 0``: the state after every
        ``state_checkpoint_every_n_tokens`` tokens of sequence n goes to row ``state_checkpoint_cu_starts[n] + j``
        of a float32 ``[num_state_checkpoints, HV, V, K]`` tensor, returned as ``h [1, C, HV, V, K]``.
        ``output``: optional ``[1, T, HV, V]`` destination. Returns ``(output, None, h)``."""
        fn = "extend"
        _no_extra(fn, kwargs, ignored=("layer_id", "extend_prefix_lens"))
        if track_state is not None or track_chunk_idx is not None:
            raise _unsupported(fn, "track_state / track_chunk_idx (in-kernel track snapshots)")
        for name, x in (("q", q), ("k", k), ("v", v)):
            _bf16(fn, name, x)
        _state(fn, "ssm_states", ssm_states)
        L, K = q.shape[1], q.shape[3]
        HV, V = v.shape[2], v.shape[3]
        N = query_start_loc.shape[0] - 1
        if q.shape[0] != 1:
            raise ValueError(f"{_name(fn)}: q {tuple(q.shape)} must be [1, T, H, K] (packed sequences)")
        if cache_indices.shape[0] != N:
            raise ValueError(f"{_name(fn)}: cache_indices has {cache_indices.shape[0]} entries for {N} sequences")
        if output is not None:
            if tuple(output.shape) != (1, L, HV, V):
                raise ValueError(f"{_name(fn)}: output shape mismatch: expected {(1, L, HV, V)}, got "
                                 f"{tuple(output.shape)}")
            _bf16(fn, "output", output)
            o = output
        else:
            o = q.new_empty(1, L, HV, V)
        g = _flat(_gate(fn, "g", g))
        _ad.beta_dtype(_name(fn), "beta", beta)
        beta = _flat(beta)
        ck = {}
        h = None
        if num_state_checkpoints:
            every = int(state_checkpoint_every_n_tokens)
            if every <= 0 or every % 64:
                raise _unsupported(fn, f"state_checkpoint_every_n_tokens={every} (a positive multiple of 64)")
            ckpt = torch.empty(int(num_state_checkpoints), HV, V, K, dtype=_F32, device=q.device)
            ck = dict(checkpoint_every=every, checkpoint_cu_starts=_idx(state_checkpoint_cu_starts), checkpoints=ckpt)
            h = ckpt.unsqueeze(0)
        if not L or not N:
            return o, None, h
        args = (q[0], k[0], v[0])
        opts = dict(cu_seqlens=_idx(query_start_loc), output=o[0], g=g[: L * HV].view(L, HV),
                    beta=beta[: L * HV].view(L, HV), use_qk_l2norm_in_kernel=True, **ck)
        if inplace_update:
            _gdn.prefill(*args, ssm_states, state_indices=_idx(cache_indices), **opts)
        else:
            # the final states must not reach the pool: run on a copy of the requests' rows (padded requests
            # keep index -1, so nothing is read or written for them)
            scratch = ssm_states.index_select(0, cache_indices.long().clamp(min=0))
            rows = torch.arange(N, dtype=_I32, device=q.device)
            rows = torch.where(cache_indices >= 0, rows, torch.full_like(rows, -1))
            _gdn.prefill(*args, scratch, state_indices=rows, **opts)
        return o, None, h

    # ---- target verify (spec decode) -------------------------------------------------------------------------

    def target_verify(self, A_log, dt_bias, q, k, v, a, b, *, ssm_states, cache_indices, query_start_loc,
                      intermediate_states_buffer, intermediate_state_indices, cache_steps, retrieve_parent_token,
                      stable_rows=False, **kwargs):
        """Verify of B requests with T = q.shape[1] / B draft tokens each (a chain, topk = 1): q, k
        ``[1, B*T, H, K]``, v ``[1, B*T, HV, V]`` (views allowed), a, b ``[B*T, HV]``. Request n starts from pool
        row ``cache_indices[n]`` (-1: a zero state) and writes the state after draft token t to
        ``intermediate_states_buffer[intermediate_state_indices[n], t]`` (float32 ``[rows, T, HV, V, K]``); the
        pool is not modified. Returns the output ``[1, B*T, HV, V]``."""
        fn = "target_verify"
        _no_extra(fn, kwargs)
        if retrieve_parent_token is not None:
            raise _unsupported(fn, "retrieve_parent_token (tree verify, topk > 1)")
        if stable_rows:
            raise _unsupported(fn, "stable_rows=True (intermediate rows by request-pool index)")
        for name, x in (("q", q), ("k", k), ("v", v), ("a", a), ("b", b)):
            _bf16(fn, name, x)
        _state(fn, "ssm_states", ssm_states)
        ib = intermediate_states_buffer
        if ib is None:
            raise ValueError(f"{_name(fn)}: intermediate_states_buffer is required")
        if ib.dtype is not _F32:
            raise _unsupported(fn, f"intermediate_states_buffer of dtype {_dt(ib)} (float32 only)")
        Lt, H, K = q.shape[1], q.shape[2], q.shape[3]
        HV, V = v.shape[2], v.shape[3]
        Bn = query_start_loc.shape[0] - 1
        if Bn <= 0 or Lt % Bn:
            raise ValueError(f"{_name(fn)}: {Lt} tokens do not split evenly over {Bn} requests")
        T = Lt // Bn
        if T < 2:
            raise _unsupported(fn, "one draft token per request (verify needs at least 2)")
        if cache_steps is not None and int(cache_steps) != T:
            raise ValueError(f"{_name(fn)}: cache_steps={cache_steps} but the batch holds {T} tokens per request")
        if ib.dim() != 5 or ib.shape[1] != T or not ib.is_contiguous():
            raise _unsupported(fn, f"intermediate_states_buffer of shape {tuple(ib.shape)} for {T} draft tokens "
                                   "(a contiguous [rows, T, HV, V, K] buffer only)")
        sel = _idx32(intermediate_state_indices[:Bn])
        idx = cache_indices[:Bn]
        if q.device.type != "cuda" and not torch.equal(sel.cpu(), torch.arange(Bn, dtype=_I32)):
            raise _unsupported(fn, "intermediate_state_indices other than the positional rows 0..B-1")
        # gdn's verify reads pool row sel[n] and writes buffer row sel[n] (pool and buffer with the same rows): the
        # pool here is a positional copy of the requests' rows (a padded request, -1, starts from zeros) and the
        # buffer its first B rows, which sglang's positional table (sel[n] = n) addresses
        init = ssm_states.index_select(0, idx.long().clamp(min=0))
        has_init = (idx >= 0).to(_I32)
        o = q.new_empty(1, Lt, HV, V)
        _gdn.mtp(q[0].view(Bn, T, H, K), k[0].view(Bn, T, H, K), v[0].view(Bn, T, HV, V), init, sel,
                 _param_f32(fn, "A_log", A_log), _flat(a).view(Bn, T, HV), _param_f32(fn, "dt_bias", dt_bias),
                 _flat(b).view(Bn, T, HV), intermediate_states_buffer=ib[:Bn], output=o[0].view(Bn, T, HV, V),
                 has_initial_state=has_init, use_qk_l2norm_in_kernel=True)
        return o


def _scale(fn, scale):
    if scale is None:
        return None
    scale = float(scale)
    if scale == 0.0:
        raise _unsupported(fn, "scale=0 (gdn reads 0 as the default 1/sqrt(K))")
    return scale


# ---- swapping sglang's GDN backend onto gdn ----------------------------------------------------------------

_BACKEND_MODULE = "sglang.srt.layers.attention.linear.gdn_backend"
_SAVED = {}


def patch():
    """Makes every ``GDNKernelDispatcher`` that sglang builds from now on (one per GDN attention backend) use
    one ``GDNKernel`` for decode, packed decode, extend and chain verify; tree verify (EAGLE topk > 1) keeps
    sglang's Triton kernel. Run it in every process that builds the model, before the backend is created;
    calling it again does nothing. Returns the patched module. ``unpatch()`` restores sglang's constructor."""
    import importlib

    mod = importlib.import_module(_BACKEND_MODULE)
    cls = getattr(mod, "GDNKernelDispatcher", None)
    if cls is None:
        raise RuntimeError(f"gdn.sglang.patch: {_BACKEND_MODULE} has no GDNKernelDispatcher (gdn.sglang follows "
                           "the layout of sglang 0.5.23)")
    if "init" in _SAVED:
        return mod
    orig = cls.__init__
    kernel = GDNKernel()

    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        self.decode_kernel = self.extend_kernel = self.verify_kernel = kernel
        self.verify_kernel_is_flashinfer = False
        self.supports_packed_decode = True

    _SAVED["init"] = (cls, orig)
    cls.__init__ = __init__
    return mod


def unpatch():
    """Restores the constructor ``patch()`` replaced (dispatchers built meanwhile keep gdn)."""
    saved = _SAVED.pop("init", None)
    if saved is not None:
        saved[0].__init__ = saved[1]
