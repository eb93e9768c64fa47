//! The last validation of each operation, reused when a call's inputs have the same metadata.
//!
//! A serving engine calls the same operation with the same shapes again and again (one decode per layer per
//! step), and [`check_inputs`] costs ~2–3 µs of host time per call, a fifth of the binding's whole overhead
//! (measured on an H200 host). Its result depends only on the operation, `scale`, `update_pool`, the serving
//! options and, per input (serving tensors included), its presence, shape, element strides, dtype, device and
//! the address's residue modulo 16 (alignment: 16 bytes
//! on a device, the element size on the host, both divisors of 16). Those are compared exactly; on a match the
//! validated problem is reused with the new descriptors (so the new addresses). A call that fails validation
//! is never remembered, and a mismatch in any field validates from scratch.

use crate::args::{check_inputs, ArgError, Checked, Device};
use crate::desc::{Desc, Dims};
use gdn_core::{Op, Problem, RunOptions, Serving};
use std::cell::RefCell;

/// What `check_inputs` read of one descriptor: everything but the address, of which only its alignment class.
#[derive(PartialEq)]
struct Meta {
    shape: Dims<usize>,
    strides: Dims<i64>,
    dtype: std::borrow::Cow<'static, str>,
    device: i64,
    residue: u64,
}

impl Meta {
    fn of(d: &Desc) -> Meta {
        Meta {
            shape: d.1.clone(),
            strides: d.2.clone(),
            dtype: d.3.clone(),
            device: d.4,
            residue: d.0 % 16,
        }
    }

    fn matches(&self, d: &Desc) -> bool {
        self.shape == d.1
            && self.strides == d.2
            && self.dtype == d.3
            && self.device == d.4
            && self.residue == d.0 % 16
    }
}

/// One remembered validation.
struct Memo {
    scale: Option<u32>,
    update_pool: bool,
    sv: Serving,
    given: Vec<Option<Meta>>,
    names: Vec<&'static str>,
    problem: Problem,
    device: Device,
    opts: RunOptions,
}

impl Memo {
    fn matches(
        &self,
        given: &[Option<Desc>],
        scale: Option<f32>,
        update_pool: bool,
        sv: Serving,
    ) -> bool {
        self.update_pool == update_pool
            && self.sv == sv
            && self.scale == scale.map(f32::to_bits)
            && self.given.len() == given.len()
            && self.given.iter().zip(given).all(|(m, d)| match (m, d) {
                (Some(m), Some(d)) => m.matches(d),
                (None, None) => true,
                _ => false,
            })
    }
}

thread_local! {
    /// One entry per operation (decode, prefill, MTP), per thread.
    static MEMO: RefCell<[Option<Memo>; 3]> = const { RefCell::new([None, None, None]) };
}

fn slot(op: Op) -> usize {
    match op {
        Op::Decode => 0,
        Op::Prefill => 1,
        Op::Mtp => 2,
    }
}

/// [`check_inputs`], reusing the last validation of `op` on this thread when the inputs' metadata match it.
pub fn checked(
    op: Op,
    given: Vec<Option<Desc>>,
    scale: Option<f32>,
    update_pool: bool,
    sv: Serving,
) -> Result<Checked, ArgError> {
    // a hit reuses the problem with the new descriptors; a miss hands `given` back for validation
    let found = MEMO.with_borrow(|memo| match memo[slot(op)].as_ref() {
        Some(m) if m.matches(&given, scale, update_pool, sv) => Ok(Checked {
            problem: m.problem.clone(),
            inputs: m
                .names
                .iter()
                .copied()
                .zip(given.into_iter().flatten())
                .collect(),
            device: m.device,
            opts: m.opts,
        }),
        _ => Err(given),
    });
    let given = match found {
        Ok(c) => return Ok(c),
        Err(given) => given,
    };
    let meta = given.iter().map(|d| d.as_ref().map(Meta::of)).collect();
    let c = check_inputs(op, given, scale, update_pool, sv)?;
    MEMO.with_borrow_mut(|memo| {
        memo[slot(op)] = Some(Memo {
            scale: scale.map(f32::to_bits),
            update_pool,
            sv,
            given: meta,
            names: c.inputs.iter().map(|(n, _)| *n).collect(),
            problem: c.problem.clone(),
            device: c.device,
            opts: c.opts,
        })
    });
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(shape: &[usize], dtype: &'static str, ptr: u64, device: i64) -> Option<Desc> {
        let strides = crate::desc::row_major(shape);
        Some(Desc(ptr, shape.into(), strides, dtype.into(), device))
    }

    /// A decode call of batch `b` on CUDA device 0, inputs at `base` + 4096·i.
    fn decode(b: usize, base: u64) -> Vec<Option<Desc>> {
        let at = |i: u64| base + 4096 * i;
        vec![
            desc(&[b, 1, 4, 128], "bfloat16", at(0), 0),
            desc(&[b, 1, 4, 128], "bfloat16", at(1), 0),
            desc(&[b, 1, 8, 128], "bfloat16", at(2), 0),
            desc(&[b, 8, 128, 128], "float32", at(3), 0),
            desc(&[8], "float32", at(4), 0),
            desc(&[b, 1, 8], "bfloat16", at(5), 0),
            desc(&[8], "float32", at(6), 0),
            desc(&[b, 1, 8], "bfloat16", at(7), 0),
            // the serving tensors: g, alpha, beta, state_indices, has_initial_state, num_accepted_tokens,
            // checkpoint_cu_starts, checkpoints
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
        ]
    }

    fn sv() -> Serving {
        Serving::default()
    }

    #[test]
    fn a_hit_carries_the_new_addresses() {
        let a = checked(Op::Decode, decode(2, 1 << 20), None, false, sv())
            .ok()
            .unwrap();
        let b = checked(Op::Decode, decode(2, 1 << 30), None, false, sv())
            .ok()
            .unwrap();
        assert_eq!(a.problem, b.problem);
        assert_eq!(b.get("q").unwrap().ptr(), 1 << 30);
        assert_eq!(b.get("b").unwrap().ptr(), (1 << 30) + 7 * 4096);
        assert_eq!(b.inputs.len(), 8);
    }

    #[test]
    fn any_changed_field_validates_again() {
        let ok = |g| checked(Op::Decode, g, None, false, sv()).is_ok();
        assert!(ok(decode(3, 1 << 20)));
        // misaligned by 8 bytes: same shapes, refused
        let mut g = decode(3, 1 << 20);
        g[2].as_mut().unwrap().0 += 8;
        assert!(!ok(g));
        // a dtype changed after a hit
        assert!(ok(decode(3, 1 << 20)));
        let mut g = decode(3, 1 << 20);
        g[4].as_mut().unwrap().3 = "bfloat16".into();
        assert!(!ok(g));
        // another device for one input
        let mut g = decode(3, 1 << 20);
        g[5].as_mut().unwrap().4 = 1;
        assert!(!ok(g));
        // non-contiguous strides
        let mut g = decode(3, 1 << 20);
        g[0].as_mut().unwrap().2[3] = 2;
        assert!(!ok(g));
        // the state left out (optional): valid, and a different problem
        let mut g = decode(3, 1 << 20);
        g[3] = None;
        let c = checked(Op::Decode, g, None, false, sv()).ok().unwrap();
        assert_eq!(c.problem.state_dtype, None);
        // and a batch mismatch between q and v
        let mut g = decode(3, 1 << 20);
        g[2] = desc(&[4, 1, 8, 128], "bfloat16", 1 << 20, 0);
        assert!(!ok(g));
        // scale and serving are part of the key
        let s = checked(Op::Decode, decode(3, 1 << 20), Some(0.5), false, sv())
            .ok()
            .unwrap();
        assert_eq!(s.problem.scale, 0.5);
        let d = checked(Op::Decode, decode(3, 1 << 20), None, false, sv())
            .ok()
            .unwrap();
        assert!((d.problem.scale - 128f32.sqrt().recip()).abs() < 1e-7);
        // so are the serving options
        let norm = Serving {
            qk_l2norm: true,
            ..sv()
        };
        let n = checked(Op::Decode, decode(3, 1 << 20), None, false, norm)
            .ok()
            .unwrap();
        assert!(n.problem.serving.qk_l2norm && n.opts.serving.qk_l2norm);
        let d = checked(Op::Decode, decode(3, 1 << 20), None, false, sv())
            .ok()
            .unwrap();
        assert!(!d.problem.serving.qk_l2norm);
    }

    #[test]
    fn a_strided_pool_is_accepted_only_with_indices() {
        let mut g = decode(3, 1 << 20);
        g[3].as_mut().unwrap().2[0] *= 2; // rows two states apart: a per-layer view of [slots, 2, HV, D, D]
        assert!(checked(Op::Decode, g.clone(), None, false, sv()).is_err());
        g[3].as_mut().unwrap().1[0] = 5; // a pool of 5 slots
        g[8 + 3] = desc(&[3], "int32", 1 << 29, 0);
        let c = checked(Op::Decode, g, None, false, sv()).ok().unwrap();
        assert!(c.problem.pool);
        assert_eq!(
            crate::serving::row_stride(c.get("state").unwrap()),
            2 * 8 * 128 * 128
        );
    }
}
