//! The entry point of a packed solution (`gdn_<op>.cu`, symbol `run`), written from the definition: its parameters
//! are the definition's inputs then its outputs, in the definition's order (destination-passing style; `scale`
//! as a `double`, as tvm-ffi passes a Python float), each tensor checked (dtype, the shape its axes give,
//! contiguity, one CUDA device, alignment) before the call goes to `gdn_ops.h`.

use gdn_core::definition::TensorSpec;
use gdn_core::{DType, Definition, Op};
use std::fmt::Write;

/// The entry point's symbol.
pub const SYMBOL: &str = "run";

/// The entry file's name.
pub fn file_name(def: &Definition) -> String {
    format!("gdn_{}.cu", def.op.name())
}

fn dl(d: DType) -> (&'static str, u32) {
    match d {
        DType::BF16 => ("kDLBfloat", 16),
        DType::F16 => ("kDLFloat", 16),
        DType::F32 => ("kDLFloat", 32),
        DType::I32 => ("kDLInt", 32),
        DType::I64 => ("kDLInt", 64),
    }
}

/// The C++ parameter list, in definition order (inputs, then outputs).
pub fn params(def: &Definition) -> Vec<(TensorSpec, bool)> {
    def.inputs()
        .into_iter()
        .map(|s| (s, false))
        .chain(def.outputs().into_iter().map(|s| (s, true)))
        .collect()
}

/// `gdn_<op>.cu`.
pub fn source(def: &Definition) -> String {
    let all = params(def);
    let mut o = format!(
        "// {}: written by `gdn pack` for {}. Entry point `{SYMBOL}` (tvm-ffi, destination-passing style): the\n\
         // definition's inputs then its outputs. Host code only: the kernels are gdn's CUBINs (gdn_cubin.cpp).\n\
         #include <tvm/ffi/function.h>\n\n#include \"gdn_ops.h\"\n\nusing gdn_pack::TensorView;\n\n",
        file_name(def),
        def.name
    );
    let sig: Vec<String> = all
        .iter()
        .map(|(s, _)| match s.shape {
            None => format!("double {}", s.name),
            Some(_) => format!("TensorView {}", s.name),
        })
        .collect();
    // internal linkage: the library exports only the tvm-ffi symbol (gdn_host.h says why)
    let _ = writeln!(o, "static void {SYMBOL}({}) {{", sig.join(", "));
    o.push_str("  using namespace gdn_pack;\n");
    // variable axes: from the first tensor that has each (its rank checked first)
    let mut bound: Vec<&str> = Vec::new();
    for (s, _) in &all {
        let Some(shape) = &s.shape else { continue };
        for (i, axis) in shape.iter().enumerate() {
            if def.const_axis(axis).is_some() || bound.contains(axis) {
                continue;
            }
            let _ = writeln!(
                o,
                "  if ({0}.ndim() != {1}) TVM_FFI_THROW(ValueError) << \"gdn: {0} must have {1} dimensions, got \" << {0}.ndim();\n\
                 \x20 const int64_t {axis} = {0}.size({i});",
                s.name,
                shape.len()
            );
            bound.push(axis);
        }
    }
    o.push_str("  int dev = -1;\n");
    for (s, _) in &all {
        let Some(shape) = &s.shape else { continue };
        let dims: Vec<String> = shape
            .iter()
            .map(|a| match def.const_axis(a) {
                Some(v) => v.to_string(),
                None => a.to_string(),
            })
            .collect();
        let (code, bits) = dl(s.dtype);
        let _ = writeln!(
            o,
            "  {{\n    const int64_t dims[] = {{{}}};\n    dev = expect({}, \"{}\", {code}, {bits}, dims, {}, dev);\n  }}",
            dims.join(", "),
            s.name,
            s.name,
            shape.len()
        );
    }
    let body = match def.op {
        Op::Decode => "  RecurrentCall c{ptr_of(q), ptr_of(k), ptr_of(v), ptr_of(a), ptr_of(b), ptr_of(A_log), ptr_of(dt_bias),\n\
             \x20               ptr_of(state), ptr_of(new_state), 0, ptr_of(output), 0,\n\
             \x20               batch_size, 1, batch_size, resolved_scale(scale)};\n\
             \x20 run_recurrent(d, c, stream);\n",
        Op::Mtp => "  // the definitions' MTP: final_state is the input pool, unchanged; the kernel reads it and writes the\n\
             \x20 // intermediate states\n\
             \x20 const size_t pool_bytes = static_cast<size_t>(initial_state.numel()) * sizeof(float);\n\
             \x20 if (pool_bytes > 0) {\n\
             \x20   check(cudaMemcpyAsync(reinterpret_cast<void*>(ptr_of(final_state)), reinterpret_cast<const void*>(ptr_of(initial_state)),\n\
             \x20                         pool_bytes, cudaMemcpyDeviceToDevice, stream), \"copying the pool to final_state\");\n\
             \x20 }\n\
             \x20 RecurrentCall c{ptr_of(q), ptr_of(k), ptr_of(v), ptr_of(a), ptr_of(b), ptr_of(A_log), ptr_of(dt_bias),\n\
             \x20                ptr_of(initial_state), 0, ptr_of(intermediate_states_buffer), ptr_of(output),\n\
             \x20                ptr_of(initial_state_indices), batch_size, seq_len, pool_size, resolved_scale(scale)};\n\
             \x20 run_recurrent(d, c, stream);\n",
        Op::Prefill => "  if (len_cu_seqlens != num_seqs + 1) {\n\
             \x20   TVM_FFI_THROW(ValueError) << \"gdn: cu_seqlens must have num_seqs + 1 = \" << num_seqs + 1 << \" entries, got \" << len_cu_seqlens;\n\
             \x20 }\n\
             \x20 PrefillCall c{ptr_of(q), ptr_of(k), ptr_of(v), ptr_of(a), ptr_of(b), ptr_of(A_log), ptr_of(dt_bias),\n\
             \x20               ptr_of(cu_seqlens), ptr_of(state), ptr_of(new_state), ptr_of(output),\n\
             \x20               total_seq_len, num_seqs, resolved_scale(scale)};\n\
             \x20 run_prefill(d, c, stream);\n",
    };
    let _ = write!(
        o,
        "  DeviceScope scope(dev);\n  DeviceKernels& d = device_kernels(dev);\n  cudaStream_t stream = stream_of(dev);\n{body}}}\n\n\
         TVM_FFI_DLL_EXPORT_TYPED_FUNC({SYMBOL}, {SYMBOL});\n"
    );
    o
}
