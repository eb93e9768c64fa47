//! Helpers shared by the planner's tests: the test device and shape builders (built on `Shape::qk4_v8`), and short
//! names for the choices the tests inspect.
#![allow(dead_code)] // (each test file uses some of them)

use gdn_core::Op;
use gdn_cuda::kernels::registry::{self, StateDtype};
use gdn_cuda::plan::prefill::{self, PrefillPlan};
use gdn_cuda::plan::{select, DeviceCaps, PlanKind, Rejection, Shape};

/// The test device: a 132-SM Hopper with the H100's 80 GB (`DeviceCaps::HOPPER_132`).
pub const H100: DeviceCaps = DeviceCaps::HOPPER_132;

/// A call of `op` with `n` requests of `t` tokens (decode: t = 1; prefill: t = 0 and one token per sequence),
/// qk4_v8, head size 128, no length hint.
pub fn shape(op: Op, n: usize, t: usize, state: StateDtype) -> Shape {
    Shape::qk4_v8(op, n, t, state)
}

/// A prefill call: `n` sequences, `t` tokens in all, `hv` value heads (H = hv/2 when hv is a multiple of 4, else
/// 1), no length hint.
pub fn pre(n: usize, t: usize, hv: usize, state: StateDtype) -> Shape {
    Shape {
        num_q_heads: if hv.is_multiple_of(4) { hv / 2 } else { 1 },
        num_v_heads: hv,
        total_tokens: t,
        ..shape(Op::Prefill, n, 0, state)
    }
}

/// A prefill call without a length hint (fp32 state): `n` sequences, `t` tokens in all, `hv` value heads.
pub fn blind(n: usize, t: usize, hv: usize) -> Shape {
    pre(n, t, hv, StateDtype::F32)
}

/// A prefill call of `n` sequences, `t` tokens in all, qk4_v8, fp32 state, whose longest sequence has `longest`
/// tokens (the caller's hint; 0: none).
pub fn hinted(n: usize, t: usize, longest: usize) -> Shape {
    Shape {
        max_seq_len: longest,
        ..blind(n, t, 8)
    }
}

/// The kernel `select::choose` picks for `s` on the test device.
pub fn pick(s: &Shape) -> &'static str {
    select::choose(s, &H100, None).unwrap().variant.name
}

/// The fused tile `select::choose` picks for `s`, by the name of its plain build (the longest-first and split swaps
/// aside; they have their own tests).
pub fn tile(s: &Shape) -> &'static str {
    let v = select::choose(s, &H100, None).unwrap().variant;
    match v.longest_first || registry::is_split(v) {
        true => {
            registry::candidates(v.family, v.state)
                .find(|w| w.ctas_per_head == v.ctas_per_head)
                .expect("a longest-first tile has a plain build")
                .name
        }
        false => v.name,
    }
}

/// The host's own plan (`GDN_KERNEL=host`: without a length hint, the equal-length rule; the device plan that
/// replaces it for some blind calls is tested in tests/device_plan.rs).
pub fn plan(s: &Shape) -> PrefillPlan {
    prefill::choose(s, &H100, Some("host")).unwrap()
}

pub fn kind(s: &Shape) -> PlanKind {
    plan(s).kind()
}

/// The chunk64 plan, forced by naming the walk of the call's state dtype.
pub fn plan64(s: &Shape) -> Result<PrefillPlan, Rejection> {
    let walk = match s.state {
        StateDtype::F32 => "gdn_prefill64_walk_f32",
        StateDtype::BF16 => "gdn_prefill64_walk_bf16",
    };
    prefill::choose(s, &H100, Some(walk))
}
