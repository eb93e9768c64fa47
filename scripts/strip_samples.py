#!/usr/bin/env python3
"""strip_samples.py — drop the raw `samples_us` arrays from `gdn bench --json` files (schema gdn-bench/1).

    python3 scripts/strip_samples.py FILE.json [...]

Every tier keeps n, median_us, p10_us, p90_us (and the copy floor), which is all `gdn plot` and the notes read; the
raw samples (100 per tier) make each file ~1.7 MB, a large share of a device call's 64 MiB carry when several such
files are tracked. The file's indentation is kept, so a diff shows only the removed lines.
"""
import json
import sys


def strip(x):
    n = 0
    if isinstance(x, dict):
        if "samples_us" in x:
            del x["samples_us"]
            n += 1
        for v in x.values():
            n += strip(v)
    elif isinstance(x, list):
        for v in x:
            n += strip(v)
    return n


def main(paths):
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        with open(path) as f:
            text = f.read()
        doc = json.loads(text)
        if doc.get("schema") != "gdn-bench/1":
            sys.exit(f"{path}: not a gdn-bench/1 document (schema {doc.get('schema')!r})")
        indent = next((len(line) - len(line.lstrip(" ")) for line in text.splitlines()[1:2]), None) or None
        n = strip(doc)
        with open(path, "w") as f:
            json.dump(doc, f, indent=indent)
            f.write("\n")
        print(f"{path}: {n} sample arrays dropped")


if __name__ == "__main__":
    main(sys.argv[1:])
