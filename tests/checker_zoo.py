"""The backward checker's legal zoo, and the helpers both zoos share.

LEGAL: correct code, some of it unusual, that PyTorch accepts; the checker must report it clean
(notes allowed). Its planted zoo, one bug a case, is checker_zoo_planted.py. Every case is (the
op, its arguments, its keyword arguments, its reference), drawn from a seed, so a failure
reproduces.
"""
import math

import torch
from chapter_scripts import DEVICE, hardened_ops, seeded_randn
from torch.autograd.function import once_differentiable


def gelu(x):
    return torch.nn.functional.gelu(x, approximate="none")


def dgelu(x):
    """d/dx [x * Phi(x)] = Phi(x) + x * phi(x)."""
    return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def triton_gelu(x):
    return hardened_ops.launch_forward(hardened_ops.gelu_forward_kernel, x)


def one_input(forward, backward, name):
    """A one-input Function from forward(x) and backward(x, grad_output)."""
    def fwd(ctx, x):
        ctx.save_for_backward(x)
        return forward(x)

    def bwd(ctx, grad_output):
        x, = ctx.saved_tensors
        return backward(x, grad_output)

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})


def x35(seed=30, dtype=torch.float32):
    return seeded_randn(3, 5, seed=seed, dtype=dtype)


def x35_with_a_zero():
    """Post-ReLU and padded inputs hold exact zeros: there ReLU has no derivative to difference."""
    x = x35(32)
    x[1, 2] = 0.0
    return x


# ---------------------------------------------------------------------------------------------
# Legal but unusual: each must come back clean
# ---------------------------------------------------------------------------------------------

class SinDifferentiable(torch.autograd.Function):
    """Torch ops inside: its backward is itself differentiable."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * torch.cos(x)  # d sin/dx = cos


class MulHonouringNeeds(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        return (grad_output * y if ctx.needs_input_grad[0] else None,   # d(xy)/dx = y
                grad_output * x if ctx.needs_input_grad[1] else None)   # d(xy)/dy = x


class MulComputesBoth(torch.autograd.Function):
    """Returns both gradients whatever ctx.needs_input_grad says: PyTorch drops the unneeded one."""
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        return grad_output * y, grad_output * x


class SquareFloat64Gradient(torch.autograd.Function):
    """A float64 gradient for a float32 input: autograd casts it back."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2.0 * x.double() * grad_output.double()


class ScaleInPlace(torch.autograd.Function):
    """x *= alpha in place, declared with ctx.mark_dirty."""
    @staticmethod
    def forward(ctx, x, alpha: float):
        ctx.alpha = alpha
        ctx.mark_dirty(x)
        return x.mul_(alpha)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.alpha, None


class LeakyScale(torch.autograd.Function):
    """Non-tensor arguments: a float, a string, an optional tensor left None, a default kept."""
    @staticmethod
    def forward(ctx, x, alpha: float, mode: str, bias=None, eps=1e-6):
        if mode not in ("leaky", "plain"):
            raise ValueError(f"mode must be 'leaky' or 'plain', not {mode!r}")
        ctx.save_for_backward(x)
        ctx.alpha, ctx.mode = alpha, mode
        slope = torch.where(x > 0, torch.ones_like(x), torch.full_like(x, alpha if mode == "leaky" else 0.0))
        out = x * slope + eps
        return out if bias is None else out + bias

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        slope = torch.where(x > 0, torch.ones_like(x), torch.full_like(x, ctx.alpha if ctx.mode == "leaky" else 0.0))
        return grad_output * slope, None, None, None, None


def leaky_reference(x, alpha, mode, bias=None, eps=1e-6):
    out = torch.where(x > 0, x, x * (alpha if mode == "leaky" else 0.0)) + eps
    return out if bias is None else out + bias


class CrossEntropyPerRow(torch.autograd.Function):
    """Liger-Kernel's signature, in torch: logits, an integer target, eps, reduction; per-row losses."""
    @staticmethod
    def forward(ctx, logits, target, eps: float = 1e-6, reduction: str = "none"):
        logp = torch.log_softmax(logits, dim=-1)
        loss = -logp.gather(1, target[:, None]).squeeze(1) + eps
        ctx.save_for_backward(logp, target)
        ctx.reduction = reduction
        return loss.mean() if reduction == "mean" else loss

    @staticmethod
    def backward(ctx, grad_output):
        logp, target = ctx.saved_tensors
        grad = logp.exp()
        grad[torch.arange(len(target), device=target.device), target] -= 1.0        # d loss_r / d logits_r = softmax - onehot
        scale = grad_output / len(target) if ctx.reduction == "mean" else grad_output[:, None]
        return grad * scale, None, None, None


def cross_entropy_reference(logits, target, eps=1e-6, reduction="none"):
    loss = torch.nn.functional.cross_entropy(logits, target, reduction="none") + eps
    return loss.mean() if reduction == "mean" else loss


def logits_and_target(rows=4, classes=7, seed=60):
    target = torch.randint(0, classes, (rows,), generator=torch.Generator(device="cpu").manual_seed(seed),
                           device="cpu").to(DEVICE)
    return seeded_randn(rows, classes, seed=seed), target


class SinCos(torch.autograd.Function):
    """Two outputs, each with its own grad_output."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        x, = ctx.saved_tensors
        return grad_sin * torch.cos(x) - grad_cos * torch.sin(x)


class ValueAndNone(torch.autograd.Function):
    """An output that is None."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 3.0, None

    @staticmethod
    def backward(ctx, grad_output, _none):
        return grad_output * 3.0


class MaxWithIndex(torch.autograd.Function):
    """A value and an integer index, marked non-differentiable, as torch.max(dim) returns."""
    @staticmethod
    def forward(ctx, x):
        values, index = x.max(dim=-1)
        ctx.mark_non_differentiable(index)
        ctx.save_for_backward(index)
        ctx.shape = x.shape
        return values, index

    @staticmethod
    def backward(ctx, grad_values, _grad_index):
        index, = ctx.saved_tensors
        grad = torch.zeros(ctx.shape, dtype=grad_values.dtype, device=grad_values.device)
        return grad.scatter(-1, index[..., None], grad_values[..., None])


class CubeOnceDifferentiable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * 3 * x ** 2


class TransposedOutput(torch.autograd.Function):
    """Its output is a non-contiguous view: exp(x).t()."""
    @staticmethod
    def forward(ctx, x):
        out = torch.exp(x)
        ctx.save_for_backward(out)
        return out.t()

    @staticmethod
    def backward(ctx, grad_output):
        out, = ctx.saved_tensors
        return grad_output.t() * out


class MeanSquaredLoss(torch.autograd.Function):
    """A 0-dim output, as a loss."""
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return ((x - y) ** 2).mean()

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        grad = grad_output * 2 * (x - y) / x.numel()
        return grad, -grad


class BiasOptional(torch.autograd.Function):
    """Saves an optional tensor that is None, as fla-core's convolution saves a missing bias."""
    @staticmethod
    def forward(ctx, x, bias=None):
        ctx.save_for_backward(x, bias)
        return x * x if bias is None else x * x + bias

    @staticmethod
    def backward(ctx, grad_output):
        x, bias = ctx.saved_tensors
        return 2 * x * grad_output, None if bias is None else grad_output


class SquareSetupContext(torch.autograd.Function):
    """The setup_context style: forward takes no ctx."""
    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x * grad_output


class SquareWithTrailingNone(torch.autograd.Function):
    """Returns one more gradient than it has inputs, a None: autograd drops trailing Nones."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x * grad_output, None


class CrossEntropyWithZLoss(torch.autograd.Function):
    """Everything at once: an integer target, a float eps, a reduction string, and two outputs
    (the loss, and the z-loss z_weight * logsumexp**2, as Liger-Kernel's cross-entropy returns)."""
    @staticmethod
    def forward(ctx, logits, target, eps: float = 1e-6, reduction: str = "mean", z_weight: float = 1e-2):
        lse = torch.logsumexp(logits, dim=-1)
        loss = lse - logits.gather(1, target[:, None]).squeeze(1) + eps
        z_loss = z_weight * lse ** 2
        ctx.save_for_backward(logits, target, lse)
        ctx.reduction, ctx.z_weight = reduction, z_weight
        if reduction == "mean":
            return loss.mean(), z_loss.mean()
        return loss, z_loss

    @staticmethod
    def backward(ctx, grad_loss, grad_z):
        logits, target, lse = ctx.saved_tensors
        rows = len(target)
        if ctx.reduction == "mean":
            grad_loss, grad_z = grad_loss.expand(rows) / rows, grad_z.expand(rows) / rows
        softmax = torch.exp(logits - lse[:, None])
        onehot = torch.nn.functional.one_hot(target, logits.shape[-1]).to(logits.dtype)
        # d loss/d logits = softmax - onehot; d z_loss/d logits = 2 z_weight lse softmax
        grad = grad_loss[:, None] * (softmax - onehot) + grad_z[:, None] * 2 * ctx.z_weight * lse[:, None] * softmax
        return grad, None, None, None, None


def cross_entropy_with_z_loss(logits, target, eps=1e-6, reduction="mean", z_weight=1e-2):
    lse = torch.logsumexp(logits, dim=-1)
    loss = torch.nn.functional.cross_entropy(logits, target, reduction="none") + eps
    z_loss = z_weight * lse ** 2
    return (loss.mean(), z_loss.mean()) if reduction == "mean" else (loss, z_loss)


class Dropout(torch.autograd.Function):
    """Draws its mask from torch's generator: the checker seeds it alike for every call."""
    @staticmethod
    def forward(ctx, x, p: float = 0.5):
        keep = (torch.rand(x.shape, dtype=torch.float32, device=x.device) >= p).to(x.dtype) / (1 - p)
        ctx.save_for_backward(keep)
        return x * keep

    @staticmethod
    def backward(ctx, grad_output):
        keep, = ctx.saved_tensors
        return grad_output * keep, None


def dropout_reference(x, p=0.5):
    return x * (torch.rand(x.shape, dtype=torch.float32, device=x.device) >= p).to(x.dtype) / (1 - p)


class FreesWhatItKept(torch.autograd.Function):
    """Keeps x on ctx and drops it in backward: a second backward over one graph raises, loudly."""
    @staticmethod
    def forward(ctx, x):
        ctx.x = x.detach()
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.x
        del ctx.x
        return 2 * x * grad_output


class RefusesStrides(torch.autograd.Function):
    """Refuses a non-contiguous input, loudly: legal, as many libraries' ops do."""
    @staticmethod
    def forward(ctx, x):
        if not x.is_contiguous():
            raise ValueError("x must be contiguous")
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x * grad_output


class MaskedSoftmax(torch.autograd.Function):
    """A padding mask of -inf beside the logits: an infinity that never changes is no write."""
    @staticmethod
    def forward(ctx, x, bias):
        y = torch.softmax(x + bias, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        d = y * (g - (g * y).sum(-1, keepdim=True))  # the softmax's vector-Jacobian product
        return d, d


def masked_logits(seed=70):
    bias = torch.zeros(4, 6)
    bias[:, 4:] = float("-inf")
    return seeded_randn(4, 6, seed=seed), bias.to(DEVICE)


class SinAndCountUnmaterialized(torch.autograd.Function):
    """ctx.set_materialize_grads(False): the count's grad_output arrives as None, not zeros."""
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        positive = (x > 0).sum(-1)
        ctx.mark_non_differentiable(positive)
        return x.sin(), positive

    @staticmethod
    def backward(ctx, grad_sin, grad_count):
        if grad_count is not None:
            raise RuntimeError("with materialize_grads off, autograd passes None here")
        x, = ctx.saved_tensors
        return grad_sin * x.cos()


class ScaleByTable(torch.autograd.Function):
    """A floating-point table it takes no gradient for, as a rotary embedding takes cos and sin."""
    @staticmethod
    def forward(ctx, x, table):
        ctx.save_for_backward(table)
        return x * table

    @staticmethod
    def backward(ctx, g):
        table, = ctx.saved_tensors
        return g * table, None


class ScaleKeywordOnly(torch.autograd.Function):
    """A keyword-only parameter with a default, which Function.apply leaves at its default."""
    @staticmethod
    def forward(ctx, x, *, alpha=2.0):
        ctx.alpha = alpha
        return x * alpha

    @staticmethod
    def backward(ctx, g):
        return g * ctx.alpha


FIXED_WEIGHT = seeded_randn(5, 4, seed=71)


class ProjectFixed(torch.autograd.Function):
    """x @ W with W of a fixed (5, 4): the grown inputs cannot fit it, and it says so, loudly."""
    @staticmethod
    def forward(ctx, x):
        return x @ FIXED_WEIGHT

    @staticmethod
    def backward(ctx, g):
        return g @ FIXED_WEIGHT.t()


# -- What the checker may not vary, and legal code it once flagged (the classes of its false alarms) --

class GatherByPermutation(torch.autograd.Function):
    """Rows reordered by an integer permutation, which its backward inverts by assignment: right for a
    permutation, its contract; a tiled one (repeated indices) would break it."""
    @staticmethod
    def forward(ctx, x, order):
        ctx.save_for_backward(order)
        return x[order] * 2.0

    @staticmethod
    def backward(ctx, g):
        order, = ctx.saved_tensors
        grad = torch.zeros_like(g)
        grad[order] = g * 2.0
        return grad, None


class SegmentMeans(torch.autograd.Function):
    """Means over varlen segments given by sorted offsets (cu_seqlens), as its contract says they are."""
    @staticmethod
    def forward(ctx, x, offsets):
        ctx.save_for_backward(offsets)
        ctx.rows = x.shape[0]
        return torch.stack([x[a:b].mean(0) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())])

    @staticmethod
    def backward(ctx, g):
        offsets, = ctx.saved_tensors
        pieces = [g[k].expand(b - a, -1) / (b - a)
                  for k, (a, b) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist()))]
        return torch.cat(pieces), None


def segment_means(x, offsets):
    return torch.stack([x[a:b].mean(0) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())])


class Rotary(torch.autograd.Function):
    """A rotary embedding whose cos and sin tables (in no_grad) it checks: scaled tables are refused."""
    @staticmethod
    def forward(ctx, x, cos, sin):
        if not torch.allclose(cos * cos + sin * sin, torch.ones_like(cos), atol=1e-5):
            raise ValueError("cos and sin must be a rotation's")
        ctx.save_for_backward(cos, sin)
        a, b = x.chunk(2, dim=-1)
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    @staticmethod
    def backward(ctx, g):
        cos, sin = ctx.saved_tensors
        ga, gb = g.chunk(2, dim=-1)
        return torch.cat([ga * cos + gb * sin, -ga * sin + gb * cos], dim=-1), None, None


def rotary_reference(x, cos, sin):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def rotary_inputs():
    angles = seeded_randn(5, 3, seed=72)
    return seeded_randn(4, 5, 6, seed=73), angles.cos(), angles.sin()


class BatchNormTraining(torch.autograd.Function):
    """F.batch_norm in training mode: updates its running statistics in place (named in no_grad)."""
    @staticmethod
    def forward(ctx, x, running_mean, running_var):
        with torch.no_grad():
            torch.nn.functional.batch_norm(x, running_mean, running_var, training=True, momentum=0.1)
        mean, var = x.mean(0), x.var(0, unbiased=False)
        xhat = (x - mean) / torch.sqrt(var + 1e-5)
        ctx.save_for_backward(xhat, var)
        return xhat

    @staticmethod
    def backward(ctx, g):
        xhat, var = ctx.saved_tensors
        n = g.shape[0]
        grad = (g - g.mean(0) - xhat * (g * xhat).mean(0)) / torch.sqrt(var + 1e-5)
        return grad * (n / n), None, None


def batch_norm_reference(x, running_mean, running_var):
    return torch.nn.functional.batch_norm(x, None, None, training=True, eps=1e-5)


class BiasAddKeepdim(torch.autograd.Function):
    """x + b, the bias's gradient returned as (1, D): autograd sums it to b's (D,)."""
    @staticmethod
    def forward(ctx, x, b):
        return x + b

    @staticmethod
    def backward(ctx, g):
        return g, g.sum(0, keepdim=True)


class ExpByVjp(torch.autograd.Function):
    """Defines vjp instead of backward (autograd takes either)."""
    @staticmethod
    def forward(ctx, x):
        y = torch.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def vjp(ctx, g):
        y, = ctx.saved_tensors
        return g * y


class SoftmaxRows(torch.autograd.Function):
    """Its true gradient is exactly 0 wherever grad_output is constant along a row (after .sum(dim=-1)):
    what it computes there is rounding, whose digits follow grad_output's layout (a matrix product)."""
    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return y * (g - (g.unsqueeze(-2) @ y.unsqueeze(-1)).squeeze(-1))


class ChunkedCumsum(torch.autograd.Function):
    """A cumulative sum in chunks of 4, carried in float32: off float64 by its own rounding."""
    @staticmethod
    def forward(ctx, x):
        chunks = x.split(4, dim=-1)
        carry, out = torch.zeros_like(x[..., :1]), []
        for c in chunks:
            part = c.cumsum(-1) + carry
            out.append(part)
            carry = part[..., -1:]
        return torch.cat(out, -1)

    @staticmethod
    def backward(ctx, g):
        return g.flip(-1).cumsum(-1).flip(-1)


FIXED_DECAY = torch.linspace(1.0, 0.5, 5, device="cpu").to(DEVICE)


class Decay(torch.autograd.Function):
    """x * a decay along the last dimension, made for any width; its reference closes over a fixed (5,) one."""
    @staticmethod
    def forward(ctx, x):
        decay = torch.linspace(1.0, 0.5, x.shape[-1], device=x.device, dtype=x.dtype)
        ctx.save_for_backward(decay)
        return x * decay

    @staticmethod
    def backward(ctx, g):
        decay, = ctx.saved_tensors
        return g * decay


class RefusesCreateGraph(torch.autograd.Function):
    """x * |x|, whose backward refuses create_graph loudly; the reference (its own kernel) has none either."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.abs()

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: refused, loudly
            raise RuntimeError("no double backward")
        return g * 2 * x.abs()


class NoDoubleBackwardReference(torch.autograd.Function):
    """x * |x| again, as a reference: its first derivative right, and no double backward of its own."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.abs()

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * 2 * x.abs()


def running_stats():
    return seeded_randn(6, 4, seed=74), torch.zeros(4, device="cpu").to(DEVICE), torch.ones(4, device="cpu").to(DEVICE)


class MatrixSquare(torch.autograd.Function):
    """x @ x for a square x: legal only while x is square, which it checks, loudly."""
    @staticmethod
    def forward(ctx, x):
        if x.shape[0] != x.shape[1]:
            raise ValueError("x must be square")
        ctx.save_for_backward(x)
        return x @ x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g @ x.t() + x.t() @ g


class BinaryCrossEntropy(torch.autograd.Function):
    """A loss on probabilities, here near 1: values a checker scales past 1 leave its domain."""
    @staticmethod
    def forward(ctx, p, y):
        ctx.save_for_backward(p, y)
        return -(y * p.log() + (1 - y) * (1 - p).log()).mean()

    @staticmethod
    def backward(ctx, g):
        p, y = ctx.saved_tensors
        return g * (p - y) / (p * (1 - p)) / p.numel(), None


def probabilities_near_one():
    p = 0.9 + 0.09 * torch.rand(4, 6, generator=torch.Generator(device="cpu").manual_seed(81), device="cpu")
    return p.to(DEVICE), (seeded_randn(4, 6, seed=82) > 0).float()


def square(x):
    return x * x


def mul(x, y):
    return x * y


LEGAL = {
    "hardened TritonGELU": (hardened_ops.TritonGELU, (x35(),), {}, gelu),
    "hardened TritonSquare": (hardened_ops.TritonSquare, (x35(),), {}, square),
    "hardened TritonGELU, bf16": (hardened_ops.TritonGELU, (x35(dtype=torch.bfloat16),), {}, gelu),
    "hardened TritonGELU, fp16": (hardened_ops.TritonGELU, (x35(dtype=torch.float16),), {}, gelu),
    "hardened TritonGELU, float64": (hardened_ops.TritonGELU, (x35(dtype=torch.float64),), {}, gelu),
    "torch ops inside": (SinDifferentiable, (x35(),), {}, torch.sin),
    "a plain callable": (torch.tanh, (x35(),), {}, None),
    "a function of tensors": (lambda x: hardened_ops.TritonGELU.apply(x) * 3.0, (x35(),), {}, lambda x: gelu(x) * 3.0),
    "two inputs, honouring needs_input_grad": (MulHonouringNeeds, (x35(), x35(31)), {}, mul),
    "a gradient returned where none is needed": (MulComputesBoth, (x35(), x35(31)), {}, mul),
    "a float64 gradient for a float32 input": (SquareFloat64Gradient, (x35(),), {}, square),
    "mark_dirty": (ScaleInPlace, (x35(), 2.5), {}, lambda x, alpha: x * alpha),
    "non-tensor arguments": (LeakyScale, (x35(), 0.1, "leaky"), {}, leaky_reference),
    "non-tensor arguments by keyword": (LeakyScale, (x35(),), {"alpha": 0.2, "mode": "plain", "eps": 0.5},
                                        leaky_reference),
    "integer target, eps, reduction='none'": (CrossEntropyPerRow, logits_and_target(), {"eps": 1e-6},
                                              cross_entropy_reference),
    "integer target, reduction='mean' (a 0-dim loss)": (CrossEntropyPerRow, logits_and_target(),
                                                        {"reduction": "mean"}, cross_entropy_reference),
    "two outputs": (SinCos, (x35(),), {}, lambda x: (torch.sin(x), torch.cos(x))),
    "integer target, eps, reduction string, two outputs": (CrossEntropyWithZLoss, logits_and_target(),
                                                           {"eps": 1e-6, "reduction": "none"},
                                                           cross_entropy_with_z_loss),
    "the same, reduced to two 0-dim outputs": (CrossEntropyWithZLoss, logits_and_target(), {"reduction": "mean"},
                                               cross_entropy_with_z_loss),
    "a trailing None gradient": (SquareWithTrailingNone, (x35(),), {}, square),
    "random numbers drawn in forward (a dropout)": (Dropout, (x35(),), {}, dropout_reference),
    "a non-contiguous input refused with an error": (RefusesStrides, (x35(),), {}, square),
    "a second backward over one graph refused with an error": (FreesWhatItKept, (x35(),), {}, square),
    "a -inf padding mask": (MaskedSoftmax, masked_logits(), {}, lambda x, b: torch.softmax(x + b, -1)),
    "NaN outputs (log of negative numbers)": (torch.log, (x35(),), {}, torch.log),
    "materialize_grads off, a non-differentiable output": (SinAndCountUnmaterialized, (x35(),), {},
                                                           lambda x: (x.sin(), (x > 0).sum(-1))),
    "a floating-point table taken with no gradient (no_grad=)": (ScaleByTable, (x35(), x35(31)),
                                                                 {"no_grad": ("table",)}, lambda x, t: x * t),
    "a keyword-only parameter left at its default": (ScaleKeywordOnly, (x35(),), {}, lambda x: 2.0 * x),
    "shapes the grown inputs cannot fit, refused loudly": (ProjectFixed, (x35(),), {}, lambda x: x @ FIXED_WEIGHT),
    "an output that is None": (ValueAndNone, (x35(),), {}, lambda x: (x * 3.0, None)),
    "a non-differentiable integer output": (MaxWithIndex, (x35(),), {}, lambda x: x.max(dim=-1)),
    "once_differentiable": (CubeOnceDifferentiable, (x35(),), {}, lambda x: x ** 3),
    "a non-contiguous output": (TransposedOutput, (x35(),), {}, lambda x: torch.exp(x).t()),
    "a 0-dim output": (MeanSquaredLoss, (x35(), x35(31)), {}, lambda x, y: ((x - y) ** 2).mean()),
    "setup_context": (SquareSetupContext, (x35(),), {}, square),
    "a None among the saved tensors": (BiasOptional, (x35(),), {}, square),
    "values near 0": (hardened_ops.TritonSquare, (x35() * 1e-4,), {}, square),
    "values near 1e4": (hardened_ops.TritonSquare, (x35() + 1e4,), {}, square),
    "an integer permutation it validates": (GatherByPermutation, (x35(), torch.tensor([2, 0, 1], device=DEVICE)), {},
                                            lambda x, order: x[order] * 2.0),
    "sorted offsets (cu_seqlens) it validates": (SegmentMeans, (seeded_randn(7, 4, seed=75),
                                                                torch.tensor([0, 3, 7], device=DEVICE)), {},
                                                 segment_means),
    "rotary tables in no_grad, checked": (Rotary, rotary_inputs(), {"no_grad": ("cos", "sin")}, rotary_reference),
    "running statistics updated in place (no_grad)": (BatchNormTraining, running_stats(),
                                                       {"no_grad": ("running_mean", "running_var")},
                                                       batch_norm_reference),
    "a bias gradient autograd sums to its shape": (BiasAddKeepdim, (x35(), seeded_randn(5, seed=76)), {},
                                                   lambda x, b: x + b),
    "vjp instead of backward": (ExpByVjp, (x35(),), {}, torch.exp),
    "a true gradient of exactly 0 under a layout": (SoftmaxRows, (seeded_randn(6, 33, seed=79),), {},
                                                    lambda x: torch.softmax(x, -1)),
    "torch's softmax in bfloat16": (lambda x: torch.softmax(x, -1), (seeded_randn(8, 64, seed=80, dtype=torch.bfloat16)
                                                                      * 4,), {}, lambda x: torch.softmax(x, -1)),
    "a chunked float32 scan": (ChunkedCumsum, (seeded_randn(4, 300, seed=77) + 100,), {}, lambda x: x.cumsum(-1)),
    "a reference that closes over a fixed-size tensor": (Decay, (x35(),), {}, lambda x: x * FIXED_DECAY),
    "a square matrix, checked square": (MatrixSquare, (seeded_randn(5, 5, seed=78),), {}, lambda x: x @ x),
    "create_graph refused, its reference without a double backward": (RefusesCreateGraph, (x35(),), {},
                                                                        NoDoubleBackwardReference.apply),
    "torch ops inside, in bfloat16": (SinDifferentiable, (x35(dtype=torch.bfloat16),), {}, torch.sin),
    "two outputs, each of one input (one frozen, its output carries no gradient)": (
        lambda x, y: (x * 2.0, y * 3.0), (x35(), x35(31)), {}, lambda x, y: (x * 2.0, y * 3.0)),
    "probabilities near 1 (other values stay in range)": (BinaryCrossEntropy, probabilities_near_one(),
                                                          {"no_grad": ("y",)},
                                                          lambda p, y: torch.nn.functional.binary_cross_entropy(p, y)),
}

# Without a reference: finite differences, including a kernel that computes in float32 under
# float64 inputs (TritonSiLU's kernels do), where a float64 step would see only rounding.


def float32_silu():
    """practice/solutions.py's TritonSiLU: its kernels compute in float32, whatever the input's dtype."""
    import sys
    from chapter_scripts import REPO
    sys.path.insert(0, str(REPO / "practice"))
    import solutions
    return solutions.TritonSiLU


SiLUInFloat32 = float32_silu()

LEGAL_WITHOUT_REFERENCE = {
    "hardened TritonGELU": (hardened_ops.TritonGELU, (x35(),), {}),
    "a kernel computing in float32": (SiLUInFloat32, (x35(),), {}),
    "two inputs": (MulHonouringNeeds, (x35(), x35(31)), {}),
    "non-tensor arguments": (LeakyScale, (x35(), 0.1, "leaky"), {}),
    "integer target": (CrossEntropyPerRow, logits_and_target(), {}),
    "two outputs": (SinCos, (x35(),), {}),
    "random numbers drawn in forward (a dropout)": (Dropout, (x35(),), {}),
    "integer target, eps, reduction string, two outputs": (CrossEntropyWithZLoss, logits_and_target(),
                                                           {"eps": 1e-6, "reduction": "none"}),
    "ReLU with an input exactly at its kink, 0": (torch.relu, (x35_with_a_zero(),), {}),
    "an input laid out transposed, differenced as given": (torch.tanh, (x35().t(),), {}),
    "integer-valued inputs (exact in bfloat16 too), differenced": (
        hardened_ops.TritonSquare, (torch.arange(15.0, device="cpu").reshape(3, 5).to(DEVICE),), {}),
    # Integers are a lattice, which finite differences leave alone (a ?? line); powers of two from 2^-7 to 2^7
    # are exact in bfloat16 too, and no lattice: the kernel's float32 is still told from bfloat16 by them.
    "values exact in bfloat16 (powers of two), differenced": (
        hardened_ops.TritonSquare, ((2.0 ** torch.arange(-7.0, 8.0, device="cpu")).reshape(3, 5).to(DEVICE),), {}),
}
