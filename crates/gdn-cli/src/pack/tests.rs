//! The packed solution's plan against the library's planner: the templates reproduce `plan::prefill::choose` at every
//! bin edge (`instantiate` vs the library's own plan), and the generated C++ (`gdn_plan.h` with the tables) computes
//! what the Rust side computes for decode / MTP (`plan::decode::choose` itself) and prefill (`instantiate`), compiled
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
