//! The chunk64 / cp workspace (GPU-free): its byte formula as each plan reports it, the cap (an eighth of device
//! memory, 1–16 GiB) that no plan exceeds — past it the automatic rule runs fused and a forced plan is refused,
//! naming the bytes.

mod common;

use common::{kind, plan, plan64, pre, H100};
use gdn_cuda::kernels::registry::{prefill64, StateDtype};
use gdn_cuda::plan::prefill::workspace::{self, workspace_cap, DP_COUNTER_BYTES};
use gdn_cuda::plan::prefill::{self, DeviceRoute};
use gdn_cuda::plan::{DeviceCaps, PlanKind, Rejection, Shape};

#[test]
fn chunk64_workspace_cap_and_formula() {
    use StateDtype::F32;
    let per_slot = 8 * prefill64::WS_CHUNK_BYTES; // HV = 8
    let order = prefill64::WORKSPACE_ALIGN; // the walk's order: one sequence's 8 bytes, rounded up to 256
    let cap = workspace_cap(&H100);
    assert_eq!(cap, 10 << 30); // an eighth of 80 GB
    let max_slots = (cap - order) / per_slot;
    // slots = T/64 + N + 1 with N = 1: the largest T whose workspace fits
    let t_max = ((max_slots - 2) * 64 + 63) as usize;
    let p = plan64(&pre(1, t_max, 8, F32)).unwrap();
    assert_eq!(p.kind(), PlanKind::Chunk64);
    assert_eq!(p.workspace_bytes(), max_slots * per_slot + order);
    assert!(p.workspace_bytes() <= cap);
    let p = plan(&pre(1, t_max + 1, 8, F32));
    assert_eq!(p.kind(), PlanKind::Fused, "{}", p.why());
    assert_eq!(p.workspace_bytes(), 0);
    // forced past the cap: a rejection naming the bytes
    let e = prefill::choose(
        &pre(1, t_max + 1, 8, F32),
        &H100,
        Some("gdn_prefill64_walk_f32"),
    )
    .unwrap_err();
    assert_eq!(
        e,
        Rejection::Workspace {
            need: (max_slots + 1) * per_slot + order,
            max: cap
        }
    );
    assert!(e.to_string().contains("workspace"));
    // 64-bit all the way: millions of tokens, thousands of sequences, many heads
    let big = pre(4096, 4 << 20, 64, F32);
    assert_eq!(
        workspace::prefill64_workspace_bytes(4 << 20, 4096, 64),
        (65_536 + 4096 + 1) * 64 * prefill64::WS_CHUNK_BYTES + 4096 * 8
    );
    assert_eq!(kind(&big), PlanKind::Fused);
    assert!(matches!(
        prefill::choose(&big, &H100, Some("gdn_prefill64_prep")),
        Err(Rejection::Workspace { need, .. }) if need > u32::MAX as u64
    ));
}

#[test]
fn cp_past_the_workspace_cap_runs_fused_and_is_refused_when_forced() {
    let huge = pre(1, 1 << 30, 8, StateDtype::F32);
    assert_eq!(kind(&huge), PlanKind::Fused);
    assert!(matches!(
        prefill::choose(&huge, &H100, Some("gdn_prefill64_cp_pass3_f32")),
        Err(Rejection::Workspace { .. })
    ));
}

#[test]
fn workspace_cap_follows_device_memory() {
    use StateDtype::F32;
    let h200 = DeviceCaps {
        mem_bytes: 141 << 30,
        ..H100
    };
    assert_eq!(workspace_cap(&h200), 16 << 30);
    let small = DeviceCaps {
        mem_bytes: 4 << 30,
        ..H100
    };
    assert_eq!(workspace_cap(&small), 1 << 30);
    // a million tokens of one sequence (qk4_v8: ~2.3 GB of workspace) runs context parallel on an H100, and fused
    // where the cap is 1 GiB
    let long = pre(1, 1 << 20, 8, F32);
    let p = plan(&long);
    assert!(
        matches!(
            p.kind(),
            PlanKind::ContextParallel | PlanKind::ContextParallelWide
        ),
        "{}",
        p.why()
    );
    assert!(p.workspace_bytes() > 1 << 30);
    assert_eq!(
        prefill::choose(&long, &small, None).unwrap().kind(),
        PlanKind::Fused
    );
}

#[test]
fn no_plan_exceeds_the_workspace_cap() {
    // chosen or forced, on devices of 4, 80 and 141 GB; a device plan adds only its counters
    for mem in [4u64 << 30, 80 << 30, 141 << 30] {
        let caps = DeviceCaps {
            mem_bytes: mem,
            ..H100
        };
        let cap = workspace_cap(&caps);
        for (n, t) in [
            (1usize, 1usize << 20),
            (1, 1 << 22),
            (8, 1 << 22),
            (40, 8192),
            (200, 1 << 23),
        ] {
            for hv in [3usize, 8, 32] {
                for hint in [0, t] {
                    let s = Shape {
                        max_seq_len: hint,
                        ..pre(n, t, hv, StateDtype::F32)
                    };
                    let forces = [
                        None,
                        Some("gdn_prefill64_prep"),
                        Some("gdn_prefill64_cp_scan"),
                    ]
                    .into_iter()
                    .chain(DeviceRoute::FORCED.map(|r| Some(r.override_name())));
                    for force in forces {
                        let Ok(p) = prefill::choose(&s, &caps, force) else {
                            continue;
                        };
                        let limit = match p.kind() {
                            PlanKind::Device => {
                                cap.next_multiple_of(DP_COUNTER_BYTES) + DP_COUNTER_BYTES
                            }
                            _ => cap,
                        };
                        assert!(
                            p.workspace_bytes() <= limit,
                            "{s:?} {force:?} on {mem} bytes: {} > {limit}",
                            p.workspace_bytes()
                        );
                    }
                }
            }
        }
    }
}
