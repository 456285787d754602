"""practice/backward_checker.py from a terminal: real signatures through example_inputs, exit codes,
usage errors in one line, the backend chosen before the reader's file imports triton, the file's own folder
on the import path, Functions the file imports, and --help and the reports saying what the checker does."""
import subprocess
import sys
import textwrap

from backward_check.checks.truth import FD_MAX_CALLS
from chapter_scripts import REPO

CHECKER = REPO / "practice/backward_checker.py"


def run(*args, cwd=REPO):
    return subprocess.run([sys.executable, str(CHECKER), *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def write(tmp_path, body, name="my_ops.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


OPS = '''
    import triton  # imported first, as a reader's own kernels file does
    import torch

    class Good(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.exp(x)

        @staticmethod
        def backward(ctx, grad_output):
            x, = ctx.saved_tensors
            return grad_output * torch.exp(x)

    class Uniform(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.exp(x)

        @staticmethod
        def backward(ctx, grad_output):
            x, = ctx.saved_tensors
            return grad_output.mean() * torch.exp(x)
'''


def test_exit_1_on_a_trap_and_0_when_clean(tmp_path):
    module = write(tmp_path, OPS)
    clean = run(module, "--function", "Good")
    assert clean.returncode == 0 and "check_backward(Good): clean" in clean.stdout, clean.stdout + clean.stderr
    trapped = run(module)
    assert trapped.returncode == 1 and "assumes a uniform grad_output" in trapped.stdout, trapped.stdout


def test_usage_errors_exit_2_in_one_line(tmp_path):
    module = write(tmp_path, OPS)
    missing = run(module, "--function", "Nope")
    assert missing.returncode == 2 and "defines or imports no Function named ['Nope']" in missing.stderr
    assert "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    assert run(tmp_path / "none.py").returncode == 2
    broken = write(tmp_path, "import torch\nraise RuntimeError('my file is broken')\n", "broken.py")
    result = run(broken)
    assert result.returncode == 2 and "could not import" in result.stderr and "Traceback" not in result.stderr


def test_a_file_that_is_not_python_is_refused_in_one_line(tmp_path):
    """A notebook (or any file but a .py) is no script to import: one line naming it, exit 2, no traceback (before,
    importlib found no loader for it and the command died in a traceback)."""
    notebook = write(tmp_path, '{"cells": [], "nbformat": 4}', "my_ops.ipynb")
    result = run(notebook)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "is not a Python file (.py)" in result.stderr and "nbconvert --to script" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "nbconvert" not in run(write(tmp_path, "x = 1\n", "my_ops.txt")).stderr


REAL_SIGNATURES = '''
    import sys
    sys.path.insert(0, {tests!r})
    import torch
    from checker_zoo import (CrossEntropyWithZLoss, LeakyScale, cross_entropy_with_z_loss, leaky_reference,
                             logits_and_target)

    class LossAndZLoss(CrossEntropyWithZLoss):
        pass

    class Leaky(LeakyScale):
        @staticmethod
        def example_inputs():
            return torch.randn(4, 6), 0.1, "leaky"      # eps keeps its default

        @staticmethod
        def reference(x, alpha, mode, bias=None, eps=1e-6):
            return leaky_reference(x, alpha, mode, bias, eps)

    example_inputs = {{"LossAndZLoss": lambda: dict(zip(("logits", "target"), logits_and_target()),
                                                     eps=1e-6, reduction="none")}}
    reference = {{"LossAndZLoss": cross_entropy_with_z_loss}}
'''


def test_a_function_with_eps_reduction_integer_target_and_two_outputs_needs_no_wrapper(tmp_path):
    module = write(tmp_path, REAL_SIGNATURES.format(tests=str(REPO / "tests")))
    result = run(module)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check_backward(LossAndZLoss): clean" in result.stdout and "check_backward(Leaky): clean" in result.stdout
    assert "against the reference" in result.stdout


def test_a_float_parameter_without_inputs_is_a_usage_error(tmp_path):
    module = write(tmp_path, '''
        import torch

        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, alpha: float):
                ctx.alpha = alpha
                return x * alpha

            @staticmethod
            def backward(ctx, grad_output):
                return grad_output * ctx.alpha, None
    ''')
    result = run(module)
    assert result.returncode == 2 and "`alpha: float`" in result.stderr and "example_inputs" in result.stderr


def test_a_forward_refusing_the_made_up_tensors_is_a_usage_error_not_a_trap(tmp_path):
    """`dim` has no annotation, so the checker made up a tensor for it, and softmax refused that: the
    file needs example_inputs, and the op is not to blame."""
    module = write(tmp_path, '''
        import torch

        class Softmax(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, dim):
                y = torch.softmax(x, dim)
                ctx.save_for_backward(y)
                ctx.dim = dim
                return y

            @staticmethod
            def backward(ctx, grad_output):
                y, = ctx.saved_tensors
                return y * (grad_output - (grad_output * y).sum(ctx.dim, keepdim=True)), None
    ''')
    result = run(module)
    assert result.returncode == 2 and "example_inputs" in result.stderr and "TRAP" not in result.stdout, (
        result.stdout + result.stderr)


def test_the_solutions_are_clean_against_finite_differences():
    """The issue's done-line: the repository's own correct Functions, TritonSiLU's float32 kernel among
    them, with no reference given (the file defines none)."""
    result = run(REPO / "practice/solutions.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_string_annotations_are_no_tensors_and_one_functions_error_spares_the_others(tmp_path):
    module = write(tmp_path, '''
        from __future__ import annotations
        import torch

        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, n: int):
                ctx.n = n
                return x * n

            @staticmethod
            def backward(ctx, grad_output):
                return grad_output * ctx.n, None

        class Exp(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return torch.exp(x)

            @staticmethod
            def backward(ctx, grad_output):
                x, = ctx.saved_tensors
                return grad_output * torch.exp(x)
    ''')
    result = run(module)
    assert result.returncode == 2 and "Scale: " in result.stderr and "`n: int`" in result.stderr, result.stderr
    assert "check_backward(Exp): clean" in result.stdout, result.stdout


def test_help_says_what_the_file_may_define():
    """A usage error says (see --help): --help must then explain what it points to."""
    result = run("--help")
    assert result.returncode == 0
    for word in ("example_inputs", "reference", "no_grad", "annotated", "Exit status"):
        assert word in result.stdout, result.stdout


def test_help_says_what_finite_differences_do_past_their_budget():
    """Past the budget of calls the gradient is checked along random directions (backward_check/checks/truth.py), not
    refused, as --help once said."""
    help_text = " ".join(run("--help").stdout.split())
    assert f"element by element up to {FD_MAX_CALLS:,} calls of the op" in help_text, help_text
    assert "random directions past that" in help_text and "refused" not in help_text, help_text
    assert "own folder on the import path" in help_text and "outputs from 0" in help_text, help_text


def test_the_checked_file_imports_the_module_beside_it(tmp_path):
    """As Python runs a script: the file's own folder first on the import path, wherever the command runs."""
    write(tmp_path, """
        def square_gradient(x, grad_output):
            return 2 * x * grad_output
    """, "helpers.py")
    module = write(tmp_path, """
        import torch
        from helpers import square_gradient

        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, grad_output):
                x, = ctx.saved_tensors
                return square_gradient(x, grad_output)
    """)
    result = run(module, cwd=REPO)
    assert result.returncode == 0 and "check_backward(Square): clean" in result.stdout, result.stdout + result.stderr


def test_function_checks_a_function_the_file_imports(tmp_path):
    """--function NAME takes a Function the file imports, not only one it defines; without it, the imported ones
    are named in the usage error."""
    write(tmp_path, OPS, "kernels.py")
    module = write(tmp_path, "from kernels import Good, Uniform  # the Functions live beside this file\n")
    trapped = run(module, "--function", "Uniform")
    assert trapped.returncode == 1 and "assumes a uniform grad_output" in trapped.stdout, (
        trapped.stdout + trapped.stderr)
    none_named = run(module)
    assert none_named.returncode == 2, none_named.stdout + none_named.stderr
    assert "defines no torch.autograd.Function (it imports ['Good', 'Uniform']: name one with --function)" in \
        none_named.stderr, none_named.stderr


def test_a_report_that_numbers_outputs_says_they_count_from_0(tmp_path):
    """The report names an output by its index in what forward returns ("output 1" is the second): the command
    line says so under that report, and only there."""
    module = write(tmp_path, OPS + '''

    class TwoOutputs(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2, x * x

        @staticmethod
        def backward(ctx, grad_double, grad_square):
            x, = ctx.saved_tensors
            return grad_double * 2 + 2 * x  # the second output's grad_output left out
''')
    result = run(module, "--function", "TwoOutputs", "--function", "Uniform")
    assert result.returncode == 1, result.stdout + result.stderr
    two, uniform = result.stdout.split("check_backward(Uniform)")
    assert "it ignores output 1's grad_output" in two, two
    assert two.rstrip().endswith("(outputs are counted from 0, as Python indexes what forward returns: output 0 is "
                                 "the first)"), two
    assert "counted from 0" not in uniform, uniform


def test_parameters_with_neither_annotation_nor_default_are_not_guessed(tmp_path):
    """forward(ctx, x, eps, mode): the checker cannot tell tensors from numbers, so it asks, and reports no
    trap on code it would have called wrongly."""
    module = write(tmp_path, '''
        import torch

        class Leaky(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, eps, mode):
                ctx.save_for_backward(x)
                ctx.eps = eps
                return torch.where(x > 0, x, eps * x)

            @staticmethod
            def backward(ctx, grad_output):
                x, = ctx.saved_tensors
                return grad_output * torch.where(x > 0, 1.0, ctx.eps), None, None

        class Annotated(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x: torch.Tensor, y: torch.Tensor):
                ctx.save_for_backward(x, y)
                return x * y

            @staticmethod
            def backward(ctx, grad_output):
                x, y = ctx.saved_tensors
                return grad_output * y, grad_output * x
    ''')
    result = run(module)
    assert result.returncode == 2 and "`x`, `eps`, `mode`" in result.stderr and "TRAP" not in result.stdout, (
        result.stdout + result.stderr)
    assert "check_backward(Annotated): clean" in result.stdout, result.stdout


def test_the_command_line_makes_its_tensors_on_the_ops_device(tmp_path):
    """In-process, with torch's default device other than the op's (meta): a tensor the command line or the
    checker makes without the op's device fails here, as it would beside cuda:0 on a GPU."""
    import torch
    sys.path.insert(0, str(REPO / "practice"))
    import backward_checker
    module = write(tmp_path, OPS)
    with torch.device("meta"):
        assert backward_checker.main([str(module), "--function", "Good"]) == 0
        assert backward_checker.main([str(REPO / "practice/solutions.py"), "--function", "TritonMul",
                                      "--function", "RowLogSumExp"]) == 0


def test_a_files_own_errors_are_usage_errors_and_its_argument_names_its_own(tmp_path):
    """example_inputs that raise are the file's error, not the checker's; a forward parameter called `name`
    (or `reference`) is the op's, never the checker's option."""
    module = write(tmp_path, '''
        import torch

        class Broken(torch.autograd.Function):
            @staticmethod
            def example_inputs():
                raise RuntimeError("no such device here")

            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2

        class Named(torch.autograd.Function):
            @staticmethod
            def example_inputs():
                return {"x": torch.randn(3, 5), "name": "scale", "reference": 2.0}

            @staticmethod
            def forward(ctx, x, name, reference):
                ctx.factor = reference
                return x * reference

            @staticmethod
            def backward(ctx, g):
                return g * ctx.factor, None, None
    ''')
    result = run(module)
    assert result.returncode == 2 and "example_inputs for Broken raised RuntimeError" in result.stderr, result.stderr
    assert "checker itself failed" not in result.stderr and "check_backward(Named): clean" in result.stdout, (
        result.stdout + result.stderr)
