"""The backward checker, by concern: how the op is called (calling), the inputs and grad_outputs it
draws (layouts), the right gradient and its tolerance (truth), the checks (traps), the report.
``practice/backward_checker.py`` is its front door: ``check_backward`` and the command line."""
import time

from .backend import BACKEND, DEVICE  # noqa: E402  (first: picks the backend before triton is imported)
from . import layouts  # noqa: E402
from .calling import Op, UsageError, clip  # noqa: E402
from .report import TRAPS, Finding, Report  # noqa: E402
from .traps import Battery, second_order_problem  # noqa: E402

__all__ = ["check_backward", "Report", "Finding", "TRAPS", "UsageError", "DEVICE", "BACKEND"]


def check_backward(fn, *args, reference=None, second_order=False, name=None, grow=True, no_grad=(), **kwargs):
    """Calls fn the ways autograd really calls it, and returns a Report naming each trap found.

    fn: a torch.autograd.Function subclass (called through .apply, its forward's signature bound,
    defaults kept) or any callable. args, kwargs: what its forward takes; floating-point tensors
    get gradients, everything else passes through unchanged. Tensors are moved to the kernels'
    device. reference: a callable with the same arguments built from differentiable torch ops;
    without one, finite differences. second_order: also check create_graph=True. grow: also check
    the inputs grown past several 1024-element blocks. no_grad: the names (or positions) of
    floating-point arguments the op deliberately takes no gradient for (a rotary table, a fixed
    target); they pass through like integers. A keyword argument of the op that shares a name with
    one of these must be passed positionally.

    Raises UsageError (a ValueError) when the call itself is wrong: no floating-point tensor,
    arguments the forward cannot take, a reference that does not match."""
    start = time.perf_counter()
    op = Op(fn, args, kwargs, device=DEVICE, no_grad=(no_grad,) if isinstance(no_grad, (str, int)) else no_grad)
    report = Report(name or op.name)
    given = Battery(op, op.values, reference, report, "given")
    checked = [f"{layouts.describe_shapes(op.values)}"]
    if given.run() and grow:
        grown, why_not = layouts.grow(op.values, op.slots)
        if grown is None:
            if "already span" not in why_not:
                report.note(f"inputs not grown past one block ({why_not}): pass inputs of several thousand "
                            f"elements to check every block and the tail")
        else:
            agreed = reference is not None and given.truth.decides
            Battery(op, grown, reference, report, "grown", known_wrong=given.wrong, reference_agreed=agreed).run()
            checked.append(f"grown to {layouts.describe_shapes(grown)}")
    if second_order and "crashes" not in report.traps:
        try:
            second_order_problem(op, reference, report)
        except UsageError:
            raise
        except Exception as error:  # noqa: BLE001  (the op's failure under create_graph is the finding)
            report.add("crashes", f"under create_graph=True: {clip(f'{type(error).__name__}: {error}')}")
    truth = "the reference, in float64" if reference is not None else "finite differences"
    report.checked = f"{' and '.join(checked)}; against {truth}"
    report.seconds = time.perf_counter() - start
    return report
