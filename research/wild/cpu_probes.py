"""
The probes of research/wild/cpu_suites.py: each finding of the plugin, decided in plain torch
=========================================================================================

    python research/wild/cpu_probes.py NAME      # with the suite's release on PYTHONPATH (cpu_suites.py sets it)

Each probe calls the library's Function as the checker did, and again as the library's own callers do,
and answers with one line, PROBE_MARK and JSON: {"kind": "real" | "by design" | "false alarm",
"evidence": a sentence with its numbers}. "real": the backward is wrong for a grad_output, layout or
input that its callers can make. "by design": the library wrote the behaviour on purpose, at the line
linked, and its callers never meet the case where it is wrong. "false alarm": the backward is right
for every input its callers give; the checker made an input or a call outside that contract.

No probe imports the checker: each stands on plain torch, so that it says something the checker
cannot have said to itself.
"""
import json
import sys
import time

import torch

PROBE_MARK = "@@PROBE "
REAL, BY_DESIGN, FALSE_ALARM = "real", "by design", "false alarm"
F64 = torch.float64


def seeded(*shape, seed, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def largest_gap(a, b):
    """max |a - b| over max |b|: how far a is from b, relative."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def central_difference(f, x, direction, step=1e-6):
    """The derivative of the scalar f at x along direction, by central differences (x: float64)."""
    with torch.no_grad():
        return float((f(x + step * direction) - f(x - step * direction)) / (2 * step))


def raised(call):
    """'TypeName: message' of what call() raised, or None."""
    try:
        call()
    except Exception as error:  # noqa: BLE001  (any refusal is the answer)
        return f"{type(error).__name__}: {' '.join(str(error).split())[:120]}"
    return None


# ---------------------------------------------------------------------------
# torchdiffeq 0.2.5 (rtqichen/torchdiffeq at a88aac5, the tree 0.2.5's wheel was built from)
# ---------------------------------------------------------------------------

TORCHDIFFEQ = "https://github.com/rtqichen/torchdiffeq/blob/a88aac5/torchdiffeq/_impl"


class Decay(torch.nn.Module):
    """dy/dt = -a * y + b: two parameters that odeint_adjoint finds on the module."""
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor([0.7, 1.3], dtype=F64))
        self.b = torch.nn.Parameter(torch.tensor([0.2, -0.4], dtype=F64))

    def forward(self, t, y):
        return -self.a * y + self.b


def probe_torchdiffeq_adjoint_frozen():
    """OdeintAdjointMethod, 'crashes' with one of adjoint_params frozen: the public odeint_adjoint drops every
    parameter that does not require grad before it calls the Function, so no caller makes that call."""
    from torchdiffeq import odeint, odeint_adjoint
    from torchdiffeq._impl.adjoint import OdeintAdjointMethod
    func, y0, t = Decay(), seeded(2, seed=1).requires_grad_(), torch.linspace(0, 1, 5, dtype=F64)
    grad_output = seeded(5, 2, seed=2)
    options = dict(method="rk4", options=dict(step_size=0.05))
    calls = []
    apply = OdeintAdjointMethod.apply
    OdeintAdjointMethod.apply = lambda *args: calls.append(args) or apply(*args)  # records the public call
    try:
        func.b.requires_grad_(False)
        adjoint = torch.autograd.grad(odeint_adjoint(func, y0, t, **options), (y0, func.a), grad_output)
    finally:
        del OdeintAdjointMethod.apply  # Function's own again
    direct = odeint(func, y0, t, **options)
    plain = torch.autograd.grad(direct, (y0, func.a), grad_output)
    gap = max(largest_gap(x, y) for x, y in zip(adjoint, plain))
    passed = calls[0][14:]
    # the checker's call: the same arguments, with b among adjoint_params though frozen
    as_checked = calls[0][:14] + (func.a, func.b)
    refusal = raised(lambda: torch.autograd.grad(apply(*as_checked), y0, grad_output))
    if refusal is None or any(p is func.b for p in passed) or gap > 1e-5:
        return REAL, (f"odeint_adjoint passed {len(passed)} parameter(s); with b frozen among them the backward "
                      f"raised {refusal}; adjoint against odeint's gradient: {gap:.2g}")
    return FALSE_ALARM, (f"called as the checker did (b frozen, still among adjoint_params) the backward raises "
                         f"{refusal}; but odeint_adjoint filters out every parameter that does not require grad "
                         f"({TORCHDIFFEQ}/adjoint.py#L191) and passed only a, and with b frozen its gradients match "
                         f"odeint's (rk4, no adjoint) to {gap:.1g}: an input frozen that no caller freezes")


def probe_torchdiffeq_unchecked_assign():
    """_UncheckedAssign: writes the value into scratch in place, on purpose ('sneak past the version checker'), and
    hands the overwritten slot's gradient back to scratch, which is wrong for a slot that held a value the output
    no longer depends on, and harmless in its one caller, which writes each slot of a fresh torch.empty once."""
    from torchdiffeq import odeint
    from torchdiffeq._impl.rk_common import _UncheckedAssign
    scratch = seeded(2, 3, seed=3).requires_grad_()
    before = scratch.detach().clone()
    value = seeded(2, seed=4).requires_grad_()
    out = _UncheckedAssign.apply(scratch, value, (..., 1))
    written = float((scratch.detach() - before).abs().max())
    grad_output = seeded(2, 3, seed=5)
    d_scratch, _ = torch.autograd.grad(out, (scratch, value), grad_output)
    overwritten = float(d_scratch[..., 1].abs().max())  # the output does not depend on scratch[..., 1]: truly 0
    # its caller: every slot of k = torch.empty(...) written once; the gradient through a whole solve
    func, y0, t = Decay(), seeded(2, seed=6), torch.linspace(0, 1, 5, dtype=F64)
    direction, weights = seeded(2, seed=7), seeded(5, 2, seed=8)
    solve = lambda y: (odeint(func, y, t, method="rk4", options=dict(step_size=0.05)) * weights).sum()  # noqa: E731
    y = y0.clone().requires_grad_()
    (d_y0,) = torch.autograd.grad(solve(y), y)
    along = float(d_y0 @ direction)
    differenced = central_difference(solve, y0, direction)
    gap = abs(along - differenced) / abs(differenced)
    if written == 0 or gap > 1e-6:
        return REAL, f"scratch changed by {written:.2g}; odeint's gradient against finite differences: {gap:.2g}"
    return BY_DESIGN, (f"the forward writes the value into the caller's scratch (changed by {written:.2g}), on "
                       f"purpose ({TORCHDIFFEQ}/rk_common.py#L33: 'sneak past the version checker'), and the "
                       f"backward hands scratch the overwritten slot's gradient (up to {overwritten:.2g}, truly 0): "
                       f"the checker is right about the op alone; its one caller writes each slot of a fresh "
                       f"torch.empty buffer once ({TORCHDIFFEQ}/rk_common.py#L67-L79), so that gradient reaches "
                       f"nothing, and odeint's gradient matches finite differences to {gap:.1g}")


def probe_torchdiffeq_stitch_gradient():
    """_StitchGradient: returns `out` (the next float after x1, computed without a graph) and hands its gradient
    to x1 as if out were x1: a straight-through gradient, on purpose."""
    from torchdiffeq._impl.misc import _nextafter
    x1 = torch.tensor(0.25, dtype=F64, requires_grad=True)
    out = _nextafter(x1, x1 + 1)
    (d_x1,) = torch.autograd.grad(out, x1, torch.tensor(3.0, dtype=F64))
    ulps = float((out.detach() - x1.detach()) / torch.finfo(F64).eps / 0.25)
    if float(d_x1) != 3.0:
        return REAL, f"x1's gradient is {float(d_x1)}, not grad_output 3"
    return BY_DESIGN, (f"the forward returns out = nextafter(x1), {ulps:.0f} ulp past x1, computed without a graph, "
                       f"and the backward hands out's gradient to x1 unchanged (3 for 3), as if out were x1; the "
                       f"checker's difference of out along x1 is 0 (out is an input of its own), so it calls the "
                       f"formula wrong: a straight-through gradient on purpose ({TORCHDIFFEQ}/misc.py#L348-L364)")


# ---------------------------------------------------------------------------
# linear_operator 0.6.1 (cornellius-gp/linear_operator at v0.6.1)
# ---------------------------------------------------------------------------

LINEAR_OPERATOR = "https://github.com/cornellius-gp/linear_operator/blob/v0.6.1/linear_operator"


def positive_definite(n, seed):
    """A symmetric positive-definite n x n matrix, as a kernel matrix is."""
    root = seeded(n, n, seed=seed)
    return root @ root.mT / n + torch.eye(n, dtype=F64)


def symmetric_contract(fn, matrix, seed, design):
    """The matrix's gradient from fn's backward, against central differences: along symmetric directions (the
    input's contract: its callers pass symmetric positive-definite matrices) and along one that leaves it (a
    general direction, as the checker steps). (kind, evidence)."""
    grad_output_shape = fn(matrix).shape
    grad_output = seeded(*grad_output_shape, seed=seed)
    weighed = lambda a: (fn(a) * grad_output).sum()  # noqa: E731
    leaf = matrix.clone().requires_grad_()
    (gradient,) = torch.autograd.grad(fn(leaf), leaf, grad_output)
    gaps = []
    for k in range(6):
        general = seeded(*matrix.shape, seed=seed + 1 + k)
        symmetric = (general + general.mT) / 2
        along = float((gradient * symmetric).sum())
        gaps.append(abs(along - central_difference(weighed, matrix, symmetric)) / abs(along))
    general = seeded(*matrix.shape, seed=seed + 9)
    along = float((gradient * general).sum())
    off = abs(along - central_difference(weighed, matrix, general)) / abs(along)
    asymmetry = largest_gap(gradient, gradient.mT)
    choice = "the symmetric one" if asymmetry < 1e-12 else f"one that is not symmetric ({asymmetry:.1g} off)"
    if max(gaps) > 1e-6:
        return REAL, f"along symmetric directions the gradient is {max(gaps):.2g} off finite differences"
    return FALSE_ALARM, (f"along six symmetric directions, the contract of its callers (symmetric positive-definite "
                         f"matrices), the backward matches finite differences to {max(gaps):.1g}; along a general "
                         f"direction, which leaves the contract as the checker's directions do, it is {off:.2g} off: "
                         f"the forward reads only part of the matrix, so on symmetric inputs a gradient is right up to "
                         f"an antisymmetric part, and the library returns {choice} ({design})")


def probe_linear_operator_solve():
    """Solve, 'a wrong formula' for the matrix: its gradient is symmetric on purpose, and right for symmetric A."""
    from linear_operator import to_linear_operator
    rhs = seeded(8, 3, seed=20)
    return symmetric_contract(lambda a: to_linear_operator(a).solve(rhs), positive_definite(8, 21), 22,
                              f"{LINEAR_OPERATOR}/functions/_solve.py#L101-L107")


def probe_linear_operator_inv_quad():
    """InvQuad, 'a wrong formula' for the matrix: the same symmetric gradient, right for symmetric A."""
    from linear_operator import to_linear_operator
    rhs = seeded(8, 3, seed=30)
    return symmetric_contract(lambda a: to_linear_operator(a).inv_quad(rhs, reduce_inv_quad=False),
                              positive_definite(8, 31), 32, f"{LINEAR_OPERATOR}/functions/_inv_quad.py#L78-L82")


def probe_linear_operator_pivoted_cholesky():
    """PivotedCholesky, 'a wrong formula' on the checker's grown input: right on a positive-definite one as large,
    while the grown input (tiled and jittered) is no longer positive definite, nor symmetric."""
    from linear_operator import to_linear_operator
    matrix = positive_definite(57, 40)
    kind, evidence = symmetric_contract(lambda a: to_linear_operator(a).pivoted_cholesky(rank=5), matrix, 41,
                                        f"{LINEAR_OPERATOR}/functions/_pivoted_cholesky.py#L123-L144")
    tiled = matrix[:8, :8].repeat(8, 8)[:57, :57] + 0.01 * seeded(57, 57, seed=42)  # grown as a checker grows
    lowest = float(torch.linalg.eigvalsh((tiled + tiled.mT) / 2)[0])
    return kind, (f"{evidence}; on a 57 x 57 positive-definite matrix; an 8 x 8 one tiled to 57 x 57 and jittered "
                  f"is neither symmetric ({largest_gap(tiled, tiled.mT):.1g} off) nor positive definite (lowest "
                  f"eigenvalue {lowest:.2g})")


def probe_linear_operator_root_decomposition():
    """RootDecomposition, 'a wrong formula' on test_root_inv_decomposition's call: R with R R^T = A^-1 is one of many
    (any rotation of it is another), and the backward gives the gradient of a loss that reads R only through R R^T,
    as every caller does (a RootLinearOperator is R R^T). A loss on R itself, as the checker's grad_output makes, is
    not one a caller makes."""
    import linear_operator
    matrix = positive_definite(4, 90)
    initial, test = seeded(4, 5, seed=91), seeded(4, 5, seed=92)

    def root(a):
        return linear_operator.root_inv_decomposition(a, method="lanczos", initial_vectors=initial,
                                                      test_vectors=test).root.to_dense()
    weights = seeded(4, 4, seed=93)
    weights = weights + weights.mT
    on_root = seeded(*root(matrix).shape, seed=94)
    direction = seeded(4, 4, seed=95)
    direction = (direction + direction.mT) / 2
    answers = {}
    for name, loss in (("through R R^T", lambda r: (weights * (r @ r.mT)).sum()),
                       ("on R itself", lambda r: (on_root * r).sum())):
        leaf = matrix.clone().requires_grad_()
        (gradient,) = torch.autograd.grad(loss(root(leaf)), leaf)
        along = float(((gradient + gradient.mT) / 2 * direction).sum())
        truth = central_difference(lambda a: loss(root(a)), matrix, direction, step=1e-5)
        answers[name] = (truth, along, abs(along - truth) / abs(truth))
    through, itself = answers["through R R^T"], answers["on R itself"]
    if through[2] > 1e-5:
        return REAL, (f"a loss through R R^T, as callers make, gets a gradient {through[2]:.2g} off finite "
                      f"differences ({through[1]:.4g} against {through[0]:.4g})")
    return BY_DESIGN, (f"for a loss that reads the root only through R R^T, as every caller does, the matrix's "
                       f"gradient matches finite differences along a symmetric direction ({through[1]:.6g} against "
                       f"{through[0]:.6g}, {through[2]:.1g} off); for a loss on R itself, as the checker's "
                       f"grad_output is, it is {itself[2]:.2g} off ({itself[1]:.4g} against {itself[0]:.4g}): the "
                       f"backward builds the gradient of R R^T from R^-T / 2 on purpose "
                       f"({LINEAR_OPERATOR}/functions/_root_decomposition.py#L150-L158), the root being defined only "
                       f"up to a rotation")


def probe_linear_operator_inv_quad_logdet():
    """InvQuadLogdet (preconditioned), 'a wrong formula': the log-determinant is a stochastic estimate (stochastic
    Lanczos quadrature over settings.num_trace_samples random probe vectors), and the backward gives a Hutchinson
    estimate of the exact value's gradient with the same probes, not the derivative of the forward's own estimate.
    Through the public inv_quad_logdet, called as the suite's preconditioned test calls it, the matrix's gradient
    (its part through the Function and through the preconditioner together, as a caller gets it) nears the exact
    (K + I)^-1 as the probes grow, as one over their number's square root: an unbiased estimate, on purpose."""
    import linear_operator
    from linear_operator.operators import DenseLinearOperator
    points = seeded(50, 3, seed=100)
    kernel = (points[:, None, :] - points[None, :, :]).pow(2).sum(-1).mul(-1.0).exp()
    exact = torch.linalg.inv(kernel + torch.eye(50, dtype=F64))
    errors = {}
    for probes in (100, 1000, 10000):
        torch.manual_seed(101)  # the Function draws its probe vectors from torch's global generator
        leaf = kernel.clone().requires_grad_()
        with linear_operator.settings.num_trace_samples(probes), linear_operator.settings.max_cholesky_size(0), \
                linear_operator.settings.cg_tolerance(1e-8), linear_operator.settings.min_preconditioning_size(0), \
                linear_operator.settings.max_preconditioner_size(30):
            _, logdet = linear_operator.inv_quad_logdet(DenseLinearOperator(leaf).add_jitter(1.0), logdet=True)
        (gradient,) = torch.autograd.grad(logdet, leaf)
        errors[probes] = float(((gradient + gradient.mT) / 2 - exact).norm() / exact.norm())
    said = ", ".join(f"{errors[n]:.2g} with {n:,}" for n in errors)
    shrinks = errors[100] / errors[10000]
    if errors[10000] > 0.1 or shrinks < 5:
        return REAL, (f"the matrix's gradient does not near the exact one as the probes grow ({said} probe "
                      f"vectors, off (K + I)^-1, relative)")
    return BY_DESIGN, (f"the log-determinant is a stochastic estimate, and the backward the same probes' estimate of "
                       f"its exact gradient ({LINEAR_OPERATOR}/functions/_inv_quad_logdet.py#L183-L215), not the "
                       f"derivative of the forward's own estimate, which the checker's finite differences measure: "
                       f"through the public inv_quad_logdet, preconditioned as the suite's test calls it, the "
                       f"matrix's gradient is {said} probe vectors off the exact (K + I)^-1 (relative), "
                       f"{shrinks:.1f} times closer with 100 times the probes, as an unbiased estimate is")


# ---------------------------------------------------------------------------
# pytorch_wavelets 1.3.0 (fbcotter/pytorch_wavelets at 9a0c507, the tree 1.3.0's wheel was built from)
# ---------------------------------------------------------------------------

WAVELETS = "https://github.com/fbcotter/pytorch_wavelets/blob/9a0c507/pytorch_wavelets/dwt/lowlevel.py"
WAVELETS_ISSUE = "https://github.com/fbcotter/pytorch_wavelets/issues/65"


def highpass_gradient(inverse, lowpass, highpass, grad_output, lowpass_wants_grad):
    """The highpass coefficients' gradient through the inverse transform, zeros where autograd got none."""
    low = lowpass.clone().requires_grad_(lowpass_wants_grad)
    high = highpass.clone().requires_grad_()
    (gradient,) = torch.autograd.grad(inverse((low, [high])), high, grad_output, allow_unused=True)
    return torch.zeros_like(high) if gradient is None else gradient


def synthesis_gate(inverse, lowpass, highpass, seed, line):
    """SFB2D / SFB1D: with the lowpass frozen, is the highpass still given its gradient? (kind, evidence)"""
    grad_output = seeded(*inverse((lowpass, [highpass])).shape, seed=seed)
    frozen = highpass_gradient(inverse, lowpass, highpass, grad_output, lowpass_wants_grad=False)
    wanted = highpass_gradient(inverse, lowpass, highpass, grad_output, lowpass_wants_grad=True)
    direction = seeded(*highpass.shape, seed=seed + 1)
    weighed = lambda h: (inverse((lowpass, [h])) * grad_output).sum()  # noqa: E731
    truth = central_difference(weighed, highpass, direction, step=1e-3)  # the synthesis is linear in the highpass
    along_frozen, along_wanted = float((frozen * direction).sum()), float((wanted * direction).sum())
    if abs(along_frozen - truth) < 1e-3 * abs(truth):
        return FALSE_ALARM, "the highpass's gradient with the lowpass frozen matches finite differences"
    return REAL, (f"with the lowpass frozen, the highpass coefficients get no gradient (autograd takes zeros: "
                  f"{float(frozen.abs().max()):.2g} at most), though the output depends on them: along a random "
                  f"direction the derivative is {truth:.4g} by finite differences, {along_wanted:.4g} from the backward "
                  f"when the lowpass wants a gradient too, {along_frozen:.4g} when it does not; the backward computes "
                  f"both gradients only if ctx.needs_input_grad[0] ({WAVELETS}#L{line}); SFB1D's is reported as "
                  f"{WAVELETS_ISSUE}, open")


def probe_pytorch_wavelets_sfb2d():
    """SFB2D (DWTInverse), 'returns the wrong gradients': the highpass's gradient is dropped when the lowpass is
    frozen, as in the suite's own test_commutativity, which inverts coefficients whose lowpass came from zeros."""
    from pytorch_wavelets import DWTInverse
    inverse = DWTInverse(wave="db2", mode="zero").double()
    return synthesis_gate(inverse, seeded(1, 2, 9, 9, seed=50), seeded(1, 2, 3, 9, 9, seed=51), 52, 685)


def probe_pytorch_wavelets_sfb1d():
    """SFB1D (DWT1DInverse), 'returns the wrong gradients': the same gate, in one dimension."""
    from pytorch_wavelets import DWT1DInverse
    inverse = DWT1DInverse(wave="db2", mode="zero").double()
    return synthesis_gate(inverse, seeded(2, 3, 17, seed=60), seeded(2, 3, 17, seed=61), 62, 734)


def adjoint_by_mode(transform, x, seed, what, line):
    """AFB / SFB in 'symmetric' and 'reflect' padding (inputs a few samples long, so that the border, where the
    modes differ, is much of the gradient): the backward runs the other filter bank in the same mode, the
    transform's adjoint only where the padding adds nothing to fold back ('zero'). The transform is linear in x, so
    central differences are exact up to rounding; each mode, the backward's derivative against them. (kind, evidence)"""
    answers = {}
    for mode in ("zero", "symmetric", "reflect"):
        f = transform(mode)
        start = x.clone().requires_grad_()
        grad_output = seeded(*f(start).shape, seed=seed)
        (gradient,) = torch.autograd.grad(f(start), start, grad_output)
        direction = seeded(*x.shape, seed=seed + 1)
        truth = central_difference(lambda v: (f(v) * grad_output).sum(), x, direction, step=1e-3)
        answers[mode] = (truth, float((gradient * direction).sum()))
    zero_truth, zero_backward = answers["zero"]
    wrong = [mode for mode in ("symmetric", "reflect")
             if abs(answers[mode][1] - answers[mode][0]) > 1e-6 * abs(answers[mode][0])]
    if abs(zero_backward - zero_truth) > 1e-6 * abs(zero_truth) or not wrong:
        return FALSE_ALARM, f"{what}: the backward matches finite differences in every padding mode"
    said = "; ".join(f"'{mode}' {answers[mode][0]:.4g} by finite differences, {answers[mode][1]:.4g} from the backward "
                     f"({abs(answers[mode][1] - answers[mode][0]) / abs(answers[mode][0]):.2g} off, relative)"
                     for mode in wrong)
    return REAL, (f"{what}, along a random direction under a random grad_output: {said}; 'zero' "
                  f"{zero_truth:.4g} and {zero_backward:.4g}, equal. The backward runs the other filter bank in the "
                  f"same mode ({WAVELETS}#L{line}), the transform's adjoint only for zero padding: the gradient of "
                  f"the samples a symmetric or reflecting pad copies is never folded back onto the border, so any "
                  f"loss on a transform in those modes gets a wrong gradient")


def probe_pytorch_wavelets_afb2d_modes():
    """AFB2D (DWTForward), 'a wrong formula' in the padding modes 'symmetric' and 'reflect'."""
    from pytorch_wavelets import DWTForward

    def transform(mode):
        forward = DWTForward(J=1, wave="db2", mode=mode).double()
        return lambda x: torch.cat([part.flatten(1) for part in (forward(x)[0], forward(x)[1][0])], -1)
    return adjoint_by_mode(transform, seeded(1, 2, 8, 8, seed=70), 71, "DWTForward", 356)


def probe_pytorch_wavelets_afb1d_modes():
    """AFB1D (DWT1DForward), 'a wrong formula' in the padding modes 'symmetric' and 'reflect'."""
    from pytorch_wavelets import DWT1DForward

    def transform(mode):
        forward = DWT1DForward(J=1, wave="db2", mode=mode).double()
        return lambda x: torch.cat([forward(x)[0], forward(x)[1][0]], -1)
    return adjoint_by_mode(transform, seeded(2, 3, 8, seed=72), 73, "DWT1DForward", 418)


def probe_pytorch_wavelets_sfb2d_modes():
    """SFB2D (DWTInverse), 'a wrong formula' in the padding modes 'symmetric' and 'reflect' (the lowpass wanting a
    gradient, so that the needs_input_grad[0] gate of the other finding is open)."""
    from pytorch_wavelets import DWTInverse
    lowpass = seeded(1, 2, 5, 5, seed=74).requires_grad_()

    def transform(mode):
        inverse = DWTInverse(wave="db2", mode=mode).double()
        return lambda high: inverse((lowpass, [high]))
    return adjoint_by_mode(transform, seeded(1, 2, 3, 5, 5, seed=75), 76, "DWTInverse, the highpass's gradient", 688)


def probe_pytorch_wavelets_sfb1d_modes():
    """SFB1D (DWT1DInverse), 'a wrong formula' in the padding modes 'symmetric' and 'reflect'."""
    from pytorch_wavelets import DWT1DInverse
    lowpass = seeded(2, 3, 6, seed=77).requires_grad_()

    def transform(mode):
        inverse = DWT1DInverse(wave="db2", mode=mode).double()
        return lambda high: inverse((lowpass, [high]))
    return adjoint_by_mode(transform, seeded(2, 3, 6, seed=78), 79, "DWT1DInverse, the highpass's gradient", 739)


PROBES = {name[len("probe_"):]: fn for name, fn in globals().items() if name.startswith("probe_")}


def answer(probes, argv, program, timed=False):
    """Runs the probe argv names and prints its answer after PROBE_MARK (with its seconds where timed): exit 0; 2 for
    a name not in probes, or a library under probe that is not importable (exit 1 would read as a finding)."""
    if len(argv) != 1 or argv[0] not in probes:
        print(f"usage: {program} NAME, NAME one of {', '.join(probes)}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        kind, evidence = probes[argv[0]]()
    except ModuleNotFoundError as error:
        print(f"{program}: {error.name} is not importable: put the suite's release on PYTHONPATH "
              f"(research/wild/cpu_suites.py --run does)", file=sys.stderr)
        return 2
    seconds = dict(seconds=round(time.perf_counter() - started, 1)) if timed else {}
    print(PROBE_MARK + json.dumps(dict(kind=kind, evidence=evidence, **seconds)), flush=True)
    return 0


def main(argv):
    return answer(PROBES, argv, "cpu_probes.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
