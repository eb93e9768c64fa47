"""torch.library custom ops for gdn, so the kernels compose with torch.compile (fake/meta implementations
give the output shapes without running anything). Import explicitly: `import gdn._torch_ops`, then call
`torch.ops.gdn.decode / prefill / mtp`. Functional forms: outputs are freshly allocated; MTP follows the
definition (pool not updated) and returns only `output` (its final_state is the pool itself).
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import decode as _decode
from . import mtp as _mtp
from . import prefill as _prefill


def _state_out(ref: Tensor, state: Optional[Tensor], rows: int) -> Tensor:
    HV, D = ref.shape[-2], ref.shape[-1]
    dt = state.dtype if state is not None else torch.float32
    return ref.new_empty((rows, HV, D, D), dtype=dt)


@torch.library.custom_op("gdn::decode", mutates_args=())
def decode(q: Tensor, k: Tensor, v: Tensor, state: Optional[Tensor], A_log: Tensor, a: Tensor,
           dt_bias: Tensor, b: Tensor, scale: Optional[float] = None) -> Tuple[Tensor, Tensor]:
    """gdn.decode as a custom op: returns (output, new_state), both new tensors."""
    return _decode(q, k, v, state, A_log, a, dt_bias, b, scale)


@decode.register_fake
def _(q, k, v, state, A_log, a, dt_bias, b, scale=None):
    return v.new_empty(v.shape), _state_out(v, state, v.shape[0])


@torch.library.custom_op("gdn::prefill", mutates_args=())
def prefill(q: Tensor, k: Tensor, v: Tensor, state: Optional[Tensor], A_log: Tensor, a: Tensor,
            dt_bias: Tensor, b: Tensor, cu_seqlens: Tensor, scale: Optional[float] = None,
            max_seqlen: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """gdn.prefill as a custom op: returns (output, new_state), both new tensors."""
    return _prefill(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, max_seqlen=max_seqlen)


@prefill.register_fake
def _(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale=None, max_seqlen=None):
    return v.new_empty(v.shape), _state_out(v, state, cu_seqlens.shape[0] - 1)


@torch.library.custom_op("gdn::mtp", mutates_args=("intermediate_states_buffer",))
def mtp(q: Tensor, k: Tensor, v: Tensor, initial_state: Tensor, initial_state_indices: Tensor, A_log: Tensor,
        a: Tensor, dt_bias: Tensor, b: Tensor, scale: Optional[float] = None,
        intermediate_states_buffer: Optional[Tensor] = None) -> Tensor:
    """gdn.mtp (definition mode) as a custom op: returns output; writes intermediate_states_buffer if given."""
    out, _ = _mtp(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale,
                  intermediate_states_buffer)
    return out


@mtp.register_fake
def _(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale=None,
      intermediate_states_buffer=None):
    return v.new_empty(v.shape)
