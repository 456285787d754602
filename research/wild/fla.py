"""flash-linear-attention's core (fla-org/flash-linear-attention, the fla-core wheels), installed whole."""
from wild.common import Case, Sweep, device as common_device, find, pad, randn, targets

EXTRA_WHEELS = ["einops==0.8.1"]  # pure-Python needs, installed only where missing

CASES = (
    Case("fla-conv-dy-strides", "fla-core", "0.5.0", "0.5.1",
         ("https://github.com/fla-org/flash-linear-attention/pull/871",),
         "a non-contiguous grad_output (17.3)", "assumes a contiguous grad_output",
         "causal_conv1d's backward kernel read dy with hard-coded strides (D, 1). The tests called "
         "backward(dy) with dy = torch.randn(B, T, D), contiguous; in a model, torch.cat of q, k, v after "
         "their convolutions hands each one a narrow view of the gradient.",
         "setup_fla_conv", fp32_inside=True),
    Case("fla-conv-dh0-strides", "fla-core", "0.5.2", "0.6.0",
         ("https://github.com/fla-org/flash-linear-attention/issues/1138",
          "https://github.com/fla-org/flash-linear-attention/pull/1139"),
         "a non-contiguous grad_output, one input's gradient (17.3)", "assumes a contiguous grad_output",
         "After PR #871, the kernel for the initial state's gradient still addressed dy's last dimension "
         "with stride 1 and y with dy's strides. Only dh0 was wrong (dx, dweight, dbias right), and only "
         "with a non-contiguous dy, which plain y.sum().backward() hands on (every stride 0); the tests "
         "built their loss as (out * torch.randn_like(x)).sum(), so dy was contiguous.",
         "setup_fla_conv_state", fp32_inside=True),
    Case("fla-l2warp", "fla-core", "0.5.1", "0.5.2",
         ("https://github.com/fla-org/flash-linear-attention/pull/963",),
         "ignores grad_output (17.1)", "ignores grad_output",
         "L2Wrap.backward returned the logits' penalty gradient without multiplying it by grad_output. "
         "loss.backward() hands grad_output = 1, which hides it; loss scaling, gradient accumulation "
         "and torch.autograd.grad(grad_outputs=k) do not.",
         "setup_fla_l2warp"),
    Case("fla-gelu-bias", "fla-core", "0.5.0", "0.5.1",
         ("https://github.com/fla-org/flash-linear-attention/pull/921",),
         "one gradient per input (Chapter 15)", "returns the wrong gradients",
         "GeLUFunction.backward returned (tmp, tmp), a pair of pairs, for (input, bias). No test called "
         "its backward; the first one to do so raises.",
         "setup_fla_gelu"),
    Case("fla-swish-flat", "fla-core", "0.4.1", "0.4.2",
         ("https://github.com/fla-org/flash-linear-attention/issues/759",
          "https://github.com/fla-org/flash-linear-attention/pull/765"),
         "a non-contiguous grad_output (17.3)", "assumes grad_output is laid out like its input",
         "SwishFunction (and SigmoidFunction) had no input_guard, and its kernels read x, dy and dx at one "
         "flat offset, x + offs, dy + offs: elementwise, so right whenever dy is laid out like x. The "
         "tests fed contiguous x and dy; a transposed or sliced view of the gradient (a transpose, a "
         "torch.cat, .sum()'s stride-0 ones) reads the wrong elements, or past a stride-0 dy's one.",
         "setup_fla_swish", fp32_inside=True),
    Case("fla-gate-linear-dw", "fla-core", "0.5.2", "0.6.0",
         ("https://github.com/fla-org/flash-linear-attention/pull/1071",),
         "a wrong gradient for one input (Chapter 15)", "a wrong formula",
         "LayerNormGatedLinearFunction's backward recomputes the gated norm's output y to save memory and "
         "takes linear_weight's gradient as dout^T y; the kernel stored y before the gate, norm(x) * w, "
         "not norm(x) * w * silu(g), which the forward fed to F.linear. Only dlinear_weight was wrong. "
         "There was no test of the *SwishGateLinear modules' backward; the forward and every other "
         "gradient were right.",
         "setup_fla_gate_linear", fp32_inside=True),
    Case("fla-conv-short-dht", "fla-core", "0.5.2", "0.6.0",
         ("https://github.com/fla-org/flash-linear-attention/issues/1140",
          "https://github.com/fla-org/flash-linear-attention/pull/1141"),
         "ignores one output's grad_output (17.1)", "ignores grad_output",
         "With output_final_state=True and a chunk shorter than the state (T < W - 1, as in decoding a few "
         "tokens with a cache), the backward never passed the final state's gradient dht through to the "
         "initial state slots that survive into the final state (dh0 ignores it), and read dht at the wrong "
         "slots for x (w_idx = 1 + t, not t + W - T: right only when dht is uniform). The forward stayed "
         "exact; test_conv_cache_backward ran T = 128 only (the fix added T = 1 and 2).",
         "setup_fla_conv_short", fp32_inside=True),
    Case("fla-linear-attn-dk", "fla-core", "0.5.0", "0.5.1",
         ("https://github.com/fla-org/flash-linear-attention/pull/875",),
         "a wrong gradient for one input (Chapter 15)", "a wrong formula",
         "chunk_linear_attn with normalize=True, its default, divides o_t by scale q_t . (k_1 + ... + k_t); "
         "normalize_with_z_state took that cumulative sum from chunk_global_cumsum, a Triton kernel called from "
         "plain Python with no backward, so the chain k -> cumsum -> denominator was severed and dk held the "
         "numerator's part alone (the forward, dq and dv right). Every gradient test in "
         "tests/ops/test_linear_attn.py passed normalize=False; normalize=True was tested for the forward only. "
         "The fix wrapped the divide in StatefulNormalizeFunction, with a backward of its own.",
         "setup_fla_linear_attn", fp32_inside=True),
)


def conv_reference(x, weight=None, bias=None, residual=None, initial_state=None, output_final_state=False,
                   activation=None, *rest, **extra):
    """fla's causal_conv1d in torch: initial_state is (B, D, W), its slots 1..W-1 the W-1 tokens before x."""
    import torch
    import torch.nn.functional as F
    width = weight.shape[1]
    xt = x.transpose(1, 2)
    xt = F.pad(xt, (width - 1, 0)) if initial_state is None else torch.cat([initial_state[..., 1:], xt], dim=-1)
    y = F.conv1d(xt, weight.unsqueeze(1), bias, groups=weight.shape[0]).transpose(1, 2)
    y = F.silu(y) if activation in ("silu", "swish") else y
    return y if residual is None else y + residual


CONV_FUNCTION = ("fla.modules.conv.triton.ops:CausalConv1dFunction", "fla.modules.causal_conv1d.ops:CausalConv1dFunction")


def setup_fla_conv():
    fn = find(*CONV_FUNCTION)
    args = (randn(2, 24, 16, seed=1), randn(16, 4, seed=2) * 0.5, randn(16, seed=3))
    kwargs = {"activation": "silu"}
    small = (randn(1, 5, 3, seed=4), randn(3, 4, seed=5), randn(3, seed=6), None, None, False, "silu")
    return dict(fn=fn, args=args, kwargs=kwargs, reference=pad(conv_reference, fn, args, kwargs), small=small)


def setup_fla_conv_state():
    fn = find(*CONV_FUNCTION)
    args = (randn(2, 24, 16, seed=1), randn(16, 4, seed=2) * 0.5, randn(16, seed=3))
    kwargs = {"initial_state": randn(2, 16, 4, seed=7), "activation": "silu"}
    small = (randn(1, 5, 3, seed=4), randn(3, 4, seed=5), randn(3, seed=6), None, randn(1, 3, 4, seed=8),
             False, "silu")
    return dict(fn=fn, args=args, kwargs=kwargs, reference=pad(conv_reference, fn, args, kwargs), small=small)


def l2warp_reference(loss, logits, l2_penalty_factor=1e-4):
    """The loss unchanged, with the gradient L2Wrap means: factor * max logit at each row's argmax."""
    factor = l2_penalty_factor / (logits.shape[0] * logits.shape[1])
    penalty = (logits.max(dim=-1).values ** 2).sum() * (factor / 2)
    return loss + (penalty - penalty.detach())


def setup_fla_l2warp():
    import torch
    fn = find("fla.modules.l2warp:L2Wrap")
    args = (torch.tensor(2.5), randn(2, 6, 40, seed=1) * 3)
    small = (torch.tensor(2.5), randn(1, 2, 5, seed=2))
    return dict(fn=fn, args=args, kwargs={}, reference=l2warp_reference, small=small)


def gelu_reference(input, bias):
    import torch.nn.functional as F
    return F.gelu(input + bias, approximate="tanh")


def setup_fla_gelu():
    fn = find("fla.modules.activations:GeLUFunction")
    args = (randn(24, 48, seed=1), randn(48, seed=2))
    small = (randn(3, 4, seed=3), randn(4, seed=4))
    return dict(fn=fn, args=args, kwargs={}, reference=gelu_reference, small=small)




def swish_reference(x):
    import torch.nn.functional as F
    return F.silu(x)


def setup_fla_swish():
    fn = find("fla.modules.activations:SwishFunction", "fla.modules.activations.ops:SwishFunction")
    args = (randn(4, 24, 32, seed=1),)
    small = (randn(2, 3, 4, seed=2),)
    return dict(fn=fn, args=args, kwargs={}, reference=swish_reference, small=small)


def gate_linear_reference(x, g, norm_weight, norm_bias, linear_weight, linear_bias, residual=None, eps=1e-6,
                          prenorm=False, residual_in_fp32=False, is_rms_norm=False):
    """fla's LayerNormGatedLinearFunction (swish gate): F.linear(norm(x + residual) * w + b) * silu(g))."""
    import torch
    import torch.nn.functional as F
    h = x if residual is None else x + residual
    if is_rms_norm:
        y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        y = y * norm_weight if norm_weight is not None else y
        y = y + norm_bias if norm_bias is not None else y
    else:
        y = F.layer_norm(h, h.shape[-1:], norm_weight, norm_bias, eps)
    out = F.linear(y * F.silu(g), linear_weight, linear_bias)
    return out if not prenorm else (out, h)


GATE_LINEAR_FUNCTION = ("fla.modules.fused_norm_gate:LayerNormGatedLinearFunction",
                        "fla.modules.norm.fused_norm_gate:LayerNormGatedLinearFunction")


def setup_fla_gate_linear():
    fn = find(*GATE_LINEAR_FUNCTION)
    args = (randn(2, 8, 32, seed=1), randn(2, 8, 32, seed=2), 1 + randn(32, seed=3) * 0.1, randn(32, seed=4) * 0.1,
            randn(24, 32, seed=5) * 0.2, randn(24, seed=6))
    small = (randn(3, 4, seed=7), randn(3, 4, seed=8), randn(4, seed=9), randn(4, seed=10), randn(5, 4, seed=11),
             randn(5, seed=12))
    return dict(fn=fn, args=args, kwargs={}, reference=gate_linear_reference, small=small)


def conv_state_reference(x, weight=None, bias=None, residual=None, initial_state=None, output_final_state=False,
                         activation=None, *rest, **extra):
    """conv_reference and, with output_final_state, the final state: the last W of the initial state's W
    slots followed by x's tokens, (B, D, W), as fla's docstring and states kernel define it."""
    import torch
    import torch.nn.functional as F
    y = conv_reference(x, weight, bias, residual, initial_state, output_final_state, activation)
    if not output_final_state:
        return y, None
    width, xt = weight.shape[1], x.transpose(1, 2)
    before = F.pad(xt, (width, 0))[..., :width] if initial_state is None else initial_state
    return y, torch.cat([before, xt], dim=-1)[..., -width:]


def setup_fla_conv_short():
    fn = find(*CONV_FUNCTION)
    args = (randn(2, 2, 16, seed=1), randn(16, 4, seed=2) * 0.5, randn(16, seed=3))
    kwargs = {"initial_state": randn(2, 16, 4, seed=7), "output_final_state": True, "activation": "silu"}
    small = (randn(1, 2, 3, seed=4), randn(3, 4, seed=5), randn(3, seed=6), None, randn(1, 3, 4, seed=8),
             True, "silu")
    # grow=False: the bug needs a sequence shorter than the filter (T = 2 < W = 4), which grown inputs
    # outgrow, and each grown shape compiles the state kernels again (200 s a release on the H200 with them).
    return dict(fn=fn, args=args, kwargs=dict(kwargs, grow=False), reference=conv_state_reference, small=small)


def linear_attn_reference(q, k, v, scale=None, normalize=True):
    """Causal linear attention in torch, O(T^2), as fla's naive_recurrent_linear_attn: o_t = sum over s <= t of
    (scale q_t . k_s) v_s, divided, with normalize, by scale q_t . (k_1 + ... + k_t) + 1e-10."""
    import torch
    scale = k.shape[-1] ** -0.5 if scale is None else scale
    o = torch.einsum("bhts,bshv->bthv", torch.einsum("bthk,bshk->bhts", q * scale, k).tril(), v)
    return o / ((q * scale * k.cumsum(1)).sum(-1, keepdim=True) + 1e-10) if normalize else o


def linear_attn_op():
    """fla.ops.linear_attn's chunk_linear_attn, the public op, called as a model calls it (no state in or out), and
    its output o. It is a function, not a Function: ChunkSimpleGLAFunction for the attention, then the divide by the
    cumulative keys (plain torch around chunk_global_cumsum in 0.5.0, StatefulNormalizeFunction from 0.5.1 on), so
    the checker calls it as a function; forward and apply are there for the harness's gradcheck, which binds the
    arguments as .apply takes them."""
    chunk_linear_attn = find("fla.ops.linear_attn:chunk_linear_attn")

    def op(q, k, v, scale=None, normalize=True):
        return chunk_linear_attn(q, k, v, scale=scale, normalize=normalize)[0]

    def forward(ctx, q, k, v, scale=None, normalize=True):
        return op(q, k, v, scale, normalize)
    op.__name__ = op.__qualname__ = "chunk_linear_attn"
    op.forward, op.apply = forward, op
    return op


def setup_fla_linear_attn():
    # q and k positive, as normalize=True is meant for (a feature map's output; the fix's test draws |randn| + 0.01):
    # the denominator stays away from 0. T = 112 spans two of the kernels' 64-step chunks, the second ragged;
    # 2 * 112 * 1 * 16 = 3584 elements an input, past the checker's grown size, so it checks them as given.
    fn = linear_attn_op()
    args = (randn(2, 112, 1, 16, seed=1).abs() + 0.1, randn(2, 112, 1, 16, seed=2).abs() + 0.1,
            randn(2, 112, 1, 16, seed=3))
    small = (randn(1, 5, 1, 4, seed=4).abs() + 0.1, randn(1, 5, 1, 4, seed=5).abs() + 0.1, randn(1, 5, 1, 4, seed=6))
    return dict(fn=fn, args=args, kwargs={}, reference=linear_attn_reference, small=small)


# ---------------------------------------------------------------------------
# The sweep: fla-core 0.6.0's public Functions, each against a torch reference
# ---------------------------------------------------------------------------

SWEEP = Sweep("fla-core", "0.6.0")

MODULES = "fla.modules."


def norm_reference(x, weight, bias, residual=None, eps=1e-5, prenorm=False, residual_in_fp32=False,
                   is_rms_norm=False, num_groups=1):
    """fla's LayerNormFunction (num_groups=1): LayerNorm or RMSNorm of x + residual; with prenorm, also x + residual."""
    import torch
    import torch.nn.functional as F
    h = x if residual is None else x + residual
    if is_rms_norm:
        y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        y = y * weight if weight is not None else y
        y = y + bias if bias is not None else y
    else:
        y = F.layer_norm(h, h.shape[-1:], weight, bias, eps)
    return y if not prenorm else (y, h)


def norm_linear_reference(x, norm_weight, norm_bias, linear_weight, linear_bias, residual=None, eps=1e-5,
                          prenorm=False, residual_in_fp32=False, is_rms_norm=False, num_groups=1):
    import torch.nn.functional as F
    y = norm_reference(x, norm_weight, norm_bias, residual, eps, False, residual_in_fp32, is_rms_norm, num_groups)
    return F.linear(y, linear_weight, linear_bias)


def gated_norm_reference(x, g, weight, bias, activation, residual=None, eps=1e-6, prenorm=False,
                         residual_in_fp32=False, is_rms_norm=False):
    """fla's LayerNormGatedFunction: norm(x + residual) * w + b, times swish(g) (or sigmoid(g))."""
    import torch
    import torch.nn.functional as F
    y = norm_reference(x, weight, bias, residual, eps, False, residual_in_fp32, is_rms_norm)
    y = y * (F.silu(g) if activation in ("swish", "silu") else torch.sigmoid(g))
    return y


def rotary_reference(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     chunk_indices=None):
    """fla's rotary_embedding_ref (non-interleaved): x is [B, T, H, D], cos and sin [TR, R // 2]; the first R
    channels rotate by halves, position t takes row t of the tables, the rest pass through."""
    import torch
    rotary, length = cos.shape[-1] * 2, x.shape[1]
    c = torch.cat([cos[:length], cos[:length]], -1)[:, None, :]
    s = torch.cat([sin[:length], sin[:length]], -1)[:, None, :]
    part, rest = x[..., :rotary], x[..., rotary:]
    x1, x2 = part.chunk(2, dim=-1)
    return torch.cat([part * c + torch.cat([-x2, x1], -1) * s, rest], -1)


def token_shift_reference(x, cu_seqlens=None, cache=None, output_cache=False, chunk_indices=None):
    """fla's token_shift_ref: the previous token minus this one, zero before the first."""
    import torch.nn.functional as F
    return F.pad(x, (0, 0, 1, 0))[:, :-1] - x


def fused_ce_reference(logits, target, label_smoothing=0.0, logit_scale=1.0, lse_square_scale=0.0,
                       logit_softcapping=None, ignore_index=-100, inplace_backward=False, process_group=None):
    """One loss per row (the z-loss, the second output, is non-differentiable and 0 here)."""
    import torch.nn.functional as F
    return F.cross_entropy(logits * logit_scale, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                           reduction="none")


def flce_reference(x, target, weight, bias=None, ignore_index=-100, label_smoothing=0.0, logit_scale=1.0,
                   logit_softcapping=None, num_chunks=8, reduction="mean", use_l2warp=False, l2_penalty_factor=1e-4,
                   accumulate_grad_in_fp32=True, process_group=None):
    import torch.nn.functional as F
    return F.cross_entropy(F.linear(x, weight, bias) * logit_scale, target, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)


def kl_reference(x, target_x, weight, target_weight, reduction="batchmean", accumulate_grad_in_fp32=True,
                 grad_enabled=True):
    """KL(teacher || student) of the two linear layers' softmaxes, summed over the vocabulary, over N rows."""
    import torch
    import torch.nn.functional as F
    student = torch.log_softmax(F.linear(x, weight), -1)
    teacher = torch.log_softmax(F.linear(target_x, target_weight), -1)
    return F.kl_div(student, teacher, reduction=reduction, log_target=True)


def sweep_calls():
    """(label, Function, args, kwargs, reference) for each swept Function, at the arguments the library's own
    wrappers pass (fla.modules' layer_norm, rms_norm, l2norm, rotary_embedding, token_shift, ...)."""
    import torch
    import torch.nn.functional as F
    x, y = randn(2, 8, 32, seed=1), randn(2, 8, 32, seed=2)
    w, b = 1 + randn(32, seed=3) * 0.1, randn(32, seed=4) * 0.1
    act = MODULES + "activations:"
    acts = MODULES + "activations.ops:"
    norm = (MODULES + "layernorm:", MODULES + "norm.layernorm:")
    gate = (MODULES + "fused_norm_gate:", MODULES + "norm.fused_norm_gate:")
    cos_sin = torch.cos(randn(64, 4, seed=5) * 3), torch.sin(randn(64, 4, seed=5) * 3)
    calls = [
        ("causal conv1d", find(*CONV_FUNCTION), (randn(2, 24, 16, seed=6), randn(16, 4, seed=7) * 0.5,
                                                  randn(16, seed=8)), {"activation": "silu"},
         conv_reference),
        ("causal conv1d, with states", find(*CONV_FUNCTION),
         (randn(2, 24, 16, seed=6), randn(16, 4, seed=7) * 0.5, randn(16, seed=8)),
         {"initial_state": randn(2, 16, 4, seed=9), "output_final_state": True, "activation": "silu"},
         conv_state_reference),
        ("LayerNorm", find(*(p + "LayerNormFunction" for p in norm)), (x, w, b), {}, norm_reference),
        ("RMSNorm", find(*(p + "LayerNormFunction" for p in norm)), (x, w, None), {"is_rms_norm": True},
         norm_reference),
        ("add + LayerNorm (prenorm)", find(*(p + "LayerNormFunction" for p in norm)), (x, w, b, y),
         {"prenorm": True}, norm_reference),
        ("LayerNorm + linear", find(*(p + "LayerNormLinearFunction" for p in norm)),
         (x, w, b, randn(24, 32, seed=10) * 0.2, randn(24, seed=11)), {}, norm_linear_reference),
        ("gated norm (swish gate)", find(*(p + "LayerNormGatedFunction" for p in gate)), (x, y, w, b, "swish"), {},
         gated_norm_reference),
        ("gated norm + linear", find(*GATE_LINEAR_FUNCTION),
         (x, y, w, b, randn(24, 32, seed=10) * 0.2, randn(24, seed=11)), {}, gate_linear_reference),
        ("L2 norm", find(MODULES + "l2norm:L2NormFunction", MODULES + "norm.l2norm:L2NormFunction"), (x,), {},
         lambda x, eps=1e-6, output_dtype=None: x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)),
        # cos and sin are the position tables: the library takes no gradient for them
        ("rotary embedding", find(MODULES + "rotary:RotaryEmbeddingFunction",
                                  MODULES + "rotary.ops:RotaryEmbeddingFunction"),
         (randn(2, 8, 4, 16, seed=12), *cos_sin), {"no_grad": ("cos", "sin")}, rotary_reference),
        ("token shift", find(MODULES + "token_shift:TokenShift"), (randn(2, 8, 32, seed=13),), {},
         token_shift_reference),
        ("cross entropy", find(MODULES + "fused_cross_entropy:FusedCrossEntropyFunction",
                               MODULES + "fused_cross_entropy.ops:FusedCrossEntropyFunction"),
         (randn(6, 40, seed=14), targets(6, 40, seed=15)), {}, fused_ce_reference),
        ("fused linear cross entropy", find(MODULES + "fused_linear_cross_entropy:FusedLinearCrossEntropyFunction",
                                            MODULES + "fused_linear_cross_entropy.ops:FusedLinearCrossEntropyFunction"),
         (randn(6, 16, seed=16), targets(6, 40, seed=17), randn(40, 16, seed=18) * 0.3, randn(40, seed=19)), {},
         flce_reference),
        # the teacher (target_x, target_weight) is frozen by design: the library refuses to take its gradient
        ("KL divergence", find(MODULES + "fused_kl_div:FusedKLDivLossFunction",
                               MODULES + "fused_kl_div.ops:FusedKLDivLossFunction"),
         (randn(6, 16, seed=20), randn(6, 16, seed=21), randn(40, 16, seed=22) * 0.3, randn(40, 16, seed=23) * 0.3,
          "batchmean", True, True), {"no_grad": ("target_x", "target_weight")}, kl_reference),
        ("L2Wrap", find(MODULES + "l2warp:L2Wrap"), (torch.tensor(2.5), randn(2, 6, 40, seed=24) * 3), {},
         l2warp_reference),
        ("sigmoid", find(act + "SigmoidFunction", acts + "SigmoidFunction"), (x,), {}, torch.sigmoid),
        ("swish", find(act + "SwishFunction", acts + "SwishFunction"), (x,), {}, F.silu),
        ("log-sigmoid", find(act + "LogSigmoidFunction", acts + "LogSigmoidFunction"), (x, 2.0), {},
         lambda x, temperature: F.logsigmoid(x) / temperature),
        ("ELU + 1", find(act + "ELUPlusOneFunction", acts + "ELUPlusOneFunction"), (x,), {},
         lambda x: F.elu(x) + 1),
        ("SwiGLU", find(act + "SwiGLUFunction", acts + "SwiGLUFunction"), (x, y), {}, lambda x, y: F.silu(x) * y),
        ("SwiGLU + linear", find(act + "SwiGLULinearFunction", acts + "SwiGLULinearFunction"),
         (x, y, randn(24, 32, seed=10) * 0.2, randn(24, seed=11)), {},
         lambda x, y, weight, bias: F.linear(F.silu(x) * y, weight, bias)),
        ("sigmoid GLU", find(act + "SigmoidGLUFunction", acts + "SigmoidGLUFunction"), (x, y), {},
         lambda x, y: torch.sigmoid(x) * y),
        # bias_gelu_bwd's docstring: "Inputs have shape [B, D] and bias has shape [D]" (it sums dim 0 only)
        ("GeLU + bias", find(act + "GeLUFunction", acts + "GeLUFunction"), (randn(24, 48, seed=25), randn(48, seed=26)),
         {}, gelu_reference),
        ("fast GeLU", find(act + "FastGeLUFunction", acts + "FastGeLUFunction"), (x,), {},
         lambda input: F.gelu(input, approximate="tanh")),
        ("squared ReLU", find(act + "SquaredReLUFunction", acts + "SquaredReLUFunction"), (x,), {},
         lambda input: F.relu(input) ** 2),
    ]
    out = []
    for label, fn, args, kwargs, reference in calls:
        out.append((label, fn, args, kwargs,
                    pad(reference, fn, args, kwargs)
                    if label in ("causal conv1d", "token shift", "cross entropy") else reference))
    return out


def sweep_probes():
    """Each flag of the sweep provoked by hand, without the checker: (Function, what the probe saw, whether the
    trap showed). A flag is real where its probe shows it."""
    import torch
    device = common_device()

    def twice_over_one_graph(path, args):
        """backward twice over one graph (retain_graph=True), grad_output 2 both times: the two gradients must
        agree, and the first one handed back must not change under the second backward."""
        fn = find(*path)
        leaf = args[0].to(device).clone().requires_grad_(True)
        rest = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args[1:]]
        out = fn.apply(leaf, *rest)
        first = torch.autograd.grad(out, leaf, torch.tensor(2.0, device=device), retain_graph=True)[0]
        kept = first.clone()
        second = torch.autograd.grad(out, leaf, torch.tensor(2.0, device=device))[0]
        apart = ((second - kept).norm() / kept.norm()).item()
        moved = (first - kept).abs().max().item()
        return (f"backward twice over one graph with grad_output 2: the second gradient for x is {apart:.3g} "
                f"(relative) off the first, and the first one handed back changed by up to {moved:.3g}",
                apart > 1e-3 or moved > 0)

    def flce():
        return twice_over_one_graph(
            (MODULES + "fused_linear_cross_entropy:FusedLinearCrossEntropyFunction",
             MODULES + "fused_linear_cross_entropy.ops:FusedLinearCrossEntropyFunction"),
            (randn(6, 16, seed=16), targets(6, 40, seed=17), randn(40, 16, seed=18) * 0.3, randn(40, seed=19)))

    def kl():
        return twice_over_one_graph(
            (MODULES + "fused_kl_div:FusedKLDivLossFunction", MODULES + "fused_kl_div.ops:FusedKLDivLossFunction"),
            (randn(6, 16, seed=20), randn(6, 16, seed=21), randn(40, 16, seed=22) * 0.3,
             (randn(40, 16, seed=23) * 0.3), "batchmean", True, True))

    def conv_final_state_slot0():
        """final_state[..., 0] is x[:, T - W] itself (the forward copies it there): its gradient must reach x."""
        fn = find(*CONV_FUNCTION)
        x = randn(2, 24, 16, seed=6).to(device).requires_grad_(True)
        weight, bias = (randn(16, 4, seed=7) * 0.5).to(device), randn(16, seed=8).to(device)
        _, final = fn.apply(x, weight, bias, None, randn(2, 16, 4, seed=9).to(device), True, "silu")
        copied = (final[..., 0] - x[:, -4]).abs().max().item()
        grad = torch.autograd.grad(final[..., 0].sum(), x)[0]
        reached = grad[:, -4].abs().max().item()
        return (f"final_state[..., 0] equals x[:, T - W] (largest difference {copied:.3g}), yet the gradient of "
                f"final_state[..., 0].sum() reaches x[:, T - W] with at most {reached:.3g} (torch's: 1 everywhere)",
                copied == 0 and reached < 0.5)

    probes = []
    for function, probe in (("CausalConv1dFunction", conv_final_state_slot0),
                            ("FusedLinearCrossEntropyFunction", flce), ("FusedKLDivLossFunction", kl)):
        try:
            saw, shown = probe()
        except Exception as error:  # noqa: BLE001  (a probe that cannot run shows nothing)
            saw, shown = f"the probe raised {type(error).__name__}: {' '.join(str(error).split())[:120]}", False
        probes.append((function, saw, shown))
    return probes
