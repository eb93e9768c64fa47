//! Timing tiers, and `Timed` for `CudaBackend`. Every tier cycles through the resident input sets, warms up
//! first, and reports one sample per call in microseconds. A call is every launch of its plan (the chunk64
//! prefill plan's prep and walk together: events bracket the pair, a graph captures both):
//! * `cupti` (first, when CUPTI loads: `runtime::cupti`) — before each call the same L2 flush as `kernel`; per call
//!   the time in which at least one of its kernels runs, from CUPTI activity records: pure GPU kernel time, the
//!   method the peers' reference figures use (their kernels summed: for launches that run one after another the union
//!   is that sum; under programmatic dependent launch a launch's CTAs start while its predecessor runs, and the
//!   overlap counts once), so the number to compare with the peers'. For a call of several launches the JSON also
//!   gives each launch's median (`launch_median_us`, in launch order; under PDL a launch's duration includes its
//!   wait for the previous one).
//! * `span` (with `cupti`, from the same records) — per call from its first kernel's start to its last kernel's
//!   end: the kernel time plus the gaps between the call's launches. FlashInfer's `bench_gpu_time_with_cupti`
//!   (flashinfer.testing), which flashinfer-bench times solutions with, reports this; for one launch it is the
//!   duration.
//! * `kernel` — before each call an L2 flush (a memset of max(256 MiB, 4 × L2) on the same stream); CUDA
//!   events are recorded immediately around the call's launch(es) while the flush is still running, so the
//!   host's launch latency is hidden behind the flush and the events bracket the kernel alone.
//! * `events` — flush, synchronise, then events around the whole host-side call path (argument checks,
//!   kernel choice, launch): flashinfer-bench's way before it timed with CUPTI; includes launch overhead.
//! * `graph` — `GRAPH_CALLS` calls captured in one CUDA graph, replayed; per call = replay time /
//!   `GRAPH_CALLS` (hot L2, launch gaps removed).
//!
//! `time_copy(bytes)` measures a device-to-device copy of bytes/2 (read bytes/2 + write bytes/2) with the
//! same tiers: the bandwidth floor the kernels are compared with. Two copies are timed and, per tier,
//! the faster one is the floor: `cuMemcpyDtoDAsync` (fastest in a stream: 4176 GB/s for 512 MiB on an H200)
//! and a copy kernel of ours (`COPY_SRC`, 16-byte loads, four in flight per thread; 3874 GB/s there), because
//! inside a CUDA graph a memcpy node runs on the copy engines, ~1.5x slower (388 vs 257 us for 512 MiB).
//! The copy kernel is a measuring tool, not a GDN kernel, so it lives here rather than in the registry.
//!
//! Note on the `kernel` tier: events bracket the launch on the GPU side, so the GPU's own event/launch
//! latency (~2-3 us on an H200, measured by `gdn-cuda-smoke` as the same tier around an empty kernel) is
//! included; the `cupti` tier is free of it.

use crate::backend::CudaBackend;
use crate::exec::backend_err as be;
use crate::exec::io::{enqueue, DeviceInputs, DeviceOutputs};
use crate::runtime::context::{drv, Stream};
use crate::runtime::function::Function;
use crate::runtime::memory::DeviceBuf;
use cudarc::driver::{result, sys};
use gdn_core::{Inputs, Problem, Result, TierSamples, Timed, TimingConfig};

/// Calls per captured graph.
pub const GRAPH_CALLS: usize = 20;
/// Smallest L2 flush buffer (bytes); at least 4 × L2 is used.
pub const MIN_FLUSH_BYTES: u64 = 256 << 20;
/// Fewest graph replays.
const MIN_GRAPH_REPLAYS: usize = 5;

/// A pair of timing events.
struct EventPair(sys::CUevent, sys::CUevent);

impl EventPair {
    fn new() -> Result<EventPair> {
        let mk = || {
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                .map_err(|e| be(drv("cuEventCreate", e)))
        };
        Ok(EventPair(mk()?, mk()?))
    }
    fn start(&self, s: Stream) -> Result<()> {
        // SAFETY: live event and stream.
        unsafe { result::event::record(self.0, s.0) }.map_err(|e| be(drv("cuEventRecord", e)))
    }
    fn stop(&self, s: Stream) -> Result<()> {
        // SAFETY: live event and stream.
        unsafe { result::event::record(self.1, s.0) }.map_err(|e| be(drv("cuEventRecord", e)))
    }
    fn us(&self) -> Result<f64> {
        // SAFETY: both events recorded and completed (the caller synchronised).
        unsafe { result::event::elapsed(self.0, self.1) }
            .map(|ms| ms as f64 * 1e3)
            .map_err(|e| be(drv("cuEventElapsedTime", e)))
    }
}

impl Drop for EventPair {
    fn drop(&mut self) {
        // SAFETY: events created by us; errors at teardown are ignored.
        unsafe {
            let _ = result::event::destroy(self.0);
            let _ = result::event::destroy(self.1);
        }
    }
}

/// One call of the timed operation with input set `i` on the given stream.
pub type Call<'a> = dyn Fn(usize, Stream) -> Result<()> + 'a;

/// The floor's copy kernel: `n` 16-byte words from `src` to `dst`, grid-stride, four loads in flight.
pub const COPY_SRC: &str = r#"
extern "C" __global__ void __launch_bounds__(512) gdn_bench_copy(const uint4* __restrict__ src,
                                                                 uint4* __restrict__ dst, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}
"#;
const COPY_BLOCK: u32 = 512;
/// Resident copy CTAs per SM (2048 threads: a full SM).
const COPY_CTAS_PER_SM: u32 = 4;

fn copy_kernel(b: &CudaBackend) -> Result<&Function> {
    b.copy
        .get_or_init(|| {
            Function::load(
                "gdn_bench_copy.cu",
                COPY_SRC,
                &b.kernels.target().nvrtc_arch(),
                "gdn_bench_copy",
                "copy",
            )
        })
        .as_ref()
        .map_err(|e| be(e.clone()))
}

/// Runs the timing tiers on `call`, cycling `sets` input sets (also used by `gdn-cuda-smoke` for its
/// empty-kernel floor). `what` names what one call enqueues (e.g. "one copy-kernel launch"); every tier
/// times whole calls, so a call of several launches (the chunk64 prefill plan) is timed as one.
pub fn tiers(
    b: &CudaBackend,
    sets: usize,
    call: &Call,
    cfg: &TimingConfig,
    what: &str,
) -> Result<Vec<TierSamples>> {
    let s = b.gpu.stream();
    let sets = sets.max(1);
    let iters = cfg.iters.max(1);
    let flush_bytes = MIN_FLUSH_BYTES.max(4 * b.gpu.info.l2_bytes);
    let flush = DeviceBuf::alloc(flush_bytes as usize).map_err(be)?;
    let sync = || b.gpu.sync().map_err(be);
    // warm-up (also loads modules outside any timed or captured region)
    for w in 0..cfg.warmup.max(1) {
        call(w % sets, s)?;
    }
    sync()?;

    // tier 0: cupti (L2 flushed, kernel durations from activity records), when CUPTI is there
    let cupti = match crate::runtime::cupti::Recorder::get() {
        // a CUPTI failure (e.g. under another profiler) drops this tier, never the measurement
        Ok(rec) => cupti_tier(rec, b, &flush, sets, call, iters).unwrap_or_else(|e| {
            eprintln!("gdn bench: `cupti` tier dropped: {e}");
            None
        }),
        Err(why) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("gdn bench: no `cupti` timing tier ({why})"));
            None
        }
    };

    // tier 1: kernel (L2 flushed, events right around the launch)
    let ev: Vec<EventPair> = (0..iters)
        .map(|_| EventPair::new())
        .collect::<Result<_>>()?;
    for (it, e) in ev.iter().enumerate() {
        flush.fill_u32(it as u32, s).map_err(be)?;
        e.start(s)?;
        call(it % sets, s)?;
        e.stop(s)?;
    }
    sync()?;
    let kernel: Vec<f64> = ev.iter().map(EventPair::us).collect::<Result<_>>()?;

    // tier 2: events (flush, synchronise, events around the host-side call path)
    for (it, e) in ev.iter().enumerate() {
        flush.fill_u32(!(it as u32), s).map_err(be)?;
        sync()?;
        e.start(s)?;
        call(it % sets, s)?;
        e.stop(s)?;
    }
    sync()?;
    let events: Vec<f64> = ev.iter().map(EventPair::us).collect::<Result<_>>()?;
    drop(flush);

    // tier 3: graph (GRAPH_CALLS calls per replay, hot L2)
    let graph = graph_tier(b, sets, call, iters)?;

    let mut out = Vec::with_capacity(5);
    if let Some(c) = cupti {
        let per_call = c.launch_median_us.len();
        out.push(TierSamples {
            tier: "cupti".into(),
            method: format!(
                "pure GPU kernel time: CUPTI activity records, per call the union of its {per_call} kernel \
                 interval(s) ({what}); a {} MiB memset flushes L2 before every call (not counted); {} input \
                 sets cycled",
                flush_bytes >> 20,
                sets
            ),
            samples_us: c.busy_us,
            launch_median_us: if per_call > 1 {
                c.launch_median_us
            } else {
                Vec::new()
            },
        });
        out.push(TierSamples::new(
            "span",
            format!(
                "the same CUPTI records as `cupti`, per call from its first kernel's start to its last kernel's end \
                 ({what}; the gaps between its {per_call} launch(es) count): FlashInfer's bench_gpu_time_with_cupti, \
                 which flashinfer-bench times solutions with"
            ),
            c.span_us,
        ));
    }
    out.extend([
        TierSamples::new(
            "kernel",
            format!(
                "CUDA events recorded right around {what}, queued behind a {} MiB memset that \
                 flushes L2 (launch latency hidden); {} input sets cycled",
                flush_bytes >> 20,
                sets
            ),
            kernel,
        ),
        TierSamples::new(
            "events",
            format!(
                "L2 flush, stream synchronise, then CUDA events around the host-side call path \
                 (argument checks, kernel choice, {what}); {sets} input sets cycled"
            ),
            events,
        ),
        TierSamples::new(
            "graph",
            format!(
                "{GRAPH_CALLS} calls ({what} each) captured in one CUDA graph and replayed; CUDA events around each \
                 replay, divided by {GRAPH_CALLS} (hot L2, no launch gaps); {sets} input sets cycled"
            ),
            graph,
        ),
    ]);
    Ok(out)
}

/// What the CUPTI records of `iters` calls give: per call the union of its kernel intervals (`cupti`) and its span
/// (`span`), and the median of each launch.
struct CuptiSamples {
    busy_us: Vec<f64>,
    span_us: Vec<f64>,
    launch_median_us: Vec<f64>,
}

/// The `cupti` and `span` tiers: one probe call counts the launches of a call (none, e.g. a memcpy: no tier), then
/// `iters` flushed calls are recorded and their kernel intervals united per call.
fn cupti_tier(
    rec: &crate::runtime::cupti::Recorder,
    b: &CudaBackend,
    flush: &DeviceBuf,
    sets: usize,
    call: &Call,
    iters: usize,
) -> Result<Option<CuptiSamples>> {
    let s = b.gpu.stream();
    let err = |e: String| be(format!("cupti tier: {e}"));
    let probe = rec
        .record(|| {
            call(0, s).map_err(|e| e.to_string())?;
            b.gpu.sync()
        })
        .map_err(err)?;
    let per_call = probe.len();
    if per_call == 0 {
        return Ok(None);
    }
    let recorded = rec
        .record(|| {
            for it in 0..iters {
                flush.fill_u32(0x5a5a_0000 ^ it as u32, s)?;
                call(it % sets, s).map_err(|e| e.to_string())?;
            }
            b.gpu.sync()
        })
        .map_err(err)?;
    Ok(Some(CuptiSamples {
        busy_us: crate::runtime::cupti::per_call_us(&recorded, per_call, iters).map_err(err)?,
        span_us: crate::runtime::cupti::per_call_span_us(&recorded, per_call, iters)
            .map_err(err)?,
        launch_median_us: crate::runtime::cupti::per_launch_us(&recorded, per_call, iters)
            .map_err(err)?
            .iter()
            .map(|d| median(d))
            .collect(),
    }))
}

fn graph_tier(b: &CudaBackend, sets: usize, call: &Call, iters: usize) -> Result<Vec<f64>> {
    let s = b.gpu.stream();
    // SAFETY: our stream; capture ends below on every path.
    unsafe {
        result::stream::begin_capture(
            s.0,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
    }
    .map_err(|e| be(drv("cuStreamBeginCapture", e)))?;
    let mut captured = Ok(());
    for c in 0..GRAPH_CALLS {
        captured = call(c % sets, s);
        if captured.is_err() {
            break;
        }
    }
    // SAFETY: capture was begun on this stream.
    let graph =
        unsafe { result::stream::end_capture(s.0) }.map_err(|e| be(drv("cuStreamEndCapture", e)));
    captured?;
    let graph = graph?;
    // SAFETY: a graph just captured; destroyed below.
    let exec = unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) };
    let out = (|| -> Result<Vec<f64>> {
        let exec = exec.map_err(|e| be(drv("cuGraphInstantiate", e)))?;
        let run = || -> Result<Vec<f64>> {
            // SAFETY: an instantiated graph on our stream.
            let launch = || {
                unsafe { result::graph::launch(exec, s.0) }.map_err(|e| be(drv("cuGraphLaunch", e)))
            };
            launch()?; // warm-up replay (uploads the graph)
            b.gpu.sync().map_err(be)?;
            let replays = iters.max(MIN_GRAPH_REPLAYS);
            let ev: Vec<EventPair> = (0..replays)
                .map(|_| EventPair::new())
                .collect::<Result<_>>()?;
            for e in &ev {
                e.start(s)?;
                launch()?;
                e.stop(s)?;
            }
            b.gpu.sync().map_err(be)?;
            ev.iter()
                .map(|e| e.us().map(|us| us / GRAPH_CALLS as f64))
                .collect()
        };
        let r = run();
        // SAFETY: instantiated above, no longer running (synchronised or failed).
        unsafe {
            let _ = result::graph::exec_destroy(exec);
        }
        r
    })();
    // SAFETY: captured above.
    unsafe {
        let _ = result::graph::destroy(graph);
    }
    out
}

/// Times problem `p` over the given input sets.
pub fn time_problem(
    b: &CudaBackend,
    p: &Problem,
    inputs: &[Inputs],
    cfg: &TimingConfig,
) -> Result<Vec<TierSamples>> {
    let _g = b.lock.lock().unwrap_or_else(|e| e.into_inner());
    b.gpu.bind().map_err(be)?;
    let s = b.gpu.stream();
    let failed = b.kernels.load_all();
    let sets: Vec<DeviceInputs> = inputs
        .iter()
        .map(|x| DeviceInputs::upload(p, x, s))
        .collect::<Result<_>>()?;
    let first = inputs
        .first()
        .ok_or_else(|| be("time: no input sets given".into()))?;
    let outs = DeviceOutputs::alloc(p, first.intermediate, first.checkpoints, s)?;
    // the workspace is sized here, before the warm-up and the graph capture (no allocation inside)
    let force = b.kernels.env_override();
    let ws = b.workspace_for(p, force)?;
    b.gpu.sync().map_err(be)?;
    let call = |i: usize, st: Stream| -> Result<()> {
        // SAFETY: buffers sized for p; our stream; the workspace is ours while `lock` is held.
        unsafe { enqueue(&b.kernels, p, &sets[i], &outs, ws, force, st) }.map(|_| ())
    };
    let what = "the call's launches (one kernel, or the chunk64 prefill plan's prep + walk)";
    tiers(b, sets.len(), &call, cfg, what).map_err(|e| {
        if failed.is_empty() {
            e
        } else {
            be(format!(
                "{e} (modules that failed to load: {})",
                failed.join("; ")
            ))
        }
    })
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s.get(s.len() / 2).copied().unwrap_or(f64::INFINITY)
}

/// Times a device-to-device copy of `bytes / 2` (the copy floor), cycling `cfg.input_sets` sources: per
/// tier the faster of `cuMemcpyDtoDAsync` and the copy kernel.
pub fn time_copy(b: &CudaBackend, bytes: u64, cfg: &TimingConfig) -> Result<Vec<TierSamples>> {
    let _g = b.lock.lock().unwrap_or_else(|e| e.into_inner());
    b.gpu.bind().map_err(be)?;
    let words = (bytes / 2 / 16).max(1);
    let half = (words * 16) as usize;
    let sets = cfg.input_sets.max(1);
    let k = copy_kernel(b)?;
    let srcs: Vec<DeviceBuf> = (0..sets)
        .map(|_| DeviceBuf::alloc(half).map_err(be))
        .collect::<Result<_>>()?;
    for (i, src) in srcs.iter().enumerate() {
        src.fill_u32(0x3f80_0000 + i as u32, b.gpu.stream())
            .map_err(be)?; // non-zero data
    }
    let dst = DeviceBuf::alloc(half).map_err(be)?;
    let max_ctas = (b.gpu.info.sm_count * COPY_CTAS_PER_SM) as u64;
    let grid = words.div_ceil(COPY_BLOCK as u64).min(max_ctas) as u32;
    let kernel_copy = |i: usize, st: Stream| -> Result<()> {
        let (mut src, mut dstp, mut n) = (srcs[i].ptr, dst.ptr, words as i64);
        let mut args = [
            &mut src as *mut u64 as *mut std::ffi::c_void,
            &mut dstp as *mut u64 as *mut std::ffi::c_void,
            &mut n as *mut i64 as *mut std::ffi::c_void,
        ];
        // SAFETY: both buffers hold `words` 16-byte words; the arguments live through the call.
        unsafe {
            result::launch_kernel(k.func, (grid, 1, 1), (COPY_BLOCK, 1, 1), 0, st.0, &mut args)
        }
        .map_err(|e| be(drv("launching the copy kernel", e)))
    };
    let memcpy = |i: usize, st: Stream| -> Result<()> {
        // SAFETY: both buffers hold `half` bytes.
        unsafe { result::memcpy_dtod_async(dst.ptr, srcs[i].ptr, half, st.0) }
            .map_err(|e| be(drv("cuMemcpyDtoDAsync", e)))
    };
    let by_kernel = tiers(b, sets, &kernel_copy, cfg, "one copy-kernel launch")?;
    let by_memcpy = tiers(b, sets, &memcpy, cfg, "one cuMemcpyDtoDAsync")?;
    // per tier (by name: a memcpy has no `cupti` tier, it launches no kernel) the faster of the two
    Ok(by_kernel
        .into_iter()
        .map(|k| match by_memcpy.iter().find(|m| m.tier == k.tier) {
            Some(m) if median(&m.samples_us) <= median(&k.samples_us) => m.clone(),
            _ => k,
        })
        .collect())
}

impl Timed for CudaBackend {
    fn time(&self, p: &Problem, inputs: &[Inputs], cfg: &TimingConfig) -> Result<Vec<TierSamples>> {
        time_problem(self, p, inputs, cfg)
    }

    fn time_copy(&self, bytes: u64, cfg: &TimingConfig) -> Result<Vec<TierSamples>> {
        time_copy(self, bytes, cfg)
    }

    fn device(&self) -> String {
        format!(
            "{}, kernels for {}",
            self.gpu.info.describe(),
            self.kernels.target()
        )
    }
}
