"""The backward checker's two zoos, shared by its tests.

LEGAL: correct code, some of it unusual, that PyTorch accepts; the checker must report it clean
(notes allowed). PLANTED: one bug each, old and new, each of which must be named with exactly
its trap. Every case is (the op, its arguments, its keyword arguments, its reference), drawn
from a seed, so a failure reproduces.
"""
import math

import torch
import triton
import triton.language as tl
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
        grad[torch.arange(len(target)), target] -= 1.0        # d loss_r / d logits_r = softmax - onehot
        scale = grad_output / len(target) if ctx.reduction == "mean" else grad_output[:, None]
        return grad * scale, None, None, None


def cross_entropy_reference(logits, target, eps=1e-6, reduction="none"):
    loss = torch.nn.functional.cross_entropy(logits, target, reduction="none") + eps
    return loss.mean() if reduction == "mean" else loss


def logits_and_target(rows=4, classes=7, seed=60):
    target = torch.randint(0, classes, (rows,), generator=torch.Generator().manual_seed(seed)).to(DEVICE)
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
}


# ---------------------------------------------------------------------------------------------
# Planted bugs: each must be named with exactly its trap
# ---------------------------------------------------------------------------------------------

class CountsItsUses(torch.autograd.Function):
    """Divides by how many times forward ran: 'each use gets its share'."""
    uses = 0

    @staticmethod
    def forward(ctx, x):
        CountsItsUses.uses += 1
        ctx.save_for_backward(x)
        return triton_gelu(x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        share = grad_output * dgelu(x) / CountsItsUses.uses
        CountsItsUses.uses = 0
        return share


class DerivativeOnTheClass(torch.autograd.Function):
    derivative = None

    @staticmethod
    def forward(ctx, x):
        DerivativeOnTheClass.derivative = dgelu(x)
        return triton_gelu(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * DerivativeOnTheClass.derivative


class GradientOfTheWrongShape(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return (2 * x * grad_output).sum(dim=0)  # BUG: summed over the rows


class MulSwapsNeeds(torch.autograd.Function):
    """Skips the gradients nobody needs, but reads needs_input_grad the wrong way round."""
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        return (grad_output * y if ctx.needs_input_grad[1] else None,
                grad_output * x if ctx.needs_input_grad[0] else None)


class MulForgetsGradOnY(torch.autograd.Function):
    """Input 1's gradient ignores grad_output."""
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        return grad_output * y, x


class SinCosForgetsCos(torch.autograd.Function):
    """Two outputs; the second output's grad_output is taken as 1."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        x, = ctx.saved_tensors
        return grad_sin * torch.cos(x) - torch.sin(x)


class RowLossFirstScale(torch.autograd.Function):
    """Liger-Kernel#584's mechanism: a loss per row, every row's gradient scaled by grad_output[0]."""
    @staticmethod
    def forward(ctx, logits, target, reduction: str = "none"):
        logp = torch.log_softmax(logits, dim=-1)
        ctx.save_for_backward(logp, target)
        return -logp.gather(1, target[:, None]).squeeze(1)

    @staticmethod
    def backward(ctx, grad_output):
        logp, target = ctx.saved_tensors
        grad = logp.exp()
        grad[torch.arange(len(target)), target] -= 1.0
        return grad * grad_output[0], None, None       # BUG: grad_output[:, None]


class CrossEntropyWritesLogits(torch.autograd.Function):
    """Liger-Kernel's cross-entropy mechanism: forward stores the gradient into the logits it was given."""
    @staticmethod
    def forward(ctx, logits, target):
        logp = torch.log_softmax(logits, dim=-1)
        loss = -logp.gather(1, target[:, None]).squeeze(1)
        written = logits.data  # as a kernel writes through the pointer: autograd's version counter never moves
        written.copy_(logp.exp())
        written[torch.arange(len(target)), target] -= 1.0
        ctx.save_for_backward(logits)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad, = ctx.saved_tensors
        return grad * grad_output[:, None], None


class ScalesSavedGradient(torch.autograd.Function):
    """Liger-Kernel 0.5.8's mechanism: forward saves the local gradient, backward scales it in place."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(2 * x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        local, = ctx.saved_tensors
        return local.data.mul_(grad_output)  # BUG, through the pointer as a kernel writes: autograd never sees it


class ScalesSavedGradientInTorch(ScalesSavedGradient):
    """The same write through torch: autograd's version counter refuses the second backward."""
    @staticmethod
    def backward(ctx, grad_output):
        local, = ctx.saved_tensors
        return local.mul_(grad_output)


class SquareWritesSavedInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        with torch.no_grad():
            x.mul_(2.0)  # "reuse the buffer": the caller's x is now 2x
        return x * grad_output


@triton.jit
def square_backward_reading_rows(grad_out_ptr, x_ptr, grad_in_ptr, rows, cols, BLOCK: tl.constexpr):
    """fla-core's causal_conv1d mechanism: grad_output's strides taken from its shape, as if contiguous."""
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < cols
    x = tl.load(x_ptr + row * cols + c, mask=mask, other=0.0)
    g = tl.load(grad_out_ptr + row * cols + c, mask=mask, other=0.0)  # BUG: row * g.stride(0)
    tl.store(grad_in_ptr + row * cols + c, g * 2.0 * x, mask=mask)


def square_hard_coded_strides(x, g):
    x = x.contiguous()
    grad = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows, cols = x.shape
    square_backward_reading_rows[(rows,)](g, x, grad, rows, cols, BLOCK=triton.next_power_of_2(cols))
    return grad


def square_like_x(x, g):
    """Reads grad_output with x's layout (a kernel handed x's strides for both)."""
    return 2 * x * g.as_strided(x.shape, x.stride())


def square_one_block(x, g):
    """A grid of one block: cdiv(n, BLOCK) left out."""
    x, g = x.contiguous(), g.contiguous()
    grad = torch.zeros_like(x)
    hardened_ops.square_backward_kernel[(1,)](g, x, grad, x.numel(), BLOCK=1024)
    return grad


def square_drops_the_tail(x, g):
    """n // BLOCK blocks: the last, ragged block is never launched."""
    x, g = x.contiguous(), g.contiguous()
    grad = torch.zeros_like(x)
    n = x.numel()
    hardened_ops.square_backward_kernel[(max(1, n // 1024),)](g, x, grad, n, BLOCK=1024)
    return grad


class AddOneThroughThePointer(torch.autograd.Function):
    """Writes into its input and returns it, without ctx.mark_dirty (a kernel writing through x's pointer)."""
    @staticmethod
    def forward(ctx, x):
        x.data.add_(1.0)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


SHAPE_CACHE = {}


class CachedByShape(torch.autograd.Function):
    """Keeps the derivative of the first call of each shape: right once, wrong for the next values."""
    @staticmethod
    def forward(ctx, x):
        SHAPE_CACHE.setdefault(tuple(x.shape), torch.cos(x))
        ctx.shape = tuple(x.shape)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        return g * SHAPE_CACHE[ctx.shape]


class SinCosSwapped(torch.autograd.Function):
    """Two outputs whose grad_outputs the backward swaps."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        x, = ctx.saved_tensors
        return grad_cos * torch.cos(x) - grad_sin * torch.sin(x)  # BUG: grad_sin and grad_cos swapped


def book_function(name):
    from chapter_scripts import SCRIPTS
    return getattr(SCRIPTS["04_standalone_complete"], name)


def tanh_derivative(x, g):
    return g * torch.ops.aten.gelu_backward(torch.ones_like(x), x, approximate="tanh")


PLANTED = {
    "no chain rule (the book's buggy kernel)": (hardened_ops.TritonGELUBuggy, (x35(),), {}, gelu,
                                                "ignores grad_output"),
    "square, no chain rule": (one_input(square, lambda x, g: 2 * x, "SquareNoChainRule"), (x35(),), {}, square,
                              "ignores grad_output"),
    "input y ignores grad_output": (MulForgetsGradOnY, (x35(), x35(31)), {}, mul, "ignores grad_output"),
    "output 1's grad_output ignored": (SinCosForgetsCos, (x35(),), {}, lambda x: (torch.sin(x), torch.cos(x)),
                                       "ignores grad_output"),
    "grad_output[0]": (one_input(triton_gelu, lambda x, g: g.reshape(-1)[0] * dgelu(x), "GELUFirstElement"),
                       (x35(),), {}, gelu, "assumes a uniform grad_output"),
    "grad_output.mean()": (one_input(triton_gelu, lambda x, g: g.mean() * dgelu(x), "GELUMean"), (x35(),), {}, gelu,
                           "assumes a uniform grad_output"),
    "a row loss scaled by grad_output[0] (Liger-Kernel#584)": (RowLossFirstScale, logits_and_target(), {},
                                                               cross_entropy_reference,
                                                               "assumes a uniform grad_output"),
    "derivative kept on the class": (DerivativeOnTheClass, (x35(),), {}, gelu, "keeps state between calls"),
    "divides by its uses": (CountsItsUses, (x35(),), {}, gelu, "keeps state between calls"),
    "mul_ on grad_output": (one_input(triton_gelu, lambda x, g: g.mul_(dgelu(x)), "GELUInPlace"), (x35(),), {}, gelu,
                            "mutates grad_output in place"),
    "add_ on grad_output": (one_input(square, lambda x, g: g.add_(0).mul_(2 * x), "SquareInPlace"), (x35(),), {},
                            square, "mutates grad_output in place"),
    "strides from the shape (fla-core causal_conv1d)": (one_input(square, square_hard_coded_strides, "SquareRows"),
                                                        (x35(),), {}, square, "assumes a contiguous grad_output"),
    "grad_output read with x's layout": (one_input(square, square_like_x, "SquareLikeX"), (x35(),), {}, square,
                                         "assumes grad_output is laid out like its input"),
    "the book's TritonGELU on a transposed input": (book_function("TritonGELU"), (x35(),), {}, gelu,
                                                    "assumes a contiguous input"),
    "forward writes into its logits (Liger-Kernel cross-entropy)": (CrossEntropyWritesLogits, logits_and_target(), {},
                                                                    cross_entropy_reference,
                                                                    "writes into an input or a saved tensor"),
    "backward scales its saved gradient in place (Liger-Kernel 0.5.8)": (ScalesSavedGradient, (x35(),), {}, square,
                                                                          "writes into an input or a saved tensor"),
    "the same, through torch": (ScalesSavedGradientInTorch, (x35(),), {}, square,
                                "writes into an input or a saved tensor"),
    "a write into the input it returns, undeclared": (AddOneThroughThePointer, (x35(),), {}, lambda x: x + 1.0,
                                                     "writes into an input or a saved tensor"),
    "a derivative cached by shape": (CachedByShape, (x35(),), {}, torch.sin, "keeps state between calls"),
    "two outputs' grad_outputs swapped": (SinCosSwapped, (x35(),), {}, lambda x: (torch.sin(x), torch.cos(x)),
                                          "a wrong formula"),
    "backward writes into the saved input": (SquareWritesSavedInput, (x35(),), {}, square,
                                             "writes into an input or a saved tensor"),
    "a grid of one block": (one_input(square, square_one_block, "SquareOneBlock"), (x35(),), {}, square,
                            "covers only part of a large input"),
    "the ragged tail dropped": (one_input(square, square_drops_the_tail, "SquareNoTail"), (x35(),), {}, square,
                                "covers only part of a large input"),
    "needs_input_grad read the wrong way round": (MulSwapsNeeds, (x35(), x35(31)), {}, mul,
                                                  "returns the wrong gradients"),
    "a gradient of the wrong shape": (GradientOfTheWrongShape, (x35(),), {}, square, "returns the wrong gradients"),
    "tanh-approximate derivative": (one_input(triton_gelu, tanh_derivative, "GELUTanhDerivative"), (x35(),), {}, gelu,
                                    "a wrong formula"),
    "sign error": (one_input(torch.sin, lambda x, g: -g * torch.cos(x), "SinSignError"), (x35(),), {}, torch.sin,
                   "a wrong formula"),
}

# Found without a reference too (finite differences stand in, as in torch.autograd.gradcheck).
PLANTED_WITHOUT_REFERENCE = ["no chain rule (the book's buggy kernel)", "grad_output[0]", "mul_ on grad_output",
                             "strides from the shape (fla-core causal_conv1d)", "a grid of one block",
                             "derivative kept on the class", "input y ignores grad_output",
                             "forward writes into its logits (Liger-Kernel cross-entropy)"]
