"""A fault of the op's that loses the GPU context is the op's, named by the call that provoked it, and every
check after it is undecided: never "the checker itself failed here; please report it". On a GPU, a planted
out-of-bounds Triton kernel shows it for real, in a process of its own (the fault poisons the process)."""
import subprocess
import sys
import textwrap

import pytest
import torch
from chapter_scripts import REPO, requires_gpu, seeded_randn

sys.path.insert(0, str(REPO / "practice"))
from backward_checker import check_backward  # noqa: E402

ILLEGAL = "CUDA error: an illegal memory access was encountered"


class FaultsOnStrideZero(torch.autograd.Function):
    """Stands in for a kernel that reads far out of bounds when a grad_output stride is 0 (after .sum(dim=0)):
    it raises CUDA's words, and so does every later call, as a lost context does."""
    lost = False

    @staticmethod
    def forward(ctx, x):
        if FaultsOnStrideZero.lost:
            raise RuntimeError(ILLEGAL)
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        if FaultsOnStrideZero.lost or 0 in grad_output.stride():
            FaultsOnStrideZero.lost = True
            raise RuntimeError(ILLEGAL)
        x, = ctx.saved_tensors
        return 2 * x * grad_output


def test_a_lost_context_is_the_ops_fault_named_by_its_call():
    FaultsOnStrideZero.lost = False
    report = check_backward(FaultsOnStrideZero, seeded_randn(4, 6, seed=1), reference=lambda x: x * x)
    text = str(report)
    assert report.traps == ["crashes"], text
    assert "the op faulted the GPU with a grad_output after .sum(dim=0) (stride 0 along dim 0)" in text, text
    assert "context is lost" in text and "please report" not in text, text
    assert not report.decided  # the checks after the fault could not run, and say so


FAULTING_SCRIPT = textwrap.dedent('''
    import os, sys
    sys.path.insert(0, {practice!r})
    from backward_checker import check_backward
    import torch, triton, triton.language as tl

    @triton.jit
    def square_backward(g_ptr, x_ptr, out_ptr, n, g_stride, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        g = tl.load(g_ptr + offsets * g_stride, mask=mask)
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, 2.0 * x * g, mask=mask)

    class SquareFaultsOnStrideZero(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad_output):
            x, = ctx.saved_tensors
            out = torch.empty_like(x)
            # BUG (planted): a stride of 0 is taken for "unset", and a huge sentinel stride read instead. Any
            # other grad_output is read right: contiguous, with the stride of the tensor the kernel reads.
            g = grad_output if grad_output.stride(-1) == 0 else grad_output.contiguous()
            stride = g.stride(-1) or (1 << 28)
            square_backward[(triton.cdiv(x.numel(), 1024),)](g, x, out, x.numel(), stride, BLOCK=1024)
            torch.cuda.synchronize()
            return out

    x = torch.randn(64, 300, device="cuda")
    print(check_backward(SquareFaultsOnStrideZero, x, reference=lambda x: x * x), flush=True)
    os._exit(0)  # the context is lost: no interpreter teardown
''')


@requires_gpu
def test_a_real_out_of_bounds_kernel_is_the_ops_fault(tmp_path):
    script = tmp_path / "faults.py"
    script.write_text(FAULTING_SCRIPT.format(practice=str(REPO / "practice")))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    text = done.stdout
    assert done.returncode == 0, text + done.stderr
    assert "TRAP  crashes" in text and "the op faulted the GPU" in text, text
    assert "after .sum(dim=-1) (stride 0 along the last dim)" in text, text
    assert "please report" not in text, text


# -- the device out of memory: the checker's copies took the room, not the op's crash ------------------------------

NO_ROOM = ("CUDA out of memory. Tried to allocate 764.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which "
           "68.62 MiB is free.")


def short_of_memory(after_calls, in_backward=False, words=None):
    """A right square (x * x) that, from its after_calls-th call on (forward calls, or backward calls), raises what
    PyTorch raises when the device has no room left: as a correct op does at 10^8 elements on an 80 GB card once the
    checker's float64 copies of its inputs and gradients fill it (an H100, softmax and attention: "crashes" before)."""
    calls = {"forward": 0, "backward": 0}
    # a launch's error comes as torch.AcceleratorError, a RuntimeError of its own, where torch has it (2.8 and on)
    launch_error = getattr(torch, "AcceleratorError", RuntimeError)

    def full(which):
        calls[which] += 1
        if calls[which] >= after_calls:
            if words is None:
                raise torch.cuda.OutOfMemoryError(NO_ROOM)
            raise (launch_error if words.startswith("CUDA error") else RuntimeError)(words)

    class ShortOfMemory(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if not in_backward:
                full("forward")
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad_output):
            if in_backward:
                full("backward")
            x, = ctx.saved_tensors
            return 2 * x * grad_output

    return ShortOfMemory


@pytest.mark.parametrize("after_calls", [1, 2, 6, 30])
@pytest.mark.parametrize("in_backward", [False, True])
@pytest.mark.parametrize("words", [None, "CUDA error: out of memory", "DefaultCPUAllocator: can't allocate memory: "
                                   "you tried to allocate 800000000 bytes"])
@pytest.mark.parametrize("reference", [lambda x: x * x, None], ids=["reference", "finite differences"])
def test_an_op_that_finds_no_memory_under_the_checker_is_undecided_never_a_crash(after_calls, in_backward, words,
                                                                                 reference):
    op = short_of_memory(after_calls, in_backward, words)
    report = check_backward(op, seeded_randn(40, 30, seed=after_calls), reference=reference)
    assert report.traps == [], str(report)
    assert report.undecided and "out of memory" in str(report), str(report)
    assert "please report it" not in str(report) and "Traceback" not in str(report), str(report)


def test_another_raise_of_the_op_is_still_its_crash():
    op = short_of_memory(6, words="RuntimeError: shape '[2, 6]' is invalid for input of size 60")
    report = check_backward(op, seeded_randn(40, 30, seed=3), reference=lambda x: x * x)
    assert "crashes" in report.traps, str(report)


def test_an_ops_own_message_about_memory_bounds_is_still_its_crash():
    """Only torch's own out-of-memory errors are taken for no room: an op's assertion that merely says "out of
    memory" in its words is its crash, as before."""
    op = short_of_memory(6, words="scratch index 4097 past the workspace: shared scratch out of memory bounds")
    report = check_backward(op, seeded_randn(40, 30, seed=4), reference=lambda x: x * x)
    assert "crashes" in report.traps, str(report)


class WrongFormulaShortOnCopies(torch.autograd.Function):
    """3x where 2x is right, and no room left to copy a non-contiguous grad_output (as g.contiguous() at 10^8
    elements): the wrong formula is still named; the layouts it could not take are undecided, not its crash."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        if not grad_output.is_contiguous():
            raise torch.cuda.OutOfMemoryError(NO_ROOM)
        x, = ctx.saved_tensors
        return 3 * x * grad_output


def test_no_room_for_a_side_call_keeps_the_trap_already_found():
    report = check_backward(WrongFormulaShortOnCopies, seeded_randn(40, 30, seed=5), reference=lambda x: x * x)
    assert report.traps == ["a wrong formula"], str(report)
    assert "crashes" not in str(report)


def test_a_reference_or_the_checkers_own_work_out_of_memory_is_undecided_never_a_traceback(monkeypatch):
    def reference_short_of_memory(x):
        raise torch.cuda.OutOfMemoryError(NO_ROOM)

    report = check_backward(short_of_memory(10 ** 9), seeded_randn(40, 30, seed=6), reference=reference_short_of_memory)
    assert report.traps == [] and "out of memory in a call of the reference" in str(report), str(report)

    from backward_check.checks import context as context_module

    def cat_short_of_memory(*args, **kwargs):  # the checker's torch.cat of the first forward's outputs
        raise torch.cuda.OutOfMemoryError(NO_ROOM)

    monkeypatch.setattr(context_module, "computed_precision", cat_short_of_memory)
    report = check_backward(short_of_memory(10 ** 9), seeded_randn(40, 30, seed=7), reference=lambda x: x * x)
    assert report.traps == [] and "out of memory in the checker's own work" in str(report), str(report)
