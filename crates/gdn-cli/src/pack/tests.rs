//! The packed solution's plan against the library's planner: the templates reproduce `plan::prefill::choose` at every
//! bin edge (`instantiate` vs the library's own plan), and the generated C++ (`gdn_plan.h` with the tables) computes
//! what the Rust side computes for decode / MTP (`plan::decode::choose` itself) and prefill (`instantiate`) and the
//! params bytes the library fills (`RecurrentArgs::params`, `PrefillArgs::params` / `params64`), compiled
//! with the host C++ compiler (`c++`; under CI=true its absence fails the test).

use super::plan_table::{
    instantiate, library_instance, n_edges, prefill_shape, t_edges, Instance, Template, PACK_CAPS,
};
use super::tables::Tables;
use gdn_core::{Definition, Heads, Op};
use gdn_cuda::plan::{decode, prefill, DeviceCaps, Shape};
use gdn_cuda::StateDtype;
use std::fmt::Write;
use std::path::Path;
use std::process::Command;

const HEADS: [(usize, usize); 3] = [(4, 8), (8, 16), (16, 32)];

#[test]
fn templates_reproduce_the_library_plan_at_every_bin_edge() {
    for (h, hv) in HEADS {
        for &n in &n_edges() {
            for &t in &t_edges() {
                let plan = prefill::choose(&prefill_shape(h, hv, t, n), &PACK_CAPS, None).unwrap();
                let tpl = Template::of(&plan);
                let sms = PACK_CAPS.sm_count as u64;
                assert_eq!(
                    instantiate(&tpl, h, hv, t, n, sms),
                    library_instance(&plan, sms),
                    "qk{h}_v{hv} T = {t}, N = {n}: {}",
                    plan.label()
                );
            }
        }
    }
}

#[test]
fn bins_end_at_the_kernels_sequence_limits() {
    let e = n_edges();
    // a bin holding 128 (the longest-first tiles' limit) or 256 (the device plan's) ends there
    for limit in [
        prefill::host::LONGEST_FIRST_MAX_N,
        gdn_cuda::kernels::registry::DEVICE_PLAN_MAX_N,
    ] {
        assert!(e.contains(&(limit + 1)), "no bin starts at {}", limit + 1);
    }
    assert!(e.windows(2).all(|w| w[0] < w[1]) && e[0] == 1);
    let t = t_edges();
    assert!(t.windows(2).all(|w| w[0] < w[1]) && t[0] == 0);
}

fn definition(op: Op, h: usize, hv: usize) -> Definition {
    Definition::new(op, Heads::new(h, hv, 128).unwrap())
}

/// Compiles `driver` with `gdn_plan.h` and the tables of `def` in `dir`; None when there is no C++ compiler
/// (a failure under CI=true).
fn build_driver(dir: &Path, def: &Definition, driver: &str) -> Option<std::path::PathBuf> {
    let t = Tables::for_definition(def).unwrap();
    std::fs::write(dir.join("gdn_tables.h"), t.header(def)).unwrap();
    for (name, text) in super::STATIC_SOURCES {
        std::fs::write(dir.join(name), text).unwrap();
    }
    std::fs::write(dir.join("driver.cpp"), driver).unwrap();
    let exe = dir.join("driver");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(dir.join("driver.cpp"))
        .output();
    match out {
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "no C++ compiler ({cxx}: {e}); CI needs one"
            );
            eprintln!("skipped: no C++ compiler ({cxx}: {e})");
            None
        }
        Ok(o) => {
            assert!(
                o.status.success(),
                "{cxx} failed:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            Some(exe)
        }
    }
}

fn run(exe: &Path, input: &str) -> String {
    // the queries from a file: a pipe written while the driver's output fills the other would deadlock
    let file = exe.with_extension("in");
    std::fs::write(&file, input).unwrap();
    let out = Command::new(exe)
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

const RECURRENT_DRIVER: &str = r#"
#include <cstdio>
#include "gdn_plan.h"
int main() {
  unsigned long long b, sms, t;
  while (std::scanf("%llu %llu %llu", &b, &sms, &t) == 3) {
    int k = gdn_pack::recurrent_kernel(b, sms);
    if (k < 0) { std::printf("none\n"); continue; }
    gdn_pack::Grid g = gdn_pack::grid_of(gdn_pack::kKernels[k], b * t, b, 1);
    std::printf("%s %llu %llu %llu\n", gdn_pack::kKernels[k].name, (unsigned long long)g.x, (unsigned long long)g.y,
                (unsigned long long)g.z);
  }
}
"#;

#[test]
fn generated_recurrent_choice_is_the_library_choice() {
    for op in [Op::Decode, Op::Mtp] {
        for (h, hv) in HEADS {
            let def = definition(op, h, hv);
            let dir = tempdir(&format!("rec-{}-{h}-{hv}", op.name()));
            let Some(exe) = build_driver(&dir, &def, RECURRENT_DRIVER) else {
                return;
            };
            let mut input = String::new();
            let mut want = String::new();
            let t = if op == Op::Decode { 1 } else { 4 };
            for sms in [132u32, 114, 78] {
                for b in (1..=300).chain([511, 512, 1024, 4096, 65_536]) {
                    let _ = writeln!(input, "{b} {sms} {t}");
                    let s = Shape {
                        op,
                        num_q_heads: h,
                        num_v_heads: hv,
                        head_size: 128,
                        num_seqs: b,
                        seq_len: t,
                        total_tokens: b * t,
                        max_seq_len: 0,
                        state: StateDtype::F32,
                    };
                    let caps = DeviceCaps {
                        sm_count: sms,
                        ..DeviceCaps::HOPPER_132
                    };
                    let c = decode::choose(&s, &caps, None).unwrap();
                    let _ = writeln!(
                        want,
                        "{} {} {} {}",
                        c.variant.name, c.grid.0, c.grid.1, c.grid.2
                    );
                }
            }
            let got = run(&exe, &input);
            for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
                assert_eq!(
                    g,
                    w,
                    "{} query {i}: {}",
                    def.name,
                    input.lines().nth(i).unwrap()
                );
            }
            assert_eq!(got.lines().count(), want.lines().count());
        }
    }
}

const PREFILL_DRIVER: &str = r#"
#include <cstdio>
#include "gdn_plan.h"
int main() {
  unsigned long long t, n, sms;
  while (std::scanf("%llu %llu %llu", &t, &n, &sms) == 3) {
    gdn_pack::PrefillInstance p;
    if (!gdn_pack::prefill_instance(t, n, sms, &p)) { std::printf("none\n"); continue; }
    std::printf("%llu", (unsigned long long)p.workspace_bytes);
    for (int i = 0; i < p.num_launches; ++i) {
      const gdn_pack::SizedLaunch& s = p.launches[i];
      std::printf(" | %d %s %llu %llu %llu %llu %llu %llu", s.role, gdn_pack::kKernels[s.kernel].name,
                  (unsigned long long)s.grid.x, (unsigned long long)s.grid.y, (unsigned long long)s.grid.z,
                  (unsigned long long)s.vgrid.x, (unsigned long long)s.vgrid.y, (unsigned long long)s.vgrid.z);
    }
    std::printf("\n");
  }
}
"#;

fn show(i: &Instance) -> String {
    let mut o = i.workspace_bytes.to_string();
    for s in &i.launches {
        let _ = write!(
            o,
            " | {} {} {} {} {} {} {} {}",
            s.role, s.variant, s.grid.0, s.grid.1, s.grid.2, s.vgrid.0, s.vgrid.1, s.vgrid.2
        );
    }
    o
}

#[test]
fn generated_prefill_plan_is_the_template_sized_for_the_call() {
    for (h, hv) in HEADS {
        let def = definition(Op::Prefill, h, hv);
        let dir = tempdir(&format!("prefill-{h}-{hv}"));
        let Some(exe) = build_driver(&dir, &def, PREFILL_DRIVER) else {
            return;
        };
        let t = Tables::for_definition(&def).unwrap();
        let table = t.prefill.as_ref().unwrap();
        let (ne, te) = (&table.n_edges, &table.t_edges);
        // every bin edge, one inside each bin, and a few calls past the last edges, on three SM counts
        let mut queries: Vec<(u64, u64, u64)> = Vec::new();
        let mut ts: Vec<u64> = te.iter().flat_map(|&x| [x, x + x / 7 + 1]).collect();
        ts.extend([5_000_000, 123_457]);
        let ns: Vec<u64> = ne
            .iter()
            .flat_map(|&x| [x, x + x / 9])
            .chain([100_000])
            .collect();
        for (i, &tt) in ts.iter().enumerate() {
            for (j, &nn) in ns.iter().enumerate() {
                if (i + j) % 3 == 0 || tt <= 64 {
                    queries.push((tt, nn, [132, 114, 78][(i + 2 * j) % 3]));
                }
            }
        }
        let mut input = String::new();
        let mut want = String::new();
        for &(tt, nn, sms) in &queries {
            let _ = writeln!(input, "{tt} {nn} {sms}");
            let nb = super::plan_table::bin_of(ne, nn);
            let tb = super::plan_table::bin_of(te, tt);
            let tpl = &table.templates[table.index[nb * te.len() + tb] as usize];
            let _ = writeln!(want, "{}", show(&instantiate(tpl, h, hv, tt, nn, sms)));
        }
        let got = run(&exe, &input);
        assert_eq!(got.lines().count(), queries.len());
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            assert_eq!(g, w, "{} (T, N, SMs) = {:?}", def.name, queries[i]);
        }
    }
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("gdn-pack-test-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

const PARAMS_DRIVER: &str = r#"
#include <cstdio>
#include "gdn_plan.h"
using namespace gdn_pack;
static void hex(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) std::printf("%02x", p[i]);
  std::printf("\n");
}
int main() {
  char op;
  unsigned long long x[16];
  while (std::scanf(" %c", &op) == 1) {
    for (int i = 0; i < 16; ++i) std::scanf("%llu", &x[i]);
    float scale;
    unsigned bits = static_cast<unsigned>(x[15]);
    std::memcpy(&scale, &bits, 4);
    if (op == 'r') {
      RecurrentCall c{x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9], x[10], x[11],
                      (int64_t)x[12], (int64_t)x[13], (int64_t)x[14], scale};
      unsigned char p[kRecurrentBytes] = {};
      fill_recurrent(p, c);
      hex(p, kRecurrentBytes);
    } else {
      PrefillCall c{x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9], x[10], (int64_t)x[12], (int64_t)x[13], scale};
      unsigned char p[kPrefillBytes] = {}, p64[kPrefill64Bytes] = {};
      fill_prefill(p, 0, c);
      fill_prefill64(p64, 0, c, x[11], 0);
      hex(p, kPrefillBytes);
      hex(p64, kPrefill64Bytes);
    }
  }
}
"#;

fn bytes_of<T>(x: &T) -> String {
    // SAFETY: the params mirrors are #[repr(C)] structs of integers and floats without padding (their layout
    // asserts in gdn_cuda::abi::params), so every byte is initialised.
    let b =
        unsafe { std::slice::from_raw_parts(x as *const T as *const u8, std::mem::size_of::<T>()) };
    super::cubin::hex(b)
}

/// The params bytes the generated host code fills for a definition call are the library's own
/// (`RecurrentArgs::params`, `PrefillArgs::params` / `params64` of the arguments `Args::for_problem` makes for
/// the same call: MTP in the definitions' mode with `new_state` 0, the pool's rows, its indices).
#[test]
fn generated_params_bytes_are_the_library_params() {
    use gdn_cuda::{PrefillArgs, RecurrentArgs};
    for (op, h, hv) in [
        (Op::Decode, 4, 8),
        (Op::Mtp, 4, 8),
        (Op::Prefill, 4, 8),
        (Op::Mtp, 16, 32),
    ] {
        let def = definition(op, h, hv);
        let dir = tempdir(&format!("params-{}-{h}-{hv}", op.name()));
        let Some(exe) = build_driver(&dir, &def, PARAMS_DRIVER) else {
            return;
        };
        let mut input = String::new();
        let mut want = String::new();
        for case in 0..6u64 {
            let ptr = |i: u64| 0x7f00_0000_0000 + (case << 32) + i * 0x1_0000;
            let (batch, seq_len, rows) = (
                1 + case * 7,
                if op == Op::Mtp { 2 + case } else { 1 },
                3 + case * 11,
            );
            let scale = [0.088388346f32, 0.5, 1.0, 0.125, 2.0e-3, 0.0625][case as usize];
            let p: Vec<u64> = (0..12).map(ptr).collect();
            // MTP's definition mode: no new_state (the pool is not written); decode: none of intermediate / indices
            let (new_state, intermediate, indices) = match op {
                Op::Mtp => (0, p[9], p[11]),
                _ => (p[8], 0, 0),
            };
            if op == Op::Prefill {
                let (total, seqs) = (case * 100 + 3, 1 + case);
                let a = PrefillArgs {
                    q: p[0],
                    k: p[1],
                    v: p[2],
                    a: p[3],
                    b: p[4],
                    a_log: p[5],
                    dt_bias: p[6],
                    cu_seqlens: p[7],
                    state: p[8],
                    new_state: p[9],
                    out: p[10],
                    workspace: p[11],
                    num_state_rows: seqs as usize,
                    num_seqs: seqs as usize,
                    total_tokens: total as usize,
                    num_q_heads: h,
                    num_v_heads: hv,
                    head_size: 128,
                    scale,
                    ..PrefillArgs::default()
                };
                let vals = [&p[..12], &[total, seqs, 0, scale.to_bits() as u64]].concat();
                let _ = writeln!(
                    input,
                    "p {}",
                    vals.iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                );
                let _ = writeln!(
                    want,
                    "{}\n{}",
                    bytes_of(&a.params()),
                    bytes_of(&a.params64())
                );
            } else {
                let a = RecurrentArgs {
                    q: p[0],
                    k: p[1],
                    v: p[2],
                    a: p[3],
                    b: p[4],
                    a_log: p[5],
                    dt_bias: p[6],
                    state: p[7],
                    new_state,
                    intermediate,
                    out: p[10],
                    state_indices: indices,
                    batch: batch as usize,
                    seq_len: seq_len as usize,
                    num_state_rows: rows as usize,
                    num_q_heads: h,
                    num_v_heads: hv,
                    head_size: 128,
                    scale,
                    ..RecurrentArgs::default()
                };
                let vals = [
                    &p[..8],
                    &[
                        new_state,
                        intermediate,
                        p[10],
                        indices,
                        batch,
                        seq_len,
                        rows,
                        scale.to_bits() as u64,
                    ],
                ]
                .concat();
                let _ = writeln!(
                    input,
                    "r {}",
                    vals.iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                );
                let _ = writeln!(want, "{}", bytes_of(&a.params()));
            }
        }
        let got = run(&exe, &input);
        assert_eq!(got.lines().count(), want.lines().count());
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            assert_eq!(g, w, "{} params line {i}", def.name);
        }
    }
}
