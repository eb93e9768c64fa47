//! The prefill cost model: estimated kernel time (µs) of each prefill plan from what the host knows about a
//! call — T tokens, N sequences, HV value heads, the SM count and, when the caller gives it, the length of
//! the longest sequence (`Shape::max_seq_len`; otherwise the lengths are taken as equal, ceil(T/N)).
//! `policy` runs the plan (and cp segment count) with the smallest estimate, and the fused tile width with
//! the smallest estimate when the longest length is known (without it, a fill rule that hedges against
//! skew: `policy::fused_tile`). Pure and GPU-free.
//!
//! Why a model rather than thresholds: a prefill call's time is set either by its longest sequence (the
//! sequential chain of chunks) or by its total work spread over the SMs, and which one depends on the
//! length distribution. Tile-width thresholds on N alone (the session-3 rule) picked the widest tile for a
//! batch of 44 sequences whose longest has 5,637 tokens: 433 µs where the narrowest tile takes 306 and
//! context parallelism 235 (results/prefill_plans.md).
//!
//! Calibration: H200 (132 SMs), CUPTI kernel time with the L2 flushed, fp32 state, qk4_v8, 2026-11-21:
//! single sequences for the per-chunk costs, the 25 contest-mix workloads of ≥ 2048 tokens for the rest
//! (results/prefill_plans.md has the table; `tests/cost.rs` replays it). Times scale with 132 / SMs.
//!
//! Fused plan (`prefill.cu`, tile BV, one CTA per SM): each of the N·HV·128/BV CTAs walks its sequence's
//! 16-token chunks, `chunk_us(BV)` each, after a fixed `FUSED_CTA_US`:
//!   fused = max(chain, work),  chain = ceil(longest/16)·chunk_us + FUSED_CTA_US,
//!   work = ((T/16 + N/2)·chunk_us + N·FUSED_CTA_US) · HV·128/BV / SMs          (N/2: partial last chunks)
//! Context-parallel plan (`prefill64.cu`; see `policy`): G segments of L chunks cut the longest sequence;
//! `long` = min(N, T / longest) sequences are taken to be that long, the rest short (one segment each):
//!   prep  = PREP_FIXED_US + PREP_CHUNK_SM_US · HV·(T/64 + N/2) / SMs
//!   pass1 = max(L·WALK + WALK_CTA, [chains·(L·WALK + WALK_CTA) + 2·chains·(G−2)·(L·SUMMARY + WALK_CTA)
//!                                   + (short tokens/64 · WALK + short seqs · (WALK_CTA + WALK/2))·HV·2] / SMs)
//!   scan  = SCAN_FIXED_US + SCAN_STEP_US·(G−2),   pass3 = max(L·WALK + PASS3_CTA, chains·(G−1)·(L·WALK + WALK_CTA) / SMs)
//! with chains = long·HV·2. G = 1 is the chunk64 plan (prep + one walk, no scan, no pass 3).

use crate::policy::Shape;

/// Fused plan: µs per 16-token chunk of one CTA, by tile width BV (single sequences of 4,380 tokens).
pub const FUSED_CHUNK_US: [(u32, f64); 4] = [(16, 0.66), (32, 0.70), (64, 0.86), (128, 1.18)];
/// Fused plan: fixed µs per CTA (launch, state in and out, pipeline fill).
pub const FUSED_CTA_US: f64 = 5.0;
/// chunk64 / cp walks: µs per 64-token chunk of a real walk and of a summary walk, fixed µs per walk CTA
/// (state in, first loads, state out), and per pass-3 CTA (state from the workspace).
pub const WALK_CHUNK_US: f64 = 2.3;
pub const SUMMARY_CHUNK_US: f64 = 1.5;
pub const WALK_CTA_US: f64 = 10.0;
pub const PASS3_CTA_US: f64 = 6.0;
/// Prep: fixed µs, and SM·µs per (64-token chunk, value head).
pub const PREP_FIXED_US: f64 = 12.5;
pub const PREP_CHUNK_SM_US: f64 = 4.37;
/// Scan: fixed µs, and µs per dependent step (one per segment after the second).
pub const SCAN_FIXED_US: f64 = 2.0;
pub const SCAN_STEP_US: f64 = 4.6;

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
    FUSED_CHUNK_US
        .iter()
        .min_by_key(|(w, _)| w.abs_diff(bv))
        .map(|x| x.1)
        .expect("calibrated widths")
}

/// Estimated µs of the fused plan with tile width `bv` on `sms` SMs.
pub fn fused_us(s: &Shape, bv: u32, sms: u64) -> f64 {
    let l = Lengths::of(s);
    let c = fused_chunk_us(bv);
    let (t, n, hv) = (l.tokens as f64, l.seqs as f64, s.num_v_heads as f64);
    let chain = (l.longest as f64 / FUSED_CHUNK).ceil() * c + FUSED_CTA_US;
    let per_tile = (t / FUSED_CHUNK + n / 2.0) * c + n * FUSED_CTA_US;
    let work = per_tile * hv * (128.0 / bv as f64) / sms.max(1) as f64;
    chain.max(work)
}

/// A context-parallel (or, with one segment, chunk64) estimate.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct CpEstimate {
    /// Segments the longest sequence is cut into (1: the chunk64 plan) and chunks per segment (L).
    pub segments: u64,
    pub seg_chunks: u64,
    /// Walk chains of the long sequences: long·HV·2.
    pub chains: u64,
    pub us: f64,
    /// prep, pass 1 (the walk for chunk64), scan, pass 3.
    pub parts: [f64; 4],
}

/// Estimated µs of the cp plan that cuts the longest sequence into about `g` segments (L = ceil(chunks/g),
/// then G = ceil(chunks/L)); `g` = 1 estimates the chunk64 plan.
pub fn cp_us(s: &Shape, g: u64, sms: u64) -> CpEstimate {
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
    let chains = l.long_seqs * s.num_v_heads as u64 * 2;
    let (ch, lf, gf) = (chains as f64, seg_chunks as f64, segments as f64);
    let prep = PREP_FIXED_US + PREP_CHUNK_SM_US * hv * (t / CHUNK64 + n / 2.0) / smsf;
    let short_tokens = (l.tokens.saturating_sub(l.long_seqs * l.longest)) as f64;
    let short_seqs = (l.seqs - l.long_seqs) as f64;
    let seg_walk = lf * WALK_CHUNK_US + WALK_CTA_US;
    let work1 = ch * seg_walk
        + 2.0 * ch * (gf - 2.0).max(0.0) * (lf * SUMMARY_CHUNK_US + WALK_CTA_US)
        + (short_tokens / CHUNK64 * WALK_CHUNK_US
            + short_seqs * (WALK_CTA_US + WALK_CHUNK_US / 2.0))
            * hv
            * 2.0;
    let pass1 = seg_walk.max(work1 / smsf);
    let (scan, pass3) = if segments < 2 {
        (0.0, 0.0)
    } else {
        (
            SCAN_FIXED_US + SCAN_STEP_US * (gf - 2.0).max(0.0),
            (lf * WALK_CHUNK_US + PASS3_CTA_US).max(ch * (gf - 1.0) * seg_walk / smsf),
        )
    };
    let parts = [prep, pass1, scan, pass3];
    CpEstimate {
        segments,
        seg_chunks,
        chains,
        us: parts.iter().sum(),
        parts,
    }
}

/// Segment-count limits of the automatic cp plan: at least this many segments, at most `MAX_SEGMENTS`,
/// segments of at least `MIN_SEG_CHUNKS` chunks, and whole waves: pass 3 (chains·(G−1) CTAs, one per SM)
/// in one wave and pass 1 (chains·(2G−3)) in at most two. Measured on the H200 (results/prefill64.md): a
/// second pass-3 wave costs ~30% (1×65536 G = 9 894 µs, G = 10 1217), which the averaged work term above
/// does not see, so the waves are limits rather than estimates.
pub const MIN_SEGMENTS: u64 = 3;
pub const MAX_SEGMENTS: u64 = 64;
pub const MIN_SEG_CHUNKS: u64 = 4;

/// The cheapest automatic cp plan for `s`, or `None` when no segment count meets the limits.
pub fn best_cp(s: &Shape, sms: u64) -> Option<CpEstimate> {
    (MIN_SEGMENTS..=MAX_SEGMENTS)
        .map(|g| cp_us(s, g, sms))
        .filter(|e| {
            e.segments >= MIN_SEGMENTS
                && e.seg_chunks >= MIN_SEG_CHUNKS
                && e.chains * (e.segments - 1) <= sms
                && e.chains * (2 * e.segments - 3) <= 2 * sms
        })
        .min_by(|a, b| a.us.total_cmp(&b.us))
}
