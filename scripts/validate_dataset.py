#!/usr/bin/env python3
"""scripts/validate_dataset.py — a flashinfer-trace dataset checked with flashinfer-bench's own data models.

Usage: python3 scripts/validate_dataset.py DIR
       python3 scripts/validate_dataset.py --self-test DIR

Every definition JSON under DIR/definitions is validated with flashinfer-bench's `Definition`, every line of
every DIR/workloads JSONL with its `Trace` (a workload trace: no solution, no evaluation), and the folder is
loaded with its `TraceSet.from_path`. Then each line is checked against its definition: every axis known, every
variable axis given, a constant axis only with its value; every input a definition input, a scalar only for a
shape-less input; each safetensors path inside DIR, naming a file that holds `tensor_key` with the definition's
dtype and the shape its axes give, its bytes inside the file. Each problem is one line on stderr,
`error: FILE:LINE: FIELD: PROBLEM`; the exit status is 1 if there is any.

flashinfer-bench's data models are loaded without torch: the package's `__init__` (which imports torch and the
benchmark harness) is not run; `flashinfer_bench.data` is imported under a bare package, with stand-ins for
the torch and safetensors.torch modules its TraceSet imports for its blob helpers (never called here). Tensor
headers are read from the files directly (8-byte length, then JSON), so neither numpy nor safetensors is
needed. Needs flashinfer-bench (installed with --no-deps) and pydantic on the path; .ci/run installs pinned
versions into a private folder and puts it on PYTHONPATH.

--self-test DIR: DIR must validate; then broken copies of it (a wrong dtype, a missing tensor key, an unknown
axis, a wrong shape, a missing file, a path leaving the dataset, a truncated tensor file, an empty uuid, a bad
definition) are written to a temporary folder, each must be reported at its file and line.
"""
import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import struct
import sys
import tempfile
import types

# Definition dtype -> (safetensors dtype, bytes per element).
ST_DTYPES = {
    "float32": ("F32", 4),
    "float16": ("F16", 2),
    "bfloat16": ("BF16", 2),
    "float8_e4m3fn": ("F8_E4M3", 1),
    "float8_e5m2": ("F8_E5M2", 1),
    "int64": ("I64", 8),
    "int32": ("I32", 4),
    "int16": ("I16", 2),
    "int8": ("I8", 1),
    "bool": ("BOOL", 1),
}
ST_ITEM_SIZE = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}


class _Unavailable(types.ModuleType):
    """Stands in for a module the data models import but never use here; any use is an error."""

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise ImportError(f"{self.__name__}.{attr}: {self.__name__} is not loaded by validate_dataset.py")


def load_data_models():
    """flashinfer_bench.data, imported without the package's __init__ and without torch."""
    spec = importlib.util.find_spec("flashinfer_bench")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("error: flashinfer-bench is not installed; install it without its dependencies:\n"
                 "  python3 -m pip install --no-deps flashinfer-bench==0.1.2 pydantic\n"
                 "(or put the folder .ci/run installs it into on PYTHONPATH)")
    pkg = types.ModuleType("flashinfer_bench")
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = spec
    sys.modules["flashinfer_bench"] = pkg
    stand_ins = {name: _Unavailable(name) for name in ("torch", "safetensors", "safetensors.torch")}
    stand_ins["safetensors"].__path__ = []
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        data = importlib.import_module("flashinfer_bench.data")
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
    return data


def versions():
    out = []
    for dist in ("flashinfer-bench", "pydantic"):
        try:
            out.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{dist} (version unknown)")
    return ", ".join(out)


def line_of(text, loc):
    """The 1-based line of the JSON text where the keys of `loc` appear in order (1 when not found)."""
    pos = 0
    for key in loc:
        if isinstance(key, int):
            continue
        hit = text.find(json.dumps(str(key)), pos)
        if hit < 0:
            break
        pos = hit
    return text.count("\n", 0, pos) + 1


def pydantic_problems(exc):
    """(loc tuple, message with the offending value) for each error of a pydantic ValidationError."""
    out = []
    for e in exc.errors():
        msg = e.get("msg", "invalid")
        value = e.get("input")
        if isinstance(value, (str, int, float, bool)) and len(repr(value)) <= 80:
            msg += f" (got {value!r})"
        out.append((tuple(e.get("loc", ())), msg))
    return out


def dotted(loc):
    """A pydantic location as a field path ("line" for the whole line or document)."""
    return ".".join(str(k) for k in loc) or "line"


class Checker:
    def __init__(self, root, data):
        self.root = root
        self.data = data
        self.errors = []
        self.headers = {}  # resolved file -> header dict, or an error string
        self.counts = {"definitions": 0, "workloads": 0, "tensors": 0}

    def error(self, where, field, problem):
        self.errors.append(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")

    def run(self):
        from pydantic import ValidationError

        defs = self.check_definitions(ValidationError)
        self.check_workloads(defs, ValidationError)
        self.check_trace_set(defs)
        return self.errors

    # ---- definitions
    def check_definitions(self, ValidationError):
        defs = {}
        folder = os.path.join(self.root, "definitions")
        if not os.path.isdir(folder):
            self.error(folder, None, "no definitions folder")
            return defs
        for path in walk(folder, ".json"):
            text = read_text(path)
            try:
                d = self.data.Definition.model_validate_json(text)
            except ValidationError as exc:
                for loc, msg in pydantic_problems(exc):
                    if loc[:1] == ("json_invalid",) or "Invalid JSON" in msg:
                        self.error(f"{path}:1", None, msg)
                    else:
                        self.error(f"{path}:{line_of(text, loc)}", dotted(loc), msg)
                continue
            if d.name in defs:
                self.error(f"{path}:{line_of(text, ('name',))}", "name",
                           f"definition {d.name} also in {defs[d.name][1]}")
                continue
            defs[d.name] = (d, path)
            self.counts["definitions"] += 1
        if not defs:
            self.error(folder, None, "no valid definition")
        return defs

    # ---- workload lines
    def check_workloads(self, defs, ValidationError):
        folder = os.path.join(self.root, "workloads")
        if not os.path.isdir(folder):
            self.error(folder, None, "no workloads folder")
            return
        uuids = {}
        for path in walk(folder, ".jsonl"):
            for n, line in enumerate(read_text(path).split("\n"), 1):
                if not line.strip():
                    continue
                where = f"{path}:{n}"
                try:
                    trace = self.data.Trace.model_validate_json(line)
                except ValidationError as exc:
                    for loc, msg in pydantic_problems(exc):
                        self.error(where, dotted(loc), msg)
                    continue
                self.counts["workloads"] += 1
                if not trace.is_workload_trace():
                    self.error(where, None, "a workload line has no solution and no evaluation")
                w = trace.workload
                if w.uuid in uuids:
                    self.error(where, "workload.uuid", f"{w.uuid} also at {uuids[w.uuid]}")
                uuids.setdefault(w.uuid, where)
                if trace.definition not in defs:
                    self.error(where, "definition", f"{trace.definition} is not a definition of the dataset")
                    continue
                self.check_workload(where, defs[trace.definition][0], w)
        if self.counts["workloads"] == 0:
            self.error(folder, None, "no workload line")

    def check_workload(self, where, d, w):
        const = d.const_axes
        axes_ok = True
        for name, value in w.axes.items():
            if name not in d.axes:
                self.error(where, f"workload.axes.{name}", f"not an axis of {d.name}")
                axes_ok = False
            elif name in const and value != const[name]:
                self.error(where, f"workload.axes.{name}", f"{value}, but {d.name} fixes it at {const[name]}")
                axes_ok = False
        for name in d.var_axes:
            if name not in w.axes:
                self.error(where, f"workload.axes.{name}", f"variable axis of {d.name} not given")
                axes_ok = False
        shapes = {}
        if axes_ok:
            var = {k: v for k, v in w.axes.items() if k not in const}
            shapes = dict(zip(d.inputs, d.get_input_shapes(var)))
        for name, inp in w.inputs.items():
            field = f"workload.inputs.{name}"
            spec = d.inputs.get(name)
            if spec is None:
                self.error(where, field, f"not an input of {d.name}")
                continue
            if inp.type == "scalar":
                if spec.shape is not None:
                    self.error(where, field, f"a scalar for a tensor of shape {spec.shape}")
                continue
            if inp.type != "safetensors":
                continue
            shape = shapes.get(name, None) if spec.shape is not None else []
            self.check_tensor(where, field, inp, spec.dtype.value, shape)

    def check_tensor(self, where, field, inp, dtype, shape):
        rel = inp.path
        norm = os.path.normpath(rel)
        if os.path.isabs(rel) or norm == ".." or norm.startswith(".." + os.sep):
            self.error(where, f"{field}.path", f"{rel} is outside the dataset (give a path relative to its root)")
            return
        file = os.path.join(self.root, norm)
        if not os.path.isfile(file):
            self.error(where, f"{field}.path", f"{rel}: no such file in the dataset")
            return
        header = self.header(file)
        if isinstance(header, str):
            self.error(where, f"{field}.path", f"{rel}: {header}")
            return
        entry = header.get(inp.tensor_key)
        if entry is None or inp.tensor_key == "__metadata__":
            self.error(where, f"{field}.tensor_key", f"{inp.tensor_key} is not a tensor of {rel}")
            return
        self.counts["tensors"] += 1
        want = ST_DTYPES.get(dtype)
        if want is None:
            self.error(where, field, f"the definition's dtype {dtype} has no safetensors dtype to compare")
        elif entry["dtype"] != want[0]:
            self.error(where, field, f"dtype {entry['dtype']} in {rel}, the definition's {dtype} is {want[0]}")
        if shape is not None and list(entry["shape"]) != list(shape):
            self.error(where, field, f"shape {list(entry['shape'])} in {rel}, the definition's axes give {list(shape)}")

    def header(self, file):
        """The safetensors header of `file` (its tensors' entries checked to lie inside it), or a problem."""
        key = os.path.realpath(file)
        if key not in self.headers:
            self.headers[key] = read_header(file)
        return self.headers[key]

    # ---- flashinfer-bench's own loader
    def check_trace_set(self, defs):
        trace_set_cls = getattr(self.data, "TraceSet", None)
        if trace_set_cls is None:
            return
        try:
            ts = trace_set_cls.from_path(self.root)
        except Exception as exc:  # the loader's own checks: ValidationError, duplicates, assertions
            first = " ".join(" ".join(str(exc).split("\n")[:3]).split())
            self.error(self.root, "TraceSet.from_path", f"{type(exc).__name__}: {first}")
            return
        loaded = sum(len(v) for v in ts.workloads.values())
        if set(ts.definitions) != set(defs) or loaded != self.counts["workloads"]:
            self.error(self.root, "TraceSet.from_path",
                       f"loaded {len(ts.definitions)} definitions and {loaded} workloads, "
                       f"the line-by-line check {len(defs)} and {self.counts['workloads']}")


def read_header(file):
    size = os.path.getsize(file)
    with open(file, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return "not a safetensors file (shorter than 8 bytes)"
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            return f"not a safetensors file (a {n}-byte header in a {size}-byte file)"
        try:
            header = json.loads(f.read(n))
        except ValueError as exc:
            return f"not a safetensors file (header: {exc})"
    if not isinstance(header, dict):
        return "not a safetensors file (the header is not a JSON object)"
    data_len = size - 8 - n
    for key, e in header.items():
        if key == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = e["dtype"], e["shape"], e["data_offsets"]
        except (KeyError, TypeError, ValueError):
            return f"tensor {key}: the header entry lacks dtype, shape or data_offsets"
        item = ST_ITEM_SIZE.get(dtype)
        if item is not None and end - begin != item * math.prod(shape):
            return f"tensor {key}: {end - begin} bytes for {dtype} {shape}"
        if not 0 <= begin <= end <= data_len:
            return f"tensor {key}: bytes {begin}..{end} past the file's {data_len} data bytes"
    return header


def walk(folder, ext):
    out = []
    for d, _, files in os.walk(folder, followlinks=True):
        out += [os.path.join(d, f) for f in files if f.endswith(ext)]
    return sorted(out)


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def validate(root, data):
    checker = Checker(root, data)
    return checker.run(), checker.counts


# ---- --self-test: broken copies of a good dataset, each must be caught
def self_test(root, data):
    errors, _ = validate(root, data)
    if errors:
        print("\n".join("error: " + e for e in errors), file=sys.stderr)
        sys.exit(f"self-test: {root} must validate before its broken copies are made")
    jsonl = walk(os.path.join(root, "workloads"), ".jsonl")[0]
    rel_jsonl = os.path.relpath(jsonl, root)
    first = json.loads(read_text(jsonl).split("\n")[0])
    def_name = first["definition"]
    def_path = next(p for p in walk(os.path.join(root, "definitions"), ".json")
                    if json.loads(read_text(p)).get("name") == def_name)
    rel_def = os.path.relpath(def_path, root)
    definition = json.loads(read_text(def_path))
    # a float tensor input the line gives in safetensors, and a variable axis it sets
    name = next(k for k, v in first["workload"]["inputs"].items()
                if v["type"] == "safetensors" and definition["inputs"][k]["dtype"] in ("float32", "bfloat16"))
    axis = next(a for a in first["workload"]["axes"] if definition["axes"][a]["type"] == "var")
    blob_rel = first["workload"]["inputs"][name]["path"]

    def edit_line(tmp, fn):
        line = json.loads(json.dumps(first))
        fn(line["workload"])
        path = os.path.join(tmp, rel_jsonl)
        rest = read_text(path).split("\n")[1:]
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join([json.dumps(line)] + rest))

    def bad_dtype(tmp):
        header, body = split_file(os.path.join(root, blob_rel))
        header[name]["dtype"] = {"F32": "I32", "BF16": "F16"}[header[name]["dtype"]]
        write_file(os.path.join(tmp, "broken", "dtype.safetensors"), header, body)
        edit_line(tmp, lambda w: w["inputs"][name].update(path="./broken/dtype.safetensors"))

    def truncated(tmp):
        with open(os.path.join(root, blob_rel), "rb") as f:
            raw = f.read()
        os.makedirs(os.path.join(tmp, "broken"))
        with open(os.path.join(tmp, "broken", "short.safetensors"), "wb") as f:
            f.write(raw[:-1])
        edit_line(tmp, lambda w: w["inputs"][name].update(path="./broken/short.safetensors"))

    def bad_definition(tmp):
        d = json.loads(read_text(def_path))
        d["inputs"][name]["dtype"] = "float99"
        with open(os.path.join(tmp, rel_def), "w", encoding="utf-8") as f:
            json.dump(d, f, indent=2)

    def set_input(**fields):
        return lambda tmp: edit_line(tmp, lambda w: w["inputs"][name].update(**fields))

    def set_workload(fn):
        return lambda tmp: edit_line(tmp, fn)

    line1 = f"{rel_jsonl}:1"
    cases = [
        ("wrong dtype", bad_dtype, line1, "dtype"),
        ("missing tensor key", set_input(tensor_key="no_such_key"), line1, "no_such_key is not a tensor"),
        ("unknown axis", set_workload(lambda w: w["axes"].update(bogus_axis=3)), line1,
         "workload.axes.bogus_axis: not an axis"),
        ("wrong shape", set_workload(lambda w: w["axes"].update({axis: w["axes"][axis] + 1})), line1, "shape"),
        ("missing file", set_input(path="./blob/none.safetensors"), line1, "no such file"),
        ("path leaving the dataset", set_input(path="../x.safetensors"), line1, "outside the dataset"),
        ("truncated tensor file", truncated, line1, "past the file's"),
        ("empty uuid (flashinfer-bench's Trace)", set_workload(lambda w: w.update(uuid="")), line1, "workload.uuid"),
        ("bad definition dtype (flashinfer-bench's Definition)", bad_definition, rel_def, "float99"),
    ]
    passed = failed = 0
    for label, breaks, where, words in cases:
        with tempfile.TemporaryDirectory(prefix="gdn-validate-") as tmp:
            shutil.copytree(os.path.join(root, "definitions"), os.path.join(tmp, "definitions"))
            shutil.copytree(os.path.join(root, "workloads"), os.path.join(tmp, "workloads"))
            os.symlink(os.path.abspath(os.path.join(root, "blob")), os.path.join(tmp, "blob"))
            breaks(tmp)
            errors, _ = validate(tmp, data)
            hits = [e for e in errors if os.path.join(tmp, where) in e and words in e]
        if hits:
            passed += 1
            print(f"caught: {label}: {hits[0].replace(tmp + os.sep, '')}")
        else:
            failed += 1
            print(f"MISSED: {label} (wanted {where} ... {words}); reported: {errors or 'nothing'}", file=sys.stderr)
    print(f"self-test: {passed} passed, {failed} failed")
    return failed == 0


def split_file(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_file(path, header, body):
    text = json.dumps(header).encode()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="the dataset's root folder (definitions/, workloads/, blob/)")
    ap.add_argument("--self-test", action="store_true",
                    help="check that broken copies of DIR (which must validate) are each reported")
    a = ap.parse_args()
    if not os.path.isdir(a.dir):
        sys.exit(f"error: {a.dir}: no such folder")
    data = load_data_models()
    print(f"flashinfer-bench data models: {versions()}")
    if a.self_test:
        ok = self_test(a.dir, data)
    else:
        errors, counts = validate(a.dir, data)
        for e in errors:
            print("error: " + e, file=sys.stderr)
        print(f"{a.dir}: {counts['definitions']} definitions, {counts['workloads']} workloads, "
              f"{counts['tensors']} tensors: " + (f"{len(errors)} problems" if errors else "valid"))
        ok = not errors
    if "torch" in sys.modules:
        sys.exit("error: torch was imported; the data models must load without it")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
