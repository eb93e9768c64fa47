//! One line of a flashinfer-trace workloads file (`workloads/**/*.jsonl`), read and written.
//!
//! The fields are flashinfer-bench's data models: a line is a `Trace` (flashinfer_bench/data/trace.py:
//! `definition`, `workload`, `solution`, `evaluation`; a workload-only line has `solution` and `evaluation`
//! null) whose `workload` is a `Workload` (flashinfer_bench/data/workload.py: `uuid`, `axes` — every variable
//! axis of the definition, a non-negative integer —, `inputs`), each input one of `RandomInput`
//! (`{"type": "random"}`), `ScalarInput` (`{"type": "scalar", "value": x}`) or `SafetensorsInput`
//! (`{"type": "safetensors", "path": …, "tensor_key": …}`, the path relative to the dataset's root).
//! Fields of the line that gdn does not use (a trace's `evaluation`) are ignored.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Where one input's values come from.
#[derive(Clone, Debug, PartialEq)]
pub enum InputSource {
    /// Drawn by the reader (seeded).
    Random,
    /// A literal (GDN's only scalar input is `scale`).
    Scalar(f64),
    /// A tensor of a safetensors file, the path relative to the dataset's root.
    Safetensors { path: String, tensor_key: String },
}

/// One workload line, as written in the file (nothing checked against a definition yet).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// The definition's name (`None`: the line gives none; the file's name says it).
    pub definition: Option<String>,
    pub uuid: String,
    pub axes: BTreeMap<String, u64>,
    pub inputs: BTreeMap<String, InputSource>,
}

/// What is wrong with a line: the field (`workload.inputs.q.path`) and the problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub problem: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

type Parsed<T> = std::result::Result<T, FieldError>;

impl Record {
    /// Parses one line, naming the first field that is missing or malformed.
    pub fn parse(line: &str) -> Parsed<Record> {
        let v: Value = serde_json::from_str(line)
            .map_err(|e| FieldError::new("line", format!("not a JSON object: {e}")))?;
        let top = v
            .as_object()
            .ok_or_else(|| FieldError::new("line", "not a JSON object"))?;
        let definition = match top.get("definition") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(_) => return Err(FieldError::new("definition", "must be a non-empty string")),
        };
        let w = object(top, "workload", "workload")?;
        let uuid = match w.get("uuid") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            None => return Err(FieldError::new("workload.uuid", "missing")),
            Some(_) => {
                return Err(FieldError::new(
                    "workload.uuid",
                    "must be a non-empty string",
                ))
            }
        };
        let mut axes = BTreeMap::new();
        for (name, val) in object(w, "axes", "workload.axes")? {
            let n = val.as_u64().ok_or_else(|| {
                FieldError::new(
                    format!("workload.axes.{name}"),
                    format!("must be a non-negative integer, got {val}"),
                )
            })?;
            axes.insert(name.clone(), n);
        }
        let mut inputs = BTreeMap::new();
        for (name, val) in object(w, "inputs", "workload.inputs")? {
            inputs.insert(name.clone(), parse_input(name, val)?);
        }
        Ok(Record {
            definition,
            uuid,
            axes,
            inputs,
        })
    }

    /// The line as flashinfer-bench writes a workload: the `Trace` fields with `solution` and `evaluation` null.
    pub fn to_json(&self) -> Value {
        let inputs: Map<String, Value> = self
            .inputs
            .iter()
            .map(|(name, src)| {
                let v = match src {
                    InputSource::Random => json!({"type": "random"}),
                    InputSource::Scalar(x) => json!({"type": "scalar", "value": x}),
                    InputSource::Safetensors { path, tensor_key } => {
                        json!({"type": "safetensors", "path": path, "tensor_key": tensor_key})
                    }
                };
                (name.clone(), v)
            })
            .collect();
        json!({
            "definition": self.definition,
            "workload": {"uuid": self.uuid, "axes": self.axes, "inputs": inputs},
            "solution": null,
            "evaluation": null,
        })
    }

    /// [`Record::to_json`] on one line (no line break).
    pub fn to_line(&self) -> String {
        self.to_json().to_string()
    }
}

fn object<'a>(m: &'a Map<String, Value>, key: &str, field: &str) -> Parsed<&'a Map<String, Value>> {
    match m.get(key) {
        Some(Value::Object(o)) => Ok(o),
        None => Err(FieldError::new(field, "missing")),
        Some(_) => Err(FieldError::new(field, "must be an object")),
    }
}

fn parse_input(name: &str, v: &Value) -> Parsed<InputSource> {
    let field = format!("workload.inputs.{name}");
    let o = v
        .as_object()
        .ok_or_else(|| FieldError::new(&field, "must be an object with a \"type\""))?;
    let string = |key: &str| -> Parsed<String> {
        match o.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            None => Err(FieldError::new(format!("{field}.{key}"), "missing")),
            Some(_) => Err(FieldError::new(
                format!("{field}.{key}"),
                "must be a non-empty string",
            )),
        }
    };
    match o.get("type").and_then(Value::as_str) {
        Some("random") => Ok(InputSource::Random),
        Some("scalar") => match o.get("value") {
            Some(Value::Number(n)) => Ok(InputSource::Scalar(n.as_f64().unwrap_or(f64::NAN))),
            None => Err(FieldError::new(format!("{field}.value"), "missing")),
            Some(other) => Err(FieldError::new(
                format!("{field}.value"),
                format!("must be a number (GDN's scalars are floats), got {other}"),
            )),
        },
        Some("safetensors") => Ok(InputSource::Safetensors {
            path: string("path")?,
            tensor_key: string("tensor_key")?,
        }),
        Some(other) => Err(FieldError::new(
            format!("{field}.type"),
            format!("'{other}' is not an input kind (random, scalar or safetensors)"),
        )),
        None => Err(FieldError::new(
            format!("{field}.type"),
            "missing (random, scalar or safetensors)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_round_trips() {
        let mut r = Record {
            definition: Some("gdn_decode_qk4_v8_d128_k_last".into()),
            uuid: "u-1".into(),
            axes: BTreeMap::from([("batch_size".into(), 3)]),
            inputs: BTreeMap::new(),
        };
        r.inputs.insert("q".into(), InputSource::Random);
        r.inputs.insert("scale".into(), InputSource::Scalar(0.125));
        r.inputs.insert(
            "k".into(),
            InputSource::Safetensors {
                path: "./blob/x.safetensors".into(),
                tensor_key: "k".into(),
            },
        );
        assert_eq!(Record::parse(&r.to_line()).unwrap(), r);
    }

    #[test]
    fn malformed_fields_are_named() {
        let cases = [
            ("[1]", "line"),
            ("{}", "workload"),
            (
                r#"{"workload": {"axes": {}, "inputs": {}}}"#,
                "workload.uuid",
            ),
            (
                r#"{"workload": {"uuid": "u", "axes": {"batch_size": -1}, "inputs": {}}}"#,
                "workload.axes.batch_size",
            ),
            (
                r#"{"workload": {"uuid": "u", "axes": {}, "inputs": {"q": {"type": "zeros"}}}}"#,
                "workload.inputs.q.type",
            ),
            (
                r#"{"workload": {"uuid": "u", "axes": {}, "inputs": {"q": {"type": "safetensors", "path": "a"}}}}"#,
                "workload.inputs.q.tensor_key",
            ),
            (
                r#"{"workload": {"uuid": "u", "axes": {}, "inputs": {"scale": {"type": "scalar", "value": true}}}}"#,
                "workload.inputs.scale.value",
            ),
        ];
        for (line, field) in cases {
            let e = Record::parse(line).unwrap_err();
            assert_eq!(e.field, field, "{line}: {e:?}");
        }
    }
}
