"""The compile check (check_backward(..., compile=...)) against its zoo (tests/checker_zoo_compile.py) and the other
zoos: legal code comes back clean under torch.compile, a backend that changes the backward is named, the public
PyTorch issues are named where they affect the installed torch and clean where they are fixed, eager bugs are
reported once (never also as wrong under torch.compile), and torch.library custom ops go through opcheck.

BACKWARD_CHECK_COMPILE_BACKEND picks the backend the zoos compile with (default aot_eager: AOTAutograd's graphs run
eagerly, a second or two a check on a CPU; inductor costs 10 to 50 s a check there, see docs/library-authors.md).
Where Inductor itself is the point, a test asks for it, where the machine has Triton or a C++ compiler: the public
issues under both aot_eager and inductor (the issues are AOTAutograd's, the same under both), the Triton kernels
(the default backend: real Triton kernels compiled by Inductor on a GPU), a dropout's mask and a bfloat16 op whose
compiled answer is nearer exact than eager's. A failure prints the case, the backend, the torch and the report.
"""
import os
import shutil
import sys

import pytest
import torch
from chapter_scripts import REPO
from checker_zoo import LEGAL
from checker_zoo_compile import (COMPILED, CUSTOM_OPS_LEGAL, CUSTOM_OPS_PLANTED, PUBLIC, TRITON_OPS, WRONG_BACKEND,
                                 CancelsInBfloat16, CancelsRefusingFloat64, InPlaceInForward, SameTensorTwice,
                                 scaled_tanh, unexplained)
from checker_zoo_planted import PLANTED

sys.path.insert(0, str(REPO / "practice"))
from backward_checker import check_backward  # noqa: E402
from backward_check import DEVICE, compile_backend  # noqa: E402
from backward_check.checks import compiled  # noqa: E402
from backward_check.calling import UsageError  # noqa: E402
from backward_check.report import COMPILE_REFUSED, GRAPH_BREAK, NEEDS_A_GPU  # noqa: E402

BACKEND = os.environ.get("BACKWARD_CHECK_COMPILE_BACKEND", "aot_eager")
UNDER_COMPILE = "under torch.compile"
ON_GPU = torch.cuda.is_available()
TORCH = compiled.torch_version()
TRITON_INTERPRETED = not ON_GPU


def where(case, backend, report):
    """What reproduces a failure: the case, the backend, the torch, and the report."""
    return f"case {case!r}, compile={getattr(backend, '__name__', backend)!r}, torch {torch.__version__}:\n{report}"


def compile_notes(report):
    return [n for n in report.notes if "torch.compile" in n]


# -- legal code comes back clean ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(LEGAL))
def test_legal_code_is_clean_under_compile(case):
    op, args, kwargs, reference = LEGAL[case]
    report = check_backward(op, *args, reference=reference, compile=BACKEND, grow=False, **kwargs)
    assert not unexplained(report) and not report.inconclusive, where(case, BACKEND, report)
    compared = UNDER_COMPILE in report.passed or report.traps
    assert compared or compile_notes(report), where(case, BACKEND, report)  # compared, or a note says why not


@pytest.mark.parametrize("case", list(CUSTOM_OPS_LEGAL))
def test_a_legal_custom_op_passes_opcheck_and_the_compiled_backward(case):
    op, args, kwargs, reference = CUSTOM_OPS_LEGAL[case]
    report = check_backward(op, *args, reference=reference, compile=BACKEND, grow=False, **kwargs)
    assert not unexplained(report) and not report.inconclusive, where(case, BACKEND, report)
    assert {"torch.library.opcheck", UNDER_COMPILE} <= set(report.passed), where(case, BACKEND, report)


@pytest.mark.parametrize("case", list(TRITON_OPS))
def test_triton_kernels_are_clean_under_compile(case):
    """With the default backend (Inductor, where Triton or a C++ compiler is there): on a GPU the kernels compile
    (Triton's, called directly or through triton_op) and the check compares; under Triton's interpreter on the CPU
    nothing can be traced, and a note says to run it on a GPU."""
    op, args, kwargs, reference = TRITON_OPS[case]
    report = check_backward(op, *args, reference=reference, compile=True, grow=False, **kwargs)
    assert not unexplained(report), where(case, True, report)
    if TRITON_INTERPRETED:
        assert report.noted(NEEDS_A_GPU), where(case, True, report)
    else:
        assert UNDER_COMPILE in report.passed and not report.noted(NEEDS_A_GPU), where(case, True, report)


@pytest.mark.skipif(not hasattr(torch.library, "triton_op"), reason="torch.library.triton_op arrived in torch 2.6")
def test_the_checked_triton_op_is_the_one_registered_in_this_process():
    """The zoo and test_extras.py share one module of extras/triton_op.py (chapter_scripts.load_extra). Loaded twice in
    one process, as a pytest-xdist worker imports every test file, it registers chapter17::gelu again; torch.library
    then destroys the first registration, and the first module's operator is left with a stale overload."""
    import chapter_scripts
    op = TRITON_OPS["chapter17::gelu (torch.library.triton_op)"][0]
    assert op is chapter_scripts.load_extra("triton_op").gelu
    assert op._opoverload is torch.ops.chapter17.gelu.default


@pytest.mark.skipif(not compile_backend.inductor_can_run_on(DEVICE), reason="needs Inductor: a C++ compiler or Triton")
def test_compiled_code_nearer_exact_than_eager_is_not_wrong():
    """Inductor keeps bfloat16 in float32 between ops, so where eager's rounding cancels, the compiled answer differs
    from eager's by far more than bfloat16's tolerance, and by less than eight times eager's own rounding (measured on
    float64 copies): no finding (the eager checks may have their own opinion of so imprecise an op)."""
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3)).to(DEVICE, torch.bfloat16)
    for op in (CancelsInBfloat16, CancelsRefusingFloat64):  # float64 copies, or float32 ones where it refuses those
        report = check_backward(op, x, compile="inductor", grow=False)
        assert COMPILED not in report.traps and UNDER_COMPILE in report.passed, str(report)


@pytest.mark.skipif(not compile_backend.inductor_can_run_on(DEVICE), reason="needs Inductor: a C++ compiler or Triton")
def test_a_dropout_draws_the_same_mask_compiled():
    """Inductor draws random numbers its own way unless told to draw them as eager does (fallback_random): a
    dropout, seeded alike for both calls, would otherwise be two different masks, and a finding."""
    op, args, kwargs, reference = LEGAL["random numbers drawn in forward (a dropout)"]
    report = check_backward(op, *args, reference=reference, compile="inductor", grow=False, **kwargs)
    assert report.clean and UNDER_COMPILE in report.passed, str(report)


# -- a wrong compiler is named ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["torch ops inside", "two inputs, honouring needs_input_grad", "two outputs",
                                  "integer target, eps, reduction='none'", "torch ops inside, in bfloat16",
                                  "a 0-dim output", "running statistics updated in place (no_grad)"])
def test_a_backend_that_changes_the_backward_is_named(case):
    op, args, kwargs, reference = LEGAL[case]
    report = check_backward(op, *args, reference=reference, compile=WRONG_BACKEND, grow=False, **kwargs)
    assert report.traps == [COMPILED], where(case, WRONG_BACKEND, report)
    assert "scales_the_first_gradient" in str(report), where(case, WRONG_BACKEND, report)


def test_a_backend_that_changes_a_custom_ops_backward_is_named():
    op, args, kwargs, reference = CUSTOM_OPS_LEGAL["a custom op with register_fake and register_autograd"]
    report = check_backward(op, *args, reference=reference, compile=WRONG_BACKEND, grow=False, **kwargs)
    assert report.traps == [COMPILED], where("custom op", WRONG_BACKEND, report)


# -- the public issues, by torch version ---------------------------------------------------------------------------------

def public_backends():
    return ["aot_eager"] + (["inductor"] if compile_backend.inductor_can_run_on(DEVICE) else [])


@pytest.mark.parametrize("backend", public_backends())
@pytest.mark.parametrize("case", list(PUBLIC))
def test_a_public_issue_is_named_where_it_affects_this_torch(case, backend):
    op, args, kwargs, reference, issue = PUBLIC[case]
    report = check_backward(op, *args, reference=reference, compile=backend, grow=False, **kwargs)
    if issue.affects(TORCH):
        assert report.traps == [COMPILED], where(case, backend, report)
        finding = report.findings[0]
        assert f"pytorch/pytorch#{issue.number}" in finding.evidence and TORCH in finding.evidence, \
            where(case, backend, report)
    else:
        assert report.clean and UNDER_COMPILE in report.passed, where(case, backend, report)


# -- eager bugs are reported once -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(PLANTED))
def test_an_eager_bug_is_not_also_wrong_under_compile(case):
    """The compile check compares the compiled op with itself eagerly, so an eager bug (a layout misread that the
    compiled backward, handed a contiguous grad_output, gets right; state on the class; a wrong formula) is the
    other checks' to name, never this one's too."""
    op, args, kwargs, reference, trap = PLANTED[case]
    report = check_backward(op, *args, reference=reference, compile=BACKEND, **kwargs)
    assert COMPILED not in [f.trap.name for f in unexplained(report)], where(case, BACKEND, report)
    assert trap in report.traps, where(case, BACKEND, report)


# -- custom ops: opcheck's checks, in the checker's words ------------------------------------------------------------------

@pytest.mark.parametrize("case", list(CUSTOM_OPS_PLANTED))
def test_opcheck_failures_are_named(case):
    op, args, kwargs, reference, test = CUSTOM_OPS_PLANTED[case]
    report = check_backward(op, *args, reference=reference, compile=BACKEND, grow=False, **kwargs)
    assert report.traps == [COMPILED], where(case, BACKEND, report)
    opcheck = [f for f in report.all_findings if f.check == "torch.library.opcheck"]
    assert opcheck and f"opcheck's {test} fails" in opcheck[0].evidence, where(case, BACKEND, report)


def test_opcheck_runs_only_with_the_compile_check():
    op, args, kwargs, reference = CUSTOM_OPS_LEGAL["a custom op with register_fake and register_autograd"]
    report = check_backward(op, *args, reference=reference, grow=False, **kwargs)
    assert "torch.library.opcheck" not in report.passed and UNDER_COMPILE not in report.passed, str(report)


@pytest.mark.parametrize("op, calls", [(scaled_tanh, lambda x: scaled_tanh(x, 0.5)),
                                       (SameTensorTwice, lambda x: SameTensorTwice.apply(x, x * 2.0)),
                                       (torch.tanh, torch.tanh)])
def test_the_op_is_found_in_what_dynamo_compiled(op, calls):
    """How the check tells the op compiled from the op run eagerly after a graph break at its call."""
    compiler = compiled.Compiler(op, "aot_eager")
    with compiled.compiling():
        compiler.compile(calls)(torch.randn(3, requires_grad=True))
        assert compiler.op_compiled(compiler.graphs) and not compiler.op_compiled([])
    elsewhere = compiled.Compiler(op, "aot_eager")
    with compiled.compiling():
        elsewhere.compile(lambda x: torch.sin(x) * 2.0)(torch.randn(3, requires_grad=True))
        assert elsewhere.op_compiled(elsewhere.graphs) == (op is torch.tanh)  # any op at all, for a plain callable


def test_a_custom_op_is_found_however_it_is_named():
    assert compiled.custom_op_of(scaled_tanh) is torch.ops.backward_check_compile_zoo.scaled_tanh.default
    assert compiled.custom_op_of(torch.ops.backward_check_compile_zoo.scaled_tanh) is \
        torch.ops.backward_check_compile_zoo.scaled_tanh.default
    assert compiled.custom_op_of(SameTensorTwice) is None and compiled.custom_op_of(torch.tanh) is None


# -- graph breaks and refusals are notes that say where ---------------------------------------------------------------------

class PrintsInForward(torch.autograd.Function):
    """Legal, but Dynamo cannot trace a Python side effect (a list on the class): fullgraph=True refuses it."""
    calls = []

    @staticmethod
    def forward(ctx, x):
        PrintsInForward.calls.append(len(PrintsInForward.calls))
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * torch.cos(x)


def sin_then_break(x):
    y = torch.sin(x) * 2.0
    torch._dynamo.graph_break()
    return y + 1.0


def test_a_refusal_under_fullgraph_is_a_note_that_says_where():
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(5)).to(DEVICE)
    report = check_backward(PrintsInForward, x, reference=torch.sin, compile=BACKEND, grow=False)
    assert report.clean, str(report)
    notes = report.noted(GRAPH_BREAK)
    assert notes and "fullgraph=True" in notes[0] and "test_checker_compile.py:" in notes[0], str(report)


def test_a_graph_break_outside_the_op_still_compares_what_compiled():
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(6)).to(DEVICE)
    report = check_backward(sin_then_break, x, reference=lambda x: torch.sin(x) * 2.0 + 1.0, compile=BACKEND,
                            grow=False)
    assert report.clean and UNDER_COMPILE in report.passed, str(report)
    assert any("graph breaks instead" in n for n in report.noted(GRAPH_BREAK)), str(report)


def test_a_wrong_backend_is_named_past_a_graph_break():
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(7)).to(DEVICE)
    report = check_backward(sin_then_break, x, reference=lambda x: torch.sin(x) * 2.0 + 1.0, compile=WRONG_BACKEND,
                            grow=False)
    assert report.traps == [COMPILED], str(report)


# -- the backend, and the keyword -------------------------------------------------------------------------------------------

def test_the_default_backend_is_inductor_only_where_a_compiler_exists(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    assert compile_backend.backend_for(True, cpu) == "aot_eager"
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}" if name == "g++" else None)
    assert compile_backend.backend_for(True, cpu) == "inductor"
    assert compile_backend.backend_for(False, cpu) is None and compile_backend.backend_for(None, cpu) is None
    assert compile_backend.backend_for("aot_eager", cpu) == "aot_eager"


@pytest.mark.parametrize("bad, words", [("inductr", "names no backend"), (3, "takes True, False")])
def test_a_wrong_compile_argument_is_a_usage_error(bad, words):
    with pytest.raises(UsageError, match=words):
        check_backward(SameTensorTwice, torch.randn(3), torch.randn(3), compile=bad)


def test_the_compile_check_leaves_dynamo_as_it_found_it():
    """Dynamo's caches are emptied after the check, so the caller's own compiled functions never meet the check's
    code or its recompilation limit; a check never meets another's."""
    op, args, kwargs, reference = LEGAL["torch ops inside"]
    check_backward(op, *args, reference=reference, compile=BACKEND, grow=False, **kwargs)
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    assert not _debug_get_cache_entry_list(compiled.call_op(None).__code__)


def test_the_environment_turns_the_compile_check_on(monkeypatch):
    """What the pytest plugin's --backward-check-compile sets for its worker."""
    monkeypatch.delenv(compile_backend.ENVIRONMENT, raising=False)
    assert compile_backend.backend_from_environment() is False
    monkeypatch.setenv(compile_backend.ENVIRONMENT, "default")
    assert compile_backend.backend_from_environment() is True
    monkeypatch.setenv(compile_backend.ENVIRONMENT, "aot_eager")
    assert compile_backend.backend_from_environment() == "aot_eager"


def test_in_place_ops_are_read_from_the_traced_forward():
    """How a finding names #180642: the forward Dynamo traced writes in place (y += 1); SameTensorTwice's does not."""
    found = {}
    for op, args, _, _, _ in PUBLIC.values():
        compiler = compiled.Compiler(op, "aot_eager")
        with compiled.compiling():
            compiler.compile(lambda a, b: op.apply(a, b), fullgraph=True)(*(a.clone().requires_grad_() for a in args))
            found[op] = compiler.in_place_in_forward()
    assert found == {InPlaceInForward: True, SameTensorTwice: False}


def test_in_the_wild_hands_compile_to_the_checker(monkeypatch):
    """research/in_the_wild.py --compile sets the variable its children inherit; run_checker passes it to the checker."""
    sys.path.insert(0, str(REPO / "research"))
    import in_the_wild
    from backward_check import Report
    assert in_the_wild.COMPILE_VARIABLE == compile_backend.ENVIRONMENT
    seen = {}

    def checker(fn, *args, **kwargs):
        seen.update(kwargs)
        return Report("op")

    monkeypatch.setenv(compile_backend.ENVIRONMENT, "aot_eager")
    in_the_wild.run_checker(checker, torch.tanh, (torch.randn(3),), {}, torch.tanh, "tanh")
    assert seen["compile"] == "aot_eager"
    monkeypatch.delenv(compile_backend.ENVIRONMENT)
    in_the_wild.run_checker(checker, torch.tanh, (torch.randn(3),), {}, torch.tanh, "tanh")
    assert seen["compile"] is False


CALLS = torch.zeros(())


def scaled_by_its_calls(x):
    """Keeps state Dynamo can compile (a module-level tensor it counts its calls in): no two calls agree."""
    CALLS.add_(1)
    return x * x / CALLS


def test_an_op_that_disagrees_with_itself_gets_no_compile_verdict():
    """Compiled and eager calls of an op whose calls disagree with each other decide nothing: a ?? line, never ok
    (eager's own drift between its call in the op's dtype and its float64 one would otherwise pass as rounding)."""
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(8)).to(DEVICE)
    report = check_backward(scaled_by_its_calls, x, compile=BACKEND, grow=False)
    assert UNDER_COMPILE not in report.passed, str(report)
    assert any(line.startswith(UNDER_COMPILE) for line in report.inconclusive), str(report)
