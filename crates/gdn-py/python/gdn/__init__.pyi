# Type stubs of gdn (Gated Delta Net kernels). `Tensor` is a torch.Tensor or a NumPy array (bf16 through
# ml_dtypes.bfloat16); torch CUDA tensors run on the GPU, CPU tensors and arrays on gdn's CPU backend.
from typing import Any, Optional, Tuple, TypeVar

Tensor = Any
T = TypeVar("T")

__version__: str

def decode(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: Optional[Tensor],
    A_log: Tensor,
    a: Tensor,
    dt_bias: Tensor,
    b: Tensor,
    scale: Optional[float] = None,
    *,
    output: Optional[Tensor] = None,
    new_state: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """One decode step (gdn_decode_*): q, k [B,1,H,D] bf16; v [B,1,HV,D] bf16; state [B,HV,D,D] f32/bf16
    k-last or None (zeros); A_log, dt_bias [HV] f32; a, b [B,1,HV] bf16; scale None/0 = 1/sqrt(D).
    Returns (output [B,1,HV,D] bf16, new_state [B,HV,D,D]); new_state may be state (in place)."""

def prefill(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: Optional[Tensor],
    A_log: Tensor,
    a: Tensor,
    dt_bias: Tensor,
    b: Tensor,
    cu_seqlens: Tensor,
    scale: Optional[float] = None,
    *,
    output: Optional[Tensor] = None,
    new_state: Optional[Tensor] = None,
    max_seqlen: Optional[int] = None,
) -> Tuple[Tensor, Tensor]:
    """Packed varlen prefill (gdn_prefill_*): q, k [T,H,D] bf16; v [T,HV,D] bf16; state [N,HV,D,D] or None;
    a, b [T,HV] bf16; cu_seqlens [N+1] int64 on the tensors' device (values unchecked on CUDA).
    Returns (output [T,HV,D] bf16, new_state [N,HV,D,D]); zero-length sequences get a zero state row.
    max_seqlen: the longest sequence's length when known on the host (plan choice only; 0 <= it <= T).
    On CUDA a cost model picks the plan: "fused" (one kernel), "chunk64" (two kernels), "cp"/"cp2" (context
    parallel, four kernels) or, without max_seqlen, the "device" plan (lengths read on the device); the
    multi-kernel plans take a scratch workspace from torch's caching allocator
    (current stream; graph-capturable)."""

def mtp(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    initial_state: Tensor,
    initial_state_indices: Tensor,
    A_log: Tensor,
    a: Tensor,
    dt_bias: Tensor,
    b: Tensor,
    scale: Optional[float] = None,
    intermediate_states_buffer: Optional[Tensor] = None,
    *,
    output: Optional[Tensor] = None,
    update_pool: bool = False,
) -> Tuple[Tensor, Tensor]:
    """Multi-token verify from a state pool (gdn_mtp_*): q, k [B,T,H,D]; v [B,T,HV,D]; initial_state
    [pool,HV,D,D]; initial_state_indices [B] int32; intermediate_states_buffer [pool,T,HV,D,D] f32 or None.
    update_pool=False: pool untouched, returned as final_state (same object). True: final states written
    back in place, index -1 = padding (zero output rows). Returns (output [B,T,HV,D] bf16, final_state)."""

def cuda_unavailable_reason() -> Optional[str]:
    """None when the CUDA backend can run here, else why not."""
