"""torch.library custom ops for gdn, so the kernels compose with torch.compile (fake/meta implementations
give the output shapes without running anything). Import explicitly: `import gdn._torch_ops`, then call
`torch.ops.gdn.<op>`.

q, k and v may be views with contiguous rows (slices of a fused projection), as in the functions. Dtypes are the
functions' (q, k, v, a, b bfloat16 or float16; the output in their dtype; states f32, bf16 or fp16): the fake
implementations allocate the output like `v` and the state output in the state's dtype.

Functional ops (`decode`, `prefill`, `mtp`): outputs are freshly allocated. They take the serving options that
do not update anything in place — precomputed gates (`g` / `alpha` + `beta`, with `A_log, a, dt_bias, b`
None), `use_qk_l2norm_in_kernel`, `state_layout`, int32 `cu_seqlens` — and prefill's `checkpoints` buffer
(declared mutated). MTP follows the definition (pool not updated) and returns only `output`.

Pool ops (`decode_pool`, `prefill_pool`, `mtp_pool`): the state pool is updated in place (declared mutated) and
only `output` is returned, as the serving engines call them: `state_indices` / spec-decode slots, `pad`,
`has_initial_state`, plus everything the functional ops take.

Registration: `torch.library.custom_op` for the ops whose mutated tensors are all required; the ops with an
optional mutated buffer (`checkpoints`, `intermediate_states_buffer`) are defined from the same inferred schema
with `torch.library.define` / `impl` / `register_fake`. custom_op's version-counter kernel in torch 2.10 and
2.11 indexes the dispatcher's arguments by schema position, and the dispatcher leaves out trailing arguments
at their defaults, so a call that omits the buffer raised IndexError there; a schema defined directly has no
such kernel, and torch.compile reads the same mutation annotations from it.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import decode as _decode
from . import mtp as _mtp
from . import prefill as _prefill


def _op(name: str, mutates_args: Tuple[str, ...]):
    """Defines `gdn::<name>` from the function's inferred schema and registers it as the op's kernel for every
    device (as custom_op does); returns an object with `register_fake`, like custom_op's."""
    qualname = f"gdn::{name}"

    def define(fn):
        torch.library.define(qualname, torch.library.infer_schema(fn, mutates_args=mutates_args))
        torch.library.impl(qualname, "CompositeExplicitAutograd", fn)
        return _Defined(qualname, fn)

    return define


class _Defined:
    """An op registered by `_op`: calling it calls `torch.ops.gdn.<name>`."""

    def __init__(self, qualname, fn):
        self._qualname, self.__doc__ = qualname, fn.__doc__
        self._op = getattr(torch.ops.gdn, qualname.split("::")[1])

    def __call__(self, *args, **kwargs):
        return self._op(*args, **kwargs)

    def register_fake(self, fn):
        return torch.library.register_fake(self._qualname)(fn)


def _state_out(ref: Tensor, state: Optional[Tensor], rows: int) -> Tensor:
    HV, D = ref.shape[-2], ref.shape[-1]
    dt = state.dtype if state is not None else torch.float32
    return ref.new_empty((rows, HV, D, D), dtype=dt)


@torch.library.custom_op("gdn::decode", mutates_args=())
def decode(q: Tensor, k: Tensor, v: Tensor, state: Optional[Tensor], A_log: Optional[Tensor], a: Optional[Tensor],
           dt_bias: Optional[Tensor], b: Optional[Tensor], scale: Optional[float] = None, g: Optional[Tensor] = None,
           alpha: Optional[Tensor] = None, beta: Optional[Tensor] = None, use_qk_l2norm_in_kernel: bool = False,
           state_layout: str = "k-last") -> Tuple[Tensor, Tensor]:
    """gdn.decode as a custom op: returns (output, new_state), both new tensors."""
    return _decode(q, k, v, state, A_log, a, dt_bias, b, scale, g=g, alpha=alpha, beta=beta,
                   use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_layout=state_layout)


@decode.register_fake
def _(q, k, v, state, A_log, a, dt_bias, b, scale=None, g=None, alpha=None, beta=None, use_qk_l2norm_in_kernel=False,
      state_layout="k-last"):
    return v.new_empty(v.shape), _state_out(v, state, v.shape[0])


@_op("prefill", mutates_args=("checkpoints",))
def prefill(q: Tensor, k: Tensor, v: Tensor, state: Optional[Tensor], A_log: Optional[Tensor], a: Optional[Tensor],
            dt_bias: Optional[Tensor], b: Optional[Tensor], cu_seqlens: Tensor, scale: Optional[float] = None,
            max_seqlen: Optional[int] = None, g: Optional[Tensor] = None, alpha: Optional[Tensor] = None,
            beta: Optional[Tensor] = None, use_qk_l2norm_in_kernel: bool = False, state_layout: str = "k-last",
            checkpoint_every: int = 0, checkpoint_cu_starts: Optional[Tensor] = None,
            checkpoints: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """gdn.prefill as a custom op: returns (output, new_state), both new tensors; writes checkpoints if given."""
    return _prefill(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, max_seqlen=max_seqlen, g=g, alpha=alpha,
                    beta=beta, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_layout=state_layout,
                    checkpoint_every=checkpoint_every, checkpoint_cu_starts=checkpoint_cu_starts,
                    checkpoints=checkpoints)


@prefill.register_fake
def _(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale=None, max_seqlen=None, g=None, alpha=None, beta=None,
      use_qk_l2norm_in_kernel=False, state_layout="k-last", checkpoint_every=0, checkpoint_cu_starts=None,
      checkpoints=None):
    return v.new_empty(v.shape), _state_out(v, state, cu_seqlens.shape[0] - 1)


@_op("mtp", mutates_args=("intermediate_states_buffer",))
def mtp(q: Tensor, k: Tensor, v: Tensor, initial_state: Tensor, initial_state_indices: Tensor,
        A_log: Optional[Tensor], a: Optional[Tensor], dt_bias: Optional[Tensor], b: Optional[Tensor],
        scale: Optional[float] = None, intermediate_states_buffer: Optional[Tensor] = None, g: Optional[Tensor] = None,
        alpha: Optional[Tensor] = None, beta: Optional[Tensor] = None, use_qk_l2norm_in_kernel: bool = False,
        state_layout: str = "k-last") -> Tensor:
    """gdn.mtp (definition mode) as a custom op: returns output; writes intermediate_states_buffer if given."""
    out, _ = _mtp(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale,
                  intermediate_states_buffer, g=g, alpha=alpha, beta=beta,
                  use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_layout=state_layout)
    return out


@mtp.register_fake
def _(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale=None,
      intermediate_states_buffer=None, g=None, alpha=None, beta=None, use_qk_l2norm_in_kernel=False,
      state_layout="k-last"):
    return v.new_empty(v.shape)


@torch.library.custom_op("gdn::decode_pool", mutates_args=("state",))
def decode_pool(q: Tensor, k: Tensor, v: Tensor, state: Tensor, state_indices: Tensor, A_log: Optional[Tensor],
                a: Optional[Tensor], dt_bias: Optional[Tensor], b: Optional[Tensor], scale: Optional[float] = None,
                g: Optional[Tensor] = None, alpha: Optional[Tensor] = None, beta: Optional[Tensor] = None,
                use_qk_l2norm_in_kernel: bool = False, state_layout: str = "k-last", pad: str = "negative",
                has_initial_state: Optional[Tensor] = None) -> Tensor:
    """gdn.decode with a state pool: updates rows state_indices of `state` in place, returns output."""
    out, _ = _decode(q, k, v, state, A_log, a, dt_bias, b, scale, g=g, alpha=alpha, beta=beta,
                     use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_layout=state_layout,
                     state_indices=state_indices, pad=pad, has_initial_state=has_initial_state)
    return out


@decode_pool.register_fake
def _(q, k, v, state, state_indices, A_log, a, dt_bias, b, scale=None, g=None, alpha=None, beta=None,
      use_qk_l2norm_in_kernel=False, state_layout="k-last", pad="negative", has_initial_state=None):
    return v.new_empty(v.shape)


@_op("prefill_pool", mutates_args=("state", "checkpoints"))
def prefill_pool(q: Tensor, k: Tensor, v: Tensor, state: Tensor, state_indices: Tensor, A_log: Optional[Tensor],
                 a: Optional[Tensor], dt_bias: Optional[Tensor], b: Optional[Tensor], cu_seqlens: Tensor,
                 scale: Optional[float] = None, max_seqlen: Optional[int] = None, g: Optional[Tensor] = None,
                 alpha: Optional[Tensor] = None, beta: Optional[Tensor] = None, use_qk_l2norm_in_kernel: bool = False,
                 state_layout: str = "k-last", pad: str = "negative", has_initial_state: Optional[Tensor] = None,
                 checkpoint_every: int = 0, checkpoint_cu_starts: Optional[Tensor] = None,
                 checkpoints: Optional[Tensor] = None) -> Tensor:
    """gdn.prefill with a state pool: updates rows state_indices of `state` in place, returns output."""
    out, _ = _prefill(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, max_seqlen=max_seqlen, g=g,
                      alpha=alpha, beta=beta, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                      state_layout=state_layout, state_indices=state_indices, pad=pad,
                      has_initial_state=has_initial_state, checkpoint_every=checkpoint_every,
                      checkpoint_cu_starts=checkpoint_cu_starts, checkpoints=checkpoints)
    return out


@prefill_pool.register_fake
def _(q, k, v, state, state_indices, A_log, a, dt_bias, b, cu_seqlens, scale=None, max_seqlen=None, g=None,
      alpha=None, beta=None, use_qk_l2norm_in_kernel=False, state_layout="k-last", pad="negative",
      has_initial_state=None, checkpoint_every=0, checkpoint_cu_starts=None, checkpoints=None):
    return v.new_empty(v.shape)


@_op("mtp_pool", mutates_args=("initial_state", "intermediate_states_buffer"))
def mtp_pool(q: Tensor, k: Tensor, v: Tensor, initial_state: Tensor, initial_state_indices: Tensor,
             A_log: Optional[Tensor], a: Optional[Tensor], dt_bias: Optional[Tensor], b: Optional[Tensor],
             scale: Optional[float] = None, intermediate_states_buffer: Optional[Tensor] = None,
             g: Optional[Tensor] = None, alpha: Optional[Tensor] = None, beta: Optional[Tensor] = None,
             use_qk_l2norm_in_kernel: bool = False, state_layout: str = "k-last", pad: str = "negative",
             has_initial_state: Optional[Tensor] = None, num_accepted_tokens: Optional[Tensor] = None) -> Tensor:
    """gdn.mtp updating the pool (update_pool=True, or spec-decode slots with num_accepted_tokens), returns
    output."""
    out, _ = _mtp(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale,
                  intermediate_states_buffer, update_pool=True, g=g, alpha=alpha, beta=beta,
                  use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_layout=state_layout, pad=pad,
                  has_initial_state=has_initial_state, num_accepted_tokens=num_accepted_tokens)
    return out


@mtp_pool.register_fake
def _(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale=None, intermediate_states_buffer=None,
      g=None, alpha=None, beta=None, use_qk_l2norm_in_kernel=False, state_layout="k-last", pad="negative",
      has_initial_state=None, num_accepted_tokens=None):
    return v.new_empty(v.shape)
