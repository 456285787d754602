"""For a library's own test suite: assert_backward fails a test with the checker's report.

    # conftest.py, or the top of the test file: before anything imports triton, so that on a
    # machine without a GPU the package can switch Triton's interpreter on
    from backward_check.testing import assert_backward

    def test_gelu_backward():
        assert_backward(MyGELU, torch.randn(64, 300), reference=torch.nn.functional.gelu)

It takes what check_backward takes, plus `allow` (trap names, or Trap objects, that the library
knows of and keeps, each shown in the report and not failing the test) and `strict` (also fail when a check could not
decide, instead of warning). It returns the Report, so a test can go on to assert more; a failure raises
BackwardCheckFailure, an AssertionError that carries the Report (its .report) and the failing traps (.traps)."""
import difflib
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from . import check_backward
from .calling import UsageError
from .report import TRAPS, Report, Trap


class BackwardCheckWarning(UserWarning):
    """A check that could not decide, or an allowed trap that is no longer there."""


class BackwardCheckFailure(AssertionError):
    """assert_backward's failure: a trap not allowed (or, with strict=True, a check that could not decide). An
    AssertionError, so pytest shows it as a failed assertion; it carries the Report (report), and the names of the
    traps that failed it (traps: empty where only strict=True failed it)."""

    def __init__(self, message: str, report: Report, traps: Iterable[str] = ()):
        super().__init__(message)
        self.report, self.traps = report, tuple(traps)


def allowed_names(allow):
    """allow as trap names: one name, names, Trap objects, or None; a name that is no trap is a usage error."""
    __tracebackhide__ = True
    if allow is None:
        return ()
    items = (allow,) if isinstance(allow, (str, Trap)) else tuple(allow)
    names = tuple(item.name if isinstance(item, Trap) else item for item in items)
    unknown = [name for name in names if name not in TRAPS]
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(str(name), list(TRAPS), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise UsageError(f"allow names no trap the checker knows: {', '.join(hints)}; its traps are "
                         + ", ".join(map(repr, TRAPS)))
    return names


def assert_backward(fn: Callable[..., Any], *args: Any, reference: Callable[..., Any] | None = None,
                    allow: str | Trap | Iterable[str | Trap] | None = (), strict: bool = False,
                    second_order: bool = False, name: str | None = None, grow: bool = True,
                    no_grad: str | int | Iterable[str | int] = (), compile: bool | str | Callable[..., Any] = False,
                    **kwargs: Any) -> Report:
    """check_backward(fn, *args, **kwargs), raising BackwardCheckFailure (an AssertionError) with the report where
    a trap is not in allow."""
    __tracebackhide__ = True  # pytest shows the report, not this function's frames
    allow = allowed_names(allow)
    try:
        report = check_backward(fn, *args, reference=reference, second_order=second_order, name=name, grow=grow,
                                no_grad=no_grad, compile=compile, **kwargs)
    except UsageError as error:
        raise UsageError(str(error)) from None  # the message says what is wrong; the checker's frames do not
    failing = [trap for trap in report.traps if trap not in allow]
    if failing:
        raise BackwardCheckFailure(f"the backward of {report.name} has {len(failing)} "
                                   f"trap{'s' if len(failing) > 1 else ''} ({', '.join(failing)}):\n{report}",
                                   report, failing)
    if report.undecided:
        if strict:
            raise BackwardCheckFailure(f"the checker could not decide every check of {report.name} "
                                       f"(strict=True):\n{report}", report)
        warnings.warn(BackwardCheckWarning(f"not every check could decide:\n{report}"), stacklevel=2)
    gone = [trap for trap in allow if trap not in report.traps]
    if gone:
        warnings.warn(BackwardCheckWarning(f"allowed but not found, so allow may drop it: {', '.join(gone)}"),
                      stacklevel=2)
    return report
