"""Beyond the chapter: extras/train_mlp.py and extras/triton_op.py.

Training runs are short (8 steps of 16 rows) so that the interpreter gets through
them; every comparison starts from identical weights and data. Backward passes
are driven by the loss of a real model, or by a seeded random grad_output.
"""
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from chapter_scripts import DEVICE, ON_GPU, REPO, load_extra, requires_gpu, seeded_randn

train_mlp = load_extra("train_mlp")
HAS_TRITON_OP = hasattr(torch.library, "triton_op")
triton_op = load_extra("triton_op") if HAS_TRITON_OP else None
requires_triton_op = pytest.mark.skipif(not HAS_TRITON_OP,
                                        reason=f"torch.library.triton_op arrived in torch 2.6; this is {torch.__version__}")
SHORT_RUN = dict(steps=8, batch=16)


@pytest.fixture(scope="module")
def fp32_nn_gelu():
    return train_mlp.train("nn.GELU", **SHORT_RUN)


# --- extras/train_mlp.py -----------------------------------------------------

def test_training_with_triton_gelu_matches_nn_gelu_in_fp32(fp32_nn_gelu):
    losses_torch, model_torch = fp32_nn_gelu
    losses_triton, model_triton = train_mlp.train("TritonGELU", **SHORT_RUN)
    torch.testing.assert_close(losses_triton, losses_torch, rtol=1e-5, atol=0)
    assert train_mlp.max_parameter_difference(model_triton, model_torch) < 1e-4


def test_activation_checkpointing_changes_nothing(fp32_nn_gelu):
    losses_torch, model_torch = fp32_nn_gelu
    losses, model = train_mlp.train("TritonGELU", checkpoint=True, **SHORT_RUN)
    torch.testing.assert_close(losses, losses_torch, rtol=1e-5, atol=0)
    assert train_mlp.max_parameter_difference(model, model_torch) < 1e-4


def test_bf16_autocast_is_no_farther_from_fp32_than_nn_gelu(fp32_nn_gelu):
    # The two drifts were within a few percent of each other wherever this ran; 25% is the margin.
    _, reference = fp32_nn_gelu
    _, bf16_torch = train_mlp.train("nn.GELU", bf16=True, **SHORT_RUN)
    _, bf16_triton = train_mlp.train("TritonGELU", bf16=True, **SHORT_RUN)
    drift_torch = train_mlp.max_parameter_difference(bf16_torch, reference)
    drift_triton = train_mlp.max_parameter_difference(bf16_triton, reference)
    assert drift_torch > 0, "bf16 autocast changed nothing: is it on?"
    assert drift_triton <= 1.25 * drift_torch, f"bf16 TritonGELU drifts {drift_triton:.2e}, nn.GELU {drift_torch:.2e}"


def test_the_buggy_backward_is_found_by_training_alone():
    # AdamW rescales gradients, so the buggy run still learns, only worse. Over 20 steps of
    # 32 rows its second half averaged 7.9% above nn.GELU's on the CPU.
    run = dict(steps=20, batch=32)
    losses_torch, model_torch = train_mlp.train("nn.GELU", **run)
    losses_buggy, model_buggy = train_mlp.train("TritonGELUBuggy", **run)
    assert losses_buggy[0] == pytest.approx(losses_torch[0], rel=1e-5), "the forward is the correct one"
    second_half = slice(len(losses_torch) // 2, None)
    ratio = sum(losses_buggy[second_half]) / sum(losses_torch[second_half])
    assert ratio > 1.04, f"the buggy run's loss is only {ratio:.3f}x nn.GELU's"
    assert train_mlp.max_parameter_difference(model_buggy, model_torch) > 1e-3


def test_first_step_gradients_show_the_missing_chain_rule():
    """One backward of the real loss: the grad_output reaching GELU is small and non-uniform."""
    gradients = {}
    for name in ("nn.GELU", "TritonGELU", "TritonGELUBuggy"):
        torch.manual_seed(0)
        model = train_mlp.mlp_block(name).to(DEVICE)
        x, target = next(train_mlp.teacher_batches(1, 16, 100, DEVICE))
        F.mse_loss(model(x), target).backward()
        gradients[name] = model[1].weight.grad
    torch.testing.assert_close(gradients["TritonGELU"], gradients["nn.GELU"], rtol=1e-4, atol=1e-6)
    relative_error = (gradients["TritonGELUBuggy"] - gradients["nn.GELU"]).norm() / gradients["nn.GELU"].norm()
    assert relative_error > 1, f"the buggy backward's gradient is only {relative_error:.2f} off"


def run_train_mlp(*args):
    return subprocess.run([sys.executable, str(REPO / "extras/train_mlp.py"), *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO)


def test_train_mlp_prints_the_loss_table_and_writes_the_plot(tmp_path):
    plot = tmp_path / "curves.png"
    result = run_train_mlp("--steps", "3", "--batch", "8", "--plot", str(plot))
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.split("\n\n")[0].splitlines()
    assert header.split() == ["step", "nn.GELU", "TritonGELU", "TritonGELUBuggy"]
    assert [row.split()[0] for row in rows] == ["1", "2", "3"]
    assert re.search(r"^TritonGELU vs nn.GELU, largest loss difference over all 3 steps: \S+$", result.stdout, re.M)
    # The table and the figures need nothing more; only the plot needs matplotlib.
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib" in result.stderr and not plot.exists()
    else:
        assert plot.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("args, message", [
    (["--steps", "0"], "--steps and --batch must be at least 1"),
    (["--compile"], "--compile needs a GPU"),
    (["--plot", "extras"], "give a file name ending in .png"),              # a folder: matplotlib wrote extras.png
    (["--plot", "README.md/loss.png"], "README.md is a file, not a folder"),  # refused before training, not after
], ids=["no-steps", "compile-without-gpu", "plot-a-folder", "plot-under-a-file"])
def test_train_mlp_refuses_bad_options(args, message):
    if ON_GPU and "--compile" in args:
        pytest.skip("a GPU is visible: --compile is allowed")
    result = run_train_mlp(*args)
    assert result.returncode == 2 and message in result.stderr, result.stderr


@requires_gpu
def test_torch_compile_default_mode_trains_like_eager():
    losses_eager, model_eager = train_mlp.train("TritonGELU", **SHORT_RUN)
    losses_compiled, model_compiled = train_mlp.train("TritonGELU", compile=True, **SHORT_RUN)
    torch.testing.assert_close(losses_compiled, losses_eager, rtol=1e-4, atol=0)
    assert train_mlp.max_parameter_difference(model_compiled, model_eager) < 1e-3


@requires_gpu
def test_cuda_graph_captures_forward_and_backward_and_replays_on_new_data():
    torch.manual_seed(0)
    model = train_mlp.mlp_block("TritonGELU").to(DEVICE)
    static_x, static_target = seeded_randn(16, 256, seed=30), seeded_randn(16, 256, seed=31)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compiles the kernels) outside the capture
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            F.mse_loss(model(static_x), static_target).backward()
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = F.mse_loss(model(static_x), static_target)
        static_loss.backward()
    for seed in (32, 34):
        x, target = seeded_randn(16, 256, seed=seed), seeded_randn(16, 256, seed=seed + 1)
        static_x.copy_(x)
        static_target.copy_(target)
        graph.replay()
        reference = train_mlp.mlp_block("nn.GELU").to(DEVICE)
        reference.load_state_dict(model.state_dict())
        reference_loss = F.mse_loss(reference(x), target)
        reference_loss.backward()
        torch.testing.assert_close(static_loss, reference_loss)
        torch.testing.assert_close(model[1].weight.grad, reference[1].weight.grad, rtol=1e-4, atol=1e-6)


# --- extras/triton_op.py -----------------------------------------------------

@requires_triton_op
@pytest.mark.parametrize("op_name, reference", [("gelu", lambda x: F.gelu(x, approximate="none")),
                                                ("square", lambda x: x * x)])
def test_registered_operators_match_pytorch_under_a_random_grad_output(op_name, reference):
    x = seeded_randn(4099, seed=40).requires_grad_(True)
    grad_output = seeded_randn(4099, seed=41)
    y = getattr(triton_op, op_name)(x)
    y.backward(grad_output)
    x_ref = x.detach().clone().requires_grad_(True)
    reference(x_ref).backward(grad_output)
    torch.testing.assert_close(y, reference(x_ref.detach()))
    torch.testing.assert_close(x.grad, x_ref.grad)


@requires_triton_op
def test_the_chapter_facts_hold_for_the_registered_operators():
    x = seeded_randn(6, seed=42).requires_grad_(True)
    hooked = {}
    z = triton_op.gelu(x)
    z.register_hook(lambda grad: hooked.setdefault("z", grad.clone()))
    (2 * z + 1).sum().backward()
    torch.testing.assert_close(hooked["z"], torch.full_like(x, 2.0))

    x = seeded_randn(4, seed=43).requires_grad_(True)
    with triton_op.recording_backward_calls() as calls:
        triton_op.square(triton_op.gelu(x)).sum().backward()
    assert [name for name, _ in calls] == ["square", "gelu"]

    x = seeded_randn(4, seed=44).requires_grad_(True)
    with triton_op.recording_backward_calls() as calls:
        z = triton_op.gelu(x)
        ((2 * z).sum() + (3 * z).sum()).backward()
    assert len(calls) == 1
    torch.testing.assert_close(calls[0][1], torch.full_like(x, 5.0))


@requires_triton_op
@pytest.mark.parametrize("version", ["triton_op", "autograd.Function"])
def test_channels_last_input_gives_right_values_in_a_contiguous_output(version):
    # What the README says: neither version keeps the input's memory format (nn.GELU does).
    op = triton_op.gelu if version == "triton_op" else triton_op.TritonGELU.apply
    x = seeded_randn(2, 3, 4, 5, seed=52).to(memory_format=torch.channels_last).requires_grad_(True)
    grad_output = seeded_randn(2, 3, 4, 5, seed=53)
    y = op(x)
    y.backward(grad_output)
    x_ref = x.detach().clone().requires_grad_(True)
    reference = F.gelu(x_ref, approximate="none")
    reference.backward(grad_output)
    torch.testing.assert_close(y, reference.detach())
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert y.is_contiguous() and not y.is_contiguous(memory_format=torch.channels_last)
    assert reference.is_contiguous(memory_format=torch.channels_last)


@requires_triton_op
def test_backward_calls_are_kept_only_inside_the_recording_block():
    # A log that grew on every call would keep one gradient a step alive in a training loop.
    x = seeded_randn(1025, seed=49).requires_grad_(True)
    grad_output = seeded_randn(1025, seed=50)
    with triton_op.recording_backward_calls() as calls:
        triton_op.gelu(x).backward(grad_output)
    for _ in range(3):
        triton_op.gelu(x).backward(grad_output)
    assert len(calls) == 1 and triton_op._open_logs == []
    torch.testing.assert_close(calls[0][1], grad_output)


@requires_triton_op
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_opcheck(dtype):
    """Every check on a GPU; under the interpreter, the checks that need no fake tensors."""
    tests = triton_op.OPCHECK_TESTS if ON_GPU else tuple(t for t in triton_op.OPCHECK_TESTS
                                                         if t not in triton_op.NEEDS_GPU)
    x = seeded_randn(1031, seed=45, dtype=dtype)
    g = seeded_randn(1031, seed=46, dtype=dtype)
    ops = torch.ops.chapter17
    for op, args in ((ops.gelu.default, (x.clone().requires_grad_(True),)),
                     (ops.square.default, (x.clone().requires_grad_(True),)),
                     (ops.gelu_backward.default, (g, x)), (ops.square_backward.default, (g, x))):
        torch.library.opcheck(op, args, test_utils=tests)


def fullgraph_gradient(op, x, weight):
    """x.grad of (weight * op(x)).sum(), compiled with fullgraph=True."""
    torch._dynamo.reset()
    x = x.detach().clone().requires_grad_(True)
    torch.compile(lambda t: (weight * op(t)).sum(), fullgraph=True)(x).backward()
    return x.grad


@requires_gpu
@requires_triton_op
@pytest.mark.parametrize("version", ["triton_op", "autograd.Function without side effects"])
def test_fullgraph_compile_takes_the_operator_and_a_side_effect_free_function(version):
    op = triton_op.gelu if version == "triton_op" else triton_op.TritonGELU.apply
    x = seeded_randn(4099, seed=47)
    weight = seeded_randn(4099, seed=48)  # a non-uniform grad_output for gelu
    x_ref = x.detach().clone().requires_grad_(True)
    (weight * F.gelu(x_ref, approximate="none")).sum().backward()
    torch.testing.assert_close(fullgraph_gradient(op, x, weight), x_ref.grad)


@requires_gpu
@requires_triton_op
def test_fullgraph_compile_refuses_a_backward_with_a_side_effect():
    # The same Function, plus 04's instrumentation: appends to module-level lists.
    x, weight = seeded_randn(4099, seed=47), seeded_randn(4099, seed=48)
    with pytest.raises(torch._dynamo.exc.Unsupported, match="(?i)side effect|mutating"):
        fullgraph_gradient(triton_op.TritonGELURecordingCalls.apply, x, weight)
    torch._dynamo.reset()


@requires_gpu
@requires_triton_op
def test_torch_export_keeps_the_operator_in_the_graph():
    x = seeded_randn(32, 64, seed=51)
    torch.manual_seed(0)
    model = triton_op.GELUBlock(triton_op.gelu).to(DEVICE)
    program = torch.export.export(model, (x,))
    assert "chapter17.gelu.default" in triton_op.exported_operators(program)
    torch.testing.assert_close(program.module()(x), F.gelu(model.linear(x), approximate="none"))


@requires_triton_op
def test_triton_op_script_answers_help_and_refuses_an_option():
    """It takes no options: --help says what it shows, and anything else is refused, not ignored (it was: the whole
    demo ran and exited 0)."""
    script = str(REPO / "extras/triton_op.py")
    shown = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert shown.returncode == 0 and "torch.library.triton_op" in shown.stdout, shown.stderr[-2000:]
    refused = subprocess.run([sys.executable, script, "--bogus"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert refused.returncode == 2 and "no options" in refused.stderr and refused.stdout == ""


@requires_triton_op
def test_triton_op_script_runs_end_to_end():
    result = subprocess.run([sys.executable, str(REPO / "extras/triton_op.py")], capture_output=True, text=True,
                            timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "17.1 grad_output at gelu inside 2*z + 1: tensor([2., 2., 2., 2., 2., 2.])" in result.stdout
    assert "17.3 fan-in: backward calls: 1 with grad_output tensor([5., 5., 5., 5.])" in result.stdout
    assert "allclose to oracle? False" not in result.stdout
    if not ON_GPU:
        assert "needs a GPU" in result.stderr


@pytest.mark.skipif(not HAS_TRITON_OP, reason="extras/triton_op.py needs torch 2.6 or newer")
def test_recording_blocks_that_overlap_keep_nothing_after_both_end():
    """A enters, B enters, A exits, B exits (as two threads may): each block gets what ran while
    it was open, and nothing is recorded once both have ended."""
    def backward():
        x = seeded_randn(4, seed=93).requires_grad_(True)
        triton_op.gelu(x).backward(seeded_randn(4, seed=94))

    a_block, b_block = triton_op.recording_backward_calls(), triton_op.recording_backward_calls()
    a = a_block.__enter__()
    b = b_block.__enter__()
    backward()
    a_block.__exit__(None, None, None)
    backward()
    b_block.__exit__(None, None, None)
    backward()
    assert (len(a), len(b)) == (1, 2)
    assert triton_op._open_logs == [], "a block's list outlived it"
