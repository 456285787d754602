"""pytest --backward-check's verdicts repeat from run to run (backward-check/backward_check/plugin/worker.py): each
check seeds torch's, Python's and NumPy's generators from the op and its signature, so that an op whose backward
draws from them (an iterative solve from a random start) is judged on the same draws whatever was checked before it
in the worker (a backward that draws from torch's generator is seeded alike at every call the checker compares, and
said to draw, its sampled gradient's comparisons undecided); and a check that finds a trap in an op that draws from
Python's or NumPy's generator is run again with the next seed, a verdict that changes between the two being shown as
unstable, with both, and failing no test.
"""
import re

import pytest
from backward_check.tests.plugin_runs import row, run_pytest

OPS = '''
import random

import torch


class Drawer(torch.autograd.Function):  # right; its backward draws a thousand numbers from torch's generator
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad_output):
        torch.randn(1000)
        return grad_output * 3


class Noisy(torch.autograd.Function):  # a random start that does not converge: its error is the draws'
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * x * grad_output * (1 + 0.05 * torch.randn(x.shape, dtype=x.dtype, device=x.device))


class SeedParity(torch.autograd.Function):
    """Draws its random start from Python's generator, and leaves grad_output out where torch's generator was seeded
    with an odd number: of two seeds in a row, one finds the trap and the other does not."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        random.random()
        return 2 * x if torch.initial_seed() % 2 == 1 else 2 * x * grad_output
'''

SUITE = '''
import torch

from seed_ops import Drawer, Noisy, SeedParity


def test_drawer():
    Drawer.apply(torch.randn(40, requires_grad=True)).sum().backward()


def test_noisy():
    torch.manual_seed(0)  # the same input in every run: what differs is up to the checks
    Noisy.apply(torch.randn(4, 6, requires_grad=True)).sum().backward()


def test_seed_parity():
    SeedParity.apply(torch.randn(5, 3, requires_grad=True)).sum().backward()
'''


def run_suite(folder, *options):
    (folder / "seed_ops.py").write_text(OPS)
    (folder / "test_seeds.py").write_text(SUITE)
    return run_pytest(folder, "--backward-check=fail", "--backward-check-budget=all", *options, "test_seeds.py")


def noisy_report(output):
    """Noisy's report, from its first line to the line that says what it was checked on, without the seconds."""
    start = output.index("check_backward(seed_ops.Noisy)")
    end = output.index("\n  on ", start)
    end = output.index("\n", end + 1)
    return re.sub(r"\d+\.\d+ s\b", "", output[start:end])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The suite whole (Drawer checked first, in the same worker), and test_noisy alone."""
    folder = tmp_path_factory.mktemp("seeds")
    return run_suite(folder), run_suite(folder, "-k", "noisy")


def test_a_check_of_an_op_that_draws_repeats_whatever_was_checked_before_it(runs):
    """Noisy's backward draws: its gradient, a sample, is said to be one (undecided, failing nothing), the same
    whether Drawer was checked before it in the worker or not."""
    (code, whole), (alone_code, alone) = runs
    assert "undecided" in row(whole, "seed_ops.Noisy")[0], whole
    assert "draws random numbers, so its gradient is a sample" in noisy_report(whole), whole
    assert noisy_report(whole) == noisy_report(alone)
    assert row(whole, "seed_ops.Drawer")[0].rstrip().endswith("clean")


def test_a_verdict_that_changes_with_the_seed_is_unstable_shows_both_and_fails_nothing(runs):
    """The signature's seed is odd, so its first check finds the trap, and the check again, with the next seed,
    does not."""
    import torch
    from backward_check.plugin.recording import signature_of
    from backward_check.plugin.worker import seed_of
    signature, _ = signature_of((torch.zeros(5, 3, requires_grad=True),), {}, {})
    assert seed_of("seed_ops.SeedParity", signature) % 2 == 1, "the op's seed is no longer odd: flip its parity"
    (code, whole), _ = runs
    parity, = row(whole, "seed_ops.SeedParity")
    assert parity.rstrip().endswith("UNSTABLE: TRAP ignores grad_output with one seed, clean with another"), parity
    assert "FAILED test_seeds.py::test_seed_parity" not in whole, whole
    assert "3 passed" in whole, whole
    section = whole.split("- seed_ops.SeedParity (float32 2-d), first called by test_seeds.py::test_seed_parity -")[1]
    assert re.search(r"the op's random draws seeded with \d+:\n", section) and \
        re.search(r"\n\nseeded with \d+:\n", section), section


def test_a_trap_the_accepted_file_accepts_is_not_checked_again(tmp_path):
    """The check again with the next seed is for a verdict that fails a test or names a bug; where every trap found
    is accepted (by design), it is one check, not two: the verdict is the first one's, not 'unstable'."""
    import importlib
    import sys
    import torch
    from backward_check.plugin import verdicts, worker
    (tmp_path / "seed_ops.py").write_text(OPS)
    sys.path.insert(0, str(tmp_path))
    try:
        ops = importlib.import_module("seed_ops")
        x = torch.randn(5, 3, requires_grad=True)
        odd = 1  # the first check finds the trap, the second (seed 2) does not
        job = worker.Job("seed_ops.SeedParity", (x,), {}, (), (), odd)
        assert worker.check_call(ops.SeedParity, job, (x,), {}).status == verdicts.UNSTABLE
        accepted = worker.Job("seed_ops.SeedParity", (x,), {}, (), (), odd, ("ignores grad_output",))
        verdict = worker.check_call(ops.SeedParity, accepted, (x,), {})
        assert verdict.status == verdicts.TRAPPED and verdict.traps == ("ignores grad_output",), verdict
        other = worker.Job("seed_ops.SeedParity", (x,), {}, (), (), odd, ("writes into an input or a saved tensor",))
        assert worker.check_call(ops.SeedParity, other, (x,), {}).status == verdicts.UNSTABLE
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("seed_ops", None)
