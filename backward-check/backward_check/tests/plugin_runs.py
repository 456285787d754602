"""What the tests of pytest --backward-check share (test_plugin*.py): the module of ops their generated
suites call, a run of pytest on such a suite in a subprocess with the plugin loadable, and a reader of the table's
rows."""
import os
import subprocess
import sys
from pathlib import Path

# The folder that holds backward_check/ and pytest_backward_check.py: a clone's backward-check/, or the site-packages
# of an installed copy. The suites' subprocesses get it on PYTHONPATH, so that `-p pytest_backward_check` loads.
PACKAGE = Path(__file__).resolve().parents[2]


def suite_holds_cuda():
    """Whether a suite's process under the plugin holds a CUDA context: the package, which the plugin imports,
    picks the GPU where there is one. A check the worker cannot take then runs in no forked process."""
    from backward_check import DEVICE
    return DEVICE.type == "cuda"

# The ops the generated suites call: module-level, so a worker process imports them by name.
OPS = '''
import resource
import signal
import threading

import torch


class Good(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.tanh(x) * w

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return grad_output * w * (1 - torch.tanh(x) ** 2), grad_output * torch.tanh(x)


class IgnoresGradOutput(torch.autograd.Function):  # the planted bug: the chain rule's grad_output left out
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x


class ScalesGradInPlace(torch.autograd.Function):  # by design, in this library: an in-place gradient
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.mul_(2)


class DiesOnStrideZero(torch.autograd.Function):  # a kernel that faults on a grad_output of strides all 0
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad_output):
        if grad_output.numel() > 1 and all(s == 0 for s in grad_output.stride()):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
            # to this thread, as a real fault is (on a GPU, autograd runs the backward in a thread of its own)
            signal.pthread_kill(threading.get_ident(), signal.SIGSEGV)
        return grad_output * 3


class Doubles(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 2


class NeverChecked(Doubles):
    pass


class ManyArguments(torch.autograd.Function):  # a signature longer than the table's column
    @staticmethod
    def forward(ctx, x, weight, bias, mode, eps, scale, causal, window):
        ctx.save_for_backward(weight)
        return x * weight + bias

    @staticmethod
    def backward(ctx, grad_output):
        weight, = ctx.saved_tensors
        return grad_output * weight, None, grad_output, None, None, None, None, None


class WrongInFloat64(torch.autograd.Function):  # right in float32; in float64 the chain rule's grad_output left out
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x if x.dtype == torch.float64 else 2 * x * grad_output


@torch.library.custom_op("backward_check_plugin_test::scale", mutates_args=())
def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor


def _setup_context(ctx, inputs, output):
    ctx.factor = inputs[1]


def _backward(ctx, grad_output):
    return grad_output * ctx.factor, None


scale.register_autograd(_backward, setup_context=_setup_context)
'''

def write_suite(folder, suite, name="test_suite.py"):
    (folder / "suite_ops.py").write_text(OPS)
    (folder / name).write_text(suite)


def run_pytest(folder, *args, timeout=900):
    """pytest, with the plugin loadable, on folder's suite, in a subprocess: (exit status, its output)."""
    env = {**os.environ, "PYTHONPATH": str(PACKAGE)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "pytest_backward_check", "-p", "no:cacheprovider",
                           "-q", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def row(output, op, contains="", whole=False):
    """The table's rows for op: the first line of each (indented two spaces), or with whole, every line under the
    op's name up to the next op's (a row's arguments or test id going on, indented four, its notes, and what was
    left out, in parentheses)."""
    lines = output.split("= backward-check =", 1)[1].splitlines()
    start = lines.index(op)
    rows = []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        if whole or not line.startswith(("   ", "  (")):
            rows.append(line)
    return [r for r in rows if contains in r]
