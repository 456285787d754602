"""hardened_ops.py on inputs beyond the chapter's six contiguous float32 values: any
strides, other dtypes and devices, double backward, empty tensors, and more than
2**31 elements.

The printed listings get these silently wrong, or crash (tools/listing_failures.py
shows which); the hardened module must either be right or refuse with a clear error.
Every backward is driven by a random grad_output.
"""
import os

import pytest
import torch
import torch.nn.functional as F
from chapter_scripts import DEVICE, ON_GPU, REPO, hardened_ops, requires_gpu, seeded_randn

FUNCTION_REFERENCES = {
    "TritonGELU": lambda x: F.gelu(x, approximate="none"),
    "TritonGELUBuggy": lambda x: F.gelu(x, approximate="none"),  # its forward is the correct one
    "TritonSquare": lambda x: x * x,
}


def non_contiguous_views(base):
    """Views the listings mishandle, each with the base tensor (6 x 12) it was taken from."""
    return {
        "transposed": base.t(),
        "strided-slice": base[:, ::3],
        "expanded": base[:1].expand(4, 12),
        "sliced-offset": base[2:, 5:],
    }


@pytest.mark.parametrize("view", ["transposed", "strided-slice", "expanded", "sliced-offset"])
@pytest.mark.parametrize("function_name", ["TritonGELU", "TritonSquare"])
def test_non_contiguous_inputs_give_correct_values_and_gradients(function_name, view):
    function, reference = getattr(hardened_ops, function_name), FUNCTION_REFERENCES[function_name]
    base_triton = seeded_randn(6, 12, seed=11).requires_grad_(True)
    base_torch = base_triton.detach().clone().requires_grad_(True)
    x_triton = non_contiguous_views(base_triton)[view]
    x_torch = non_contiguous_views(base_torch)[view]
    grad_output = seeded_randn(*x_triton.shape, seed=12)

    y_triton = function.apply(x_triton)
    y_torch = reference(x_torch)
    y_triton.backward(grad_output)
    y_torch.backward(grad_output)

    where = f"{function_name} on a {view} input"
    torch.testing.assert_close(y_triton, y_torch, msg=lambda m: f"{where}: wrong forward\n{m}")
    torch.testing.assert_close(base_triton.grad, base_torch.grad, msg=lambda m: f"{where}: wrong gradient\n{m}")


def test_contiguous_input_is_not_copied():
    x = seeded_randn(3, 1025, seed=13)
    (operand,) = hardened_ops.kernel_operands(x)
    assert operand is x, "a contiguous input must reach the kernel as it is, with no copy"


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64])
@pytest.mark.parametrize("function_name", ["TritonGELU", "TritonGELUBuggy", "TritonSquare"])
def test_non_float_input_raises_type_error_naming_the_dtype(function_name, dtype):
    x = torch.arange(5).to(dtype).to(DEVICE)
    with pytest.raises(TypeError, match=str(dtype).replace(".", r"\.")):
        getattr(hardened_ops, function_name).apply(x)


@pytest.mark.parametrize("function_name", ["TritonGELU", "TritonGELUBuggy", "TritonSquare"])
def test_tensor_on_another_device_raises_naming_both_devices(function_name):
    # On a GPU run a CPU tensor is the foreign one; on a CPU run, a "meta" tensor stands in.
    other = torch.device("cpu") if ON_GPU else torch.device("meta")
    x = torch.ones(5, device=other)
    with pytest.raises(ValueError) as raised:
        getattr(hardened_ops, function_name).apply(x)
    assert str(other) in str(raised.value) and str(DEVICE) in str(raised.value), str(raised.value)


def test_mismatched_backward_operands_are_refused():
    x = seeded_randn(8, seed=14)
    with pytest.raises(ValueError, match="one shape and dtype"):
        hardened_ops.launch_backward(hardened_ops.gelu_backward_kernel, seeded_randn(7, seed=15), x)
    with pytest.raises(ValueError, match="one shape and dtype"):
        hardened_ops.launch_backward(hardened_ops.gelu_backward_kernel, x.double(), x)


@pytest.mark.parametrize("function_name", ["TritonGELU", "TritonGELUBuggy", "TritonSquare"])
def test_double_backward_raises_instead_of_dropping_second_order_terms(function_name):
    # A gradient penalty: with a constant grad_output, torch's once_differentiable would let
    # this through and the penalty's second-order term would silently be zero.
    x = seeded_randn(5, seed=16).requires_grad_(True)
    y = getattr(hardened_ops, function_name).apply(x)
    with pytest.raises(RuntimeError, match=rf"{function_name}\.backward .*double backward"):
        torch.autograd.grad(y, x, seeded_randn(5, seed=17), create_graph=True)


@pytest.mark.parametrize("shape", [(0,), (3, 0)], ids=["0", "3x0"])
@pytest.mark.parametrize("function_name", ["TritonGELU", "TritonSquare"])
def test_empty_tensors(function_name, shape):
    x = torch.empty(shape, device=DEVICE, requires_grad=True)
    y = getattr(hardened_ops, function_name).apply(x)
    y.backward(torch.empty(shape, device=DEVICE))
    assert y.shape == shape and x.grad.shape == shape


@requires_gpu
def test_more_than_2_to_the_31_elements():
    """2**31 + 4096 float32 elements (8.6 GB): int32 offsets wrap here and the listings' launch
    ends in an illegal memory access. Forward and backward are checked against PyTorch."""
    n = 2**31 + 4096
    generator = torch.Generator(device=DEVICE).manual_seed(18)
    x = torch.randn(n, device=DEVICE, generator=generator).requires_grad_(True)
    y = hardened_ops.TritonGELU.apply(x)
    with torch.no_grad():
        expected = F.gelu(x, approximate="none")
        torch.testing.assert_close(y[-4096:], expected[-4096:], msg=lambda m: f"the last 4096 elements\n{m}")
        worst_forward = (y - expected).abs().max().item()
    del expected
    assert worst_forward < 1e-5, f"forward: largest error {worst_forward}"

    grad_output = torch.randn(n, device=DEVICE, generator=generator)
    y.backward(grad_output)
    with torch.no_grad():
        expected_grad = torch.ops.aten.gelu_backward(grad_output, x.detach())
        worst_backward = (x.grad - expected_grad).abs().max().item()
    assert worst_backward < 1e-4, f"backward: largest error {worst_backward}"


def two_gpus():
    return ON_GPU and torch.cuda.device_count() >= 2


requires_two_gpus = pytest.mark.skipif(not two_gpus(), reason=f"needs two GPUs; {torch.cuda.device_count()} visible")


@requires_two_gpus
@pytest.mark.parametrize("function_name", ["TritonGELU", "TritonSquare"])
def test_tensors_on_another_gpu_than_the_current_one(function_name):
    """cuda:1 while cuda:0 is current: as every rank but 0 of a job that chose its device after importing."""
    assert torch.cuda.current_device() == 0
    x = seeded_randn(4099, seed=19).to("cuda:1").requires_grad_(True)
    grad_output = seeded_randn(4099, seed=20).to("cuda:1")
    y = getattr(hardened_ops, function_name).apply(x)
    y.backward(grad_output)
    x_ref = x.detach().clone().requires_grad_(True)
    FUNCTION_REFERENCES[function_name](x_ref).backward(grad_output)
    assert y.device == x.grad.device == torch.device("cuda:1")
    torch.testing.assert_close(y, FUNCTION_REFERENCES[function_name](x_ref.detach()))
    torch.testing.assert_close(x.grad, x_ref.grad)


@requires_two_gpus
def test_operands_on_two_gpus_are_refused():
    x = seeded_randn(8, seed=21).to("cuda:0")
    with pytest.raises(ValueError, match="one device"):
        hardened_ops.launch_backward(hardened_ops.gelu_backward_kernel, x.to("cuda:1"), x)


# --- the lean launch: the compiled kernel, cached and launched directly ------------

def test_the_lean_launch_recognises_only_the_launch_it_copies():
    import inspect

    import triton
    source = inspect.getsource(triton.runtime.jit.JITFunction.run)
    # benchmarks/results/lean_launch_releases.log: Triton 3.4 to 3.7 launch this way, 3.0 to 3.3 do not.
    assert hardened_ops.recognises_launch(source) == ((3, 4) <= tuple(map(int, triton.__version__.split(".")[:2])))
    assert not hardened_ops.LEAN_LAUNCH or os.environ.get("HARDENED_OPS_LEAN_LAUNCH") == "1", "it is off unless asked for"
    altered = source.replace("knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook",
                             "knobs.runtime.launch_exit_hook, knobs.runtime.launch_enter_hook")
    assert not hardened_ops.recognises_launch(altered)


def test_the_interpreter_never_takes_the_lean_launch():
    with hardened_ops.launch_path(lean=True):
        if ON_GPU:
            assert hardened_ops.LEAN_LAUNCH == hardened_ops.LEAN_LAUNCH_AVAILABLE
        else:
            assert not hardened_ops.LEAN_LAUNCH and "interpreter" in hardened_ops.LEAN_LAUNCH_OFF_BECAUSE


def lean_cases():
    """Inputs that Triton specialises differently: n of 1, a multiple of 16 or not; an unaligned pointer."""
    base = seeded_randn(4099, seed=22)
    return {"n=1": base[:1], "n=16": base[:16], "n=4099": base, "unaligned": base[1:1025],
            "bf16": base.to(torch.bfloat16), "fp64": base.double()}


@requires_gpu
@pytest.mark.parametrize("case", list(lean_cases()))
def test_the_lean_launch_uses_the_kernel_triton_itself_would_pick(case, monkeypatch):
    import triton
    x = lean_cases()[case]
    grad_output = seeded_randn(*x.shape, seed=23).to(x.dtype)
    assert hardened_ops.LEAN_LAUNCH_AVAILABLE, hardened_ops.LEAN_LAUNCH_OFF_BECAUSE
    with hardened_ops.launch_path(lean=True):
        for _ in range(3):  # the first call compiles and caches; the later ones launch directly
            y = hardened_ops.launch_forward(hardened_ops.gelu_forward_kernel, x)
            g = hardened_ops.launch_backward(hardened_ops.gelu_backward_kernel, grad_output, x)
    atol, rtol = {torch.bfloat16: (1e-2, 1.6e-2), torch.float64: (1e-12, 1e-12)}.get(x.dtype, (1e-5, 1e-5))
    torch.testing.assert_close(y, F.gelu(x, approximate="none"), atol=atol, rtol=rtol)
    torch.testing.assert_close(g, torch.ops.aten.gelu_backward(grad_output, x), atol=atol, rtol=rtol)
    jit_runs = []
    run = triton.runtime.jit.JITFunction.run
    monkeypatch.setattr(triton.runtime.jit.JITFunction, "run",
                        lambda self, *args, **kwargs: jit_runs.append(self) or run(self, *args, **kwargs))
    with hardened_ops.launch_path(lean=True):
        hardened_ops.launch_forward(hardened_ops.gelu_forward_kernel, x)
        hardened_ops.launch_backward(hardened_ops.gelu_backward_kernel, grad_output, x)
    assert jit_runs == [], "a cached kernel went through kernel[grid](...): the direct launch was not taken"
    monkeypatch.undo()
    n, block = x.numel(), hardened_ops.block_for(x)
    out = torch.empty_like(x)
    key = hardened_ops.lean_key(hardened_ops.gelu_forward_kernel, (x, out), n, block)
    assert key[:6] == (hardened_ops.gelu_forward_kernel, x.device.index, block, n == 1, n % 16 == 0, n < 2**31)
    cached = hardened_ops._compiled_kernels[key]
    triton_own = hardened_ops.gelu_forward_kernel.run(x, out, n, BLOCK=block, grid=(triton.cdiv(n, block),),
                                                      warmup=True)
    assert cached is triton_own, "the lean launch cached another compiled kernel than Triton's own cache holds"


def launches_through_triton(monkeypatch, call):
    """How many times call() went through Triton's own JITFunction.run."""
    import triton
    runs = []
    run = triton.runtime.jit.JITFunction.run
    monkeypatch.setattr(triton.runtime.jit.JITFunction, "run",
                        lambda self, *args, **kwargs: runs.append(self) or run(self, *args, **kwargs))
    call()
    monkeypatch.setattr(triton.runtime.jit.JITFunction, "run", run)
    return len(runs)


@requires_gpu
def test_the_lean_launch_is_keyed_on_triton_debug_as_triton_is(monkeypatch):
    from triton import knobs
    x = seeded_randn(1000, seed=27)
    kernel = hardened_ops.gelu_forward_kernel

    def call():
        with hardened_ops.launch_path(lean=True):
            hardened_ops.launch_forward(kernel, x)
    call()
    assert launches_through_triton(monkeypatch, call) == 0, "the cached kernel should launch directly"
    monkeypatch.setattr(knobs.runtime, "debug", True)  # switched on after the first call
    assert launches_through_triton(monkeypatch, call) == 1, "debug changes Triton's key: its own launch first"
    assert launches_through_triton(monkeypatch, call) == 0
    out = torch.empty_like(x)
    debug_kernel = hardened_ops._compiled_kernels[hardened_ops.lean_key(kernel, (x, out), x.numel(), 1024)]
    assert debug_kernel.metadata.debug, "the kernel cached under debug is Triton's debug kernel"
    assert debug_kernel is kernel.run(x, out, x.numel(), BLOCK=1024, grid=(1,), warmup=True)


@requires_gpu
def test_a_pre_run_hook_sends_every_launch_through_triton(monkeypatch):
    x = seeded_randn(1000, seed=28)
    kernel, seen = hardened_ops.gelu_forward_kernel, []

    def call():
        with hardened_ops.launch_path(lean=True):
            hardened_ops.launch_forward(kernel, x)
    call()
    kernel.pre_run_hooks.append(lambda *args, **kwargs: seen.append(1))
    try:
        assert launches_through_triton(monkeypatch, call) == 1 and seen == [1]
    finally:
        kernel.pre_run_hooks.pop()
    assert launches_through_triton(monkeypatch, call) == 0


def test_launch_path_is_never_left_switched_on_by_two_threads(monkeypatch):
    """Thread a enters lean, b enters lean, a leaves, b leaves: the path is the ordinary one again."""
    import threading
    monkeypatch.setattr(hardened_ops, "LEAN_LAUNCH_AVAILABLE", True)  # the flag alone; nothing is launched
    monkeypatch.setattr(hardened_ops, "LEAN_LAUNCH", False)
    steps = [threading.Event() for _ in range(3)]
    seen = {}

    def a():
        with hardened_ops.launch_path(lean=True):
            steps[0].set()
            steps[1].wait(5)
        seen["after a left"] = hardened_ops.LEAN_LAUNCH
        steps[2].set()

    def b():
        steps[0].wait(5)
        with hardened_ops.launch_path(lean=True):
            steps[1].set()
            steps[2].wait(5)
            seen["b still open"] = hardened_ops.LEAN_LAUNCH
    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == {"after a left": True, "b still open": True}
    assert hardened_ops.LEAN_LAUNCH is False, "the last block to close restores the path from before the first"
    with hardened_ops.launch_path(lean=True):
        with hardened_ops.launch_path(lean=False):
            assert hardened_ops.LEAN_LAUNCH is False
        assert hardened_ops.LEAN_LAUNCH is True
    assert hardened_ops.LEAN_LAUNCH is False


@requires_gpu
def test_the_ordinary_launch_gives_the_same_numbers():
    x = seeded_randn(3, 1031, seed=24).requires_grad_(True)
    grad_output = seeded_randn(3, 1031, seed=25).t().contiguous().t()
    with hardened_ops.launch_path(lean=True):
        for _ in range(2):
            x.grad = None
            hardened_ops.TritonGELU.apply(x).backward(grad_output)
    lean_grad, x.grad = x.grad, None
    with hardened_ops.launch_path(lean=False):
        hardened_ops.TritonGELU.apply(x).backward(grad_output)
    assert torch.equal(lean_grad, x.grad)


@pytest.mark.parametrize("grad_wanted", [True, False], ids=["grad", "no-grad"])
def test_gelu_takes_the_function_only_where_a_gradient_is_wanted(grad_wanted):
    x = seeded_randn(7, seed=26).requires_grad_(grad_wanted)
    y = hardened_ops.gelu(x)
    assert (type(y.grad_fn).__name__ == "TritonGELUBackward") == grad_wanted
    with torch.no_grad():
        assert hardened_ops.gelu(x).grad_fn is None
    torch.testing.assert_close(y, F.gelu(x, approximate="none"))


def test_a_registered_launch_hook_sends_every_launch_through_triton():
    if not hardened_ops.LEAN_LAUNCH_AVAILABLE:
        pytest.skip(hardened_ops.LEAN_LAUNCH_OFF_BECAUSE)
    from triton import knobs
    hook = knobs.runtime.launch_enter_hook
    assert not hardened_ops._launch_hooks_set(), "no hook is registered by default"
    if hasattr(hook, "add"):  # a HookChain (Triton 3.5 and later)
        hook.add(print)
        try:
            assert hardened_ops._launch_hooks_set()
        finally:
            hook.remove(print)


def test_the_lean_launch_reader_refuses_what_is_not_a_triton_wheel(tmp_path):
    """tools/lean_launch_releases.py wheels/*.whl where the download left none: the glob stays as written, and an
    IndexError came back; now exit 2 and one line naming each argument and why."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, str(REPO / "tools" / "lean_launch_releases.py"), str(tmp_path / "*.whl"),
                           str(REPO / "README.md")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no such file" in done.stderr and "not a Triton wheel" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
