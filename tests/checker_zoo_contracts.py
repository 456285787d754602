"""A small library of ops on symmetric positive-definite matrices, in the shape of linear_operator's and gpytorch's
(a Cholesky-based solve, an inverse quadratic form and a log-determinant), pure torch on the CPU; and ops whose
inputs hold another property their callers keep (rows that sum to 1, rows of unit norm, sorted values, integers).

Each backward returns what its library's returns: for a symmetric matrix, a symmetric gradient (the part of the
gradient that reaches A through any caller that builds it symmetric), which general finite differences and a
general reference (torch.linalg.solve, torch.logdet) do not give. LEGAL must come back clean, with a reference and
without; PLANTED names its trap. Every case is built by a function of the size, so a test can take it across
sizes: under a block, one past it, several blocks with a tail.
"""
import torch
from chapter_scripts import DEVICE


def sym(m):
    return (m + m.transpose(-1, -2)) / 2


def spd(n, seed=0, dtype=torch.float64, columns=2):
    """A symmetric positive-definite n x n matrix (B B^T / n + I) and an n x columns right-hand side."""
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(n, n, generator=g, dtype=torch.float64, device="cpu")
    a = b @ b.T / n + torch.eye(n, dtype=torch.float64, device="cpu")
    rhs = torch.randn(n, columns, generator=g, dtype=torch.float64, device="cpu")
    return a.to(DEVICE, dtype), rhs.to(DEVICE, dtype)


def cholesky_solve_op(name, grad_a):
    """x = A^-1 b through A's Cholesky factor, whose backward returns grad_a(gb, x) for A (gb = A^-1 g)."""
    def forward(ctx, a, b):
        factor = torch.linalg.cholesky(a)
        x = torch.cholesky_solve(b, factor)
        ctx.save_for_backward(factor, x)
        return x

    def backward(ctx, g):
        factor, x = ctx.saved_tensors
        gb = torch.cholesky_solve(g, factor)
        return grad_a(gb, x), gb
    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})


def solve_reference(a, b):
    return torch.linalg.solve(a, b)


def outer(gb, x):
    return gb @ x.transpose(-1, -2)


def lower_doubled(s):
    """A symmetric s packed as its lower triangle, doubled below the diagonal: its symmetric part is s."""
    return torch.tril(2 * s) - torch.diag_embed(torch.diagonal(s, dim1=-2, dim2=-1))


# gpytorch's and linear_operator's InvQuadLogdet: (inv_quad, logdet) = (sum_j b_j^T A^-1 b_j, log det A).
def inv_quad_logdet_op(name, logdet_grad_output=lambda g: g):
    def forward(ctx, a, b):
        factor = torch.linalg.cholesky(a)
        x = torch.cholesky_solve(b, factor)
        ctx.save_for_backward(factor, x)
        inv_quad = (b * x).sum()
        logdet = 2 * torch.log(torch.diagonal(factor, dim1=-2, dim2=-1)).sum()
        return inv_quad, logdet

    def backward(ctx, g_quad, g_logdet):
        factor, x = ctx.saved_tensors
        inverse = torch.cholesky_inverse(factor)
        grad_a = -g_quad * outer(x, x) + logdet_grad_output(g_logdet) * inverse
        return grad_a, 2 * g_quad * x
    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})


def inv_quad_logdet_reference(a, b):
    return (b * torch.linalg.solve(a, b)).sum(), torch.logdet(a)


class LogOfProbabilities(torch.autograd.Function):
    """log p for rows p that sum to 1, whose backward is g / p: the reference, log(p / p.sum(-1)), means the
    same on such rows, and its gradient differs by a constant per row, which no caller's rows can feel."""
    @staticmethod
    def forward(ctx, p):
        ctx.save_for_backward(p)
        return p.log()

    @staticmethod
    def backward(ctx, g):
        p, = ctx.saved_tensors
        return g / p


def log_of_normalised(p):
    return (p / p.sum(dim=-1, keepdim=True)).log()


def probabilities(rows, columns, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, columns, generator=g, dtype=torch.float64, device="cpu"), dim=-1).to(DEVICE)


class Gaps(torch.autograd.Function):
    """The gaps between sorted values along the last dimension (a histogram's bin widths): refuses values that are
    not sorted, loudly."""
    @staticmethod
    def forward(ctx, edges):
        if bool((edges.diff(dim=-1) < 0).any()):
            raise ValueError("the edges must be sorted along the last dimension")
        return edges.diff(dim=-1)

    @staticmethod
    def backward(ctx, g):
        zero = torch.zeros_like(g[..., :1])
        return torch.cat([zero, g], dim=-1) - torch.cat([g, zero], dim=-1)


def sorted_edges(rows, columns, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, columns, generator=g, dtype=torch.float64, device="cpu").sort(dim=-1).values.to(DEVICE)


class CountsTimesRate(torch.autograd.Function):
    """counts * rate, where counts must be whole numbers (a float tensor of counts): refuses any other value."""
    @staticmethod
    def forward(ctx, counts, rate):
        if not bool((counts == counts.round()).all()):
            raise ValueError("counts must be whole numbers")
        ctx.save_for_backward(counts, rate)
        return counts * rate

    @staticmethod
    def backward(ctx, g):
        counts, rate = ctx.saved_tensors
        return g * rate, g * counts


def counts_and_rate(rows, columns, seed=0):
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 6, (rows, columns), generator=g, device="cpu").double()
    return counts.to(DEVICE), torch.rand(rows, columns, generator=g, dtype=torch.float64, device="cpu").to(DEVICE) + 0.5


SOLVE = cholesky_solve_op("CholeskySolve", lambda gb, x: -sym(outer(gb, x)))
SOLVE_UNSYMMETRIZED = cholesky_solve_op("CholeskySolveGeneralGradient", lambda gb, x: -outer(gb, x))
SOLVE_LOWER = cholesky_solve_op("CholeskySolveLowerTriangle", lambda gb, x: lower_doubled(-sym(outer(gb, x))))
INV_QUAD_LOGDET = inv_quad_logdet_op("InvQuadLogdet")

# name: (op, inputs for a size n, reference)
LEGAL = {
    "a Cholesky solve, its gradient for A symmetrized": (SOLVE, spd, solve_reference),
    "a Cholesky solve, its gradient for A the general one": (SOLVE_UNSYMMETRIZED, spd, solve_reference),
    "a Cholesky solve, its gradient for A packed as its lower triangle, doubled": (SOLVE_LOWER, spd, solve_reference),
    "an inverse quadratic form and a log-determinant": (INV_QUAD_LOGDET, spd, inv_quad_logdet_reference),
}

# name: (op, inputs for a size n, reference, the trap)
PLANTED = {
    "a Cholesky solve, its gradient for A with the wrong sign": (
        cholesky_solve_op("CholeskySolveWrongSign", lambda gb, x: sym(outer(gb, x))), spd, solve_reference,
        "a wrong formula"),
    "a Cholesky solve, its gradient for A as the lower triangle, not doubled": (
        cholesky_solve_op("CholeskySolveLowerHalf", lambda gb, x: torch.tril(-sym(outer(gb, x)))), spd,
        solve_reference, "a wrong formula"),
    "a log-determinant that ignores its grad_output": (
        inv_quad_logdet_op("InvQuadLogdetIgnoresGradOutput", lambda g: torch.ones_like(g)), spd,
        inv_quad_logdet_reference, "ignores grad_output"),
}
