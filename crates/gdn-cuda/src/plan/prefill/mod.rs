//! Prefill plans. `choose` decides, in this order: an override (`GDN_KERNEL`, `overrides`) forces a plan; with the
//! longest sequence's length hinted, the host plans (`host`); without it, the device plan (`device`) where it pays
//! in expectation, else the host's plan for equal lengths.
//!
//! The modules, each depending only on those listed after it (and on `plan::grid` and the plan types):
//! `overrides` → `device` → `host` → `cost`, `workspace`, `types`. `device` receives the host's planner as a function
//! argument (`device::HostPlanner`); `cost` is a leaf (µs from the shape; every calibrated constant).
//!
//! The plans (`PrefillPlan`), chosen by the estimates of `cost` (calibrated on the H200):
//! - **fused** (`prefill_fused/`): one kernel; each CTA owns BV value columns of one (sequence, value head) and
//!   redoes the chunk preparation that all BV-tiles of a head share. With the longest length known, BV = the tile
//!   width with the smallest estimate: wide tiles do less work in all, narrow ones have a shorter chain per chunk,
//!   so a long sequence among short ones wants narrow tiles. Without it, BV = the largest of {128, 64, 32, 16} with
//!   N·HV·128/BV ≥ 0.9·SMs, else 16 (a hedge against skew the host cannot see; see `host`). HV must be even (the
//!   kernel copies gates as aligned bf16 pairs). Where a second wave of CTAs could wait on a long sequence, the tile
//!   runs its longest-first build, or its split build (a long sequence on two CTAs).
//! - **chunk64** (`prefill_chunk64/`): two launches on the stream: `gdn_prefill64_prep` prepares every 64-token
//!   chunk of every (sequence, value head) into a device workspace in parallel over chunks, then
//!   `gdn_prefill64_walk_{f32,bf16}` walks each sequence's chunks on wgmma (N·HV·2 CTAs, one warpgroup per 64-row
//!   value half). Picked when its estimate (`cost::cp_us` with one segment) is the smallest, as on many medium
//!   sequences; and where the fused kernels cannot run: an odd HV, when cp is not estimated faster (if its
//!   workspace `(T/64 + N + 1)·HV·WS_CHUNK_BYTES ≤ workspace_cap` and its launches fit; otherwise the call is
//!   rejected as `OddValueHeads`).
//! - **cp** (context parallel, `prefill_chunk64/`): the chunk64 prep, then three launches that cut each sequence
//!   into segments of L chunks and walk them in parallel (pass 1: segment 0 for real plus a transition and a
//!   zero-state summary of each middle segment; scan: the segments' start states, 8 value rows per CTA when the
//!   CTAs of the sequences that can have three segments fit one wave (`host::cp_scan_kernel`,
//!   `cost::scan_work_seqs`; the grid covers `grid::prefill64_scan_seqs` of them), else 16; pass 3: segments 1..
//!   for real). The passes' walk CTAs hold one warpgroup (a 64-row value half: `…_cp_pass{1,3}_*`) or two (a whole
//!   head: `…_cp_pass{1,3}w_*`, plan kind **cp2**; more rows per SM, half the CTAs, so about twice the segments for
//!   the same fill). Picked when its best estimate (`cost::cp_candidates`: either walk form, G segments of the
//!   longest sequence, 3 ≤ G ≤ 64, segments ≥ 4 chunks, pass 3 in one wave of CTAs and pass 1 in at most two)
//!   beats the fused one: few long sequences, or one long sequence among short ones when the caller gives its
//!   length. Nothing is read on the host: without a hint the lengths are taken as equal; any L is correct for any
//!   lengths (the hint only steers speed).
//! - **device** (`device`): without a length hint, where the model's pick changes with the longest length and the
//!   equal-length pick would cost much at the skewed end, every candidate launch runs in turn and the kernels read
//!   the longest length from `cu_seqlens` to decide which one runs the call.

pub mod cost;
pub mod device;
pub mod host;
pub mod overrides;
pub mod types;
pub mod workspace;

pub use types::{DevicePlan, DeviceRoute, DeviceRun, PrefillPlan, Thresholds};

use crate::plan::grid::check_call;
use crate::plan::{DeviceCaps, Rejection, Shape};
use gdn_core::Op;

/// Chooses the prefill plan for `s` (a prefill shape) on a device with `caps`; `force` (`GDN_KERNEL`) forces one
/// (`overrides`: `host`, a device route, or a kernel name). See the module comment for the automatic rule.
pub fn choose(s: &Shape, caps: &DeviceCaps, force: Option<&str>) -> Result<PrefillPlan, Rejection> {
    debug_assert_eq!(s.op, Op::Prefill, "prefill::choose takes prefill shapes");
    check_call(s, caps)?;
    if let Some(name) = force {
        return overrides::forced(s, caps, name);
    }
    if s.max_seq_len > 0 {
        return host::plan(s, caps);
    }
    // (the device plan first: a remembered decision needs no host plan)
    match device::automatic(s, caps, &host::plan) {
        Some(plan) => Ok(plan),
        None => host::plan(s, caps),
    }
}
