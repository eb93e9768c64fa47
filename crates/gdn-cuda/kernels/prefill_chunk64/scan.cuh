// prefill_chunk64/scan.cuh — the context-parallel scan, gdn_prefill64_cp_scan{,8}: for every sequence with three
// segments or more (padded ones aside: pool mode), the segments' start states S[s] = S[s−1] M[s−1] + B[s−1] in fp32 on mma.sync (3xTF32), from pass
// 1's transitions M and zero-state walks B (cp_passes.cuh).
#pragma once

namespace gdn_prefill64 {

constexpr int SCAN_ROWS = 16;                                      // value rows per scan CTA (at most)
constexpr int SCAN_X_OFF = 2 * D * D * 4;                          // X hi, lo u32 [16][128] after the two M buffers
constexpr int SCAN_BAR_OFF = SCAN_X_OFF + 2 * SCAN_ROWS * D * 4;  // one mbarrier per M buffer
constexpr int SCAN_SMEM = SCAN_BAR_OFF + 16;                       // 2 x M f32 [128][128] + X + 2 mbarriers
static_assert(SCAN_SMEM == 147472, "cp scan smem (mirrored by the Rust runtime)");


// One CTA per (sequence with nseg ≥ 3, value head, ROWS value rows): X = S[s−1] rows; S[s] rows = X M[s−1] + B[s−1]
// rows. ROWS = 16 (grid K·HV·8) or 8 (grid K·HV·16: twice the SMs per step, for few chains — plan/prefill/host.rs picks by the
// wave count).
// On tensor cores, transposed so the value rows are the N dimension: S[s]ᵀ = M[s−1]ᵀ Xᵀ + B[s−1]ᵀ, warp w (of 8) owns
// output columns 16w..16w+15 (one m16 tile of Mᵀ) for all ROWS rows (ROWS / 8 n8 tiles), 16 k8 steps of mma.sync
// m16n8k8 in 3xTF32 (hi·hi + hi·lo + lo·hi, ~fp32 accuracy). (One FMA per element would be ~1,400 instructions per
// thread per step: issue-bound.)
// Fragment-native layouts. A k8 step's k order is free (A and B only have to agree), so steps 2j and 2j + 1 take, in
// lane slot t / t + 4, k = 16j + 4t / 16j + 4t + 1 and 16j + 4t + 2 / 16j + 4t + 3. Pass 1 writes M in the order of
// the A fragments (scan_a_piece: a lane's a0..a3 of one step are one 16-byte piece, lanes contiguous), and X is kept as
// its tf32 hi and lo parts (split once, when written, not by all 8 warps every step) in the order of the B fragments
// (scan_b_idx: b0, b1 of steps 2j and 2j + 1 = X[r][16j + 4t .. + 3], one 16-byte piece). Per 16 k a warp issues 2 + 2·ROWS/8 conflict-free LDS.128 and 8 splits, and no register
// moves (scalar layouts would take 8 + 4·ROWS/8 LDS.32, as many splits, and gather the operands into quads).
// M of step s sits in buffer s & 1 and comes in one 64 KB bulk copy, issued a step ahead, so each step's load overlaps
// the previous step's arithmetic; B of step s+1 is read into registers during step s. (Three buffers, i.e. a copy two
// steps ahead, would save 2% of the scan's time for 64 KB more shared memory; six accumulator chains of 8 mma instead
// of two of 24 are 3% slower.)
__device__ __forceinline__ int scan_b_idx(int r, int k) {
    return (((r >> 3) * 8 + (k >> 4)) * 32 + 4 * (r & 7) + ((k >> 2) & 3)) * 4 + (k & 3);
}
// Copy M (64 KB, already in fragment order) into `buf`: one bulk copy by thread 0 on mbarrier `bar`.
__device__ __forceinline__ void cp_scan_stage(const float* M, float* buf, u32 bar, int tid) {
    if (tid == 0) {
        mbar_arrive_expect_tx(bar, D * D * 4);
        bulk_g2s(smem_addr(buf), M, D * D * 4, bar);
    }
}
// The scan's grid covers only the sequences that can have three segments or more. Sequence i needs the scan when
// nch > 2L chunks, i.e. more than 128·L tokens, so at most K = min(N, floor(T / (128·L + 1))) of them
// do (their lengths sum to at most T); the grid is K·HV·(128 / ROWS) CTAs (`plan::grid::prefill64_scan_seqs`, from T, N and L
// alone: no lengths on the host), and CTA rank k finds the k-th such sequence here. (A grid of N·HV·8 or ·16 CTAs of
// 147 KB, one per SM, would have nearly all of them exit at once on many-sequence workloads: ~0.65 us per wave of them,
// 5-16 us per call on the contest mix's cp workloads.)
// The search: passes of 1024 sequences, each thread flags 4 consecutive ones, a block exclusive scan of the flag
// counts locates the owner of rank k. All 256 threads call it; the result is uniform. -1: fewer than k + 1 such
// sequences (the bound K is not tight). Lengths are read as in find_segment (a negative one counts as 0).
__device__ __forceinline__ i64 scan_find_seq(const Prefill64Params& p, i64 k, int tid) {
    constexpr int E = 4;  // sequences per thread per pass
    __shared__ int wsum[8];
    __shared__ i64 hit;
    const int warp = tid >> 5, lane = tid & 31;
    const i64 N = p.num_seqs, lim = (i64)C * 2 * seg_len(p);
    if (N <= 0) return -1;
    if (tid == 0) hit = -1;
    i64 before = 0;  // such sequences in earlier passes
    for (i64 base = 0; base < N; base += 256 * E) {
        const i64 i0 = base + (i64)E * tid;
        unsigned bits = 0;
        if (i0 < N) {
            i64 c[E + 1];
#pragma unroll
            for (int e = 0; e <= E; ++e) c[e] = i0 + e <= N ? cu_at(p, i0 + e) : 0;
#pragma unroll
            for (int e = 0; e < E; ++e)
                if (i0 + e < N && c[e + 1] - c[e] > lim) bits |= 1u << e;
        }
        const int cnt = __popc(bits);
        int incl = cnt;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, incl, off);
            if (lane >= off) incl += y;
        }
        if (lane == 31) wsum[warp] = incl;
        __syncthreads();  // (also publishes hit = -1)
        int excl = incl - cnt, total = 0;
#pragma unroll
        for (int w = 0; w < 8; ++w) {
            excl += w < warp ? wsum[w] : 0;
            total += wsum[w];
        }
        const i64 r = k - before - excl;  // rank k among this thread's flags
        if (r >= 0 && r < cnt) {
            unsigned b = bits;
            for (int j = 0; j < (int)r; ++j) b &= b - 1;  // drop the r lowest flags
            hit = i0 + __ffs((int)b) - 1;
        }
        before += total;
        __syncthreads();  // hit written; wsum free for the next pass
        if (hit >= 0 || before > k) break;
    }
    return hit;
}
template <int ROWS, class Bid>
__device__ __forceinline__ void cp_scan(const Prefill64Params& p, const Bid bid) {
    constexpr int NT = ROWS / 8;  // n8 tiles (value rows)
    extern __shared__ __align__(16) unsigned char smem[];
    float* Mbuf = reinterpret_cast<float*>(smem);
    u32* Xh = reinterpret_cast<u32*>(smem + SCAN_X_OFF);  // X = S[s−1] rows, tf32 hi parts [ROWS·128] (scan_b_idx)
    u32* Xl = Xh + ROWS * D;                              // ... and lo parts
    const u32 bar0 = smem_addr(smem + SCAN_BAR_OFF);
    const int HV = p.num_v_heads, L = seg_len(p);
    const int rb = bid.x() % (D / ROWS);
    const int h = (bid.x() / (D / ROWS)) % HV;
    if (L <= 0) return;
    // the (k = bid.x() / (128 / ROWS) / HV)-th sequence with three segments or more
    const i64 seq = scan_find_seq(p, (i64)bid.x() / (D / ROWS) / HV, threadIdx.x);
    if (seq < 0) return;
    const i64 bos = cu_at(p, seq), eos = cu_at(p, seq + 1);
    const i64 len = eos > bos ? eos - bos : 0;
    const int nch = (int)((len + C - 1) / C);
    const int nseg = nch > L ? (nch + L - 1) / L : 1;
    if (nseg < 3) return;
    // a padded sequence (pool mode): its real walks write zero outputs and never read the start states
    if (sv_of(p).pool_indices != nullptr && pool_pad(p, sv_pool_index(sv_of(p), seq))) return;
    pdl_wait();  // (the search above ran while pass 1 finished)
    if (cut_plan(p, seq, nseg, h, 0) >= 0) return;  // every boundary cut: pass 1 wrote the start states
    const i64 first = seg_first(p, seq, L);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int m0 = 16 * warp;
    // S, M, B of segment slot first + i are these + i·sstride (formed once: cp_ws divides by L in 64 bits)
    const i64 sstride = (i64)HV * D * D;
    float* const Sw = cp_ws(p, 0, first, h) + ROWS * rb * D;  // (the CTA's rows)
    const float* const Mw = cp_ws(p, 1, first, h);
    const float* const Bw = cp_ws(p, 2, first, h) + ROWS * rb * D;
    // this thread's outputs: tile nt, element e: row 8nt + 2t + (e & 1), column m0 + g + 8(e >> 1)
    auto out_off = [&](int nt, int e) { return (8 * nt + 2 * t + (e & 1)) * D + m0 + g + 8 * (e >> 1); };
#ifdef GDN_DEVICE_PLAN
    const u32 bars = dp_bars;  // (as in walk_wg_body)
#else
    constexpr u32 bars = 0;
#endif
    if (tid == 0 && !(bars & DP_BARS_READY)) {
        mbar_init(bar0, 1);
        mbar_init(bar0 + 8, 1);
        mbar_init_fence();
    }
    __syncthreads();
    cp_scan_stage(Mw + sstride, Mbuf, bar0, tid);  // M of step 2 (segment slot first + 1) → buffer 0
    float bn[NT][4];  // B of the next step
    {
        const float* X0 = Sw + sstride;
        const float* B0 = Bw + sstride;
        for (int e = tid; e < ROWS * D; e += 256) {
            const int i = scan_b_idx(e >> 7, e & (D - 1));
            split_tf32(X0[e], Xh[i], Xl[i]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) bn[nt][e] = B0[out_off(nt, e)];
    }
    // this lane's fragments: A pieces [warp][j][step][lane], B pieces [nt][j][lane]
    const uint4* xh4 = reinterpret_cast<const uint4*>(Xh) + lane;
    const uint4* xl4 = reinterpret_cast<const uint4*>(Xl) + lane;
    for (int s = 2; s < nseg; ++s) {
        // step s: M of segment slot first + s − 1 in buffer s & 1, its mbarrier's phase (s − 2) / 2; step s + 1's M
        // goes into the other buffer, which step s − 1 used (everyone is done with it: the barrier after its products)
        const float* Ms = Mbuf + (s & 1) * D * D;
        if (s + 1 < nseg) cp_scan_stage(Mw + s * sstride, Mbuf + ((s + 1) & 1) * D * D, bar0 + 8 * ((s + 1) & 1), tid);
        float acc[2][NT][4];  // steps 2j and 2j + 1 (two k halves of every 16), summed at the end
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) { acc[0][nt][e] = bn[nt][e]; acc[1][nt][e] = 0.f; }
        if (s + 1 < nseg) {
            const float* Bn = Bw + s * sstride;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) bn[nt][e] = Bn[out_off(nt, e)];
        }
        mbar_wait(bar0 + 8 * (s & 1), ((u32)((s - 2) >> 1) + (bars >> (s & 1))) & 1u);  // this step's M has landed
        __syncthreads();  // X of the previous step written
        const float4* a4 = reinterpret_cast<const float4*>(Ms) + warp * (8 * 2 * 32) + lane;
#pragma unroll 2
        for (int j = 0; j < D / 16; ++j) {
            const float4 f0 = a4[(2 * j) * 32], f1 = a4[(2 * j + 1) * 32];  // a0..a3 of steps 2j, 2j + 1
            u32 ah[2][4], al[2][4];
            split_tf32(f0.x, ah[0][0], al[0][0]);
            split_tf32(f0.y, ah[0][1], al[0][1]);
            split_tf32(f0.z, ah[0][2], al[0][2]);
            split_tf32(f0.w, ah[0][3], al[0][3]);
            split_tf32(f1.x, ah[1][0], al[1][0]);
            split_tf32(f1.y, ah[1][1], al[1][1]);
            split_tf32(f1.z, ah[1][2], al[1][2]);
            split_tf32(f1.w, ah[1][3], al[1][3]);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint4 bh = xh4[(nt * 8 + j) * 32], bl = xl4[(nt * 8 + j) * 32];  // b0, b1 of 2j; of 2j + 1
                mma_tf32(acc[0][nt], al[0], bh.x, bh.y);
                mma_tf32(acc[0][nt], ah[0], bl.x, bl.y);
                mma_tf32(acc[0][nt], ah[0], bh.x, bh.y);
                mma_tf32(acc[1][nt], al[1], bh.z, bh.w);
                mma_tf32(acc[1][nt], ah[1], bl.z, bl.w);
                mma_tf32(acc[1][nt], ah[1], bh.z, bh.w);
            }
        }
        __syncthreads();  // everyone is done reading X and this M (its buffer is refilled at the next step)
        float* Xn = Sw + s * sstride;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float x = acc[0][nt][e] + acc[1][nt][e];
                Xn[out_off(nt, e)] = x;
                const int i = scan_b_idx(8 * nt + 2 * t + (e & 1), m0 + g + 8 * (e >> 1));
                split_tf32(x, Xh[i], Xl[i]);
            }
    }
#ifdef GDN_DEVICE_PLAN
    // as the walk's: barrier 0 completed a phase at every even step in [2, nseg), barrier 1 at every odd one
    if (tid == 0) {
        const u32 n = (u32)(nseg - 2);
        dp_bars = DP_BARS_READY | ((bars ^ ((n + 1) >> 1)) & 1u) | ((((bars >> 1) ^ (n >> 1)) & 1u) << 1);
    }
#endif
}

}  // namespace gdn_prefill64
