//! The prefill cost model: every calibrated constant of the prefill planner, and the estimated kernel time (µs)
//! of each prefill plan from what the host knows about a call — T tokens, N sequences, HV value heads, the SM
//! count and, when the caller gives it, the length of the longest sequence (`Shape::max_seq_len`; otherwise the
//! lengths are taken as equal, ceil(T/N)). Pure and GPU-free: it imports the plan types, the registry's kernel
//! constants and the grid's slot counts, and decides nothing (the planners in `host` and `device` do).
//!
//! Why a model rather than thresholds: a prefill call's time is set either by its longest sequence (the
//! sequential chain of chunks) or by its total work spread over the SMs, and which one depends on the length
//! distribution. A tile-width threshold on N alone picks the widest tile for a batch of 44 sequences whose longest
//! has 5,637 tokens: 433 µs, where the narrowest tile takes 306 and context parallelism 235.
//!
//! Calibration: H200 (132 SMs), CUPTI kernel time with the L2 flushed, fp32 state, qk4_v8; times scale with
//! 132 / SMs. `tools/fit_cost.py` fits the chunk64 / cp constants (prep, walk forms; the scan with `--scan`) on
//! squared log error, each part on its own, from two harness sweeps of the current kernels: the contest-like mix's
//! 25 workloads of ≥ 2048 tokens with chunk64 and both cp walk forms at 7–8 segment lengths each
//! (`tools/prefill64_harness.py mixlong`) and single sequences of 2K–64K tokens at 7 segment lengths; the fused
//! constants with `--fused`, on every tile width over the mix. A constant fitted alone, on a subset of calls or
//! held against a free fit says so beside it. `tests/cost_vs_measurements.rs` replays the mixlong table (the model
//! must pick plans near the measured best); `tests/plan_golden.rs` pins the picks at calibrated points, and a refit
//! rewrites it.
//!
//! Fused plan (`kernels/prefill_fused/`, tile BV, one CTA per SM): each of the N·HV·128/BV CTAs walks its sequence's
//! 16-token chunks, `chunk_us(BV)` each, after a fixed `FUSED_CTA_US`; a lone chain runs at `chain_us(BV)` per chunk:
//!   fused = max(chain, work, waves),  chain = ceil(longest/16)·chain_us + FUSED_CTA_US,
//!   work = ((T/16 + N/2)·chunk_us + N·FUSED_CTA_US) · HV·128/BV / SMs          (N/2: partial last chunks)
//!   waves = ceil(N·HV·128/BV / SMs) · (chunk_us + FUSED_CTA_US)      (tiny calls: every wave costs a CTA)
//! Context-parallel plan (`kernels/prefill_chunk64/`; see `host`): G segments of L chunks cut the longest sequence;
//! `long` = min(N, T / longest) sequences are taken to be that long, the rest short (one segment each). The
//! walks come in two forms (`WALK_FORMS`): one warpgroup per CTA (a 64-row value half, `cph` = 2 CTAs per
//! head) or two (a whole head, `cph` = 1), each with its own per-chunk and per-CTA costs (W, S, C, C3, CS):
//!   prep  = PREP_FIXED_US + PREP_CHUNK_SM_US · HV·(T/64 + N/2) / SMs
//!   pass1 = max(L·W + C, [chains·(L·W + C) + 2·chains·(G−2)·(L·S + C)           (G = 1: W = CHUNK64_WALK_CHUNK_US)
//!                          + (short tokens/64 · W + short seqs · (CS + W/2))·HV·cph] / SMs)
//!   scan  = fixed + step·(G−2)·ceil(long·HV·cph_scan / SMs) + SCAN_WAVE_US · scan CTAs / SMs   (fixed, step:
//!           `SCAN_US` of the kernel; scan CTAs = K·HV·cph_scan, K = min(N, T / (128·L + 1)):
//!           `grid::prefill64_scan_seqs`; K = 0: no launch, 0)
//!   pass3 = max(L·W + C3, (chains·(G−1) + rest)·(L·W + C) / SMs)
//! with chains = long·HV·cph and rest = floor(ceil(short tokens/64) / L)·HV·cph: the most pass-3 CTAs the
//! other sequences can add (one per segment past their first; a second sequence almost as long as the
//! longest is cut too). G = 1 is the chunk64 plan (prep + one one-warpgroup walk, no scan, no pass 3).
//! Device plan (`device`): a launch that is not the call's costs `exit_us`.

use crate::kernels::registry::prefill64;
use crate::plan::grid::{prefill64_scan_min_tokens, prefill64_scan_seqs};
use crate::plan::Shape;

/// Fused plan: µs per 16-token chunk of one CTA, by tile width BV, fitted on single sequences of 2,443 and 4,380
/// tokens and the mix's long workloads. (A free fit over the whole mix at every tile width, `fit_cost.py --fused`,
/// has a smaller error but picks tiles no better on the mix, and fused over faster chunk64 / cp plans on three of
/// its long workloads.)
pub const FUSED_CHUNK_US: [(u32, f64); 4] = [(16, 0.495), (32, 0.605), (64, 0.875), (128, 1.14)];
/// Fused plan: µs per 16-token chunk of one CTA's chain (the `chain` term), by tile width: `FUSED_CHUNK_US` except
/// bv64's, fitted alone on its longest-first kernel forced onto every call of the contest-like mix with 2 or more
/// sequences (58 calls, rms log error 0.10). A lone bv64 chain measures ~0.65 µs; 0.875 is its share of an SM that
/// every CTA of the grid competes for. bv128's chain fits 1.13 on the same calls, within error of 1.14.
pub const FUSED_CHAIN_US: [(u32, f64); 4] = [(16, 0.495), (32, 0.605), (64, 0.68), (128, 1.14)];
/// Fused plan: fixed µs per CTA (launch, state in and out, pipeline fill).
pub const FUSED_CTA_US: f64 = 4.0;
/// Fused plan without a length hint: the widest tile whose grid reaches NUM/DEN of the SM count (`host`'s hedge
/// against skew the host cannot see: on the contest-like mix the equal-length estimate alone picks wide tiles for
/// 5–15 sequences that are 35–80% slower when one of them is long; 5579 µs in all, 5316 with this rule).
pub const PREFILL_FILL_NUM: u64 = 9;
pub const PREFILL_FILL_DEN: u64 = 10;
/// Shortest longest sequence (tokens; the hinted one, or T without a hint) for which the fused kernels run the
/// sequences longest first. Reordering gains at most about the longest chain's wait for a free SM, short when every
/// sequence is; the ranking costs each CTA ~0.3–0.4 µs (harness: 64×1024 bv128 +1.6 µs over 4 waves, 32×256 +1.2).
/// Measured with a slower ranking (~1.5 µs per wave), the contest-like mix gains from a longest sequence of ~190
/// tokens on (22 sequences, longest 192: −3.5 µs) and loses below (longest 89: +1.4). 128 tokens: 8 chunks of chain.
pub const LONGEST_FIRST_MIN_TOKENS: u64 = 128;

/// One form of the chunk64 / cp walks: warpgroups per walk CTA, and its costs.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct WalkForm {
    /// 1: a CTA per 64-row value half (`gdn_prefill64_walk_*`, `…_cp_pass{1,3}_*`); 2: a CTA per head, a
    /// warpgroup per half (`…_cp_pass{1,3}w_*`), sharing each chunk's loads.
    pub warpgroups: u64,
    /// µs per 64-token chunk of a real walk and of a summary walk (pass 1's middle segments).
    pub walk_chunk_us: f64,
    pub summary_chunk_us: f64,
    /// Fixed µs per walk CTA (state in, first loads, state out), and per pass-3 CTA.
    pub walk_cta_us: f64,
    pub pass3_cta_us: f64,
    /// Fixed µs per pass-1 CTA of a sequence too short to be cut (a whole sequence of ~1 chunk, its state in and
    /// out), fitted alone on the mix's many-sequence rows, where `walk_cta_us` leaves pass 1 15-35% low.
    pub short_cta_us: f64,
}

impl WalkForm {
    /// Walk CTAs per (sequence or segment, value head, role).
    pub fn ctas_per_head(&self) -> u64 {
        2 / self.warpgroups
    }
}

/// The walk forms, one warpgroup first (the chunk64 plan's). Two warpgroups walk 128 rows in 2.4 µs per
/// chunk where one takes 1.7 for 64: a throughput form, for grids that fill the GPU.
pub const WALK_FORMS: [WalkForm; 2] = [
    WalkForm {
        warpgroups: 1,
        walk_chunk_us: 1.731,
        summary_chunk_us: 1.049,
        walk_cta_us: 5.377,
        short_cta_us: 5.129,
        pass3_cta_us: 1.979,
    },
    WalkForm {
        warpgroups: 2,
        walk_chunk_us: 2.425,
        // held: a free fit (1.98, equal error) picks one warpgroup for 2x16384, measured slower
        summary_chunk_us: 1.836,
        walk_cta_us: 6.368,
        pass3_cta_us: 5.091,
        short_cta_us: 6.184,
    },
];
/// The chunk64 plan's walk (one segment: the plain one-warpgroup walk, no cp passes): µs per 64-token chunk,
/// fitted alone on the chunk64 totals of the mixlong sweep (rms log error 0.027). Below the cp passes' 1.73: a
/// plain walk shares the GPU with fewer CTAs (single sequences measure 1.42), and it runs the sequences longest
/// first, so many-sequence walks come close to max(chain, work), which is all the model has.
pub const CHUNK64_WALK_CHUNK_US: f64 = 1.382;
/// Prep: fixed µs, and SM·µs per (64-token chunk, value head): linear in the chunks, the best of the forms tried
/// (rms log error 0.05; it overestimates 1x65536, 162 vs 136 µs measured, where the plans it chooses between all
/// pay the same prep). Prep and scan keep the fit's values unrounded: 2x16384's segment count is a knife-edge of
/// their second place.
pub const PREP_FIXED_US: f64 = 5.894;
pub const PREP_CHUNK_SM_US: f64 = 2.518;
/// Scan, by kernel (its CTAs per (sequence, value head): 16 = `gdn_prefill64_cp_scan8`, 8 = `…_cp_scan`):
/// fixed µs and µs per dependent step (one per segment after the second; the steps count once per wave of the long
/// sequences' CTAs). `fit_cost.py --scan` on the mixlong sweep, the walk and prep constants held (rms log error of
/// the scan 0.149).
pub const SCAN_US: [(u32, f64, f64); 2] = [
    (prefill64::CP_SCAN8_CTAS, 1.976, 1.532),
    (prefill64::CP_SCAN_CTAS, 3.251, 1.942),
];
/// Scan: µs per wave of scan CTAs (one per SM; those whose rank finds no sequence return at once).
pub const SCAN_WAVE_US: f64 = 0.083;

const FUSED_CHUNK: f64 = 16.0;
const CHUNK64: f64 = 64.0;

/// What the host knows about a prefill call's lengths.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Lengths {
    pub tokens: u64,
    pub seqs: u64,
    /// Tokens of the longest sequence: the caller's hint clamped to [ceil(T/N), T], else ceil(T/N).
    pub longest: u64,
    /// Sequences taken to be `longest` long: min(N, T / longest), at least 1.
    pub long_seqs: u64,
}

impl Lengths {
    pub fn of(s: &Shape) -> Lengths {
        let (t, n) = (s.total_tokens as u64, (s.num_seqs as u64).max(1));
        let even = t.div_ceil(n);
        let longest = match s.max_seq_len as u64 {
            0 => even,
            hint => hint.clamp(even, t.max(even)),
        };
        Lengths {
            tokens: t,
            seqs: n,
            longest,
            long_seqs: (t / longest.max(1)).clamp(1, n),
        }
    }
}

/// µs per 16-token chunk of the fused kernel with tile width `bv` (the nearest calibrated width).
pub fn fused_chunk_us(bv: u32) -> f64 {
    nearest(&FUSED_CHUNK_US, bv)
}

/// µs per 16-token chunk of one fused CTA's chain with tile width `bv` (the nearest calibrated width).
pub fn fused_chain_us(bv: u32) -> f64 {
    nearest(&FUSED_CHAIN_US, bv)
}

fn nearest(table: &[(u32, f64)], bv: u32) -> f64 {
    table
        .iter()
        .min_by_key(|(w, _)| w.abs_diff(bv))
        .map(|x| x.1)
        .expect("calibrated widths")
}

/// Estimated µs of the fused plan with tile width `bv` on `sms` SMs.
pub fn fused_us(s: &Shape, bv: u32, sms: u64) -> f64 {
    let l = Lengths::of(s);
    let chain = (l.longest as f64 / FUSED_CHUNK).ceil() * fused_chain_us(bv) + FUSED_CTA_US;
    chain.max(fused_work_us(s, bv, sms))
}

/// The fused estimate's work and waves terms (`fused_us` without the chain).
fn fused_work_us(s: &Shape, bv: u32, sms: u64) -> f64 {
    let l = Lengths::of(s);
    let c = fused_chunk_us(bv);
    let (t, n, hv) = (l.tokens as f64, l.seqs as f64, s.num_v_heads as f64);
    let per_tile = (t / FUSED_CHUNK + n / 2.0) * c + n * FUSED_CTA_US;
    let work = per_tile * hv * (128.0 / bv as f64) / sms.max(1) as f64;
    // one CTA per SM: the last wave of a grid wider than the GPU costs at least one CTA's fixed time
    let ctas = l.seqs * s.num_v_heads as u64 * (128 / bv.max(1) as u64);
    let waves = ctas.div_ceil(sms.max(1)) as f64 * (c + FUSED_CTA_US);
    work.max(waves)
}

/// Shortest sequence the split bv128 tile never splits (`kernels/prefill_fused/` `SPLIT_MIN_TOKENS`).
pub const SPLIT_MIN_TOKENS: u64 = 128;
/// Each sequence's fixed cost (its CTAs' state in and out, its partial last chunk), in tokens of work, in the split
/// threshold (`kernels/prefill_fused/` `SPLIT_SEQ_TOKENS`).
pub const SPLIT_SEQ_TOKENS: u64 = 64;
/// Fused plan: µs per 16-token chunk of a split sequence's chain (a 64-row half CTA of the split bv128 tile): bv64's
/// chain constant (0.68) scaled by the 4-5% that a half CTA's chain measures above bv64_lf's on the 38 calls of the
/// mix it splits (both kernels forced onto every prefill call in one process; prefill_70 81.9 vs 77.2 µs,
/// prefill_02 241.1 vs 230.7), so that the model prefers bv64_lf where both are chain-bound, as measured.
pub const SPLIT_CHAIN_US: f64 = 0.71;

/// The split bv128 tile (`gdn_prefill_*_bv128_sp`) runs a sequence on two CTAs of 64 value rows when it is longer
/// than this: its chain alone would outlast the call's even share of work, (T + `SPLIT_SEQ_TOKENS`·N)·HV / SMs tokens
/// (the kernel reads the SM count; at least `SPLIT_MIN_TOKENS`). In a sweep of the kernel's threshold, counting each
/// sequence as 64 more tokens splits fewer of the medium sequences, whose half chains only cost SM time ("30 mixed"
/// 52.1 µs, against 57.5 without); scaling the share by 1.25 or 1.5 instead loses on the skewed 8192-token calls.
pub fn split_threshold(s: &Shape, sms: u64) -> u64 {
    let (t, n) = (s.total_tokens as u64, s.num_seqs as u64);
    ((t + SPLIT_SEQ_TOKENS * n) * s.num_v_heads as u64 / sms.max(1)).max(SPLIT_MIN_TOKENS)
}

/// Estimated µs of the split bv128 tile: bv128's work and waves, and the longest sequence's chain at
/// `SPLIT_CHAIN_US` per chunk when it is split (a half CTA runs one walker per SM sub-partition, as bv64 does).
/// Measured against `gdn_prefill_f32_bv128_lf` on every prefill workload: 9 to 123 µs faster on the skewed
/// contest-like calls, the rest within +0.4 µs, equal lengths up to +4 (64×1024). The work term misses the tail of a
/// grid of unequal CTAs (the calls it splits and is work-bound on measure 10-35% above it: "30 mixed" 52.1 vs 43.4
/// µs); bv64's work term, fitted on the same kind of calls, overestimates them (62.8 vs 70.0), so the tile choice
/// between them holds.
pub fn fused_split_us(s: &Shape, sms: u64) -> f64 {
    let l = Lengths::of(s);
    if l.longest <= split_threshold(s, sms) {
        return fused_us(s, 128, sms);
    }
    let chain = (l.longest as f64 / FUSED_CHUNK).ceil() * SPLIT_CHAIN_US + FUSED_CTA_US;
    chain.max(fused_work_us(s, 128, sms))
}

/// A context-parallel (or, with one segment, chunk64) estimate.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct CpEstimate {
    /// Segments the longest sequence is cut into (1: the chunk64 plan) and chunks per segment (L).
    pub segments: u64,
    pub seg_chunks: u64,
    /// Warpgroups per walk CTA (`WalkForm::warpgroups`).
    pub warpgroups: u64,
    /// Walk chains of the long sequences: long·HV·(CTAs per head).
    pub chains: u64,
    /// Pass-3 CTAs the other sequences can add at most (their segments past the first, ·HV·CTAs per head).
    pub rest_ctas: u64,
    pub us: f64,
    /// prep, pass 1 (the walk for chunk64), scan, pass 3.
    pub parts: [f64; 4],
}

/// Estimated µs of the cp plan with walk form `form` that cuts the longest sequence into about `g` segments
/// (L = ceil(chunks/g), then G = ceil(chunks/L)); `g` = 1 estimates the chunk64 plan (form: `WALK_FORMS[0]`).
pub fn cp_us(s: &Shape, g: u64, form: &WalkForm, sms: u64) -> CpEstimate {
    let l = Lengths::of(s);
    let nch = l.longest.div_ceil(CHUNK64 as u64).max(1);
    let seg_chunks = nch.div_ceil(g.max(1));
    let segments = nch.div_ceil(seg_chunks);
    let (t, n, hv, smsf) = (
        l.tokens as f64,
        l.seqs as f64,
        s.num_v_heads as f64,
        sms.max(1) as f64,
    );
    let cph = form.ctas_per_head();
    let chains = l.long_seqs * s.num_v_heads as u64 * cph;
    let (ch, lf, gf) = (chains as f64, seg_chunks as f64, segments as f64);
    let w = if segments < 2 {
        CHUNK64_WALK_CHUNK_US
    } else {
        form.walk_chunk_us
    };
    let cta = form.walk_cta_us;
    let prep = PREP_FIXED_US + PREP_CHUNK_SM_US * hv * (t / CHUNK64 + n / 2.0) / smsf;
    let short_tokens = (l.tokens.saturating_sub(l.long_seqs * l.longest)) as f64;
    let short_seqs = (l.seqs - l.long_seqs) as f64;
    let seg_walk = lf * w + cta;
    let work1 = ch * seg_walk
        + 2.0 * ch * (gf - 2.0).max(0.0) * (lf * form.summary_chunk_us + cta)
        + (short_tokens / CHUNK64 * w + short_seqs * (form.short_cta_us + w / 2.0))
            * hv
            * cph as f64;
    let pass1 = seg_walk.max(work1 / smsf);
    let rest_ctas = if segments < 2 {
        0
    } else {
        let short_chunks = l
            .tokens
            .saturating_sub(l.long_seqs * l.longest)
            .div_ceil(CHUNK64 as u64);
        short_chunks / seg_chunks * s.num_v_heads as u64 * cph
    };
    let (scan, pass3) = if segments < 2 {
        (0.0, 0.0)
    } else {
        let (scan_ctas, per_head, fixed, step) = scan_costs(s, sms, seg_chunks);
        // (the waves of the sequences as long as the longest; `scan_work_seqs`, an upper bound that counts the
        // shorter ones as needing every step, fits the mixlong sweep worse: rms log error 0.37 against 0.15)
        let work_waves =
            (l.long_seqs * s.num_v_heads as u64 * per_head).div_ceil(sms.max(1)) as f64;
        (
            if scan_ctas == 0 {
                0.0 // (no launch)
            } else {
                fixed
                    + step * (gf - 2.0).max(0.0) * work_waves
                    + SCAN_WAVE_US * scan_ctas as f64 / smsf
            },
            (lf * w + form.pass3_cta_us)
                .max((ch * (gf - 1.0) + rest_ctas as f64) * seg_walk / smsf),
        )
    };
    let parts = [prep, pass1, scan, pass3];
    CpEstimate {
        segments,
        seg_chunks,
        warpgroups: form.warpgroups,
        chains,
        rest_ctas,
        us: parts.iter().sum(),
        parts,
    }
}

/// Sequences the cp scan is taken to work on with segments of `seg_chunks` (L) chunks, those of more than 2L
/// chunks: the `long_seqs` as long as the longest (when that is over 2L chunks), and as many more as the other
/// tokens can hold, at most K = `prefill64_scan_seqs` (the grid's). Without a hint this comes to about K (the
/// lengths could be anything); with one it can be fewer (`scan_ctas_per_head` then takes the 8-row scan when
/// only these fit one wave).
pub fn scan_work_seqs(s: &Shape, seg_chunks: u64) -> u64 {
    let l = Lengths::of(s);
    let need = prefill64_scan_min_tokens(seg_chunks);
    let long = if l.longest >= need { l.long_seqs } else { 0 };
    let rest = (l.tokens.saturating_sub(long * l.longest) / need).min(l.seqs - long);
    (long + rest).min(prefill64_scan_seqs(l.tokens, s.num_seqs as u64, seg_chunks))
}

/// CTAs per (sequence, value head) of the cp scan kernel that runs with segments of `seg_chunks` chunks (the
/// planner's rule, mirrored by the estimate; `host::cp_scan_kernel` names the kernel): 16
/// (`gdn_prefill64_cp_scan8`, 8 value rows per CTA) when the CTAs that do work (`scan_work_seqs`) fit one wave, one
/// per SM, else 8 (`gdn_prefill64_cp_scan`, 16 rows). A scan step is latency-bound, so twice the SMs per step pays
/// only while no second wave is needed (H200: 1x8192 scan 23.7 µs with 8-row CTAs, 27.4 with 16; 2x16384, two
/// waves of 8-row CTAs: 46.6, against 28.2). Either kernel is correct for any lengths; a hint only steers speed.
pub fn scan_ctas_per_head(s: &Shape, sms: u64, seg_chunks: u64) -> u32 {
    let seqs = scan_work_seqs(s, seg_chunks);
    let ctas8 = seqs * s.num_v_heads as u64 * prefill64::CP_SCAN8_CTAS as u64;
    if ctas8 <= sms {
        prefill64::CP_SCAN8_CTAS
    } else {
        prefill64::CP_SCAN_CTAS
    }
}

/// The scan kernel that runs for `s` (`scan_ctas_per_head`): its CTAs, CTAs per (sequence, head), fixed µs, µs per
/// step.
fn scan_costs(s: &Shape, sms: u64, seg_chunks: u64) -> (u64, u64, f64, f64) {
    let per_head = scan_ctas_per_head(s, sms, seg_chunks);
    let (_, fixed, step) = SCAN_US
        .iter()
        .copied()
        .find(|x| x.0 == per_head)
        .unwrap_or(SCAN_US[1]);
    let seqs = prefill64_scan_seqs(s.total_tokens as u64, s.num_seqs as u64, seg_chunks);
    let per_head = per_head as u64;
    (
        seqs * s.num_v_heads as u64 * per_head,
        per_head,
        fixed,
        step,
    )
}

/// Segment-count limits of the automatic cp plan: at least this many segments, at most `MAX_SEGMENTS` (which also
/// bounds forced cp plans, `host::cp_forced_segments`), segments of at least `MIN_SEG_CHUNKS` chunks, and whole
/// waves: pass 3 (chains·(G−1) + rest CTAs, one per SM) in one wave and pass 1 (chains·(2G−3) + 2·rest) in at most
/// two. Measured on the H200: a second pass-3 wave costs ~30% (1×65536: G = 9 894 µs, G = 10 1217), which the
/// averaged work term above does not see, so the waves are limits rather than estimates.
pub const MIN_SEGMENTS: u64 = 3;
pub const MAX_SEGMENTS: u64 = 64;
pub const MIN_SEG_CHUNKS: u64 = 4;

/// The cheapest automatic cp plan of each walk form for `s` (forms where no segment count meets the limits
/// left out), cheapest first.
pub fn cp_candidates(s: &Shape, sms: u64) -> Vec<CpEstimate> {
    // Only the segment counts that can meet the limits are estimated (all 2 x 62 would cost ~8 us of host time per
    // prefill call). G and L = ceil(chunks / G) determine each other's effect: one estimate per distinct L, none once
    // L < MIN_SEG_CHUNKS or pass 3's wave is full (both only get worse as G grows). The same estimates as the full
    // sweep (tests/cost_model.rs checks it).
    let nch = Lengths::of(s).longest.div_ceil(CHUNK64 as u64).max(1);
    let mut out: Vec<CpEstimate> = WALK_FORMS
        .iter()
        .filter_map(|form| {
            let chains = Lengths::of(s).long_seqs * s.num_v_heads as u64 * form.ctas_per_head();
            let mut last = 0;
            (MIN_SEGMENTS..=MAX_SEGMENTS)
                .map_while(|g| {
                    let l = nch.div_ceil(g);
                    (l >= MIN_SEG_CHUNKS && chains * (nch.div_ceil(l) - 1) <= sms).then_some((g, l))
                })
                .filter(|&(_, l)| std::mem::replace(&mut last, l) != l)
                .map(|(g, _)| cp_us(s, g, form, sms))
                .filter(|e| {
                    e.segments >= MIN_SEGMENTS
                        && e.seg_chunks >= MIN_SEG_CHUNKS
                        && e.chains * (e.segments - 1) + e.rest_ctas <= sms
                        && e.chains * (2 * e.segments - 3) + 2 * e.rest_ctas <= 2 * sms
                })
                .min_by(|a, b| a.us.total_cmp(&b.us))
        })
        .collect();
    out.sort_by(|a, b| a.us.total_cmp(&b.us));
    out
}

/// The cheapest automatic cp plan for `s` over both walk forms and every segment count, or `None` when no
/// segment count meets the limits.
pub fn best_cp(s: &Shape, sms: u64) -> Option<CpEstimate> {
    cp_candidates(s, sms).into_iter().next()
}

/// The smallest estimate of the prefill64 plans for `s`: chunk64 and the best automatic cp plan of either walk form.
pub fn prefill64_best_us(s: &Shape, sms: u64) -> f64 {
    best_cp(s, sms)
        .map_or(f64::INFINITY, |e| e.us)
        .min(cp_us(s, 1, &WALK_FORMS[0], sms).us)
}

/// The walk form with `warpgroups` warpgroups per CTA.
pub fn walk_form(warpgroups: u64) -> Option<&'static WalkForm> {
    WALK_FORMS.iter().find(|f| f.warpgroups == warpgroups)
}

/// Device plan: what a launch whose CTAs all exit at once costs, `EXIT_LAUNCH_US` plus `EXIT_WAVE_US` per wave of its
/// CTAs (each waits for one cu_seqlens load before it exits). Fitted on blind calls on the device plan's fused route:
/// 0.42 µs per wave from the same five exiting launches in 41 and in 15 waves (64×1024), 1.1 µs per launch from calls
/// that gain three one-wave launches. They are stream-ordered costs; with programmatic dependent launch an exiting
/// launch's CTAs are dispatched while the running one works (~1 µs per launch of span after a fused tile), so they
/// are conservative for the device plan.
pub const EXIT_WAVE_US: f64 = 0.42;
pub const EXIT_LAUNCH_US: f64 = 1.1;

/// Estimated µs of a launch whose CTAs all exit at once, in `waves` waves (`EXIT_WAVE_US`); nothing when it has none.
pub fn exit_us(waves: u64) -> f64 {
    if waves == 0 {
        return 0.0;
    }
    EXIT_LAUNCH_US + EXIT_WAVE_US * waves as f64
}
