//! `gdn-cuda-smoke`: an end-to-end self-test of the CUDA runtime on a GPU machine, independent of the CLI.
//! 1. opens the backend (driver, device, arch, NVRTC, headers) and prints what it found;
//! 2. compiles, loads and launches a tiny test kernel of its own (includes <cuda_bf16.h>), checks it;
//! 3. loads every registry module (cache hit or compile, per module) and prints device-side registers /
//!    local memory per kernel;
//! 4. one correctness check per operation against the float64 reference (contest tolerance);
//! 5. an empty kernel, the copy floor and two decode shapes through all timing tiers (medians): the empty
//!    kernel shows what each tier adds by itself.
//!
//! Exit code non-zero on any failure. Usage: `gdn-cuda-smoke [--quick]`.

use gdn_core::compare::{compare, CONTEST};
use gdn_core::workload::{generate, WorkloadSpec};
use gdn_core::{reference, Backend, Heads, Outputs, Problem, TierSamples, Timed, TimingConfig};
use gdn_cuda::runtime::memory::DeviceBuf;
use gdn_cuda::{runtime::nvrtc, CudaBackend};
use std::ffi::c_void;
use std::process::ExitCode;

const SMOKE_SRC: &str = r#"
#include <cuda_bf16.h>
struct SmokeParams { const float* x; __nv_bfloat16* y; long long n; float a; int pad; };
extern "C" __global__ void gdn_smoke(const SmokeParams p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) p.y[i] = __float2bfloat16_rn(p.a * p.x[i] + 1.0f);
}
extern "C" __global__ void gdn_empty(const SmokeParams p) {}
"#;

#[repr(C)]
struct SmokeParams {
    x: u64,
    y: u64,
    n: i64,
    a: f32,
    pad: i32,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

fn tiers_line(t: &[TierSamples]) -> String {
    t.iter()
        .map(|s| format!("{} {:.2} us", s.tier, median(&s.samples_us)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn test_kernel(b: &CudaBackend) -> Result<(), String> {
    use cudarc::driver::result;
    let gpu = b.gpu();
    gpu.bind()?;
    let c = nvrtc::compile(&nvrtc::Request {
        name: "smoke.cu",
        source: SMOKE_SRC,
        headers: &[],
        arch: &b.kernels().target().nvrtc_arch(),
        defines: &[],
    })?;
    println!(
        "test kernel: {} bytes CUBIN, {} in {:.3} s",
        c.cubin.len(),
        if c.from_cache {
            "cache hit"
        } else {
            "compiled"
        },
        c.seconds
    );
    let n = 1_000_003usize;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.25).collect();
    let s = gpu.stream();
    let dx = DeviceBuf::upload(&x, s)?;
    let dy = DeviceBuf::alloc(n * 2)?;
    // SAFETY: a CUBIN for this device (or NUL-terminated PTX); the module lives until the end of this function.
    unsafe {
        let module = result::module::load_data(c.cubin.as_ptr() as *const c_void)
            .map_err(|e| format!("load: {e:?}"))?;
        let f = result::module::get_function(module, std::ffi::CString::new("gdn_smoke").unwrap())
            .map_err(|e| format!("get_function: {e:?}"))?;
        let mut p = SmokeParams {
            x: dx.ptr,
            y: dy.ptr,
            n: n as i64,
            a: 2.0,
            pad: 0,
        };
        let mut args = [&mut p as *mut SmokeParams as *mut c_void];
        let blocks = n.div_ceil(256) as u32;
        result::launch_kernel(f, (blocks, 1, 1), (256, 1, 1), 0, s.0, &mut args)
            .map_err(|e| format!("launch: {e:?}"))?;
        let mut y = vec![half::bf16::ZERO; n];
        dy.read(&mut y, s)?;
        gpu.sync()?;
        let _ = result::module::unload(module);
        let bad = (0..n)
            .filter(|&i| y[i] != half::bf16::from_f32(2.0 * x[i] + 1.0))
            .count();
        if bad > 0 {
            return Err(format!("test kernel: {bad} of {n} wrong"));
        }
    }
    println!("test kernel: {n} elements correct");
    Ok(())
}

/// Every timing tier around an empty kernel: the overhead of each tier's method.
fn empty_floor(b: &CudaBackend, cfg: &TimingConfig) -> Result<String, String> {
    use cudarc::driver::result;
    let gpu = b.gpu();
    gpu.bind()?;
    let c = nvrtc::compile(&nvrtc::Request {
        name: "smoke.cu",
        source: SMOKE_SRC,
        headers: &[],
        arch: &b.kernels().target().nvrtc_arch(),
        defines: &[],
    })?;
    // SAFETY: a CUBIN for this device (or NUL-terminated PTX); the module is kept for the process.
    let f = unsafe {
        let module = result::module::load_data(c.cubin.as_ptr() as *const c_void)
            .map_err(|e| format!("load: {e:?}"))?;
        result::module::get_function(module, std::ffi::CString::new("gdn_empty").unwrap())
            .map_err(|e| format!("get_function: {e:?}"))?
    };
    let f = f as usize; // plain data for the closure
    let call = |_: usize, st: gdn_cuda::runtime::context::Stream| -> gdn_core::Result<()> {
        let mut p = SmokeParams {
            x: 0,
            y: 0,
            n: 0,
            a: 0.0,
            pad: 0,
        };
        let mut args = [&mut p as *mut SmokeParams as *mut c_void];
        // SAFETY: an empty kernel; its argument lives through the call.
        unsafe {
            result::launch_kernel(f as _, (1, 1, 1), (32, 1, 1), 0, st.0, &mut args)
                .map_err(|e| gdn_core::GdnError::backend("cuda", format!("{e:?}")))
        }
    };
    let t = gdn_cuda::bench::tiers(b, 1, &call, cfg, "one empty-kernel launch")
        .map_err(|e| e.to_string())?;
    Ok(tiers_line(&t))
}

fn check(b: &CudaBackend, spec: &WorkloadSpec) -> Result<bool, String> {
    let tensors = generate(spec, 1);
    let def = spec.definition();
    let p = Problem::from_tensors(&def, &tensors, &spec.options()).map_err(|e| e.to_string())?;
    let x = p.inputs(&tensors);
    let plan = b.plan(&p).map_err(|e| e.to_string())?;
    let mut out = Outputs::poisoned(&p, &x);
    b.run(&p, &x, &mut out).map_err(|e| e.to_string())?;
    let r = reference::run(&p, &x);
    let rep = compare(&p, &out, &r, &CONTEST, &CONTEST);
    println!("{:<40} {:<30} {}", spec.label, plan.label(), rep.summary());
    Ok(rep.passed())
}

fn run(quick: bool) -> Result<bool, String> {
    let b = CudaBackend::open().map_err(|e| e.to_string())?;
    println!("device: {}", b.device());
    println!("{}", nvrtc::describe()?);
    test_kernel(&b)?;
    b.gpu().bind()?;
    let t0 = std::time::Instant::now();
    let failed = b.kernels().load_all();
    println!("modules loaded in {:.2} s", t0.elapsed().as_secs_f64());
    for (src, cached, s) in b.kernels().cache_report() {
        println!(
            "  {src}: {} ({s:.3} s)",
            if cached { "cache hit" } else { "compiled" }
        );
    }
    for f in &failed {
        println!("  FAILED {f}");
    }
    for (k, bytes) in b.kernels().spilling_hot_kernels() {
        println!("  WARNING hot kernel {k} uses {bytes} bytes of local memory");
    }
    let heads = Heads::new(4, 8, 128).map_err(|e| e.to_string())?;
    let mut ok = failed.is_empty();
    let mut specs = vec![
        WorkloadSpec::decode(heads, 1),
        WorkloadSpec::decode(heads, 64),
        WorkloadSpec::mtp(heads, 8, 4),
        WorkloadSpec::prefill(heads, &[100, 37, 0, 300]),
        WorkloadSpec {
            normalize_qk: true, // as models call prefill (see `gdn check`)
            ..WorkloadSpec::prefill(heads, &[1500, 0, 700])  // few long sequences: the chunk64 plan
        },
    ];
    for s in specs.iter_mut() {
        s.label = format!("{:?} {:?}", s.op, s.seq_lens);
    }
    for s in &specs {
        match check(&b, s) {
            Ok(pass) => ok &= pass,
            Err(e) => {
                println!("{:<40} ERROR {e}", s.label);
                ok = false;
            }
        }
    }
    let cfg = TimingConfig {
        warmup: 5,
        iters: if quick { 20 } else { 100 },
        input_sets: 4,
    };
    println!("empty kernel: {}", empty_floor(&b, &cfg)?);
    let bytes = 1u64 << 30;
    let t = b.time_copy(bytes, &cfg).map_err(|e| e.to_string())?;
    let k = median(&t[0].samples_us);
    println!(
        "copy {} MiB: {}  => {:.0} GB/s (kernel tier)",
        bytes >> 20,
        tiers_line(&t),
        bytes as f64 / k / 1e3
    );
    for batch in [1usize, 64] {
        let spec = WorkloadSpec::decode(heads, batch);
        let sets: Vec<_> = (0..cfg.input_sets as u64)
            .map(|s| generate(&spec, s))
            .collect();
        let def = spec.definition();
        let p =
            Problem::from_tensors(&def, &sets[0], &spec.options()).map_err(|e| e.to_string())?;
        let xs: Vec<_> = sets.iter().map(|t| p.inputs(t)).collect();
        let t = b.time(&p, &xs, &cfg).map_err(|e| e.to_string())?;
        let kmed = median(&t[0].samples_us);
        println!(
            "decode B={batch}: {}  => {:.0} GB/s (kernel tier, {} min bytes)",
            tiers_line(&t),
            p.min_bytes() as f64 / kmed / 1e3,
            p.min_bytes()
        );
    }
    Ok(ok)
}

fn main() -> ExitCode {
    let quick = std::env::args().any(|a| a == "--quick");
    match run(quick) {
        Ok(true) => {
            println!("smoke: PASS");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("smoke: FAIL (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("smoke: ERROR {e}");
            ExitCode::FAILURE
        }
    }
}
