//! `Args::for_problem`, the one builder of launch arguments from a validated problem (GPU-free): sizes, heads,
//! scale and state dtype come from the problem, and the state destination follows the operation and MTP mode;
//! the recurrent arguments' serving validation, build and params block.

use gdn_core::workload::{generate, ServingDraw, WorkloadSpec};
use gdn_core::{DType, GateMode, Heads, MtpMode, PadRule, Problem, Serving, StateLayout};
use gdn_cuda::abi::params::{sv, ServingParams};
use gdn_cuda::plan::decode::Build;
use gdn_cuda::{Args, DevicePtrs, RecurrentArgs, StateDtype};

fn problem(spec: &WorkloadSpec) -> Problem {
    let tensors = generate(spec, 1);
    Problem::from_tensors(&spec.definition(), &tensors, &spec.options()).unwrap()
}

/// Distinct, 256-byte aligned stand-in addresses.
fn ptrs() -> DevicePtrs {
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
        new_state: p(9),
        intermediate: p(10),
        out: p(11),
        state_indices: p(12),
        cu_seqlens: p(13),
        workspace: p(14),
        workspace_bytes: 4096,
        ..Default::default()
    }
}

fn heads() -> Heads {
    Heads::new(4, 8, 128).unwrap()
}

#[test]
fn decode_writes_new_state_and_takes_sizes_from_the_problem() {
    let p = problem(&WorkloadSpec::decode(heads(), 3));
    let d = ptrs();
    let Args::Recurrent(a) = Args::for_problem(&p, &d) else {
        panic!("decode builds recurrent arguments");
    };
    assert_eq!((a.state, a.new_state, a.out), (d.state, d.new_state, d.out));
    assert_eq!(
        (a.batch, a.seq_len, a.num_state_rows),
        (3, 1, p.dims.state_rows)
    );
    assert_eq!((a.num_q_heads, a.num_v_heads, a.head_size), (4, 8, 128));
    assert_eq!(a.scale, p.scale);
    assert_eq!(a.state_dtype, Some(StateDtype::F32));
    assert!(a.validate().is_ok());
    assert_eq!(a.shape(), gdn_cuda::shape_of(&p));
}

#[test]
fn mtp_updates_the_pool_in_place_only_in_serving_mode() {
    let d = ptrs();
    for (mode, want) in [(MtpMode::Serving, d.state), (MtpMode::Definition, 0)] {
        let mut spec = WorkloadSpec::mtp(heads(), 2, 3);
        spec.mtp_mode = mode;
        let Args::Recurrent(a) = Args::for_problem(&problem(&spec), &d) else {
            panic!("MTP builds recurrent arguments");
        };
        assert_eq!((a.state, a.new_state), (d.state, want), "{mode:?}");
        assert_eq!(a.seq_len, 3);
    }
}

#[test]
fn prefill_passes_sequences_workspace_and_bf16_state() {
    let mut spec = WorkloadSpec::prefill(heads(), &[5, 70]);
    spec.state_dtype = DType::BF16;
    let p = problem(&spec);
    let d = ptrs();
    let Args::Prefill(a) = Args::for_problem(&p, &d) else {
        panic!("prefill builds prefill arguments");
    };
    assert_eq!(
        (a.cu_seqlens, a.workspace, a.workspace_bytes),
        (d.cu_seqlens, d.workspace, 4096)
    );
    assert_eq!((a.num_seqs, a.total_tokens), (2, 75));
    assert_eq!(a.max_seq_len, p.dims.max_seq_len.unwrap_or(0));
    assert_eq!(a.state_dtype, Some(StateDtype::BF16));
    assert!(a.validate().is_ok());
    assert_eq!(a.shape(), gdn_cuda::shape_of(&p));
}

/// `ptrs()` with stand-in addresses for the serving tensors in `which` and 0 for every tensor of `absent` (the
/// backend passes 0 for the tensors a problem does not have).
fn serving_ptrs(which: &[&str], absent: &[&str]) -> DevicePtrs {
    let p = |i: u64| 0x2000_0000 + (i << 8);
    let mut d = ptrs();
    for (name, field, addr) in [
        ("gate", &mut d.gate, p(1)),
        ("beta", &mut d.beta, p(2)),
        ("pool_indices", &mut d.pool_indices, p(3)),
        ("has_initial", &mut d.has_initial, p(4)),
        ("num_accepted", &mut d.num_accepted, p(5)),
    ] {
        *field = if which.contains(&name) { addr } else { 0 };
    }
    for (name, field) in [
        ("state_indices", &mut d.state_indices),
        ("intermediate", &mut d.intermediate),
    ] {
        if absent.contains(&name) {
            *field = 0;
        }
    }
    d
}

fn recurrent(spec: &WorkloadSpec, d: &DevicePtrs) -> RecurrentArgs {
    match Args::for_problem(&problem(spec), d) {
        Args::Recurrent(a) => a,
        Args::Prefill(_) => panic!("decode and MTP build recurrent arguments"),
    }
}

/// Serving calls validate, select their build and carry the serving block in the kernel's params.
#[test]
fn recurrent_serving_calls_select_their_build_and_carry_the_block() {
    let d = serving_ptrs(
        &["gate", "beta", "pool_indices", "has_initial"],
        &["state_indices", "intermediate"],
    );
    let mut pool = WorkloadSpec::decode(heads(), 5);
    pool.serving = ServingDraw {
        options: Serving {
            pad: PadRule::NullSlot,
            ..Default::default()
        },
        gates: GateMode::Log,
        pool_rows: 12,
        pad_front: 1,
        has_initial_state: true,
        ..Default::default()
    };
    let a = recurrent(&pool, &d);
    a.validate().unwrap();
    assert_eq!(a.build(), Build::Serving);
    let sp = a.params().serving;
    assert_eq!(sp, a.serving.params());
    assert_eq!(
        (sp.gate, sp.pool_indices, sp.has_initial),
        (d.gate, d.pool_indices, d.has_initial)
    );
    let want = sv::GATE_LOG | sv::PAD_NULL;
    assert_eq!(sp.flags & want, want);

    let mut slots = WorkloadSpec::mtp(heads(), 3, 4);
    slots.serving = ServingDraw {
        options: Serving {
            layout: StateLayout::KFirst,
            qk_l2norm: true,
            ..Default::default()
        },
        spec_slots: true,
        ..Default::default()
    };
    let d = serving_ptrs(&["num_accepted"], &["intermediate"]);
    let a = recurrent(&slots, &d);
    a.validate().unwrap();
    assert_eq!(a.build(), Build::KFirst);
    assert_eq!(
        a.new_state, d.state,
        "spec-decode slots write into the pool"
    );
    assert_eq!(a.params().serving.num_accepted, d.num_accepted);
    assert_ne!(a.params().serving.flags & sv::KFIRST, 0);

    let plain = recurrent(&WorkloadSpec::decode(heads(), 2), &ptrs());
    assert_eq!(plain.build(), Build::Definition);
    assert_eq!(plain.params().serving, ServingParams::default());
}

/// What decode and MTP cannot take is refused by the argument's name; precomputed gates make the raw gate inputs
/// optional.
#[test]
fn recurrent_validation_refuses_what_the_kernels_do_not_implement() {
    let a = recurrent(&WorkloadSpec::mtp(heads(), 2, 3), &serving_ptrs(&[], &[]));
    a.validate().unwrap();
    let (gate, beta, pool, accepted) = (0x3000_0000, 0x3000_0100, 0x3000_0200, 0x3000_0300);
    let refused = |f: &dyn Fn(&mut RecurrentArgs), name: &str| {
        let mut b = a;
        f(&mut b);
        let e = b.validate().expect_err(name).to_string();
        assert!(e.contains(name), "{name}: {e}");
    };
    refused(&|b| b.serving.checkpoint_every = 64, "checkpoint_every");
    refused(&|b| b.serving.cu_i32 = true, "cu_seqlens");
    refused(&|b| b.serving.pool_indices = pool, "state_indices");
    refused(
        &|b| b.serving.num_accepted = accepted,
        "intermediate_states_buffer",
    );
    refused(
        &|b| {
            b.serving.num_accepted = accepted;
            b.intermediate = 0;
            b.new_state = 0;
        },
        "new_state",
    );
    refused(
        &|b| {
            b.serving.num_accepted = accepted;
            b.intermediate = 0;
            b.state_indices = 0;
        },
        "initial_state_indices",
    );
    refused(&|b| b.serving.state_row_stride = 128, "state");
    refused(&|b| b.a = 0, "a");
    let mut g = a;
    g.serving.gates = GateMode::Linear;
    g.serving.gate = gate;
    g.serving.beta = beta;
    (g.a, g.b, g.a_log, g.dt_bias) = (0, 0, 0, 0);
    g.validate().unwrap();
    g.serving.beta = 0;
    assert!(g.validate().unwrap_err().to_string().contains("beta"));
}
