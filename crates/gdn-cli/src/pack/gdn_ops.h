// gdn_ops.h: one call of each GDN operation of a packed gdn solution, from checked arguments: the params
// structs filled as gdn's `abi::args` fills them for a definition call (serving block zero), the launches as
// gdn's `exec::recurrent` / `exec::prefill` make them.
#pragma once
#include "gdn_host.h"

namespace gdn_pack {
namespace {  // internal linkage (gdn_host.h says why)

inline void run_recurrent(DeviceKernels& d, const RecurrentCall& c, cudaStream_t stream) {
  if (c.batch == 0) return;
  const int ki = recurrent_kernel(static_cast<uint64_t>(c.batch), d.sms);
  if (ki < 0) TVM_FFI_THROW(RuntimeError) << "gdn: no recurrent kernel for batch " << c.batch;
  alignas(16) unsigned char p[kRecurrentBytes] = {};
  fill_recurrent(p, c);
  const uint64_t b = static_cast<uint64_t>(c.batch);
  launch(d, ki, grid_of(kKernels[ki], b * static_cast<uint64_t>(c.seq_len), b, 1), p, stream, false);
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

}  // namespace
}  // namespace gdn_pack
