"""Under torch.compile: the op inside a compiled function, its forward and gradients against its own eager ones
under the grad_outputs autograd hands on; and, for a torch.library custom op, torch.library.opcheck's checks.

Dynamo traces an autograd.Function's forward and backward into the graph, AOTAutograd splits the graph into a
forward and a backward, and the backend (Inductor, or AOTAutograd's eager) runs them. A Function that is right
eagerly can get another gradient compiled, silently (pytorch/pytorch#183604 and #180642, both in torch 2.11).

The compiled answers are judged against the op's eager answers on the same values, never against the reference:
a bug the op has eagerly is the other checks' to name, not this one's a second time, and where the op reads a
grad_output's layout wrongly eagerly (AOTAutograd hands the compiled backward a contiguous copy), the compiled
gradient may match either eager answer, the layout's or the contiguous one's. How far apart the compiled and the
eager answer may be is measured, not guessed: ROUNDING_TIMES the eager op's own rounding, element by element (its
answer against the same op's on float64 copies of the values, or on float32 ones where it refuses float64 and
computes in a narrower dtype), and beyond that the op's own tolerance between two of its answers (its dtype's,
widened to its run-to-run noise). Compiled code may compute in another order or precision (Inductor keeps bfloat16
in float32 between ops), not be farther from exact than eager.

A Dynamo refusal under fullgraph=True is a note that says where, and the op is then compiled with graph breaks;
where the op itself ran eagerly (a graph break at its call), there is nothing compiled to compare, and the note
says so. Every check starts and ends with Dynamo's caches empty (torch._dynamo.reset()), so no check meets
another's compiled code or its recompilation limit.
"""
import contextlib
import dataclasses
import logging
import operator
import os
import traceback
import warnings

import torch

from ..compile_backend import backend_name
from ..calling import announce, carries_gradient, clip, flatten, is_function, seeded, seeded_grad, Run
from .context import copies, reraise_fault
from ..report import (COMPILE_REFUSED, GRAPH_BREAK, NEEDS_A_GPU, WRONG_UNDER_COMPILE, Note, Passed)
from ..strategies import layouts_for
from .truth import ROUNDING_TIMES, flat, neighbourhood, relative_error

COMPILE_OPTION = "compile"
# The package's folder (in the practice notebook its modules run from source, named backward_check/<module>.py).
PACKAGE = os.path.dirname(os.path.abspath(globals().get("__file__", "backward_check/checks/compiled.py")))


def torch_version():
    return torch.__version__.split("+")[0]


def version_tuple(version):
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


# -- public PyTorch issues of this class -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class KnownIssue:
    """A public PyTorch issue in which torch.compile changes a correct Function's gradient: the torch versions it
    was measured in (affected) and the first one measured without it (fixed)."""
    number: int
    what: str
    affected: tuple
    fixed: str

    def __str__(self):
        return f"pytorch/pytorch#{self.number} ({self.what}; torch {', '.join(self.affected)}, fixed in {self.fixed})"

    def affects(self, version):
        return version_tuple(version) in {version_tuple(v) for v in self.affected}


SAME_TENSOR_TWICE = KnownIssue(183604, "the same tensor passed as two inputs gets half its gradient",
                               ("2.11", "2.12"), "2.13")
IN_PLACE_IN_FORWARD = KnownIssue(180642, "an in-place op inside forward sends the gradient to the wrong output",
                                 ("2.11",), "2.12")
KNOWN_ISSUES = (SAME_TENSOR_TWICE, IN_PLACE_IN_FORWARD)


def known_issues(version, only=None):
    """'; torch X has ...' naming the known issues that affect version (only: just that one), else ''."""
    issues = [issue for issue in KNOWN_ISSUES if issue.affects(version) and (only is None or issue is only)]
    if not issues:
        return ""
    return (f"; torch {version} has {'this known issue' if only else 'known issues of this class'}: "
            + ", ".join(map(str, issues)))


# -- where torch.compile refused, in the user's code ---------------------------------------------------------

def interpreted_triton(error):
    """Whether error comes from Triton's interpreter (no GPU): torch.compile and opcheck's fake tensors cannot trace
    an interpreted kernel, which says nothing of the op on a GPU."""
    if os.environ.get("TRITON_INTERPRET", "") in ("", "0") or torch.cuda.is_available():
        return False
    marker = f"{os.sep}triton{os.sep}"
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if marker in str(error) or any(marker in frame.filename for frame in traceback.extract_tb(error.__traceback__)):
            return True
        error = error.__cause__ or error.__context__
    return False


def first_line(error):
    """error's message in one line: its first, or where that only introduces what follows (Inductor's
    "backend='inductor' raised:"), its first two, or its cause's."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if lines[0].endswith(":"):
        detail = lines[1] if len(lines) > 1 else first_line(error.__cause__) if error.__cause__ else ""
        return f"{lines[0]} {detail}".strip()
    return lines[0]


def where_in_user_code(error):
    """'at file:line (code)': the innermost frame of Dynamo's 'from user code:' stack in error's message, else ''."""
    text = str(error)
    if "from user code:" not in text:
        return ""
    stack = text.split("from user code:", 1)[1].splitlines()
    frames = [(i, line.strip()) for i, line in enumerate(stack) if line.strip().startswith("File ")]
    if not frames:
        return ""
    i, frame = frames[-1]
    parts = frame.split('"')
    if len(parts) > 2 and os.path.dirname(os.path.abspath(parts[1])) == PACKAGE:
        return " at the op's call"  # the innermost frame is the checker's call of the op: the op as a whole
    code = next((line.strip() for line in stack[i + 1:] if line.strip() and not set(line.strip()) <= {"^", "~"}), "")
    path = os.path.basename(parts[1]) if len(parts) > 2 else ""
    line = parts[2].split(",")[1].strip().removeprefix("line ") if len(parts) > 2 and "," in parts[2] else "?"
    return f" at {path}:{line}" + (f" (`{clip(code, 80)}`)" if code else "")


class CompileFailed(Exception):
    """torch.compile, or the op compiled, raised where the op run eagerly does not: a note, never the op's crash."""

    def __init__(self, what, error):
        super().__init__(what)
        self.what, self.error = what, error

    def note(self, check, backend):
        if interpreted_triton(self.error):
            return Note(check, "torch.compile cannot trace Triton's interpreter: run the check on a GPU, where the "
                               "op's kernels compile", NEEDS_A_GPU)
        return Note(check, f"torch.compile (backend {backend_name(backend)}) fails on the op {self.what}"
                           f"{where_in_user_code(self.error)}: {clip(first_line(self.error), 200)}; eagerly it runs, "
                           f"so a compiled model calling it fails loudly, not silently", COMPILE_REFUSED)


# -- compiling ---------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def compiling():
    """Dynamo's caches empty before and after (a check never meets another's compiled code, nor its recompilation
    limit), room for every recompilation one check makes, and Inductor's random numbers drawn as eager draws them
    (a dropout's mask the same compiled and eager)."""
    import torch._inductor.config as inductor_config
    limits = {name: 64 for name in ("recompile_limit", "cache_size_limit") if hasattr(torch._dynamo.config, name)}
    torch._dynamo.reset()
    try:
        with torch._dynamo.config.patch(**limits), inductor_config.patch(fallback_random=True):
            yield
    finally:
        torch._dynamo.reset()


class Compiler:
    """Functions of the op's values compiled with one backend, every graph the backend was handed kept (to tell
    whether the op itself was compiled, or ran eagerly after a graph break). fn: the op as check_backward took it."""

    def __init__(self, fn, backend):
        self.fn, self.backend = fn, backend
        self.graphs = []

    def _recording(self):
        inner = torch._dynamo.lookup_backend(self.backend) if isinstance(self.backend, str) else self.backend

        def recording(graph, example_inputs):
            self.graphs.append(graph)
            return inner(graph, example_inputs)

        recording.__name__ = backend_name(self.backend)  # as torch.compile's messages name the backend
        return recording

    def compile(self, fn, fullgraph=False):
        return torch.compile(fn, backend=self._recording(), fullgraph=fullgraph)

    def op_compiled(self, graphs):
        """Whether the op's call is in one of graphs: an autograd.Function as Dynamo's autograd_function_apply, a
        custom op as its operator, any other callable as any op at all."""
        targets = [node.target for graph in graphs for node in graph.graph.nodes if node.op == "call_function"]
        if is_function(self.fn):
            return any(getattr(target, "__name__", "") == "autograd_function_apply" for target in targets)
        overload = custom_op_of(self.fn)
        if overload is not None:
            return any(target in (overload, overload.overloadpacket) for target in targets)
        return bool(targets)

    def in_place_in_forward(self):
        """Whether a Function's forward, as Dynamo traced it (its fwd_body), writes in place (`y += 1`, `y.exp_()`)."""
        return any(in_place(node) for graph in self.graphs for name, module in graph.named_modules()
                   if name.startswith("fwd_body") for node in module.graph.nodes)


IN_PLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                      operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor,
                      operator.ilshift, operator.irshift}


def in_place(node):
    """Whether an FX node writes in place: an in-place operator, or a method or function named with torch's
    trailing underscore (add_, copy_, exp_)."""
    if node.op not in ("call_function", "call_method"):
        return False
    if node.target in IN_PLACE_OPERATORS:
        return True
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return name.endswith("_") and not name.startswith("_")


def call_op(op):
    """The op as a function of its values, every argument in its place (what torch.compile compiles)."""
    def call(*values):
        return op.call(values)
    return call


def graded_of(raw, positions):
    outputs = flatten(raw)
    return [outputs[k] for k in positions if k < len(outputs)]


def fan_in_loss(op, positions, count):
    """(z * a).sum() + (z * b).sum() for each output z the op grades, as a function of the op's values followed by
    each output's a and b: two consumers inside the compiled function, whose gradients autograd sums."""
    def loss(*values_and_weights):
        values, weights = values_and_weights[:count], values_and_weights[count:]
        graded = graded_of(op.call(values), positions)
        return sum((z * weights[2 * k]).sum() + (z * weights[2 * k + 1]).sum() for k, z in enumerate(graded))
    return loss


@dataclasses.dataclass
class Case:
    """One way the check calls the op: what the report calls it, the grad_outputs for the op's graded outputs (None:
    the op's outputs are used twice inside the function, fan_in_loss, whose weights are extra, the arguments after
    the values), and aliasing (i, j): input j passed the very tensor of input i."""
    label: str
    grad_outputs: list = None
    extra: tuple = ()
    alias: tuple = None
    contiguous_too: bool = False   # also right where it matches eager under the same grad_outputs made contiguous


class Calls:
    """The op's gradient for one case, eager or compiled, on fresh copies of the values."""

    def __init__(self, context):
        self.context, self.op = context, context.op

    def fresh(self, case, dtype=None):
        leaves, passed = self.op.fresh(dtype=dtype)
        if case.alias:
            i, j = case.alias
            passed[j], leaves[j] = passed[i], None
        return leaves, passed

    def gradients(self, fn, case, what, dtype=None, grad_outputs=None):
        """(graded outputs, gradient of each argument, None where it takes none) of fn for case, in dtype."""
        leaves, passed = self.fresh(case, dtype)
        convert = (lambda t: t.to(dtype)) if dtype is not None else (lambda t: t)
        announce(what + self.context.where())
        raw = seeded(fn, *passed, *[convert(t) for t in case.extra])
        if case.grad_outputs is None:  # fn returns the loss
            wanted = [leaf for leaf in leaves if leaf is not None]
            grads = iter(seeded_grad(raw, wanted, allow_unused=True))
            return [raw.detach()], copies([next(grads) if leaf is not None else None for leaf in leaves])
        outputs = flatten(raw)
        run = Run(leaves, passed, outputs, [t for t in outputs if carries_gradient(t)], raw)
        g = grad_outputs if grad_outputs is not None else case.grad_outputs
        grads = run.grad([convert(t).clone() for t in g], positions=self.context.graded_positions)
        return [t.detach() for t in run.graded], copies(grads)


# -- the check -----------------------------------------------------------------------------------------------------

def cases(context):
    """A random grad_output; each layout autograd hands on, for each output; two consumers of each output inside the
    compiled function (fan-in); and the same tensor passed as two inputs of one shape (where the op has two)."""
    chosen = [Case("with a random grad_output", context.randoms("under torch.compile"))]
    for k, out in enumerate(context.outputs):
        for label, g_layout in layouts_for(out, context.base):
            g = context.randoms(f"under torch.compile, layouts, output {k}")
            g[k] = g_layout
            chosen.append(Case(f"with a grad_output {label}", g, contiguous_too=True))
    weights = [w for k in range(len(context.outputs))
               for w in (context.randoms(f"under torch.compile, fan-in {k}")[k],
                         context.randoms(f"under torch.compile, fan-in {k}, second")[k])]
    chosen.append(Case("with z used twice inside the compiled function, (z * a).sum() + (z * b).sum()",
                       extra=tuple(weights)))
    pair = same_kind_inputs(context)
    if pair:
        i, j = pair
        chosen.append(Case(f"with the same tensor passed as {context.arg(i)} and {context.arg(j)}",
                           context.randoms("under torch.compile, one tensor twice"), alias=pair))
    return chosen


def same_kind_inputs(context):
    """The first two inputs of one shape, dtype and layout, where the op writes into none of its arguments (passing
    one tensor twice to an op that writes into one is not the same call eagerly either)."""
    inputs = context.op.inputs
    for a, i in enumerate(inputs):
        for j in inputs[a + 1:]:
            x, y = context.values[i], context.values[j]
            if x.shape == y.shape and x.dtype == y.dtype and x.stride() == y.stride():
                return (i, j) if not writes_its_arguments(context) else None
    return None


def writes_its_arguments(context):
    run = context.run("the forward, to see whether it writes into its arguments")
    return any(isinstance(p, torch.Tensor) and isinstance(v, torch.Tensor) and p.shape == v.shape and
               not torch.equal(p.detach().nan_to_num(0.0), v.nan_to_num(0.0))
               for p, v in zip(run.passed, context.values)
               if isinstance(p, torch.Tensor) and p.is_floating_point())


def rounding(eager, eager64):
    """What the eager op's own rounding left in each element (float64, flat): its answer in its dtype against the
    same op's on float64 copies of the values, each element's the largest within its neighbourhood (one element's
    rounding is one draw of its size); zeros where the op takes no float64 copies."""
    if eager is None or eager64 is None or eager.shape != eager64.shape:
        return torch.zeros(0 if eager is None else eager.numel(), dtype=torch.float64,
                           device=None if eager is None else eager.device)
    return neighbourhood((flat(eager) - flat(eager64).to(eager.device)).abs().nan_to_num(0.0, 0.0, 0.0))


def off_eager(got, eager, eager64, typical=None):
    """(how far the compiled answer is from eager's, relative, beyond ROUNDING_TIMES eager's own rounding element by
    element; that rounding, relative): compiled code may round in another order or precision, not worse."""
    if (got is None) != (eager is None):
        return float("inf"), 0.0
    if got is None:
        return 0.0, 0.0
    if got.shape != eager.shape:
        return float("inf"), 0.0
    own = rounding(eager, eager64)
    off = relative_error(flat(got), flat(eager), typical=typical, allowance=ROUNDING_TIMES * own)
    return off, relative_error(flat(eager) + own, flat(eager), typical=typical)


def under_compile(context, check):
    """The op compiled with the caller's backend, against itself eagerly: its forward, and its gradients under each
    of cases(); a difference past what rounding explains is wrong under torch.compile."""
    backend = context.options[COMPILE_OPTION]
    with compiling():
        return Judge(context, check, backend).outcomes()


class Judge:
    """One op's compile check: the op compiled, each case run compiled and eagerly, and judged."""

    def __init__(self, context, check, backend):
        self.context, self.check, self.backend = context, check, backend
        self.compiler = Compiler(context.op.fn, backend)
        self.calls = Calls(context)
        self.version = torch_version()
        self.whole, self.broken = {}, {}  # the compiled functions, fullgraph=True and with graph breaks, by kind

    def compiled(self, fn, case):
        what = case.label
        try:
            with warnings_quiet():
                return self.calls.gradients(fn, case, what)
        except Exception as error:  # torch.compile's failure, or the op's under it: a note
            reraise_fault(what, error)
            raise CompileFailed(what, error) from error

    def function(self, case):
        """What case calls: the op, or the loss that uses its outputs twice."""
        op = self.context.op
        if case.grad_outputs is None:
            return fan_in_loss(op, self.context.graded_positions, len(op.slots))
        return call_op(op)

    def eager(self, case, what, dtype=None, grad_outputs=None):
        """The eager answer, or None where the op refuses it (float64 copies, one tensor passed twice)."""
        try:
            return self.calls.gradients(self.function(case), case, what, dtype=dtype, grad_outputs=grad_outputs)
        except Exception as error:  # noqa: BLE001  (an op may refuse made-up calls loudly)
            reraise_fault(what, error)
            return None

    def wider(self, case):
        """The eager answer on float64 copies of the values, or, where the op refuses float64 (a kernel without a
        float64 path) and computes in a dtype narrower than float32, on float32 copies; None where it refuses both."""
        wider = self.eager(case, f"eagerly on float64 copies, {case.label}", dtype=torch.float64)
        if wider is None and self.context.computed.itemsize < 4:
            wider = self.eager(case, f"eagerly on float32 copies, {case.label}", dtype=torch.float32)
        return wider

    def outcomes(self):
        """Each case compiled with fullgraph=True, or, where Dynamo refuses that, with graph breaks (a note that says
        where), then judged; nothing to judge where the op itself ran eagerly."""
        notes, findings, found_in, judged = [], [], [], False
        for case in cases(self.context):
            try:
                got, note = self.run_compiled(case)
            except CompileFailed as failed:
                if interpreted_triton(failed.error) or not judged and not case.alias:
                    return notes + [failed.note(self.check, self.backend)]  # every other case would fail alike
                notes.append(failed.note(self.check, self.backend))
                continue
            if note:
                notes.append(note)
            if got is None:
                if not judged and not case.alias:
                    return notes  # the op's own call ran eagerly: so would every other case's
                continue
            judged = True
            finding = self.judge(case, got)
            if finding:
                findings.append(finding)
                found_in.append(case)
        if findings:
            return notes + self.named(findings, found_in)
        return notes + ([Passed(self.check)] if judged else [])

    def run_compiled(self, case):
        """(the compiled answer, None where the op ran eagerly; a note where fullgraph=True was refused)."""
        kind = "fan-in" if case.grad_outputs is None else "the op"
        fn = self.function(case)
        if kind not in self.whole:
            self.whole[kind] = self.compiler.compile(fn, fullgraph=True)
        try:
            return self.compiled(self.whole[kind], case), None
        except CompileFailed as refused:
            if interpreted_triton(refused.error):
                raise
            refusal = (f"torch.compile(fullgraph=True) refuses the op{f' {case.label}' if case.alias else ''}"
                       f"{where_in_user_code(refused.error)}: {clip(first_line(refused.error), 200)}")
        if kind not in self.broken:
            self.broken[kind] = (self.compiler.compile(fn), len(self.compiler.graphs))
        broken, since = self.broken[kind]
        got = self.compiled(broken, case)
        if not self.compiler.op_compiled(self.compiler.graphs[since:]):
            return None, Note(self.check, f"{refusal}; with graph breaks the op itself ran eagerly, so there is "
                                          f"nothing compiled to compare", GRAPH_BREAK)
        return got, Note(self.check, f"{refusal}; compiled with graph breaks instead", GRAPH_BREAK)

    def judge(self, case, got):
        """A Finding where the compiled answer is farther from every eager answer than rounding explains, else None."""
        context = self.context
        want = self.eager(case, f"eagerly, {case.label}")
        if want is None:
            return None  # eagerly the op refuses the call: nothing to compare with
        wanted = [want]
        if case.contiguous_too:
            contiguous = self.eager(case, f"eagerly, {case.label} made contiguous",
                                    grad_outputs=[g.contiguous() for g in case.grad_outputs])
            wanted += [contiguous] if contiguous is not None else []
        eager64 = self.wider(case) or ([None] * len(want[0]), [None] * len(want[1]))
        for k, (c, e) in enumerate(zip(got[0], want[0])):
            off, own = off_eager(c, e, eager64[0][k] if k < len(eager64[0]) else None)
            if off > context.output_tolerance():
                which = f"output {k}" if len(got[0]) > 1 else "output"
                return context.finding(self.check, WRONG_UNDER_COMPILE,
                                       f"{case.label}, the compiled forward's {which} is {off:.3g} (relative) off "
                                       f"eager's, beyond {ROUNDING_TIMES} times eager's own rounding ({own:.2g})",
                                       then=self.where())
        for i in context.op.inputs:
            offs = [off_eager(got[1][i], eager[1][i], eager64[1][i], context.typical(i)) for eager in wanted]
            off, own = min(offs)
            if off > context.tolerance(i):
                return context.finding(self.check, WRONG_UNDER_COMPILE,
                                       f"{case.label}, the compiled gradient is {off:.3g} (relative) off eager's, "
                                       f"beyond {ROUNDING_TIMES} times eager's own rounding ({own:.2g}) in "
                                       f"{str(context.values[i].dtype).removeprefix('torch.')}", i, self.where())
        return None

    def where(self):
        return f" (backend {backend_name(self.backend)}, torch {self.version})"

    def named(self, findings, cases_found):
        """The findings, the first naming the public issue of its class that affects this torch: the same tensor
        passed twice where only that case is wrong, an in-place op in the forward Dynamo traced, else every one."""
        if all(case.alias for case in cases_found):
            issue = SAME_TENSOR_TWICE
        elif self.compiler.in_place_in_forward():
            issue = IN_PLACE_IN_FORWARD
        else:
            issue = None
        known = known_issues(self.version, issue)
        return [dataclasses.replace(findings[0], evidence=findings[0].evidence + known)] + findings[1:]


# -- torch.library custom ops: opcheck -----------------------------------------------------------------------------

def custom_op_of(fn):
    """The OpOverload torch.library.opcheck takes, for a torch.library custom op (what torch.library.custom_op
    returns, torch.ops.ns.name, or torch.ops.ns.name.default); None for anything else."""
    if isinstance(fn, torch._ops.OpOverload):
        return fn
    if isinstance(fn, torch._ops.OpOverloadPacket):
        return getattr(fn, "default", None)
    overload = getattr(fn, "_opoverload", None)
    return overload if isinstance(overload, torch._ops.OpOverload) else None


# opcheck's checks, in its order, and what a failure of each means, in the checker's words.
OPCHECK_TESTS = {
    "test_schema": "the op's schema does not say what it does (an argument written into without being in "
                   "mutates_args, or an output that aliases an input): torch.compile reorders and reuses memory by it",
    "test_autograd_registration": "the op's gradient is not registered where torch.compile looks for it (use "
                                  "torch.library.register_autograd, not an autograd.Function inside the op)",
    "test_faketensor": "the op's fake implementation (register_fake) disagrees with the real one about its outputs' "
                       "shapes, strides or dtypes, or it has none: torch.compile traces the op with it",
    "test_aot_dispatch_static": "traced by AOTAutograd as torch.compile traces it (static shapes), the op's outputs "
                                "or gradients are not eager's",
    "test_aot_dispatch_dynamic": "traced by AOTAutograd as torch.compile traces it (dynamic shapes), the op's outputs "
                                 "or gradients are not eager's",
}


def opcheck_tests():
    """opcheck's checks that the installed torch has, in OPCHECK_TESTS's order."""
    try:
        from torch.testing._internal.optests.generate_tests import DEFAULT_TEST_UTILS
    except ImportError:  # pragma: no cover
        return []
    return [test for test in OPCHECK_TESTS if test in DEFAULT_TEST_UTILS]


def opcheck(context, check):
    """torch.library.opcheck's checks of a custom op, each alone on fresh copies of the values, a failure in the
    checker's words."""
    overload = custom_op_of(context.op.fn)
    outcomes = []
    for test in opcheck_tests():
        _, passed = context.op.fresh()
        args, kwargs = context.op.arguments(passed)
        announce(f"opcheck's {test}")
        try:
            with warnings_quiet():
                torch.library.opcheck(overload, tuple(args), kwargs, test_utils=(test,))
        except Exception as error:  # noqa: BLE001  (opcheck's verdict)
            reraise_fault(f"in opcheck's {test}", error)
            cause = error.__cause__ or error
            if interpreted_triton(error):
                outcomes.append(Note(check, f"opcheck's {test} cannot trace Triton's interpreter: run it on a GPU",
                                     NEEDS_A_GPU))
                continue
            outcomes.append(context.finding(check, WRONG_UNDER_COMPILE, f"opcheck's {test} fails: "
                                                                        f"{OPCHECK_TESTS[test]} "
                                                                        f"({clip(first_line(cause), 200)})",
                                            error=type(cause).__name__))
    return outcomes or [Passed(check)]


# torch's loggers that print a traceback of what the outcomes already say (a fake tensor that cannot run the op)
QUIET_LOGGERS = ("torch._subclasses.fake_tensor",)


@contextlib.contextmanager
def warnings_quiet():
    """opcheck's and Dynamo's warnings (a graph break, a fallback) and logged tracebacks left out: the outcomes say
    what matters."""
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for logger in loggers:
                logger.setLevel(logging.CRITICAL)
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)
