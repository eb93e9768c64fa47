"""fp64 emulation of the chunk-64 walk's operand roundings (CPU, numpy; no GPU).

    python3 tools/numerics_emu.py [T]

One value head, one sequence of T tokens (default 4096), normalised bf16 q/k, bf16 v, state 0.1·randn, gates as
harness_common.make_inputs ("slow": long memory, "bench": bench_peers). The chunked walk (C = 64) is run in
float64 with the kernel's roundings applied to the operands of each product — S to bf16 in Z/Y, the update operand
Vn e^{γC−γ} to bf16, and per scheme the operands of U = Vᵀ Tbᵀ, B2 = Z Tgᵀ (or (Z e^γ) Tbᵀ: "tg_from_tb") and
O = Vn Pᵀ as single bf16 / fp16 / tf32 or hi + lo bf16 pairs — and compared with the float64 token recurrence
(output and final-state rel-L2): what the record's layout (Tg derived from Tb, "tg_from_tb") costs and what
single-bf16 B2 / U / O would cost.
"""
import sys

import numpy as np

def rb(x):  # round to bf16 (RNE) via float32
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)
def rt(x):  # tf32 RNE (10-bit mantissa)
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    u = (u + 0xFFF + ((u >> 13) & 1)) & 0xFFFFE000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)
def rh(x):
    return np.asarray(x, dtype=np.float16).astype(np.float64)
def r32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)

def prod(a, b, mode):
    """a @ b with operand rounding `mode`."""
    if mode == "exact": return a @ b
    if mode == "bf16": return rb(a) @ rb(b)
    if mode == "fp16": return rh(a) @ rh(b)
    if mode == "tf32": return rt(a) @ rt(b)
    ah, bh = rb(a), rb(b); al, bl = rb(a - ah), rb(b - bh)
    if mode == "hilo3": return ah @ bh + al @ bh + ah @ bl
    if mode == "hilo_a": return ah @ bh + al @ bh   # only a split (b single)
    if mode == "hilo_b": return ah @ bh + ah @ bl   # only b split
    raise ValueError(mode)

def inputs(T, gates, bscale, seed):
    r = np.random.default_rng(seed)
    q = r.standard_normal((T, 128)); k = r.standard_normal((T, 128))
    q /= np.linalg.norm(q, axis=1, keepdims=True); k /= np.linalg.norm(k, axis=1, keepdims=True)
    q, k = rb(q), rb(k)
    v = rb(r.standard_normal((T, 128)))
    S0 = 0.1 * r.standard_normal((128, 128))  # [v][k]
    if gates == "bench":
        A_log = np.log(r.random() * 15 + 1); dt = r.standard_normal(); a = r.standard_normal(T)
    else:
        A_log = -1.0 - 2.0 * r.random(); dt = r.standard_normal() * 0.5 - 2.0; a = r.standard_normal(T) - 1.0
    a = rb(a); b = rb(r.standard_normal(T) * bscale)
    x = a + dt
    sp = np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))
    lg = -np.exp(A_log) * sp
    beta = 1 / (1 + np.exp(-b))
    return q, k, v, S0, lg, beta

def reference(q, k, v, S0, lg, beta, scale):
    S = S0.copy()  # [v][k]
    out = np.empty_like(v)
    for t in range(len(q)):
        S *= np.exp(lg[t])
        u = beta[t] * (v[t] - S @ k[t])
        S += np.outer(u, k[t])
        out[t] = scale * (S @ q[t])
    return out, S

def chunked(q, k, v, S0, lg, beta, scale, m):
    C = 64
    T = len(q)
    S = S0.copy()
    out = np.empty_like(v)
    for c0 in range(0, T, C):
        n = min(C, T - c0)
        K = np.zeros((C, 128)); Q = np.zeros((C, 128)); V = np.zeros((C, 128)); g = np.zeros(C); be = np.zeros(C)
        K[:n], Q[:n], V[:n], g[:n], be[:n] = k[c0:c0+n], q[c0:c0+n], v[c0:c0+n], lg[c0:c0+n], beta[c0:c0+n]
        gam = r32(np.cumsum(g))
        D = np.exp(np.minimum(gam[:, None] - gam[None, :], 0))
        A = np.tril(be[:, None] * (K @ K.T) * D, -1)
        Tm = np.linalg.inv(np.eye(C) + A)
        Tb = Tm * be[None, :]
        Tg = Tb * np.exp(gam)[None, :]
        P = scale * np.tril((Q @ K.T) * D)
        Sb = rb(S)
        Z = Sb @ K.T                  # [v][j]
        Y = Sb @ Q.T
        U = prod(V.T, Tb.T, m["U"])   # [v][i]
        if m.get("tg_from_tb"):
            Vn = U - prod(Z * np.exp(gam)[None, :], Tb.T, m["B2"])
        else:
            Vn = U - prod(Z, Tg.T, m["B2"])
        O = scale * np.exp(gam)[None, :] * Y + prod(Vn, P.T, m["O"])
        gC = gam[C - 1]
        S = np.exp(gC) * S + rb(Vn * np.exp(gC - gam)[None, :]) @ K
        out[c0:c0+n] = O.T[:n]
    return rb(out), S

def rel(x, y): return np.linalg.norm(x - y) / np.linalg.norm(y)

schemes = {
    "hi+lo, Tg in the record": {"U": "hilo_b", "B2": "hilo3", "O": "hilo3"},
    "all bf16": {"U": "bf16", "B2": "bf16", "O": "bf16"},
    "U bf16": {"U": "bf16", "B2": "hilo3", "O": "hilo3"},
    "B2 bf16": {"U": "hilo_b", "B2": "bf16", "O": "hilo3"},
    "O bf16": {"U": "hilo_b", "B2": "hilo3", "O": "bf16"},
    "B2 hilo_a(Z split, Tg single)": {"U": "hilo_b", "B2": "hilo_a", "O": "hilo3"},
    "B2 hilo_b(Tg split, Z single)": {"U": "hilo_b", "B2": "hilo_b", "O": "hilo3"},
    "O hilo_a(Vn split,P single)": {"U": "hilo_b", "B2": "hilo3", "O": "hilo_a"},
    "O hilo_b(P split, Vn single)": {"U": "hilo_b", "B2": "hilo3", "O": "hilo_b"},
    "all fp16": {"U": "fp16", "B2": "fp16", "O": "fp16"},
    "all tf32": {"U": "tf32", "B2": "tf32", "O": "tf32"},
    "hi+lo, tg_from_tb": {"U": "hilo_b", "B2": "hilo3", "O": "hilo3", "tg_from_tb": True},
    "exact products": {"U": "exact", "B2": "exact", "O": "exact"},
    "tg_from_tb B2 Z single / Tb split": {"U": "hilo_b", "B2": "hilo_b", "O": "hilo3", "tg_from_tb": True},
    "tg_from_tb B2 single": {"U": "hilo_b", "B2": "bf16", "O": "hilo3", "tg_from_tb": True},
}

def main():
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    for gates, bscale in (("slow", 3.0), ("bench", 1.0)):
        res = {name: [] for name in schemes}
        for seed in range(2):
            inp = inputs(T, gates, bscale, seed)
            ro, rs = reference(*inp, 1 / np.sqrt(128))
            for name, m in schemes.items():
                o, s = chunked(*inp, 1 / np.sqrt(128), m)
                res[name].append((rel(o, ro), rel(s, rs)))
        print(f"== T={T} gates={gates} (2 seeds): out rel-L2, state rel-L2")
        for name, v in res.items():
            print(f"  {name:<36} out {np.mean([x[0] for x in v]):.3e}  state {np.mean([x[1] for x in v]):.3e}")


if __name__ == "__main__":
    main()
