#!/usr/bin/env python3
"""Compares the SASS of two gdn NVRTC caches function by function.

Fill each cache by running one `gdn` binary per tree with its own cache folder:
    CUDA_CACHE_DISABLE=1 GDN_CACHE_DIR=/tmp/a gdn kernels --arch sm_90a
    CUDA_CACHE_DISABLE=1 GDN_CACHE_DIR=/tmp/b gdn kernels --arch sm_90a
    python3 tools/sass_compare.py /tmp/a /tmp/b
Each cache entry holds one module's CUBIN (after a small header); `cuobjdump -sass` disassembles it (the
NVIDIA cuobjdump wheel works: pip install nvidia-cuda-cuobjdump). Line information differs whenever code
moves between files, so only the instructions and their encodings are compared. Exit code 0 when every
kernel's SASS is identical.
"""
import collections, glob, hashlib, os, re, shutil, subprocess, sys, tempfile


def cuobjdump():
    exe = shutil.which("cuobjdump")
    if exe:
        return exe
    import site
    for d in [site.getusersitepackages()] + sys.path:
        p = os.path.join(d, "nvidia", "cu13", "bin", "cuobjdump")
        if os.path.isfile(p):
            return p
    sys.exit("cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")


def functions(cache):
    """{kernel name: sorted list of SASS digests} over every module in the cache."""
    out = collections.defaultdict(list)
    files = sorted(glob.glob(os.path.join(cache, "nvrtc", "*.gdnbin")) + glob.glob(os.path.join(cache, "*.gdnbin")))
    if not files:
        sys.exit(f"{cache}: no .gdnbin files")
    for f in files:
        blob = open(f, "rb").read()
        at = blob.find(b"\x7fELF")
        if at < 0:
            sys.exit(f"{f}: no CUBIN inside")
        with tempfile.NamedTemporaryFile(suffix=".cubin") as t:
            t.write(blob[at:])
            t.flush()
            exe = cuobjdump()
            env = dict(os.environ, PATH=os.path.dirname(exe) + os.pathsep + os.environ.get("PATH", ""))
            text = subprocess.run([exe, "-sass", t.name], capture_output=True, text=True, check=True, env=env).stdout
        for name, body in re.findall(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", text, flags=re.S):
            instrs = re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*;)\s*/\* (0x[0-9a-f]+) \*/\s*\n\s*/\* (0x[0-9a-f]+) \*/", body)
            digest = hashlib.sha256(repr(instrs).encode()).hexdigest()[:16]
            out[name].append((digest, len(instrs)))
    return {k: sorted(v) for k, v in out.items()}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = functions(sys.argv[1]), functions(sys.argv[2])
    bad = 0
    for name in sorted(set(a) | set(b)):
        if a.get(name) != b.get(name):
            bad += 1
            print(f"DIFFERS  {name}: {a.get(name)} vs {b.get(name)}")
    print(f"{len(set(a) | set(b))} kernels, {bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
