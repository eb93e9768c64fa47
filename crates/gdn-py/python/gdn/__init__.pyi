# Type stubs of gdn (Gated Delta Net kernels). `Tensor` is a torch.Tensor or a NumPy array (bf16 through
# ml_dtypes.bfloat16); torch CUDA tensors run on the GPU, CPU tensors and arrays on the host. Wherever bf16 is
# written below, fp16 works too: q, k, v, a, b (and so the output, and a 16-bit beta) share one dtype, bfloat16
# or float16; states are f32, bf16 or fp16 (checkpoints: the state's dtype or f32). Math in fp32.
from typing import Any, Literal, Optional, Tuple, TypeVar

Tensor = Any
T = TypeVar("T")
StateLayout = Literal["k-last", "k-first"]
PadRule = Literal["negative", "null-slot"]

__version__: str

def decode(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: Optional[Tensor],
    A_log: Optional[Tensor] = None,
    a: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    b: Optional[Tensor] = None,
    scale: Optional[float] = None,
    *,
    output: Optional[Tensor] = None,
    new_state: Optional[Tensor] = None,
    g: Optional[Tensor] = None,
    alpha: Optional[Tensor] = None,
    beta: Optional[Tensor] = None,
    use_qk_l2norm_in_kernel: bool = False,
    state_layout: StateLayout = "k-last",
    state_indices: Optional[Tensor] = None,
    pad: PadRule = "negative",
    has_initial_state: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """One decode step (gdn_decode_*): q, k [B,1,H,D] bf16; v [B,1,HV,D] bf16; state [B,HV,D,D] f32/bf16
    or None (zeros); A_log, dt_bias [HV] f32; a, b [B,1,HV] bf16; scale None/0 = 1/sqrt(D).
    Returns (output [B,1,HV,D] bf16, new_state [B,HV,D,D]); new_state may be state (in place).
    Serving: g (log decay) or alpha (linear) f32 [B,1,HV] + beta f32/bf16 replace A_log, a, dt_bias, b;
    use_qk_l2norm_in_kernel; state_layout "k-last" [..,V,K] or "k-first" [..,K,V]; state_indices [B]
    int32/int64: state is a pool [slots,HV,D,D] (may be a row-strided view) updated in place and returned;
    pad "negative" (idx < 0) or "null-slot" (idx <= 0); has_initial_state [B] int32 (bool on the CPU)."""

def prefill(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: Optional[Tensor],
    A_log: Optional[Tensor] = None,
    a: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    b: Optional[Tensor] = None,
    cu_seqlens: Optional[Tensor] = None,
    scale: Optional[float] = None,
    *,
    output: Optional[Tensor] = None,
    new_state: Optional[Tensor] = None,
    max_seqlen: Optional[int] = None,
    g: Optional[Tensor] = None,
    alpha: Optional[Tensor] = None,
    beta: Optional[Tensor] = None,
    use_qk_l2norm_in_kernel: bool = False,
    state_layout: StateLayout = "k-last",
    state_indices: Optional[Tensor] = None,
    pad: PadRule = "negative",
    has_initial_state: Optional[Tensor] = None,
    checkpoint_every: int = 0,
    checkpoint_cu_starts: Optional[Tensor] = None,
    checkpoints: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Packed varlen prefill (gdn_prefill_*): q, k [T,H,D] bf16; v [T,HV,D] bf16; state [N,HV,D,D] or None;
    a, b [T,HV] bf16; cu_seqlens [N+1] int64 or int32 (required) on the tensors' device (values unchecked on
    CUDA). Returns (output [T,HV,D] bf16, new_state [N,HV,D,D]); without a pool, zero-length sequences get a
    zero state row. max_seqlen: the longest sequence's length when known on the host (plan choice only;
    0 <= it <= T). On CUDA a cost model picks the plan: "fused" (one kernel), "chunk64" (two kernels),
    "cp"/"cp2" (context parallel, four kernels) or, without max_seqlen, the "device" plan (lengths read on the
    device); the multi-kernel plans take a scratch workspace from torch's caching allocator (current stream;
    graph-capturable). Serving: as decode (gates [T,HV], state_indices [N]), plus checkpoint_every (a multiple
    of 64) with checkpoint_cu_starts [N+1] int32/int64 and checkpoints [C,HV,D,D] (state dtype or f32),
    written in place."""

def mtp(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    initial_state: Tensor,
    initial_state_indices: Tensor,
    A_log: Optional[Tensor] = None,
    a: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    b: Optional[Tensor] = None,
    scale: Optional[float] = None,
    intermediate_states_buffer: Optional[Tensor] = None,
    *,
    output: Optional[Tensor] = None,
    update_pool: bool = False,
    g: Optional[Tensor] = None,
    alpha: Optional[Tensor] = None,
    beta: Optional[Tensor] = None,
    use_qk_l2norm_in_kernel: bool = False,
    state_layout: StateLayout = "k-last",
    pad: PadRule = "negative",
    has_initial_state: Optional[Tensor] = None,
    num_accepted_tokens: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Multi-token verify from a state pool (gdn_mtp_*): q, k [B,T,H,D]; v [B,T,HV,D]; initial_state
    [pool,HV,D,D] (may be a row-strided view); initial_state_indices [B] int32; intermediate_states_buffer
    [pool,T,HV,D,D] f32 or None. update_pool=False: pool untouched, returned as final_state (same object).
    True: final states written back in place, indices marked by pad = padding (zero output rows).
    num_accepted_tokens [B] int32: initial_state_indices is [B,T] spec-decode slots (read slot acc-1, write
    the state after token t to slot t; pool updated). Gates, norm, layout, has_initial_state: as decode.
    Returns (output [B,T,HV,D] bf16, final_state)."""

def cuda_unavailable_reason() -> Optional[str]:
    """None when the CUDA backend can run here, else why not."""
