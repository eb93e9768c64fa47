// gdn_plan.h: the kernel choice of a packed gdn solution, from the tables `gdn pack` wrote (gdn_tables.h).
// Plain C++17 without CUDA. Decode / MTP: the library's recurrent table row for the call's equivalent batch.
// Prefill: the template of the call's (N, T) bin (the library's plan at the bin's lower edge), its grids and
// workspace sized for the call's own T and N by the formulas of gdn's planner (plan/grid.rs,
// plan/prefill/workspace.rs, plan/prefill/types.rs::launched_ctas). The params structs' bytes, as gdn's
// `abi::args` fills them. Nothing here reads device memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gdn_tables.h"

namespace gdn_pack {
namespace {  // internal linkage (gdn_host.h says why)

constexpr uint64_t kU64Max = ~0ull;

inline uint64_t sat_add(uint64_t a, uint64_t b) { return a > kU64Max - b ? kU64Max : a + b; }
inline uint64_t sat_mul(uint64_t a, uint64_t b) { return (a != 0 && b > kU64Max / a) ? kU64Max : a * b; }
inline uint64_t max1(uint64_t x) { return x == 0 ? 1 : x; }
inline uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

// ---- decode / MTP
// The batch of the tuned configuration with the same work per SM: ceil(B * HV / 8 * 132 / SMs).
inline uint64_t equivalent_batch(uint64_t batch, uint64_t sms) {
  uint64_t num = batch * static_cast<uint64_t>(kNumVHeads) * kTunedSmCount;
  uint64_t den = kTunedNumVHeads * max1(sms);
  return (num + den - 1) / den;
}

// The kernel (kKernels index) of a decode / MTP call of `batch` requests on `sms` SMs; -1 if none.
inline int recurrent_kernel(uint64_t batch, uint64_t sms) {
  uint64_t e = equivalent_batch(batch, sms);
  for (int i = 0; i < kNumRecurrentRows; ++i) {
    if (kRecurrentRows[i].kernel >= 0 && e <= kRecurrentRows[i].max_equivalent_batch) return kRecurrentRows[i].kernel;
  }
  return -1;
}

struct Grid {
  uint64_t x, y, z;
};

// ---- grids (plan/grid.rs)
inline uint64_t prefill64_slots(uint64_t t, uint64_t n) { return sat_add(sat_add(t / kChunk64, n), 1); }
inline uint64_t prefill64_seg_slots(uint64_t t, uint64_t n, uint64_t l) {
  return prefill64_slots(t, n) / max1(l) + n + 1;
}
inline uint64_t prefill64_scan_seqs(uint64_t t, uint64_t n, uint64_t l) {
  return min_u64(n, t / (2 * kChunk64 * max1(l) + 1));
}

// The grid of kernel `k` for n requests / sequences of t tokens in all; l: the cp segment length.
inline Grid grid_of(const Kernel& k, uint64_t t, uint64_t n, uint64_t l) {
  const uint64_t h = static_cast<uint64_t>(kNumQHeads), hv = static_cast<uint64_t>(kNumVHeads), cph = k.ctas_per_head;
  switch (k.grid) {
    case kHeadMajor: return Grid{n * cph, h, hv / max1(h)};
    case kLinear: return Grid{n * hv * cph, 1, 1};
    case kChunkSlots: return Grid{sat_mul(prefill64_slots(t, n), hv), 1, 1};
    case kSegmentSlots: return Grid{prefill64_seg_slots(t, n, l), hv, cph};
    case kLongSeqs: return Grid{prefill64_scan_seqs(t, n, l) * hv * cph, 1, 1};
    case kSplitLongest: return Grid{(n + min_u64(n, kSplitMaxSeqs)) * hv * cph, 1, 1};
  }
  return Grid{0, 0, 0};
}

// ---- workspace (plan/prefill/workspace.rs)
inline uint64_t round_up(uint64_t x, uint64_t m) { return sat_mul((x + m - 1) / m, m); }
inline uint64_t prefill64_record_bytes(uint64_t t, uint64_t n) {
  return sat_mul(sat_mul(prefill64_slots(t, n), static_cast<uint64_t>(kNumVHeads)), kWsChunkBytes);
}
inline uint64_t prefill64_workspace_bytes(uint64_t t, uint64_t n) {
  return sat_add(prefill64_record_bytes(t, n), round_up(sat_mul(n, 8), kWorkspaceAlign));
}
inline uint64_t prefill64_cp_workspace_bytes(uint64_t t, uint64_t n, uint64_t l) {
  uint64_t states = sat_mul(sat_mul(prefill64_seg_slots(t, n, l), static_cast<uint64_t>(kNumVHeads)), 3 * kCpStateBytes);
  return sat_add(states, prefill64_record_bytes(t, n));
}
inline uint64_t device_plan_workspace_bytes(uint64_t chunk64, uint64_t cp) {
  uint64_t m = chunk64 > cp ? chunk64 : cp;
  return sat_add(round_up(m, kDpCounterBytes), kDpCounterBytes);
}

// ---- prefill
enum Role : int { kFused = 0, kFusedSkew = 1, kPrep = 2, kWalk = 3, kPass1 = 4, kScan = 5, kPass3 = 6 };
enum TemplateKind : int { kPlanFused = 0, kPlanChunk64 = 1, kPlanCp = 2, kPlanDevice = 3 };

struct SizedLaunch {
  int role;
  int kernel;
  Grid grid;   // as launched
  Grid vgrid;  // a device plan's prefill64 launches: the grid it stands for (Prefill64PlanParams::vgrid)
};

struct PrefillInstance {
  const PrefillTemplate* tpl;
  int num_launches;
  SizedLaunch launches[7];
  uint64_t workspace_bytes;
};

inline int bin_of(const uint64_t* edges, int count, uint64_t x) {
  int lo = 0;
  for (int i = 0; i < count; ++i) {
    if (edges[i] <= x) lo = i;
  }
  return lo;
}

// The call's template, sized for t tokens in n sequences on sms SMs (plan_table.rs `instantiate`).
inline bool prefill_instance(uint64_t t, uint64_t n, uint64_t sms, PrefillInstance* out) {
  if (kNumNBins == 0 || kNumTBins == 0) return false;
  const int nb = bin_of(kNEdges, kNumNBins, n), tb = bin_of(kTEdges, kNumTBins, t);
  const PrefillTemplate& tpl = kTemplates[kTemplateIndex[nb * kNumTBins + tb]];
  out->tpl = &tpl;
  out->num_launches = 0;
  const uint64_t l = max1(tpl.seg_chunks);
  for (int role = 0; role < 7; ++role) {
    const int ki = tpl.roles[role];
    if (ki < 0) continue;
    const Kernel& k = kKernels[ki];
    Grid g = grid_of(k, t, n, l);
    if (g.x == 0 || g.y == 0 || g.z == 0) continue;
    SizedLaunch& s = out->launches[out->num_launches++];
    s.role = role;
    s.kernel = ki;
    const bool device_p64 = tpl.kind == kPlanDevice && role >= kPrep;
    if (device_p64) {
      uint64_t ctas = sat_mul(sat_mul(g.x, g.y), g.z);
      if (k.persistent) ctas = min_u64(ctas, max1(sms) * k.resident_per_sm);
      s.grid = Grid{ctas, 1, 1};
      s.vgrid = g;
    } else {
      s.grid = g;
      s.vgrid = Grid{0, 0, 0};
    }
  }
  switch (tpl.kind) {
    case kPlanFused: out->workspace_bytes = 0; break;
    case kPlanChunk64: out->workspace_bytes = prefill64_workspace_bytes(t, n); break;
    case kPlanCp: out->workspace_bytes = prefill64_cp_workspace_bytes(t, n, l); break;
    default:
      if (tpl.roles[kPrep] < 0) {
        out->workspace_bytes = 0;
      } else {
        uint64_t cp = tpl.roles[kPass1] >= 0 ? prefill64_cp_workspace_bytes(t, n, l) : 0;
        out->workspace_bytes = device_plan_workspace_bytes(prefill64_workspace_bytes(t, n), cp);
      }
  }
  return true;
}

// ---- params bytes
template <typename T>
inline void put(unsigned char* p, size_t at, T v) {
  std::memcpy(p + at, &v, sizeof(T));
}

// ---- params structs, filled as gdn's `abi::args` fills them for a definition call
// Decode (t = 1) or MTP (t = T) of `batch` requests: one recurrent launch. MTP in the definitions' mode reads
// the pool and leaves it (`new_state` 0), writes each token's state to the intermediate buffer; the caller
// copies the pool to final_state.
struct RecurrentCall {
  uint64_t q, k, v, a, b, a_log, dt_bias, state, new_state, intermediate, out, state_indices;
  int64_t batch, seq_len, state_rows;
  float scale;
};

// RecurrentParams in `p` (kRecurrentBytes, zeroed: the serving block stays zero, the definition build).
inline void fill_recurrent(unsigned char* p, const RecurrentCall& c) {
  put<uint64_t>(p, off::Recurrent_q, c.q);
  put<uint64_t>(p, off::Recurrent_k, c.k);
  put<uint64_t>(p, off::Recurrent_v, c.v);
  put<uint64_t>(p, off::Recurrent_a, c.a);
  put<uint64_t>(p, off::Recurrent_b, c.b);
  put<uint64_t>(p, off::Recurrent_a_log, c.a_log);
  put<uint64_t>(p, off::Recurrent_dt_bias, c.dt_bias);
  put<uint64_t>(p, off::Recurrent_state, c.state);
  put<uint64_t>(p, off::Recurrent_new_state, c.new_state);
  put<uint64_t>(p, off::Recurrent_intermediate, c.intermediate);
  put<uint64_t>(p, off::Recurrent_out, c.out);
  put<uint64_t>(p, off::Recurrent_state_indices, c.state_indices);
  put<int64_t>(p, off::Recurrent_batch, c.batch);
  put<int64_t>(p, off::Recurrent_num_state_rows, c.state_rows);
  put<float>(p, off::Recurrent_scale, c.scale);
  put<int32_t>(p, off::Recurrent_seq_len, static_cast<int32_t>(c.seq_len));
  put<int32_t>(p, off::Recurrent_num_qk_heads, static_cast<int32_t>(kNumQHeads));
  put<int32_t>(p, off::Recurrent_num_v_heads, static_cast<int32_t>(kNumVHeads));
}

struct PrefillCall {
  uint64_t q, k, v, a, b, a_log, dt_bias, cu_seqlens, state, new_state, out;
  int64_t total_tokens, num_seqs;
  float scale;
};

inline int64_t tokens_i64(uint64_t x) { return x > 0x7fffffffffffffffull ? INT64_MAX : static_cast<int64_t>(x); }

// PrefillParams at byte `at` of `p`.
inline void fill_prefill(unsigned char* p, size_t at, const PrefillCall& c) {
  put<uint64_t>(p, at + off::Prefill_q, c.q);
  put<uint64_t>(p, at + off::Prefill_k, c.k);
  put<uint64_t>(p, at + off::Prefill_v, c.v);
  put<uint64_t>(p, at + off::Prefill_a, c.a);
  put<uint64_t>(p, at + off::Prefill_b, c.b);
  put<uint64_t>(p, at + off::Prefill_a_log, c.a_log);
  put<uint64_t>(p, at + off::Prefill_dt_bias, c.dt_bias);
  put<uint64_t>(p, at + off::Prefill_cu_seqlens, c.cu_seqlens);
  put<uint64_t>(p, at + off::Prefill_state, c.state);
  put<uint64_t>(p, at + off::Prefill_new_state, c.new_state);
  put<uint64_t>(p, at + off::Prefill_out, c.out);
  put<int64_t>(p, at + off::Prefill_num_seqs, c.num_seqs);
  put<float>(p, at + off::Prefill_scale, c.scale);
  put<int32_t>(p, at + off::Prefill_num_q_heads, static_cast<int32_t>(kNumQHeads));
  put<int32_t>(p, at + off::Prefill_num_v_heads, static_cast<int32_t>(kNumVHeads));
  const int64_t lead = c.total_tokens < static_cast<int64_t>(kLeadRows) ? c.total_tokens : static_cast<int64_t>(kLeadRows);
  put<int32_t>(p, at + off::Prefill_lead_rows, static_cast<int32_t>(lead));
  put<int64_t>(p, at + off::Prefill_num_state_rows, c.num_seqs);
}

// Prefill64Params at byte `at` of `p`.
inline void fill_prefill64(unsigned char* p, size_t at, const PrefillCall& c, uint64_t workspace, int32_t seg_chunks) {
  put<uint64_t>(p, at + off::Prefill64_q, c.q);
  put<uint64_t>(p, at + off::Prefill64_k, c.k);
  put<uint64_t>(p, at + off::Prefill64_v, c.v);
  put<uint64_t>(p, at + off::Prefill64_a, c.a);
  put<uint64_t>(p, at + off::Prefill64_b, c.b);
  put<uint64_t>(p, at + off::Prefill64_a_log, c.a_log);
  put<uint64_t>(p, at + off::Prefill64_dt_bias, c.dt_bias);
  put<uint64_t>(p, at + off::Prefill64_cu_seqlens, c.cu_seqlens);
  put<uint64_t>(p, at + off::Prefill64_state, c.state);
  put<uint64_t>(p, at + off::Prefill64_new_state, c.new_state);
  put<uint64_t>(p, at + off::Prefill64_out, c.out);
  put<uint64_t>(p, at + off::Prefill64_workspace, workspace);
  put<int64_t>(p, at + off::Prefill64_num_seqs, c.num_seqs);
  put<int64_t>(p, at + off::Prefill64_total_tokens, c.total_tokens);
  put<float>(p, at + off::Prefill64_scale, c.scale);
  put<int32_t>(p, at + off::Prefill64_num_q_heads, static_cast<int32_t>(kNumQHeads));
  put<int32_t>(p, at + off::Prefill64_num_v_heads, static_cast<int32_t>(kNumVHeads));
  put<int32_t>(p, at + off::Prefill64_seg_chunks, seg_chunks);
  put<int64_t>(p, at + off::Prefill64_num_state_rows, c.num_seqs);
}

}  // namespace
}  // namespace gdn_pack
