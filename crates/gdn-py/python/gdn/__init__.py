"""gdn: Gated Delta Net kernels (Qwen3-Next / Qwen3.5 linear attention) for Python.

Three operations with exactly the semantics of the flashinfer-bench GDN definitions
(``gdn_{decode,prefill,mtp}_qk{H}_v{HV}_d128_k_last``) by default: state ``[rows, HV, V, K]`` fp32 and k-last,
gates ``g = exp(-exp(A_log) * softplus(a + dt_bias))`` and ``beta = sigmoid(b)`` computed inside, no q/k
normalisation, ``scale`` None or 0 meaning ``1/sqrt(head_size)``.

Keyword-only arguments select the serving modes the inference engines use (docs/python.md, "Serving modes"):
precomputed gates (``g`` or ``alpha`` with ``beta``), ``use_qk_l2norm_in_kernel``, ``state_layout="k-first"``,
state pools updated in place (``state_indices``, MTP ``update_pool`` / ``num_accepted_tokens``), padding rules
(``pad``), ``has_initial_state``, prefill checkpoints and int32 ``cu_seqlens``.

Dtypes (math in fp32 throughout):
  * q, k, v, a, b: bfloat16 (the definitions) or float16, all five the same; ``output`` has their dtype, and so
    does a 16-bit ``beta`` (float32 or the activations' dtype, as FLA passes it).
  * the state (``state``, ``new_state``, a pool, MTP's ``initial_state``): float32, bfloat16 or float16, stored
    in that dtype; ``checkpoints`` in the state's dtype or float32; ``intermediate_states_buffer`` float32;
    ``A_log``, ``dt_bias``, ``g``, ``alpha`` float32. bfloat16 and float16 states never mix in one call.
  A tensor of another dtype raises ``TypeError`` naming it (for a mismatch, the one that differs from q or
  from the state).

Tensors:
  * torch CUDA tensors: zero-copy; the kernels are launched on ``torch.cuda.current_stream(device)`` of the
    tensors' device, without host synchronisation. When every output is passed, nothing is allocated, so a
    call can be captured in a CUDA graph; the one exception is a prefill plan with a workspace (see
    ``prefill``), which takes its scratch from torch's caching allocator on the current stream
    (``torch.empty(..., dtype=torch.uint8)``), which is capturable too. ``cu_seqlens`` and
    the other index tensors stay on the device and their *values* are not validated there (that would need
    a copy and a sync): callers must pass a ``cu_seqlens`` that starts at 0, never decreases and ends at the
    token count, and checkpoint row starts inside the buffer. Pool indices outside the pool are treated as
    padding by the kernels. Tensors are read in place: q, k, v and ``output`` may be views with any token and
    head strides whose last dimension is contiguous (slices of a fused projection, e.g. vLLM's ``mixed_qkv``),
    passed to the kernels as strides; every other tensor must be contiguous (a state pool may have a larger
    row stride). Any other layout is refused, never copied.
  * torch CPU tensors and NumPy arrays (bf16 through ``ml_dtypes.bfloat16``; fp16 is NumPy's ``float16``): gdn's
    multithreaded CPU backend,
    or for in-kernel q/k norm, k-first states, decode/prefill pools, spec-decode slots and checkpoints (which
    that backend does not implement) gdn's float64 reference, slower; here the values of ``cu_seqlens`` and
    of every index tensor are validated too.

Views of q, k, v and ``output``: strides are in elements, non-negative multiples of 8 (16-byte rows); a
``[B, T, H, D]`` view's batch stride must be T token strides (token t of request b is row ``b * T + t``); an
output's rows must not overlap (head stride >= D and token stride >= HV head strides, or the head-major
reverse). The same rules hold on the CPU, which copies the views.

Errors: a wrong dtype raises ``TypeError``; a wrong shape, a non-contiguous tensor, mixed devices or invalid
values raise ``ValueError``; each names the argument. A missing GPU, driver or NVRTC raises ``RuntimeError``
(``NotImplementedError``, a subclass, for a configuration the CUDA kernels do not support).
Neither torch nor NumPy is imported by this module: it works with whichever the caller passes.
``import gdn._torch_ops`` registers ``torch.ops.gdn.{decode,prefill,mtp}`` (custom ops with fake
implementations) for torch.compile.
"""

import os as _os
import sys as _sys

from . import _gdn

# The sm_90a CUBINs built with the wheel (gdn/cubin/, `gdn kernels --ship`): the driver test-loads each at first use;
# one it refuses, or a module not shipped, is compiled with NVRTC as without them.
if _os.path.isfile(_os.path.join(_os.path.dirname(__file__), "cubin", "STORE")):
    _gdn.use_shipped_kernels(_os.path.join(_os.path.dirname(__file__), "cubin"))

__all__ = ["decode", "prefill", "mtp", "cuda_unavailable_reason", "__version__"]
__version__ = _gdn.__version__

_TORCH_DTYPES = {}  # torch.dtype -> definition dtype name, filled on the first torch tensor


def _torch_dtype_name(dt):
    name = _TORCH_DTYPES.get(dt)
    if name is None:
        name = str(dt).replace("torch.", "")
        _TORCH_DTYPES[dt] = name
    return name


def _desc(x, name, fn):
    """(address, shape, element strides, dtype name, device) of a torch tensor or NumPy array."""
    if type(x).__module__.startswith("torch"):
        if x.is_cuda:
            d = x.get_device()
        elif x.device.type == "cpu":
            d = -1
        else:
            raise ValueError(f"gdn.{fn}: argument '{name}': unsupported device {x.device} (expected cpu or cuda)")
        dt = x.dtype
        return (x.data_ptr(), x.shape, x.stride(), _TORCH_DTYPES.get(dt) or _torch_dtype_name(dt), d)
    ai = getattr(x, "__array_interface__", None)
    if ai is None or not hasattr(x, "dtype"):
        raise TypeError(
            f"gdn.{fn}: argument '{name}': expected a torch tensor or a NumPy array, got {type(x).__name__}"
        )
    isz = x.dtype.itemsize
    strides = tuple(s // isz if s % isz == 0 else -1 for s in x.strides)
    return (ai["data"][0], x.shape, strides, x.dtype.name, -1)


def _out_desc(x, name, fn):
    if not type(x).__module__.startswith("torch"):
        flags = getattr(x, "flags", None)
        if flags is not None and not flags.writeable:
            raise ValueError(f"gdn.{fn}: argument '{name}': array is read-only")
    return _desc(x, name, fn)


def _scale(scale, fn):
    if scale is None or type(scale) is float:
        return scale
    try:
        return float(scale)
    except (TypeError, ValueError):
        raise TypeError(f"gdn.{fn}: argument 'scale': expected a float or None, got {type(scale).__name__}") from None


def _empty_like_family(ref, shape, dtype_ref, fallback):
    """An uninitialised array of `shape` of the same kind (torch/NumPy) and device as `ref`. The dtype is
    `dtype_ref`'s dtype, or float32 when `dtype_ref` is None (`fallback` says which float32)."""
    if type(ref).__module__.startswith("torch"):
        torch = _sys.modules["torch"]
        dt = dtype_ref.dtype if dtype_ref is not None else torch.float32
        return torch.empty(tuple(shape), dtype=dt, device=ref.device)
    np = _sys.modules["numpy"]
    dt = dtype_ref.dtype if dtype_ref is not None else np.float32
    return np.empty(tuple(shape), dtype=dt)


_gdn.set_describers(_desc, _out_desc)  # everything but torch CUDA tensors, which _gdn describes itself

_NAMES = {
    "decode": ("q", "k", "v", "state", "A_log", "a", "dt_bias", "b"),
    "prefill": ("q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "cu_seqlens"),
    "mtp": ("q", "k", "v", "initial_state", "initial_state_indices", "A_log", "a", "dt_bias", "b",
            "intermediate_states_buffer"),
}


def _is_bool(x):
    return str(getattr(x, "dtype", "")) in ("bool", "torch.bool")


def _serving(g, alpha, beta, state_indices, has_initial_state, num_accepted_tokens, checkpoint_cu_starts,
             checkpoints, use_qk_l2norm_in_kernel, state_layout, pad, checkpoint_every):
    """(extra, options) for _gdn: None, None for a definition-mode call (the fast path)."""
    if (g is None and alpha is None and beta is None and state_indices is None and has_initial_state is None
            and num_accepted_tokens is None and checkpoint_cu_starts is None and checkpoints is None
            and use_qk_l2norm_in_kernel is False and state_layout == "k-last" and pad == "negative"
            and checkpoint_every == 0):
        return None, None
    tensors = (g, alpha, beta, state_indices, has_initial_state, num_accepted_tokens, checkpoint_cu_starts,
               checkpoints)
    opts = (use_qk_l2norm_in_kernel, state_layout, pad, checkpoint_every)
    if has_initial_state is not None and _is_bool(has_initial_state):
        # The host reads int32 flags; converting a CPU array is cheap. On CUDA a conversion would be a launch:
        # the binding refuses a bool tensor there, asking for int32.
        if type(has_initial_state).__module__.startswith("torch"):
            if not has_initial_state.is_cuda:
                has_initial_state = has_initial_state.to(_sys.modules["torch"].int32)
        else:
            has_initial_state = has_initial_state.astype("int32")
        tensors = tensors[:4] + (has_initial_state,) + tensors[5:]
    return tensors, opts


def _run(fn, inputs, scale, output, state_out, state_in, serving=False, max_seqlen=None, extra=None, opts=None):
    """One call. With every destination given and no workspace needed, _gdn.call validates and launches at
    once (on torch's current stream); otherwise it returns the plan, and the missing outputs (and the prefill
    workspace) are allocated here, like the inputs (torch / NumPy, same device), before plan.run.
    serving: MTP updates the pool. A decode / prefill call with state_indices (extra[3]) updates its pool in
    place: the state output is the pool."""
    if max_seqlen is not None and (isinstance(max_seqlen, bool) or not isinstance(max_seqlen, int)):
        raise TypeError(f"gdn.{fn}: argument 'max_seqlen': expected an int or None, got {type(max_seqlen).__name__}")
    if type(scale) is not float and scale is not None:
        scale = _scale(scale, fn)
    if fn == "mtp":
        # definition mode: the pool is not updated and is returned as final_state (no copy);
        # serving mode: the pool is updated in place.
        state_out = state_in
        dest = state_in if serving else None
    elif extra is not None and extra[3] is not None:
        # a pool call: the pool is the state output (the binding checks that new_state, if given, is the pool)
        dest = state_in if state_out is None else state_out
        state_out = state_in
    else:
        dest = state_out
    plan = _gdn.call(fn, inputs, _NAMES[fn], scale, serving, max_seqlen, output, dest, extra, opts)
    if plan is None:
        return output, state_out
    return _finish(plan, fn, inputs[0], output, state_out, dest, state_in)


def _finish(plan, fn, q, output, state_out, dest, state_in):
    """The second step of a call: allocates the missing outputs and the prefill workspace (torch / NumPy, like
    q), then runs the plan. dest: the state output passed to the binding (None for MTP in definition mode)."""
    if output is None:
        output = _empty_like_family(q, plan.output_shape, q, None)
    if fn != "mtp" and state_out is None:
        state_out = dest = _empty_like_family(q, plan.state_shape, state_in, None)
    ws = None
    if fn == "prefill" and plan.device >= 0:
        nbytes = plan.workspace_bytes  # non-zero only for the multi-kernel prefill plans (chunk64, cp, device plan)
        if nbytes:
            torch = _sys.modules["torch"]
            # lives until the launch is enqueued; torch's allocator orders its reuse on this stream
            ws = torch.empty(nbytes, dtype=torch.uint8, device=q.device)
    plan.run(output, dest, None, ws)
    return output, state_out


def _serving_doc(f):
    """Puts the serving keywords' shared documentation where the docstring says {serving}."""
    if f.__doc__:  # None under python -OO
        f.__doc__ = f.__doc__.replace("{serving}", _SERVING_DOC)
    return f


_SERVING_DOC = """
    Serving (keyword-only; defaults keep the definition's semantics):
        g: ``[.., HV]`` float32 log-space decay, or alpha: the linear decay ``exp(g)`` (float32; not both).
            With either, beta ``[.., HV]`` (float32, or 16-bit in q's dtype; post-sigmoid) is required and ``A_log, a,
            dt_bias, b`` must be None. Same leading shape as ``a``.
        use_qk_l2norm_in_kernel: normalise q and k per token and head inside
            (``x / sqrt(sum(x^2) + 1e-6)``, sums in fp32, rounded to q's dtype before use).
        state_layout: "k-last" (``[.., V, K]``, the definitions, vLLM, sglang, FlashInfer) or "k-first"
            (``[.., K, V]``, FLA and HF transformers); applies to every state tensor of the call.
        pad: which pool indices mark padding: "negative" (index < 0; sglang, FlashInfer) or "null-slot"
            (index <= 0; vLLM's NULL_BLOCK_ID). A padded sequence reads and writes no state; its output rows
            are zero.
        has_initial_state: ``[N]`` int32 (0/1) with a pool: 0 starts the sequence from zeros (its row is not
            read; its final state is still written). A bool array is converted on the CPU; on CUDA pass int32
            (a conversion would be an extra launch)."""


@_serving_doc
def decode(q, k, v, state, A_log=None, a=None, dt_bias=None, b=None, scale=None, *, output=None, new_state=None,
           g=None, alpha=None, beta=None, use_qk_l2norm_in_kernel=False, state_layout="k-last", state_indices=None,
           pad="negative", has_initial_state=None):
    """One decode step (T = 1) of Gated Delta Net, as the ``gdn_decode_*`` definitions, plus the serving
    modes.

    Args:
        q, k: ``[B, 1, H, D]`` bfloat16 or float16.  v: ``[B, 1, HV, D]`` (q's dtype; HV a multiple of H;
            D = 128). Each may be a view with contiguous rows (module doc), as ``output`` may.
        state: ``[B, HV, D, D]`` float32 (or bfloat16 / float16), or None for a zero state; with ``state_indices``, the
            state pool ``[slots, HV, D, D]``, updated in place.
        A_log, dt_bias: ``[HV]`` float32.  a, b: ``[B, 1, HV]`` in q's dtype (None with precomputed gates).
        scale: float; None or 0 means ``1/sqrt(D)``.
        output: optional ``[B, 1, HV, D]`` destination in q's dtype.
        new_state: optional ``[B, HV, D, D]`` destination with the state's dtype (float32 when state is None);
            may be ``state`` itself (updated in place). With ``state_indices``: None or the pool itself.
        state_indices: ``[B]`` int32 or int64: request b reads and writes pool row ``state_indices[b]`` of
            ``state`` in place (rows no request writes keep their values). The pool may be a view whose rows
            are further apart than one state (a per-layer view of a larger buffer) if ``[HV, D, D]`` is dense.
{serving}

    Returns:
        ``(output, new_state)`` (``new_state`` is the pool with ``state_indices``). A bfloat16 / float16 ``state``
        gives a ``new_state`` of its dtype (math in fp32).
    """
    # a call with its destinations given runs in one step in the binding; None: the general path below
    r = _gdn.decode(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state, g, alpha, beta,
                    use_qk_l2norm_in_kernel, state_layout, state_indices, pad, has_initial_state)
    if r is not None:
        return r
    extra, opts = _serving(g, alpha, beta, state_indices, has_initial_state, None, None, None,
                           use_qk_l2norm_in_kernel, state_layout, pad, 0)
    return _run("decode", (q, k, v, state, A_log, a, dt_bias, b), scale, output, new_state, state,
                extra=extra, opts=opts)


@_serving_doc
def prefill(q, k, v, state, A_log=None, a=None, dt_bias=None, b=None, cu_seqlens=None, scale=None, *, output=None,
            new_state=None, max_seqlen=None, g=None, alpha=None, beta=None, use_qk_l2norm_in_kernel=False,
            state_layout="k-last", state_indices=None, pad="negative", has_initial_state=None, checkpoint_every=0,
            checkpoint_cu_starts=None, checkpoints=None):
    """Prefill of packed variable-length sequences, as the ``gdn_prefill_*`` definitions, plus the serving
    modes.

    Args:
        q, k: ``[T, H, D]`` bfloat16 or float16.  v: ``[T, HV, D]`` (q's dtype; T = total tokens of all
            sequences). Each may be a view with contiguous rows, e.g. of a fused ``[T, (2H + HV) * D]``
            projection (module doc), as ``output`` may.
        state: ``[N, HV, D, D]`` float32 (or bfloat16 / float16) initial states, or None for zeros; with
            ``state_indices``, the state pool ``[slots, HV, D, D]``, updated in place.
        A_log, dt_bias: ``[HV]`` float32.  a, b: ``[T, HV]`` in q's dtype (None with precomputed gates).
        cu_seqlens: ``[N + 1]`` int64 or int32 sequence boundaries (0 first, non-decreasing, T last), on the
            tensors' device. On CUDA its values are not checked (no host sync).
        scale: float; None or 0 means ``1/sqrt(D)``.
        output: optional ``[T, HV, D]`` destination in q's dtype.
        new_state: optional ``[N, HV, D, D]`` destination (may be ``state``: in place). With ``state_indices``:
            None or the pool itself.
        max_seqlen: optional int, the longest sequence's length in tokens when the caller knows it on the
            host (as serving engines do). It only steers the plan choice — a wrong value costs speed, never
            correctness; it is never read from ``cu_seqlens`` (that would synchronise). Without it the
            host plans for equal lengths, or launches the device plan where skew could change the best plan.
        state_indices: ``[N]`` int32 or int64: sequence n reads and writes pool row ``state_indices[n]`` in
            place; a zero-length sequence leaves its row as it is. The pool may be a row-strided view.
        checkpoint_every: write the state after every ``checkpoint_every`` tokens of each sequence (a positive
            multiple of 64; 0 = none) into ``checkpoints`` ``[C, HV, D, D]`` (the state's dtype or float32, in
            ``state_layout``): the state after ``(j + 1) * checkpoint_every`` tokens of sequence n goes to row
            ``checkpoint_cu_starts[n] + j``, where ``checkpoint_cu_starts`` (``[N + 1]`` int32 or int64) gives
            each sequence's first row; other rows keep their values. On CUDA the row starts are not checked:
            they must give each sequence ``len // checkpoint_every`` rows inside the buffer.
{serving}

    On CUDA a cost model picks the plan from the shape (and ``max_seqlen``): "fused" (one kernel),
    "chunk64" (prep + walk over 64-token chunks), "cp" / "cp2" (context parallel, four kernels: long sequences
    cut into segments walked in parallel, with one or two warpgroups per walk CTA), or without ``max_seqlen``
    the "device" plan (the candidate plans' kernels launched in turn; each reads the lengths on the device and
    runs the call or exits). The multi-kernel plans share a scratch workspace taken from torch's caching
    allocator on the current stream; every plan is graph-capturable. ``GDN_KERNEL=<kernel name>`` forces a plan.

    Returns:
        ``(output, new_state)`` (``new_state`` is the pool with ``state_indices``). Without a pool, a
        zero-length sequence's ``new_state`` row is zero, as in the definition.
    """
    r = _gdn.prefill(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, output, new_state, max_seqlen, g,
                     alpha, beta, use_qk_l2norm_in_kernel, state_layout, state_indices, pad, has_initial_state,
                     checkpoint_every, checkpoint_cu_starts, checkpoints)
    if r is not None:
        return r
    extra, opts = _serving(g, alpha, beta, state_indices, has_initial_state, None, checkpoint_cu_starts,
                           checkpoints, use_qk_l2norm_in_kernel, state_layout, pad, checkpoint_every)
    return _run("prefill", (q, k, v, state, A_log, a, dt_bias, b, cu_seqlens), scale, output, new_state, state,
                max_seqlen=max_seqlen, extra=extra, opts=opts)


@_serving_doc
def mtp(q, k, v, initial_state, initial_state_indices, A_log=None, a=None, dt_bias=None, b=None, scale=None,
        intermediate_states_buffer=None, *, output=None, update_pool=False, g=None, alpha=None, beta=None,
        use_qk_l2norm_in_kernel=False, state_layout="k-last", pad="negative", has_initial_state=None,
        num_accepted_tokens=None):
    """Multi-token verify (T > 1 tokens per request) from a state pool, as the ``gdn_mtp_*`` definitions,
    plus the serving modes.

    Args:
        q, k: ``[B, T, H, D]`` bfloat16 or float16.  v: ``[B, T, HV, D]`` (q's dtype). Each may be a view with
            contiguous rows whose batch stride is T token strides (module doc), as ``output`` may.
        initial_state: ``[pool, HV, D, D]`` float32 (or bfloat16 / float16) state pool; it may be a view whose rows are
            further apart than one state if ``[HV, D, D]`` is dense.
        initial_state_indices: ``[B]`` int32; request b starts from pool row ``initial_state_indices[b]``.
            With ``num_accepted_tokens``: ``[B, T]`` int32 spec-decode slots.
        A_log, dt_bias: ``[HV]`` float32.  a, b: ``[B, T, HV]`` in q's dtype (None with precomputed gates).
        scale: float; None or 0 means ``1/sqrt(D)``.
        intermediate_states_buffer: optional ``[pool, T, HV, D, D]`` float32; row ``initial_state_indices[b]``
            receives the state after each token of request b (other rows are left as they are).
        output: optional ``[B, T, HV, D]`` destination in q's dtype.
        update_pool: False (the definition): the pool is not modified and is returned as ``final_state``
            (the same tensor, no copy). True (serving): each request's final state is written back to its
            pool row in place, and indices marked by ``pad`` are padding requests (output rows zero, nothing
            read or written for them).
        num_accepted_tokens: ``[B]`` int32, with spec-decode slots (vLLM): request b reads pool row
            ``initial_state_indices[b, num_accepted_tokens[b] - 1]`` and writes the state after token t to row
            ``initial_state_indices[b, t]`` (skipped where that entry is padding); the pool is updated in place
            (``update_pool`` is implied). Not with an intermediate buffer.
{serving}

    Returns:
        ``(output, final_state)`` where ``final_state`` is ``initial_state``.
    """
    r = _gdn.mtp(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale, intermediate_states_buffer,
                 output, update_pool, g, alpha, beta, use_qk_l2norm_in_kernel, state_layout, pad, has_initial_state,
                 num_accepted_tokens)
    if r is not None:
        return r
    inputs = (q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, intermediate_states_buffer)
    extra, opts = _serving(g, alpha, beta, None, has_initial_state, num_accepted_tokens, None, None,
                           use_qk_l2norm_in_kernel, state_layout, pad, 0)
    serving = bool(update_pool) or num_accepted_tokens is not None
    return _run("mtp", inputs, scale, output, None, initial_state, serving=serving, extra=extra, opts=opts)


def cuda_unavailable_reason():
    """None when gdn's CUDA backend can run here; otherwise a sentence saying why (no driver, no NVRTC...)."""
    return _gdn.cuda_unavailable_reason()
