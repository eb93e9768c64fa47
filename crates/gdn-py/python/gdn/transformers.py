"""HF transformers' Qwen3-Next and Qwen3.5 gated-delta-net layers on gdn.

Swap: ``gdn.transformers.patch()`` before (or after) building the model; ``gdn.transformers.unpatch()`` restores
what was there. The layers (``Qwen3NextGatedDeltaNet``, ``Qwen3_5GatedDeltaNet``, ``Qwen3_5MoeGatedDeltaNet``)
call the module-level functions ``torch_chunk_gated_delta_rule`` (prefill, and any call without a cached state)
and ``torch_recurrent_gated_delta_rule`` (one cached decode token) by name; ``patch`` rebinds those names in
each model module to gdn's functions below. transformers releases whose layers instead bind FLA's functions at
construction (``self.chunk_gated_delta_rule`` / ``self.recurrent_gated_delta_rule``, with module globals
``chunk_gated_delta_rule`` / ``fused_recurrent_gated_delta_rule``) are patched through those globals for layers
built afterwards, and through ``patch(model=...)`` for a model already built.

The functions keep transformers' signature and semantics: ``query, key [B, T, H, K]``, ``value [B, T, HV, V]``
(H = HV when the layer repeats q/k itself, or H < HV: value head h reads q/k head ``h // (HV // H)``), ``g``
the float32 log decay ``-exp(A_log) * softplus(a + dt_bias)``, ``beta`` after the sigmoid, ``initial_state``
``[B, HV, K, V]`` (K-first), scale ``K ** -0.5``, q/k L2 norm with ``use_qk_l2norm_in_kernel=True`` (the layers
always pass it), the final state float32 ``[B, HV, K, V]`` with ``output_final_state`` (else None), the output in
the query's dtype; packed sequences through ``cu_seqlens`` with B = 1 (``max_length_q``, when the layer
forwards it, is used as the length hint). ``chunk_size`` is accepted (gdn picks its own tiling).

gdn runs bfloat16 or float16 activations: load the model in ``torch.bfloat16`` or ``torch.float16`` (on CUDA or
the CPU). A float32 model raises ``NotImplementedError`` naming the dtype (nothing is cast behind the caller's
back). Backward is not implemented: with autograd recording, the outputs join the graph and their backward
raises; run inference under ``torch.no_grad()`` / ``torch.inference_mode()`` (``generate`` does).

Numerics beside transformers' own torch path: transformers normalises q/k and computes the recurrence in
float32 from the bfloat16 inputs; gdn rounds the normalised q/k rows to bfloat16 before use (as FLA's chunk
kernel does, which transformers uses when FLA is installed) and keeps the state in float32.
"""

import importlib

from . import fla as _fla

__all__ = ["patch", "unpatch", "chunk_gated_delta_rule", "recurrent_gated_delta_rule", "MODULES"]

MODULES = (
    "transformers.models.qwen3_next.modeling_qwen3_next",
    "transformers.models.qwen3_5.modeling_qwen3_5",
    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
)

_CHUNK = "gdn.transformers.chunk_gated_delta_rule"
_RECUR = "gdn.transformers.recurrent_gated_delta_rule"


def _call(fn, query, key, value, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel, kwargs):
    cu = kwargs.get("cu_seqlens")
    hint = kwargs.get("max_length_q")
    if isinstance(hint, bool) or not isinstance(hint, int):
        hint = None
    _fla._plan(fn, query, key, value, g, beta, None, initial_state, output_final_state, use_qk_l2norm_in_kernel,
               False, None, None, False, False, False, cu)
    return _fla._run(fn, query, key, value, g, beta, None, initial_state, bool(output_final_state),
                     bool(use_qk_l2norm_in_kernel), False, None, None, False, False, cu, None, hint)


def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, **kwargs):
    """transformers' ``torch_chunk_gated_delta_rule`` on gdn (module doc). Returns
    ``(core_attn_out [B, T, HV, V], last_recurrent_state [B, HV, K, V] float32 or None)``."""
    return _call(_CHUNK, query, key, value, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                 kwargs)


def recurrent_gated_delta_rule(query, key, value, g, beta, initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=False, **kwargs):
    """transformers' ``torch_recurrent_gated_delta_rule`` on gdn (module doc); same results as
    ``chunk_gated_delta_rule``."""
    return _call(_RECUR, query, key, value, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                 kwargs)


# module attribute -> gdn function. The torch_* names are what current layers call at run time; the other two
# are the FLA functions that earlier layers bind in __init__ (``fla_fn or torch_fn``).
_MODULE_ATTRS = (
    ("torch_chunk_gated_delta_rule", chunk_gated_delta_rule),
    ("torch_recurrent_gated_delta_rule", recurrent_gated_delta_rule),
    ("chunk_gated_delta_rule", chunk_gated_delta_rule),
    ("fused_recurrent_gated_delta_rule", recurrent_gated_delta_rule),
)
_INSTANCE_ATTRS = (
    ("chunk_gated_delta_rule", chunk_gated_delta_rule),
    ("recurrent_gated_delta_rule", recurrent_gated_delta_rule),
)

_saved_modules = {}  # (module name, attribute) -> original
_saved_instances = {}  # (id(layer), attribute) -> (layer, original)


def patch(modules=None, model=None):
    """Routes the gated-delta-net layers of Qwen3-Next and Qwen3.5 (``MODULES``; or the modeling modules named in
    ``modules``, e.g. another model that defines the same two functions) to gdn. ``model``: also patch the
    layers of this already-built model whose functions were bound at construction. Idempotent. Returns the
    names patched; raises ImportError when transformers is missing and RuntimeError when nothing was found."""
    explicit = modules is not None
    names = []
    for mod_name in (modules if explicit else MODULES):
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            if explicit:
                raise
            continue
        for attr, fn in _MODULE_ATTRS:
            if hasattr(mod, attr):
                key = (mod_name, attr)
                if key not in _saved_modules:
                    _saved_modules[key] = getattr(mod, attr)
                setattr(mod, attr, fn)
                names.append(f"{mod_name}.{attr}")
    if model is not None:
        for layer in model.modules():
            for attr, fn in _INSTANCE_ATTRS:
                if callable(layer.__dict__.get(attr)):
                    key = (id(layer), attr)
                    if key not in _saved_instances:
                        _saved_instances[key] = (layer, layer.__dict__[attr])
                    setattr(layer, attr, fn)
                    names.append(f"{type(layer).__name__}.{attr}")
    if not names:
        importlib.import_module("transformers")  # ImportError when transformers is missing
        raise RuntimeError("gdn.transformers.patch: no Qwen3-Next / Qwen3.5 gated-delta-net function found in "
                           f"{list(modules if explicit else MODULES)}")
    return names


def unpatch():
    """Restores every function ``patch`` replaced. Returns how many."""
    n = 0
    for (mod_name, attr), orig in list(_saved_modules.items()):
        setattr(importlib.import_module(mod_name), attr, orig)
        n += 1
    for (_, attr), (layer, orig) in list(_saved_instances.items()):
        setattr(layer, attr, orig)
        n += 1
    _saved_modules.clear()
    _saved_instances.clear()
    return n
