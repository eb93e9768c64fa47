"""gdn.transformers (HF transformers' Qwen3-Next / Qwen3.5 gated-delta-net layers on gdn) on torch CPU tensors:
the replacement functions against the float64 reference of test_adapters_fla.py and against transformers' own
pure-torch functions; patch() / unpatch(); and tiny random-weight Qwen3-Next and Qwen3.5 models in bfloat16
(prefill and cached one-token decode) patched against their own torch path. The transformers parts skip when
transformers is not installed.

Run: pytest crates/gdn-py/tests/test_adapters_transformers.py (needs torch and the gdn wheel)."""

import inspect

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import gdn.transformers as gtr  # noqa: E402
from test_adapters_fla import check_close, make, reference  # noqa: E402

try:
    import transformers  # noqa: F401
    import transformers.models.qwen3_next.modeling_qwen3_next as hf_next
    TR_SKIP = None
except Exception as e:  # noqa: BLE001 - any import failure means "not available here"
    TR_SKIP = f"transformers (with Qwen3-Next) is not importable here ({type(e).__name__}: {e})"

needs_tr = pytest.mark.skipif(TR_SKIP is not None, reason=TR_SKIP or "")


def batch_ref(q, k, v, g, beta, h0=None, qk_norm=True):
    B, T = q.shape[:2]
    f = lambda x: x.reshape((B * T,) + tuple(x.shape[2:]))  # noqa: E731
    o, S = reference(f(q), f(k), f(v), f(g), f(beta), h0=h0, cu=[b * T for b in range(B + 1)], qk_norm=qk_norm)
    return o.view(B, T, *o.shape[1:]), S


@pytest.fixture(autouse=True)
def _restore():
    yield
    gtr.unpatch()


# ---------------------------------------------------------------------------------------------------------------
# the two functions

@pytest.mark.parametrize("H,HV", [(4, 4), (2, 4)])
@pytest.mark.parametrize("with_state", [False, True])
def test_chunk(H, HV, with_state):
    B, T, D = 2, 21, 64
    q, k, v, g, beta = make(B, T, H, HV, D, seed=H + HV)
    beta = beta.bfloat16()  # the layer passes b.sigmoid() in the model dtype and a float32 g
    h0 = torch.randn(B, HV, D, D) * 0.1 if with_state else None
    o, s = gtr.chunk_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True,
                                      use_qk_l2norm_in_kernel=True, cu_seqlens=None, position_ids=None)
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32 and s.shape == (B, HV, D, D)
    ro, rs = batch_ref(q, k, v, g, beta, h0=h0)
    check_close(o, ro, "core_attn_out")
    check_close(s, rs, "last_recurrent_state", rel=1e-4, tol=1e-4)
    o2, s2 = gtr.chunk_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h0, use_qk_l2norm_in_kernel=True)
    assert s2 is None and torch.equal(o2, o)


def test_recurrent_one_token_batch():
    B, H, HV, D = 3, 2, 4, 64
    q, k, v, g, beta = make(B, 1, H, HV, D, seed=5)
    h0 = torch.randn(B, HV, D, D) * 0.1
    h0_copy = h0.clone()
    o, s = gtr.recurrent_gated_delta_rule(q, k, v, g=g, beta=beta.bfloat16(), initial_state=h0,
                                          output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=None)
    assert torch.equal(h0, h0_copy), "the cached state is not modified in place; a new final state is returned"
    ro, rs = batch_ref(q, k, v, g, beta.bfloat16(), h0=h0)
    check_close(o, ro, "core_attn_out")
    check_close(s, rs, "last_recurrent_state", rel=1e-4, tol=1e-4)


def test_packed_sequences():
    cu = torch.tensor([0, 6, 19, 20], dtype=torch.int32)  # flash-attention style cu_seq_lens_q
    q, k, v, g, beta = make(1, 20, 2, 4, 64, seed=9)
    o, s = gtr.chunk_gated_delta_rule(q, k, v, g=g, beta=beta, output_final_state=True, use_qk_l2norm_in_kernel=True,
                                      cu_seqlens=cu, max_length_q=13)
    ro, rs = reference(q[0], k[0], v[0], g[0], beta[0], cu=cu.tolist(), qk_norm=True)
    check_close(o[0], ro, "core_attn_out")
    check_close(s, rs, "states", rel=1e-4, tol=1e-4)


def test_errors():
    q, k, v, g, beta = make(1, 4, 2, 4, 64, seed=13)
    with pytest.raises(NotImplementedError, match="float32"):
        gtr.chunk_gated_delta_rule(q.float(), k.float(), v.float(), g, beta)
    # a float16 model runs (output in float16, as the layer's own path returns it)
    o16, s16 = gtr.recurrent_gated_delta_rule(q.half(), k.half(), v.half(), g, beta, output_final_state=True)
    ro, rs = reference(q.half()[0], k.half()[0], v.half()[0], g[0], beta[0])
    assert o16.dtype == torch.float16 and s16.dtype == torch.float32
    check_close(o16[0], ro, "float16 output")
    check_close(s16[0], rs[0], "float16 final state", rel=1e-4, tol=1e-4)
    q.requires_grad_(True)
    o, _ = gtr.chunk_gated_delta_rule(q, k, v, g, beta)
    with pytest.raises(NotImplementedError, match="backward"):
        o.float().sum().backward()


# ---------------------------------------------------------------------------------------------------------------
# against transformers' own functions, patch / unpatch, whole models

def hf_torch_functions(mod):
    """transformers' pure-torch functions (under the fallback wrapper that may route to FLA when installed)."""
    return inspect.unwrap(mod.torch_chunk_gated_delta_rule), inspect.unwrap(mod.torch_recurrent_gated_delta_rule)


@needs_tr
def test_against_transformers_torch_functions():
    hf_chunk, hf_rec = hf_torch_functions(hf_next)
    B, T, H, HV, D = 2, 70, 2, 4, 64
    q, k, v, g, beta = make(B, T, H, HV, D, seed=17)
    beta = beta.bfloat16()
    h0 = torch.randn(B, HV, D, D) * 0.1
    if "num_k_heads" not in inspect.getsource(hf_chunk):  # releases whose layer repeats q/k itself
        q, k = q.repeat_interleave(HV // H, 2), k.repeat_interleave(HV // H, 2)
    kw = dict(g=g, beta=beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    o, s = gtr.chunk_gated_delta_rule(q, k, v, **kw)
    ho, hs = hf_chunk(q, k, v, **kw)
    ro, rs = batch_ref(q, k, v, g, beta, h0=h0)
    check_close(o, ho, "vs transformers' torch_chunk_gated_delta_rule")
    check_close(s, hs, "state vs transformers", rel=1e-3, tol=1e-3)
    e_gdn = ((o.double() - ro).norm() / ro.norm()).item()
    e_hf = ((ho.double() - ro).norm() / ro.norm()).item()
    assert e_gdn <= max(1.5 * e_hf, 4e-3), (e_gdn, e_hf)
    o1, s1 = gtr.recurrent_gated_delta_rule(q[:, :1], k[:, :1], v[:, :1], g=g[:, :1], beta=beta[:, :1],
                                            initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    ho1, hs1 = hf_rec(q[:, :1], k[:, :1], v[:, :1], g=g[:, :1], beta=beta[:, :1], initial_state=h0,
                      output_final_state=True, use_qk_l2norm_in_kernel=True)
    check_close(o1, ho1, "vs transformers' torch_recurrent_gated_delta_rule")
    # transformers keeps the normalised q/k in float32, gdn rounds them to bfloat16: a rounding-level difference
    check_close(s1, hs1, "state vs transformers (recurrent)", rel=1e-3, tol=1e-3)


@needs_tr
def test_patch_unpatch():
    before = (hf_next.torch_chunk_gated_delta_rule, hf_next.torch_recurrent_gated_delta_rule)
    names = gtr.patch()
    assert any(n.endswith("qwen3_next.torch_chunk_gated_delta_rule") for n in names)
    assert hf_next.torch_chunk_gated_delta_rule is gtr.chunk_gated_delta_rule
    assert hf_next.torch_recurrent_gated_delta_rule is gtr.recurrent_gated_delta_rule
    assert gtr.patch() == names, "idempotent"
    assert gtr.unpatch() == len(names)
    assert (hf_next.torch_chunk_gated_delta_rule, hf_next.torch_recurrent_gated_delta_rule) == before
    with pytest.raises(ImportError):
        gtr.patch(modules=["transformers.models.no_such_model.modeling_no_such_model"])


def tiny_model(kind):
    torch.manual_seed(0)
    common = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
                  linear_key_head_dim=64, linear_value_head_dim=64,
                  layer_types=["linear_attention", "linear_attention", "full_attention"])
    if kind == "qwen3_next":
        from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
        cfg = Qwen3NextConfig(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                              shared_expert_intermediate_size=64, **common)
        model = Qwen3NextForCausalLM(cfg)
    else:
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**common))
    return model.to(torch.bfloat16).eval()


def run_model(model, ids, steps):
    """prefill logits of `ids` [B, T0] and the logits of `steps` teacher-forced cached decode steps."""
    # the cache keyword is `cache` in recent releases, `past_key_values` before
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        out = model(ids[:, :-steps], use_cache=True)
        logits = [out.logits.float()]
        cache = out.past_key_values
        for t in range(ids.shape[1] - steps, ids.shape[1]):
            out = model(ids[:, t:t + 1], use_cache=True, **{key: cache})
            cache = out.past_key_values
            logits.append(out.logits.float())
    return logits


def model_module(kind):
    import importlib
    return importlib.import_module(f"transformers.models.{kind}.modeling_{kind}")


@needs_tr
@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5"])
def test_tiny_model_patched_matches_own_torch_path(kind):
    pytest.importorskip(f"transformers.models.{kind}.modeling_{kind}")
    mod = model_module(kind)
    model = tiny_model(kind)
    ids = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))
    steps = 4
    # the model's own path: transformers' pure-torch functions (FLA's would need a GPU here)
    hf_chunk, hf_rec = hf_torch_functions(mod)
    saved = (mod.torch_chunk_gated_delta_rule, mod.torch_recurrent_gated_delta_rule)
    mod.torch_chunk_gated_delta_rule, mod.torch_recurrent_gated_delta_rule = hf_chunk, hf_rec
    try:
        own = run_model(model, ids, steps)
    finally:
        mod.torch_chunk_gated_delta_rule, mod.torch_recurrent_gated_delta_rule = saved
    calls = {"chunk": 0, "rec": 0}
    gtr.patch()
    chunk, rec = mod.torch_chunk_gated_delta_rule, mod.torch_recurrent_gated_delta_rule

    def counted(name, f):
        def g(*a, **kw):
            calls[name] += 1
            return f(*a, **kw)
        return g
    mod.torch_chunk_gated_delta_rule = counted("chunk", chunk)
    mod.torch_recurrent_gated_delta_rule = counted("rec", rec)
    try:
        ours = run_model(model, ids, steps)
    finally:
        mod.torch_chunk_gated_delta_rule, mod.torch_recurrent_gated_delta_rule = chunk, rec
    n_linear = model.config.layer_types.count("linear_attention")
    assert calls == {"chunk": n_linear, "rec": n_linear * steps}, calls
    for i, (a, b) in enumerate(zip(ours, own)):
        err = ((a - b).norm() / b.norm()).item()
        print(f"{kind} step {i}: logits rel-L2 {err:.2e}, top-1 agreement "
              f"{(a.argmax(-1) == b.argmax(-1)).float().mean().item():.3f}")
        assert err < 5e-2, f"step {i}: logits rel-L2 {err:.3e} vs the model's own torch path"
        agree = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
        assert agree >= 0.9, f"step {i}: top-1 agreement {agree:.2f}"


@needs_tr
def test_float32_model_raises_naming_the_dtype():
    model = tiny_model("qwen3_next").float()
    gtr.patch()
    with torch.no_grad(), pytest.raises(NotImplementedError, match="float32"):
        model(torch.zeros(1, 8, dtype=torch.long))
