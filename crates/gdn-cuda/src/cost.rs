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
//! Calibration: H200 (132 SMs), CUPTI kernel time with the L2 flushed, fp32 state, qk4_v8. The chunk64 / cp
//! constants (prep, walk forms) come from session 14's sweeps of the v7 kernels (f16 record): the 25
//! contest-mix workloads of ≥ 2048 tokens with chunk64 and both cp walk forms at 7–8 segment lengths each
//! (`prefill64_harness.py mixlong`, results/2026-11-21-h200-s14-mixlong.json) and single sequences of 2K–64K
//! tokens at 7 segment lengths (results/2026-11-21-h200-s14-single.json), fitted on log error per part by
//! `kernels/harness/fit_cost.py` (results/prefill64_s14.md); the fused constants are session 13's (session 19's
//! v12.2 / v12.3 made that kernel 0-4% faster; a session-20 refit was checked and not kept, see
//! `FUSED_CHUNK_US`). The prep and scan constants were refitted in session
//! 18 (v8 prep, and the scan's cheaper 3xTF32 split) by `fit_cost.py --scan` on a new mixlong sweep and single
//! sequences (results/2026-11-21-h200-s18-mixlong.json, …-s18-single.json; results/prefill_s18.md). Session 19
//! refitted the prep and walk constants on the same two sweeps of the v9 kernels, whose walks issue the next
//! chunk's loads under the first product (…-s19-mixlong.json, …-s19-single.json; results/prefill_s19.md): a cp
//! walk chunk 2.16 -> 1.73 µs (one warpgroup), and the chunk64 plan's plain walk gets a constant of its own,
//! `CHUNK64_WALK_CHUNK_US` = 1.45 (it shares the GPU with fewer CTAs). The scan refitted within 1% and was kept;
//! the two-warpgroup summary cost is held at session 18's 1.836 (a free fit moved it to 1.98 at equal error and
//! then picked one warpgroup for 2x16384: measured 297 vs 282 µs). Session 20 refitted only the scan (its kernel
//! changed: prefill64 v10), on new sweeps of the same two kinds (…-s20-mixlong.json, …-s20-single.json); the walk and
//! prep constants refit within 1-3% there and were kept. Session 21 likewise (the scan's grid shrank to the
//! sequences that can need it, and its steps now count once per wave of the long sequences' CTAs; the sweep
//! …-s21-mixlong.json), plus `short_cta_us` (CS below): the pass-1 CTAs of sequences too short to be cut, fitted alone
//! on the same sweep (pass 1 rms log error 0.169 -> 0.144; its many-sequence rows were 15-35% low). Session 22 refitted
//! only CS (8.0 -> 5.1, 10.0 -> 6.2 µs) on a new sweep of the v12 kernels, whose cp passes find their segment in one
//! load (…-s22-mixlong.json; pass 1 rms log error 0.203 at the session-21 constants -> 0.182), and then
//! `CHUNK64_WALK_CHUNK_US` on a sweep of the v13 kernels (the chunk64 walk longest first; …-s22-v13-mixlong.json).
//! `tests/cost.rs` replays that last table. Times scale with 132 / SMs.
//!
//! Fused plan (`prefill.cu`, tile BV, one CTA per SM): each of the N·HV·128/BV CTAs walks its sequence's
//! 16-token chunks, `chunk_us(BV)` each, after a fixed `FUSED_CTA_US`; a lone chain runs at `chain_us(BV)` per chunk:
//!   fused = max(chain, work, waves),  chain = ceil(longest/16)·chain_us + FUSED_CTA_US,
//!   work = ((T/16 + N/2)·chunk_us + N·FUSED_CTA_US) · HV·128/BV / SMs          (N/2: partial last chunks)
//!   waves = ceil(N·HV·128/BV / SMs) · (chunk_us + FUSED_CTA_US)      (tiny calls: every wave costs a CTA)
//! Context-parallel plan (`prefill64.cu`; see `policy`): G segments of L chunks cut the longest sequence;
//! `long` = min(N, T / longest) sequences are taken to be that long, the rest short (one segment each). The
//! walks come in two forms (`WALK_FORMS`): one warpgroup per CTA (a 64-row value half, `cph` = 2 CTAs per
//! head) or two (a whole head, `cph` = 1), each with its own per-chunk and per-CTA costs (W, S, C, C3, CS):
//!   prep  = PREP_FIXED_US + PREP_CHUNK_SM_US · HV·(T/64 + N/2) / SMs
//!   pass1 = max(L·W + C, [chains·(L·W + C) + 2·chains·(G−2)·(L·S + C)           (G = 1: W = CHUNK64_WALK_CHUNK_US)
//!                          + (short tokens/64 · W + short seqs · (CS + W/2))·HV·cph] / SMs)
//!   scan  = fixed + step·(G−2)·ceil(long·HV·cph_scan / SMs) + SCAN_WAVE_US · scan CTAs / SMs   (fixed, step:
//!           `SCAN_US` of the kernel; scan CTAs = K·HV·cph_scan, K = min(N, T / (128·L + 1)):
//!           `registry::prefill64_scan_seqs`; K = 0: no launch, 0)
//!   pass3 = max(L·W + C3, (chains·(G−1) + rest)·(L·W + C) / SMs)
//! with chains = long·HV·cph and rest = floor(ceil(short tokens/64) / L)·HV·cph: the most pass-3 CTAs the
//! other sequences can add (one per segment past their first; a second sequence almost as long as the
//! longest is cut too). G = 1 is the chunk64 plan (prep + one one-warpgroup walk, no scan, no pass 3).

use crate::policy::Shape;
use crate::registry::{prefill64, prefill64_scan_min_tokens, prefill64_scan_seqs};

/// Fused plan: µs per 16-token chunk of one CTA, by tile width BV (single sequences of 2,443 and 4,380 tokens
/// and the mix's long workloads). Session 20 checked a refit on the whole mix at every tile width (`fit_cost.py
/// --fused`, results/2026-11-21-h200-s20-mixshort.json: 0.468, 0.571, 0.721, 1.186; 3.84, rms log error 0.14 ->
/// 0.118) and kept these: the refit chose tiles no better on the mix and fused over faster chunk64 / cp plans on
/// three long workloads (tests/cost.rs: 2.3% -> 3.1% over the measured best).
pub const FUSED_CHUNK_US: [(u32, f64); 4] = [(16, 0.495), (32, 0.605), (64, 0.875), (128, 1.14)];
/// Fused plan: µs per 16-token chunk of one CTA's chain (the `chain` term), by tile width: `FUSED_CHUNK_US` but for
/// bv64. Session 27 fitted bv64's chain alone on its longest-first kernel forced onto every call of the contest-like mix
/// with 2 or more sequences (results/2026-11-22-h200-s27-forced-gdn_prefill_f32_bv64_lf.json): 0.68 µs, rms log error
/// 0.200 -> 0.102 over 58 calls (a lone bv64 chain measures ~0.65; 0.875 is its share of an SM that every CTA of the
/// grid competes for). bv128's chain refits to 1.13 on the same calls (0.185 either way): kept.
pub const FUSED_CHAIN_US: [(u32, f64); 4] = [(16, 0.495), (32, 0.605), (64, 0.68), (128, 1.14)];
/// Fused plan: fixed µs per CTA (launch, state in and out, pipeline fill).
pub const FUSED_CTA_US: f64 = 4.0;

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
    /// out): session 21, fitted on the mix's many-sequence rows, where `walk_cta_us` left pass 1 15-35% low (8.0 and
    /// 10.0 µs); session 22 refitted it alone on …-s22-mixlong.json (5.1 and 6.2), once the cp passes' CTAs found their
    /// segment in one load rather than by bisection (prefill64 v12).
    pub short_cta_us: f64,
}

impl WalkForm {
    /// Walk CTAs per (sequence or segment, value head, role).
    pub fn ctas_per_head(&self) -> u64 {
        2 / self.warpgroups
    }
}

/// The walk forms, one warpgroup first (the chunk64 plan's). Two warpgroups walk 128 rows in 2.4 µs per
/// chunk where one takes 1.7 for 64 (session 19): a throughput form, for grids that fill the GPU.
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
        summary_chunk_us: 1.836, // held at session 18's fit (see the module note)
        walk_cta_us: 6.368,
        pass3_cta_us: 5.091,
        short_cta_us: 6.184,
    },
];
/// The chunk64 plan's walk (one segment: the plain one-warpgroup walk, no cp passes): µs per 64-token chunk.
/// Session 19's fit: 1.45 where the cp passes' walks take 1.73 (a plain walk shares the GPU with fewer CTAs:
/// single sequences measure 1.42). Session 22 refitted it alone (1.447 -> 1.382; chunk64 totals rms log error
/// 0.040 -> 0.027) on …-s22-v13-mixlong.json: the walk now runs the sequences longest first (prefill64 v13), and
/// many-sequence walks come closer to max(chain, work), which is all the model has.
pub const CHUNK64_WALK_CHUNK_US: f64 = 1.382;
/// Prep: fixed µs, and SM·µs per (64-token chunk, value head). (Prep and scan: the fit's values unrounded;
/// session 18 found 2x16384's segment count a knife-edge of their second place.)
/// Session 21 (prefill64 v11 prep, 13% fewer instructions; …-s21-mixlong.json + …-s21-single.json): 6.14 -> 5.894,
/// 2.589 -> 2.518 (linear in the chunks, the best of the forms tried: rms log error 0.05; it overestimates
/// 1x65536, 162 vs 136 µs measured, where the plans it chooses between all pay the same prep).
pub const PREP_FIXED_US: f64 = 5.894;
pub const PREP_CHUNK_SM_US: f64 = 2.518;
/// Scan, by kernel (its CTAs per (sequence, value head): 16 = `gdn_prefill64_cp_scan8`, 8 = `…_cp_scan`):
/// fixed µs and µs per dependent step (one per segment after the second).
/// Session 21 (v11 scan: a grid of K·HV·cph CTAs, K = `prefill64_scan_seqs`; the steps counted once per wave of
/// the long sequences' CTAs), `fit_cost.py --scan` on results/2026-11-21-h200-s21-mixlong.json, the walk and prep
/// constants held: rms log error of the scan 0.344 -> 0.149 (session 20's form and constants on the same
/// sweep). Session 20: (1.154, 1.663) and (0.883, 2.62), 0.65 µs per wave of all scan CTAs.
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

/// Shortest sequence the split bv128 tile never splits (prefill.cu v14 `SPLIT_MIN_TOKENS`).
pub const SPLIT_MIN_TOKENS: u64 = 128;
/// Each sequence's fixed cost (its CTAs' state in and out, its partial last chunk), in tokens of work, in the split
/// threshold (prefill.cu v14.1 `GDN_SPLIT_SEQ_TOKENS`).
pub const SPLIT_SEQ_TOKENS: u64 = 64;
/// Fused plan: µs per 16-token chunk of a split sequence's chain (a 64-row half CTA of the split bv128 tile). Session 29
/// (H200, results/2026-11-22-h200-s29-forced-*.json, the split kernel and bv64_lf forced onto every prefill call in one
/// process): on the 38 calls it splits, a half CTA's chain measures 4-5% slower than bv64_lf's (prefill_70 81.9 vs 77.2
/// µs, prefill_02 241.1 vs 230.7, prefill_11 13.3 vs 12.4), so this is bv64's chain constant (0.68) scaled by that
/// ratio: the model then prefers bv64_lf where both are chain-bound, as measured.
pub const SPLIT_CHAIN_US: f64 = 0.71;

/// The split bv128 tile (`gdn_prefill_*_bv128_sp`) runs a sequence on two CTAs of 64 value rows when it is longer
/// than this: its chain alone would outlast the call's even share of work, (T + `SPLIT_SEQ_TOKENS`·N)·HV / SMs tokens
/// (the kernel reads the SM count; at least `SPLIT_MIN_TOKENS`). Session 29 swept the kernel's threshold (results/
/// prefill_s29.md): counting each sequence as 64 more tokens splits fewer of the medium sequences, whose half chains
/// only cost SM time: "30 mixed" 57.5 -> 52.1 µs, prefill_05 73.9 -> 69.5; scaling the share by 1.25 or 1.5 instead
/// lost on the skewed 8192-token calls (prefill_37 61.4 -> 75.1 at 1.5).
pub fn split_threshold(s: &Shape, sms: u64) -> u64 {
    let (t, n) = (s.total_tokens as u64, s.num_seqs as u64);
    ((t + SPLIT_SEQ_TOKENS * n) * s.num_v_heads as u64 / sms.max(1)).max(SPLIT_MIN_TOKENS)
}

/// Estimated µs of the split bv128 tile: bv128's work and waves, and the longest sequence's chain at
/// `SPLIT_CHAIN_US` per chunk when it is split (a half CTA runs one walker per SM sub-partition, as bv64 does).
/// Session 28 (H200, every prefill workload forced onto it against `gdn_prefill_f32_bv128_lf`): the skewed
/// contest-like calls −9 to −123 µs (prefill_37 79.6 → 62.4, prefill_05 101.1 → 73.2), the rest within +0.4 µs,
/// equal lengths up to +4 (64×1024). The work term misses the tail of a grid of unequal CTAs (the calls it splits
/// and is work-bound on measure 10-35% above it: "30 mixed" 52.1 vs 43.4 µs); bv64's work term, fitted on the same
/// kind of calls, overestimates them (62.8 vs 70.0), so the tile choice between them holds.
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
        // shorter ones as needing every step, fits the s21 sweep worse: rms log error 0.15 -> 0.37)
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
/// lengths could be anything); with one it can be fewer (`policy::cp_scan_kernel` then takes the 8-row scan when
/// only these fit one wave).
pub fn scan_work_seqs(s: &Shape, seg_chunks: u64) -> u64 {
    let l = Lengths::of(s);
    let need = prefill64_scan_min_tokens(seg_chunks);
    let long = if l.longest >= need { l.long_seqs } else { 0 };
    let rest = (l.tokens.saturating_sub(long * l.longest) / need).min(l.seqs - long);
    (long + rest).min(prefill64_scan_seqs(l.tokens, s.num_seqs as u64, seg_chunks))
}

/// The scan kernel the policy runs for `s` (`policy::cp_scan_kernel`): its CTAs, CTAs per (sequence, head),
/// fixed µs, µs per step.
fn scan_costs(s: &Shape, sms: u64, seg_chunks: u64) -> (u64, u64, f64, f64) {
    let per_head = crate::policy::cp_scan_kernel(s, sms, seg_chunks)
        .map_or(prefill64::CP_SCAN_CTAS, |v| v.ctas_per_head);
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

/// Segment-count limits of the automatic cp plan: at least this many segments, at most `MAX_SEGMENTS`,
/// segments of at least `MIN_SEG_CHUNKS` chunks, and whole waves: pass 3 (chains·(G−1) + rest CTAs, one
/// per SM) in one wave and pass 1 (chains·(2G−3) + 2·rest) in at most two. Measured on the H200
/// (results/prefill64.md): a second pass-3 wave costs ~30% (1×65536 G = 9 894 µs, G = 10 1217), which the
/// averaged work term above does not see, so the waves are limits rather than estimates.
pub const MIN_SEGMENTS: u64 = 3;
pub const MAX_SEGMENTS: u64 = 64;
pub const MIN_SEG_CHUNKS: u64 = 4;

/// The cheapest automatic cp plan of each walk form for `s` (forms where no segment count meets the limits
/// left out), cheapest first.
pub fn cp_candidates(s: &Shape, sms: u64) -> Vec<CpEstimate> {
    // Only the segment counts that can meet the limits are estimated (session 23: every call of the policy asked for
    // all 2 x 62, ~8 us of host time per prefill call, twice per Python call). G and L = ceil(chunks / G) determine
    // each other's effect: one estimate per distinct L, none once L < MIN_SEG_CHUNKS or pass 3's wave is full (both
    // only get worse as G grows). The same estimates as the full sweep (tests/cost.rs checks it).
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
