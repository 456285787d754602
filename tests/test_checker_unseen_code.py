"""Right code the checker had never seen, and the bugs beside it (issue 56's classes), each case made here.

- A backward that samples by design (a structured-prediction library's sampled marginals): each call the checker
  compares is seeded alike, so it is no "keeps state between calls", and its gradient, a sample, is not read as "a
  wrong formula": the report says the backward draws random numbers, in those words.
- A Function class made afresh for every call, its state in the closure (a convex-optimisation layer's solver
  info): the checker's repeat checks, which apply one class object twice as no caller does, are notes, not traps,
  where the class is made per call (check_backward's made_per_call; the plugin decides it from the suite).
- A softmax whose backward covers a hard-coded 16 columns, checked just past 16: 'covers only part of a large
  input', since it is right with the columns cut to 16, not 'a wrong formula'.
- A forward computed to a tolerance (a bisection's grid, as a normalizing flow inverts a transform), whose backward
  is the exact solution's: finite differences are stepped wider for the forward's own noise, measured from the op.
- Round numbers that are no index (a covariance factor of tenths) are differenced like any other values: see
  test_checker_contracts.py, test_round_values_that_are_not_integers_are_differenced.
- Complex inputs (an NUFFT library's Functions): see test_checker_complex.py.
- Round four (a solver library's suite): a forward that takes from its options dict gets the dict as its caller
  made it, afresh for each call; the tensors a callable object holds are the ones it reads, passed themselves.
"""
import inspect
import sys

import pytest
import torch
from chapter_scripts import DEVICE, REPO, seeded_randn
from checker_zoo import Dropout, dropout_reference, x35
from backward_check.tests.plugin_runs import row, run_pytest, suite_holds_cuda

sys.path.insert(0, str(REPO / "practice"))
from backward_check.report import DRAWS_IN_BACKWARD, MADE_PER_CALL  # noqa: E402
from backward_checker import UsageError, check_backward  # noqa: E402


class SampledMarginals(torch.autograd.Function):
    """The log-partition of each row, logsumexp(scores); its backward returns a one-hot sample drawn from the
    row's softmax (Gumbel-max) in place of the softmax itself, as a sampling semiring does: right in expectation,
    and a sample each call."""
    @staticmethod
    def forward(ctx, scores):
        ctx.save_for_backward(scores)
        return scores.logsumexp(dim=-1)

    @staticmethod
    def backward(ctx, grad_output):
        scores, = ctx.saved_tensors
        gumbel = -torch.empty_like(scores).exponential_().log()
        sample = torch.nn.functional.one_hot((scores + gumbel).argmax(dim=-1), scores.shape[-1]).to(scores.dtype)
        return grad_output[..., None] * sample


class NoisyGradient(torch.autograd.Function):
    """x * 3, whose backward adds a little noise it draws, as a differentially private or a perturbed gradient
    does: the same draws every call the checker seeds alike."""
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 3 + 1e-3 * torch.randn_like(grad_output)


@pytest.mark.parametrize("shape", [(4, 6), (3, 37)])
def test_a_backward_that_samples_is_said_to_draw_random_numbers(shape):
    """Before, two identical calls drew apart, and the backward was named 'keeps state between calls', with
    advice to use ctx.save_for_backward. Now neither state nor a wrong formula: a note that it draws, and the
    comparisons said as a sample's distance."""
    scores = seeded_randn(*shape, seed=3)
    for reference in (None, lambda s: s.logsumexp(dim=-1)):
        report = check_backward(SampledMarginals, scores, reference=reference)
        assert report.traps == [], str(report)
        assert report.noted(DRAWS_IN_BACKWARD), str(report)
        assert any("draws random numbers, so its gradient is a sample" in line for line in report.inconclusive)


def test_only_a_backward_that_draws_is_said_to():
    """The note is the backward's draws alone: a backward that adds noise it draws gets it; the legal zoo's dropout
    draws its mask in its forward, and its backward draws nothing: clean, with no such note."""
    report = check_backward(NoisyGradient, x35(), reference=lambda t: t * 3)
    assert report.noted(DRAWS_IN_BACKWARD), str(report)
    report = check_backward(Dropout, x35(), reference=dropout_reference)
    assert report.clean and report.decided and not report.noted(DRAWS_IN_BACKWARD), str(report)


def test_a_random_backward_with_a_write_into_grad_output_is_still_named():
    """Seeding alike hides no trap the draws do not decide: a sampling backward that scales grad_output in place
    is still named for it."""
    class SampledInPlace(SampledMarginals):
        @staticmethod
        def backward(ctx, grad_output):
            scores, = ctx.saved_tensors
            sample = torch.nn.functional.one_hot(torch.multinomial(scores.softmax(-1), 1)[..., 0],
                                                 scores.shape[-1]).to(scores.dtype)
            doubled = grad_output.mul_(2.0)  # the write: a sibling reading grad_output sees it doubled
            return (doubled / 2)[..., None] * sample

    report = check_backward(SampledInPlace, seeded_randn(4, 6, seed=4))
    assert "mutates grad_output in place" in report.traps, str(report)


def softmax_covering(block):
    """Softmax along the last dimension, whose backward, like a kernel with a hard-coded BLOCK of block columns
    (tl.arange(0, block), no loop over the rest), reduces over and writes only the first block columns."""
    def backward(ctx, grad_output):
        s, = ctx.saved_tensors
        g, y = grad_output[..., :block], s[..., :block]
        out = torch.zeros_like(s)
        out[..., :block] = y * (g - (g * y).sum(dim=-1, keepdim=True))
        return out

    def forward(ctx, x):
        s = x.softmax(dim=-1)
        ctx.save_for_backward(s)
        return s

    return type(f"SoftmaxCovering{block}", (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


@pytest.mark.parametrize("shape, dtype", [((4, 17), torch.float32), ((4, 20), torch.float32), ((3, 33), torch.float32),
                                          ((5, 12), torch.float32), ((4, 20), torch.float64)])
@pytest.mark.parametrize("reference", [None, lambda x: x.softmax(dim=-1)], ids=["differences", "reference"])
def test_a_block_hard_coded_just_past_its_size_covers_only_part(shape, dtype, reference):
    """Before, a softmax backward that covers 16 columns, checked just past 16 columns, was named 'a wrong formula'
    (every element is off: the row's sum misses the columns past the block). It is right with the columns cut to
    16, and the trap is named for that cause, at the given size (17, 20, 33, and in float64) or, within a block,
    grown (12)."""
    x = seeded_randn(*shape, seed=shape[1]).to(dtype)
    report = check_backward(softmax_covering(16), x, reference=reference)
    assert report.traps == ["covers only part of a large input"], str(report)
    assert "cut to 16" in str(report), str(report)


def test_a_softmax_that_covers_every_column_is_clean():
    """The same softmax with a block as wide as the row is clean: the cut sizes are tried only for a wrong
    gradient."""
    x = seeded_randn(4, 20, seed=20)
    assert check_backward(softmax_covering(1 << 20), x, reference=lambda t: t.softmax(dim=-1)).clean


def make_layer_function(scale=1.0):
    """A Function class made afresh for each call, as a layer library builds one in a closure: the forward keeps
    its inputs in the closure's dict (the solver's info), and the backward reads them there (scale: 1, or a
    planted bug in x's gradient)."""
    info = {}

    class Layer(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, a):
            info["x"], info["a"] = x.detach().clone(), a.detach().clone()
            return torch.tanh(x) * a

        @staticmethod
        def backward(ctx, grad_output):
            x, a = info["x"], info["a"]
            return scale * grad_output * a * (1 - torch.tanh(x) ** 2), grad_output * torch.tanh(x)

    return Layer


def layer(x, a):
    """The library's public layer: a fresh class every call."""
    return make_layer_function().apply(x, a)


def test_a_class_made_per_call_gives_each_call_its_own_gradient_through_its_layer():
    """The layer is right as its callers use it: two calls in one graph each get their solo gradient."""
    x1, x2, a = seeded_randn(3, 4, seed=1), seeded_randn(3, 4, seed=2), seeded_randn(3, 4, seed=3)
    leaves = [t.clone().requires_grad_(True) for t in (x1, x2)]
    g1, g2 = seeded_randn(3, 4, seed=4), seeded_randn(3, 4, seed=5)
    together = torch.autograd.grad((layer(leaves[0], a) * g1).sum() + (layer(leaves[1], a) * g2).sum(), leaves)
    for t, g, got in zip((x1, x2), (g1, g2), together):
        alone = t.clone().requires_grad_(True)
        assert torch.allclose(got, torch.autograd.grad((layer(alone, a) * g).sum(), alone)[0])


def test_a_class_made_per_call_has_notes_not_traps_for_its_repeat_checks():
    """One class object applied twice (the checker's repeat checks) meets the closure another call left: a trap for
    a class its callers reuse, a note for one made per call. A real bug beside it is still named."""
    x, a = seeded_randn(3, 4, seed=1), seeded_randn(3, 4, seed=3)
    assert check_backward(make_layer_function(), x, a).traps == ["keeps state between calls"]
    report = check_backward(make_layer_function(), x, a, made_per_call=True)
    assert report.clean and report.noted(MADE_PER_CALL), str(report)
    report = check_backward(make_layer_function(scale=2.0), x, a, made_per_call=True)
    assert report.traps == ["a wrong formula"], str(report)


# The suite's own copy of the layer's factory: the plugin records what a suite's module defines.
PER_CALL_SUITE = "import torch\n\n\n" + inspect.getsource(make_layer_function) + """

def test_layer():
    for _ in range(2):
        make_layer_function().apply(torch.randn(3, 4, requires_grad=True), torch.randn(3, 4)).sum().backward()


def test_reused_local():
    class Cached(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            Cached.kept = x.detach().clone()  # on the class: the next call overwrites it
            return x * x

        @staticmethod
        def backward(ctx, grad_output):
            return 2 * Cached.kept * grad_output

    x = torch.randn(3, 4, requires_grad=True)
    Cached.apply(x).sum().backward()
    Cached.apply(x).sum().backward()
"""


def test_the_plugin_checks_a_class_made_per_call_as_its_callers_use_it(tmp_path):
    """Under the plugin, a class made inside a function afresh for each call, never applied twice, is clean with
    a note; a class made inside a test and applied twice keeps its trap."""
    (tmp_path / "test_per_call.py").write_text(PER_CALL_SUITE)
    status, output = run_pytest(tmp_path, "--backward-check")
    assert status == 0, output
    layer_rows = row(output, "test_per_call.make_layer_function.<locals>.Layer", whole=True)
    cached_rows = row(output, "test_per_call.test_reused_local.<locals>.Cached", whole=True)
    if suite_holds_cuda():  # no process forked from the suite's can use its CUDA context: not checked, and said
        assert "not checked" in layer_rows[0] and "not checked" in cached_rows[0], output
        return
    assert layer_rows[0].rstrip().endswith("clean"), output
    assert "keeps state between calls" in cached_rows[0], output


def bisection_inverse(y, tol):
    """The inverse of x + tanh(x) / 2 (monotonic) by bisection to tol, as a normalizing flow inverts a transform:
    its output moves in steps of about tol, far coarser than float64's."""
    low, high = torch.full_like(y, -20.0), torch.full_like(y, 20.0)
    while bool(((high - low) > tol).any()):
        middle = (low + high) / 2
        below = middle + 0.5 * torch.tanh(middle) < y
        low, high = torch.where(below, middle, low), torch.where(below, high, middle)
    return (low + high) / 2


def inverse_by_bisection(tol=6e-7, slope_bug=1.0):
    """A Function whose forward bisects to tol and whose backward is the exact inverse's, 1 / f'(x) (times
    slope_bug: 1, or a planted bug)."""
    def forward(ctx, y):
        x = bisection_inverse(y.detach(), tol)
        ctx.save_for_backward(x)
        return x

    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return slope_bug * grad_output / (1 + 0.5 * (1 - torch.tanh(x) ** 2))

    return type("InverseByBisection", (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("tol", [6e-7, 1e-4])
@pytest.mark.parametrize("shape", [(4, 6), (3, 37)])
def test_a_forward_computed_to_a_tolerance_is_held_to_its_own_noise(shape, tol, dtype):
    """Before, finite differences at the dtype's step read a bisection's staircase as the slope: most columns
    rough (dropped as kinks), the few that agreed by chance wrong, and 'a wrong formula'. Now the forward's own
    noise is measured and the step widened for it: clean, and said so (undecided, not wrong, where the grid is so
    coarse that even the widened differences disagree with themselves); a backward off by 5% is still named."""
    y = seeded_randn(*shape, seed=11).to(dtype)
    report = check_backward(inverse_by_bisection(tol), y)
    # A grid of 1e-4 leaves finite differences only about its two-thirds power, 2e-3: where they disagree with
    # themselves by more than a verdict can stand, the check says it cannot decide, never a trap.
    assert report.clean and (report.decided or tol > 1e-5), str(report)
    if tol > 1e2 * torch.finfo(dtype).eps:
        assert "stepped wider where the forward moves in steps of its own" in report.checked, str(report)
    if tol < 1e-5:  # a coarser grid's differences are too loose to tell one cause from another
        assert check_backward(inverse_by_bisection(tol, slope_bug=1.05), y).traps == ["a wrong formula"]


class Adjoint(torch.autograd.Function):
    """The adjoint pattern (`f, *phi`): the forward runs f without a graph, and the backward runs f again and takes
    its gradient with respect to x and to the very tensors f reads, which the caller passes as phi."""
    @staticmethod
    def forward(ctx, f, x, *phi):
        ctx.f = f
        ctx.save_for_backward(x, *phi)
        with torch.no_grad():
            return f(x)

    @staticmethod
    def backward(ctx, grad_output):
        x, *phi = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            grads = torch.autograd.grad(ctx.f(x), (x, *phi), grad_output)
        return (None, *grads)


class AdjointFirstRowOnly(Adjoint):
    """A flow library's bug: the backward weights every row by the first row's grad_output."""
    @staticmethod
    def backward(ctx, grad_output):
        return Adjoint.backward(ctx, grad_output[:1].expand_as(grad_output))


def small_net():
    """A small network on the device the other tensors are drawn on (the GPU, where there is one)."""
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).double().to(DEVICE)


def closure_and_parameters():
    w, b = seeded_randn(3, 3, seed=6).double().requires_grad_(True), seeded_randn(3, seed=7).double().requires_grad_(True)

    def f(x):
        return torch.tanh(x @ w) * b
    return f, (w, b)


@pytest.mark.parametrize("make", ["module", "closure"])
def test_tensors_a_function_argument_reads_are_passed_themselves(make):
    """Before, the checker passed copies of a module's parameters (or of the tensors a function closes over),
    which f never reads: the backward's autograd.grad raised ('crashes'), and the table's advice to run the call
    was false. Now the very tensors go to the op, their values varied in place and restored: clean, and the
    first-row bug beside it named; the tensors hold their values after the check."""
    if make == "module":
        f = small_net()
        phi = tuple(f.parameters())
    else:
        f, phi = closure_and_parameters()
    x = seeded_randn(5, 3, seed=8).double()
    before = [t.detach().clone() for t in phi]
    report = check_backward(Adjoint, f, x, *phi)
    assert report.clean and report.decided, str(report)
    assert all(torch.equal(a, b) for a, b in zip(before, phi)) and all(t.requires_grad for t in phi)
    wrong = check_backward(AdjointFirstRowOnly, f, x, *phi)
    assert "crashes" not in wrong.traps and wrong.traps, str(wrong)
    assert all(torch.equal(a, b) for a, b in zip(before, phi))


def test_a_reference_for_tensors_a_function_reads_is_a_usage_error():
    f = small_net()
    with pytest.raises(UsageError, match="read by a function argument"):
        check_backward(Adjoint, f, seeded_randn(5, 3, seed=8).double(), *f.parameters(), reference=lambda *a: a[1])


# The plugin's worker imports the ops by name: the same Adjoint, in a module of the suite's own, beside a network.
ADJOINT_OPS = "import torch\n\n\n" + inspect.getsource(Adjoint) + """

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(3, 4)
        self.outer = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.outer(torch.tanh(self.inner(x)))
"""

ADJOINT_SUITE = """
import torch

from adjoint_ops import Adjoint, Net


def test_adjoint():
    torch.manual_seed(0)
    net = Net().double()
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    Adjoint.apply(net, x, *net.parameters()).sum().backward()
"""


def test_the_plugin_gives_the_op_the_parameters_its_module_argument_reads(tmp_path):
    """Under the plugin, the recorded call keeps the module and passes its own parameters, not copies: clean.
    Before, the copies made the backward's autograd.grad raise, and the row read 'TRAP crashes'."""
    (tmp_path / "adjoint_ops.py").write_text(ADJOINT_OPS)
    (tmp_path / "test_adjoint.py").write_text(ADJOINT_SUITE)
    status, output = run_pytest(tmp_path, "--backward-check")
    assert status == 0, output
    adjoint_row = row(output, "adjoint_ops.Adjoint")
    assert adjoint_row[0].rstrip().endswith("clean"), output


def test_tensors_a_function_reads_stay_where_the_caller_put_them():
    """On a GPU the checker moves the op's tensors to it; a module's parameters moved would be copies its module
    never reads (the H200 found this: 'Expected all tensors to be on the same device'). Where a function argument
    reads some of the tensors, none is moved, and those it reads are the op's own. The device here stands in for a
    GPU: 'meta' takes a copy as 'cuda' does."""
    from backward_check.calling import Op
    f = small_net()
    x = seeded_randn(5, 3, seed=8).double()
    op = Op(Adjoint, (f, x, *f.parameters()), {}, device=torch.device("meta"))
    assert sorted(op.kept) == [2, 3, 4, 5] and all(op.kept[i] is p for i, p in zip(range(2, 6), f.parameters()))
    assert op.values[1] is x
    plain = Op(small_net().__class__.forward, (f, x), {}, device=torch.device("meta"))
    assert plain.values[1].device.type == "meta", "a function that reads none of the tensors: moved as ever"


# -- Round four: a forward that takes from its options dict, and tensors a callable object reads -------------------

class PopsItsOptions(torch.autograd.Function):
    """Takes its method out of the options dict it is passed (as a solver library's Functions do with
    config.pop("method")): each caller builds the dict afresh, and autograd runs the forward once."""

    @staticmethod
    def forward(ctx, x, options):
        ctx.scale = 2.0 if options.pop("method") == "double" else 1.0
        return x * ctx.scale

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.scale, None


class PopsItsOptionsWrongly(PopsItsOptions):
    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 3.0, None


@pytest.mark.parametrize("seed", [0, 5])
def test_a_forward_that_takes_from_its_options_dict_gets_the_dict_as_its_caller_made_it(seed):
    """Each call the checker makes gets the dict as recorded, not the one an earlier call emptied: clean (it was
    "crashes: KeyError: 'method'" on every check that calls the op twice), and the planted bug named."""
    x = seeded_randn(4, 5, seed=seed)
    report = check_backward(PopsItsOptions, x, {"method": "double"})
    assert report.clean, report
    assert check_backward(PopsItsOptionsWrongly, x, {"method": "double"}).traps == ["a wrong formula"]


class Wrapped:
    """A callable object holding the tensor it reads (as a library wraps a user's function with its parameters)."""

    def __init__(self, weight):
        self.weight = weight

    def __call__(self, x):
        return (x * self.weight).sin()


class ThroughTheWrapper(torch.autograd.Function):
    """Takes a callable and the tensors it reads, and differentiates the callable's output with respect to those
    very tensors in its backward (as a Monte Carlo quadrature over a user's function does)."""

    @staticmethod
    def forward(ctx, fcn, x, *params):
        ctx.fcn = fcn
        ctx.save_for_backward(x, *params)
        with torch.no_grad():
            return fcn(x)

    @staticmethod
    def backward(ctx, grad_output):
        x, *params = ctx.saved_tensors
        with torch.enable_grad():
            free = x.detach().requires_grad_()
            grads = torch.autograd.grad(ctx.fcn(free), (free, *params), grad_output)
        return (None, *grads)


class ThroughTheWrapperWrongly(ThroughTheWrapper):
    @staticmethod
    def backward(ctx, grad_output):
        _, dx, *rest = ThroughTheWrapper.backward(ctx, grad_output)
        return (None, dx * 1.5, *rest)


@pytest.mark.parametrize("seed", [0, 5])
def test_tensors_a_callable_object_reads_are_passed_themselves(seed):
    """The weight the wrapper object holds reaches the op as itself (its values varied in place), so the backward's
    autograd.grad with respect to it works: clean (it was "crashes: ... appears to not have been used in the
    graph": the checker passed a copy the wrapper never reads), and the planted bug named."""
    x = seeded_randn(4, 5, seed=seed)
    weight = seeded_randn(4, 5, seed=seed + 1).requires_grad_()
    report = check_backward(ThroughTheWrapper, Wrapped(weight), x, weight)
    assert report.clean, report
    assert check_backward(ThroughTheWrapperWrongly, Wrapped(weight), x, weight).traps == ["a wrong formula"]


class WrappedWithItsInput(Wrapped):
    """Holds its input too: every tensor the op takes is one the callable reads (xitorch's rootfinder, whose
    wrapped function holds all its parameters)."""

    def __init__(self, weight, x):
        super().__init__(weight)
        self.x = x


def test_an_op_whose_every_input_a_callable_reads_is_checked_ungrown():
    """No input may change its shape, so nothing is grown, and the report says so: it was "the checker failed
    (ValueError: max() arg is an empty sequence)" on 11 of xitorch's 13 signatures."""
    x = seeded_randn(4, 5, seed=3)
    weight = seeded_randn(4, 5, seed=4).requires_grad_()
    report = check_backward(ThroughTheWrapper, WrappedWithItsInput(weight, x), x, weight)
    assert report.clean, report
    assert any("no input may change its shape" in note for note in report.notes), report
