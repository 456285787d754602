"""The contract of the values given: the properties an input's values hold, which the op may rely on, and which
every value the checker makes up keeps.

A linear-algebra op takes a symmetric positive-definite matrix; a loss takes rows that sum to 1; a search takes
values sorted along the last dimension; an op may read a float tensor of integers as indices or counts. Values the
checker makes up (grown past several blocks, jittered to other values) keep every property the given values hold,
and finite differences step only along directions that keep it. The properties, found from the values themselves:

- symmetric (the last two dimensions), and positive-definite (a Cholesky factor exists);
- rows that sum to 1, or rows of unit norm (along the last dimension);
- sorted along the last dimension (ascending or descending);
- on a lattice: every value an integer (a float that may be an index or a count);
- non-negative, or within [0, 1].

A property narrows what a gradient can be checked for. The caller of an op that takes a symmetric matrix A builds
it from something (A = B B^T, say), and only the symmetric part of A's gradient, (G + G^T) / 2, reaches that: so
the checker compares symmetric parts, and a backward that returns the symmetric gradient passes beside one that
does not. Rows that sum to 1 likewise take only the part of a gradient that sums to 0 along each row, and rows of
unit norm the part orthogonal to each row. A float tensor of integers may be an index or a count, which no step may
move: finite differences leave it alone, and the check says it could not decide (a reference decides it). Values on
a grid of another step (a covariance factor of 0.6, 0.8, 0.9 and 0.4; a bfloat16 number held in float32) are no
index: they are differenced like any other. Where the checker cannot make values that keep a property, it says
which, and decides nothing on them.
"""
import cmath
import dataclasses
import math
import weakref

import torch

def all_finite(*tensors):
    """Whether every element of tensors is finite. A NaN or an infinity carries through a sum, so a finite sum
    says so in one pass, an eighth of isfinite's time on a large input (a check asks dozens of times); only a sum
    that overflows, or one that does not carry it (elements finite but near their dtype's largest), is told by
    isfinite."""
    tensors = [t for t in tensors if t.numel()]
    if not tensors:
        return True
    sums = [t.sum(dtype=torch.float64) if t.is_floating_point() else t.sum() for t in tensors]
    total = sums[0]
    for s in sums[1:]:
        total = total + s
    value = total.item()  # one read of one number (one wait for a GPU), a third of total.isfinite()'s time
    if cmath.isfinite(value) if isinstance(value, complex) else math.isfinite(value):
        return True
    return all(bool(t.isfinite().all()) for t in tensors)


def finite_elements(t):
    """t's finite elements (picked out into a copy only where some are not)."""
    return t if all_finite(t) else t[t.isfinite()]


# Each property in the words the report uses.
SYMMETRIC = "symmetric"
POSITIVE_DEFINITE = "positive-definite"
ROWS_SUM_TO_ONE = "rows that sum to 1"
UNIT_ROWS = "rows of unit norm"
SORTED = "sorted along its last dimension"
LATTICE = "on a lattice"
NON_NEGATIVE = "non-negative"
UNIT_INTERVAL = "within [0, 1]"

# A row sorted by chance is likely where rows are short and few: sortedness counts from this many comparisons on.
SORTED_COMPARISONS = 8
# Integers are a lattice only where the dtype could hold something else there: its spacing at the largest value is
# at most 1/LATTICE_COARSER (float16 from 2048 on holds integers alone, and that says nothing of the values).
LATTICE_COARSER = 16
# Taking two projections in turn converges on the projection onto both; this many rounds at most.
PROJECTION_ROUNDS = 200


def tolerance(dtype):
    """How far a property may be off by rounding alone, relative, for values of dtype: a softmax's rows in
    float16 sum to 1 within about its epsilon, B @ B.T in float32 is symmetric within a few of its epsilons."""
    return max(4 * torch.finfo(dtype).eps, 1e-6)


class Unkept(Exception):
    """The checker could not make values that keep a property of the given ones: lost names it, and where (the
    input's position among the op's arguments, where known)."""

    def __init__(self, lost, where=None):
        super().__init__(", ".join(lost))
        self.lost, self.where = list(lost), where


@dataclasses.dataclass(frozen=True)
class Contract:
    """The properties one input's given values hold (see the module's docstring)."""
    symmetric: bool = False
    positive_definite: bool = False
    rows_sum_to_one: bool = False
    unit_rows: bool = False
    sorted: int = 0          # 1 ascending, -1 descending, 0 neither
    step: float = 0.0        # the lattice's step: 1 for integers, 0 for none
    non_negative: bool = False
    unit_interval: bool = False
    smallest: float = 0.0    # the smallest eigenvalue of the given matrices, where positive-definite
    diagonal: float = 0.0    # their largest diagonal element, the largest any element has

    @property
    def names(self):
        """The properties held, in the report's words."""
        names = [SYMMETRIC] * self.symmetric + [POSITIVE_DEFINITE] * self.positive_definite
        names += [ROWS_SUM_TO_ONE] * self.rows_sum_to_one + [UNIT_ROWS] * self.unit_rows
        if self.sorted:
            names.append(SORTED if self.sorted > 0 else SORTED.replace("sorted", "sorted in descending order"))
        if self.step:
            names.append(self.lattice_words)
        names += [UNIT_INTERVAL] if self.unit_interval else [NON_NEGATIVE] * self.non_negative
        return names

    @property
    def noted(self):
        """Whether the report says so: a property that changes what the checker makes up or compares (a range
        alone, non-negative or within [0, 1], it always kept)."""
        return self.projects or self.positive_definite or bool(self.sorted) or self.lattice

    def describe(self, arg):
        """One line for the report: what arg's values hold, and what the checker does about it."""
        compared = ("its symmetric part, (G + G^T) / 2" if self.symmetric else
                    "the part that sums to 0 along each row" if self.rows_sum_to_one else
                    "the part orthogonal to each row" if self.unit_rows else "")
        compared = (f", and its gradient is compared by {compared}, all of it that reaches {arg} through a caller "
                    f"that keeps that" if compared else "")
        return f"{arg} is {', '.join(self.names)} as given: the values the checker makes up keep that{compared}"

    @property
    def projects(self):
        """Whether only part of a gradient reaches the op through its callers (see project)."""
        return self.symmetric or self.rows_sum_to_one or self.unit_rows

    @property
    def lattice(self):
        return self.step > 0

    @property
    def lattice_words(self):
        return "integers"

    def project(self, g, x):
        """The part of g (shaped like the input x) that moves the values within the contract: its symmetric part,
        the part that sums to 0 along each row, or the part orthogonal to each row. Each is an orthogonal
        projection; where two meet (a symmetric matrix whose rows sum to 1), the projection onto both is the
        limit of taking each in turn, reached within PROJECTION_ROUNDS."""
        rounds = 1 if self.symmetric + self.rows_sum_to_one + self.unit_rows <= 1 else PROJECTION_ROUNDS
        for _ in range(rounds):
            before = g
            if self.symmetric:
                g = (g + g.transpose(-1, -2)) / 2
            if self.rows_sum_to_one:
                g = g - g.mean(dim=-1, keepdim=True)
            if self.unit_rows:
                rows = x.to(g.dtype)
                rows = rows / rows.norm(dim=-1, keepdim=True)
                g = g - (g * rows).sum(dim=-1, keepdim=True) * rows
            if rounds > 1 and (g - before).abs().max() <= 1e-12 * before.abs().max():
                break
        return g

    @property
    def bounded(self):
        return self.non_negative or self.unit_interval

    def boundaries(self, x):
        """How far each value of x may move either way and stay non-negative or within [0, 1] (infinite where
        nothing bounds it): a finite-difference step stays inside."""
        if not self.bounded:
            return torch.full_like(x, float("inf"))
        room = x.clamp(min=0.0)
        return torch.minimum(room, (1.0 - x).clamp(min=0.0)) if self.unit_interval else room

    def keep(self, values, dtype):
        """values (float64, made up from the given ones: tiled, jittered) made to hold every property of the
        contract, still float64, exactly so once cast to dtype; raises Unkept naming what it could not keep. A
        tiled symmetric matrix is singular, and a jittered one may be indefinite: it is drawn toward a multiple
        of the identity (see positive_definite_like) until its smallest eigenvalue is the given matrices'."""
        out = values
        if self.step:
            out = torch.round(out / self.step) * self.step
        if self.sorted:
            out = out.sort(dim=-1, descending=self.sorted < 0).values
        if self.rows_sum_to_one:
            out = out / out.sum(dim=-1, keepdim=True)
        if self.unit_rows:
            out = out / out.norm(dim=-1, keepdim=True)
        if self.symmetric:
            out = (out + out.transpose(-1, -2)) / 2
        if self.positive_definite:
            out = positive_definite_like(out, self.smallest, self.diagonal, dtype)
        self.check_kept(out, dtype)
        return out

    def check_kept(self, made, dtype):
        """Raises Unkept where made, in dtype, lost a property this contract holds."""
        now = found(made.to(dtype))
        lost = [name for name, had, has in (
            (SYMMETRIC, self.symmetric, now.symmetric),
            (POSITIVE_DEFINITE, self.positive_definite, now.positive_definite),
            (ROWS_SUM_TO_ONE, self.rows_sum_to_one, now.rows_sum_to_one), (UNIT_ROWS, self.unit_rows, now.unit_rows),
            (SORTED, self.sorted, now.sorted == self.sorted or made.shape[-1] < 2),
            (LATTICE, self.step, now.step and abs(now.step / self.step - round(now.step / self.step)) < 1e-6),
            (NON_NEGATIVE, self.non_negative, now.non_negative), (UNIT_INTERVAL, self.unit_interval, now.unit_interval))
            if had and not has]
        if lost:
            raise Unkept(lost)


NOTHING = Contract()


def projection(contract, x):
    """The function that takes a gradient for input x (shaped like it) to the part contract lets through, in
    float64 (a gradient of another shape is left as it is, for the comparison to refuse); None where the whole
    gradient counts."""
    if not contract.projects:
        return None
    x = x.detach().double()

    def project(g):
        if tuple(g.shape) != tuple(x.shape):
            return g
        return contract.project(g.detach().double(), x.to(g.device))
    return project


def positive_definite_like(matrices, smallest, diagonal, dtype):
    """Each symmetric matrix drawn toward diagonal * I, (1 - a) A + a diagonal I, just enough that its smallest
    eigenvalue is the given matrices' smallest (and clear of what rounding to dtype does to an n x n matrix): every
    eigenvalue moves toward diagonal, no element passes the given diagonal's largest or crosses 0, so values
    within [0, 1] stay there (a kernel matrix, a correlation), and a matrix already clear of it is left alone."""
    n = matrices.shape[-1]
    floor = min(max(smallest, 8 * n * torch.finfo(dtype).eps * diagonal), diagonal)
    lowest = torch.linalg.eigvalsh(matrices).min(dim=-1).values
    share = ((floor - lowest) / (diagonal - lowest).clamp(min=1e-300)).clamp(0.0, 1.0)[..., None, None]
    eye = torch.eye(n, dtype=matrices.dtype, device=matrices.device)
    return (1 - share) * matrices + share * diagonal * eye


def lattice_step(values, dtype, smallest=None, largest=None):
    """1.0 where every value is an integer, and the dtype could hold values between them there (see
    LATTICE_COARSER); else 0.0. Only integers may be indices or counts: values on a grid of another step (tenths,
    quarters, a narrower dtype's numbers) are real numbers that happen to be round, and are differenced. values:
    finite (found's); smallest and largest: theirs, where already known."""
    # Its smallest and largest value say what the distinct values would (two of them at least, and how large),
    # without sorting them: torch.unique was a fifth of a large check's time.
    if smallest is None:
        smallest, largest = values.min().item(), values.max().item()
    if smallest == largest:
        return 0.0
    if LATTICE_COARSER * torch.finfo(dtype).eps * max(abs(smallest), abs(largest)) > 1.0:
        return 0.0
    head = values[:PROBED]  # a value off the lattice is usually among the first: then no pass over them all
    if not bool((head == head.round()).all()):
        return 0.0
    return 1.0 if bool((values == values.round()).all()) else 0.0


# A check asks for the contract of the same values several times (its truth, its notes, the values it makes up from
# them): within one run of the checks (remembered), each tensor's is found once. The checker never hands its own
# values to the op (every call is on fresh copies), and the version counter guards against any other change.
_REMEMBERED = []


class remembered:
    """Within this block, found(t) is worked out once for each tensor (as long as its version is the same)."""

    def __enter__(self):
        _REMEMBERED.append({})
        return self

    def __exit__(self, *exc):
        _REMEMBERED.pop()
        return False


def found(t):
    """The contract t's values hold: NOTHING for anything but a floating-point tensor of finite values."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() < 2:
        return NOTHING
    if not _REMEMBERED:
        return _found(t)
    memo = _REMEMBERED[-1]
    key = id(t)
    if key in memo:
        kept, version, contract = memo[key]
        if kept() is t and version == t._version:
            return contract
    contract = _found(t)
    memo[key] = (weakref.ref(t), t._version, contract)
    return contract


# The first elements, or the first row, looked at before all of them: a property most values lack is usually
# seen to be lacking there, and then the pass over every element (a large input's check asked for several) is
# never made. Each probe looks at a part of what the full test looks at, so it decides only where the full test
# would decide alike.
PROBED = 64


def _found(t):
    x = t.detach().double()
    if not all_finite(x):
        return NOTHING
    tol = tolerance(t.dtype)
    smallest, biggest = (v.item() for v in torch.aminmax(x))
    largest = max(abs(smallest), abs(biggest))
    if largest == 0.0:
        return NOTHING
    square = x.dim() >= 2 and x.shape[-1] == x.shape[-2] >= 2
    symmetric = square and mirrored(x, tol * largest)
    positive_definite = symmetric and bool((torch.linalg.cholesky_ex(x).info == 0).all())
    row = x.shape[-1]  # the length of a row, along the last dimension
    first = x[(0,) * (x.dim() - 1)]  # the first row (a view)
    # (the probes allow float64's rounding of a row's sum besides tol: a row the full test takes is never refused)
    margin = 1e-9 * (1.0 + first.abs().sum().item())
    rows_sum_to_one = (row >= 2 and abs(first.sum().item() - 1) <= tol + margin
                       and bool(((x.sum(dim=-1) - 1).abs() <= tol).all()))
    unit_rows = (row >= 2 and not rows_sum_to_one and abs(first.norm().item() - 1) <= tol + margin
                 and bool(((x.norm(dim=-1) - 1).abs() <= tol).all()))
    comparisons = x.numel() - x.numel() // row
    sorted_ = 0
    if comparisons >= SORTED_COMPARISONS:
        head = first.diff()
        # steps of both signs in the first row: neither ascending nor descending, whatever the rest holds
        if not (bool((head > 0).any()) and bool((head < 0).any())):
            steps = x.diff(dim=-1)
            if bool((steps != 0).any()):
                sorted_ = 1 if bool((steps >= 0).all()) else -1 if bool((steps <= 0).all()) else 0
    # A constant tensor (a weight of ones) says nothing of a range.
    non_negative = smallest >= 0.0 and biggest > smallest
    return Contract(symmetric=symmetric, positive_definite=positive_definite, rows_sum_to_one=rows_sum_to_one,
                    unit_rows=unit_rows, sorted=sorted_, step=lattice_step(x.reshape(-1), t.dtype, smallest, biggest),
                    non_negative=non_negative, unit_interval=non_negative and largest <= 1.0,
                    smallest=torch.linalg.eigvalsh(x).min().item() if positive_definite else 0.0,
                    diagonal=x.diagonal(dim1=-2, dim2=-1).max().item() if positive_definite else 0.0)


def mirrored(x, allowed):
    """Whether x (float64, its last two dimensions square) equals its transpose within allowed: the first row
    against the first column first, then every element."""
    if (x[..., 0, :] - x[..., :, 0]).abs().max().item() > allowed:
        return False
    return (x - x.transpose(-1, -2)).abs().max().item() <= allowed
