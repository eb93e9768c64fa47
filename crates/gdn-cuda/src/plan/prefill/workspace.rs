//! The device workspace of the chunk64, context-parallel and device plans: its byte formulas (64-bit,
//! saturating: the chunk records, the walk order, the segment states, the device plan's counters; pure
//! functions of T, N, HV and the segment length, from the slot counts of `plan::grid`) and its cap.

use crate::kernels::registry::prefill64;
use crate::plan::grid::{prefill64_seg_slots, prefill64_slots};
use crate::plan::DeviceCaps;

/// Bounds of the largest chunk64 / cp workspace (bytes; `workspace_cap`): a call that would need more than the cap is
/// refused (forced), runs fused (automatic) or, with an odd HV, is rejected.
pub const WORKSPACE_CAP_MIN: u64 = 1 << 30;
pub const WORKSPACE_CAP_MAX: u64 = 16 << 30;

/// The largest chunk64 / cp workspace on a device: an eighth of its memory, between `WORKSPACE_CAP_MIN` and
/// `WORKSPACE_CAP_MAX` (H100 80 GB: 10 GiB, H200: 16 GiB). The workspace is ~272 bytes per token and value head
/// (`prefill64_workspace_bytes`), so cp runs up to ~37M token-heads on an H100 (qk4_v8: 4.6M tokens); past the cap
/// the automatic plan is fused, several times slower on such calls than cp.
pub fn workspace_cap(caps: &DeviceCaps) -> u64 {
    (caps.mem_bytes / 8).clamp(WORKSPACE_CAP_MIN, WORKSPACE_CAP_MAX)
}

/// Device memory after a device plan's workspace for the persistent launches' item counters (`Prefill64PlanParams::
/// claimed`): one u32 per launch, rounded to the workspace's alignment.
pub const DP_COUNTER_BYTES: u64 = 256;

/// Workspace bytes of a device plan whose chunk64 and cp launches need `chunk64_bytes` and `cp_bytes`: the larger,
/// rounded up to `DP_COUNTER_BYTES`, then the counters.
pub fn device_plan_workspace_bytes(chunk64_bytes: u64, cp_bytes: u64) -> u64 {
    chunk64_bytes
        .max(cp_bytes)
        .next_multiple_of(DP_COUNTER_BYTES)
        + DP_COUNTER_BYTES
}

/// Workspace bytes of the context-parallel plan: the chunk records plus three f32 states per
/// (segment slot, value head) (64-bit, saturating).
pub fn prefill64_cp_workspace_bytes(
    total_tokens: u64,
    num_seqs: u64,
    num_v_heads: u64,
    seg_chunks: u64,
) -> u64 {
    prefill64_seg_slots(total_tokens, num_seqs, seg_chunks)
        .saturating_mul(num_v_heads)
        .saturating_mul(3 * prefill64::CP_STATE_BYTES)
        .saturating_add(prefill64_record_bytes(total_tokens, num_seqs, num_v_heads))
}

/// Bytes of the prep's chunk records, at the start of every prefill64 workspace: `slots · HV · WS_CHUNK_BYTES`
/// (64-bit; saturates instead of wrapping, so an absurd shape is rejected by the workspace cap rather than
/// under-allocated).
pub fn prefill64_record_bytes(total_tokens: u64, num_seqs: u64, num_v_heads: u64) -> u64 {
    prefill64_slots(total_tokens, num_seqs)
        .saturating_mul(num_v_heads)
        .saturating_mul(prefill64::WS_CHUNK_BYTES)
}

/// Workspace bytes of the chunk64 plan: the records, then the walk's order (`walk_order` in the chunk64 kernels:
/// the sequences longest first, i64 [N], written by the prep), rounded up to the workspace alignment.
pub fn prefill64_workspace_bytes(total_tokens: u64, num_seqs: u64, num_v_heads: u64) -> u64 {
    let order = num_seqs
        .saturating_mul(8)
        .div_ceil(prefill64::WORKSPACE_ALIGN)
        .saturating_mul(prefill64::WORKSPACE_ALIGN);
    prefill64_record_bytes(total_tokens, num_seqs, num_v_heads).saturating_add(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill64_workspace_formula_is_64_bit() {
        assert_eq!(prefill64_slots(0, 0), 1);
        assert_eq!(prefill64_slots(63, 1), 2);
        assert_eq!(prefill64_slots(64, 1), 3);
        assert_eq!(prefill64_slots(65_536, 1), 1026);
        // 4M tokens in 4096 sequences, 64 value heads: 69633 slots, ~222 GB (past u32 and i32)
        let t = 4 << 20;
        assert_eq!(prefill64_slots(t, 4096), 65_536 + 4096 + 1);
        assert_eq!(
            prefill64_record_bytes(t, 4096, 64),
            69_633 * 64 * prefill64::WS_CHUNK_BYTES
        );
        // the chunk64 plan adds the walk's order: 8 bytes per sequence, rounded up to 256
        assert_eq!(
            prefill64_workspace_bytes(t, 4096, 64),
            69_633 * 64 * prefill64::WS_CHUNK_BYTES + 4096 * 8
        );
        assert_eq!(
            prefill64_workspace_bytes(64, 3, 8) - prefill64_record_bytes(64, 3, 8),
            256
        );
        assert!(prefill64_workspace_bytes(t, 4096, 64) > u32::MAX as u64);
        assert_eq!(prefill64_workspace_bytes(u64::MAX, 1, 8), u64::MAX);
        assert_eq!(prefill64_workspace_bytes(64, u64::MAX, 8), u64::MAX);
    }

    #[test]
    fn cp_workspace_formula() {
        // the records, then three f32 states per (segment slot, value head)
        assert_eq!(
            prefill64_cp_workspace_bytes(65_536, 1, 8, 128),
            prefill64_record_bytes(65_536, 1, 8) + (1026 / 128 + 2) * 8 * 3 * 65_536
        );
    }
}
