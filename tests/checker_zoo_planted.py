"""The backward checker's planted zoo: one bug a case, old and new, each of which must be named
with exactly its trap. Every case is (the op, its arguments, its keyword arguments, its reference,
the trap), drawn from a seed, so a failure reproduces. Several re-create real libraries' bugs
(docs/in-the-wild.md has the releases themselves)."""
import torch
import triton
import triton.language as tl
from chapter_scripts import hardened_ops, seeded_randn
from checker_zoo import (cross_entropy_reference, dgelu, gelu, logits_and_target, mul, one_input, square,
                         triton_gelu, x35)


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
        grad[torch.arange(len(target), device=target.device), target] -= 1.0
        return grad * grad_output[0], None, None       # BUG: grad_output[:, None]


class ScaledRowLoss(torch.autograd.Function):
    """Liger-Kernel's token scaling: each row's loss times its target's predicted probability, a scale the gradient
    holds constant by design (finite differences see its derivative too). Right per row: the fixed release."""
    @staticmethod
    def forward(ctx, logits, target):
        logp = torch.log_softmax(logits, dim=-1)
        picked = logp.gather(1, target[:, None]).squeeze(1)
        scale = picked.exp()
        ctx.save_for_backward(logp, target, scale)
        return -scale * picked

    @staticmethod
    def backward(ctx, grad_output):
        logp, target, scale = ctx.saved_tensors
        grad = logp.exp()
        grad[torch.arange(len(target), device=target.device), target] -= 1.0
        return grad * (scale * grad_output)[:, None], None


class ScaledRowLossFirstScale(ScaledRowLoss):
    """Liger-Kernel 0.8.1's token-scaled loss: the same, every row's gradient scaled by grad_output[0]."""
    @staticmethod
    def backward(ctx, grad_output):
        logp, target, scale = ctx.saved_tensors
        grad = logp.exp()
        grad[torch.arange(len(target), device=target.device), target] -= 1.0
        return grad * scale[:, None] * grad_output[0], None     # BUG: grad_output[:, None]


def scaled_row_loss(logits, target):
    """ScaledRowLoss as the library means it: the scale detached."""
    picked = torch.log_softmax(logits, dim=-1).gather(1, target[:, None]).squeeze(1)
    return -picked.exp().detach() * picked


class CrossEntropyWritesLogits(torch.autograd.Function):
    """Liger-Kernel's cross-entropy mechanism: forward stores the gradient into the logits it was given."""
    @staticmethod
    def forward(ctx, logits, target):
        logp = torch.log_softmax(logits, dim=-1)
        loss = -logp.gather(1, target[:, None]).squeeze(1)
        written = logits.data  # as a kernel writes through the pointer: autograd's version counter never moves
        written.copy_(logp.exp())
        written[torch.arange(len(target), device=target.device), target] -= 1.0
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
def square_backward_reading_rows(grad_out_ptr, x_ptr, grad_in_ptr, rows, cols, g_elements, BLOCK: tl.constexpr):
    """fla-core's causal_conv1d mechanism: grad_output's strides taken from its shape, as if contiguous. Its reads
    stop at the end of grad_output's memory (g_elements): the planted bug reads the wrong elements, and 0 past
    the end, but never outside the buffer, where a GPU faults and the fault poisons the process for every test
    after it (a stride-0 grad_output, after .sum(), is one element of memory)."""
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < cols
    x = tl.load(x_ptr + row * cols + c, mask=mask, other=0.0)
    inside = row * cols + c < g_elements
    g = tl.load(grad_out_ptr + row * cols + c, mask=mask & inside, other=0.0)  # BUG: row * g.stride(0)
    tl.store(grad_in_ptr + row * cols + c, g * 2.0 * x, mask=mask)


def square_hard_coded_strides(x, g):
    x = x.contiguous()
    grad = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows, cols = x.shape
    g_elements = g.untyped_storage().nbytes() // g.element_size() - g.storage_offset()  # from g's first element
    square_backward_reading_rows[(rows,)](g, x, grad, rows, cols, g_elements, BLOCK=triton.next_power_of_2(cols))
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


def square_forward_one_block(x):
    """The forward's grid is one block: past the first 1024 elements the output is never written."""
    x = x.contiguous()
    out = torch.zeros_like(x)
    hardened_ops.square_forward_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
    return out


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


# -- What the checker once missed: each a bug of a class it never tried, or hid behind another finding --

class SumLastFastPath(torch.autograd.Function):
    """A stride-0 fast path written for .sum()'s grad_output (one value), taken for .sum(dim=-1)'s too."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        if g.dim() == 2 and g.stride(-1) == 0:
            g = g[0, 0]  # BUG: right when every stride is 0, wrong when only the last is (rows differ)
        return 2 * x * g


class DoublesFrozenInPlace(torch.autograd.Function):
    """Saves a copy when x wants a gradient, and writes into x when it does not (it is the caller's)."""
    @staticmethod
    def forward(ctx, x, y):
        if x.requires_grad:
            return x * 2 + y
        return x.mul_(2).add_(y)  # BUG: the caller's frozen x is changed

    @staticmethod
    def backward(ctx, g):
        return (g * 2 if ctx.needs_input_grad[0] else None), g


class MulOneWorkspace(torch.autograd.Function):
    """Both gradients written into one workspace, which is returned twice: the second overwrites the first."""
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        workspace = torch.empty_like(x)
        grad_x = torch.mul(g, y, out=workspace)
        grad_y = torch.mul(g, x, out=workspace)  # BUG: grad_x is the same tensor, now holding grad_y
        return grad_x, grad_y


class SinCosUnmaterialized(torch.autograd.Function):
    """ctx.set_materialize_grads(False), and then every grad_output used as if it were there."""
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        x, = ctx.saved_tensors
        return grad_sin * torch.cos(x) - grad_cos * torch.sin(x)  # BUG: either may be None


class RowMeanMixedUp(torch.autograd.Function):
    """Each row's mean; its backward divides by the number of rows, which a square input hides."""
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.mean(-1)

    @staticmethod
    def backward(ctx, g):
        rows, columns = ctx.shape
        return g[:, None].expand(rows, columns) / rows  # BUG: / columns


class SinCosDropsCos(torch.autograd.Function):
    """Two outputs; the backward forgets the second one's part."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        x, = ctx.saved_tensors
        return grad_sin * torch.cos(x)  # BUG: - grad_cos * torch.sin(x)


class SquareRaisesOnTransposed(torch.autograd.Function):
    """Its forward takes any layout; its backward views the saved input flat, which a transposed one refuses."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return (2 * x.view(-1) * g.reshape(-1)).view(x.shape)  # BUG: x.view(-1) raises for x.t()


class MeanOverWrongCount(torch.autograd.Function):
    """Each row's mean, divided by one element too many: a wrong forward, with a backward true to it."""
    @staticmethod
    def forward(ctx, x):
        ctx.columns = x.shape[-1]
        return x.sum(-1) / (x.shape[-1] + 1)  # BUG: / x.shape[-1]

    @staticmethod
    def backward(ctx, g):
        return g[:, None].expand(-1, ctx.columns) / (ctx.columns + 1)


class ScalesSavedGradientFirstElement(torch.autograd.Function):
    """Two traps at once, as Liger-Kernel 0.8.1's fused loss had: its saved gradient scaled in place (by
    design, to save memory), and scaled by grad_output[0] for every row."""
    @staticmethod
    def forward(ctx, logits, target):
        logp = torch.log_softmax(logits, dim=-1)
        grad = logp.exp()
        grad[torch.arange(len(target), device=target.device), target] -= 1.0
        ctx.save_for_backward(grad)
        return -logp.gather(1, target[:, None]).squeeze(1)

    @staticmethod
    def backward(ctx, grad_output):
        grad, = ctx.saved_tensors
        return grad.mul_(grad_output[0]), None  # BUG: grad_output[:, None]; and the saved gradient changes


class MutatesAndFirstElement(torch.autograd.Function):
    """Two traps: writes into grad_output, and reads only its first element."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        first = g.reshape(-1)[0].clone()
        return g.fill_(first).mul_(2 * x)  # BUG twice: in place, and one value for all


class WritesLogitsAndTransposed(torch.autograd.Function):
    """Two traps, as Liger-Kernel's cross-entropy has: the gradient written into the logits it was given,
    and read back as if contiguous."""
    @staticmethod
    def forward(ctx, logits, target):
        logp = torch.log_softmax(logits, dim=-1)
        loss = -logp.gather(1, target[:, None]).squeeze(1)
        written = logits.data
        written.copy_(logp.exp())
        written[torch.arange(len(target), device=target.device), target] -= 1.0
        ctx.save_for_backward(logits)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad, = ctx.saved_tensors
        flat_rows = grad.as_strided(grad.shape, (grad.shape[1], 1))  # BUG: reads its storage as if contiguous
        return flat_rows * grad_output[:, None], None


class AddOnesForBoth(torch.autograd.Function):
    """x + y, whose backward hands back one tensor of ones for both: legal to share it, wrong to ignore g."""
    @staticmethod
    def forward(ctx, x, y):
        return x + y

    @staticmethod
    def backward(ctx, g):
        ones = torch.ones_like(g)  # BUG: g
        return ones, ones


class SquareSmallPath(torch.autograd.Function):
    """A fast path for small inputs with the factor 2 left out: wrong on every small call, right on large ones."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * x if x.numel() <= 1024 else 2 * g * x  # BUG: 2 * g * x on both paths


class RowMeanForwardMixedUp(torch.autograd.Function):
    """Each row's mean, divided by the number of rows in the forward: a square input hides it."""
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.sum(-1) / x.shape[0]  # BUG: x.shape[-1]

    @staticmethod
    def backward(ctx, g):
        rows, columns = ctx.shape
        return g[:, None].expand(rows, columns) / columns


def row_mean(x):
    return x.mean(-1)


def sin_cos(x):
    return torch.sin(x), torch.cos(x)


def cross_entropy_rows(logits, target):
    return torch.nn.functional.cross_entropy(logits, target, reduction="none")


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
    "a token-scaled row loss scaled by grad_output[0] (Liger-Kernel 0.8.1)": (
        ScaledRowLossFirstScale, logits_and_target(), {}, scaled_row_loss, "assumes a uniform grad_output"),
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
    "a forward grid of one block": (one_input(square_forward_one_block, lambda x, g: 2 * x * g, "SquareForwardOneBlock"),
                                    (x35(),), {}, square, "covers only part of a large input"),
    "needs_input_grad read the wrong way round": (MulSwapsNeeds, (x35(), x35(31)), {}, mul,
                                                  "returns the wrong gradients"),
    "a gradient of the wrong shape": (GradientOfTheWrongShape, (x35(),), {}, square, "returns the wrong gradients"),
    "tanh-approximate derivative": (one_input(triton_gelu, tanh_derivative, "GELUTanhDerivative"), (x35(),), {}, gelu,
                                    "a wrong formula"),
    "sign error": (one_input(torch.sin, lambda x, g: -g * torch.cos(x), "SinSignError"), (x35(),), {}, torch.sin,
                   "a wrong formula"),
    # The formula is right; the float16 it is returned in is not (autograd casts it back to float32, rounded).
    "a float16 gradient for a float32 input": (one_input(square, lambda x, g: (2 * x * g).half(), "SquareInHalf"),
                                               (x35(),), {}, square, "returns the wrong gradients"),
    "a stride-0 fast path taken for .sum(dim=-1)": (SumLastFastPath, (x35(),), {}, square,
                                                     "assumes a contiguous grad_output"),
    "a write into an input only when it is frozen": (DoublesFrozenInPlace, (x35(), x35(31)), {},
                                                     lambda x, y: x * 2 + y, "writes into an input or a saved tensor"),
    "one workspace returned for two gradients": (MulOneWorkspace, (x35(), x35(31)), {}, mul,
                                                 "returns the wrong gradients"),
    "an unused output's None grad_output used": (SinCosUnmaterialized, (x35(),), {}, sin_cos,
                                                 "assumes every output is used"),
    "shape[0] for shape[1], hidden by a square input": (RowMeanMixedUp, (seeded_randn(5, 5, seed=33),), {}, row_mean,
                                                        "a wrong formula"),
    "the second output's part dropped": (SinCosDropsCos, (x35(),), {}, sin_cos, "ignores grad_output"),
    "a backward that raises on a transposed saved input": (SquareRaisesOnTransposed, (x35(),), {}, square,
                                                           "assumes a contiguous input"),
    "a wrong forward (a mean over one element too many)": (MeanOverWrongCount, (x35(),), {}, row_mean,
                                                           "a wrong forward"),
    "one tensor of ones returned for both inputs": (AddOnesForBoth, (x35(), x35(31)), {}, lambda x, y: x + y,
                                                    "ignores grad_output"),
    "a small-input path with a wrong factor": (SquareSmallPath, (x35(),), {}, square, "a wrong formula"),
    "a forward's shape[0] for shape[-1], hidden by a square input": (
        RowMeanForwardMixedUp, (seeded_randn(5, 5, seed=34),), {}, row_mean, "a wrong forward"),
}

# Several traps in one op, each to be named: a finding never hides a check for another trap.
MULTIPLE = {
    "a saved gradient scaled in place, by grad_output[0] (Liger-Kernel 0.8.1)": (
        ScalesSavedGradientFirstElement, logits_and_target(), {}, cross_entropy_rows,
        ("writes into an input or a saved tensor", "assumes a uniform grad_output")),
    "grad_output written into, and only its first element read": (
        MutatesAndFirstElement, (x35(),), {}, square, ("mutates grad_output in place", "assumes a uniform grad_output")),
    "the logits written into, and read back as if contiguous (Liger-Kernel cross-entropy)": (
        WritesLogitsAndTransposed, logits_and_target(), {}, cross_entropy_rows,
        ("writes into an input or a saved tensor", "assumes a contiguous input")),
}

# Found without a reference too (finite differences stand in, as in torch.autograd.gradcheck).
PLANTED_WITHOUT_REFERENCE = ["no chain rule (the book's buggy kernel)", "grad_output[0]", "mul_ on grad_output",
                             "strides from the shape (fla-core causal_conv1d)", "a grid of one block",
                             "derivative kept on the class", "input y ignores grad_output",
                             "forward writes into its logits (Liger-Kernel cross-entropy)",
                             "one workspace returned for two gradients", "a stride-0 fast path taken for .sum(dim=-1)",
                             "a token-scaled row loss scaled by grad_output[0] (Liger-Kernel 0.8.1)"]
