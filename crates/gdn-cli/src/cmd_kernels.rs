//! `gdn kernels`: compiles every CUDA kernel variant for an architecture (or, with `--arch all`, for each
//! architecture CI covers) with NVRTC alone (no GPU, no driver) and prints, per kernel, the ptxas resource report:
//! registers, stack frame, spill stores/loads, static shared memory, and the launch's block size and dynamic shared
//! memory from the registry. A module that does not declare the architecture (`registry::Module::arches`) is
//! listed as not built for it, which is no error. The last line is exactly `N kernels compiled, S with spills`
//! (summed over the architectures); the exit code is non-zero when a module fails to compile for an architecture
//! it declares, a registered kernel is missing from its module, or a hot kernel spills.
//! `--policy` also prints which kernel (prefill: which plan and kernels) the policy picks for the contest's
//! shapes on a 132-SM Hopper.
//! `--ship DIR` also writes every module that compiled into a shipped-CUBIN store in DIR
//! (`gdn_cuda::runtime::shipped`; the Python wheel's `gdn/cubin/`), so that a process on a fresh machine loads
//! them instead of compiling; it is written even when the command fails (a module that did not compile is then
//! compiled at first use, as without a store).

use anyhow::Result;
use gdn_core::Op;
use gdn_cuda::kernels::registry::{self, Arch, StateDtype};
use gdn_cuda::kernels::report::{compile_all, ModuleReport};
use gdn_cuda::kernels::sources::SourceSet;
use gdn_cuda::plan::{self, DeviceCaps, Shape};
use gdn_cuda::runtime::{nvrtc, shipped};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// NVRTC target architecture (sm_80, sm_90a, sm_100f, ...), or `all`: every architecture CI compiles for
    /// (sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, sm_100a, sm_120). Modules that do not declare it are listed
    /// as not built.
    #[arg(long, default_value = plan::HOPPER_ARCH)]
    arch: String,
    /// Also print the kernel choice for representative decode / MTP / prefill shapes.
    #[arg(long)]
    policy: bool,
    /// Also write the compiled modules into a shipped-CUBIN store in this folder (created; a previous store there
    /// is replaced), for `GDN_CUBIN_DIR` or a package to load instead of compiling.
    #[arg(long, value_name = "DIR")]
    ship: Option<PathBuf>,
}

pub fn main(a: Args) -> Result<()> {
    let targets = Arch::targets(&a.arch).map_err(anyhow::Error::msg)?;
    // The report is ptxas's own output, which NVRTC 13 skips when it serves a compile from the CUDA compute
    // cache (a source another gdn process compiled before): keep NVRTC from that cache for this command
    // (nvrtc::compile_with_report). Set before NVRTC is loaded; this process has no other threads yet.
    if std::env::var_os("CUDA_CACHE_DISABLE").is_none() {
        std::env::set_var("CUDA_CACHE_DISABLE", "1");
    }
    println!("{}", nvrtc::describe().map_err(anyhow::Error::msg)?);
    let mut store = match &a.ship {
        Some(dir) => Some((
            shipped::StoreWriter::create(dir).map_err(anyhow::Error::msg)?,
            SourceSet::load().map_err(anyhow::Error::msg)?,
        )),
        None => None,
    };
    let (mut compiled, mut spilled) = (0usize, 0usize);
    let mut failures: Vec<String> = Vec::new();
    for &arch in &targets {
        println!(
            "target {arch}; CUBIN cache {}",
            nvrtc::cache_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|| "(none: no HOME)".into())
        );
        let modules = compile_all(arch).map_err(anyhow::Error::msg)?;
        let (c, s) = print_report(arch, targets.len() > 1, &modules, &mut failures);
        if let Some((w, sources)) = &mut store {
            ship_modules(w, sources, arch, &modules).map_err(anyhow::Error::msg)?;
        }
        if targets.len() > 1 {
            println!("{arch}: {c} kernels compiled, {s} with spills");
        }
        compiled += c;
        spilled += s;
    }
    if a.policy {
        print_policy();
    }
    if let (Some((w, _)), Some(dir)) = (store, &a.ship) {
        let (ma, mi) = nvrtc::version().map_err(anyhow::Error::msg)?;
        let (n, bytes) = w
            .finish(&format!("NVRTC {ma}.{mi}"))
            .map_err(anyhow::Error::msg)?;
        println!(
            "shipped {n} modules ({:.1} MiB) to {}",
            bytes as f64 / (1 << 20) as f64,
            dir.display()
        );
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

/// Adds every module of `modules` that compiled to the store, keyed by the request the kernel set makes at run time
/// (`exec::kernel_set`: the module's source plus the registry's checks, every header, its defines).
fn ship_modules(
    w: &mut shipped::StoreWriter,
    sources: &SourceSet,
    arch: Arch,
    modules: &[ModuleReport],
) -> Result<(), String> {
    let arch = arch.to_string();
    let headers = sources.headers();
    for m in modules {
        let (Some(Ok(c)), Some(src)) = (&m.compiled, sources.get(m.module.source)) else {
            continue;
        };
        let text = registry::module_source(m.module, src);
        let key = nvrtc::shipped_key(&nvrtc::Request {
            name: m.module.source,
            source: &text,
            headers: &headers,
            arch: &arch,
            defines: m.module.defines,
        });
        let what = std::iter::once(m.module.source)
            .chain(m.module.defines.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        w.add(&key, &arch, &what, &c.log, &c.cubin)?;
    }
    Ok(())
}

/// Prints one architecture's table; returns (kernels compiled, kernels that spill) and adds its failures.
/// With `several` targets, each failure names its architecture.
fn print_report(
    arch: Arch,
    several: bool,
    modules: &[ModuleReport],
    failures: &mut Vec<String>,
) -> (usize, usize) {
    let at = if several {
        format!(" ({arch})")
    } else {
        String::new()
    };
    println!(
        "{:<34} {:>4} {:>5} {:>4} {:>6} {:>8} {:>8} {:>8} {:>8}",
        "kernel", "hot", "block", "regs", "stack", "spill_st", "spill_ld", "smem", "dyn_smem"
    );
    let (mut compiled, mut spilled) = (0usize, 0usize);
    for m in modules {
        let c = match &m.compiled {
            None => {
                println!(
                    "# {} ({}) not built for {arch} ({}): {} kernels",
                    m.module.source,
                    m.module.defines.join(" "),
                    m.module.arches,
                    m.kernels.len()
                );
                continue;
            }
            Some(Err(e)) => {
                failures.push(format!("{}{at}: {e}", m.module.source));
                continue;
            }
            Some(Ok(c)) => c,
        };
        println!(
            "# {} ({}) {} KiB CUBIN, {}",
            m.module.source,
            m.module.defines.join(" "),
            c.cubin.len() / 1024,
            if c.from_cache {
                "from cache".to_string()
            } else {
                format!("compiled in {:.2} s", c.seconds)
            }
        );
        for k in &m.kernels {
            let v = k.variant;
            let Some(r) = &k.resources else {
                failures.push(if nvrtc::has_ptxas_report(&c.log) {
                    format!(
                        "{}{at}: registered kernel {} is not in the compiled module",
                        m.module.source, v.name
                    )
                } else {
                    format!(
                        "{}{at}: no ptxas report for {} (NVRTC served the compile from the CUDA compute \
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
                        "hot kernel {}{at} spills ({} bytes stored, {} loaded)",
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
    (compiled, spilled)
}

/// The policy's choice for the contest's shapes (qk4_v8) on a 132-SM Hopper.
fn print_policy() {
    let caps = DeviceCaps::HOPPER_132;
    println!(
        "# policy on a {}-SM Hopper, {} (qk4_v8, head size 128)",
        caps.sm_count, caps.arch
    );
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
