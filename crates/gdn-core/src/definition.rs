//! The GDN operations as the flashinfer-bench definitions describe them: which operation, which head
//! configuration, and the exact list of input/output tensors (names, symbolic shapes, dtypes).
//!
//! Built-in definitions are named `gdn_{decode|prefill|mtp}_qk{H}_v{HV}_d{D}_k_last` for any head
//! configuration with `HV % H == 0` (num_k_heads == num_q_heads == H). A flashinfer-bench definition JSON can
//! also be read: its axes, inputs and outputs must describe the same operation as the built-in one of its
//! name, or it is rejected with the first difference (its `reference` code is never executed).

use crate::dtype::DType;
use crate::error::{GdnError, Result};
use serde_json::Value;
use std::path::Path;

/// The three GDN operations.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// One token per request; state row b in, new_state row b out.
    Decode,
    /// Packed variable-length sequences delimited by `cu_seqlens`.
    Prefill,
    /// T > 1 tokens per request from a state pool (`initial_state_indices`), optional per-token states.
    Mtp,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Decode => "decode",
            Op::Prefill => "prefill",
            Op::Mtp => "mtp",
        }
    }
}

/// Head configuration. `num_k_heads == num_q_heads`; value head `h` reads q/k head `h / (num_v_heads / num_q_heads)`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Heads {
    pub num_q_heads: usize,
    pub num_k_heads: usize,
    pub num_v_heads: usize,
    pub head_size: usize,
}

impl Heads {
    /// The GVA configuration `qk{h}_v{hv}_d{d}`, checked.
    pub fn new(h: usize, hv: usize, d: usize) -> Result<Heads> {
        let heads = Heads {
            num_q_heads: h,
            num_k_heads: h,
            num_v_heads: hv,
            head_size: d,
        };
        heads.check(&format!("qk{h}_v{hv}_d{d}"))?;
        Ok(heads)
    }

    /// Value heads per q/k head.
    pub fn ratio(&self) -> usize {
        self.num_v_heads / self.num_q_heads
    }

    /// The q/k head that value head `hv` reads.
    pub fn qk_head(&self, hv: usize) -> usize {
        hv / self.ratio()
    }

    fn check(&self, name: &str) -> Result<()> {
        let bad = |p: &str| Err(GdnError::definition(name, p));
        if self.num_q_heads == 0 || self.num_v_heads == 0 {
            return bad("head counts must be positive");
        }
        if self.num_k_heads != self.num_q_heads {
            return bad("num_k_heads must equal num_q_heads");
        }
        if !self.num_v_heads.is_multiple_of(self.num_q_heads) {
            return bad("num_v_heads must be a multiple of num_q_heads");
        }
        if self.head_size != 128 && self.head_size != 64 {
            return bad("head_size must be 128 (or 64)");
        }
        Ok(())
    }
}

/// One tensor of a definition: name, symbolic shape (axis names; `None` for a scalar), dtype.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: &'static str,
    pub shape: Option<Vec<&'static str>>,
    pub dtype: DType,
    pub optional: bool,
}

fn spec(name: &'static str, shape: &[&'static str], dtype: DType, optional: bool) -> TensorSpec {
    TensorSpec {
        name,
        shape: Some(shape.to_vec()),
        dtype,
        optional,
    }
}

/// A required scalar (no shape).
fn scalar(name: &'static str, dtype: DType) -> TensorSpec {
    TensorSpec {
        name,
        shape: None,
        dtype,
        optional: false,
    }
}

/// A resolved definition: the operation and its head configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Definition {
    pub name: String,
    pub op: Op,
    pub heads: Heads,
}

const QH: &str = "num_q_heads";
const KH: &str = "num_k_heads";
const VH: &str = "num_v_heads";
const D: &str = "head_size";

impl Definition {
    /// The canonical name of a definition.
    pub fn canonical_name(op: Op, heads: &Heads) -> String {
        format!(
            "gdn_{}_qk{}_v{}_d{}_k_last",
            op.name(),
            heads.num_q_heads,
            heads.num_v_heads,
            heads.head_size
        )
    }

    pub fn new(op: Op, heads: Heads) -> Definition {
        Definition {
            name: Definition::canonical_name(op, &heads),
            op,
            heads,
        }
    }

    /// Resolves a built-in definition name such as `gdn_prefill_qk4_v8_d128_k_last`.
    pub fn builtin(name: &str) -> Result<Definition> {
        let bad = || {
            GdnError::definition(
                name,
                "unknown definition (expected gdn_{decode|prefill|mtp}_qk{H}_v{HV}_d{128|64}_k_last or a path to a definition JSON)",
            )
        };
        let rest = name.strip_prefix("gdn_").ok_or_else(bad)?;
        let (op, rest) = if let Some(r) = rest.strip_prefix("decode_") {
            (Op::Decode, r)
        } else if let Some(r) = rest.strip_prefix("prefill_") {
            (Op::Prefill, r)
        } else if let Some(r) = rest.strip_prefix("mtp_") {
            (Op::Mtp, r)
        } else {
            return Err(bad());
        };
        let rest = rest.strip_suffix("_k_last").ok_or_else(bad)?;
        let mut parts = rest.split('_');
        let mut num = |prefix: &str| -> Result<usize> {
            parts
                .next()
                .and_then(|p| p.strip_prefix(prefix))
                .and_then(|n| n.parse().ok())
                .ok_or_else(bad)
        };
        let (h, hv, d) = (num("qk")?, num("v")?, num("d")?);
        if parts.next().is_some() {
            return Err(bad());
        }
        let heads = Heads {
            num_q_heads: h,
            num_k_heads: h,
            num_v_heads: hv,
            head_size: d,
        };
        heads.check(name)?;
        Ok(Definition::new(op, heads))
    }

    /// A built-in name, or a path to a flashinfer-bench definition JSON (a path exists or ends in `.json`).
    pub fn resolve(name_or_path: &str) -> Result<Definition> {
        let p = Path::new(name_or_path);
        if name_or_path.ends_with(".json") || p.is_file() {
            Definition::from_json_file(p)
        } else {
            Definition::builtin(name_or_path)
        }
    }

    /// Inputs in the definition's order.
    pub fn inputs(&self) -> Vec<TensorSpec> {
        use DType::*;
        match self.op {
            Op::Decode => vec![
                spec("q", &["batch_size", "seq_len", QH, D], BF16, false),
                spec("k", &["batch_size", "seq_len", KH, D], BF16, false),
                spec("v", &["batch_size", "seq_len", VH, D], BF16, false),
                spec("state", &["batch_size", VH, D, D], F32, true),
                spec("A_log", &[VH], F32, false),
                spec("a", &["batch_size", "seq_len", VH], BF16, false),
                spec("dt_bias", &[VH], F32, false),
                spec("b", &["batch_size", "seq_len", VH], BF16, false),
                scalar("scale", F32),
            ],
            Op::Prefill => vec![
                spec("q", &["total_seq_len", QH, D], BF16, false),
                spec("k", &["total_seq_len", KH, D], BF16, false),
                spec("v", &["total_seq_len", VH, D], BF16, false),
                spec("state", &["num_seqs", VH, D, D], F32, true),
                spec("A_log", &[VH], F32, false),
                spec("a", &["total_seq_len", VH], BF16, false),
                spec("dt_bias", &[VH], F32, false),
                spec("b", &["total_seq_len", VH], BF16, false),
                spec("cu_seqlens", &["len_cu_seqlens"], I64, false),
                scalar("scale", F32),
            ],
            Op::Mtp => vec![
                spec("q", &["batch_size", "seq_len", QH, D], BF16, false),
                spec("k", &["batch_size", "seq_len", KH, D], BF16, false),
                spec("v", &["batch_size", "seq_len", VH, D], BF16, false),
                spec("initial_state", &["pool_size", VH, D, D], F32, false),
                spec("initial_state_indices", &["batch_size"], I32, false),
                spec("A_log", &[VH], F32, false),
                spec("a", &["batch_size", "seq_len", VH], BF16, false),
                spec("dt_bias", &[VH], F32, false),
                spec("b", &["batch_size", "seq_len", VH], BF16, false),
                scalar("scale", F32),
                spec(
                    "intermediate_states_buffer",
                    &["pool_size", "seq_len", VH, D, D],
                    F32,
                    true,
                ),
            ],
        }
    }

    /// Outputs in the definition's order.
    pub fn outputs(&self) -> Vec<TensorSpec> {
        use DType::*;
        match self.op {
            Op::Decode => vec![
                spec("output", &["batch_size", "seq_len", VH, D], BF16, false),
                spec("new_state", &["batch_size", VH, D, D], F32, false),
            ],
            Op::Prefill => vec![
                spec("output", &["total_seq_len", VH, D], BF16, false),
                spec("new_state", &["num_seqs", VH, D, D], F32, false),
            ],
            Op::Mtp => vec![
                spec("output", &["batch_size", "seq_len", VH, D], BF16, false),
                spec("final_state", &["pool_size", VH, D, D], F32, false),
            ],
        }
    }

    /// The name of the state input (`state`, or `initial_state` for MTP).
    pub fn state_input(&self) -> &'static str {
        if self.op == Op::Mtp {
            "initial_state"
        } else {
            "state"
        }
    }

    /// The name of the state output (`new_state`, or `final_state` for MTP).
    pub fn state_output(&self) -> &'static str {
        if self.op == Op::Mtp {
            "final_state"
        } else {
            "new_state"
        }
    }

    /// Value of a constant axis (head counts, head size, `seq_len` = 1 for decode).
    pub fn const_axis(&self, axis: &str) -> Option<usize> {
        let h = &self.heads;
        match axis {
            QH => Some(h.num_q_heads),
            KH => Some(h.num_k_heads),
            VH => Some(h.num_v_heads),
            D => Some(h.head_size),
            "seq_len" if self.op == Op::Decode => Some(1),
            _ => None,
        }
    }

    /// The variable axes (bound by each workload), in the order the tensors first name them.
    pub fn var_axes(&self) -> Vec<&'static str> {
        let mut axes = Vec::new();
        for s in self.inputs().into_iter().chain(self.outputs()) {
            for &a in s.shape.iter().flatten() {
                if self.const_axis(a).is_none() && !axes.contains(&a) {
                    axes.push(a);
                }
            }
        }
        axes
    }

    /// A definition JSON describing this definition in flashinfer-bench's fields (name, op_type, axes,
    /// inputs, outputs), without the `reference` code a published definition carries: [`Definition::from_json`]
    /// reads it back as this definition, but the harness needs the published JSON.
    pub fn to_json(&self) -> Value {
        let mut axes = serde_json::Map::new();
        let specs = |list: Vec<TensorSpec>, axes: &mut serde_json::Map<String, Value>| {
            let mut m = serde_json::Map::new();
            for s in list {
                for &a in s.shape.iter().flatten() {
                    let ax = match self.const_axis(a) {
                        Some(v) => serde_json::json!({"type": "const", "value": v}),
                        None => serde_json::json!({"type": "var"}),
                    };
                    axes.insert(a.to_string(), ax);
                }
                let mut t = serde_json::json!({"shape": s.shape, "dtype": s.dtype.name()});
                if s.optional {
                    t["optional"] = Value::Bool(true);
                }
                m.insert(s.name.to_string(), t);
            }
            Value::Object(m)
        };
        let inputs = specs(self.inputs(), &mut axes);
        let outputs = specs(self.outputs(), &mut axes);
        serde_json::json!({
            "name": self.name,
            "op_type": "gdn",
            "axes": axes,
            "inputs": inputs,
            "outputs": outputs,
        })
    }

    /// Reads a flashinfer-bench definition JSON file (see [`Definition::from_json`]).
    pub fn from_json_file(path: &Path) -> Result<Definition> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| GdnError::io(path.display().to_string(), e))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            GdnError::io(
                path.display().to_string(),
                format!("not a definition JSON: {e}"),
            )
        })?;
        Definition::from_json(&v)
    }

    /// Interprets a flashinfer-bench definition: the op from its name, heads from its constant axes; then
    /// checks that its inputs and outputs are exactly the ones gdn implements for that op.
    pub fn from_json(v: &Value) -> Result<Definition> {
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("<unnamed>")
            .to_string();
        let bad = |p: String| GdnError::definition(&name, p);
        if v.get("op_type").and_then(Value::as_str) != Some("gdn") {
            return Err(bad("op_type is not \"gdn\"".into()));
        }
        let op = if name.starts_with("gdn_decode_") {
            Op::Decode
        } else if name.starts_with("gdn_prefill_") {
            Op::Prefill
        } else if name.starts_with("gdn_mtp_") {
            Op::Mtp
        } else {
            return Err(bad(
                "name does not start with gdn_decode_, gdn_prefill_ or gdn_mtp_".into(),
            ));
        };
        let axes = v
            .get("axes")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("no \"axes\" object".into()))?;
        let axis_const = |a: &str| -> Result<usize> {
            let ax = axes
                .get(a)
                .ok_or_else(|| bad(format!("axis '{a}' missing")))?;
            if ax.get("type").and_then(Value::as_str) != Some("const") {
                return Err(bad(format!("axis '{a}' must be const")));
            }
            ax.get("value")
                .and_then(Value::as_u64)
                .map(|x| x as usize)
                .ok_or_else(|| bad(format!("axis '{a}' has no integer value")))
        };
        let heads = Heads {
            num_q_heads: axis_const(QH)?,
            num_k_heads: axis_const(KH)?,
            num_v_heads: axis_const(VH)?,
            head_size: axis_const(D)?,
        };
        heads.check(&name)?;
        let def = Definition {
            name: name.clone(),
            op,
            heads,
        };
        // Every axis the JSON declares must be one we know, with the same const/var nature.
        for (a, ax) in axes {
            let is_const = ax.get("type").and_then(Value::as_str) == Some("const");
            let ours = def.const_axis(a);
            let known_var = matches!(
                a.as_str(),
                "batch_size"
                    | "seq_len"
                    | "total_seq_len"
                    | "num_seqs"
                    | "len_cu_seqlens"
                    | "pool_size"
            );
            match (is_const, ours) {
                (true, Some(val)) => {
                    let theirs = ax.get("value").and_then(Value::as_u64).unwrap_or(u64::MAX);
                    if theirs != val as u64 {
                        return Err(bad(format!("axis '{a}' = {theirs}, gdn expects {val}")));
                    }
                }
                (false, None) if known_var => {}
                _ => {
                    return Err(bad(format!(
                        "axis '{a}' is not one gdn implements for {}",
                        op.name()
                    )))
                }
            }
        }
        for (section, ours) in [("inputs", def.inputs()), ("outputs", def.outputs())] {
            let theirs = v
                .get(section)
                .and_then(Value::as_object)
                .ok_or_else(|| bad(format!("no \"{section}\" object")))?;
            let parsed = parse_specs(theirs).map_err(|p| bad(format!("{section}: {p}")))?;
            if let Some(diff) = diff_specs(&ours, &parsed) {
                return Err(bad(format!("{section}: {diff}")));
            }
        }
        Ok(def)
    }
}

/// A tensor spec as read from JSON (owned strings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonSpec {
    pub name: String,
    pub shape: Option<Vec<String>>,
    pub dtype: DType,
    pub optional: bool,
}

fn parse_specs(obj: &serde_json::Map<String, Value>) -> std::result::Result<Vec<JsonSpec>, String> {
    obj.iter()
        .map(|(name, t)| {
            let dtype_s = t
                .get("dtype")
                .and_then(Value::as_str)
                .ok_or(format!("'{name}' has no dtype"))?;
            let dtype =
                DType::from_name(dtype_s).ok_or(format!("'{name}' has unknown dtype {dtype_s}"))?;
            let shape = match t.get("shape") {
                None | Some(Value::Null) => None,
                Some(Value::Array(a)) => Some(
                    a.iter()
                        .map(|x| {
                            x.as_str()
                                .map(str::to_string)
                                .ok_or(format!("'{name}' has a non-symbolic dimension"))
                        })
                        .collect::<std::result::Result<Vec<_>, _>>()?,
                ),
                Some(_) => return Err(format!("'{name}' has a malformed shape")),
            };
            let optional = t.get("optional").and_then(Value::as_bool).unwrap_or(false);
            Ok(JsonSpec {
                name: name.clone(),
                shape,
                dtype,
                optional,
            })
        })
        .collect()
}

/// The first difference between gdn's specs and a JSON definition's, if any (order-insensitive).
fn diff_specs(ours: &[TensorSpec], theirs: &[JsonSpec]) -> Option<String> {
    for t in theirs {
        let Some(o) = ours.iter().find(|o| o.name == t.name) else {
            return Some(format!("tensor '{}' is not one gdn implements", t.name));
        };
        let oshape = o
            .shape
            .as_ref()
            .map(|s| s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        if oshape != t.shape {
            return Some(format!(
                "tensor '{}' has shape {:?}, gdn expects {:?}",
                t.name, t.shape, oshape
            ));
        }
        if o.dtype != t.dtype {
            return Some(format!(
                "tensor '{}' has dtype {}, gdn expects {}",
                t.name, t.dtype, o.dtype
            ));
        }
        if o.optional != t.optional {
            return Some(format!(
                "tensor '{}' optional={}, gdn expects optional={}",
                t.name, t.optional, o.optional
            ));
        }
    }
    ours.iter()
        .find(|o| !theirs.iter().any(|t| t.name == o.name))
        .map(|o| format!("tensor '{}' is missing from the definition", o.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_resolve() {
        let d = Definition::builtin("gdn_prefill_qk4_v8_d128_k_last").unwrap();
        assert_eq!(d.op, Op::Prefill);
        assert_eq!(
            (d.heads.num_q_heads, d.heads.num_v_heads, d.heads.head_size),
            (4, 8, 128)
        );
        let d = Definition::builtin("gdn_mtp_qk2_v8_d64_k_last").unwrap();
        assert_eq!((d.op, d.heads.ratio()), (Op::Mtp, 4));
        assert_eq!(d.heads.qk_head(7), 1);
    }

    #[test]
    fn to_json_reads_back_and_lists_the_variable_axes() {
        for name in [
            "gdn_decode_qk4_v8_d128_k_last",
            "gdn_prefill_qk2_v8_d64_k_last",
            "gdn_mtp_qk16_v32_d128_k_last",
        ] {
            let d = Definition::builtin(name).unwrap();
            assert_eq!(Definition::from_json(&d.to_json()).unwrap(), d, "{name}");
        }
        let var = |n: &str| Definition::builtin(n).unwrap().var_axes();
        assert_eq!(var("gdn_decode_qk4_v8_d128_k_last"), ["batch_size"]);
        assert_eq!(
            var("gdn_prefill_qk4_v8_d128_k_last"),
            ["total_seq_len", "num_seqs", "len_cu_seqlens"]
        );
        assert_eq!(
            var("gdn_mtp_qk4_v8_d128_k_last"),
            ["batch_size", "seq_len", "pool_size"]
        );
    }

    #[test]
    fn bad_names_are_rejected() {
        for n in [
            "gdn_decode_qk4_v6_d128_k_last",
            "gdn_decode_qk4_v8_d96_k_last",
            "gdn_decode_qk4_v8_d128",
            "gdn_verify_qk4_v8_d128_k_last",
            "gdn_decode_qk0_v8_d128_k_last",
            "gdn_decode_qk4_v8_d128_k_last_x",
            "hello",
        ] {
            assert!(Definition::builtin(n).is_err(), "{n} should be rejected");
        }
    }
}
