// gdn_ops.h: one call of each GDN operation of a packed gdn solution, from checked arguments: the params
// structs filled as gdn's `abi::args` fills them for a definition call (serving block zero), the launches as
// gdn's `exec::recurrent` / `exec::prefill` make them.
#pragma once
#include "gdn_host.h"

namespace gdn_pack {

// Decode (t = 1) or MTP (t = T) of `batch` requests: one recurrent launch. MTP in the definitions' mode reads
// the pool and leaves it (`new_state` 0), writes each token's state to the intermediate buffer; the caller
// copies the pool to final_state.
struct RecurrentCall {
  uint64_t q, k, v, a, b, a_log, dt_bias, state, new_state, intermediate, out, state_indices;
  int64_t batch, seq_len, state_rows;
  float scale;
};

inline void run_recurrent(DeviceKernels& d, const RecurrentCall& c, cudaStream_t stream) {
  if (c.batch == 0) return;
  const int ki = recurrent_kernel(static_cast<uint64_t>(c.batch), d.sms);
  if (ki < 0) TVM_FFI_THROW(RuntimeError) << "gdn: no recurrent kernel for batch " << c.batch;
  alignas(16) unsigned char p[kRecurrentBytes] = {};
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
  const uint64_t b = static_cast<uint64_t>(c.batch);
  launch(d, ki, grid_of(kKernels[ki], b * static_cast<uint64_t>(c.seq_len), b, 1), p, stream, false);
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

inline int32_t small_i32(uint64_t x, const char* what) {
  if (x > 0x7fffffffull) TVM_FFI_THROW(ValueError) << "gdn: prefill " << what << " " << x << " does not fit int32";
  return static_cast<int32_t>(x);
}

// Prefill: the launches of the call's template (gdn_plan.h), in stream order; the first stream-ordered, the others
// with programmatic dependent launch.
inline void run_prefill(DeviceKernels& d, const PrefillCall& c, cudaStream_t stream) {
  if (c.num_seqs == 0) return;
  PrefillInstance inst;
  const uint64_t t = static_cast<uint64_t>(c.total_tokens), n = static_cast<uint64_t>(c.num_seqs);
  if (!prefill_instance(t, n, d.sms, &inst)) TVM_FFI_THROW(RuntimeError) << "gdn: no prefill plan in this solution";
  const PrefillTemplate& tpl = *inst.tpl;
  const uint64_t ws = workspace(d, inst.workspace_bytes);
  bool first = true;
  if (tpl.kind != kPlanDevice) {
    alignas(16) unsigned char p[kPrefill64Bytes > kPrefillBytes ? kPrefill64Bytes : kPrefillBytes] = {};
    if (tpl.kind == kPlanFused) {
      fill_prefill(p, 0, c);
    } else {
      fill_prefill64(p, 0, c, ws, tpl.kind == kPlanCp ? small_i32(tpl.seg_chunks, "segment length") : 0);
    }
    for (int i = 0; i < inst.num_launches; ++i) {
      launch(d, inst.launches[i].kernel, inst.launches[i].grid, p, stream, !first);
      first = false;
    }
    return;
  }
  // the device plan: the fused tiles for [0, tile_from) and [tile_from, run_from), then the prefill64 launches
  const uint64_t tile_from = tpl.tile_from < tpl.run_from ? tpl.tile_from : tpl.run_from;
  alignas(16) unsigned char pf[kPrefillPlanBytes] = {};
  fill_prefill(pf, off::PrefillPlan_p, c);
  alignas(16) unsigned char p64[kPrefill64PlanBytes] = {};
  bool any64 = false;
  for (int i = 0; i < inst.num_launches; ++i) {
    const SizedLaunch& s = inst.launches[i];
    if (s.role >= kPrep) {
      any64 = true;
      uint32_t vg[3] = {static_cast<uint32_t>(s.vgrid.x), static_cast<uint32_t>(s.vgrid.y), static_cast<uint32_t>(s.vgrid.z)};
      small_i32(s.vgrid.x * s.vgrid.y * s.vgrid.z, "grid");
      std::memcpy(p64 + off::Prefill64Plan_vgrid + 12 * (s.role - kPrep), vg, sizeof(vg));
    }
  }
  if (any64) {
    if (inst.workspace_bytes < kDpCounterBytes) TVM_FFI_THROW(RuntimeError) << "gdn: device plan without its counters";
    fill_prefill64(p64, off::Prefill64Plan_p, c, ws, 0);
    put<int64_t>(p64, off::Prefill64Plan_plan_from, tokens_i64(tpl.run_from));
    put<int64_t>(p64, off::Prefill64Plan_plan_cp_from, tokens_i64(tpl.cp_from));
    const uint64_t lo = tpl.cp_l_lo > 0 ? tpl.cp_l_lo : 1;
    put<int32_t>(p64, off::Prefill64Plan_plan_cp_l_lo, small_i32(lo, "segment length"));
    put<int32_t>(p64, off::Prefill64Plan_plan_cp_l_hi, small_i32(tpl.cp_l_hi > lo ? tpl.cp_l_hi : lo, "segment length"));
    put<uint64_t>(p64, off::Prefill64Plan_claimed, ws + inst.workspace_bytes - kDpCounterBytes);
  }
  for (int i = 0; i < inst.num_launches; ++i) {
    const SizedLaunch& s = inst.launches[i];
    if (s.role == kFused || s.role == kFusedSkew) {
      const uint64_t from = s.role == kFused ? 0 : tile_from, below = s.role == kFused ? tile_from : tpl.run_from;
      put<int64_t>(pf, off::PrefillPlan_run_below, below <= from ? -1 : tokens_i64(below));
      put<int64_t>(pf, off::PrefillPlan_run_from, tokens_i64(from));
      launch(d, s.kernel, s.grid, pf, stream, !first);
    } else {
      launch(d, s.kernel, s.grid, p64, stream, !first);
    }
    first = false;
  }
}

}  // namespace gdn_pack
