//! Decode / MTP (`recurrent.cu`): one kernel per call, from `RECURRENT_TABLE`, whose batch ranges were measured
//! on an H200 with qk4_v8. Work per launch scales with B·HV and with 1/SMs, so the batch is first converted to its
//! qk4_v8-on-132-SMs equivalent `ceil(B · HV/8 · 132/SMs)` (the kernel notes' advice for other head counts; not
//! measured beyond qk4_v8).
//!
//! The table's kernels are recurrent.cu's definition builds: they read no serving field. A call that uses a
//! serving mode (`Build::Serving`) runs the `_sv` build of the same row (the same launch, every serving mode
//! compiled in); one whose state tensors are K-first (`Build::KFirst`) runs the `_kf` kernels of
//! `RECURRENT_KFIRST_TABLE`: a mapping of their own (recurrent.cu, "K-first mapping": lanes along V in whole
//! 128-byte lines, the K rows split over a CTA's 4 warps). Their ranges are not measured: each family switches
//! from its head-major to its `_lin` kernel (the same launch in state-memory order) where the k-last table does.

use crate::kernels::registry::{self, Family, StateDtype, Variant};
use crate::plan::grid::{check_call, configure, family_of, named};
use crate::plan::{DeviceCaps, Launch, Rejection, Shape};

/// The configuration the recurrent thresholds were measured on: HV = 8 value heads, 132 SMs.
pub const TUNED_NUM_V_HEADS: u64 = 8;
pub const TUNED_SM_COUNT: u64 = 132;
/// Decode / MTP: (family, state, largest equivalent batch (inclusive), kernel), in increasing batch order.
pub const RECURRENT_TABLE: &[(Family, StateDtype, u64, &str)] = &[
    (
        Family::Decode,
        StateDtype::F32,
        2,
        "gdn_recurrent_f32_t1_v4r2w8",
    ),
    (
        Family::Decode,
        StateDtype::F32,
        12,
        "gdn_recurrent_f32_t1_v4r2w4",
    ),
    (
        Family::Decode,
        StateDtype::F32,
        24,
        "gdn_recurrent_f32_t1_v8r4w4",
    ),
    (
        Family::Decode,
        StateDtype::F32,
        u64::MAX,
        "gdn_recurrent_f32_t1_v8r4w1_lin",
    ),
    (
        Family::Decode,
        StateDtype::BF16,
        24,
        "gdn_recurrent_bf16_t1_v8r2w4",
    ),
    (
        Family::Decode,
        StateDtype::BF16,
        96,
        "gdn_recurrent_bf16_t1_v8r4w2",
    ),
    (
        Family::Decode,
        StateDtype::BF16,
        u64::MAX,
        "gdn_recurrent_bf16_t1_v8r4w4_lin",
    ),
    (
        Family::Mtp,
        StateDtype::F32,
        127,
        "gdn_recurrent_f32_tn_v8r4w2",
    ),
    (
        Family::Mtp,
        StateDtype::F32,
        u64::MAX,
        "gdn_recurrent_f32_tn_v8r4w2_lin",
    ),
    (
        Family::Mtp,
        StateDtype::BF16,
        31,
        "gdn_recurrent_bf16_tn_v4r4w2",
    ),
    (
        Family::Mtp,
        StateDtype::BF16,
        u64::MAX,
        "gdn_recurrent_bf16_tn_v4r4w2_lin",
    ),
];

/// Decode / MTP with K-first state tensors: rows as in `RECURRENT_TABLE`.
pub const RECURRENT_KFIRST_TABLE: &[(Family, StateDtype, u64, &str)] = &[
    (
        Family::Decode,
        StateDtype::F32,
        24,
        "gdn_recurrent_f32_t1_v8r4w4_kf",
    ),
    (
        Family::Decode,
        StateDtype::F32,
        u64::MAX,
        "gdn_recurrent_f32_t1_v8r4w4_lin_kf",
    ),
    (
        Family::Decode,
        StateDtype::BF16,
        96,
        "gdn_recurrent_bf16_t1_v8r8w4_kf",
    ),
    (
        Family::Decode,
        StateDtype::BF16,
        u64::MAX,
        "gdn_recurrent_bf16_t1_v8r8w4_lin_kf",
    ),
    (
        Family::Mtp,
        StateDtype::F32,
        127,
        "gdn_recurrent_f32_tn_v8r4w4_kf",
    ),
    (
        Family::Mtp,
        StateDtype::F32,
        u64::MAX,
        "gdn_recurrent_f32_tn_v8r4w4_lin_kf",
    ),
    (
        Family::Mtp,
        StateDtype::BF16,
        31,
        "gdn_recurrent_bf16_tn_v8r8w4_kf",
    ),
    (
        Family::Mtp,
        StateDtype::BF16,
        u64::MAX,
        "gdn_recurrent_bf16_tn_v8r8w4_lin_kf",
    ),
];

/// Which build of recurrent.cu's kernels a call needs (its kernels' name suffix).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Build {
    /// No suffix: the definitions' semantics; the kernels read no field of the serving block.
    Definition,
    /// `_sv`: every serving mode, k-last state tensors (and the definitions too).
    Serving,
    /// `_kf`: every serving mode, K-first state tensors.
    KFirst,
}

/// The suffix of the serving builds of the table's kernels.
pub const SERVING_SUFFIX: &str = "_sv";

impl Build {
    /// The build a recurrent kernel is (by its name).
    pub fn of(v: &Variant) -> Build {
        if v.name.ends_with("_kf") {
            Build::KFirst
        } else if v.name.ends_with(SERVING_SUFFIX) {
            Build::Serving
        } else {
            Build::Definition
        }
    }

    /// Whether a kernel of this build computes a call that needs `call` (a serving build also runs the
    /// definitions' k-last calls).
    pub fn runs(self, call: Build) -> bool {
        self == call || (self == Build::Serving && call == Build::Definition)
    }

    pub fn name(self) -> &'static str {
        match self {
            Build::Definition => "definition",
            Build::Serving => "serving (k-last)",
            Build::KFirst => "serving (K-first)",
        }
    }
}

/// The batch of the tuned configuration (HV = 8, 132 SMs) with the same work per SM: ceil(B·HV/8·132/SMs).
pub fn equivalent_batch(batch: u64, num_v_heads: u64, sm_count: u64) -> u64 {
    (batch * num_v_heads * TUNED_SM_COUNT).div_ceil(TUNED_NUM_V_HEADS * sm_count.max(1))
}

/// The kernel of a definition-mode decode / MTP call `s` on a device with `caps` (`choose_build`).
pub fn choose(s: &Shape, caps: &DeviceCaps, force: Option<&str>) -> Result<Launch, Rejection> {
    choose_build(s, caps, force, Build::Definition)
}

/// The kernel of a decode / MTP call `s` that needs `build`, on a device with `caps`: the build's table row for its
/// equivalent batch, or the variant `force` names (of the call's family and state dtype, of a build that runs the
/// call; it still passes every limit check).
pub fn choose_build(
    s: &Shape,
    caps: &DeviceCaps,
    force: Option<&str>,
    build: Build,
) -> Result<Launch, Rejection> {
    check_call(s, caps)?;
    let family = family_of(s.op);
    let (variant, why) = match force {
        Some(name) => {
            let v = named(name, family, s.state)?;
            if !Build::of(v).runs(build) {
                return Err(Rejection::Override {
                    name: name.to_string(),
                    problem: format!(
                        "it is a {} kernel; this call needs the {} build",
                        Build::of(v).name(),
                        build.name()
                    ),
                });
            }
            (v, format!("forced by override '{name}'"))
        }
        None => from_table(s, caps, family, build)?,
    };
    configure(variant, s, caps, why)
}

/// The table's kernel for `s`, with why.
fn from_table(
    s: &Shape,
    caps: &DeviceCaps,
    family: Family,
    build: Build,
) -> Result<(&'static Variant, String), Rejection> {
    let sms = (caps.sm_count as u64).max(1);
    let equiv = equivalent_batch(s.num_seqs as u64, s.num_v_heads as u64, sms);
    let table = match build {
        Build::Definition | Build::Serving => RECURRENT_TABLE,
        Build::KFirst => RECURRENT_KFIRST_TABLE,
    };
    let row = table
        .iter()
        .find(|(f, st, max_b, _)| *f == family && *st == s.state && equiv <= *max_b)
        .ok_or(Rejection::NoVariant {
            family,
            state: s.state,
        })?;
    let v = match build {
        Build::Serving => registry::find(&format!("{}{SERVING_SUFFIX}", row.3)),
        _ => registry::find(row.3),
    }
    .expect("every recurrent table row and its serving build are registered");
    let range = if row.2 == u64::MAX {
        "the last range".to_string()
    } else {
        format!("<= {}", row.2)
    };
    Ok((v, format!("equivalent batch {equiv}: {range}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gdn_core::Op;

    #[test]
    fn one_decode_request_runs_the_smallest_batch_kernel() {
        let s = Shape {
            op: Op::Decode,
            num_q_heads: 4,
            num_v_heads: 8,
            head_size: 128,
            num_seqs: 1,
            seq_len: 1,
            total_tokens: 1,
            max_seq_len: 0,
            state: StateDtype::F32,
        };
        let c = choose(&s, &DeviceCaps::HOPPER_132, None).unwrap();
        assert_eq!(c.variant.name, "gdn_recurrent_f32_t1_v4r2w8");
        let sv = choose_build(&s, &DeviceCaps::HOPPER_132, None, Build::Serving).unwrap();
        assert_eq!(sv.variant.name, "gdn_recurrent_f32_t1_v4r2w8_sv");
        let k = choose_build(&s, &DeviceCaps::HOPPER_132, None, Build::KFirst).unwrap();
        assert_eq!(k.variant.name, "gdn_recurrent_f32_t1_v8r4w4_kf");
    }
}
