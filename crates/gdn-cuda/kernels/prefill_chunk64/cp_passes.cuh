// prefill_chunk64/cp_passes.cuh — context parallelism (long sequences, few heads): the segment map and the two walk
// passes, gdn_prefill64_cp_pass1_* (segment 0 for real, the summary walks of the middle segments) and
// gdn_prefill64_cp_pass3_* (segments 1.. for real from their scanned start states). The scan between them is in
// scan.cuh.
#pragma once

namespace gdn_prefill64 {

// The state walk is affine in its initial state: walking chunks [a, b) from Sᵀ₀ gives Sᵀ₀ M + B, with M (k x k) the
// product of the chunks' transitions and B the walk from zero. A sequence of nch chunks is cut into segments of
// L = seg_len(p) chunks (nseg = max(1, ceil(nch / L))); three launches then run it on nseg times the CTAs:
//   pass 1  gdn_prefill64_cp_pass1_*  grid (seg slots, HV, 4): per (segment s, head, value half, role)
//           s = 0:            role 0 walks the segment for real (state → outputs; end state → S[s+1], or new_state
//                             when nseg = 1); role 1 exits
//           0 < s < nseg − 1: summary walks (no outputs): role 0 from zero with V → B[s]; role 1 from the identity
//                             with V = 0 → M[s] (the rows of the identity walk as value rows, so M is a walk state;
//                             stored in the scan's fragment order, scan_a_piece)
//           s = nseg − 1:     nothing (its end state is never needed)
//   scan    gdn_prefill64_cp_scan{,8} grid K·HV·8 (·16), K = min(N, T / (128·L + 1)) (the sequences that can
//           have nseg ≥ 3; scan_find_seq), block 256: S[s] = S[s−1] M[s−1] + B[s−1] for s = 2 .. nseg−1
//           (fp32, 16 (8) value rows per CTA; M double-buffered in shared memory by bulk copies, the next step's M
//           loading while this step computes; scan.cuh)
//   pass 3  gdn_prefill64_cp_pass3_*  grid (seg slots, HV, 2): segments s ≥ 1 walk for real from S[s] (outputs;
//           the last one writes new_state)
// unless the head cuts (below): then pass 1 runs short warm-up walks into S[s] and copies the initial state to S[0],
// the scan skips the head, and pass 3 walks every segment.
// Work: ~2 walks per segment instead of one, spread over nseg times as many CTAs; the summary walks skip Q, Y, O and
// the output staging. Segment s of sequence i lives in segment slot g(i) + s, g(i) = f(i) / L + i with f the
// chunk-slot map (schedule.cuh seq_slot): g(i+1) − g(i) ≥ floor(nch_i / L) + 1 ≥ nseg_i, and every slot is < (T/64 + N + 1)/L + N + 1.
// Workspace after the chunk records: three f32 arrays [seg slots][HV][128][128] — S (segment start states, [v][k]),
// M (in the scan's fragment order), B ([v][k]). Numerics: the summary walks round their states to bf16 in products
// exactly like the real walk; the scan is fp32 (3xTF32 products, fp32 accumulation).
__device__ __forceinline__ i64 seg_first(const Prefill64Params& p, i64 i, int L) { return seq_slot(p, i) / L + i; }
__device__ __forceinline__ i64 cp_seg_slots(const Prefill64Params& p) {
    return (p.total_tokens / C + p.num_seqs + 1) / seg_len(p) + p.num_seqs + 1;
}
// f32 [128][128] workspace state `which` (0 S, 1 M, 2 B) of segment slot `slot`, value head h.
__device__ __forceinline__ float* cp_ws(const Prefill64Params& p, int which, i64 slot, int h) {
    unsigned char* base = reinterpret_cast<unsigned char*>(p.workspace) + record_bytes(p);
    return reinterpret_cast<float*>(base) + (((i64)which * cp_seg_slots(p) + slot) * p.num_v_heads + h) * (i64)(D * D);
}

struct SegPos {
    i64 seq, bos, eos, first;  // sequence, its tokens, its first segment slot
    int s, nseg, nch;          // this segment, segments and chunks of the sequence
};
// The (sequence, segment) of segment slot `slot`; false for a slot that holds no segment. Whole warps call it (the
// result is uniform).
__device__ __forceinline__ bool find_segment(const Prefill64Params& p, i64 slot, SegPos& sp) {
    const i64 N = p.num_seqs;
    const int L = seg_len(p);
    if (N <= 0 || L <= 0) return false;
    // the largest i with g(i) = f(i) / L + i <= slot (g strictly increasing, g(0) = 0); with f(i) >= 0 and
    // m = slot − i, f(i) / L <= m  <=>  m >= 0 and f(i) < (m + 1)·L: no division
    const i64 lo = warp_last_true(N, [&](i64 i) {
        return (i <= slot) & (seq_slot(p, i) < (slot - i + 1) * L);
    });
    // (uni64: the division and the loads below may be compiled on the vector path; the walk's addresses derive from
    // them)
    sp.seq = lo;
    const i64 f = seq_slot(p, lo);
    sp.first = uni64((f >> 32 ? f / L : (i64)((u32)f / (u32)L)) + lo);  // (a 32-bit division where it fits)
    sp.bos = uni64(cu_at(p, lo));
    sp.eos = uni64(cu_at(p, lo + 1));
    const i64 len = sp.eos > sp.bos ? sp.eos - sp.bos : 0;
    sp.nch = (int)((len + C - 1) / C);
    sp.nseg = sp.nch > L ? (sp.nch + L - 1) / L : 1;
    const i64 s = slot - sp.first;
    if (s >= sp.nseg) return false;
    sp.s = (int)s;
    return true;
}

__device__ __forceinline__ WalkJob segment_job(const SegPos& sp, int h, int vh, int L) {
    WalkJob j;
    j.seq = sp.seq; j.bos = sp.bos; j.eos = sp.eos;
    j.h = h; j.vh = vh;
    j.c0 = sp.s * L;
    j.c1 = min(sp.nch, (sp.s + 1) * L);
    j.init = INIT_ZERO; j.end = END_NONE;
    j.init_ws = nullptr; j.end_ws = nullptr;
    return j;
}

// ---- Cuts. Walking chunks [b − W, b) from zero instead of from the true state S at chunk b − W changes the state at
// chunk b by S's image under those chunks' transitions, of norm at most e^Λ ‖S‖ with Λ the sum of their λ (the prep's
// bound per chunk, params.cuh). Where Λ ≤ CUT_LOG_BOUND = ln 2⁻⁴⁰ the dropped part is at most 2⁻⁴⁰ of the carried
// state S: 2⁻¹⁶ below fp32's resolution of a state as large as S (the bound is for the exact transitions; the walk's
// bf16 / f16 operands perturb them by far less than that margin). Relative to the state at b it is as small unless
// the state shrinks by 2¹⁶ over the window (the carried part decaying with little new input). Segment s's start
// state is then a W-chunk warm-up walk instead of the scan of pass 1's summaries, W the shortest window (at most
// min(L, CUT_MAX_W) chunks) that meets the bound.
// Per (sequence, value head), all or nothing: when every boundary of the sequence cuts, pass 1 runs the warm-ups
// (one walk CTA of W chunks per boundary, into S[s]; no transition walks) and copies the initial state into S[0]
// (pass 3's last segment writes new_state, in pool mode the row segment 0 starts from, so segment 0 must not read
// it there), the scan skips the head, and pass 3 walks segment 0 too; otherwise the head takes the affine path
// above unchanged. Fast-decaying heads (flashinfer-bench's and HF's initial gate draws decay a 64-token chunk by
// e⁻⁴⁰ and more on most heads) cut with W = 1; a head whose decay is slow, or whose
// β‖k‖² exceeds 2 (unnormalised keys stretch the state), does not. A NaN in a chunk's gates or keys blocks a window
// that holds it; a non-finite value in a chunk before a cut's window does not reach past the cut.
constexpr int CUT_MAX_W = 16;
constexpr float CUT_LOG_BOUND = -27.7258872f;  // ln 2^-40
// −1 when (sequence seq, head h) does not cut (CP_EXACT, one segment, or a boundary over the bound); otherwise the
// warm-up W of boundary `want` (the start of segment want >= 1; 0 asks for none). Each lane takes one boundary b = s·L
// and its λ of chunks b − 1, b − 2, … (independent loads, after pdl_wait: the prep's records). Whole warps call it;
// the result is uniform (in a uniform register).
__device__ __forceinline__ int cut_plan(const Prefill64Params& p, i64 seq, int nseg, int h, int want) {
    if ((p.seg_chunks & CP_EXACT) || nseg < 2) return -1;
    const int L = seg_len(p), HV = p.num_v_heads, lane = threadIdx.x & 31;
    const int wcap = L < CUT_MAX_W ? L : CUT_MAX_W;
    const i64 stride = (i64)HV * WS_CHUNK_BYTES;
    const unsigned char* lam0 = reinterpret_cast<const unsigned char*>(p.workspace) +
                                (seq_slot(p, seq) * HV + h) * (i64)WS_CHUNK_BYTES + WG_E + (2 * C + EGC_LB) * 4;
    int got = 0;
    for (int s0 = 1; s0 < nseg; s0 += 32) {
        const int s = s0 + lane;
        int w = 0;
        if (s < nseg) {
            const i64 b = (i64)s * L;
            float lam[CUT_MAX_W];
#pragma unroll
            for (int i = 0; i < CUT_MAX_W; ++i)
                lam[i] = i < wcap ? *reinterpret_cast<const float*>(lam0 + (b - 1 - i) * stride) : 0.f;
            float acc = 0.f;
#pragma unroll
            for (int i = 0; i < CUT_MAX_W; ++i) {
                acc += lam[i];
                if (w == 0 && i < wcap && acc <= CUT_LOG_BOUND) w = i + 1;
            }
        }
        if (!__all_sync(0xffffffffu, s >= nseg || w > 0)) return -1;
        // (redux.sync: a uniform register, so the warm-up's chunk range and every address derived from it stay on
        // the uniform datapath, as uni64 in schedule.cuh)
        got += (int)__reduce_add_sync(0xffffffffu, s == want ? (u32)w : 0u);
    }
    return got;
}

template <int WGS, bool BF16STATE, class Bid>
__device__ __forceinline__ void cp_pass1(const Prefill64Params& p, const Bid bid) {
    constexpr int CPH = WalkLayout<WGS>::CTAS_PER_HEAD;
    SegPos sp;
    if (!find_segment(p, bid.x(), sp)) return;
    const int h = bid.y(), vh = bid.z() % CPH, role = bid.z() / CPH;
    const int L = seg_len(p);
    WalkJob j = segment_job(sp, h, vh, L);
    if (sp.s >= sp.nseg - 1 && sp.s > 0) return;  // (the last segment's end state is never needed)
    if (sp.nseg == 1 && role != 0) return;
    pdl_wait();  // (the search above ran while the prep finished)
    const int w = sp.nseg > 1 ? cut_plan(p, sp.seq, sp.nseg, h, sp.s + 1) : -1;
    j.end = END_WS;
    if (w > 0 && role == 0) {  // the head cuts: the warm-up of boundary s + 1 → S[s + 1]
        j.c1 = (sp.s + 1) * L;
        j.c0 = j.c1 - w;
        j.end_ws = cp_ws(p, 0, sp.first + sp.s + 1, h);
    } else if (sp.s == 0 && (w > 0) == (role != 0)) {
        // segment 0: walked for real (no cut), or (the head cuts) its initial state copied to S[0] by a walk of no
        // chunks, for pass 3 — which walks segment 0 then, and its last segment writes new_state: in pool mode the
        // very row segment 0 starts from
        j.init = INIT_STATE;
        if (w > 0) {
            j.c1 = 0;
            j.end_ws = cp_ws(p, 0, sp.first, h);
        } else if (sp.nseg == 1) {
            j.end = END_STATE;
        } else {
            j.end_ws = cp_ws(p, 0, sp.first + 1, h);
        }
        walk_wg_body<WGS, BF16STATE, false>(p, j);
        return;
    } else if (w > 0 || sp.s == 0) {
        return;
    } else if (role == 0) {
        j.end_ws = cp_ws(p, 2, bid.x(), h);
    } else {
        j.init = INIT_IDENTITY;
        j.end = END_WS_T;
        j.end_ws = cp_ws(p, 1, bid.x(), h);
        walk_wg_body<WGS, BF16STATE, true, true>(p, j);
        return;
    }
    // one call site of the summary walk (warm-ups and B[s]); its chunk range, merged from two paths, made uniform
    // again (uni64, schedule.cuh), or the walk's addresses leave the uniform datapath
    j.c0 = (int)uni64(j.c0);
    j.c1 = (int)uni64(j.c1);
    walk_wg_body<WGS, BF16STATE, true>(p, j);
}

template <int WGS, bool BF16STATE, class Bid>
__device__ __forceinline__ void cp_pass3(const Prefill64Params& p, const Bid bid) {
    SegPos sp;
    if (!find_segment(p, bid.x(), sp) || sp.nseg == 1) return;
    pdl_wait();  // (the search above ran while the scan, or pass 1, finished)
    const int h = bid.y();
    // segment 0 is pass 1's unless the head cuts (then S[0] holds its initial state)
    if (sp.s == 0 && cut_plan(p, sp.seq, sp.nseg, h, 0) < 0) return;
    WalkJob j = segment_job(sp, h, bid.z() % WalkLayout<WGS>::CTAS_PER_HEAD, seg_len(p));
    j.init = INIT_WS;
    j.init_ws = cp_ws(p, 0, bid.x(), h);
    j.end = sp.s == sp.nseg - 1 ? END_STATE : END_NONE;
    walk_wg_body<WGS, BF16STATE, false>(p, j);
}

}  // namespace gdn_prefill64
