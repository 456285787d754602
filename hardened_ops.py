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
The chapter's op, hardened for your own code
============================================

To read along with Chapter 17, run the four numbered scripts: they are the book's
listings. To take ``TritonGELU`` (or ``TritonSquare``) into a model of your own,
import it from here::

    from hardened_ops import TritonGELU, TritonGELUModule
    y = TritonGELU.apply(x)            # or TritonGELUModule() inside nn.Sequential

The kernels are the chapter's, and so is the pattern (a ``torch.autograd.Function``
whose backward launches a Triton kernel). What this file adds is what the printed
kernels get wrong on inputs the chapter never gives them. Each row was run against
the printed listing (``tools/listing_failures.py``; its logs are in
``benchmarks/results/``):

=============================  ====================================================  ==========================
Added here                     What the printed listing does without it              Test
=============================  ====================================================  ==========================
int64 program offsets          2**31 + 4096 fp32 elements on the H200: "CUDA error:  test_hardening.py::
                               an illegal memory access was encountered"             test_more_than_2_to_the_31
fp16/bf16 computed in fp32     bf16 and fp16 fail inside ``tl.math.erf``, which      test_against_pytorch.py
                               takes fp32 and fp64 only
dtype, device, shape checks    an int64 or CPU tensor reaches the kernel: a crash    test_hardening.py
                               deep in Triton, or garbage
``.contiguous()`` on inputs    ``x.t()``, ``x[:, ::3]``: wrong numbers, no error     test_hardening.py
launch on the tensor's GPU     a tensor on ``cuda:1`` while ``cuda:0`` is current    test_hardening.py (2 GPUs)
                               is refused by Triton
refused double backward        ``create_graph=True`` silently drops GELU's           test_hardening.py
                               second-order term (the gradient is taken as constant)
BLOCK from the element size    (speed, not correctness) bf16 with 2048-element       benchmarks/gelu_bandwidth.py
                               blocks: +7.9 % forward, +3.6 % backward at 2**30
=============================  ====================================================  ==========================

Unlike the chapter's scripts, the Functions here keep no record of their calls, so
``torch.compile(fullgraph=True)`` compiles them (``extras/triton_op.py`` shows it).
``gelu(x)`` builds the Function only where a gradient is wanted. For small tensors, where
the CPU time of a call dominates, ``HARDENED_OPS_LEAN_LAUNCH=1`` launches Triton's cached
compiled kernel directly (Triton 3.4 to 3.7; docs/call-cost.md gives what it saves).

Where the kernels run: on a CUDA (or ROCm) GPU when PyTorch sees one. Without one,
importing this module switches Triton's interpreter on (``TRITON_INTERPRET=1``)
before Triton is imported, so the same code runs, slowly, on the CPU. Import it
before anything else imports triton for that to take effect.
"""
import contextlib
import functools
import os
import threading

import torch

INTERPRET_SPELLINGS = ("1", "true", "yes", "y", "on")  # what Triton 3.7 reads as on, in any case

# The interpreter is switched on through the environment, so this comes before triton is
# imported. Older Tritons read only "1", so every spelling of on is written back as "1".
if os.environ.get("TRITON_INTERPRET", "").lower() in INTERPRET_SPELLINGS:
    os.environ["TRITON_INTERPRET"] = "1"
    DEVICE = torch.device("cpu")
    BACKEND = "TRITON_INTERPRET=1: running on the CPU through the Triton interpreter"
elif torch.cuda.is_available():
    DEVICE = torch.device("cuda", torch.cuda.current_device())
    BACKEND = f"running on {torch.cuda.get_device_name(DEVICE)} ({'ROCm' if torch.version.hip else 'CUDA'})"
else:
    os.environ["TRITON_INTERPRET"] = "1"
    DEVICE = torch.device("cpu")
    BACKEND = "no CUDA GPU visible: running on the CPU through the Triton interpreter"

import triton  # noqa: E402  (after the backend choice above)
import triton.language as tl  # noqa: E402


# ---------------------------------------------------------------------------
# The kernels: the chapter's, with int64 offsets and fp16/bf16 computed in fp32
# ---------------------------------------------------------------------------

@triton.jit
def compute_dtype(v):
    # tl.math.erf takes only fp32 and fp64, so fp16 and bf16 values are computed in
    # fp32; fp64 stays fp64. tl.store rounds back to the tensor's dtype.
    if v.dtype != tl.float64:
        v = v.to(tl.float32)
    return v


@triton.jit
def gelu_forward_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # int64: pid * BLOCK wraps past 2**31 elements in int32
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))
    SQRT_2_INV: tl.constexpr = 0.7071067811865476
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT_2_INV))
    out = x * cdf
    tl.store(out_ptr + offsets, out, mask=mask)


@triton.jit
def gelu_backward_kernel(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # int64: pid * BLOCK wraps past 2**31 elements in int32
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))
    grad_out = compute_dtype(tl.load(grad_out_ptr + offsets, mask=mask, other=0.0))
    SQRT_2_INV: tl.constexpr = 0.7071067811865476
    SQRT_2PI_INV: tl.constexpr = 0.3989422804014327
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT_2_INV))
    pdf = SQRT_2PI_INV * tl.exp(-0.5 * x * x)
    d_gelu = cdf + x * pdf  # d/dx[x * Phi(x)] = Phi(x) + x * phi(x)
    grad_in = grad_out * d_gelu  # the chain rule: dL/dx = dL/dz * dz/dx
    tl.store(grad_in_ptr + offsets, grad_in, mask=mask)


@triton.jit
def gelu_backward_kernel_buggy_no_chain_rule(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # int64: pid * BLOCK wraps past 2**31 elements in int32
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))
    SQRT_2_INV: tl.constexpr = 0.7071067811865476
    SQRT_2PI_INV: tl.constexpr = 0.3989422804014327
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT_2_INV))
    pdf = SQRT_2PI_INV * tl.exp(-0.5 * x * x)
    d_gelu = cdf + x * pdf
    tl.store(grad_in_ptr + offsets, d_gelu, mask=mask)  # BUG: never multiplied by grad_out


@triton.jit
def square_forward_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # int64: pid * BLOCK wraps past 2**31 elements in int32
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))
    tl.store(out_ptr + offsets, x * x, mask=mask)


@triton.jit
def square_backward_kernel(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # int64: pid * BLOCK wraps past 2**31 elements in int32
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))
    grad_out = compute_dtype(tl.load(grad_out_ptr + offsets, mask=mask, other=0.0))
    tl.store(grad_in_ptr + offsets, grad_out * 2.0 * x, mask=mask)  # d/dx[x^2] = 2x, times dL/dy


# ---------------------------------------------------------------------------
# The launch helpers: checks, contiguous operands, a block of 4 KiB, the tensor's own GPU
# ---------------------------------------------------------------------------

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_KERNEL_DTYPES = frozenset(KERNEL_DTYPES)


def kernel_operands(*tensors):
    """The tensors as the kernels need them: one flat, contiguous run of floats on one device of
    DEVICE's kind (any GPU, or the CPU for the interpreter). Anything else would give silently
    wrong numbers, so it is refused, or (for other strides) copied once into a contiguous tensor."""
    first = tensors[0]
    for t in tensors:
        if t.dtype not in _KERNEL_DTYPES:
            raise TypeError(f"the Triton kernels take float16, bfloat16, float32 or float64 tensors, not {t.dtype}")
        if t.device.type != DEVICE.type:
            raise ValueError(f"a tensor is on {t.device}, but the Triton kernels run on {DEVICE.type} tensors here "
                             f"({DEVICE} is current): move it there with .to({str(DEVICE)!r})")
        if t is not first and t.device != first.device:
            raise ValueError(f"the kernels need operands on one device, got {first.device} and {t.device}")
        if t is not first and (t.shape != first.shape or t.dtype != first.dtype):
            raise ValueError(f"the kernels need operands of one shape and dtype, got "
                             f"{tuple(first.shape)} {first.dtype} and {tuple(t.shape)} {t.dtype}")
    return tuple(t.contiguous() for t in tensors)  # no copy when already contiguous


def device_of(t):
    """Triton launches on the current CUDA device and refuses a tensor on another GPU (cuda:1
    while cuda:0 is current, as on every rank but 0 of a multi-GPU job that imported this module
    before choosing its device), so a launch is made with the tensor's own device current. Where
    it already is, nothing is switched: a switch costs microseconds on every call."""
    if t.device.type == "cuda" and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


def block_for(t):
    """4 KiB a program: fp32 keeps the chapter's 1024 elements, bf16 and fp16 get 2048."""
    return 4096 // t.element_size()


# ---------------------------------------------------------------------------
# The lean launch: Triton's compiled kernel, cached and launched directly
# ---------------------------------------------------------------------------
# kernel[grid](...) costs several microseconds of Python a call before the GPU sees anything:
# binding and specialising the arguments, a cache look-up, hooks. For a small tensor that is
# most of the op's time. So the first call of each kind goes through kernel[grid](...), which
# compiles and returns Triton's CompiledKernel, and later calls of the same kind launch that
# compiled kernel the way Triton's own JITFunction.run does. "Of the same kind" is everything
# Triton's own cache key holds (JITFunction.run: the specialisation, and str() of the options it
# adds): the device, each pointer's dtype and 16-byte alignment, whether n is 1, a multiple of
# 16, or past 2**31, and the options, debug (the kernel's own or knobs.runtime.debug) and the
# instrumentation mode. Whatever Triton would do besides the look-up sends the call through
# kernel[grid](...): a launch hook or a pre-run hook set, a stages-inspection hook (it adds to
# Triton's key), or a global the kernel read that has changed since it was compiled (Triton then
# raises). The direct launch is used only where this Triton's JITFunction.run holds exactly
# LAUNCH_STATEMENT (recognised from its source), never under the interpreter. It is off unless
# asked for (HARDENED_OPS_LEAN_LAUNCH=1, or launch_path(lean=True)): on the H200 it saved 11% to
# 22% of the op's eager calls, beyond the A/A spread (docs/call-cost.md), but it copies Triton's
# internals, and torch.compile has been run on the ordinary launch only.
LAUNCH_STATEMENT = ("kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, "
                    "launch_metadata, knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, "
                    "*bound_args.values())")
STREAM_STATEMENT = "stream = driver.active.get_current_stream(device)"


def recognises_launch(run_source):
    """Whether a JITFunction.run source takes its stream and launches its compiled kernel exactly as the
    lean launch does (Triton 3.4 to 3.7 do; 3.0 to 3.3 pass other hooks and arguments)."""
    source = " ".join(run_source.replace("( ", "(").split())
    return LAUNCH_STATEMENT in source and STREAM_STATEMENT in source


def _lean_launch_available():
    """(True, "") where the lean launch can be used, else (False, why not)."""
    if DEVICE.type != "cuda":
        return False, "the kernels run in Triton's interpreter"
    try:
        import inspect

        from triton import knobs  # noqa: F401  (the hooks the launch statement reads)
        from triton.runtime.driver import driver  # noqa: F401
        source = inspect.getsource(triton.runtime.jit.JITFunction.run)
    except (ImportError, AttributeError, OSError, TypeError) as error:
        return False, f"Triton {triton.__version__}'s launch could not be read ({type(error).__name__})"
    if not recognises_launch(source):
        return False, f"Triton {triton.__version__} launches its kernels in a way this file does not recognise"
    return True, ""


LEAN_LAUNCH_AVAILABLE, LEAN_LAUNCH_OFF_BECAUSE = _lean_launch_available()
LEAN_LAUNCH = LEAN_LAUNCH_AVAILABLE and os.environ.get("HARDENED_OPS_LEAN_LAUNCH", "") == "1"
if LEAN_LAUNCH_AVAILABLE:
    from triton import knobs as _knobs
    from triton.runtime.driver import driver as _driver
_compiled_kernels = {}  # lean_key(...) -> CompiledKernel

_launch_path_lock = threading.Lock()
_launch_path_blocks = []  # (token, lean) of each launch_path block open now, in the order entered
_launch_path_outside = [LEAN_LAUNCH]  # the path before the first of them was entered


@contextlib.contextmanager
def launch_path(lean):
    """Within the block, launches take the lean path (where this Triton allows it) or the ordinary
    kernel[grid](...). It is process-wide, not per thread: the autograd engine runs a backward's
    launches on a thread of its own, and they must follow the block too. Threads may open blocks at
    once: the block entered last, of those still open, decides for every thread, and when the last
    one closes, the path is what it was before the first was entered (never left switched on)."""
    global LEAN_LAUNCH
    token = object()
    with _launch_path_lock:
        if not _launch_path_blocks:
            _launch_path_outside[0] = LEAN_LAUNCH
        _launch_path_blocks.append((token, bool(lean) and LEAN_LAUNCH_AVAILABLE))
        LEAN_LAUNCH = _launch_path_blocks[-1][1]
    try:
        yield
    finally:
        with _launch_path_lock:
            _launch_path_blocks[:] = [block for block in _launch_path_blocks if block[0] is not token]
            LEAN_LAUNCH = _launch_path_blocks[-1][1] if _launch_path_blocks else _launch_path_outside[0]


def _launch_hooks_set():
    """Whether a launch hook is registered (a profiler's, say): then every launch is Triton's own. Triton
    3.4 keeps each hook as None or a function; 3.5 and later as a HookChain, empty unless one was added."""
    return any(hook is not None and getattr(hook, "calls", True)
               for hook in (_knobs.runtime.launch_enter_hook, _knobs.runtime.launch_exit_hook))


def lean_key(kernel, tensors, n, BLOCK):
    """What Triton's own cache key holds for this launch: the device, BLOCK, n's and each pointer's
    specialisation, and the options JITFunction.run adds (debug, the instrumentation mode)."""
    return (kernel, tensors[0].device.index, BLOCK, n == 1, n % 16 == 0, n < 2**31,
            *[(t.dtype, t.data_ptr() % 16 == 0) for t in tensors],
            kernel.debug or _knobs.runtime.debug, getattr(_knobs.compilation, "instrumentation_mode", None))


def _triton_must_launch(kernel):
    """Whether Triton would do more than look the kernel up: a hook to run, or a changed global to refuse."""
    if _launch_hooks_set() or getattr(kernel, "pre_run_hooks", None) \
            or getattr(_knobs.runtime, "add_stages_inspection_hook", None) is not None:
        return True
    missing = object()
    return any(globals_dict.get(name, missing) != value
               for (name, _), (value, globals_dict) in getattr(kernel, "used_global_vals", {}).items())


def launch(kernel, tensors, n, BLOCK):
    """kernel[(cdiv(n, BLOCK),)](*tensors, n, BLOCK=BLOCK), through the compiled kernel where it can."""
    if n == 0:
        return
    grid = triton.cdiv(n, BLOCK)
    if not LEAN_LAUNCH:
        kernel[(grid,)](*tensors, n, BLOCK=BLOCK)
        return
    key = lean_key(kernel, tensors, n, BLOCK)
    compiled = _compiled_kernels.get(key)
    if compiled is None or _triton_must_launch(kernel):
        _compiled_kernels[key] = kernel[(grid,)](*tensors, n, BLOCK=BLOCK)
        return
    compiled.run(grid, 1, 1, _driver.active.get_current_stream(key[1]), compiled.function, compiled.packed_metadata,
                 None, None, None, *tensors, n, BLOCK)


def launch_forward(kernel, x, BLOCK=None):
    """out = kernel(x), elementwise; BLOCK defaults to block_for(x)."""
    x, = kernel_operands(x)
    out = torch.empty_like(x)
    with device_of(x):
        launch(kernel, (x, out), x.numel(), BLOCK or block_for(x))
    return out


def launch_backward(kernel, grad_output, x, BLOCK=None):
    """grad_input = kernel(grad_output, x), elementwise; BLOCK defaults to block_for(x)."""
    grad_output, x = kernel_operands(grad_output, x)
    grad_input = torch.empty_like(x)
    with device_of(x):
        launch(kernel, (grad_output, x, grad_input), x.numel(), BLOCK or block_for(x))
    return grad_input


def no_double_backward(backward):
    """The backward launches a kernel, so the gradient it returns carries no graph, and a double
    backward (create_graph=True, as in a gradient penalty) would silently treat it as a constant.
    torch's once_differentiable only catches the case where grad_output requires grad, not where
    x does, so the check is made on the grad mode that create_graph=True switches on."""
    @functools.wraps(backward)
    def backward_without_graph(ctx, *grad_outputs):
        if torch.is_grad_enabled():
            raise RuntimeError(f"{backward.__qualname__} has no derivative of its own: double backward "
                               "(create_graph=True) through the Triton kernels is not supported")
        return backward(ctx, *grad_outputs)
    return backward_without_graph


# ---------------------------------------------------------------------------
# The Functions: the chapter's, without its instrumentation (no side effects)
# ---------------------------------------------------------------------------

class TritonGELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = launch_forward(gelu_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        # dL/dx = grad_output * (Phi(x) + x * phi(x)): any grad_output, not only ones
        return launch_backward(gelu_backward_kernel, grad_output, x)


class TritonGELUBuggy(torch.autograd.Function):
    """Chapter 16's bug, kept for demonstrations: the backward never multiplies by grad_output."""
    @staticmethod
    def forward(ctx, x):
        out = launch_forward(gelu_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return launch_backward(gelu_backward_kernel_buggy_no_chain_rule, grad_output, x)


class TritonSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = launch_forward(square_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return launch_backward(square_backward_kernel, grad_output, x)  # dL/dx = grad_output * 2x


class FunctionModule(torch.nn.Module):
    """An autograd.Function as a module, for nn.Sequential. It calls function.apply(x) in its
    forward: a module that stored the bound .apply instead made torch.compile break the graph."""
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function.apply(x)


def gelu(x):
    """GELU through the Triton kernels: TritonGELU.apply where a gradient will be wanted, else the
    kernel alone (no autograd.Function to build: it costs microseconds a call)."""
    if x.requires_grad and torch.is_grad_enabled():
        return TritonGELU.apply(x)
    return launch_forward(gelu_forward_kernel, x)


class TritonGELUModule(torch.nn.Module):
    """TritonGELU as a drop-in for torch.nn.GELU(approximate="none")."""
    def forward(self, x):
        return gelu(x)


if __name__ == "__main__":
    # A quick self-test against PyTorch, with a random (not uniform) grad_output.
    print(BACKEND)
    x = torch.randn(3, 1000, dtype=torch.float64).to(DEVICE).t().requires_grad_(True)
    grad_output = torch.randn(1000, 3, dtype=torch.float64).to(DEVICE)
    TritonGELU.apply(x).backward(grad_output)
    expected = torch.ops.aten.gelu_backward(grad_output, x.detach())
    print("TritonGELU on a transposed fp64 input, random grad_output: gradient allclose to PyTorch?",
          torch.allclose(x.grad, expected))
