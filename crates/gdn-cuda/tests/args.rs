//! `Args::for_problem`, the one builder of launch arguments from a validated problem (GPU-free): sizes, heads,
//! scale and state dtype come from the problem, and the state destination follows the operation and MTP mode.

use gdn_core::workload::{generate, WorkloadSpec};
use gdn_core::{DType, Heads, MtpMode, Problem};
use gdn_cuda::{Args, DevicePtrs, StateDtype};

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
