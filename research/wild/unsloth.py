"""Unsloth (unslothai/unsloth): a pure-Python wheel, but `import unsloth` wants a GPU, unsloth_zoo,
transformers and bitsandbytes, so only its Triton op files are vendored (see VENDORED)."""
from wild.common import Case, Sweep, device as common_device, find, randn

# -- what the vendored files import that no op checked here needs ---------------------------------

STUB_ZOO_UTILS = ("unsloth_zoo.utils", '''"""Stands in for unsloth_zoo.utils, of which the vendored files import only Version, to compare
the versions of torch, triton and bitsandbytes."""
from packaging.version import Version
''')

STUB_BNB = ("bitsandbytes", '''"""Stands in for bitsandbytes, which unsloth/kernels/utils.py imports at the top for its 4-bit (NF4)
dequantization path only: no op checked here reaches it, and every name of it raises if called."""
import types

__version__ = "0.0"


def _absent(*args, **kwargs):
    raise NotImplementedError("bitsandbytes is not installed: the 4-bit path is not part of this check")


class _Library:
    def __getattr__(self, name):
        return _absent


functional = types.SimpleNamespace(get_ptr=_absent, lib=_Library())
''')

STUB_FP8 = ("unsloth.kernels.fp8", '''"""Stands in for unsloth/kernels/fp8.py (which imports unsloth_zoo's logger and compiler patches):
unsloth/kernels/utils.py imports two names of it for the FP8 weight path only, which no op checked
here reaches."""


def _absent(*args, **kwargs):
    raise NotImplementedError("the FP8 weight path is not part of this check")


weight_dequant = fp8_linear = fp8_rowwise_gemv = can_use_fp8_rowwise_gemv = _absent
''')

STUB_NVFP4 = ("unsloth.kernels.nvfp4", '''"""Stands in for unsloth/kernels/nvfp4.py (which imports fp8.py): unsloth/kernels/utils.py imports
three names of it for the NVFP4 weight path only (a quant_state of that type), which no op checked
here reaches: no weight here is NVFP4-quantized."""


class NVFP4QuantState:
    pass


def _absent(*args, **kwargs):
    raise NotImplementedError("the NVFP4 weight path is not part of this check")


nvfp4_dequantize = nvfp4_linear = _absent
''')

STUB_LLAMA = ("transformers.models.llama.modeling_llama", '''"""Stands in for transformers' Llama module: rms_layernorm.py subclasses its LlamaRMSNorm (to patch
models) and cross_entropy_loss.py imports its logger, neither of which the Functions use."""
import logging

import torch

logger = logging.getLogger("transformers.models.llama.modeling_llama")


class LlamaRMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
''')

STUB_ZOO_PATCHING = ("unsloth_zoo.patching_utils", '''"""Stands in for unsloth_zoo.patching_utils: layernorm.py imports patch_layernorm, which patches a
model's LayerNorms and is never called by Fast_Layernorm."""


def patch_layernorm(*args, **kwargs):
    raise NotImplementedError("patching a model is not part of this check")
''')

STUB_ZOO_LOSS = ("unsloth_zoo.loss_utils", '''"""Stands in for unsloth_zoo.loss_utils: cross_entropy_loss.py imports two functions that patch
transformers' loss functions, never called by Fast_CrossEntropyLoss."""


def patch_loss_functions(*args, **kwargs):
    raise NotImplementedError("patching transformers is not part of this check")


post_patch_loss_function = patch_loss_functions
''')

# 2026.9.x: the op files and what they import (bitsandbytes is imported inside a try there).
OPS_2026_9 = ("unsloth/kernels/rms_layernorm.py", "unsloth/kernels/layernorm.py", "unsloth/kernels/cross_entropy_loss.py",
              "unsloth/kernels/rope_embedding.py", "unsloth/kernels/utils.py", "unsloth/device_type.py",
              "unsloth/bnb_availability.py")
STUBS_2026_9 = (STUB_ZOO_UTILS, STUB_FP8, STUB_LLAMA, STUB_ZOO_PATCHING, STUB_ZOO_LOSS)

# 2026.10.x: the same, and the helper modules the kernels import since (each imports only torch and triton).
OPS_2026_10 = OPS_2026_9 + ("unsloth/kernels/int4_packed.py",)
STUBS_2026_10 = STUBS_2026_9 + (STUB_NVFP4,)
OPS_2026_10_9 = OPS_2026_10 + ("unsloth/kernels/indexing.py", "unsloth/kernels/triton_launch.py",
                               "unsloth/kernels/swiglu.py", "unsloth/kernels/geglu.py", "unsloth/kernels/fast_lora.py",
                               "unsloth/kernels/fused_add_rms_layernorm.py")

# 2025.12.x: the RoPE file and what it imports; unsloth/__init__.py and unsloth/kernels/__init__.py are
# left empty (they import the whole library).
ROPE_2025_12 = ("unsloth/kernels/rope_embedding.py", "unsloth/kernels/utils.py", "unsloth/device_type.py")
STUBS_2025_12 = (STUB_ZOO_UTILS, STUB_BNB, STUB_FP8)

# In 2026.9.x both norms' backwards still wrote dX over dY (Fast_RMS_Layernorm for non-Gemma until
# 2026.10.7; Fast_Layernorm until 2026.10.7): PR 4550 describes the aliasing, PR 10675 measures it.
KNOWN_RMS_DY = ("mutates grad_output in place", "https://github.com/unslothai/unsloth/pull/4550")
KNOWN_LN_DY = ("mutates grad_output in place", "https://github.com/unslothai/unsloth/pull/10675")
KNOWN_ROPE_INPUT = ("writes into an input or a saved tensor", "https://github.com/unslothai/unsloth/issues/837")

# Not a case: 2025.12.9 -> 2025.12.10 (issue 3781, PR 3782) fixed Fast_RoPE_Embedding_QK's
# `not dQ.is_contiguous` (a method, always true), but the fixed release's clone() keeps a transposed dQ's
# strides and the kernel still reads the head dimension at stride 1, so it is not clean of the same trap
# (2026.10.1 made the copy contiguous). setup_rope_qk stays for running it by hand.
CASES = (
    Case("unsloth-rmsnorm-dy-strides", "unsloth", "2026.9.4", "2026.9.5",
         ("https://github.com/unslothai/unsloth/pull/10617",),
         "a non-contiguous grad_output (17.3)", "assumes a contiguous grad_output",
         "Fast_RMS_Layernorm.backward reshaped dY to (rows, dim) and handed it to a kernel that reads each "
         "row at unit stride: a reshape keeps a strided view where it can, so a column-strided or expanded "
         "dY was read at the wrong places. The tests backpropagated a freshly drawn, contiguous gradient.",
         "setup_rmsnorm", known=(KNOWN_RMS_DY,), vendored=OPS_2026_9, stubs=STUBS_2026_9),
    Case("unsloth-layernorm-dy-view", "unsloth", "2026.9.4", "2026.9.5",
         ("https://github.com/unslothai/unsloth/pull/10675",),
         "a non-contiguous grad_output (17.3)", "assumes a contiguous grad_output",
         "Fast_Layernorm.backward flattened dY with dY.view(-1, dim), which raises for a gradient whose "
         "rows cannot be flattened without a copy (one that comes back transposed); the kernel also read "
         "rows at unit stride. Its only test backpropagated a contiguous gradient.",
         "setup_layernorm", known=(KNOWN_LN_DY,), vendored=OPS_2026_9, stubs=STUBS_2026_9),
    Case("unsloth-ce-writes-logits", "unsloth", "2026.9.14", "2026.10.1",
         ("https://github.com/unslothai/unsloth/issues/5002",),
         "writes into a saved tensor (17.3)", "writes into an input or a saved tensor",
         "Fast_CrossEntropyLoss.backward had its kernel store the gradient over the saved logits and returned "
         "that tensor as the gradient: the caller's logits (saved as they were given, when contiguous) were "
         "gone after the first backward. One loss head, backpropagated once, never looks at them again.",
         "setup_ce", vendored=OPS_2026_10, stubs=STUBS_2026_10, fp32_inside=True),
)


SWEEP = Sweep("unsloth", "2026.10.9", vendored=OPS_2026_10_9, stubs=STUBS_2026_10,
              loaded="its Triton op files vendored (unsloth/kernels/*.py that the Functions need, utils.py, "
                     "device_type.py, bnb_availability.py), with small stubs for what they import from "
                     "unsloth_zoo, transformers and the FP8/NVFP4 weight paths")


# -- references ---------------------------------------------------------------------------------

def rope_tables(rows, head_dim, base=10000.0):
    """cos and sin as Hugging Face's rotary embedding builds them: (rows, head_dim), both halves equal."""
    import torch
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(rows, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate(x, cos, sin):
    """x * cos + rotate_half(x) * sin, with cos and sin broadcast to x; the kernels read their first half."""
    import torch
    half = x.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1)


def rope_qk_reference(Q, K, cos, sin, rope_indices=None, *rest, **extra):
    """Fast_RoPE_Embedding_QK: Q (batch, heads_Q, seq, dim) and K (batch, heads_K, seq, dim) rotated at
    position rope_indices[b, s] (or s), cos/sin tables (positions, dim)."""
    import torch
    batch, _, seq, _ = Q.shape
    positions = rope_indices.long() if rope_indices is not None else \
        torch.arange(seq, device=Q.device).expand(batch, seq)
    c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)  # (batch, 1, seq, dim)
    return rotate(Q, c, s), rotate(K, c, s)


# -- cases ---------------------------------------------------------------------------------------

def packed_positions(batch, seq, lengths):
    """rope_indices as sample packing makes them: each row holds sequences of the given lengths, each
    starting again at position 0."""
    import torch
    row = torch.cat([torch.arange(n) for n in lengths])
    assert row.numel() == seq
    return row.to(torch.int32).expand(batch, seq).contiguous()


def setup_rope_qk():
    fn = find("unsloth.kernels.rope_embedding:Fast_RoPE_Embedding_QK")
    cos, sin = rope_tables(20, 16)
    args = (randn(2, 4, 12, 16, seed=1), randn(2, 2, 12, 16, seed=2), cos, sin, packed_positions(2, 12, (5, 7)))
    small_cos, small_sin = rope_tables(6, 4)
    small = (randn(1, 2, 3, 4, seed=3), randn(1, 1, 3, 4, seed=4), small_cos, small_sin,
             packed_positions(1, 3, (2, 1)))
    return dict(fn=fn, args=args, kwargs={"no_grad": ("cos", "sin")}, reference=rope_qk_reference, small=small,
                clone=True)


def rms_reference(X, W, eps, gemma=False, *rest, **extra):
    """Unsloth's RMSNorm: X / rms(X) * W, or * (1 + W) for Gemma; computed here in X's dtype."""
    import torch
    normed = X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps)
    return normed * (1 + W) if gemma else normed * W


def setup_rmsnorm():
    fn = find("unsloth.kernels.rms_layernorm:Fast_RMS_Layernorm")
    args = (randn(2, 6, 40, seed=1), randn(40, seed=2), 1e-6)
    small = (randn(2, 3, 5, seed=3), randn(5, seed=4), 1e-6)
    # W: Fast_RMS_Layernorm returned no gradient for its weight (LoRA freezes norms) until 2026.10;
    # the case is about X's gradient, so W is kept fixed as the library kept it.
    return dict(fn=fn, args=args, kwargs={"no_grad": ("W",)}, reference=rms_reference, small=small, clone=True)


def layernorm_reference(X, W, b, eps, *rest, **extra):
    import torch.nn.functional as F
    return F.layer_norm(X, X.shape[-1:], W, b, eps)


def setup_layernorm():
    fn = find("unsloth.kernels.layernorm:Fast_Layernorm")
    args = (randn(2, 6, 40, seed=1), randn(40, seed=2), randn(40, seed=3), 1e-5)
    small = (randn(2, 3, 5, seed=4), randn(5, seed=5), randn(5, seed=6), 1e-5)
    return dict(fn=fn, args=args, kwargs={"no_grad": ("W", "b")}, reference=layernorm_reference, small=small)


def ce_reference(logits, labels, logit_softcapping=0, logit_scaling=0, *rest, **extra):
    """Unsloth's per-row loss: logits scaled by logit_scaling, then softcapped, then cross-entropy
    (reduction 'none'); label -100 gives 0."""
    import torch
    import torch.nn.functional as F
    x = logits.float()
    if logit_scaling:
        x = x * logit_scaling
    if logit_softcapping:
        x = logit_softcapping * torch.tanh(x / logit_softcapping)
    return F.cross_entropy(x, labels.long(), reduction="none", ignore_index=-100)


def setup_ce():
    from wild.common import targets
    fn = find("unsloth.kernels.cross_entropy_loss:Fast_CrossEntropyLoss")
    args = (randn(6, 40, seed=1) * 3, targets(6, 40, seed=2))
    small = (randn(3, 5, seed=3), targets(3, 5, seed=4))
    return dict(fn=fn, args=args, kwargs={}, reference=ce_reference, small=small, clone=True)


def lora_reference(X, W, W_quant, A, B, S, dropout_p=None, bias=None, *rest, **extra):
    """LoRA_W: X @ W.T + S * (X @ A.T) @ B.T (+ bias); W is the frozen base weight."""
    out = X @ W.t() + S * ((X @ A.t()) @ B.t())
    return out if bias is None else out + bias


def rope_rows_reference(Q, cos, sin, *rest, **extra):
    """Fast_RoPE_Embedding: Q (batch, seq, heads, dim), row s rotated by cos[s], sin[s]."""
    seq = Q.shape[1]
    return rotate(Q, cos[:seq].unsqueeze(1), sin[:seq].unsqueeze(1))


def rope_positions_reference(Q, K, cos, sin, *rest, **extra):
    """Fast_RoPE_Embedding_QK_Positions: Q, K (batch, heads, seq, dim), position s for row s."""
    return rope_qk_reference(Q, K, cos, sin, None)


def slow_rope_reference(Q, cos, sin, position_ids, *rest, **extra):
    """Slow_RoPE_Embedding: Q (batch, seq, heads, dim); cos, sin (1, 1, positions, dim) indexed by position_ids."""
    c = cos.squeeze(1).squeeze(0)[position_ids.long()].unsqueeze(2)
    s = sin.squeeze(1).squeeze(0)[position_ids.long()].unsqueeze(2)
    return rotate(Q, c, s)


def sweep_calls():
    """(label, Function, args, kwargs, reference) for each swept Function of unsloth 2026.10.9."""
    import torch
    from wild.common import targets
    k = "unsloth.kernels."
    x = randn(2, 6, 40, seed=1)
    cos, sin = rope_tables(20, 16)
    tables = {"no_grad": ("cos", "sin")}
    q, kk = randn(2, 4, 12, 16, seed=5), randn(2, 2, 12, 16, seed=6)
    positions = torch.arange(12).expand(2, 12).contiguous()
    calls = [
        ("cross entropy", find(k + "cross_entropy_loss:Fast_CrossEntropyLoss"),
         (randn(6, 40, seed=2) * 3, targets(6, 40, seed=3)), {}, ce_reference),
        ("cross entropy, softcapped", find(k + "cross_entropy_loss:Fast_CrossEntropyLoss"),
         (randn(6, 40, seed=2) * 3, targets(6, 40, seed=3), 5.0), {}, ce_reference),
        ("RMSNorm", find(k + "rms_layernorm:Fast_RMS_Layernorm"), (x, randn(40, seed=4), 1e-6), {}, rms_reference),
        ("RMSNorm, Gemma", find(k + "rms_layernorm:Fast_RMS_Layernorm"), (x, randn(40, seed=4), 1e-6, True), {},
         rms_reference),
        ("LayerNorm", find(k + "layernorm:Fast_Layernorm"), (x, randn(40, seed=4), randn(40, seed=7), 1e-5), {},
         layernorm_reference),
        ("RoPE (rows)", find(k + "rope_embedding:Fast_RoPE_Embedding"), (randn(2, 12, 4, 16, seed=8), cos, sin),
         tables, rope_rows_reference),
        ("RoPE, Q and K", find(k + "rope_embedding:Fast_RoPE_Embedding_QK"),
         (q, kk, cos, sin, packed_positions(2, 12, (5, 7))), tables, rope_qk_reference),
        ("RoPE, Q and K, positions", find(k + "rope_embedding:Fast_RoPE_Embedding_QK_Positions"), (q, kk, cos, sin),
         tables, rope_positions_reference),
        ("RoPE (slow, in place)", find(k + "rope_embedding:Slow_RoPE_Embedding"),
         (randn(2, 12, 4, 16, seed=9), cos[None, None], sin[None, None], positions), tables, slow_rope_reference),
        ("LoRA_W", find(k + "fast_lora:LoRA_W"),
         (randn(2, 6, 32, seed=10), randn(48, 32, seed=11) * 0.2, None, randn(8, 32, seed=12) * 0.2,
          randn(48, 8, seed=13) * 0.2, 0.5), {"no_grad": ("W",)}, lora_reference),
    ]
    return calls


def sweep_probes():
    """Each flag of the sweep provoked by hand, without the checker: (Function, what the probe saw, shown)."""
    import torch
    k = "unsloth.kernels."
    device = common_device()
    cos, sin = (t.to(device) for t in rope_tables(20, 16))

    def forward_writes(fn, make, *rest):
        """Calls the forward on a fresh copy of the input and says how far the copy moved."""
        passed = make().to(device)
        before = passed.clone()
        with torch.no_grad():
            fn.apply(passed, *rest)
        changed = (passed - before).abs().max().item()
        return f"the input it was given changed during the forward by up to {changed:.3g}", changed > 0

    def slow_rope():
        fn = find(k + "rope_embedding:Slow_RoPE_Embedding")
        positions = torch.arange(12, device=device).expand(2, 12)
        return forward_writes(fn, lambda: randn(2, 12, 4, 16, seed=9), cos[None, None], sin[None, None], positions)

    def rope_rows():
        fn = find(k + "rope_embedding:Fast_RoPE_Embedding")
        return forward_writes(fn, lambda: randn(2, 12, 4, 16, seed=8), cos, sin)

    def rope_qk():
        fn = find(k + "rope_embedding:Fast_RoPE_Embedding_QK")
        K = randn(2, 2, 12, 16, seed=6).to(device)
        return forward_writes(fn, lambda: randn(2, 4, 12, 16, seed=5), K, cos, sin,
                              packed_positions(2, 12, (5, 7)).to(device))

    probes = []
    for function, probe in (("Slow_RoPE_Embedding", slow_rope), ("Fast_RoPE_Embedding", rope_rows),
                            ("Fast_RoPE_Embedding_QK", rope_qk)):
        try:
            saw, shown = probe()
        except Exception as error:  # noqa: BLE001  (a probe that cannot run shows nothing)
            saw, shown = f"the probe raised {type(error).__name__}: {' '.join(str(error).split())[:120]}", False
        probes.append((function, saw, shown))
    return probes
