//! Pure GPU kernel time from CUPTI activity records: the method of the peers' reference figures (CUPTI through
//! `torch.profiler`) and of flashinfer-bench, so that `gdn bench`'s `cupti` tier compares
//! one to one with the peers' numbers. CUDA events (the `kernel` tier) also count the GPU's event and launch
//! latency (~2-3 µs on an H200), which dominates calls of a few microseconds.
//!
//! One process-wide recorder: CUPTI allows one activity client per process. It is enabled only around a
//! [`Recorder::record`] call, which collects the (start, end) of every kernel that ran inside it (activity kind
//! CONCURRENT_KERNEL; memsets and copies are other kinds, so the L2 flush before each call is not counted).
//!
//! The library (`libcupti.so.13`) ships with the CUDA toolkit (`extras/CUPTI/lib64`) and as a PyPI wheel
//! (`nvidia/cu13/lib`, a torch dependency); [`crate::runtime::loader::cupti`] finds it. Without it the tier is simply
//! absent and `gdn bench` says so. `GDN_NO_CUPTI=1` turns it off (e.g. under an external profiler, which
//! would be a second CUPTI client).

use cudarc::cupti::{result::activity, sys};
use std::alloc::{alloc, dealloc, Layout};
use std::sync::{Mutex, OnceLock};

/// Activity buffer size and alignment (as NVIDIA's samples).
const BUF_BYTES: usize = 8 << 20;
const BUF_ALIGN: usize = 8;
/// Byte offsets of `start` and `end` (ns) in every kernel record version since CUpti_ActivityKernel4
/// (kind u32, cache config u8, shared memory config u8, registers u16, two u32 cache enums, then start, end):
/// read at these offsets so that a newer CUPTI's record version parses the same.
const START_OFF: usize = 16;
const END_OFF: usize = 24;

/// Kernel intervals delivered by CUPTI's buffer callbacks (its own thread) while a recording is on.
static INTERVALS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
/// Dropped-record and parse problems seen by the callbacks.
static PROBLEMS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn buf_layout() -> Layout {
    Layout::from_size_align(BUF_BYTES, BUF_ALIGN).expect("constant layout")
}

extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    // SAFETY: CUPTI hands valid out-pointers; the buffer is freed in `buffer_completed`, which CUPTI calls
    // for every buffer it requested.
    unsafe {
        *buffer = alloc(buf_layout());
        *size = if (*buffer).is_null() { 0 } else { BUF_BYTES };
        *max_records = 0; // as many as fit
    }
}

extern "C" fn buffer_completed(
    _ctx: cudarc::driver::sys::CUcontext,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    if buffer.is_null() {
        return;
    }
    let mut got = Vec::new();
    let mut rec: *mut sys::CUpti_Activity = std::ptr::null_mut();
    loop {
        // SAFETY: a buffer CUPTI filled with `valid` bytes of records.
        match unsafe { activity::get_next_record(buffer, valid, &mut rec) } {
            Ok(()) => {
                // SAFETY: `rec` points at a record inside the buffer; its first field is the kind.
                let kind = unsafe { (*rec).kind };
                if kind == sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                    || kind == sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_KERNEL
                {
                    let base = rec as *const u8;
                    // SAFETY: kernel records are at least 32 bytes and 8-byte aligned (see START_OFF).
                    let (s, e) = unsafe {
                        (
                            (base.add(START_OFF) as *const u64).read(),
                            (base.add(END_OFF) as *const u64).read(),
                        )
                    };
                    got.push((s, e));
                }
            }
            Err(e) => {
                if e.0 != sys::CUptiResult::CUPTI_ERROR_MAX_LIMIT_REACHED {
                    lock(&PROBLEMS).push(format!("cuptiActivityGetNextRecord: {:?}", e.0));
                }
                break;
            }
        }
    }
    lock(&INTERVALS).extend(got);
    // SAFETY: allocated by `buffer_requested` with the same layout.
    unsafe { dealloc(buffer, buf_layout()) };
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process's CUPTI activity client.
pub struct Recorder {
    /// One recording at a time.
    session: Mutex<()>,
}

static RECORDER: OnceLock<Result<Recorder, String>> = OnceLock::new();

impl Recorder {
    /// The recorder, or why there is none (library not found, `GDN_NO_CUPTI`, registration failed).
    pub fn get() -> Result<&'static Recorder, String> {
        RECORDER
            .get_or_init(Recorder::open)
            .as_ref()
            .map_err(Clone::clone)
    }

    fn open() -> Result<Recorder, String> {
        if std::env::var_os("GDN_NO_CUPTI").is_some_and(|v| !v.is_empty() && v != "0") {
            return Err("GDN_NO_CUPTI is set".into());
        }
        crate::runtime::loader::cupti()?;
        activity::register_callbacks(Some(buffer_requested), Some(buffer_completed))
            .map_err(|e| format!("cuptiActivityRegisterCallbacks: {:?}", e.0))?;
        Ok(Recorder {
            session: Mutex::new(()),
        })
    }

    /// Runs `f` (which must synchronise the work it enqueues before returning) with kernel recording on,
    /// and returns the (start, end) nanoseconds of every kernel that ran, sorted by start.
    pub fn record(
        &self,
        f: impl FnOnce() -> Result<(), String>,
    ) -> Result<Vec<(u64, u64)>, String> {
        let _s = lock(&self.session);
        let cupti = |what: &str, r: Result<(), cudarc::cupti::result::CuptiError>| {
            r.map_err(|e| format!("{what}: {:?}", e.0))
        };
        // drop anything left from an earlier recording
        cupti("cuptiActivityFlushAll", activity::flush_all(0))?;
        lock(&INTERVALS).clear();
        lock(&PROBLEMS).clear();
        let kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        cupti("cuptiActivityEnable", activity::enable(kind))?;
        let ran = f();
        let flushed =
            activity::flush_all(sys::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED as u32);
        let disabled = activity::disable(kind);
        ran?;
        cupti("cuptiActivityFlushAll", flushed)?;
        cupti("cuptiActivityDisable", disabled)?;
        let problems = std::mem::take(&mut *lock(&PROBLEMS));
        if !problems.is_empty() {
            return Err(format!("CUPTI records: {}", problems.join("; ")));
        }
        let mut v = std::mem::take(&mut *lock(&INTERVALS));
        v.sort_unstable();
        Ok(v)
    }
}

/// The sorted intervals of `calls` calls of `per_call` launches each, made one after another on one stream, one
/// chunk per call. Errors when the record count does not match (a launch missing or an unexpected kernel), rather than
/// misattributing, or when a record ends before it starts.
fn calls_of(
    intervals: &[(u64, u64)],
    per_call: usize,
    calls: usize,
) -> Result<std::slice::Chunks<'_, (u64, u64)>, String> {
    if per_call == 0 || intervals.len() != per_call * calls {
        return Err(format!(
            "CUPTI recorded {} kernels for {calls} calls of {per_call} launch(es) each",
            intervals.len()
        ));
    }
    if let Some((s, e)) = intervals.iter().find(|(s, e)| e < s) {
        return Err(format!(
            "CUPTI kernel record ends before it starts ({s} > {e})"
        ));
    }
    Ok(intervals.chunks(per_call))
}

fn duration_us(&(s, e): &(u64, u64)) -> f64 {
    (e - s) as f64 * 1e-3
}

/// Per-call kernel time (µs): the time in which at least one of the call's kernels runs, the union of their intervals
/// (`calls_of`'s checks). For launches that run one after another it is the sum of their durations, the peers'
/// method; under programmatic dependent launch a launch's CTAs start while its predecessor runs, and a
/// sum would count that overlap twice.
pub fn per_call_us(
    intervals: &[(u64, u64)],
    per_call: usize,
    calls: usize,
) -> Result<Vec<f64>, String> {
    Ok(calls_of(intervals, per_call, calls)?
        .map(|c| {
            // (a call's records are sorted by start)
            let (mut busy, mut reach) = (0u64, 0u64);
            for &(s, e) in c {
                let from = s.max(reach);
                busy += e.saturating_sub(from);
                reach = reach.max(e);
            }
            busy as f64 * 1e-3
        })
        .collect())
}

/// Per-call span (µs): from the first kernel's start to the last kernel's end of each call (`calls_of`'s checks). It
/// counts the gaps between a call's launches too: the method of FlashInfer's `bench_gpu_time_with_cupti`
/// (flashinfer.testing, which flashinfer-bench times solutions with); for a call of one launch, the sum.
pub fn per_call_span_us(
    intervals: &[(u64, u64)],
    per_call: usize,
    calls: usize,
) -> Result<Vec<f64>, String> {
    Ok(calls_of(intervals, per_call, calls)?
        .map(|c| {
            let first = c.iter().map(|x| x.0).min().unwrap_or(0);
            let last = c.iter().map(|x| x.1).max().unwrap_or(first);
            (last - first) as f64 * 1e-3
        })
        .collect())
}

/// Each launch's durations (µs) over the calls, in launch order (`calls_of`'s checks): which kernel of a plan the
/// time goes to, and what a launch that exits costs.
pub fn per_launch_us(
    intervals: &[(u64, u64)],
    per_call: usize,
    calls: usize,
) -> Result<Vec<Vec<f64>>, String> {
    let calls: Vec<_> = calls_of(intervals, per_call, calls)?.collect();
    Ok((0..per_call)
        .map(|j| calls.iter().map(|c| duration_us(&c[j])).collect())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{per_call_span_us, per_call_us, per_launch_us};

    #[test]
    fn spans_count_the_gaps_between_a_calls_launches() {
        // two calls of two launches: 0..1.5 and 2..4 us (span 4), then 10..13 and 14..14.25 (span 4.25)
        let iv = [(0, 1500), (2000, 4000), (10_000, 13_000), (14_000, 14_250)];
        assert_eq!(per_call_span_us(&iv, 2, 2).unwrap(), vec![4.0, 4.25]);
        // one launch per call: the span is the duration
        assert_eq!(
            per_call_span_us(&iv, 1, 4).unwrap(),
            per_call_us(&iv, 1, 4).unwrap()
        );
        assert!(per_call_span_us(&iv, 3, 1).is_err());
    }

    #[test]
    fn launches_follow_launch_order() {
        // three calls of two launches: first launches 1.5, 3, 1 us; second 2, 0.25, 0.5
        let iv = [
            (0, 1500),
            (2000, 4000),
            (10_000, 13_000),
            (14_000, 14_250),
            (20_000, 21_000),
            (22_000, 22_500),
        ];
        assert_eq!(
            per_launch_us(&iv, 2, 3).unwrap(),
            vec![vec![1.5, 3.0, 1.0], vec![2.0, 0.25, 0.5]]
        );
        assert!(per_launch_us(&iv, 4, 2).is_err());
        assert!(per_launch_us(&[(5, 4), (6, 7)], 2, 1)
            .unwrap_err()
            .contains("ends before"));
    }

    #[test]
    fn sums_each_calls_kernels() {
        // two calls of two launches: 1.5 + 2 us, then 3 + 0.25 us
        let iv = [(0, 1500), (2000, 4000), (10_000, 13_000), (14_000, 14_250)];
        assert_eq!(per_call_us(&iv, 2, 2).unwrap(), vec![3.5, 3.25]);
        assert_eq!(per_call_us(&iv, 1, 4).unwrap(), vec![1.5, 2.0, 3.0, 0.25]);
    }

    #[test]
    fn overlapping_launches_count_once() {
        // one call of three launches: 0..2 us, 1..3 (overlaps the first: PDL), 3.5..4 (nested in nothing), then a
        // call whose second launch lies inside its first
        let iv = [
            (0, 2000),
            (1000, 3000),
            (3500, 4000),
            (10_000, 14_000),
            (11_000, 12_000),
            (14_500, 15_000),
        ];
        assert_eq!(per_call_us(&iv, 3, 2).unwrap(), vec![3.5, 4.5]);
        assert_eq!(per_call_span_us(&iv, 3, 2).unwrap(), vec![4.0, 5.0]);
    }

    #[test]
    fn refuses_mismatched_counts_and_bad_records() {
        let iv = [(0, 1500), (2000, 4000), (10_000, 13_000)];
        assert!(per_call_us(&iv, 2, 2)
            .unwrap_err()
            .contains("3 kernels for 2 calls"));
        assert!(per_call_us(&iv, 0, 0).is_err());
        assert!(per_call_us(&[(5, 4)], 1, 1)
            .unwrap_err()
            .contains("ends before"));
    }
}
