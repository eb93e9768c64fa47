#!/usr/bin/env python3
"""scripts/validate_solutions.py — `gdn pack` output checked with flashinfer-bench's own data models.

Usage: python3 scripts/validate_solutions.py --definitions DEFS PACKS
       python3 scripts/validate_solutions.py --definitions DEFS --same-kernels OTHER PACKS
       python3 scripts/validate_solutions.py --definitions DEFS --self-test PACKS

Every PACKS/<definition>/*.json is validated with flashinfer-bench's `Solution` (and its definition, from DEFS, with
`Definition`), then checked against what the harness's TVM-FFI builder needs: language cuda, binding tvm-ffi,
destination-passing style; the entry file among the sources, a `.cu` that exports the entry symbol
(`TVM_FFI_DLL_EXPORT_TYPED_FUNC`), whose parameters are the definition's inputs then outputs in the definition's
order (tensors as `TensorView`, scalars as `double`); every `#include "…"` of the sources found among them; the
embedded kernels (gdn_cubin.cpp) well-formed ELF CUBINs of the lengths and SHA-256 their comments state; config.toml
beside the JSON naming the same solution, definition and entry point.

--same-kernels OTHER: the embedded kernels of each definition also in OTHER (another `gdn pack` output, e.g. one
compiled without the NVRTC cache) must be byte for byte the same.
--self-test: PACKS must validate; then broken copies (an entry symbol not exported, parameters out of order, a
missing source, a damaged CUBIN, a definition name that does not exist) must each be reported.

The data models are loaded without torch, as scripts/validate_dataset.py does (same requirements).
Each problem is one line on stderr, `error: FILE: PROBLEM`; the exit status is 1 if there is any.
"""
import argparse
import base64
import copy
import hashlib
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from validate_dataset import load_data_models  # noqa: E402

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None


def read_definitions(data, folder):
    defs = {}
    for base, _, files in os.walk(folder):
        for f in sorted(files):
            if f.endswith(".json"):
                with open(os.path.join(base, f)) as fh:
                    raw = json.load(fh)
                d = data.Definition.model_validate(raw)
                defs[d.name] = (d, raw)
    return defs


def modules_of(text):
    """(module id, declared length, declared sha256, decoded bytes) for each module of a gdn_cubin.cpp text."""
    out, current, chunks = [], None, []
    for line in text.splitlines():
        m = re.match(r"// module \d+: (\S+) .*, (\d+) bytes, sha256 ([0-9a-f]{64})$", line)
        if m:
            current = (m.group(1), int(m.group(2)), m.group(3))
            chunks = []
        elif current and line.strip().startswith('"') and line.strip().endswith('"'):
            chunks.append(line.strip()[1:-1])
        elif current and line.strip() == ";":
            try:
                blob = base64.b64decode("".join(chunks), validate=True)
            except ValueError:
                blob = None
            out.append((*current, blob))
            current = None
    return out


def entry_params(text, symbol):
    """The (type, name) parameters of `void symbol(...)` in a C++ text, or None."""
    m = re.search(r"\bvoid\s+" + re.escape(symbol) + r"\s*\(([^)]*)\)\s*\{", text)
    if not m:
        return None
    params = []
    for p in m.group(1).split(","):
        parts = p.strip().rsplit(None, 1)
        if len(parts) != 2:
            return None
        params.append((parts[0], parts[1]))
    return params


def check_solution(path, data, defs):
    """Problems of one packed solution JSON (strings)."""
    errs = []
    try:
        with open(path) as fh:
            raw = json.load(fh)
        sol = data.Solution.model_validate(raw)
    except Exception as e:  # pydantic ValidationError or bad JSON
        return [f"not a flashinfer-bench Solution: {str(e).splitlines()[0]}"]
    if sol.definition not in defs:
        return [f"definition {sol.definition!r} is not in the definitions folder"]
    definition, _ = defs[sol.definition]
    spec = sol.spec
    if spec.language.value != "cuda":
        errs.append(f"spec.language {spec.language.value!r}, expected 'cuda'")
    if spec.binding is None or spec.binding.value != "tvm-ffi":
        errs.append("spec.binding must be 'tvm-ffi'")
    if not spec.destination_passing_style:
        errs.append("spec.destination_passing_style must be true")
    sources = {s.path: s.content for s in sol.sources}
    entry = sol.get_entry_source()
    symbol = sol.get_entry_symbol()
    if entry is None or not entry.path.endswith(".cu"):
        errs.append(f"entry file {spec.entry_point!r} is not a .cu among the sources")
    else:
        if f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({symbol}, {symbol})" not in entry.content:
            errs.append(f"{entry.path} does not export {symbol!r} (TVM_FFI_DLL_EXPORT_TYPED_FUNC)")
        params = entry_params(entry.content, symbol)
        want = [("double" if spec_.shape is None else "TensorView", name)
                for name, spec_ in list(definition.inputs.items()) + list(definition.outputs.items())]
        if params != want:
            errs.append(f"{entry.path}: {symbol} takes {params}, the definition's order is {want}")
    for p, text in sources.items():
        for inc in re.findall(r'#include "([^"]+)"', text):
            if inc not in sources:
                errs.append(f"{p}: #include \"{inc}\" is not among the sources")
    cubin = sources.get("gdn_cubin.cpp")
    if cubin is None:
        errs.append("no gdn_cubin.cpp among the sources")
    else:
        mods = modules_of(cubin)
        if not mods:
            errs.append("gdn_cubin.cpp embeds no module")
        for mid, n, sha, blob in mods:
            if blob is None:
                errs.append(f"module {mid}: not base64")
            elif len(blob) != n or hashlib.sha256(blob).hexdigest() != sha:
                errs.append(f"module {mid}: {len(blob)} bytes, sha256 {hashlib.sha256(blob).hexdigest()[:12]}…, "
                            f"the comment says {n} bytes, {sha[:12]}…")
            elif blob[:4] != b"\x7fELF":
                errs.append(f"module {mid}: not an ELF CUBIN")
    cfg = os.path.join(os.path.dirname(path), "config.toml")
    if not os.path.isfile(cfg):
        errs.append("no config.toml beside it")
    elif tomllib is not None:
        with open(cfg, "rb") as fh:
            c = tomllib.load(fh)
        got = (c.get("solution", {}).get("name"), c.get("solution", {}).get("definition"),
               c.get("build", {}).get("entry_point"), c.get("build", {}).get("language"))
        if got != (sol.name, sol.definition, spec.entry_point, "cuda"):
            errs.append(f"config.toml says {got}, the solution {(sol.name, sol.definition, spec.entry_point, 'cuda')}")
    return errs


def solutions_under(root):
    out = []
    for base, _, files in os.walk(root):
        out += [os.path.join(base, f) for f in files if f.endswith(".json")]
    return sorted(out)


def validate(root, data, defs, other=None, quiet=False):
    problems = 0
    files = solutions_under(root)
    if not files:
        print(f"error: {root}: no solution JSON", file=sys.stderr)
        return 1
    for path in files:
        errs = check_solution(path, data, defs)
        if other is not None and not errs:
            rel = os.path.relpath(path, root)
            twin = os.path.join(other, rel)
            if os.path.isfile(twin):
                a = {s["path"]: s["content"] for s in json.load(open(path))["sources"]}["gdn_cubin.cpp"]
                b = {s["path"]: s["content"] for s in json.load(open(twin))["sources"]}["gdn_cubin.cpp"]
                if modules_of(a) != modules_of(b):
                    errs.append(f"its kernels differ from {twin}'s")
        for e in errs:
            if not quiet:
                print(f"error: {path}: {e}", file=sys.stderr)
        problems += len(errs)
    if not quiet:
        print(f"{len(files)} solutions checked, {problems} problems")
    return problems


def self_test(root, data, defs):
    if validate(root, data, defs) != 0:
        print("error: self-test: the packed solutions must validate first", file=sys.stderr)
        return False
    path = solutions_under(root)[0]
    with open(path) as fh:
        good = json.load(fh)
    entry_path, symbol = good["spec"]["entry_point"].split("::")

    def edit_source(s, name, fn):
        for src in s["sources"]:
            if src["path"] == name:
                src["content"] = fn(src["content"])

    def swap_first_params(text):
        m = re.search(r"void " + symbol + r"\(([^,]+), ([^,]+),", text)
        return text[:m.start(1)] + m.group(2) + ", " + m.group(1) + text[m.end(2):]

    def damage_cubin(text):
        i = text.index('    "') + 10
        return text[:i] + ("A" if text[i] != "A" else "B") + text[i + 1:]

    cases = {
        "entry symbol not exported": lambda s: edit_source(
            s, entry_path, lambda t: t.replace(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({symbol}, {symbol})", "")),
        "parameters out of order": lambda s: edit_source(s, entry_path, swap_first_params),
        "missing source": lambda s: s.update(sources=[x for x in s["sources"] if x["path"] != "gdn_plan.h"]),
        "damaged CUBIN": lambda s: edit_source(s, "gdn_cubin.cpp", damage_cubin),
        "unknown definition": lambda s: s.update(definition="gdn_decode_qk3_v7_d128_k_last"),
        "entry file not in sources": lambda s: s["spec"].update(entry_point="missing.cu::" + symbol),
    }
    failed = 0
    for what, breaker in cases.items():
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "case")
            os.makedirs(d)
            broken = copy.deepcopy(good)
            breaker(broken)
            with open(os.path.join(d, "solution.json"), "w") as fh:
                json.dump(broken, fh)
            with open(os.path.join(os.path.dirname(path), "config.toml")) as src, \
                    open(os.path.join(d, "config.toml"), "w") as dst:
                dst.write(src.read())
            errs = check_solution(os.path.join(d, "solution.json"), data, defs)
            if errs:
                print(f"self-test: {what}: reported ({errs[0][:100]})")
            else:
                print(f"error: self-test: {what}: not reported", file=sys.stderr)
                failed += 1
    return failed == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("packs")
    ap.add_argument("--definitions", required=True)
    ap.add_argument("--same-kernels", metavar="OTHER")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    data = load_data_models()
    defs = read_definitions(data, a.definitions)
    if a.self_test:
        sys.exit(0 if self_test(a.packs, data, defs) else 1)
    sys.exit(1 if validate(a.packs, data, defs, a.same_kernels) else 0)


if __name__ == "__main__":
    main()
