"""Shared helpers of gdn's engine adapters (``gdn.fla``, ``gdn.flashinfer``, ``gdn.transformers``, ``gdn.vllm``,
``gdn.sglang``): dtype checks that name what gdn does not run, token-packing views, small cached index tensors,
and an autograd guard.

The adapters keep the host path thin: a tensor gdn takes as it is (a view with contiguous rows, a dense state)
is passed as it is, and a copy is made only where gdn cannot take the layout or the engine's contract allocates.
Dtype widening is done only where it is exact (bfloat16 / float16 -> float32 for gates, A_log, dt_bias and states);
anything gdn does not compute (float32 activations, fp8 states) raises ``NotImplementedError`` naming the argument
and its dtype, never a silent cast. Activations are bfloat16 or float16 (q, k, v, a, b and the output all one
dtype: gdn raises ``TypeError`` naming the one that differs).

torch only: the adapters import this module; ``gdn`` itself does not.
"""

import weakref

import torch

__all__ = [
    "unsupported", "need_act16", "gate_f32", "beta_dtype", "state_dtype", "dense", "rows", "tokens",
    "needs_grad", "no_backward", "seq_offsets", "iota", "zeros_f32", "zeros_i32", "host_lengths", "param_f32",
]

_BF16 = torch.bfloat16
_F16 = torch.float16
_F32 = torch.float32


def unsupported(fn, what):
    """The NotImplementedError every adapter raises for an option or input gdn does not compute."""
    return NotImplementedError(f"{fn}: {what} is not supported by gdn")


def _dtype_name(dt):
    return str(dt).replace("torch.", "")


def need_act16(fn, name, x):
    """q, k, v, output, raw gates: gdn runs bfloat16 or float16 activations."""
    if x.dtype is not _BF16 and x.dtype is not _F16:
        raise NotImplementedError(
            f"{fn}: argument '{name}': dtype {_dtype_name(x.dtype)} is not supported by gdn "
            "(bfloat16 or float16 activations)")
    return x


def gate_f32(fn, name, x):
    """A float32 operand (log or linear decay, A_log, dt_bias): float32 as it is, bfloat16 / float16 widened
    (exact)."""
    dt = x.dtype
    if dt is _F32:
        return x
    if dt is _BF16 or dt is _F16:
        return x.float()
    raise NotImplementedError(
        f"{fn}: argument '{name}': dtype {_dtype_name(dt)} is not supported by gdn (float32, bfloat16 or float16)")


def beta_dtype(fn, name, x):
    """beta after the sigmoid: float32, bfloat16 or float16, passed as it is (gdn takes float32 or q's dtype)."""
    if x.dtype is not _F32 and x.dtype is not _BF16 and x.dtype is not _F16:
        raise NotImplementedError(
            f"{fn}: argument '{name}': dtype {_dtype_name(x.dtype)} is not supported by gdn "
            "(float32, bfloat16 or float16)")
    return x


def state_dtype(fn, name, x, fp16=True):
    """A recurrent state: float32, bfloat16 or (with `fp16`, where the engine has float16 states) float16; fp8
    states are not implemented."""
    if x.dtype is not _F32 and x.dtype is not _BF16 and not (fp16 and x.dtype is _F16):
        allowed = "float32, bfloat16 or float16" if fp16 else "float32 or bfloat16"
        raise NotImplementedError(
            f"{fn}: argument '{name}': state dtype {_dtype_name(x.dtype)} is not supported by gdn ({allowed})")
    return x


_PARAMS = {}  # id(param) -> (weakref to param, param._version, float32 contiguous flat copy)


def param_f32(fn, name, x):
    """A_log / dt_bias as gdn takes them: float32, contiguous, flat. vLLM and sglang keep dt_bias in the model dtype
    (bfloat16 or float16): the widened copy is made once per parameter (again after an in-place update) and cached,
    so decode steps and CUDA-graph captures do not allocate for it."""
    if x.dtype is _F32 and x.is_contiguous():
        return x
    if x.dtype is not _BF16 and x.dtype is not _F16 and x.dtype is not _F32:
        gate_f32(fn, name, x)  # raises: the dtype check (float32, bfloat16 or float16)
    if x.is_inference():  # no version counter to tell an in-place update: widened at every call
        return x.to(_F32).contiguous().view(-1)
    hit = _PARAMS.get(id(x))
    if hit is not None and hit[0]() is x and hit[1] == x._version:
        return hit[2]
    y = x.detach().to(_F32).contiguous().view(-1)
    key = id(x)
    _PARAMS[key] = (weakref.ref(x, lambda _ref, key=key: _PARAMS.pop(key, None)), x._version, y)
    return y


def dense(x):
    """x itself when contiguous, else a contiguous copy (for tensors gdn takes dense only)."""
    return x if x.is_contiguous() else x.contiguous()


def rows(x):
    """q / k / v / output as gdn takes them: x itself when its last dimension is contiguous and every other
    stride is a multiple of 8 elements (16-byte rows), else a contiguous copy."""
    if x.is_contiguous():
        return x
    st, sh = x.stride(), x.shape
    if st[-1] != 1 and sh[-1] != 1:
        return x.contiguous()
    for i in range(len(st) - 1):
        if st[i] % 8 and sh[i] != 1:  # the stride of a length-1 axis is never used
            return x.contiguous()
    return x


def tokens(x):
    """[B, T, ...] -> [B * T, ...]: a view whenever the strides allow (torch's reshape), then `rows`."""
    s = x.shape
    return rows(x.reshape((s[0] * s[1],) + tuple(s[2:])))


def needs_grad(*xs):
    """Whether autograd would record a graph through any of these tensors."""
    if not torch.is_grad_enabled():
        return False
    for x in xs:
        if isinstance(x, torch.Tensor) and x.requires_grad:
            return True
    return False


class _NoBackward(torch.autograd.Function):
    """Joins a forward result to the inputs' autograd graph with a backward that raises: gdn computes the
    forward pass only, and a gradient that silently skipped the layer would be wrong."""

    @staticmethod
    def forward(ctx, fn, out, *inputs):
        ctx.fn = fn
        return out.view_as(out)

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError(
            f"{ctx.fn}: backward is not implemented by gdn (forward / inference only); run training through "
            "the engine's own kernels")


def no_backward(fn, out, inputs):
    """`out` attached to `inputs` (those that require grad) with a raising backward; `out` itself when None."""
    if out is None:
        return None
    return _NoBackward.apply(fn, out, *[x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad])


# Small index tensors, cached per (kind, size, step, device). Creating one on CUDA is an allocation and a
# launch; an engine calls with the same few shapes. A tensor created while a CUDA graph is being captured lives
# in the graph's memory and is not cached.
_CACHE = {}
_CACHE_MAX = 256


def _cached(key, make, device):
    t = _CACHE.get(key)
    if t is not None:
        return t
    t = make()
    if device.type != "cuda" or not torch.cuda.is_current_stream_capturing():
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = t
    return t


def seq_offsets(n, length, device):
    """int32 ``[0, length, 2 * length, ..., n * length]``: cu_seqlens of n sequences of `length` tokens."""
    return _cached(("cu", n, length, device),
                   lambda: torch.arange(0, n * length + 1, max(length, 1), dtype=torch.int32, device=device)
                   if length else torch.zeros(n + 1, dtype=torch.int32, device=device), device)


def iota(n, device):
    """int32 ``[0, 1, ..., n - 1]`` (pool rows in batch order)."""
    return _cached(("iota", n, device), lambda: torch.arange(n, dtype=torch.int32, device=device), device)


def zeros_f32(shape, device):
    """A cached float32 zero tensor of `shape` (read-only use: a missing dt_bias, has_initial_state-free rows)."""
    shape = tuple(shape)
    return _cached(("zeros", shape, device), lambda: torch.zeros(shape, dtype=_F32, device=device), device)


def zeros_i32(n, device):
    """A cached int32 zero vector (read-only use: has_initial_state = 0 for every sequence)."""
    return _cached(("zeros_i32", n, device), lambda: torch.zeros(n, dtype=torch.int32, device=device), device)


def host_lengths(cu_seqlens, cu_seqlens_cpu=None):
    """The sequence lengths as a CPU tensor when they can be read without a device sync (a CPU cu_seqlens, or
    the engine's host copy), else None."""
    cu = cu_seqlens_cpu if cu_seqlens_cpu is not None else cu_seqlens
    if cu is None or cu.device.type != "cpu":
        return None
    return cu[1:] - cu[:-1]
