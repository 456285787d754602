"""pytest --backward-check --backward-check-compile[=BACKEND]: the plugin's compile check, in a small generated suite
run in a subprocess. Its worker process imports the ops' module, which registers tests/compile_backends.py's backend
(it scales the first gradient of every backward graph) by name, so the worker knows it too. A correct op is clean
under aot_eager and named wrong under the scaling backend; an unknown backend is a usage error before any test runs;
without the option no op is compiled.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "backward-check"
TESTS = Path(__file__).resolve().parent  # compile_backends.py

OPS = '''
import compile_backends
import torch


class Good(torch.autograd.Function):  # w a row: two shapes, so torch 2.11's pytorch/pytorch#183604 cannot show
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.tanh(x) * w

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return grad_output * w * (1 - torch.tanh(x) ** 2), (grad_output * torch.tanh(x)).sum(dim=0)


torch._dynamo.register_backend(compile_backends.scaling_backend(), name=compile_backends.NAME)
'''

SUITE = '''
import torch
import ops


def test_good():
    x = torch.randn(6, 33, requires_grad=True)
    w = torch.randn(33, requires_grad=True)
    (ops.Good.apply(x, w) * torch.randn(6, 33)).sum().backward()
'''


def run_suite(folder, *options):
    (folder / "ops.py").write_text(OPS)
    (folder / "conftest.py").write_text("import ops  # noqa: F401  (registers the scaling backend by name)\n")
    (folder / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (PACKAGE, TESTS, folder)))}
    env.pop("BACKWARD_CHECK_COMPILE", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "pytest_backward_check", "-p", "no:cacheprovider",
                           "-q", "--backward-check", *options, "test_suite.py"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    return done.stdout + done.stderr, done.returncode


def table(output):
    return output.split("= backward-check =", 1)[1] if "= backward-check =" in output else ""


@pytest.mark.parametrize("backend, verdict", [("aot_eager", "clean"), ("scales_the_first_gradient",
                                                                        "TRAP wrong under torch.compile")])
def test_the_compile_check_runs_under_the_plugin(tmp_path, backend, verdict):
    output, returncode = run_suite(tmp_path, f"--backward-check-compile={backend}")
    assert returncode == 0, output
    assert verdict in table(output), output


def test_without_the_option_nothing_is_compiled(tmp_path):
    output, returncode = run_suite(tmp_path)
    assert returncode == 0 and "clean" in table(output), output
    assert "torch.compile" not in output, output


def test_an_unknown_backend_is_a_usage_error(tmp_path):
    output, returncode = run_suite(tmp_path, "--backward-check-compile=inductr")
    assert returncode == 4, output
    assert "--backward-check-compile: compile='inductr' names no backend" in output, output
