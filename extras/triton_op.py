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

Self-contained on purpose: its kernels and helpers are copies of
04_standalone_complete.py's, and tests/test_drift.py keeps them identical.
"""
import contextlib
import functools
import os
import sys

import torch

if not hasattr(torch.library, "triton_op"):
    sys.exit(f"extras/triton_op.py needs torch 2.6 or newer, which brought torch.library.triton_op; "
             f"this is torch {torch.__version__}")

# Added: choose where the kernels run before triton is imported and any kernel
# is defined. The interpreter is switched on through the environment, so this
# must come first; a TRITON_INTERPRET that the reader switched on is kept.
# Triton 3.7 reads 1, true, yes, y and on, in any case, as on; older releases only
# 1. Any of them is written back as 1, so that every release interprets.
if os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "yes", "y", "on"):  # changed: not "1" alone
    os.environ["TRITON_INTERPRET"] = "1"  # changed: the one spelling every Triton release reads as on
    DEVICE = torch.device("cpu")
    print("TRITON_INTERPRET=1: running on the CPU through the Triton interpreter", file=sys.stderr)
elif torch.cuda.is_available():
    DEVICE = torch.device("cuda", torch.cuda.current_device())
    print(f"running on {torch.cuda.get_device_name(DEVICE)} ({'ROCm' if torch.version.hip else 'CUDA'})", file=sys.stderr)
else:
    os.environ["TRITON_INTERPRET"] = "1"
    DEVICE = torch.device("cpu")
    print("no CUDA GPU visible: running on the CPU through the Triton interpreter", file=sys.stderr)

import triton  # noqa: E402  (after the backend choice above)
import triton.language as tl  # noqa: E402
from torch.library import triton_op, wrap_triton  # noqa: E402



# ---------------------------------------------------------------------------
# The kernels and launch helpers, copied from 04_standalone_complete.py
# ---------------------------------------------------------------------------

@triton.jit
def compute_dtype(v):
    # Added: tl.math.erf takes only fp32 and fp64, so fp16 and bf16 values are
    # computed in fp32; fp64 stays fp64. tl.store rounds back to the tensor's dtype.
    if v.dtype != tl.float64:
        v = v.to(tl.float32)
    return v


@triton.jit
def gelu_forward_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    SQRT_2_INV: tl.constexpr = 0.7071067811865476
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT_2_INV))
    out = x * cdf
    tl.store(out_ptr + offsets, out, mask=mask)


@triton.jit
def gelu_backward_kernel(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    grad_out = compute_dtype(tl.load(grad_out_ptr + offsets, mask=mask, other=0.0))  # changed: as x
    SQRT_2_INV: tl.constexpr = 0.7071067811865476
    SQRT_2PI_INV: tl.constexpr = 0.3989422804014327
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT_2_INV))
    pdf = SQRT_2PI_INV * tl.exp(-0.5 * x * x)
    d_gelu = cdf + x * pdf  # d/dx[x * Phi(x)] = Phi(x) + x * phi(x)
    grad_in = grad_out * d_gelu  # the chain rule: dL/dx = dL/dz * dz/dx
    tl.store(grad_in_ptr + offsets, grad_in, mask=mask)


@triton.jit
def square_forward_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    tl.store(out_ptr + offsets, x * x, mask=mask)


@triton.jit
def square_backward_kernel(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    grad_out = compute_dtype(tl.load(grad_out_ptr + offsets, mask=mask, other=0.0))  # changed: as x
    tl.store(grad_in_ptr + offsets, grad_out * 2.0 * x, mask=mask)  # d/dx[x^2] = 2x, times dL/dy


# Added: the kernels read and write one flat, contiguous run of floats on one
# device of DEVICE's kind (any GPU, or the CPU for the interpreter). Anything else
# would give silently wrong numbers, so it is refused here, or (for other strides)
# copied once into a contiguous tensor.
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def kernel_operands(*tensors):
    for t in tensors:
        if t.dtype not in KERNEL_DTYPES:
            raise TypeError(f"the Triton kernels take float16, bfloat16, float32 or float64 tensors, not {t.dtype}")
        if t.device.type != DEVICE.type:
            raise ValueError(f"a tensor is on {t.device}, but the Triton kernels run on {DEVICE.type} tensors here "
                             f"({DEVICE} is current): move it there with .to({str(DEVICE)!r})")
        if t.device != tensors[0].device:
            raise ValueError(f"the kernels need operands on one device, got {tensors[0].device} and {t.device}")
        if t.shape != tensors[0].shape or t.dtype != tensors[0].dtype:
            raise ValueError(f"the kernels need operands of one shape and dtype, got "
                             f"{tuple(tensors[0].shape)} {tensors[0].dtype} and {tuple(t.shape)} {t.dtype}")
    return tuple(t.contiguous() for t in tensors)  # no copy when already contiguous


# Added: Triton launches on the current CUDA device, which refuses a tensor on another
# GPU (cuda:1 while cuda:0 is current, as on every rank but 0 of a multi-GPU job whose
# scripts were imported before it chose its device), so each launch is made with the
# tensor's own device current.
def device_of(t):
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()


# Added: the backward methods launch a kernel, so the gradients they return
# carry no graph, and a double backward (create_graph=True, as in a gradient
# penalty) would silently treat them as constants. torch's once_differentiable
# only catches the case where grad_output requires grad, not where x does, so
# the check is made here, on the grad mode that create_graph=True switches on.
def no_double_backward(backward):
    @functools.wraps(backward)
    def backward_without_graph(ctx, *grad_outputs):
        if torch.is_grad_enabled():
            raise RuntimeError(f"{backward.__qualname__} has no derivative of its own: double backward "
                               "(create_graph=True) through the Triton kernels is not supported")
        return backward(ctx, *grad_outputs)
    return backward_without_graph


def _launch(fwd_kernel, x, BLOCK=None):  # changed: BLOCK=1024, see below
    x, = kernel_operands(x)  # added: dtype and device checked, any strides made contiguous
    BLOCK = BLOCK or 4096 // x.element_size()  # added: 4 KiB a program; fp32 keeps 1024, bf16 gets 2048
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)
    with device_of(x):  # added: launch on x's own GPU, any cuda:N
        fwd_kernel[grid](x, out, n, BLOCK=BLOCK)
    return out


def _launch_bwd(bwd_kernel, grad_output, x, BLOCK=None):  # changed: BLOCK=1024, see below
    grad_output, x = kernel_operands(grad_output, x)  # added: as in the forward
    BLOCK = BLOCK or 4096 // x.element_size()  # added: 4 KiB a program; fp32 keeps 1024, bf16 gets 2048
    grad_input = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)
    with device_of(x):  # added: launch on x's own GPU, any cuda:N
        bwd_kernel[grid](grad_output, x, grad_input, n, BLOCK=BLOCK)
    return grad_input


# The chapter's pattern, without the chapter's instrumentation (as in train_mlp.py):
# torch.compile(fullgraph=True) compiles this Function, as it compiles the operators.
class TritonGELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = _launch(gelu_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return _launch_bwd(gelu_backward_kernel, grad_output.contiguous(), x)


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
# anything outside its arguments: the compiler traces it. The launch helpers above
# are the chapter's, so BLOCK, grid and operand checks are the same everywhere.
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
    return _launch(traceable(gelu_forward_kernel), x)


@triton_op("chapter17::gelu_backward", mutates_args=())
def gelu_backward(grad_output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return _launch_bwd(traceable(gelu_backward_kernel), grad_output, x)  # grad_output * (Phi(x) + x * phi(x))


@triton_op("chapter17::square", mutates_args=())
def square(x: torch.Tensor) -> torch.Tensor:
    return _launch(traceable(square_forward_kernel), x)


@triton_op("chapter17::square_backward", mutates_args=())
def square_backward(grad_output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return _launch_bwd(traceable(square_backward_kernel), grad_output, x)  # grad_output * 2x


# What each backward saw, kept only inside `recording_backward_calls()`, for the chapter's
# facts. Outside it nothing is kept: a module-level list that grew on every call would
# hold one gradient a step alive in a training loop. (Under torch.compile a backward body
# is traced once, not run per call, so this records eager runs only.)
_backward_log = None


@contextlib.contextmanager
def recording_backward_calls():
    """Yields a list of (operator, grad_output) that each backward appends to, until the block ends."""
    global _backward_log
    previous, _backward_log = _backward_log, []
    try:
        yield _backward_log
    finally:
        _backward_log = previous


def _record(name, grad_output):
    if _backward_log is not None:
        _backward_log.append((name, grad_output.detach().clone()))


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
    chapter_facts()
    results = [full_graph_compile(), export_each(), opcheck_all()]
    sys.exit(0 if all(results) else 1)
