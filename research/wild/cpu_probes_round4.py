"""
Round 4 of the CPU suites: each finding of the plugin, decided in plain torch
===========================================================================

    PYTHONPATH=SITE python research/wild/cpu_probes_round4.py NAME    # SITE: the release's --target folder

The libraries (their unmodified suites run plain and under `pytest -p pytest_backward_check --backward-check`,
defaults; the record is benchmarks/results/cpu_suites_round4.log): roma 1.6.0, torch-interpol 0.2.6,
snntorch 0.9.4, xitorch 0.5.1 (with scipy 1.17.1), pytorch-revgrad 0.2.0. Beside them, torch-struct 0.5's two
real bugs that issue 56 reported from its round three, probed here (its suite under the plugin: the same log). Each probe calls the library's
Function as the checker did and as the library's own callers do, and answers with one line, PROBE_MARK and
JSON {"kind": "real" | "by design" | "false alarm", "evidence": ...}, in the sense of research/wild/cpu_probes.py.
No probe imports the checker. The xitorch probes need the release's test folder on XITORCH_TESTS (for its
test modules), the others only the release.
"""
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The probes' shared vocabulary and helpers, as the first rounds' probes define them.
from cpu_probes import BY_DESIGN, F64, FALSE_ALARM, PROBE_MARK, REAL, answer, seeded  # noqa: E402, F401
from cpu_probes import largest_gap as rel  # noqa: E402


def directional_fd(f, xs, dirs, step=1e-6):
    """d/de sum(f(x + e d)) by central differences, f returning a scalar; xs, dirs: lists of float64 tensors."""
    with torch.no_grad():
        plus = f(*[x + step * d for x, d in zip(xs, dirs)])
        minus = f(*[x - step * d for x, d in zip(xs, dirs)])
    return float((plus - minus) / (2 * step))


def raised(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001
        return f"{type(error).__name__}: {' '.join(str(error).split())[:140]}"
    return None


# ---------------------------------------------------------------------------
# torch-interpol 0.2.6 (balbasty/torch-interpol at tag 0.2.6)
# ---------------------------------------------------------------------------

PUSH_SNIPPET = r"""
import sys, time, torch
from interpol.autograd import GridPush
last = int(sys.argv[1])
g = torch.Generator().manual_seed(5)
grid = torch.rand(19, 3, 3, last, generator=g, dtype=torch.float64) * 2
inp = torch.randn(19, 1, 3, 3, generator=g, dtype=torch.float64)
t = time.perf_counter()
GridPush.apply(inp, grid, [3, 3], 1, 0, True)
print(f"{time.perf_counter() - t:.2f}")
"""


def probe_interpol_push_coordinate_dim():
    """GridPush (interpolation 1, bound 0, shape (3, 3)): the check 'ran past --backward-check-timeout (600 s), in
    the call: the forward with `grid` frozen (on inputs grown to (19, 1, 3, 3), (19, 3, 3, 21))'. The grid's last
    dimension is its coordinates' count D, which must be len(shape) (pushpull.py: 'grid: (B, *spatial_in, D)',
    'shape: List{D}[int]', and `dim = grid.shape[-1]`); the checker grew it from 2 to 21, and a linear spline
    then visits 2**21 corners per point (nd.py's cartesian_prod over range(order + 1) per dimension)."""
    from interpol import grid_push
    from interpol.autograd import GridPush
    timings = {}
    for last, limit in ((2, 60), (21, 30)):
        try:
            done = subprocess.run([sys.executable, "-c", PUSH_SNIPPET, str(last)], capture_output=True, text=True,
                                  timeout=limit)
            timings[last] = f"{float(done.stdout.split()[-1]):.2f} s" if done.returncode == 0 else \
                f"raises ({done.stderr.strip().splitlines()[-1][:100]})"
        except subprocess.TimeoutExpired:
            timings[last] = f"no answer in {limit} s"
    # the backward where the contract holds (D = len(shape) = 2), grown as the checker grew the batch: finite
    # differences in float64 along a random direction, under a random grad_output
    inp, grid = seeded(19, 1, 3, 3, seed=1), seeded(19, 3, 3, 2, seed=2).mul(0.4).add(1.0)
    grad_output = seeded(19, 1, 3, 3, seed=3)
    di, dg = seeded(*inp.shape, seed=4), seeded(*grid.shape, seed=5)
    a, b = inp.clone().requires_grad_(), grid.clone().requires_grad_()
    out = GridPush.apply(a, b, [3, 3], 1, 0, True)
    ga, gb = torch.autograd.grad(out, (a, b), grad_output)
    analytic = float((ga * di).sum() + (gb * dg).sum())
    numeric = directional_fd(lambda x, y: (grid_push(x, y, [3, 3], interpolation=1, bound=0,
                                                     extrapolate=True) * grad_output).sum(), [inp, grid], [di, dg])
    ok = timings[21].startswith("no answer") and not timings[2].startswith(("no", "raises")) \
        and abs(analytic - numeric) <= 1e-6 * max(1.0, abs(numeric))
    evidence = (f"the forward on (19, 1, 3, 3) with a grid of last dimension 2 (= len(shape), the contract): "
                f"{timings[2]}; with last dimension 21 (the checker's grown grid): {timings[21]} (2**21 = 2,097,152 "
                f"spline corners a point); where D = 2 the backward along a random direction under a random "
                f"grad_output gives {analytic:.9f}, finite differences {numeric:.9f}")
    return (FALSE_ALARM if ok else REAL), evidence


# ---------------------------------------------------------------------------
# snntorch 0.9.4 (jeshraghian/snntorch at tag v0.9.4)
# ---------------------------------------------------------------------------

def probe_snntorch_atan():
    """surrogate.ATan, 'a wrong formula': the forward is a Heaviside step, the backward the arctan surrogate,
    on purpose (surrogate.py's docstring: 'Backward pass: Gradient of shifted arc-tan function')."""
    from snntorch.surrogate import ATan
    alpha = 2.0
    u = seeded(64, seed=11, dtype=torch.float32)  # float32, as the suite calls it
    u = u[u.abs() > 1e-3]  # away from the step
    grad_output = seeded(*u.shape, seed=12, dtype=torch.float32)
    x = u.clone().requires_grad_()
    (g,) = torch.autograd.grad(ATan.apply(x, alpha), x, grad_output)
    step = 1e-6
    with torch.no_grad():
        fd = (ATan.apply(u + step, alpha) - ATan.apply(u - step, alpha)) / (2 * step) * grad_output
    surrogate = torch.func.grad(lambda v: (torch.atan(torch.pi / 2 * alpha * v) / torch.pi * grad_output).sum())(u)
    evidence = (f"the true derivative of the step is 0 away from 0 (finite differences: max |.| = {float(fd.abs().max()):.1e}); "
                f"the backward gives max |.| = {float(g.abs().max()):.3f}, and equals the derivative of the documented "
                f"surrogate (1/pi) arctan(pi U alpha / 2) to {rel(g, surrogate):.1e} (relative): a surrogate gradient, "
                f"snntorch's purpose (surrogate.py, ATan.backward)")
    return (BY_DESIGN if rel(g, surrogate) < 1e-6 and float(fd.abs().max()) == 0.0 else REAL), evidence


# ---------------------------------------------------------------------------
# pytorch-revgrad 0.2.0 (janfreyberg/pytorch-revgrad at 449fa76, its 0.2.0 version bump; no tag)
# ---------------------------------------------------------------------------

def probe_revgrad():
    """RevGrad, 'a wrong formula': the identity forward with the gradient multiplied by -alpha, the library's
    whole point (a gradient-reversal layer, functional.py: grad_input = -grad_output * alpha_)."""
    from pytorch_revgrad.functional import RevGrad
    x = seeded(8, 1, seed=21).requires_grad_()
    alpha = torch.tensor(0.7, dtype=F64)
    grad_output = seeded(8, 1, seed=22)
    (g,) = torch.autograd.grad(RevGrad.apply(x, alpha), x, grad_output)
    identity = rel(RevGrad.apply(x, alpha).detach(), x.detach())
    evidence = (f"forward is the identity ({identity:.0e} off); the backward returns -alpha * grad_output "
                f"({rel(g, -alpha * grad_output):.0e} off), against the identity's grad_output: a gradient reversal "
                f"layer (Ganin and Lempitsky), on purpose")
    return (BY_DESIGN if rel(g, -alpha * grad_output) == 0 and identity == 0 else REAL), evidence


# ---------------------------------------------------------------------------
# xitorch 0.5.1 (xitorch/xitorch at tag v0.5.1)
# ---------------------------------------------------------------------------

def probe_xitorch_options_consumed():
    """_RootFinder, _Quadrature, _SolveIVP: 'crashes: the forward: KeyError: 'method''. Each forward consumes
    its options dict (rootfinder.py line 309, quad.py line 133, solve_ivp.py line 106: config.pop("method")),
    and each public wrapper (rootfinder, equilibrium, minimize, quad, solve_ivp) hands it a dict made for that
    call (**fwd_options), so no caller applies the Function twice with one dict; the checker's replays do."""
    from xitorch.integrate import quad, solve_ivp
    from xitorch.integrate.quad import _Quadrature  # noqa: F401  (the Function the public call reaches)
    from xitorch.optimize import rootfinder
    from xitorch.optimize.rootfinder import _RootFinder
    lines, worst = [], 0.0

    # rootfinder: y = tanh(A y + b), in float64, against finite differences of the root
    def fcn(y, A, b):
        return torch.tanh(A @ y + b) - y
    A, b, y0 = seeded(4, 4, seed=31) * 0.3, seeded(4, seed=32), torch.zeros(4, dtype=F64)
    go, dA, db = seeded(4, seed=33), seeded(4, 4, seed=34), seeded(4, seed=35)

    def root(A_, b_):
        return rootfinder(fcn, y0, params=(A_, b_), method="broyden1", f_tol=1e-13, x_tol=1e-13, maxiter=500)
    Ar, br = A.clone().requires_grad_(), b.clone().requires_grad_()
    gA, gb = torch.autograd.grad(root(Ar, br), (Ar, br), go)
    analytic = float((gA * dA).sum() + (gb * db).sum())
    numeric = directional_fd(lambda a_, b_: (root(a_, b_) * go).sum(), [A, b], [dA, db], step=1e-5)
    worst = max(worst, abs(analytic - numeric) / abs(numeric))
    lines.append(f"rootfinder: backward {analytic:.8f}, finite differences {numeric:.8f}")

    # the checker's replay: the same options dict twice
    calls = []
    apply = _RootFinder.apply
    _RootFinder.apply = lambda *args: calls.append(args) or apply(*args)
    try:
        root(A, b)
    finally:
        _RootFinder.apply = apply
    args = calls[0]
    options = args[4]
    replay = raised(lambda: apply(*args))
    fresh = dict(options, method="broyden1")
    again = raised(lambda: apply(*args[:4], dict(fresh), *args[5:]))
    lines.append(f"rootfinder's options after its one call: {sorted(options)} (no 'method'); _RootFinder.apply again "
                 f"with that dict: {replay}; with a fresh copy of the caller's dict: {again or 'runs'}")

    # quad: int_xl^xu c sin(c x) dx, against finite differences in c, xl, xu
    def integrand(x, c):
        return c * torch.sin(c * x)
    c, xl, xu = torch.tensor([1.3, 0.4], dtype=F64), torch.tensor(0.2, dtype=F64), torch.tensor(1.7, dtype=F64)
    go2, dc, dl, du = seeded(2, seed=36), seeded(2, seed=37), seeded((), seed=38), seeded((), seed=39)

    def integral(c_, l_, u_):
        return quad(integrand, l_, u_, params=(c_,), method="leggauss", n=100)
    cr, lr, ur = c.clone().requires_grad_(), xl.clone().requires_grad_(), xu.clone().requires_grad_()
    g = torch.autograd.grad(integral(cr, lr, ur), (cr, lr, ur), go2)
    analytic = float(sum((gi * d).sum() for gi, d in zip(g, (dc, dl, du))))
    numeric = directional_fd(lambda *a: (integral(*a) * go2).sum(), [c, xl, xu], [dc, dl, du])
    worst = max(worst, abs(analytic - numeric) / abs(numeric))
    lines.append(f"quad: backward {analytic:.8f}, finite differences {numeric:.8f}")

    # solve_ivp: dy/dt = -k y, rk4, against finite differences in k and y0
    def rhs(t, y, k):
        return -k * y
    ts, y0i, k = torch.linspace(0, 1, 6, dtype=F64), torch.tensor([1.0, -0.5], dtype=F64), torch.tensor([0.8, 1.9],
                                                                                                       dtype=F64)
    go3, dy, dk = seeded(6, 2, seed=40), seeded(2, seed=41), seeded(2, seed=42)

    def ivp(y_, k_):
        return solve_ivp(rhs, ts, y_, params=(k_,), method="rk4")
    yr, kr = y0i.clone().requires_grad_(), k.clone().requires_grad_()
    g = torch.autograd.grad(ivp(yr, kr), (yr, kr), go3)
    analytic = float((g[0] * dy).sum() + (g[1] * dk).sum())
    numeric = directional_fd(lambda y_, k_: (ivp(y_, k_) * go3).sum(), [y0i, k], [dy, dk])
    worst = max(worst, abs(analytic - numeric) / abs(numeric))
    lines.append(f"solve_ivp (rk4): backward {analytic:.8f}, finite differences {numeric:.8f}")
    ok = worst < 1e-5 and replay is not None and "KeyError" in replay and again is None
    return (FALSE_ALARM if ok else REAL), "; ".join(lines) + f" (worst {worst:.1e} relative)"


def probe_xitorch_mcquad_objparams():
    """_MCQuad ('mh'), 'crashes: with a random grad_output: RuntimeError: The differentiated Tensor at index 0
    appears to not have been used in the graph'. mcquad passes the integrand's object parameters
    (pure_ffcn.objparams(): the very tensors the module reads) as the Function's tensor arguments, and the
    backward differentiates the module's output with respect to them (mcquad.py, aug_function); a fresh leaf of
    the same value in their place is a tensor the module never reads."""
    sys.path.insert(0, os.environ.get("XITORCH_TESTS", "."))
    import random
    from xitorch.integrate import mcquad
    from xitorch.integrate.mcquad import _MCQuad
    from xitorch._tests.test_integrate import MCQuadFcnModule, MCQuadLogProbNNModule, get_true_output
    torch.manual_seed(100)
    random.seed(100)
    w = torch.nn.Parameter(torch.tensor(1.2, dtype=F64))
    a = torch.tensor(0.3, dtype=F64).requires_grad_()
    x0 = torch.tensor(0.0, dtype=F64)
    options = dict(method="mh", step_size=0.6, nsamples=10000, nburnout=2)
    logp, fcn = MCQuadLogProbNNModule(w), MCQuadFcnModule(a)
    calls = []
    apply = _MCQuad.apply
    _MCQuad.apply = lambda *args: calls.append(args) or apply(*args)
    try:
        epf = mcquad(fcn.forward, logp.forward, x0, fparams=[], pparams=[], **dict(options))
    finally:
        _MCQuad.apply = apply
    grad_output = torch.tensor(-1.37, dtype=F64)  # a random, non-unit grad_output
    gw, ga = torch.autograd.grad(epf, (w, a), grad_output)
    tw, ta = torch.autograd.grad(get_true_output(w, a), (w, a), grad_output)
    args = calls[0]
    tensors = [i for i, x in enumerate(args) if isinstance(x, torch.Tensor) and x.requires_grad]
    identity = [args[i] is a or args[i] is w for i in tensors]
    # the same call with each tensor argument replaced by a fresh leaf of the same value
    swapped = list(args)
    swapped[6] = {k: v for k, v in options.items() if k != "method"}
    for i in tensors:
        swapped[i] = args[i].detach().clone().requires_grad_()
    torch.manual_seed(100)
    out = apply(*swapped)
    crash = raised(lambda: torch.autograd.grad(out, [swapped[i] for i in tensors], grad_output))
    # the same backward with the deterministic sampler the test uses for its gradient check: exact to quadrature
    calls1 = []
    _MCQuad.apply = lambda *args: calls1.append(args) or apply(*args)
    try:
        epf1 = mcquad(fcn.forward, logp.forward, x0, fparams=[], pparams=[], method="_dummy1d", nsamples=100,
                      lb=-float("inf"), ub=float("inf"))
    finally:
        _MCQuad.apply = apply
    swapped1 = list(calls1[0])
    swapped1[6] = dict(nsamples=100, lb=-float("inf"), ub=float("inf"))
    for i in tensors:
        swapped1[i] = calls1[0][i].detach().clone().requires_grad_()
    out1 = apply(*swapped1)
    crash1 = raised(lambda: torch.autograd.grad(out1, [swapped1[i] for i in tensors], grad_output))
    dw, da = torch.autograd.grad(epf1, (w, a), grad_output)
    exact = max(abs(float(dw) - float(tw)) / abs(float(tw)), abs(float(da) - float(ta)) / abs(float(ta)))
    ok = crash is not None and "not have been used in the graph" in crash and all(identity) and exact < 1e-8 \
        and crash1 is not None and "not have been used in the graph" in crash1 \
        and abs(float(gw) - float(tw)) < 0.1 * abs(float(tw)) and abs(float(ga) - float(ta)) < 0.1 * abs(float(ta))
    evidence = (f"through the public mcquad (method 'mh', the test's call) under grad_output -1.37 the backward gives "
                f"d/dw {float(gw):.4f}, d/da {float(ga):.4f} (a Monte Carlo estimate; exact {float(tw):.4f}, {float(ta):.4f}), "
                f"and with the test's deterministic sampler '_dummy1d' {float(dw):.10f}, {float(da):.10f} ({exact:.1e} "
                f"off the exact); "
                f"the Function's tensor arguments are the modules' own tensors ({identity}); with fresh leaves of the "
                f"same values in their place, as the checker's call, the backward raises {crash} (and with '_dummy1d': "
                f"{(crash1 or 'no error')[:60]}...)")
    return (FALSE_ALARM if ok else REAL), evidence


# ---------------------------------------------------------------------------
# pytorch-struct (torch-struct 0.5 on PyPI, harvardnlp/pytorch-struct): two real bugs of issue 56's round three,
# each decided here in plain torch
# ---------------------------------------------------------------------------

def probe_torch_struct_simplex_project():
    """semirings.sparse_max._SimplexProject, 'a wrong formula': the forward is x.w* - ||w*|| (w* the projection of
    x onto the simplex), the backward returns w*, the gradient of the x.w* - 1/2 ||w*||^2 version."""
    from torch_struct import LinearChain, SparseMaxSemiring
    from torch_struct.semirings.sparse_max import _SimplexProject, project_simplex
    x, direction, weights = seeded(4, 6, seed=41), seeded(4, 6, seed=42), seeded(4, seed=43)
    leaf = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(_SimplexProject.apply(leaf, -1), leaf, weights)
    backward = float((g * direction).sum())
    fd = directional_fd(lambda v: (_SimplexProject.apply(v, -1) * weights).sum(), [x], [direction])

    def half_norm_squared(v):  # the version whose gradient w* is (by the envelope theorem)
        w = project_simplex(v, -1)
        return (((v * w).sum(-1) - 0.5 * (w * w).sum(-1)) * weights).sum()
    fd_half = directional_fd(half_norm_squared, [x], [direction])
    # Through the public API, as the suite's test_sparse_max calls it: LinearChain(SparseMaxSemiring).sum.
    public_gaps = []
    for seed in range(5):
        scores, along, weighting = seeded(2, 5, 3, 3, seed=50 + seed), seeded(2, 5, 3, 3, seed=60 + seed), \
            seeded(2, seed=70 + seed)
        chain = LinearChain(SparseMaxSemiring)
        leaf = scores.clone().requires_grad_()
        (gs,) = torch.autograd.grad((chain.sum(leaf) * weighting).sum(), leaf)
        truth = directional_fd(lambda v: (chain.sum(v) * weighting).sum(), [scores], [along])
        public_gaps.append(abs(float((gs * along).sum()) - truth) / abs(truth))
    evidence = (f"along a random direction under a random grad_output, finite differences say {fd:.4f}, the backward "
                f"{backward:.4f}; finite differences of x.w* - 1/2 ||w*||^2 say {fd_half:.4f}: the backward is that "
                f"version's gradient (sparse_max.py, _SimplexProject.forward subtracts w_star.norm(p=2)). Through "
                f"LinearChain(SparseMaxSemiring).sum on five random inputs, the gradient is "
                f"{min(public_gaps):.1%} to {max(public_gaps):.1%} off finite differences")
    return (REAL if abs(fd - backward) > 1e-3 * abs(fd) and abs(fd_half - backward) < 1e-6 * abs(fd) else FALSE_ALARM), \
        evidence


def probe_torch_struct_checkpoint_shard():
    """semirings.checkpoint.CheckpointShardSemiring's _Check, 'crashes on a grad_output laid out otherwise': its
    backward calls grad_output.view(-1, ...), which a non-contiguous grad_output refuses."""
    from torch_struct import CheckpointShardSemiring, LinearChain, LogSemiring
    semiring = CheckpointShardSemiring(LogSemiring, 1)
    seen = []
    matmul = semiring.matmul

    def spy(a, b):  # the shapes LinearChain hands the Function, as the suite's test_lc_custom calls it
        seen.append((a.detach(), b.detach()))
        return matmul(a, b)
    semiring.matmul = staticmethod(spy)
    LinearChain(semiring).sum(seeded(2, 5, 3, 3, seed=81).requires_grad_())
    semiring.matmul = matmul
    a, b = (t.clone().requires_grad_() for t in seen[0])
    grad_output = seeded(1, 2, 8, 3, 3, seed=82)[:, :, :a.shape[2]]  # the first rows of a larger batch: a split
    contiguous = grad_output.contiguous()
    got = torch.autograd.grad(semiring.matmul(a, b), [a, b], contiguous)
    truth = torch.autograd.grad(LogSemiring.matmul(a, b), [a, b], contiguous)
    failure = raised(lambda: torch.autograd.grad(semiring.matmul(a, b), [a, b], grad_output))
    truth_strided = torch.autograd.grad(LogSemiring.matmul(a, b), [a, b], grad_output)
    evidence = (f"on the shapes LinearChain hands it ({tuple(a.shape)}), with a contiguous grad_output the gradients "
                f"match LogSemiring.matmul's ({max(rel(x, y) for x, y in zip(got, truth)):.0e} off); with the same "
                f"values as rows of a larger batch (strides {grad_output.stride()}) it raises {failure}, where "
                f"LogSemiring.matmul's backward gives the same gradients "
                f"({max(rel(x, y) for x, y in zip(truth_strided, truth)):.0e} off) (checkpoint.py, unaccumulate_)")
    return (REAL if failure else FALSE_ALARM), evidence


PROBES = {name[len("probe_"):]: fn for name, fn in globals().items() if name.startswith("probe_")}


def main(argv):
    return answer(PROBES, argv, "cpu_probes_round4.py", timed=True)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
