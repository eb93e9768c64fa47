"""FLA's gated-delta-rule API on gdn: ``chunk_gated_delta_rule`` and ``fused_recurrent_gated_delta_rule`` with the
signatures, defaults and results of flash-linear-attention 0.6 (``fla.ops.gated_delta_rule``), and an opt-in
FLA backend (``register_backend``) so that FLA's own ``chunk_gated_delta_rule`` dispatches to gdn.

Swap: ``from gdn.fla import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule`` in place of
``from fla.ops.gated_delta_rule import ...``. Semantics are FLA's:

* batch-first ``q, k [B, T, H, K]``, ``v [B, T, HV, V]`` (HV a multiple of H, value head h reads q/k head
  ``h // (HV // H)``), or packed varlen with ``B = 1`` and ``cu_seqlens [N + 1]`` (int64 or int32);
* ``g [B, T, HV]`` the log decay, or with ``use_gate_in_kernel=True`` the raw input of
  ``-exp(A_log) * softplus(g + dt_bias)``; ``beta [B, T, HV]`` after the sigmoid, or its logits with
  ``use_beta_sigmoid_in_kernel=True``;
* ``initial_state`` / final state ``[N, HV, K, V]`` (K-first), or ``[N, HV, V, K]`` with ``state_v_first=True``
  (``transpose_state_layout``, its deprecated alias, warns); the final state is float32 and returned only with
  ``output_final_state=True`` (else None); a zero-length sequence keeps its initial state;
* ``scale`` None means ``K ** -0.5``; the output is ``[B, T, HV, V]`` in the activations' dtype.

gdn computes it with bfloat16 or float16 activations and float32, bfloat16 or float16 states, K = V (128 on
CUDA; 64 or 128 on the CPU). What it does not compute raises ``NotImplementedError`` naming the option, never a
different result: ``allow_neg_eigval``, ``gk`` / ``gv``, per-channel ``beta [B, T, HV, V]``, ``cp_context``,
``K != V``, float32 activations, ``scale=0`` (FLA multiplies by zero; gdn reads 0 as the
default), and backward: with autograd recording, the outputs join the graph and their backward raises.

Where the result still matches FLA exactly in meaning but the host does work: a bfloat16 or float16 initial state
is widened to a float32 copy (FLA reads it in float32 and returns a float32 state); precomputed-gate calls whose
gates gdn cannot take natively (``use_gate_in_kernel`` with float32 inputs, ``use_beta_sigmoid_in_kernel`` with
log ``g``) compute the gate in float32 with torch first; a varlen call with an initial state and a final state
whose lengths are not known on the host (``cu_seqlens_cpu`` not given) copies the initial states into the final
state and runs gdn's pool mode, so that zero-length sequences keep their initial state; batch-first calls with
T > 1 use a cached int32 ``cu_seqlens``. q/k L2 norm follows FLA's chunk path (normalised rows rounded to
the activations' dtype before use); FLA's recurrent kernel keeps them in float32, a rounding-level difference.
"""

import warnings

import torch
import torch.nn.functional as F

from . import _adapt as A
from . import cuda_unavailable_reason
from . import decode as _decode
from . import prefill as _prefill

__all__ = [
    "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "chunk_gdn", "fused_recurrent_gdn",
    "register_backend", "unregister_backend",
]

_CHUNK = "gdn.fla.chunk_gated_delta_rule"
_RECUR = "gdn.fla.fused_recurrent_gated_delta_rule"


def _heads(fn, q, k, v):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"{fn}: argument '{name}': expected a 4-D tensor [B, T, heads, dim]")
    qs, ks, vs = q.shape, k.shape, v.shape
    if qs[2] != ks[2]:
        raise ValueError(
            f"q and k must have the same number of heads, but got q.shape[2]={qs[2]} and k.shape[2]={ks[2]}")
    H, HV = qs[2], vs[2]
    if HV % H != 0:
        raise ValueError(
            f"For GVA, num_v_heads (HV={HV}) must be evenly divisible by num_heads (H={H}), "
            f"but got HV % H = {HV % H}")
    if qs != ks or vs[0] != qs[0] or vs[1] != qs[1]:
        raise ValueError(f"{fn}: q, k [B, T, H, K] and v [B, T, HV, V] disagree: {tuple(qs)}, {tuple(ks)}, "
                         f"{tuple(vs)}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        A.need_act16(fn, name, x)
    if qs[3] != vs[3]:
        raise A.unsupported(fn, f"K != V (K={qs[3]}, V={vs[3]}; gdn's state is square)")


def _gate_shape(fn, name, x, q, v):
    want = (q.shape[0], q.shape[1], v.shape[2])
    if x.dim() == 4 and tuple(x.shape) == want + (v.shape[3],):
        raise A.unsupported(fn, f"per-channel '{name}' of shape [B, T, HV, V]")
    if tuple(x.shape) != want:
        raise ValueError(f"{fn}: argument '{name}': expected shape {list(want)} ([B, T, HV]), got {list(x.shape)}")
    _float_dtype(fn, name, x)


def _float_dtype(fn, name, x):
    if x.dtype is not torch.float32 and x.dtype is not torch.bfloat16 and x.dtype is not torch.float16:
        raise NotImplementedError(f"{fn}: argument '{name}': dtype {str(x.dtype).replace('torch.', '')} is not "
                                  "supported by gdn (float32, bfloat16 or float16)")


def _plan(fn, q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
          use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first,
          cu_seqlens):
    """Validates one call: FLA's own ValueErrors for calls FLA refuses, NotImplementedError for what gdn does
    not compute. Runs nothing."""
    _heads(fn, q, k, v)
    B, T, H, K = q.shape
    HV = v.shape[2]
    if cu_seqlens is not None:
        if q.shape[0] != 1:
            raise ValueError(
                f"The batch size is expected to be 1 rather than {q.shape[0]} when using `cu_seqlens`."
                f"Please flatten variable-length inputs before processing.")
        if cu_seqlens.dim() != 1 or cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{fn}: argument 'cu_seqlens': expected a 1-D int64 or int32 tensor")
        N = cu_seqlens.shape[0] - 1
    else:
        N = B
    if initial_state is not None:
        if initial_state.shape[0] != N and cu_seqlens is not None:
            raise ValueError(
                f"The number of initial states is expected to be equal to the number of input sequences, "
                f"i.e., {N} rather than {initial_state.shape[0]}.")
        if tuple(initial_state.shape) != (N, HV, K, K):
            lay = "[N, HV, V, K]" if state_v_first else "[N, HV, K, V]"
            raise ValueError(f"{fn}: argument 'initial_state': expected shape {list((N, HV, K, K))} ({lay}), "
                             f"got {list(initial_state.shape)}")
        A.state_dtype(fn, "initial_state", initial_state)
    if allow_neg_eigval:
        if not use_beta_sigmoid_in_kernel:
            raise ValueError("`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`.")
        raise A.unsupported(fn, "allow_neg_eigval=True (beta in [0, 2))")
    if use_gate_in_kernel:
        if A_log is None:
            raise ValueError("`A_log` must be provided when `use_gate_in_kernel=True`.")
        if g is None:
            raise ValueError("`g` (raw pre-activation) must be provided when `use_gate_in_kernel=True`.")
        for name, x in (("A_log", A_log), ("dt_bias", dt_bias)):
            if x is None:
                continue
            if x.numel() != HV:
                raise ValueError(f"{fn}: argument '{name}': expected {HV} elements ([HV]), got {x.numel()}")
            _float_dtype(fn, name, x)
    if g is not None:
        _gate_shape(fn, "g", g, q, v)
    if beta is not None:
        _gate_shape(fn, "beta", beta, q, v)
    if scale is not None and float(scale) == 0.0:
        raise A.unsupported(fn, "scale=0 (FLA multiplies q by 0; gdn reads a zero scale as K ** -0.5)")


def _forward(fn, q, k, v, g, beta, scale, h0, output_final_state, qk_norm, raw_gate, A_log, dt_bias,
             beta_sigmoid, v_first, cu_seqlens, cu_seqlens_cpu, max_seqlen=None):
    B, T, H, K = q.shape
    HV = v.shape[2]
    dev = q.device
    layout = "k-last" if v_first else "k-first"
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1

    # gates: gdn's raw mode when it matches (raw g and beta logits in q's dtype), else precomputed float32 log decay
    A_l = a = dtb = b = gl = bt = None
    if raw_gate and beta_sigmoid and beta is not None and g.dtype is q.dtype and beta.dtype is q.dtype:
        A_l = A.dense(A.gate_f32(fn, "A_log", A_log).reshape(HV))
        dtb = A.dense(A.gate_f32(fn, "dt_bias", dt_bias).reshape(HV)) if dt_bias is not None else \
            A.zeros_f32((HV,), dev)
        a, b = A.dense(g), A.dense(beta)
    else:
        if g is None:
            gl = torch.zeros((B, T, HV), dtype=torch.float32, device=dev)
        elif raw_gate:
            x = g.float() if dt_bias is None else g.float() + dt_bias.float().reshape(HV)
            gl = -torch.exp(A_log.float().reshape(HV)) * F.softplus(x)
        else:
            gl = A.dense(A.gate_f32(fn, "g", g))
        if beta is None:  # FLA's recurrent default: ones (logits of ones with use_beta_sigmoid_in_kernel)
            bt = torch.ones((B, T, HV), dtype=torch.float32, device=dev)
            if beta_sigmoid:
                bt = torch.sigmoid(bt)
        elif beta_sigmoid:
            bt = torch.sigmoid(beta.float())
        else:
            bt = A.dense(A.beta_dtype(fn, "beta", beta))

    # state: float32 math from a bfloat16 / float16 state (FLA returns a float32 final state)
    state = None
    if h0 is not None:
        state = h0.to(torch.float32, memory_format=torch.contiguous_format) if h0.dtype is not torch.float32 \
            else A.dense(h0)
    pool = None
    if cu_seqlens is not None and state is not None and output_final_state:
        lens = A.host_lengths(cu_seqlens, cu_seqlens_cpu)
        if lens is None or bool((lens == 0).any()):
            # FLA keeps a zero-length sequence's initial state; gdn's pool mode leaves its row as it is
            if state is h0:
                state = h0.clone(memory_format=torch.contiguous_format)
            pool = A.iota(N, dev)

    if cu_seqlens is None and T == 1:
        if gl is not None:
            o, s = _decode(A.rows(q), A.rows(k), A.rows(v), state, scale=scale, g=gl, beta=bt,
                           use_qk_l2norm_in_kernel=qk_norm, state_layout=layout)
        else:
            o, s = _decode(A.rows(q), A.rows(k), A.rows(v), state, A_l, a, dtb, b, scale,
                           use_qk_l2norm_in_kernel=qk_norm, state_layout=layout)
        return o, (s if output_final_state else None)

    if cu_seqlens is None:
        cu, max_len = A.seq_offsets(B, T, dev), T
    else:
        cu, max_len = cu_seqlens, max_seqlen
        lens = A.host_lengths(cu_seqlens, cu_seqlens_cpu) if max_len is None else None
        if lens is not None and lens.numel():
            max_len = int(lens.max())
    tok = B * T
    qf, kf, vf = A.tokens(q), A.tokens(k), A.tokens(v)
    if gl is not None:
        gates = dict(g=gl.reshape(tok, HV), beta=bt.reshape(tok, HV))
        raw = (None, None, None, None)
    else:
        gates = {}
        raw = (A_l, a.reshape(tok, HV), dtb, b.reshape(tok, HV))
    o, s = _prefill(qf, kf, vf, state, *raw, cu_seqlens=cu, scale=scale, max_seqlen=max_len,
                    use_qk_l2norm_in_kernel=qk_norm, state_layout=layout, state_indices=pool, **gates)
    return o.view(B, T, HV, v.shape[3]), (s if output_final_state else None)


def _run(fn, q, k, v, g, beta, scale, initial_state, output_final_state, qk_norm, raw_gate, A_log, dt_bias,
         beta_sigmoid, v_first, cu_seqlens, cu_seqlens_cpu, max_seqlen=None):
    """One validated call; with autograd recording, the outputs join the graph with a backward that raises.
    max_seqlen: the longest sequence's length when the caller knows it on the host (plan choice only)."""
    args = (fn, q, k, v, g, beta, scale, initial_state, output_final_state, qk_norm, raw_gate, A_log, dt_bias,
            beta_sigmoid, v_first, cu_seqlens, cu_seqlens_cpu, max_seqlen)
    inputs = (q, k, v, g, beta, initial_state, A_log, dt_bias)
    if not A.needs_grad(*inputs):
        return _forward(*args)
    with torch.no_grad():
        o, s = _forward(*args)
    return A.no_backward(fn, o, inputs), A.no_backward(fn, s, inputs)


def _state_v_first(state_v_first, kwargs, warn):
    if "transpose_state_layout" in kwargs:
        if state_v_first:
            raise ValueError("Cannot pass both `state_v_first` and the deprecated `transpose_state_layout`.")
        if warn:
            warnings.warn("`transpose_state_layout` is deprecated and renamed to `state_v_first`.",
                          DeprecationWarning, stacklevel=3)
        return bool(kwargs.pop("transpose_state_layout"))
    return state_v_first


def _chunk_args(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens, cp_context, kwargs, warn):
    """Validates a chunk call; returns the arguments of _run."""
    fn = _CHUNK
    state_v_first = _state_v_first(state_v_first, kwargs, warn)
    if "head_first" in kwargs:
        raise DeprecationWarning("head_first has been removed. Inputs must be in `[B, T, H, ...]` format.")
    chunk_size = kwargs.get("chunk_size", 64)
    if chunk_size not in (16, 32, 64):
        raise ValueError(f"`chunk_size` must be 16, 32, or 64 for Gated Delta Rule, got {chunk_size}.")
    if cp_context is not None:
        raise A.unsupported(fn, "cp_context (context parallelism across devices)")
    use_gate = bool(kwargs.get("use_gate_in_kernel", False))
    A_log, dt_bias = kwargs.get("A_log"), kwargs.get("dt_bias")
    if g is None:
        raise ValueError(f"{fn}: argument 'g' is required")
    if beta is None:
        raise ValueError(f"{fn}: argument 'beta' is required")
    _plan(fn, q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel, use_gate,
          A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens)
    return (fn, q, k, v, g, beta, scale, initial_state, output_final_state, bool(use_qk_l2norm_in_kernel),
            use_gate, A_log, dt_bias, bool(use_beta_sigmoid_in_kernel), bool(state_v_first), cu_seqlens)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                           cp_context=None, **kwargs):
    """FLA 0.6's ``chunk_gated_delta_rule`` on gdn (module doc). Extra keywords as FLA: ``use_gate_in_kernel``,
    ``A_log``, ``dt_bias``, ``chunk_size`` (16, 32 or 64; gdn picks its own tiling, results do not depend on
    it), ``transpose_state_layout`` (deprecated alias of ``state_v_first``). ``chunk_indices`` is accepted and
    not needed. ``cu_seqlens_cpu`` (the host copy of ``cu_seqlens``) lets the host plan without a sync.

    Returns ``(o [B, T, HV, V], final_state [N, HV, K, V] float32 or None)``."""
    args = _chunk_args(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                       use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens, cp_context, kwargs,
                       warn=True)
    return _run(*args, cu_seqlens_cpu)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                                     A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False,
                                     allow_neg_eigval=False, state_v_first=False, cu_seqlens=None, **kwargs):
    """FLA 0.6's ``fused_recurrent_gated_delta_rule`` on gdn (module doc). ``g`` None means no decay, ``beta``
    None means 1. ``A_log`` / ``dt_bias`` are read only with ``use_gate_in_kernel=True``, as in FLA.
    ``gk`` / ``gv`` (per-channel decay) raise NotImplementedError.

    Returns ``(o [B, T, HV, V], final_state [N, HV, K, V] float32 or None)``."""
    fn = _RECUR
    state_v_first = _state_v_first(state_v_first, kwargs, warn=True)
    if gk is not None:
        raise A.unsupported(fn, "gk (per-key-channel decay)")
    if gv is not None:
        raise A.unsupported(fn, "gv (per-value-channel decay)")
    if not use_gate_in_kernel:
        A_log = dt_bias = None
    _plan(fn, q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
          bool(use_gate_in_kernel), A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first,
          cu_seqlens)
    return _run(fn, q, k, v, g, beta, scale, initial_state, output_final_state, bool(use_qk_l2norm_in_kernel),
                bool(use_gate_in_kernel), A_log, dt_bias, bool(use_beta_sigmoid_in_kernel), bool(state_v_first),
                cu_seqlens, None)


chunk_gdn = chunk_gated_delta_rule
fused_recurrent_gdn = fused_recurrent_gated_delta_rule


# ---------------------------------------------------------------------------------------------------------------
# FLA backend registration

_BACKEND_TYPE = "gdn"


def _backend_verify(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                    use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                    state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None, cp_context=None,
                    **kwargs):
    """(accepted, reason) for FLA's dispatcher: declines every call gdn would refuse or compute differently, and
    calls that need a backward pass, so that FLA's own kernels run them."""
    args = _chunk_args(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                       use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens, cp_context,
                       dict(kwargs), warn=False)
    if A.needs_grad(q, k, v, g, beta, initial_state, args[11], args[12]):
        return False, "gdn implements the forward pass only, and an input requires grad"
    dev = q.device.type
    K = q.shape[3]
    if dev == "cuda":
        why = cuda_unavailable_reason()
        if why is not None:
            return False, f"gdn's CUDA backend cannot run here: {why}"
        if K != 128:
            return False, f"gdn's CUDA kernels need K = V = 128, got {K}"
    elif dev == "cpu":
        if K not in (64, 128):
            return False, f"gdn's CPU backend needs K = V = 64 or 128, got {K}"
    else:
        return False, f"gdn runs on cuda or cpu tensors, got {dev}"
    return True, None


def register_backend(priority=1, env_var="FLA_GDN"):
    """Registers gdn as an FLA backend of the ``gated_delta_rule`` operation: FLA's own
    ``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` then runs on gdn whenever the verifier accepts the call
    (forward only, bfloat16, K = V, no ``allow_neg_eigval`` / ``cp_context``; gdn's device can run it) and falls
    back to FLA's kernels otherwise (FLA dispatches ``chunk_gated_delta_rule`` only; its
    ``fused_recurrent_gated_delta_rule`` is not routed through the registry). ``priority``: FLA tries backends in increasing order (FlashQLA is 3, so the
    default 1 puts gdn first). Setting the environment variable ``env_var`` to 0 disables it at run time.
    Needs FLA installed (ImportError otherwise). Returns the backend object. Idempotent."""
    from fla.backends import BaseBackend, register  # ImportError without FLA: the caller asked for it

    class GdnBackend(BaseBackend):
        """gdn (Gated Delta Net kernels) for chunk_gated_delta_rule's forward pass."""

        backend_type = _BACKEND_TYPE
        package_name = None
        default_enable = True

        def chunk_gated_delta_rule_verifier(self, *args, **kwargs):
            return _backend_verify(*args, **kwargs)

        def chunk_gated_delta_rule(self, *args, **kwargs):
            return chunk_gated_delta_rule(*args, **kwargs)

    GdnBackend.priority = priority
    GdnBackend.env_var = env_var
    register("gated_delta_rule")(GdnBackend)
    import fla.backends as fb
    return fb._get_operation_registry("gated_delta_rule")._backends.get(_BACKEND_TYPE)


def unregister_backend():
    """Removes the backend ``register_backend`` added (FLA's registry has no public removal); True if one was
    registered."""
    try:
        import fla.backends as fb
    except ImportError:
        return False
    return fb._get_operation_registry("gated_delta_rule")._backends.pop(_BACKEND_TYPE, None) is not None
