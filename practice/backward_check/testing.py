"""For a library's own test suite: assert_backward fails a test with the checker's report.

    # conftest.py, or the top of the test file: before anything imports triton, so that on a
    # machine without a GPU the package can switch Triton's interpreter on
    from backward_check.testing import assert_backward

    def test_gelu_backward():
        assert_backward(MyGELU, torch.randn(64, 300), reference=torch.nn.functional.gelu)

It takes what check_backward takes, plus `allow` (trap names the library knows of and keeps, each
shown in the report and not failing the test) and `strict` (also fail when a check could not
decide, instead of warning). It returns the Report, so a test can go on to assert more."""
import warnings

from . import check_backward
from .calling import UsageError
from .report import TRAPS


class BackwardCheckWarning(UserWarning):
    """A check that could not decide, or an allowed trap that is no longer there."""


def assert_backward(fn, *args, reference=None, allow=(), strict=False, second_order=False, name=None, grow=True,
                    no_grad=(), **kwargs):
    """check_backward(fn, *args, **kwargs), raising AssertionError with the report for each trap not in allow."""
    __tracebackhide__ = True  # pytest shows the report, not this function's frames
    allow = (allow,) if isinstance(allow, str) else tuple(allow)
    unknown = [trap for trap in allow if trap not in TRAPS]
    if unknown:
        raise UsageError(f"allow names no trap the checker knows: {', '.join(map(repr, unknown))}; its traps are "
                         + ", ".join(map(repr, TRAPS)))
    report = check_backward(fn, *args, reference=reference, second_order=second_order, name=name, grow=grow,
                            no_grad=no_grad, **kwargs)
    failing = [trap for trap in report.traps if trap not in allow]
    if failing:
        raise AssertionError(f"the backward of {report.name} has {len(failing)} trap{'s' if len(failing) > 1 else ''} "
                             f"({', '.join(failing)}):\n{report}")
    if report.undecided:
        if strict:
            raise AssertionError(f"the checker could not decide every check of {report.name} (strict=True):\n{report}")
        warnings.warn(BackwardCheckWarning(f"not every check could decide:\n{report}"), stacklevel=2)
    gone = [trap for trap in allow if trap not in report.traps]
    if gone:
        warnings.warn(BackwardCheckWarning(f"allowed but not found, so allow may drop it: {', '.join(gone)}"),
                      stacklevel=2)
    return report
