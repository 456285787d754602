"""
A backward checker that names the chapter's traps
=================================================

Point it at your own ``torch.autograd.Function`` (or any function of tensors that has a
reference) and it calls the op the ways autograd really calls it: with a random
``grad_output``, a uniform one, a stride-0 expanded one (as after ``.sum()``), a
transposed one, from two consumers at once (fan-in), twice in a row, beside a sibling
branch that shares its ``grad_output``, and (if asked) under ``create_graph=True``.
It then reports each trap it finds, in the chapter's terms, with the numbers::

    from backward_checker import check_backward
    report = check_backward(MyGELU, torch.randn(3, 5), reference=torch.nn.functional.gelu)
    print(report)                 # a few lines; report.clean is True when no trap was found

Without a reference it compares against finite differences in float64, as
``torch.autograd.gradcheck`` does (the op must then accept float64 inputs).

From a terminal, on a file that defines Functions (and, optionally, ``example_inputs()``
returning a tuple of tensors, and ``reference(*inputs)``)::

    python practice/backward_checker.py my_op.py [--function NAME] [--second-order]

Exit status: 0 when every Function is clean, 1 when a trap is found, 2 on a usage error.
Runs on a GPU, or on the CPU through Triton's interpreter.
"""
import argparse
import dataclasses
import importlib.util
import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for hardened_ops
from hardened_ops import DEVICE  # noqa: E402  (picks the backend before triton is imported)

import torch  # noqa: E402

# The traps, each with the chapter section it comes from.
TRAPS = {
    "ignores grad_output": "17.1; Chapter 16's chain-rule bug",
    "assumes a uniform grad_output": "17.1 and 17.3: 2, 1 + 1 and 3 + 2 are all uniform",
    "assumes a single use": "17.3",
    "mutates grad_output in place": "17.3: AddBackward0 hands both branches one tensor",
    "assumes a contiguous grad_output": "17.3: after .sum(), grad_output is a stride-0 view",
    "returns the wrong gradients": "Chapter 15: one gradient per input, each like its input",
    "a silently wrong second derivative": "Chapter 16: a kernel's output carries no graph",
    "a wrong formula": "Chapter 16",
    "crashes": "",
}


@dataclasses.dataclass
class Finding:
    trap: str
    evidence: str

    def __str__(self):
        section = TRAPS[self.trap]
        return f"  TRAP  {self.trap}" + (f" [{section}]" if section else "") + f": {self.evidence}"


@dataclasses.dataclass
class Report:
    name: str
    findings: list
    passed: list

    @property
    def clean(self):
        return not self.findings

    @property
    def traps(self):
        return [f.trap for f in self.findings]

    def __str__(self):
        head = f"check_backward({self.name}): " + ("clean" if self.clean else f"{len(self.findings)} trap(s) found")
        lines = [head, *map(str, self.findings)]
        if self.passed:
            lines.append("  ok    " + ", ".join(self.passed))
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# How the op is called: through autograd, and its reference
# ---------------------------------------------------------------------------

def as_callable(function):
    return function.apply if isinstance(function, type) and issubclass(function, torch.autograd.Function) else function


def leaves(inputs, dtype=None):
    return [t.detach().to(dtype or t.dtype).clone().requires_grad_(t.is_floating_point()) for t in inputs]


def vjp(call, inputs, grad_output, create_graph=False):
    """The gradients of call(*inputs) under grad_output, for each floating-point input (None elsewhere)."""
    xs = leaves(inputs)
    out = call(*xs)
    wanted = [x for x in xs if x.requires_grad]
    grads = iter(torch.autograd.grad(out, wanted, grad_output, allow_unused=True, create_graph=create_graph))
    return [next(grads) if x.requires_grad else None for x in xs]


def finite_difference_vjp(call, inputs, grad_output, eps=1e-6):
    """grad_output . d call / d input, by central differences in float64, for each floating-point input."""
    xs = [t.detach().double() if t.is_floating_point() else t for t in inputs]
    g = grad_output.detach().double()
    grads = []
    with torch.no_grad():
        for i, x in enumerate(xs):
            if not x.is_floating_point():
                grads.append(None)
                continue
            grad = torch.zeros_like(x)
            flat = grad.view(-1)
            for k in range(x.numel()):
                plus, minus = x.clone(), x.clone()
                plus.view(-1)[k] += eps
                minus.view(-1)[k] -= eps
                f_plus = call(*xs[:i], plus, *xs[i + 1:]).double()
                f_minus = call(*xs[:i], minus, *xs[i + 1:]).double()
                flat[k] = ((f_plus - f_minus) * g).sum() / (2 * eps)
            grads.append(grad)
    return grads


def reference_vjp(call, reference, inputs, grad_output):
    if reference is not None:
        return [None if g is None else g.detach() for g in vjp(reference, inputs, grad_output)]
    return [None if g is None else g.to(t.dtype) for g, t in zip(finite_difference_vjp(call, inputs, grad_output), inputs)]


def tolerance(t):
    return {torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 2e-4}.get(t.dtype, 1e-6)


def largest_error(got, expected):
    """The largest |got - expected| over every gradient, relative to the expected gradient's size; inf on a
    missing or misshapen gradient."""
    worst = 0.0
    for g, e in zip(got, expected):
        if e is None:
            continue
        if g is None or g.shape != e.shape:
            return float("inf")
        scale = max(1.0, e.detach().abs().max().item()) if e.numel() else 1.0
        error = (g.detach().double() - e.detach().double()).abs().max().item() if e.numel() else 0.0
        worst = max(worst, error / scale / tolerance(e))
    return worst  # in units of the dtype's tolerance: above 1 is wrong


def right(got, expected):
    return largest_error(got, expected) <= 1.0


def describe_error(got, expected):
    for g, e in zip(got, expected):
        if e is not None and (g is None or g.shape != e.shape):
            return f"a gradient of shape {None if g is None else tuple(g.shape)} where {tuple(e.shape)} was due"
    errors = [(g.detach().double() - e.detach().double()).abs().max().item()
              for g, e in zip(got, expected) if e is not None and e.numel()]
    return f"largest error {max(errors, default=0.0):.3g}"


# ---------------------------------------------------------------------------
# The grad_outputs autograd really hands a backward
# ---------------------------------------------------------------------------

def random_like(t, seed):
    return torch.randn(t.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(t.device, t.dtype)


def transposed_like(t, seed):
    """A random tensor of t's shape laid out transposed in memory (non-contiguous), where t has 2+ dims."""
    if t.dim() < 2:
        return random_like(t, seed)
    base = torch.randn(tuple(reversed(t.shape)), generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64).to(t.device, t.dtype)
    return base.permute(*reversed(range(t.dim())))


def expanded_like(t, seed):
    """A stride-0 view of t's shape: one random row repeated, as a reduction's backward hands it on."""
    if t.dim() == 0 or t.numel() == 0:
        return random_like(t, seed)
    row = torch.randn((1, *t.shape[1:]), generator=torch.Generator().manual_seed(seed),
                      dtype=torch.float64).to(t.device, t.dtype)
    return row.expand(t.shape) if t.shape[0] > 1 else row.expand(t.shape)


def uniform_like(t, value):
    return torch.full(t.shape, value, dtype=t.dtype, device=t.device)


# ---------------------------------------------------------------------------
# The checks, one a trap
# ---------------------------------------------------------------------------

def check_backward(function, *inputs, reference=None, second_order=False, name=None):
    """Runs every check on function (an autograd.Function subclass, or a callable of tensors) at inputs,
    and returns a Report. reference: a callable of the same inputs built from differentiable torch ops;
    without one, finite differences in float64. second_order: also check create_graph=True, where the
    backward must refuse (raise) or give the right second derivative."""
    name = name or getattr(function, "__name__", type(function).__name__)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError("check_backward takes the op's inputs as tensors: check_backward(op, x) or (op, x, y)")
    if not any(t.is_floating_point() for t in inputs):
        raise ValueError("check_backward needs at least one floating-point input, to take a gradient for")
    call = as_callable(function)
    inputs = [t.to(DEVICE) if isinstance(t, torch.Tensor) and t.device.type != DEVICE.type else t for t in inputs]
    findings, passed = [], []
    try:
        output = call(*leaves(inputs))
    except Exception as error:  # the op's own failure is the finding
        return Report(name, [Finding("crashes", f"the forward raised {type(error).__name__}: {error}")], [])
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"check_backward checks ops with one tensor output; {name} returned {type(output).__name__}")

    def attempt(what, run):
        try:
            return run()
        except Exception as error:  # a backward that raises where autograd calls it is a finding
            findings.append(Finding("crashes", f"{what}: {type(error).__name__}: {' '.join(str(error).split())[:160]}"))
            return None

    # 1. A random grad_output, laid out transposed: the first thing a real graph hands a backward.
    g_random = random_like(output, seed=1)
    expected = reference_vjp(call, reference, inputs, g_random)
    got = attempt("with a random grad_output", lambda: vjp(call, inputs, g_random))
    if got is None:
        return Report(name, findings, passed)
    if not right(got, expected):
        findings.append(diagnose(call, reference, inputs, output, got, expected, g_random))
    else:
        passed.append("random grad_output")

    # 2. grad_output must come back unchanged (checked early: a write to it spoils every later check): a sibling branch may hold the very same tensor.
    mutated = attempt("checking grad_output afterwards", lambda: mutation_evidence(call, inputs, output))
    if mutated:
        findings.append(Finding("mutates grad_output in place", mutated))
    elif mutated is not None:
        passed.append("grad_output unchanged")

    # 3. Layouts: stride-0 expanded (after .sum()) and transposed.
    if not findings:
        for label, g in (("transposed", transposed_like(output, 3)), ("stride-0 expanded", expanded_like(output, seed=2))):
            if g.is_contiguous():
                continue
            layout_expected = reference_vjp(call, reference, inputs, g.contiguous())  # before a backward may write to g
            got = attempt(f"with a {label} grad_output", lambda: vjp(call, inputs, g))
            if got is None:
                break
            if not right(got, layout_expected):
                findings.append(Finding("assumes a contiguous grad_output",
                                        f"with a {label} grad_output (strides {g.stride()}), "
                                        f"{describe_error(got, layout_expected)}; with the same values made "
                                        f"contiguous it is right"))
                break
        else:
            passed.append("non-contiguous grad_output")

    # 4. Fan-in, two uses in one graph, the same call twice: a backward may not count its uses or remember a call.
    if not findings:
        fan_in = attempt("under fan-in", lambda: fan_in_gradients(call, inputs, output))
        again = attempt("when called again", lambda: vjp(call, inputs, g_random))
        other = [random_like(t, seed=7) if t.is_floating_point() else t for t in inputs]
        expected_other = reference_vjp(call, reference, other, g_random)
        fresh = attempt("on new inputs", lambda: vjp(call, other, g_random))
        problem = None
        if fan_in is not None:
            a, b = fan_in[1], fan_in[2]
            expected_fan_in = reference_vjp(call, reference, inputs, a + b)
            if not right(fan_in[0], expected_fan_in):
                problem = (f"z = op(x) used twice, (z * a).sum() + (z * b).sum(): one backward call with a + b, "
                           f"and the gradient is wrong ({describe_error(fan_in[0], expected_fan_in)})")
        two = attempt("used twice in one graph", lambda: two_uses(call, inputs, other, output))
        if problem is None and two is not None:
            got_first, got_second, a, b = two
            want_first = reference_vjp(call, reference, inputs, a)
            want_second = reference_vjp(call, reference, other, b)
            if not (right(got_first, want_first) and right(got_second, want_second)):
                problem = ("op(x1) and op(x2) in one graph, (op(x1) * a).sum() + (op(x2) * b).sum(): "
                           f"{describe_error(got_first, want_first)} for x1, {describe_error(got_second, want_second)} "
                           "for x2: the backward uses what another call left behind")
        if problem is None and again is not None and not right(again, expected):
            problem = f"the same call made again gave another gradient ({describe_error(again, expected)})"
        if problem is None and fresh is not None and not right(fresh, expected_other):
            problem = (f"a second call on other inputs is wrong ({describe_error(fresh, expected_other)}), "
                       "though the first call was right: state kept between calls")
        if problem:
            findings.append(Finding("assumes a single use", problem))
        elif None not in (fan_in, again, fresh, two):
            passed.append("fan-in and repeated calls")

    # 5. What backward returns, before autograd checks, casts or drops it.
    if isinstance(function, type) and issubclass(function, torch.autograd.Function):
        returned = attempt("called directly", lambda: returned_gradients_problem(function, inputs))
        if returned:
            findings.append(Finding("returns the wrong gradients", returned))
        elif returned is not None:
            passed.append("gradient shapes, dtypes, devices")

    # 6. create_graph=True: refuse, or be right.
    if second_order:
        problem = attempt("under create_graph=True", lambda: second_order_problem(call, reference, inputs, output))
        if problem:
            findings.append(Finding("a silently wrong second derivative", problem))
        elif problem is not None:
            passed.append("create_graph=True")
    return Report(name, findings, passed)


def diagnose(call, reference, inputs, output, got, expected, g_random):
    """Which trap explains a wrong gradient under a random grad_output."""
    again = vjp(call, inputs, g_random)
    if largest_error(again, got) > 1e-3:  # the same call, another answer: the op remembers earlier calls
        return Finding("assumes a single use",
                       f"the same call made twice gave two gradients ({describe_error(again, got)} apart), "
                       f"the first {describe_error(got, expected)} off the reference: state kept between calls")
    ones = reference_vjp(call, reference, inputs, uniform_like(output, 1.0))
    if right(got, ones):
        return Finding("ignores grad_output",
                       f"with a random grad_output the gradient is the one for grad_output = 1 everywhere: "
                       f"{describe_error(got, expected)} against the reference")
    uniform_right = all(right(vjp(call, inputs, uniform_like(output, c)),
                              reference_vjp(call, reference, inputs, uniform_like(output, c))) for c in (2.0, 5.0))
    if uniform_right:
        first = reference_vjp(call, reference, inputs, uniform_like(output, g_random.reshape(-1)[0].item()))
        mean = reference_vjp(call, reference, inputs, uniform_like(output, g_random.mean().item()))
        which = ("the one for grad_output[0] everywhere" if right(got, first) else
                 "the one for grad_output's mean everywhere" if right(got, mean) else "wrong")
        return Finding("assumes a uniform grad_output",
                       f"right for grad_output = 2 and 5 everywhere, wrong for a random one "
                       f"({describe_error(got, expected)}); the gradient is {which}")
    return Finding("a wrong formula", f"wrong even for a uniform grad_output of 2: "
                   f"{describe_error(vjp(call, inputs, uniform_like(output, 2.0)), reference_vjp(call, reference, inputs, uniform_like(output, 2.0)))}")


def fan_in_gradients(call, inputs, output):
    a, b = random_like(output, seed=4), random_like(output, seed=5)
    xs = leaves(inputs)
    z = call(*xs)
    wanted = [x for x in xs if x.requires_grad]
    grads = iter(torch.autograd.grad((z * a).sum() + (z * b).sum(), wanted, allow_unused=True))
    return [next(grads) if x.requires_grad else None for x in xs], a, b


def two_uses(call, inputs, other, output):
    """The op used at two places of one graph (two layers, say): both forwards run before either backward."""
    a, b = random_like(output, seed=12), random_like(output, seed=13)
    first, second = leaves(inputs), leaves(other)
    loss = (call(*first) * a).sum() + (call(*second) * b).sum()
    wanted = [x for x in first + second if x.requires_grad]
    grads = iter(torch.autograd.grad(loss, wanted, allow_unused=True))
    got = [next(grads) if x.requires_grad else None for x in first + second]
    return got[:len(first)], got[len(first):], a, b


def mutation_evidence(call, inputs, output):
    """'' if grad_output comes back unchanged; else what changed, and the sibling branch it corrupts."""
    g = random_like(output, seed=6)
    kept = g.clone()
    vjp(call, inputs, g)
    if torch.equal(g, kept):
        return ""
    # The sibling: ((op(x) + y * 1) * w).sum(), with op made last so that its backward runs first;
    # AddBackward0 hands both branches the same tensor, so y.grad should be exactly w.
    xs = leaves(inputs)
    y = torch.zeros_like(output).requires_grad_(True)
    w = random_like(output, seed=8)
    sibling = y * 1.0
    ((call(*xs) + sibling) * w).sum().backward()
    corrupted = (y.grad - w).abs().max().item()
    return (f"grad_output changed during the call (largest change {(g - kept).abs().max().item():.3g}); "
            f"beside it, in ((op(x) + y) * w).sum(), y.grad must equal w but is off by up to {corrupted:.3g}")


def returned_gradients_problem(function, inputs):
    """Calls backward directly, as autograd does, and checks what it returns: one gradient per input,
    None where the input needs none, each of its input's shape, dtype and device."""
    xs = leaves(inputs)
    floating = [i for i, x in enumerate(xs) if x.requires_grad]
    if len(floating) > 1:  # one input that needs no gradient, as a frozen weight
        xs[floating[-1]].requires_grad_(False)
    output = function.apply(*xs)
    context = output.grad_fn
    with torch.no_grad():
        returned = function.backward(context, random_like(output, seed=9))
    returned = returned if isinstance(returned, tuple) else (returned,)
    if len(returned) != len(xs):
        return f"backward returned {len(returned)} value(s) for {len(xs)} input(s)"
    for i, (g, x) in enumerate(zip(returned, xs)):
        if g is None:
            if x.requires_grad:
                return f"backward returned None for input {i}, which needs a gradient"
            continue
        if not x.requires_grad and len(xs) > 1:
            return (f"backward computed a gradient for input {i}, which needs none "
                    f"(ctx.needs_input_grad[{i}] is False): the work is thrown away")
        if tuple(g.shape) != tuple(x.shape) or g.dtype != x.dtype or g.device != x.device:
            return (f"input {i} is {tuple(x.shape)} {x.dtype} on {x.device}, but its gradient is "
                    f"{tuple(g.shape)} {g.dtype} on {g.device} (autograd would cast or refuse it)")
    return ""


def second_order_problem(call, reference, inputs, output):
    """'' if create_graph=True is refused or right; else the evidence of a silently wrong second derivative."""
    g = random_like(output, seed=10)

    def penalty_grad(f):
        xs = leaves(inputs)
        first = [d for d in vjp_of(f, xs, g) if d is not None]
        if not any(d.requires_grad for d in first):
            return None
        torch.autograd.backward(sum((d ** 2).sum() for d in first if d.requires_grad))
        return [x.grad if x.grad is not None else torch.zeros_like(x) for x in xs]

    try:
        got = penalty_grad(call)
    except RuntimeError:  # refused: the safe answer
        return ""
    if got is None:
        return ("with create_graph=True the gradient came back as a constant (it carries no graph) and nothing "
                "was raised: a gradient penalty built on it silently contributes nothing")
    if reference is None:
        return ""
    expected = penalty_grad(reference)
    if right(got, expected):
        return ""
    return (f"the gradient of |dL/dx|^2 (a gradient penalty) is wrong ({describe_error(got, expected)}), "
            f"and nothing was raised: the backward's output carries no graph")


def vjp_of(f, xs, g):
    out = f(*xs)
    wanted = [x for x in xs if x.requires_grad]
    grads = iter(torch.autograd.grad(out, wanted, g, create_graph=True, allow_unused=True))
    return [next(grads) if x.requires_grad else None for x in xs]


# ---------------------------------------------------------------------------
# The command line: every Function a file defines
# ---------------------------------------------------------------------------

def functions_in(module):
    return {name: obj for name, obj in vars(module).items()
            if isinstance(obj, type) and issubclass(obj, torch.autograd.Function)
            and obj.__module__ == module.__name__}


def default_inputs(function):
    count = len(inspect.signature(function.forward).parameters) - 1  # less ctx
    return tuple(torch.randn(3, 5, generator=torch.Generator().manual_seed(11 + i)).to(DEVICE) for i in range(count))


def main(argv=None):
    parser = argparse.ArgumentParser(description="Check the backward of each autograd.Function a file defines.")
    parser.add_argument("file", type=Path, help="a Python file defining torch.autograd.Function subclasses")
    parser.add_argument("--function", action="append", help="check only this one (repeatable)")
    parser.add_argument("--second-order", action="store_true", help="also check create_graph=True")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        parser.error(f"no such file: {args.file}")
    spec = importlib.util.spec_from_file_location(args.file.stem, args.file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    found = functions_in(module)
    chosen = args.function or list(found)
    missing = [n for n in chosen if n not in found]
    if missing or not chosen:
        parser.error(f"{args.file} defines no Function named {missing}; it defines {sorted(found)}" if missing
                     else f"{args.file} defines no torch.autograd.Function")
    inputs = getattr(module, "example_inputs", None)
    reference = getattr(module, "reference", None)
    trapped = 0
    for name in chosen:
        report = check_backward(found[name], *(inputs() if inputs else default_inputs(found[name])),
                                reference=reference, second_order=args.second_order, name=name)
        print(report)
        trapped += not report.clean
    return 1 if trapped else 0


if __name__ == "__main__":
    sys.exit(main())
