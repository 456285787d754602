"""The backward checker, by concern: how the op is called (calling), what the checker varies
(strategies), the right gradient and its tolerance (truth), what every check reads (context), the
checks by family (writes, state, values, strides, uses, returned, second_order, compiled), their order and
skip rules (runner), and the report. ``check_backward`` is its front door, and
``backward_check.testing.assert_backward`` its pytest form, and ``backward_check.cli`` its command line
(``backward-check my_ops.py``)."""
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from .backend import BACKEND, DEVICE  # first: picks the backend before triton is imported
from . import runner
from .compile_backend import backend_for
from .calling import ComplexOutputs, Op, Sample, UsageError
from .complex_parts import on_real_parts, takes_complex
from .report import ALL_TRAPS, TRAPS, Finding, Note, Passed, Report, Trap, Undecided

__all__ = ["check_backward", "Sample", "Report", "Finding", "Note", "Undecided", "Passed", "Trap", "TRAPS",
           "ALL_TRAPS", "UsageError", "DEVICE", "BACKEND"]


def check_backward(fn: Callable[..., Any], *args: Any, reference: Callable[..., Any] | None = None,
                   second_order: bool = False, name: str | None = None, grow: bool = True,
                   no_grad: str | int | Iterable[str | int] = (),
                   frozen_by_callers: str | int | Iterable[str | int] = (),
                   compile: bool | str | Callable[..., Any] = False, made_per_call: bool = False,
                   **kwargs: Any) -> Report:
    """Calls fn the ways autograd really calls it, and returns a Report naming each trap found.

    fn: a torch.autograd.Function subclass (called through .apply, its forward's signature bound,
    defaults kept) or any callable. args, kwargs: what its forward takes; floating-point tensors
    get gradients, everything else passes through unchanged; complex tensors (arguments and outputs) are
    checked through their real and imaginary parts, under PyTorch's convention for complex gradients
    (complex_parts). Tensors are moved to the kernels'
    device, unless a function argument reads some of them: then every tensor stays where it is, and
    the checker writes the values it tries into the very tensors the function reads. Or pass one
    Sample(*args, **kwargs) instead, which keeps the op's arguments apart from the checker's options
    (an op with an argument called `reference`, say).
    reference: a callable with the same arguments built from differentiable torch ops; without one,
    finite differences. second_order: also check create_graph=True. grow: also check the inputs
    grown past several 1024-element blocks. no_grad: the names (or positions) of floating-point
    arguments the op deliberately takes no gradient for (a rotary table, a fixed target, a running
    statistic); they pass through like integers, and the checker never changes them. frozen_by_callers:
    the names (or positions) of inputs the op's callers do pass frozen (requires_grad=False); freezing any
    other is a call no caller makes, and the op's refusal of it a note, not a crash. compile: also check
    the op under torch.compile against itself eagerly (and a torch.library custom op through opcheck):
    True picks inductor where it can generate code for the op's device (a C++ compiler, or Triton on a
    GPU), else aot_eager; or pass a backend's name or a backend callable. It costs a few compilations
    (seconds each), so it is off by default; Dynamo's caches are emptied before and after it. made_per_call:
    fn is a class its callers make afresh for every call (a layer that builds its Function in a closure), so no
    caller applies one class object twice: what one call leaves behind for the next is then a note, not the
    trap 'keeps state between calls' (the pytest plugin passes it where the suite never applied a class made
    inside a function twice).

    Raises UsageError (a ValueError) when the call itself is wrong: no floating-point tensor,
    arguments the forward cannot take, a reference that does not match."""
    start = time.perf_counter()
    if args and isinstance(args[0], Sample):
        if len(args) > 1 or kwargs:
            raise UsageError("pass the op's arguments either in one Sample or after the op, not both")
        args, kwargs = args[0].args, args[0].kwargs
    backend = backend_for(compile, DEVICE)
    options = {"no_grad": no_grad, "frozen_by_callers": frozen_by_callers, "second_order": second_order,
               "grow": grow, "compile_backend": backend, "made_per_call": made_per_call}
    if takes_complex(args, kwargs):
        report = _checked(*on_real_parts(fn, args, kwargs, reference), name, **options)
    else:
        try:
            report = _checked(fn, args, kwargs, reference, None, name, **options)
        except ComplexOutputs:  # real inputs, complex outputs: again, on the outputs' real and imaginary parts
            report = _checked(*on_real_parts(fn, args, kwargs, reference), name, **options)
    report.seconds = time.perf_counter() - start
    return report


def _checked(fn, args, kwargs, reference, note, name, *, no_grad, frozen_by_callers, second_order, grow,
             compile_backend, made_per_call):
    """The Report of check_backward's checks of fn on args and kwargs (note first, where one is given)."""
    op = Op(fn, args, kwargs, device=DEVICE, no_grad=no_grad, frozen_by_callers=frozen_by_callers)
    if op.kept and reference is not None:
        raise UsageError(f"{', '.join(f'`{op.slots[i].name}`' for i in op.kept)} of {op.name} "
                         f"{'is' if len(op.kept) == 1 else 'are'} read by a function argument, which a reference "
                         f"given the checker's copies could not read: leave reference out (finite differences step "
                         f"those very tensors)")
    report = Report(name or op.name)
    with warnings.catch_warnings():
        # A kernel fed a layout it misreads computes on whatever memory it reads; the interpreter's NumPy
        # then warns of overflows and NaNs, which say nothing the report does not.
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
        try:
            outcomes, report.checked = runner.run(op, reference, second_order=second_order, grow_inputs=grow,
                                                  compile_backend=compile_backend, made_per_call=made_per_call)
        finally:
            op.restore()  # the tensors a function argument reads hold what they held
    for outcome in ([note] if note else []) + outcomes:
        report.add(outcome)
    return report
