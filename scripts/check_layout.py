#!/usr/bin/env python3
"""Checks the repository's layout rules; exit code 1 on any breach, listing each one.

1. No module of a crate's `src/` imports a module that imports it back, directly or around a circle
   (`use crate::…`, `super::…` and inline `crate::a::b::` paths count as imports; `#[cfg(test)]` blocks do not).
2. No source file under crates/ or tools/ is longer than 900 lines.
3. No tracked file, and no file name, tags a development session: the word "session" followed by a number,
   or a number after "s" in parentheses or between dashes. CHANGELOG.md and results/experiments.md aside.
Run from anywhere: python3 scripts/check_layout.py
"""
import os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LINES = 900
SOURCE_EXT = (".rs", ".cu", ".cuh", ".py", ".pyi", ".sh")


def strip_tests(text):
    """The text without `#[cfg(test)]` items (brace-matched) and comments."""
    text = re.sub(r"//[^\n]*", "", text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        j = text.find("{", m.end())
        semi = text.find(";", m.end())
        if j < 0 or (0 <= semi < j):  # `#[cfg(test)] mod tests;` or a one-line item
            i = semi + 1 if semi >= 0 else len(text)
            continue
        depth = 0
        for k in range(j, len(text)):
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            if depth == 0:
                i = k + 1
                break
        else:
            i = len(text)
    out.append(text[i:])
    return "".join(out)


def crate_modules(src):
    """{module path tuple: file} for every .rs under src (lib.rs/main.rs = ())."""
    mods = {}
    for d, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(d, f), src)
            parts = rel[:-3].split(os.sep)
            if parts[0] == "bin":
                continue
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            mods[tuple(parts)] = os.path.join(d, f)
    return mods


def resolve(path, mods):
    """The longest prefix of `path` that is a module."""
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in mods:
            return tuple(path[:n])
    return ()


def use_paths(text):
    """Every `a::b::c` path that starts a use tree or an inline path, with braces expanded one level deep."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        tree = re.sub(r"\s+", "", m.group(1))
        paths += expand(tree)
    for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", text):
        paths.append(m.group(1).split("::"))
    return paths


def expand(tree):
    m = re.match(r"^(.*?)::\{(.*)\}$", tree)
    if not m:
        return [tree.split(" as ")[0].split("::")]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur); cur = ""; continue
        depth += ch == "{"; depth -= ch == "}"; cur += ch
    parts.append(cur)
    out = []
    for p in filter(None, parts):
        out += expand(prefix + "::" + p) if p != "self" else [prefix.split("::")]
    return out


def cycles_in(crate_src):
    mods = crate_modules(crate_src)
    edges = {m: set() for m in mods}
    for mod, f in mods.items():
        text = strip_tests(open(f).read())
        is_dir_mod = os.path.basename(f) in ("mod.rs", "lib.rs", "main.rs")
        here = list(mod) if is_dir_mod else list(mod[:-1])  # the folder this file's `super`/`self` start from
        for p in use_paths(text):
            if p[0] == "crate":
                target = p[1:]
            elif p[0] in ("super", "self"):
                base = list(mod) if p[0] == "self" else (list(mod[:-1]) if not is_dir_mod else list(mod[:-1]))
                rest = p[1:]
                if p[0] == "super":
                    base = list(mod[:-1])
                    while rest and rest[0] == "super":
                        base, rest = base[:-1], rest[1:]
                target = base + rest
            else:
                # a plain `use child::x` from a mod.rs/lib.rs names a child module
                if (tuple(here + p[:1]) in mods) and is_dir_mod:
                    target = here + p
                else:
                    continue
            t = resolve(target, mods)
            if t != mod and t in mods:
                edges[mod].add(t)
    # strongly connected components (Tarjan)
    index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    for v in edges:
        if v not in index:
            visit(v)
    name = lambda m: "crate::" + "::".join(m) if m else "crate"
    return [sorted(name(m) for m in c) for c in sccs]


def main():
    bad = []
    crates = os.path.join(ROOT, "crates")
    for c in sorted(os.listdir(crates)):
        src = os.path.join(crates, c, "src")
        if os.path.isdir(src):
            for cyc in cycles_in(src):
                bad.append(f"import cycle in {c}: " + " <-> ".join(cyc))
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        p = os.path.join(ROOT, f)
        if not os.path.isfile(p):
            continue
        if f.startswith(("crates/", "tools/")) and f.endswith(SOURCE_EXT):
            n = sum(1 for _ in open(p, errors="replace"))
            if n > MAX_LINES:
                bad.append(f"{f}: {n} lines (at most {MAX_LINES})")
        if re.search(r"(^|[-_/])s\d+([-_.]|$)", os.path.basename(f)):
            bad.append(f"{f}: a session tag in the file name")
        if f in ("CHANGELOG.md", "results/experiments.md") or f.endswith((".json", ".svg")):
            continue
        text = open(p, errors="replace").read()
        for m in re.finditer(r"[Ss]ession \d+|\(s\d+\)|-s\d+-", text):
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{f}:{line}: names a session ({m.group(0)})")
    for b in bad:
        print(b)
    print(f"layout: {len(bad)} problem(s)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
