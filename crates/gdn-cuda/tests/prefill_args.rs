//! Prefill launch arguments in the serving modes (GPU-free): `Args::for_problem` carries a serving problem's pool,
//! gates, layout, offsets' width and checkpoints into both prefill params blocks (the fused plan's and the chunk64 /
//! cp plans'), and `PrefillArgs::validate` / `validate_plan` refuse, by the argument's name, what the kernels
//! cannot take.

use gdn_core::workload::{generate, ServingDraw, WorkloadSpec};
use gdn_core::{GateMode, Heads, PadRule, Problem, Serving, StateLayout};
use gdn_cuda::abi::params::{sv, ServingParams};
use gdn_cuda::plan::prefill::{self, PrefillPlan};
use gdn_cuda::plan::{DeviceCaps, PlanKind};
use gdn_cuda::{Args, DevicePtrs, PrefillArgs};

fn problem(spec: &WorkloadSpec) -> Problem {
    spec.problem(&generate(spec, 1)).unwrap()
}

fn heads() -> Heads {
    Heads::new(4, 8, 128).unwrap()
}

/// Distinct, 256-byte aligned stand-in addresses for every tensor; `new_state` is the pool (`state`) when `pool`.
fn ptrs(pool: bool) -> DevicePtrs {
    let p = |i: u64| 0x1000_0000 + (i << 8);
    DevicePtrs {
        q: p(1),
        k: p(2),
        v: p(3),
        a: p(4),
        b: p(5),
        a_log: p(6),
        dt_bias: p(7),
        state: p(8),
        new_state: if pool { p(8) } else { p(9) },
        out: p(11),
        cu_seqlens: p(13),
        workspace: p(14),
        workspace_bytes: 4096,
        gate: p(20),
        beta: p(21),
        pool_indices: p(22),
        has_initial: p(23),
        checkpoints: p(24),
        checkpoint_starts: p(25),
        ..Default::default()
    }
}

fn prefill(spec: &WorkloadSpec, d: &DevicePtrs) -> (Problem, PrefillArgs) {
    let p = problem(spec);
    match Args::for_problem(&p, d) {
        Args::Prefill(a) => (p, a),
        Args::Recurrent(_) => panic!("prefill builds prefill arguments"),
    }
}

/// Every serving capability at once: a null-slot pool with padding and fresh slots, precomputed linear gates with
/// bf16 beta, the K-first layout, the in-kernel q/k norm, int32 offsets and checkpoints every 128 tokens.
fn serving_spec() -> WorkloadSpec {
    let mut s = WorkloadSpec::prefill(heads(), &[300, 0, 64, 129]);
    s.serving = ServingDraw {
        options: Serving {
            qk_l2norm: true,
            layout: StateLayout::KFirst,
            pad: PadRule::NullSlot,
            checkpoint_every: 128,
        },
        gates: GateMode::Linear,
        pool_rows: 9,
        pad_front: 1,
        has_initial_state: true,
        cu_i32: true,
        ..Default::default()
    };
    s
}

#[test]
fn serving_prefill_carries_the_block_into_both_params() {
    let spec = serving_spec();
    let d = ptrs(true);
    let (p, a) = prefill(&spec, &d);
    a.validate().unwrap();
    assert_eq!(a.num_state_rows, 9, "the pool's rows");
    assert_eq!(a.num_state_rows, p.dims.state_rows);
    let (fused, c64) = (a.params(), a.params64());
    assert_eq!(fused.serving, a.serving.params());
    assert_eq!(c64.serving, fused.serving);
    assert_eq!((fused.num_state_rows, c64.num_state_rows), (9, 9));
    let sp = fused.serving;
    assert_eq!(
        (sp.gate, sp.beta, sp.pool_indices, sp.has_initial),
        (d.gate, d.beta, d.pool_indices, d.has_initial)
    );
    assert_eq!(
        (sp.checkpoints, sp.checkpoint_starts),
        (d.checkpoints, d.checkpoint_starts)
    );
    assert_eq!(sp.checkpoint_every, 128);
    let want =
        sv::GATE_LINEAR | sv::BETA_BF16 | sv::QK_NORM | sv::KFIRST | sv::PAD_NULL | sv::CU_I32;
    assert_eq!(sp.flags & want, want, "flags {:#x}", sp.flags);
    // the fused params keep the definition's fields where they were
    assert_eq!(
        (fused.cu_seqlens, fused.state, fused.new_state),
        (d.cu_seqlens, d.state, d.state)
    );
    assert_eq!(fused.lead_rows, 16);
}

#[test]
fn definition_prefill_passes_a_zero_block() {
    let spec = WorkloadSpec::prefill(heads(), &[17, 40]);
    let mut d = ptrs(false);
    // the backend passes 0 for the serving tensors a definition call does not have
    (
        d.gate,
        d.beta,
        d.pool_indices,
        d.has_initial,
        d.checkpoints,
        d.checkpoint_starts,
    ) = (0, 0, 0, 0, 0, 0);
    let (_, a) = prefill(&spec, &d);
    a.validate().unwrap();
    assert_eq!(a.params().serving, ServingParams::default());
    assert_eq!(a.params64().serving, ServingParams::default());
    assert_eq!(a.params().num_state_rows, 2);
}

/// What the prefill kernels cannot take is refused by the argument's name; precomputed gates make the raw gate
/// inputs optional.
#[test]
fn prefill_validation_refuses_by_name() {
    let (_, a) = prefill(&serving_spec(), &ptrs(true));
    a.validate().unwrap();
    let refused = |f: &dyn Fn(&mut PrefillArgs), name: &str| {
        let mut b = a;
        f(&mut b);
        let e = b.validate().expect_err(name).to_string();
        assert!(e.contains(name), "{name}: {e}");
    };
    refused(&|b| b.state = 0, "state");
    refused(&|b| b.new_state = b.state + 256, "new_state");
    refused(
        &|b| b.serving.num_accepted = 0x5000_0000,
        "num_accepted_tokens",
    );
    refused(&|b| b.serving.checkpoint_every = 96, "checkpoint_every");
    refused(&|b| b.serving.checkpoints = 0, "checkpoints");
    refused(&|b| b.serving.checkpoint_starts = 0, "checkpoint_cu_starts");
    refused(&|b| b.serving.gate = 0, "alpha");
    refused(&|b| b.serving.beta = 0, "beta");
    refused(&|b| b.cu_seqlens += 2, "cu_seqlens");
    refused(&|b| b.total_tokens = 1 << 31, "total_tokens");
    refused(
        &|b| {
            b.serving.pool_indices = 0;
            b.serving.state_row_stride = 8 * 128 * 128 + 8;
        },
        "state",
    );
    refused(&|b| b.serving.state_row_stride = 100, "state");
    // int64 offsets need 8-byte alignment, int32 ones 4
    let mut b = a;
    b.cu_seqlens += 4;
    b.validate().unwrap();
    b.serving.cu_i32 = false;
    assert!(b.validate().unwrap_err().to_string().contains("cu_seqlens"));
    // precomputed gates: a, b, A_log, dt_bias are not read
    let mut b = a;
    (b.a, b.b, b.a_log, b.dt_bias) = (0, 0, 0, 0);
    b.validate().unwrap();
    b.serving.gates = GateMode::Raw;
    assert!(b.validate().unwrap_err().to_string().contains("a"));
    // a pool's row stride is accepted
    let mut b = a;
    b.serving.state_row_stride = 8 * 128 * 128 + 64;
    b.validate().unwrap();
}

/// The fused kernels copy bf16 gate words as aligned pairs: a bf16 beta must be 4-byte aligned where a fused tile
/// may run; the chunk64 prep reads single elements.
#[test]
fn fused_plans_need_a_word_aligned_bf16_beta() {
    let (_, mut a) = prefill(&serving_spec(), &ptrs(true));
    a.serving.beta += 2;
    a.validate().unwrap();
    let forced = |name: &str| -> PrefillPlan {
        prefill::choose(&a.shape(), &DeviceCaps::HOPPER_132, Some(name)).unwrap()
    };
    let fused = forced("gdn_prefill_f32_bv64");
    let chunk64 = forced("gdn_prefill64_walk_f32");
    assert_eq!(
        (fused.kind(), chunk64.kind()),
        (PlanKind::Fused, PlanKind::Chunk64)
    );
    let e = a.validate_plan(&fused).unwrap_err().to_string();
    assert!(e.contains("beta"), "{e}");
    a.validate_plan(&chunk64).unwrap();
    a.serving.beta_bf16 = false;
    a.serving.beta += 2; // (f32: 4-byte aligned again)
    a.validate_plan(&fused).unwrap();
}
