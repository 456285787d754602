# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "torch==2.13.0",
#     "triton==3.7.1; sys_platform == 'linux'",
#     "triton-windows==3.7.1.post27; sys_platform == 'win32'",
#     "numpy==2.4.6; python_version >= '3.11'",
#     "numpy==2.2.6; python_version < '3.11'",
# ]
# ///
"""
Beyond the chapter: the chapter's kernels registered as PyTorch operators
==========================================================================

Not part of Chapter 17. The chapter wraps its kernels in torch.autograd.Function;
this file registers the same kernels with ``torch.library.triton_op`` (launched
through ``torch.library.wrap_triton``) and ``register_autograd`` (torch 2.6 or
newer), and shows that:

1. the chapter's three facts still hold: inside ``2*z + 1`` the grad_output is
   uniformly 2; backward runs in reverse order; fan-in calls backward once, with
   the summed grad_output;
2. ``torch.compile(fullgraph=True)`` compiles the operators, and compiles the
   autograd.Function as well, as long as its backward has no side effect: what it
   refuses is 04's instrumentation, which appends to module-level lists (GPU only;
   the reason is printed);
3. ``torch.export`` of a Linear + GELU block keeps ``chapter17.gelu`` in the
   exported graph, and its output matches ``nn.GELU``'s (GPU only);
4. ``torch.library.opcheck`` passes: the schema, the autograd registration, and
   (on a GPU) the fake-tensor and AOT-dispatch checks that compiled code relies on.

Run it with ``python extras/triton_op.py``: on a CUDA GPU, or on the CPU through
Triton's interpreter, where the parts that need a GPU say so on stderr.

The kernels, launch helpers and the side-effect-free ``TritonGELU`` come from
``hardened_ops.py``, the repository's one hardened copy of the chapter's op.
"""
import contextlib
import sys
import threading
from pathlib import Path

import torch

if not hasattr(torch.library, "triton_op"):
    sys.exit(f"extras/triton_op.py needs torch 2.6 or newer, which brought torch.library.triton_op; "
             f"this is torch {torch.__version__}")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for hardened_ops
from hardened_ops import (  # noqa: E402  (picks the backend before triton is imported)
    BACKEND, DEVICE, TritonGELU, gelu_backward_kernel, gelu_forward_kernel, launch_backward, launch_forward,
    square_backward_kernel, square_forward_kernel)

import triton  # noqa: E402
from torch.library import triton_op, wrap_triton  # noqa: E402


# 04_standalone_complete.py's TritonGELU records each call in module-level lists. That
# append is a side effect, and it, not the autograd.Function, is what fullgraph=True
# refuses ("Mutating a variable from outside the scope of this HOP is not supported").
call_order = []
captured_grads = []


class TritonGELURecordingCalls(TritonGELU):
    @staticmethod
    def backward(ctx, grad_output):
        call_order.append("TritonGELU.backward")
        captured_grads.append(grad_output.clone())
        return TritonGELU.backward(ctx, grad_output)


# ---------------------------------------------------------------------------
# The same kernels as operators. triton_op infers the schema from the type hints;
# wrap_triton makes each launch visible to torch.compile. The body must not touch
# anything outside its arguments: the compiler traces it. The launch helpers are
# hardened_ops.py's, so BLOCK, grid and operand checks are the same everywhere.
# ---------------------------------------------------------------------------

def traceable(kernel):
    """The kernel as torch.compile sees it. Under the interpreter, torch 2.11 and older refuse
    to wrap an interpreted kernel ("wrap_triton only works on functions annotated with
    triton.jit"); nothing compiles there anyway, so such a kernel is launched as it is."""
    if DEVICE.type != "cuda" and not isinstance(kernel, triton.runtime.JITFunction):
        return kernel
    return wrap_triton(kernel)


@triton_op("chapter17::gelu", mutates_args=())
def gelu(x: torch.Tensor) -> torch.Tensor:
    return launch_forward(traceable(gelu_forward_kernel), x)


@triton_op("chapter17::gelu_backward", mutates_args=())
def gelu_backward(grad_output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return launch_backward(traceable(gelu_backward_kernel), grad_output, x)  # grad_output * (Phi(x) + x * phi(x))


@triton_op("chapter17::square", mutates_args=())
def square(x: torch.Tensor) -> torch.Tensor:
    return launch_forward(traceable(square_forward_kernel), x)


@triton_op("chapter17::square_backward", mutates_args=())
def square_backward(grad_output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return launch_backward(traceable(square_backward_kernel), grad_output, x)  # grad_output * 2x


# What each backward saw, kept only inside `recording_backward_calls()`, for the chapter's
# facts. Outside it nothing is kept: a module-level list that grew on every call would
# hold one gradient a step alive in a training loop. (Under torch.compile a backward body
# is traced once, not run per call, so this records eager runs only.) Blocks may overlap,
# in one thread or several (the autograd engine runs a GPU's backwards on a thread of its
# own): each block gets its own list, every backward run while a block is open is appended
# to each open block's list, and a block's exit removes only its own list.
_open_logs = []
_open_logs_lock = threading.Lock()


@contextlib.contextmanager
def recording_backward_calls():
    """Yields a list of (operator, grad_output) that each backward appends to, until the block ends."""
    log = []
    with _open_logs_lock:
        _open_logs.append(log)
    try:
        yield log
    finally:
        with _open_logs_lock:
            _open_logs.remove(log)


def _record(name, grad_output):
    with _open_logs_lock:
        logs = list(_open_logs)
    if logs:
        grad_output = grad_output.detach().clone()
        for log in logs:
            log.append((name, grad_output))


def save_input(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def gelu_grad(ctx, grad_output):
    _record("gelu", grad_output)
    x, = ctx.saved_tensors
    return gelu_backward(grad_output, x)


def square_grad(ctx, grad_output):
    _record("square", grad_output)
    x, = ctx.saved_tensors
    return square_backward(grad_output, x)


gelu.register_autograd(gelu_grad, setup_context=save_input)
square.register_autograd(square_grad, setup_context=save_input)


def oracle_grad(expression, x):
    x = x.detach().clone().requires_grad_(True)
    expression(torch.nn.functional.gelu(x, approximate="none")).backward()
    return x.grad


def chapter_facts():
    print("=== The chapter's facts, through the registered operators ===")
    torch.manual_seed(3)
    x = torch.randn(6).to(DEVICE).requires_grad_(True)
    hooked = {}
    z = gelu(x)
    z.register_hook(lambda grad: hooked.setdefault("z", grad.clone()))
    (2 * z + 1).sum().backward()
    print("17.1 grad_output at gelu inside 2*z + 1:", hooked["z"].cpu())
    print("17.1 x.grad allclose to oracle?", torch.allclose(x.grad, oracle_grad(lambda z: (2 * z + 1).sum(), x), atol=1e-5))

    x = torch.randn(4).to(DEVICE).requires_grad_(True)
    with recording_backward_calls() as calls:
        square(gelu(x)).sum().backward()
    print("17.2 backward call order:", [name for name, _ in calls])
    print("17.2 x.grad allclose to oracle?", torch.allclose(x.grad, oracle_grad(lambda z: (z * z).sum(), x), atol=1e-5))

    x = torch.randn(4).to(DEVICE).requires_grad_(True)
    with recording_backward_calls() as calls:
        z = gelu(x)
        ((2 * z).sum() + (3 * z).sum()).backward()
    print("17.3 fan-in: backward calls:", len(calls), "with grad_output", calls[0][1].cpu())
    print("17.3 x.grad allclose to oracle?",
          torch.allclose(x.grad, oracle_grad(lambda z: (2 * z).sum() + (3 * z).sum(), x), atol=1e-5))


def full_graph_compile():
    """Compiles 2*gelu(x)+1 with fullgraph=True through each version; True unless a side-effect-free one fails."""
    print()
    print("=== torch.compile(fullgraph=True) ===")
    if DEVICE.type != "cuda":
        print("skipped: torch.compile needs a GPU; the interpreter's kernels cannot be compiled", file=sys.stderr)
        print("skipped (needs a GPU)")
        return True
    x = torch.randn(4096, generator=torch.Generator().manual_seed(7)).to(DEVICE).requires_grad_(True)
    expected = oracle_grad(lambda z: (2 * z + 1).sum(), x)
    ok = True
    for label, op, side_effect_free in (("torch.library.triton_op", gelu, True),
                                        ("autograd.Function, no side effects", TritonGELU.apply, True),
                                        ("autograd.Function recording its calls (04's)",
                                         TritonGELURecordingCalls.apply, False)):
        torch._dynamo.reset()
        x.grad = None
        try:
            torch.compile(lambda t: (2 * op(t) + 1).sum(), fullgraph=True)(x).backward()
        except Exception as error:  # the refusal is the result being shown
            reason = " ".join(str(error).split())
            print(f"{label}: refused: {type(error).__name__}: {reason[:300]}")
            ok = ok and not side_effect_free
            continue
        right = torch.allclose(x.grad, expected, atol=1e-5)
        print(f"{label}: compiled with fullgraph=True; x.grad allclose to oracle? {right}")
        ok = ok and right
    return ok


class GELUBlock(torch.nn.Module):
    """Linear, then GELU through one of the versions: what torch.export is shown on."""

    def __init__(self, activation):
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)
        self.activation = activation

    def forward(self, x):
        return self.activation(self.linear(x))


def exported_operators(program):
    return sorted({str(node.target) for node in program.graph.nodes if node.op == "call_function"})


def export_each():
    """torch.export of a Linear + GELU block through each version; True if the operator's export is right."""
    print()
    print("=== torch.export ===")
    if DEVICE.type != "cuda":
        print("skipped: torch.export traces the kernels for a GPU; under the interpreter it is not shown",
              file=sys.stderr)
        print("skipped (needs a GPU)")
        return True
    generator = torch.Generator().manual_seed(9)
    x = torch.randn(32, 64, generator=generator).to(DEVICE)
    ok = True
    for label, activation in (("torch.library.triton_op", gelu), ("autograd.Function", TritonGELU.apply)):
        torch.manual_seed(0)
        model = GELUBlock(activation).to(DEVICE)
        reference = torch.nn.functional.gelu(model.linear(x), approximate="none")
        try:
            program = torch.export.export(model, (x,))
        except Exception as error:  # the refusal is the result being shown
            print(f"{label}: refused: {type(error).__name__}: {' '.join(str(error).split())[:300]}")
            ok = ok and label != "torch.library.triton_op"
            continue
        right = torch.allclose(program.module()(x), reference, atol=1e-5)
        print(f"{label}: exported; graph calls {exported_operators(program)}; output allclose to nn.GELU's? {right}")
        ok = ok and right
    return ok


# Under the interpreter, the checks that need fake tensors run the kernel itself on
# them, and fail ("Attempted to set the storage of a tensor on device "meta" to a
# storage on different device "cpu""); they run on a GPU only.
OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
NEEDS_GPU = {"test_faketensor", "test_aot_dispatch_dynamic"}


def opcheck_all():
    print()
    print("=== torch.library.opcheck ===")
    if DEVICE.type != "cuda":
        print(f"opcheck {' and '.join(sorted(NEEDS_GPU))} need a GPU: skipped under the interpreter", file=sys.stderr)
    generator = torch.Generator().manual_seed(8)
    ok = True
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        x = torch.randn(1031, generator=generator).to(DEVICE, dtype)
        g = torch.randn(1031, generator=generator).to(DEVICE, dtype)
        cases = ((torch.ops.chapter17.gelu.default, (x.clone().requires_grad_(True),)),
                 (torch.ops.chapter17.square.default, (x.clone().requires_grad_(True),)),
                 (torch.ops.chapter17.gelu_backward.default, (g, x)),
                 (torch.ops.chapter17.square_backward.default, (g, x)))
        results = {}
        for test in OPCHECK_TESTS:
            if DEVICE.type != "cuda" and test in NEEDS_GPU:
                results[test] = "needs a GPU"
                continue
            try:
                for op, args in cases:
                    torch.library.opcheck(op, args, test_utils=(test,))
                results[test] = "SUCCESS"
            except Exception as error:  # opcheck's verdict is the result being shown
                results[test] = "FAILED: " + " ".join(str(error).split())[:300]
                ok = False
        print(f"{str(dtype).removeprefix('torch.')}: " + ", ".join(f"{t} {r}" for t, r in results.items()))
    return ok


if __name__ == "__main__":
    # No options: --help says what it runs; anything else is refused rather than ignored.
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__.strip().split("\n\n", 1)[1].split("\n\nThe kernels,")[0])
        sys.exit(0)
    if sys.argv[1:]:
        print(f"usage: python extras/triton_op.py (no options; {' '.join(sys.argv[1:])!r} given)", file=sys.stderr)
        sys.exit(2)
    print(BACKEND, file=sys.stderr)
    chapter_facts()
    results = [full_graph_compile(), export_each(), opcheck_all()]
    sys.exit(0 if all(results) else 1)
