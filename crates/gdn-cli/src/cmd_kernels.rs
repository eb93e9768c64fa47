//! `gdn kernels`: compiles every CUDA kernel variant for an architecture with NVRTC alone (no GPU, no
//! driver) and prints, per kernel, the ptxas resource report: registers, stack frame, spill stores/loads,
//! static shared memory, and the launch's block size and dynamic shared memory from the registry.
//! The last line is exactly `N kernels compiled, S with spills`; the exit code is non-zero when a source
//! fails to compile, a registered kernel is missing from its module, or a hot kernel spills.
//! `--policy` also prints which kernel (prefill: which plan and kernels) the policy picks for the contest's
//! shapes on a 132-SM Hopper.

use anyhow::Result;
use gdn_core::Op;
use gdn_cuda::kernels::registry::StateDtype;
use gdn_cuda::kernels::report::compile_all;
use gdn_cuda::plan::{self, DeviceCaps, Shape};

#[derive(clap::Args)]
pub struct Args {
    /// NVRTC target architecture (gdn's kernels are built for sm_90a).
    #[arg(long, default_value = plan::SUPPORTED_ARCH)]
    arch: String,
    /// Also print the kernel choice for representative decode / MTP / prefill shapes.
    #[arg(long)]
    policy: bool,
}

pub fn main(a: Args) -> Result<()> {
    // The report is ptxas's own output, which NVRTC 13 skips when it serves a compile from the CUDA compute
    // cache (a source another gdn process compiled before): keep NVRTC from that cache for this command
    // (nvrtc::compile_with_report). Set before NVRTC is loaded; this process has no other threads yet.
    if std::env::var_os("CUDA_CACHE_DISABLE").is_none() {
        std::env::set_var("CUDA_CACHE_DISABLE", "1");
    }
    println!(
        "{}",
        gdn_cuda::runtime::nvrtc::describe().map_err(anyhow::Error::msg)?
    );
    println!(
        "target {}; CUBIN cache {}",
        a.arch,
        gdn_cuda::runtime::nvrtc::cache_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|| "(none: no HOME)".into())
    );
    let modules = compile_all(&a.arch).map_err(anyhow::Error::msg)?;
    println!(
        "{:<34} {:>4} {:>5} {:>4} {:>6} {:>8} {:>8} {:>8} {:>8}",
        "kernel", "hot", "block", "regs", "stack", "spill_st", "spill_ld", "smem", "dyn_smem"
    );
    let (mut compiled, mut spilled) = (0usize, 0usize);
    let mut failures: Vec<String> = Vec::new();
    for m in &modules {
        match &m.compiled {
            Err(e) => {
                failures.push(format!("{}: {e}", m.module.source));
                continue;
            }
            Ok(c) => println!(
                "# {} ({}) {} KiB CUBIN, {}",
                m.module.source,
                m.module.defines.join(" "),
                c.cubin.len() / 1024,
                if c.from_cache {
                    "from cache".to_string()
                } else {
                    format!("compiled in {:.2} s", c.seconds)
                }
            ),
        }
        for k in &m.kernels {
            let v = k.variant;
            let Some(r) = &k.resources else {
                let report = m
                    .compiled
                    .as_ref()
                    .is_ok_and(|c| gdn_cuda::runtime::nvrtc::has_ptxas_report(&c.log));
                failures.push(if report {
                    format!(
                        "{}: registered kernel {} is not in the compiled module",
                        m.module.source, v.name
                    )
                } else {
                    format!(
                        "{}: no ptxas report for {} (NVRTC served the compile from the CUDA compute \
                         cache: is CUDA_CACHE_DISABLE set to something other than 1?)",
                        m.module.source, v.name
                    )
                });
                continue;
            };
            compiled += 1;
            if r.spills() {
                spilled += 1;
                if v.hot {
                    failures.push(format!(
                        "hot kernel {} spills ({} bytes stored, {} loaded)",
                        v.name, r.spill_stores, r.spill_loads
                    ));
                }
            }
            println!(
                "{:<34} {:>4} {:>5} {:>4} {:>6} {:>8} {:>8} {:>8} {:>8}",
                v.name,
                if v.hot { "yes" } else { "no" },
                v.block,
                r.registers,
                r.stack_frame,
                r.spill_stores,
                r.spill_loads,
                r.static_smem,
                v.dyn_smem
            );
        }
    }
    if a.policy {
        print_policy();
    }
    for f in &failures {
        eprintln!("error: {}", f.replace('\n', "\n       "));
    }
    println!("{compiled} kernels compiled, {spilled} with spills");
    if !failures.is_empty() {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::exit(1);
    }
    Ok(())
}

/// The policy's choice for the contest's shapes (qk4_v8) on a 132-SM Hopper.
fn print_policy() {
    let caps = DeviceCaps::HOPPER_132;
    println!("# policy on {} SMs (qk4_v8, head size 128)", caps.sm_count);
    let shape = Shape::qk4_v8;
    let mut rows: Vec<(String, Shape)> = Vec::new();
    for st in [StateDtype::F32, StateDtype::BF16] {
        for b in [1, 4, 8, 16, 32, 64, 256] {
            rows.push((
                format!("decode B={b} {}", st.name()),
                shape(Op::Decode, b, 1, st),
            ));
        }
        for b in [1, 8, 64] {
            rows.push((
                format!("mtp B={b} T=4 {}", st.name()),
                shape(Op::Mtp, b, 4, st),
            ));
        }
        for (n, t) in [
            (1, 128),
            (1, 1024),
            (1, 8192),
            (1, 65_536),
            (4, 8192),
            (8, 8192),
            (32, 8192),
            (64, 65_536),
        ] {
            rows.push((
                format!("prefill {n}x{} {}", t / n, st.name()),
                Shape {
                    total_tokens: t,
                    ..shape(Op::Prefill, n, 0, st)
                },
            ));
        }
    }
    for (label, s) in rows {
        if s.op == Op::Prefill {
            match plan::prefill::choose(&s, &caps, None) {
                Ok(p) => {
                    let launches: Vec<String> = p
                        .launches()
                        .iter()
                        .map(|c| format!("{} grid {:?} block {}", c.variant.name, c.grid, c.block))
                        .collect();
                    let ws = match p.workspace_bytes() {
                        0 => String::new(),
                        b => format!(", workspace {:.1} MiB", b as f64 / (1 << 20) as f64),
                    };
                    println!(
                        "{label:<22} {} {}{ws} ({})",
                        p.kind().name(),
                        launches.join(" + "),
                        p.why()
                    );
                }
                Err(r) => println!("{label:<22} rejected: {r}"),
            }
            continue;
        }
        match plan::select::choose(&s, &caps, None) {
            Ok(c) => println!(
                "{label:<22} {:<34} grid {:?} block {} ({})",
                c.variant.name, c.grid, c.block, c.why
            ),
            Err(r) => println!("{label:<22} rejected: {r}"),
        }
    }
}
