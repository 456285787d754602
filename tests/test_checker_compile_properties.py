"""Property tests of the compile check over the case families of tests/checker_zoo_families.py, as
test_checker_properties.py draws them (a size class across block boundaries, a rank, a dtype, a seed, a scale):

- a legal family comes back clean under torch.compile: compared, or a note that says why not (Triton's interpreter
  on the CPU, a graph break at the op), never wrong under torch.compile but for PyTorch's own bugs, each put down to
  a public issue that affects the torch (checker_zoo_compile.unexplained);
- a planted family keeps exactly its traps under torch.compile: its eager bug is never reported a second time;
- a backend that scales the first gradient of the backward graph (tests/checker_zoo_compile.py) is named on every
  legal family the check compares, at every size and dtype (where nothing compiled was compared, a note says why:
  Triton's interpreter, a graph break at the op such as LayerNorm's classmethod backward, or Dynamo failing on a
  backward that calls its parent class's).

BACKWARD_CHECK_COMPILE_BACKEND picks the backend (default aot_eager, a second or two a check on a CPU; inductor
compiles C++ there, 10 to 50 s a check); BACKWARD_CHECK_COMPILE_EXAMPLES the examples per family (default 2). A
failure prints the family, the draw, a line that rebuilds the case, the backend and the report.
"""
import os
import sys

import pytest
from chapter_scripts import REPO
from checker_zoo_compile import COMPILED, WRONG_BACKEND, unexplained
from checker_zoo_families import FAMILIES
from hypothesis import given, settings
from hypothesis import strategies as st
from test_checker_properties import PHASES, SETTINGS, case_strategy

sys.path.insert(0, str(REPO / "practice"))
from backward_checker import check_backward  # noqa: E402
from backward_check.report import COMPILE_REFUSED, GRAPH_BREAK, NEEDS_A_GPU  # noqa: E402

BACKEND = os.environ.get("BACKWARD_CHECK_COMPILE_BACKEND", "aot_eager")
EXAMPLES = int(os.environ.get("BACKWARD_CHECK_COMPILE_EXAMPLES", "2"))
LEGAL = [name for name, fam in FAMILIES.items() if fam.legal]
PLANTED = [name for name, fam in FAMILIES.items() if not fam.legal and not fam.pending]


def judged(name, draw, backend, grow):
    shape, dtype, seed, scale = draw
    case = FAMILIES[name].make(tuple(shape), dtype, seed, scale)
    report = check_backward(case.op, *case.args, reference=case.reference, compile=backend, grow=grow,
                            **case.options, **case.kwargs)
    where = (f"family {name!r}, shape={tuple(shape)}, dtype={dtype}, seed={seed}, scale={scale:g}, "
             f"compile={getattr(backend, '__name__', backend)!r}\n"
             f"  rebuild: FAMILIES[{name!r}].make({tuple(shape)}, {dtype}, {seed}, {scale!r})\n{report}")
    return report, where


@pytest.mark.parametrize("name", LEGAL)
@settings(max_examples=EXAMPLES, phases=PHASES, **SETTINGS)
@given(data=st.data())
def test_a_legal_family_is_clean_under_compile(name, data):
    report, where = judged(name, data.draw(case_strategy(FAMILIES[name]), label="shape, dtype, seed, scale"),
                           BACKEND, grow=False)
    assert not unexplained(report), where
    assert not report.inconclusive or FAMILIES[name].undecided_ok, where
    assert report.traps or "under torch.compile" in report.passed or [n for n in report.notes if "torch.compile" in n], \
        where


@pytest.mark.parametrize("name", PLANTED)
@settings(max_examples=EXAMPLES, phases=PHASES, **SETTINGS)
@given(data=st.data())
def test_a_planted_family_keeps_its_traps_under_compile(name, data):
    draw = data.draw(case_strategy(FAMILIES[name]), label="shape, dtype, seed, scale")
    report, where = judged(name, draw, BACKEND, grow=True)
    assert {f.trap.name for f in unexplained(report)} == set(FAMILIES[name].expected(draw[0])), where


@pytest.mark.parametrize("name", LEGAL)
@settings(max_examples=EXAMPLES, phases=PHASES, **SETTINGS)
@given(data=st.data())
def test_a_backend_that_changes_the_backward_is_named_at_every_size(name, data):
    report, where = judged(name, data.draw(case_strategy(FAMILIES[name]), label="shape, dtype, seed, scale"),
                           WRONG_BACKEND, grow=False)
    if not report.traps and "under torch.compile" not in report.passed:  # nothing compiled was compared
        assert report.noted(NEEDS_A_GPU) or report.noted(COMPILE_REFUSED) or \
            [n for n in report.noted(GRAPH_BREAK) if "ran eagerly" in n], where
        return
    assert report.traps == [COMPILED], where
