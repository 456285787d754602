"""Liger-Kernel (linkedin/Liger-Kernel): pure-Python wheels of Triton kernels, installed whole."""
from wild.common import Case, Sweep, device as common_device, find, pad, randn, targets

KNOWN_CE_WRITE = ("writes into an input or a saved tensor", "https://github.com/linkedin/Liger-Kernel/issues/272")

CASES = (
    Case("liger-ce-none", "liger-kernel", "0.5.8", "0.5.9",
         ("https://github.com/linkedin/Liger-Kernel/issues/678", "https://github.com/linkedin/Liger-Kernel/pull/680"),
         "a uniform grad_output (17.1)", "assumes a uniform grad_output",
         "LigerCrossEntropyFunction with reduction='none' multiplied every row's gradient by grad_output[0]. "
         "The library's test compared gradients after backward(gradient=torch.ones_like(output)): every "
         "row's grad_output was 1, so the wrong row was the right one.",
         "setup_liger_ce", known=(KNOWN_CE_WRITE,), fp32_inside=True),
    Case("liger-flce-none", "liger-kernel", "0.8.1", "0.8.2",
         ("https://github.com/linkedin/Liger-Kernel/pull/1298",),
         "a uniform grad_output (17.1)", "assumes a uniform grad_output",
         "LigerFusedLinearCrossEntropyFunction with reduction='none' computes its gradients during forward "
         "and scaled all three (input, weight, bias) by grad_output[0] in backward. The forward was right; "
         "the gradient tests ran reduction='mean' and 'sum' only, where grad_output is one number.",
         "setup_liger_flce", fp32_inside=True),
    Case("liger-kldiv-inplace", "liger-kernel", "0.3.0", "0.3.1",
         ("https://github.com/linkedin/Liger-Kernel/issues/259", "https://github.com/linkedin/Liger-Kernel/pull/262"),
         "writes into an input (17.3)", "writes into an input or a saved tensor",
         "LigerKLDivLossFunction.backward stored the gradient into y_pred itself (the tensor it had saved) and "
         "returned it. In a model y_pred is log_softmax's output, which log_softmax saved for its own backward. "
         "The tests backpropagated straight into a leaf nobody else read, and compared with "
         "assert_verbose_allclose, which passed on nan and on a single mismatch (issue 259).",
         "setup_liger_kldiv", fp32_inside=True),
    Case("liger-groupnorm-4d", "liger-kernel", "0.8.3", "0.8.4",
         ("https://github.com/linkedin/Liger-Kernel/issues/1375", "https://github.com/linkedin/Liger-Kernel/pull/1376"),
         "a buffer sized from the wrong dimension (Chapter 16)", "crashes",
         "group_norm_backward took hidden_size = dY.shape[-1] before flattening, where the forward flattens "
         "first: for an (N, C, H, W) input that is W, not H*W. The input-gradient buffer came out H times too "
         "small, the kernel wrote past it with the input's strides, dW and dB summed one row per channel, and "
         "the closing view raised. The tests used 3-D inputs only, where the two sizes agree.",
         "setup_liger_group_norm_4d", fp32_inside=True),
    Case("liger-layernorm-mask", "liger-kernel", "0.5.3", "0.5.4",
         ("https://github.com/linkedin/Liger-Kernel/issues/518", "https://github.com/linkedin/Liger-Kernel/pull/519",
          "https://github.com/linkedin/Liger-Kernel/pull/582"),
         "the masked tail of a block (Chapter 16)", "a wrong forward",
         "The LayerNorm forward kernel summed (x - mean)^2 over the whole power-of-two block, so each masked "
         "lane (loaded as 0) added mean^2 to the variance when the hidden size is not a power of two; the "
         "saved rstd, and so the gradients, inherit it. The tests used power-of-two hidden sizes and "
         "zero-mean randn inputs, where the extra term vanishes or nearly does.",
         "setup_liger_layer_norm", fp32_inside=True),
)

SWEEP = Sweep("liger-kernel", "0.8.5")


def ce_reference(_input, target, weight=None, ignore_index=-100, lse_square_scale=0.0, label_smoothing=0.0,
                 reduction="mean", *rest, **extra):
    import torch.nn.functional as F
    return F.cross_entropy(_input, target, weight=weight, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)


def setup_liger_ce():
    fn = find("liger_kernel.ops.cross_entropy:LigerCrossEntropyFunction")
    args, kwargs = (randn(6, 40, seed=1), targets(6, 40, seed=2), None), {"reduction": "none"}
    small = (randn(3, 5, seed=3), targets(3, 5, seed=4), None, -100, 0.0, 0.0, "none")
    return dict(fn=fn, args=args, kwargs=kwargs, reference=pad(ce_reference, fn, args, kwargs), small=small,
                clone=True)


def flce_reference(_input, weight, target, bias=None, ce_weight=None, ignore_index=-100, lse_square_scale=0.0,
                   label_smoothing=0.0, reduction="mean", *rest, **extra):
    import torch.nn.functional as F
    return F.cross_entropy(F.linear(_input, weight, bias), target, weight=ce_weight, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)


def setup_liger_flce(reduction="none"):
    fn = find("liger_kernel.ops.fused_linear_cross_entropy:LigerFusedLinearCrossEntropyFunction")
    args = (randn(6, 16, seed=1), randn(40, 16, seed=2) * 0.3, targets(6, 40, seed=3), randn(40, seed=4))
    kwargs = {"reduction": reduction}
    small = (randn(3, 4, seed=5), randn(5, 4, seed=6), targets(3, 5, seed=7), randn(5, seed=8),
             None, -100, 0.0, 0.0, reduction)
    return dict(fn=fn, args=args, kwargs=kwargs, reference=pad(flce_reference, fn, args, kwargs), small=small)



def kldiv_reference(y_pred, y_true, reduction="batchmean", log_target=False, *rest, **extra):
    import torch.nn.functional as F
    return F.kl_div(y_pred, y_true, reduction=reduction, log_target=log_target)


def setup_liger_kldiv():
    """V = 64, a power of two: 0.3.0's forward is also nan for other widths (0 * log 0 in the masked lanes),
    which PR 262 fixed too; at 64 the forward is right and only the write is left."""
    import torch
    fn = find("liger_kernel.ops.kl_div:LigerKLDivLossFunction")
    args = (torch.log_softmax(randn(6, 64, seed=1), -1), torch.softmax(randn(6, 64, seed=2), -1))
    small = (torch.log_softmax(randn(3, 4, seed=3), -1), torch.softmax(randn(3, 4, seed=4), -1))
    # y_true is the target distribution: the library takes no gradient for it
    return dict(fn=fn, args=args, kwargs={"no_grad": ("y_true",)}, reference=kldiv_reference, small=small,
                clone=True)


def group_norm_reference(X, w, b, num_channels, num_groups, eps):
    import torch.nn.functional as F
    return F.group_norm(X, num_groups, w, b, eps)


def setup_liger_group_norm_4d():
    fn = find("liger_kernel.ops.group_norm:LigerGroupNormFunction")
    args = (randn(2, 6, 4, 5, seed=1), randn(6, seed=2), randn(6, seed=3), 6, 2, 1e-6)
    small = (randn(1, 4, 2, 3, seed=4), randn(4, seed=5), randn(4, seed=6), 4, 2, 1e-6)
    return dict(fn=fn, args=args, kwargs={}, reference=group_norm_reference, small=small)


def layer_norm_reference(X, W, B, eps):
    import torch.nn.functional as F
    return F.layer_norm(X, X.shape[-1:], W, B, eps)


def setup_liger_layer_norm():
    """Hidden size 40 (its block is 64); the rows are centred at 1, as hidden states often are."""
    fn = find("liger_kernel.ops.layer_norm:LigerLayerNormFunction")
    args = (randn(6, 40, seed=1) + 1.0, randn(40, seed=2), randn(40, seed=3), 1e-6)
    small = (randn(3, 5, seed=4) + 1.0, randn(5, seed=5), randn(5, seed=6), 1e-6)
    return dict(fn=fn, args=args, kwargs={}, reference=layer_norm_reference, small=small)

def rms_reference(X, W, eps, offset=0.0, *rest, **extra):
    import torch
    return X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps) * (offset + W)


def fused_add_rms_reference(X, R, W, eps, offset=0.0, *rest, **extra):
    S = X + R
    return rms_reference(S, W, eps, offset), S



def rotate_half(x):
    import torch
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_reference(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
    """Hugging Face Llama's apply_rotary_pos_emb, cos/sin (1, seq, head_dim), full rotation."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def mrope_reference(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    """Hugging Face Qwen2-VL's apply_multimodal_rotary_pos_emb: cos/sin (3, bsz, seq, head_dim), the
    head's frequencies split into temporal, height and width sections."""
    import torch
    sections = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sections, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sections, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rope_tables(seq, head_dim, batch=None):
    """cos/sin of Llama's duplicated layout, cat(freqs, freqs); (1, seq, d), or (3, batch, seq, d) for M-RoPE."""
    import torch
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    positions = torch.arange(seq).float()
    if batch is None:
        emb = torch.cat([torch.outer(positions, inv_freq)] * 2, dim=-1)[None]
    else:  # three position streams (t, h, w), each its own positions
        streams = torch.stack([positions, positions.flip(0), positions * 0.5])[:, None, :].expand(3, batch, seq)
        freqs = streams[..., None] * inv_freq
        emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().contiguous(), emb.sin().contiguous()


def jsd_reference(_input, target, shift_labels=None, beta=0.5, ignore_index=-100, *rest, **extra):
    """Liger's generalized JSD, inputs in log space: beta * KL(P || M) + (1 - beta) * KL(Q || M), M = beta * P +
    (1 - beta) * Q, Q = exp(input), P = exp(target), summed and divided by the rows (no labels here)."""
    import torch
    q, p = _input.exp(), target.exp()
    log_m = torch.log(beta * p + (1 - beta) * q)
    return (beta * p * (target - log_m) + (1 - beta) * q * (_input - log_m)).sum() / _input.shape[0]


def fused_linear_jsd_reference(student_input, student_weight, teacher_input, teacher_weight, shift_labels=None,
                               jsd_beta=0.5, ignore_index=-100, temperature=1.0, *rest, **extra):
    import torch
    student = torch.log_softmax(student_input @ student_weight.t() / temperature, dim=-1)
    teacher = torch.log_softmax(teacher_input @ teacher_weight.t() / temperature, dim=-1)
    return jsd_reference(student, teacher, None, jsd_beta)


def tvd_reference(p, q, shift_labels=None, reduction="batchmean", ignore_index=-100):
    return 0.5 * (p - q).abs().sum() / p.shape[0]


def sparsemax_reference(x, dim):
    """Martins and Astudillo (2016): threshold tau from the sorted values, output max(x - tau, 0)."""
    import torch
    z = x.transpose(dim, -1)
    ordered = torch.sort(z, dim=-1, descending=True).values
    ks = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    sums = ordered.cumsum(-1)
    support = (1 + ks * ordered > sums).sum(-1, keepdim=True)
    tau = (sums.gather(-1, support - 1) - 1) / support.to(z.dtype)
    return torch.clamp(z - tau, min=0).transpose(dim, -1)


def poly_norm_reference(X, W, B, eps=1e-6, in_place=True):
    """y = w0 * norm(x^3) + w1 * norm(x^2) + w2 * norm(x) + b, norm(u) = u / sqrt(mean(u^2) + eps)."""
    import torch

    def norm(u):
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)
    return W[0] * norm(X ** 3) + W[1] * norm(X ** 2) + W[2] * norm(X) + B

def sweep_calls():
    """(label, Function, args, kwargs, reference) for each swept Function. References follow the
    library's documented semantics at these arguments (tanh GELU for GEGLU, 'llama' casting)."""
    import torch
    import torch.nn.functional as F
    ops = "liger_kernel.ops."
    x, y = randn(6, 40, seed=1), randn(6, 40, seed=2)
    probs = torch.softmax(randn(6, 40, seed=3), -1)
    calls = [
        ("cross entropy", find(ops + "cross_entropy:LigerCrossEntropyFunction"),
         (x, targets(6, 40, seed=4), None), {}, ce_reference),
        ("fused linear cross entropy", find(ops + "fused_linear_cross_entropy:LigerFusedLinearCrossEntropyFunction"),
         (randn(6, 16, seed=5), randn(40, 16, seed=6) * 0.3, targets(6, 40, seed=7), randn(40, seed=8)), {},
         flce_reference),
        ("RMSNorm", find(ops + "rms_norm:LigerRMSNormFunction"), (x, randn(40, seed=9), 1e-6), {}, rms_reference),
        ("fused add + RMSNorm", find(ops + "fused_add_rms_norm:LigerFusedAddRMSNormFunction"),
         (x, y, randn(40, seed=9), 1e-6), {}, fused_add_rms_reference),
        ("LayerNorm", find(ops + "layer_norm:LigerLayerNormFunction"), (x, randn(40, seed=9), randn(40, seed=10),
         1e-6), {}, lambda X, W, B, eps: F.layer_norm(X, X.shape[-1:], W, B, eps)),
        ("SwiGLU", find(ops + "swiglu:LigerSiLUMulFunction"), (x, y), {}, lambda a, b, *r, **k: F.silu(a) * b),
        ("GEGLU", find(ops + "geglu:LigerGELUMulFunction"), (x, y), {},
         lambda a, b: F.gelu(a, approximate="tanh") * b),
        ("softmax", find(ops + "softmax:LigerSoftmaxFunction"), (x,), {}, lambda input_: torch.softmax(input_, -1)),
        ("DyT", find(ops + "dyt:LigerDyTFunction"), (x, torch.tensor([0.5]), randn(40, seed=11), randn(40, seed=12)),
         {}, lambda x, alpha, gamma, beta: gamma * torch.tanh(alpha * x) + beta),
        # y_true is the target distribution: the library takes no gradient for it, so it is the
        # library's to keep fixed (no_grad), not the checker's to differentiate.
        ("KL divergence", find(ops + "kl_div:LigerKLDivLossFunction"),
         (torch.log_softmax(randn(6, 40, seed=13), -1), probs), {"no_grad": ("y_true",)},
         lambda y_pred, y_true, reduction="batchmean", log_target=False, eps=1e-10:
         F.kl_div(y_pred, y_true, reduction=reduction, log_target=log_target)),
        ("GroupNorm", find(ops + "group_norm:LigerGroupNormFunction"),
         (randn(3, 6, 20, seed=14), randn(6, seed=15), randn(6, seed=16), 6, 2, 1e-6), {},
         lambda X, w, b, num_channels, num_groups, eps: F.group_norm(X, num_groups, w, b, eps)),
        # The rotary tables are the library's to keep fixed (it returns no gradient for them): no_grad.
        ("RoPE", find(ops + "rope:LigerRopeFunction"),
         (randn(2, 4, 8, 16, seed=17), randn(2, 2, 8, 16, seed=18), *rope_tables(8, 16)),
         {"no_grad": ("cos", "sin")}, rope_reference),
        ("Qwen2-VL M-RoPE", find(ops + "qwen2vl_mrope:LigerQwen2VLMRopeFunction"),
         (randn(2, 4, 8, 16, seed=19), randn(2, 2, 8, 16, seed=20), *rope_tables(8, 16, batch=2), [2, 3, 3]),
         {"no_grad": ("cos", "sin")}, mrope_reference),
        # The teacher's side is the target: the library takes no gradient for it.
        ("JSD", find(ops + "jsd:LigerJSDFunction"),
         (torch.log_softmax(randn(6, 40, seed=22), -1), torch.log_softmax(randn(6, 40, seed=23), -1)),
         {"no_grad": ("target",)}, jsd_reference),
        ("fused linear JSD", find(ops + "fused_linear_jsd:LigerFusedLinearJSDFunction"),
         (randn(6, 16, seed=24), randn(40, 16, seed=25) * 0.3, randn(6, 16, seed=26), randn(40, 16, seed=27) * 0.3),
         {"no_grad": ("teacher_input", "teacher_weight")}, fused_linear_jsd_reference),
        ("TVD", find(ops + "tvd:LigerTVDLossFunction"),
         (probs, torch.softmax(randn(6, 40, seed=28), -1)), {"no_grad": ("q",)}, tvd_reference),
        ("sparsemax", find(ops + "sparsemax:LigerSparsemaxFunction"), (randn(6, 40, seed=29) * 2, -1), {},
         sparsemax_reference),
        ("PolyNorm", find(ops + "poly_norm:LigerPolyNormFunction"),
         (x, randn(3, seed=30) * 0.5, randn(1, seed=31).reshape(()), 1e-6), {}, poly_norm_reference),  # a 0-dim bias, as LigerPolyNorm holds it
        ("ReLU squared", find(ops + "relu_squared:LigerReLUSquaredFunction"), (x,), {},
         lambda X: torch.relu(X) ** 2),
        ("embedding", find(ops + "experimental.embedding:LigerEmbeddingFunction"),
         (randn(40, 16, seed=32), targets(12, 40, seed=33).view(3, 4)), {},
         lambda embeddings, indices: F.embedding(indices, embeddings)),
    ]
    out = []
    for label, fn, args, kwargs, reference in calls:
        out.append((label, fn, args, kwargs, pad(reference, fn, args, kwargs) if "entropy" in label else reference))
    return out


def sweep_probes():
    """Each flag of the sweep provoked by hand, without the checker: (Function, what the probe does, what it
    saw, whether the trap showed). A flag is real where its probe shows it."""
    import torch
    import torch.nn.functional as F
    ops = "liger_kernel.ops."
    device = common_device()
    x, target = randn(6, 40, seed=1).to(device), targets(6, 40, seed=4).to(device)
    g = randn(6, 40, seed=21).to(device)

    def transposed_logits():
        ce = find(ops + "cross_entropy:LigerCrossEntropyFunction")

        def grad(transposed):
            leaf = (x.t().contiguous().t() if transposed else x.clone()).requires_grad_(True)
            passed = leaf.t().contiguous().t() if transposed else leaf.clone()  # a non-leaf, laid out as leaf
            out = ce.apply(passed, target, None)
            return torch.autograd.grad(out[0] if isinstance(out, tuple) else out, leaf)[0]
        right, transposed = grad(False), grad(True)
        off = ((transposed - right).norm() / right.norm()).item()
        return (f"the gradient for logits laid out transposed (the same values) is {off:.3g} (relative) off the "
                f"contiguous one", off > 1e-3)

    def frozen_hidden_states():
        flce = find(ops + "fused_linear_cross_entropy:LigerFusedLinearCrossEntropyFunction")
        hidden, weight = randn(6, 16, seed=5).to(device), (randn(40, 16, seed=6) * 0.3).to(device)
        bias, labels = randn(40, seed=8).to(device), targets(6, 40, seed=7).to(device)
        w, w_ref = weight.clone().requires_grad_(True), weight.clone().requires_grad_(True)
        out = flce.apply(hidden, w, labels, bias)
        (out[0] if isinstance(out, tuple) else out).backward()
        F.cross_entropy(F.linear(hidden, w_ref, bias), labels).backward()
        return (f"with the hidden states frozen and the weight trained, weight.grad is "
                f"{'None' if w.grad is None else 'set'}; torch's has norm {w_ref.grad.norm().item():.3g}",
                w.grad is None)

    def grad_output_written(path, *rest):
        def probe():
            norm = find(ops + path)
            leaf, given = x.clone().requires_grad_(True), g.clone()
            kept = given.clone()
            torch.autograd.grad(norm.apply(leaf, *(t.to(device) for t in rest), 1e-6), leaf, given)
            changed = (given - kept).abs().max().item()
            return f"grad_output changed during the backward by up to {changed:.3g}", changed > 0
        return probe

    def input_written(path):
        def probe():
            gated = find(ops + path)
            a, b = x.clone().requires_grad_(True), randn(6, 40, seed=2).to(device).requires_grad_(True)
            passed = a.clone()
            before = passed.detach().clone()
            torch.autograd.grad(gated.apply(passed, b.clone()), [a, b], g)
            changed = (passed.detach() - before).abs().max().item()
            return f"its input changed during the backward by up to {changed:.3g}", changed > 0
        return probe

    def jsd_call(student_input, weight):
        flj = find(ops + "fused_linear_jsd:LigerFusedLinearJSDFunction")
        teacher, teacher_weight = randn(6, 16, seed=26).to(device), (randn(40, 16, seed=27) * 0.3).to(device)
        return flj.apply(student_input, weight, teacher, teacher_weight)

    def jsd_backward_twice():
        hidden = randn(6, 16, seed=24).to(device).requires_grad_(True)
        weight = (randn(40, 16, seed=25) * 0.3).to(device).requires_grad_(True)
        out = jsd_call(hidden, weight)
        scale = torch.tensor(3.0, device=device)  # a grad_output other than 1, as loss scaling hands on
        first = torch.autograd.grad(out, hidden, scale, retain_graph=True)[0].clone()
        second = torch.autograd.grad(out, hidden, scale)[0]
        off = ((second - first).norm() / first.norm()).item()
        return (f"two backwards over one graph (retain_graph=True, grad_output 3) give input gradients "
                f"{off:.3g} (relative) apart", off > 1e-3)

    def jsd_transposed_input():
        weight = (randn(40, 16, seed=25) * 0.3).to(device)

        def grad(transposed):
            base = randn(6, 16, seed=24).to(device)
            leaf = base.clone().requires_grad_(True)
            passed = leaf.t().contiguous().t() if transposed else leaf.clone()  # a non-leaf, laid out so
            return torch.autograd.grad(jsd_call(passed, weight), leaf, torch.tensor(3.0, device=device))[0]
        right, transposed = grad(False), grad(True)
        off = ((transposed - right).norm() / right.norm()).item()
        return (f"the gradient for a student input laid out transposed (the same values) is {off:.3g} (relative) "
                f"off the contiguous one", off > 1e-3)

    probes = []
    for function, probe in (("LigerFusedLinearJSDFunction", jsd_backward_twice),
                            ("LigerFusedLinearJSDFunction", jsd_transposed_input),
                            ("LigerCrossEntropyFunction", transposed_logits),
                            ("LigerFusedLinearCrossEntropyFunction", frozen_hidden_states),
                            ("LigerRMSNormFunction", grad_output_written("rms_norm:LigerRMSNormFunction", randn(40, seed=9))),
                            ("LigerPolyNormFunction", grad_output_written("poly_norm:LigerPolyNormFunction",
                                                                          randn(3, seed=30) * 0.5,
                                                                          randn(1, seed=31).reshape(()))),
                            ("LigerSiLUMulFunction", input_written("swiglu:LigerSiLUMulFunction")),
                            ("LigerGELUMulFunction", input_written("geglu:LigerGELUMulFunction"))):
        try:
            saw, shown = probe()
        except Exception as error:  # noqa: BLE001  (a probe that cannot run shows nothing)
            saw, shown = f"the probe raised {type(error).__name__}: {' '.join(str(error).split())[:120]}", False
        probes.append((function, saw, shown))
    return probes


