"""flash-attn (Dao-AILab/flash-attention): PyPI ships only an sdist that builds a CUDA extension, so its
Triton ops are loaded by vendoring only their files (see common.VENDORED): the Triton kernels and
autograd.Functions of flash_attn/ops/triton/ (layer norm, cross entropy, rotary) and flash_attn/layers/rotary.py,
each byte for byte from the release's sdist; flash_attn/__init__.py (which imports the CUDA extension) is
replaced by an empty one."""
from wild.common import Case, Sweep, device as common_device, find, pad, randn, targets

EXTRA_WHEELS = ["einops==0.8.1"]  # pure-Python needs (layers/rotary.py imports einops), installed only where missing

LAYER_NORM = ("flash_attn/ops/triton/layer_norm.py",)
ROTARY = ("flash_attn/ops/triton/rotary.py", "flash_attn/layers/rotary.py")
# From 2.7.x on, layer_norm.py imports custom_fwd/custom_bwd and triton_op from flash_attn.utils; both
# files are import-free beyond torch, and flash_attn/utils/__init__.py is empty in the release.
UTILS = ("flash_attn/utils/torch.py", "flash_attn/utils/library.py")
CROSS_ENTROPY = ("flash_attn/ops/triton/cross_entropy.py",)

# Not a case: 2.2.5 -> 2.3.0 (PR 569) fixed ApplyRotaryEmbQKV_.backward's NameError for a non-contiguous
# dqkv, but 2.3.0 rotates a stride-0 dqkv in place, and its gradient after .sum(dim=-1) or .sum() is off
# (the H200 showed it): the fixed release is not clean of the same trap. 2.8.3.post2 still is not (the sweep).
CASES = (
    Case("flash-attn-ln-early-exit", "flash-attn", "2.4.3.post1", "2.5.0",
         ("https://github.com/Dao-AILab/flash-attention/issues/781",
          "https://github.com/Dao-AILab/flash-attention/commit/bdcae547c775f95c4aa890f7d69c49f3c5e51983"),
         "state between calls: uninitialised memory (17.3)", "keeps state between calls",
         "_layer_norm_bwd launches one program per SM and gives each rows_per_program = ceil(M / sm_count) rows; "
         "each program writes its partial dweight/dbias into one row of _dw/_db = torch.empty((sm_count, N)), "
         "summed afterwards. A program whose rows start past M returned early, before writing its row, so "
         "with fewer rows than SMs (M < 132 on an H200) the sum took in uninitialised memory. dx was right. "
         "The tests' shapes had thousands of rows (batch x seqlen), so every program owned some; "
         "what the sum took in is whatever earlier calls left in that memory, so two identical calls differ.",
         "setup_ln", vendored=LAYER_NORM),
)

SWEEP = Sweep("flash-attn", "2.8.3.post2", vendored=LAYER_NORM + UTILS + CROSS_ENTROPY + ROTARY,
              loaded="its Triton op files vendored from the sdist (the sdist builds a CUDA extension; "
                     "flash_attn/__init__.py, which imports it, replaced by an empty one)")


# ---------------------------------------------------------------------------
# References (plain torch, the Functions' documented semantics)
# ---------------------------------------------------------------------------

def layer_norm_reference(x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6,
                         dropout_p=0.0, rowscale=None, prenorm=False, residual_in_fp32=False,
                         zero_centered_weight=False, is_rms_norm=False, *rest, **extra):
    """LayerNormFn without dropout, rowscale or a parallel branch: norm(x + residual), and with prenorm
    also x + residual itself (the 'residual_out' the next block adds to)."""
    import torch
    import torch.nn.functional as F
    summed = x if residual is None else x + residual
    w = weight + 1.0 if zero_centered_weight else weight
    if is_rms_norm:
        y = summed * torch.rsqrt(summed.pow(2).mean(-1, keepdim=True) + eps) * w
        y = y if bias is None else y + bias
    else:
        y = F.layer_norm(summed, summed.shape[-1:], w, bias, eps)
    return (y, summed) if prenorm else y


def layer_norm_linear_reference(x, norm_weight, norm_bias, linear_weight, linear_bias, residual=None, eps=1e-6,
                                prenorm=False, residual_in_fp32=False, is_rms_norm=False):
    import torch.nn.functional as F
    normed = layer_norm_reference(x, norm_weight, norm_bias, residual, eps=eps, prenorm=prenorm,
                                  is_rms_norm=is_rms_norm)
    if prenorm:
        return F.linear(normed[0], linear_weight, linear_bias), normed[1]
    return F.linear(normed, linear_weight, linear_bias)


def cross_entropy_reference(logits, labels, precomputed_lse=None, smoothing=0.0, logit_scale=1.0,
                            lse_square_scale=0.0, ignore_index=-100, *rest, **extra):
    """flash-attn's per-row losses: label-smoothed cross entropy of logit_scale * logits plus the z-loss
    lse_square_scale * lse^2, zero where the label is ignore_index."""
    import torch
    import torch.nn.functional as F
    scaled = logits * logit_scale
    loss = F.cross_entropy(scaled, labels, ignore_index=ignore_index, label_smoothing=smoothing,
                           reduction="none")
    lse = torch.logsumexp(scaled, -1)
    return loss + torch.where(labels == ignore_index, 0.0, lse_square_scale * lse.square())


def _rotate(x, cos, sin, interleaved=False, conjugate=False):
    """x (..., seqlen, nheads, headdim) rotated by cos/sin (seqlen, rotary_dim / 2) on its first rotary_dim."""
    import torch
    rd = cos.shape[-1] * 2
    cos, sin = cos[:, None, :], (-sin if conjugate else sin)[:, None, :]
    rot, rest = x[..., :rd], x[..., rd:]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        rot = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)
    else:
        x1, x2 = rot[..., : rd // 2], rot[..., rd // 2:]
        rot = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1)
    return torch.cat((rot, rest), -1)


def rotary_reference(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    """ApplyRotaryEmb on (batch, seqlen, nheads, headdim) with an int seqlen_offsets: position t uses row
    t + seqlen_offsets of cos/sin."""
    seqlen = x.shape[1]
    return _rotate(x, cos[seqlen_offsets:seqlen_offsets + seqlen], sin[seqlen_offsets:seqlen_offsets + seqlen],
                   interleaved)


def rotary_qkv_reference(qkv, cos, sin, cos_k=None, sin_k=None, interleaved=False, seqlen_offsets=0,
                         num_heads_q=None):
    """ApplyRotaryEmbQKV_ on (batch, seqlen, 3, nheads, headdim): q rotated by cos/sin, k by cos_k/sin_k
    (cos/sin when None), v unchanged."""
    import torch
    seqlen = qkv.shape[1]
    cos_k = cos if cos_k is None else cos_k
    sin_k = sin if sin_k is None else sin_k
    window = slice(seqlen_offsets, seqlen_offsets + seqlen)
    q = _rotate(qkv[:, :, 0], cos[window], sin[window], interleaved)
    k = _rotate(qkv[:, :, 1], cos_k[window], sin_k[window], interleaved)
    return torch.stack((q, k, qkv[:, :, 2]), dim=2)


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------

def setup_ln():
    fn = find("flash_attn.ops.triton.layer_norm:LayerNormFn")
    args = (randn(6, 48, seed=1), 1 + 0.1 * randn(48, seed=2), 0.1 * randn(48, seed=3))
    small = (randn(3, 8, seed=4), 1 + 0.1 * randn(8, seed=5), 0.1 * randn(8, seed=6))
    return dict(fn=fn, args=args, kwargs={}, reference=layer_norm_reference, small=small)


def rotary_tables(seqlen, rotary_dim, seed):
    import torch
    angle = randn(seqlen, rotary_dim // 2, seed=seed) * 3
    return torch.cos(angle), torch.sin(angle)


def sweep_calls():
    """(label, Function, args, kwargs, reference) for each swept Function."""
    ln = find("flash_attn.ops.triton.layer_norm:LayerNormFn")
    ln_linear = find("flash_attn.ops.triton.layer_norm:LayerNormLinearFn")
    ce = find("flash_attn.ops.triton.cross_entropy:CrossEntropyLoss")
    rotary = find("flash_attn.layers.rotary:ApplyRotaryEmb")
    rotary_qkv = find("flash_attn.layers.rotary:ApplyRotaryEmbQKV_")
    x, res = randn(6, 48, seed=1), randn(6, 48, seed=2)
    w, b = 1 + 0.1 * randn(48, seed=3), 0.1 * randn(48, seed=4)
    labels = targets(6, 40, seed=6)
    labels[2] = -100
    cos, sin = rotary_tables(10, 16, seed=8)
    ce_args, ce_kwargs = (randn(6, 40, seed=5), labels), {"smoothing": 0.1, "lse_square_scale": 1e-2}
    return [
        ("LayerNorm + residual (prenorm)", ln, (x, w, b), {"residual": res, "prenorm": True}, layer_norm_reference),
        ("RMSNorm", ln, (x, w, None), {"is_rms_norm": True}, layer_norm_reference),
        ("LayerNorm + Linear", ln_linear,
         (x, w, b, 0.2 * randn(24, 48, seed=9), 0.1 * randn(24, seed=10)), {}, layer_norm_linear_reference),
        ("cross entropy (label smoothing, z-loss, ignore_index)", ce, ce_args, ce_kwargs,
         pad(cross_entropy_reference, ce, ce_args, ce_kwargs)),
        ("rotary (seqlen_offsets=2)", rotary, (randn(2, 8, 2, 24, seed=7), cos, sin),
         {"seqlen_offsets": 2, "no_grad": ("cos", "sin")}, rotary_reference),
        ("rotary, interleaved", rotary, (randn(2, 8, 2, 24, seed=7), cos[:8], sin[:8]),
         {"interleaved": True, "no_grad": ("cos", "sin")}, rotary_reference),
        ("rotary on packed qkv (in place)", rotary_qkv, (randn(2, 8, 3, 2, 16, seed=11), cos[:8], sin[:8]),
         {"no_grad": ("cos", "sin")}, rotary_qkv_reference),
    ]


def sweep_probes():
    """Each flag of the sweep provoked by hand, without the checker: (Function, what the probe saw, shown).
    A flag is real where its probe shows it."""
    import torch
    device = common_device()
    rotary_qkv = find("flash_attn.layers.rotary:ApplyRotaryEmbQKV_")
    cos, sin = (t.to(device) for t in rotary_tables(8, 16, seed=8))
    qkv = randn(2, 8, 3, 2, 16, seed=11).to(device)

    def qkv_grad_output_written():
        leaf = qkv.clone().requires_grad_(True)
        g = randn(2, 8, 3, 2, 16, seed=21).to(device)
        kept = g.clone()
        torch.autograd.grad(rotary_qkv.apply(leaf.clone(), cos, sin), leaf, g)
        changed = (g - kept).abs().max().item()
        return f"grad_output changed during the backward by up to {changed:.3g}", changed > 0

    def qkv_input_written():
        # h feeds two consumers: (h * h).sum() saves h for its backward, and the rotary rotates h in place
        # without ctx.mark_dirty, so autograd cannot tell that the saved h is no longer the one it saved.
        leaf = qkv.clone().requires_grad_(True)
        h = leaf * 1.0
        square = (h * h).sum()
        rotary_qkv.apply(h, cos, sin)
        got = torch.autograd.grad(square, leaf)[0]
        off = (got - 2 * qkv).abs().max().item()
        return (f"beside it, d/dx of (h * h).sum() is off the true 2h by up to {off:.3g} (the saved h was "
                f"rotated under it, and autograd did not raise)", off > 1e-4)

    def qkv_stride_zero_grad_output():
        # what (rotary(qkv) * w).sum(dim=-1)'s backward hands on: one value per row, stride 0 along the head dim
        leaf = qkv.clone().requires_grad_(True)
        rows = randn(2, 8, 3, 2, 1, seed=22).to(device)
        expanded = rows.expand(2, 8, 3, 2, 16)
        got = torch.autograd.grad(rotary_qkv.apply(leaf.clone(), cos, sin), leaf, expanded)[0]
        want = torch.autograd.grad(rotary_qkv.apply(leaf.clone(), cos, sin), leaf, expanded.contiguous())[0]
        off = ((got - want).norm() / want.norm()).item()
        return (f"with a grad_output of stride 0 along the head dimension (strides {tuple(expanded.stride())}), the "
                f"gradient is {off:.3g} (relative) off the one for its .contiguous() copy", off > 1e-3)

    probes = []
    for function, probe in (("ApplyRotaryEmbQKV_", qkv_grad_output_written), ("ApplyRotaryEmbQKV_", qkv_input_written),
                            ("ApplyRotaryEmbQKV_", qkv_stride_zero_grad_output)):
        try:
            saw, shown = probe()
        except Exception as error:  # noqa: BLE001  (a probe that cannot run shows nothing)
            saw, shown = f"the probe raised {type(error).__name__}: {' '.join(str(error).split())[:120]}", False
        probes.append((function, saw, shown))
    return probes
