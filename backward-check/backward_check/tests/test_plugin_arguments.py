"""pytest --backward-check never breaks the suite, whatever the ops' arguments are: a suite whose ops take every
type of argument a real suite passes (torch.Size, dtypes, devices, enums, dicts of values and of tensors,
torch.Generator, nn.Modules, functions and lambdas, odict_keys, None, tuples of tensors, slices, ranges, and an
object that refuses to be compared, hashed, printed or pickled) passes under the plugin in report mode as it does
without it; each call is recorded and shown; an argument a worker process cannot be sent is named, and its check
runs in a process forked for it. Where that cannot be, the check runs in the suite's process on the CPU, and is
skipped where the suite's process holds a CUDA context: each with a note saying why.
"""
import sys

import pytest
import torch
from backward_check.tests.plugin_runs import row, run_pytest, suite_holds_cuda, write_suite

OPS = '''
import enum

import torch


class Mode(enum.Enum):
    FAST = 1
    EXACT = 2


class TakesAnything(torch.autograd.Function):
    """Doubles x; its second argument is configuration it passes by."""

    @staticmethod
    def forward(ctx, x, extra):
        return x * 2

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 2, None


class Reshapes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, size):
        ctx.size = x.shape
        return x.reshape(size) * 3

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.reshape(ctx.size) * 3, None


class Applies(torch.autograd.Function):
    """fn(x) for a fn that scales by a constant it names."""

    @staticmethod
    def forward(ctx, x, fn, factor):
        ctx.factor = factor
        return fn(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.factor, None, None


class Slices(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, where):
        ctx.shape, ctx.where = x.shape, where
        return x[where] * 2

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.new_zeros(ctx.shape)
        grad[ctx.where] = grad_output * 2
        return grad, None


class Casts(torch.autograd.Function):
    """Computes in dtype; device says where a buffer of its would go (none here)."""

    @staticmethod
    def forward(ctx, x, dtype, device):
        ctx.dtype = x.dtype
        return x.to(dtype=dtype) * 2

    @staticmethod
    def backward(ctx, grad_output):
        return (grad_output * 2).to(ctx.dtype), None, None
'''

SUITE = '''
import collections

import torch

from arg_ops import Applies, Casts, Mode, Reshapes, Slices, TakesAnything


class Hostile:
    """Refuses to be compared, hashed, printed or pickled."""

    def __eq__(self, other):
        raise RuntimeError("no comparing")

    def __hash__(self):
        raise RuntimeError("no hashing")

    def __repr__(self):
        raise RuntimeError("no printing")

    def __reduce__(self):
        raise RuntimeError("no pickling")


def x():
    return torch.randn(4, 6, requires_grad=True)


def run(value):
    TakesAnything.apply(x(), value).sum().backward()


def test_size():
    Reshapes.apply(x(), torch.Size([6, 4])).sum().backward()


def test_dtype_and_device():
    Casts.apply(x(), torch.float64, torch.device("cpu")).sum().backward()


def test_enum():
    run(Mode.FAST)


def test_dict_of_values():
    run({"eps": 1e-5, "mode": "fast", "layers": [1, 2]})


def test_dict_of_tensors():
    run({"weight": torch.randn(6), "bias": torch.randn(6)})


def test_generator():
    run(torch.Generator().manual_seed(3))


def test_module():
    run(torch.nn.Linear(6, 6))


def test_function():
    Applies.apply(x(), torch.neg, -1.0).sum().backward()


def test_lambda():
    Applies.apply(x(), lambda t: t * 5, 5.0).sum().backward()


def test_odict_keys():
    run(torch.nn.Linear(2, 2).state_dict().keys())


def test_none():
    run(None)


def test_tuple_of_tensors():
    run((torch.randn(3), torch.randn(3, requires_grad=True)))


def test_slice():
    Slices.apply(x(), slice(1, 3)).sum().backward()


def test_range():
    run(range(5))


def test_hostile():
    run(Hostile())
'''

TESTS = 15


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    folder = tmp_path_factory.mktemp("arguments")
    (folder / "arg_ops.py").write_text(OPS)
    (folder / "test_arguments.py").write_text(SUITE)
    return folder


def run_suite(folder, *options):
    return run_pytest(folder, *options, "test_arguments.py")


@pytest.fixture(scope="module")
def report(suite):
    return run_suite(suite, "--backward-check", "--backward-check-budget=all")


def test_the_suite_passes_without_the_plugin(suite):
    code, output = run_suite(suite)
    assert code == 0 and f"{TESTS} passed" in output, output


def test_the_suite_passes_under_the_plugin_and_every_call_is_recorded(report):
    code, output = report
    assert code == 0 and f"{TESTS} passed" in output, output
    assert "not recorded" not in output and "itself failed" not in output, output
    table = output.split("= backward-check =", 1)[1]
    for op in ("arg_ops.TakesAnything", "arg_ops.Reshapes", "arg_ops.Applies", "arg_ops.Slices", "arg_ops.Casts"):
        assert f"\n{op}\n" in table, op


@pytest.mark.parametrize("op, words", [
    ("arg_ops.Reshapes", "float32 2-d, torch.Size([6, 4])"),
    ("arg_ops.Casts", "float32 2-d, torch.float64, cpu"),
    ("arg_ops.TakesAnything", "float32 2-d, Mode.FAST"),
    ("arg_ops.TakesAnything", "float32 2-d, {eps: 1e-05, mode: 'fast', layers: [1, 2]}"),
    ("arg_ops.TakesAnything", "float32 2-d, {weight: float32 1-d (no grad), bias: float32 1-d (no grad)}"),
    ("arg_ops.TakesAnything", "float32 2-d, Generator"),
    ("arg_ops.TakesAnything", "float32 2-d, Linear"),
    ("arg_ops.TakesAnything", "float32 2-d, odict_keys"),
    ("arg_ops.TakesAnything", "float32 2-d, None"),
    ("arg_ops.TakesAnything", "float32 2-d, (float32 1-d (no grad), float32 1-d)"),
    ("arg_ops.TakesAnything", "float32 2-d, range"),
    ("arg_ops.TakesAnything", "float32 2-d, Hostile"),
    ("arg_ops.Applies", "float32 2-d, neg, -1.0"),
    ("arg_ops.Applies", "float32 2-d, <lambda>, 5.0"),
    ("arg_ops.Slices", "float32 2-d, slice"),
], ids=lambda value: value if "." not in value[:4] else None)
def test_each_argument_is_shown_in_its_row(report, op, words):
    """A row's arguments, its first line's column and the lines that go on with it, read back whole."""
    from backward_check.plugin.findings import ARGUMENTS_WIDTH
    _, output = report
    arguments = []
    for line in row(output, op, whole=True):
        if line.startswith("    ("):  # a note
            continue
        cell = line[2:2 + ARGUMENTS_WIDTH].strip()
        if not line.startswith("   "):
            arguments.append(cell)
        elif cell:
            arguments[-1] += " " + cell
    assert words in arguments, arguments


def test_the_checks_that_can_decide_are_clean(report):
    """The ops are right: every row that was checked is clean (or could not decide), never a trap."""
    _, output = report
    table = output.split("= backward-check =", 1)[1].split("calls of")[0]
    assert "TRAP" not in table and "FAULT" not in table, table
    for op in ("arg_ops.Reshapes", "arg_ops.Casts", "arg_ops.Slices"):
        assert row(output, op, whole=True)[0].rstrip().endswith("clean"), row(output, op, whole=True)


@pytest.mark.parametrize("op, words, refused", [
    ("arg_ops.TakesAnything", "odict_keys", "its argument 1 (a odict_keys) cannot be sent to a worker process: "
                                            "pickle refuses it (TypeError: cannot pickle 'odict_keys' object)"),
    ("arg_ops.TakesAnything", "Hostile", "its argument 1 (a Hostile) cannot be sent to a worker process: pickle "
                                         "refuses it (RuntimeError: no pickling)"),
    ("arg_ops.Applies", "<lambda>", "its argument 1 (a function) cannot be sent to a worker process: pickle refuses"),
], ids=["odict_keys", "hostile", "lambda"])
def test_an_argument_the_worker_cannot_be_sent_is_named_and_checked_in_a_forked_process(report, op, words, refused):
    """On a GPU (the suite's process holding a CUDA context), not checked, naming the argument."""
    _, output = report
    lines = row(output, op, whole=True)
    start = next(i for i, line in enumerate(lines) if words in line and not line.startswith("   "))
    if suite_holds_cuda():
        assert f"not checked: {refused}" in lines[start] and "cannot use its CUDA context" in lines[start], lines
        return
    note = next(line for line in lines[start + 1:] if line.startswith("    ("))
    assert note.startswith(f"    (checked in a process forked from the suite's: {refused}"), note
    assert lines[start].rstrip().endswith(("clean", "undecided (no trap found, but not every check could decide)")), \
        lines[start]


# -- where a check runs when the worker cannot take it, on the selection's side of check_protected ---------------

class Doubles(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fn):
        return x * 2

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 2, None


class NoWorker:
    """A worker that cannot take the call, as for an argument pickle refuses."""
    timeout = 120.0

    def check(self, call, job):
        return None, "its argument 1 (a function) cannot be sent to a worker process"


class Quiet:
    quiet = 0


def protected_verdict(monkeypatch, fork, cuda):
    from backward_check.plugin import worker
    from backward_check.plugin.recording import copy_value, signature_of, RecordedCall
    monkeypatch.setattr(worker, "can_fork", lambda: fork)
    monkeypatch.setattr(worker, "cuda_initialised", lambda: cuda)
    args = (torch.randn(3, 4, requires_grad=True), lambda t: t)
    signature, described = signature_of(args, {}, {})
    call = RecordedCall(Doubles, "Doubles", signature, described, (), "t", 0, copy_value(args), {})
    return worker.check_protected(NoWorker(), call, worker.job_of(call, ()), Quiet())


def test_a_forked_process_where_the_platform_forks_and_no_cuda_context_is_held(monkeypatch):
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # (under pytest-xdist on a GPU an earlier test in this worker made one: the plugin itself would then skip the
        # check, as the test below shows, and a forked child that touched CUDA would fail)
        pytest.skip("this process holds a CUDA context, which the test pretends away")
    verdict = protected_verdict(monkeypatch, fork=True, cuda=False)
    assert verdict.status == "clean", verdict
    assert verdict.note == "checked in a process forked from the suite's: its argument 1 (a function) cannot be " \
                           "sent to a worker process"


def test_the_suites_process_where_the_platform_cannot_fork_and_no_cuda_context_is_held(monkeypatch):
    verdict = protected_verdict(monkeypatch, fork=False, cuda=False)
    assert verdict.status == "clean", verdict
    assert verdict.note == "checked in the suite's own process: its argument 1 (a function) cannot be sent to a " \
                           "worker process, and this platform cannot fork a process for it"


def test_skipped_where_the_suites_process_holds_a_cuda_context(monkeypatch):
    verdict = protected_verdict(monkeypatch, fork=False, cuda=True)
    assert verdict.status == "not checked", verdict
    assert verdict.summary == "not checked: its argument 1 (a function) cannot be sent to a worker process, and a " \
                             "process forked from the suite's cannot use its CUDA context, while a check in the " \
                             "suite's own process could lose it"


# -- a call the test expects to raise ----------------------------------------------------------------------------

PICKS = '''
import torch


class Picks(torch.autograd.Function):
    """x[rows] * 2, refusing rows past x's end, as a fused loss refuses an out-of-range target."""

    @staticmethod
    def forward(ctx, x, rows):
        assert int(rows.max()) < x.shape[0], "rows out of bounds"
        ctx.save_for_backward(rows)
        ctx.n = x.shape[0]
        return x[rows] * 2

    @staticmethod
    def backward(ctx, grad_output):
        rows, = ctx.saved_tensors
        grad = grad_output.new_zeros((ctx.n, *grad_output.shape[1:]))
        grad.index_add_(0, rows, 2 * grad_output)
        return grad, None
'''

PICKS_TESTS = '''
import pytest
import torch

from picks import Picks


def test_out_of_bounds_rows_are_refused():
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(AssertionError, match="out of bounds"):
        Picks.apply(x, torch.tensor([0, 9]))


def test_rows_are_picked():
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    Picks.apply(x, torch.tensor([2, 0])).sum().backward()
    assert x.grad[1].eq(0).all()
'''


def test_a_call_the_test_expects_to_raise_is_not_checked(tmp_path):
    """The first test's call raises, as it means to: it is taken back, not checked (its check would find the op
    'crashes' on the arguments it was meant to refuse), and the same signature is recorded from the second test's
    call, which succeeds, and checked clean."""
    (tmp_path / "picks.py").write_text(PICKS)
    (tmp_path / "test_picks.py").write_text(PICKS_TESTS)
    code, output = run_pytest(tmp_path, "--backward-check", "test_picks.py")
    assert code == 0 and "2 passed" in output, output
    rows = row(output, "picks.Picks", whole=True)
    assert not [r for r in rows if "crashes" in r], rows
    checked = row(output, "picks.Picks")
    assert len(checked) == 1 and "clean" in checked[0] and "test_rows_are_picked" in " ".join(rows), rows


# -- the worker process, started while the test that made the first call still runs -------------------------

def doubles_call():
    from backward_check.plugin import worker
    from backward_check.plugin.recording import copy_value, signature_of, RecordedCall
    args = (torch.randn(3, 4, requires_grad=True), 2.0)
    signature, described = signature_of(args, {}, {})
    call = RecordedCall(Doubles, f"{__name__}.Doubles", signature, described, (), "t", 0, copy_value(args), {})
    return call, worker.job_of(call, ())


def test_the_worker_starts_early_and_the_first_check_waits_for_what_is_left():
    """prestart launches the process and returns at once; the check then waits for it to be ready (the wait is what
    the table counts) and is checked there, in the one process started."""
    from backward_check.plugin import worker
    started = worker.Worker(timeout=120.0)
    try:
        started.prestart()
        assert started.process is not None and started.process.is_alive() and not started.ready
        started.prestart()  # once: the process is there already
        call, job = doubles_call()
        verdict, why = started.check(call, job)
        assert why is None and verdict.status == "clean" and verdict.note == "", verdict
        assert started.ready and started.starts == 1 and started.restarts == 0
    finally:
        started.stop()


class SeesTorchsLazyImports(torch.autograd.Function):
    """Doubles; its forward raises where torch's lazily imported modules are not yet imported in its process."""

    @staticmethod
    def forward(ctx, x):
        from backward_check.plugin.child import TORCHS_LAZY_IMPORTS
        missing = [m for m in TORCHS_LAZY_IMPORTS if m not in sys.modules]
        if missing:
            raise RuntimeError(f"not yet imported: {missing}")
        return x * 2

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 2


def test_the_worker_imports_what_torch_imports_at_the_first_backward_while_it_starts():
    """torch imports its symbolic shapes (and sympy) at a process's first autograd.grad, 0.4 s on a CPU: the worker
    does it while it starts, so its first check, whose first call of the op comes before any backward, finds them."""
    from backward_check.plugin import worker
    from backward_check.plugin.recording import copy_value, signature_of, RecordedCall
    args = (torch.randn(3, 4, requires_grad=True),)
    signature, described = signature_of(args, {}, {})
    call = RecordedCall(SeesTorchsLazyImports, f"{__name__}.SeesTorchsLazyImports", signature, described, (), "t", 0,
                        copy_value(args), {})
    started = worker.Worker(timeout=120.0)
    try:
        verdict, why = started.check(call, worker.job_of(call, ()))
        assert why is None and verdict.status == "clean", (verdict, why)
    finally:
        started.stop()


def test_a_worker_that_died_while_starting_early_is_started_again_and_is_no_fault():
    from backward_check.plugin import worker
    started = worker.Worker(timeout=120.0)
    try:
        started.prestart()
        started.process.kill()
        started.process.join(10)
        call, job = doubles_call()
        verdict, why = started.check(call, job)
        assert why is None and verdict.status == "clean", verdict
        assert started.starts == 2 and started.restarts == 0
    finally:
        started.stop()


# -- a GPU short of memory after a check is not a lost CUDA context --------------------------------------------

@pytest.mark.parametrize("failures, error, poisoned", [
    (1, "CUDA error: out of memory", False),     # memory freed by the time of the second probe
    (9, "CUDA error: out of memory", False),     # memory short throughout: still not a sticky error
    (1, "CUDA error: an illegal memory access was encountered", True),
    (9, "CUDA error: device-side assert triggered", True),
    (0, "", False),
])
def test_a_probe_that_finds_the_gpu_full_is_no_fault(monkeypatch, failures, error, poisoned):
    """The H100 run at a1535c5 had three tiny CPU checks named "FAULT a CUDA error, after the checker's calls" under
    16 pytest-xdist workers: the probe after each check made a CUDA context on a card the other workers had filled.
    Out of memory is no sticky error; an illegal access or a device-side assert is."""
    from backward_check.plugin import child
    probes = []

    def synchronize():
        probes.append(1)
        if len(probes) <= failures:
            raise RuntimeError(f"{error}\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")

    monkeypatch.setattr(child, "cuda_initialised", lambda: True)
    monkeypatch.setattr(child, "cuda_contexts", lambda: None)
    monkeypatch.setattr(child.torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(child.torch, "ones", lambda *shape, device=None: torch.zeros(*shape))
    lost = child.cuda_poisoned(pauses=(0.0, 0.0))
    assert bool(lost) is poisoned and (not poisoned or lost == f"RuntimeError: {error}"), lost
    assert len(probes) == (1 if poisoned else min(failures + 1, 3)), probes


def test_a_check_that_made_no_cuda_context_is_not_probed(monkeypatch):
    """An op that ran on the CPU alone made no context: the probe would make one (memory, and a second of the
    GPU's time) only to find it fine."""
    from backward_check.plugin import child
    monkeypatch.setattr(child, "cuda_initialised", lambda: True)
    monkeypatch.setattr(child, "cuda_contexts", lambda: False)
    monkeypatch.setattr(child.torch.cuda, "synchronize", lambda: pytest.fail("probed"))
    assert child.cuda_poisoned() is False


# -- a worker started with the session imports what pytest put on sys.path later ----------------------------------

HELPER_TESTS = '''
import torch

from suite_ops import IgnoresGradOutput


def test_squares():
    x = torch.randn(4, 5, requires_grad=True)
    IgnoresGradOutput.apply(x).sum().backward()   # grad_output of ones: the bug passes here
    torch.testing.assert_close(x.grad, 2 * x.detach())
'''


def test_an_op_beside_the_tests_is_imported_by_the_worker_started_before_collection(tmp_path):
    """The worker starts as the session does, before pytest collects tests/ and puts that folder on sys.path (its
    default import mode, for a folder without __init__.py). The op lives there, in a helper module the test imports:
    the worker must find it as the suite does, and check it itself, not leave it to a fallback."""
    tests = tmp_path / "tests"
    tests.mkdir()
    write_suite(tests, HELPER_TESTS, name="test_helper.py")  # the ops module beside the test, in tests/
    code, output = run_pytest(tmp_path, "--backward-check", "tests/test_helper.py")
    assert code == 0 and "1 passed" in output, output
    assert "cannot import" not in output and "forked" not in output, output
    checked = row(output, "suite_ops.IgnoresGradOutput")
    assert len(checked) == 1 and "TRAP ignores grad_output" in checked[0], output


# -- what the worker is sent: a file it maps, or bytes where no folder has room -------------------------------------
# Each test writes its parcels into a folder of its own: other tests' plugin runs (under pytest-xdist) write and
# remove theirs in /dev/shm at the same time.

def parcel_files(folder):
    return sorted(folder.glob("backward-check-call-*.pt"))


@pytest.fixture
def parcels_here(monkeypatch, tmp_path):
    """parcel_of writes into tmp_path, which the test then reads."""
    from backward_check.plugin import worker
    monkeypatch.setattr(worker, "_folders_for_parcels", lambda nbytes: [str(tmp_path)])
    return tmp_path


@pytest.mark.skipif(__import__("os").name != "posix", reason="parcels are files only where POSIX removes a mapped file")
def test_a_parcel_is_a_file_the_worker_maps_and_an_op_that_writes_into_it_changes_nothing_else(parcels_here):
    """The copies go to the worker in a file it maps (no copy through the pipe); the mapping is private, so an op
    that writes into its input changes neither the file nor the suite's copies."""
    from backward_check.plugin import child, worker
    from backward_check.plugin.recording import copy_value, restore_value
    x = torch.randn(300, 200)
    copies = copy_value((x, 2.0))
    parcel = worker.parcel_of({"job": copies}, x.nbytes)
    try:
        assert parcel[0] == "file" and parcel_files(parcels_here) == [parcels_here / parcel[1].split("/")[-1]]
        loaded = child.unpacked(*parcel)["job"]
        mapped = loaded[0].flat
        if sys.platform.startswith("linux"):  # mapped, not read into memory of its own
            assert parcel[1] in open("/proc/self/maps").read()
        received = restore_value(loaded)
        torch.testing.assert_close(received[0], x, rtol=0, atol=0)
        assert received[1] == 2.0
        received[0].mul_(-1)  # the op's write, in the worker: into a tensor of its own
        received[0].resize_(10 ** 5)  # and a resize, which a mapped storage refuses
        mapped.mul_(-1)  # even a write into the mapping itself stays in this process (a private mapping)
        again = restore_value(child.unpacked(*parcel)["job"])[0]
        torch.testing.assert_close(again, x, rtol=0, atol=0)
        torch.testing.assert_close(restore_value(copies)[0], x, rtol=0, atol=0)
    finally:
        worker.remove_parcel(parcel)
    assert parcel_files(parcels_here) == []


def test_where_no_folder_has_room_the_parcel_is_bytes(monkeypatch):
    from backward_check.plugin import child, worker
    from backward_check.plugin.recording import copy_value, restore_value
    monkeypatch.setattr(worker, "_folders_for_parcels", lambda nbytes: [])
    x = torch.randn(30, 20)
    kind, value = parcel = worker.parcel_of({"job": copy_value((x,))}, x.nbytes)
    assert kind == "bytes" and isinstance(value, bytes)
    torch.testing.assert_close(restore_value(child.unpacked(*parcel)["job"])[0], x, rtol=0, atol=0)


@pytest.mark.skipif(__import__("os").name != "posix", reason="parcels are files only where POSIX removes a mapped file")
def test_a_folder_where_the_parcel_would_take_more_than_its_share_is_passed_over(monkeypatch, tmp_path):
    """A container's /dev/shm is often 64 MiB, which the suite's own DataLoader workers need too: a parcel takes at
    most an eighth of a folder's room, so one of 16 MiB goes to the temporary folder instead, and where no folder has
    the room, through the pipe."""
    import shutil
    from backward_check.plugin import worker
    monkeypatch.setattr(worker.tempfile, "gettempdir", lambda: str(tmp_path))  # never /dev/shm itself (TMPDIR)
    real = shutil.disk_usage
    assert str(tmp_path) in worker._folders_for_parcels(10 ** 6)
    monkeypatch.setattr(worker.shutil, "disk_usage",
                        lambda folder: real(folder)._replace(free=64 * 2 ** 20 if folder == "/dev/shm" else 10 ** 12))
    assert worker._folders_for_parcels(16 * 2 ** 20) == [str(tmp_path)]
    import os
    shm = os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
    assert ("/dev/shm" in worker._folders_for_parcels(2 ** 20)) == shm
    monkeypatch.setattr(worker.shutil, "disk_usage", lambda folder: real(folder)._replace(free=8 * 10 ** 6))
    assert worker._folders_for_parcels(10 ** 6) == []


def test_a_parcel_pickle_refuses_raises_and_leaves_no_file(parcels_here):
    import pickle
    from backward_check.plugin import worker
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError), match="lambda"):
        worker.parcel_of({"job": (torch.randn(3), lambda v: v)}, 12)
    assert parcel_files(parcels_here) == []


def test_a_parcel_interrupted_while_written_leaves_no_file(parcels_here, monkeypatch):
    """Ctrl-C, or a test's timeout, while torch.save writes half a GiB."""
    from backward_check.plugin import worker

    def interrupted(value, out):
        out.write(b"part of a parcel")
        raise KeyboardInterrupt

    monkeypatch.setattr(worker.torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        worker.parcel_of({"job": (torch.randn(3),)}, 12)
    assert parcel_files(parcels_here) == []


@pytest.mark.skipif(__import__("os").name != "posix", reason="parcels are files only where POSIX removes a mapped file")
def test_a_check_in_the_worker_leaves_no_parcel_behind(parcels_here):
    """Neither the file (the worker removes it once mapped, the suite after the answer) nor the worker's mapping of it,
    which would hold its pages in shared memory until the next check."""
    from backward_check.plugin import worker
    started = worker.Worker(timeout=120.0)
    written = []
    parcel_of = worker.parcel_of

    def noted(sent, nbytes):
        written.append(parcel_of(sent, nbytes))
        return written[-1]

    try:
        worker.parcel_of = noted
        call, job = doubles_call()
        verdict, why = started.check(call, job)
        assert why is None and verdict.status == "clean", verdict
        if sys.platform.startswith("linux"):
            assert "backward-check-call-" not in open(f"/proc/{started.process.pid}/maps").read()
    finally:
        worker.parcel_of = parcel_of
        started.stop()
    assert [kind for kind, _ in written] == ["file"]
    assert parcel_files(parcels_here) == []


def test_a_check_sent_as_bytes_is_answered_and_the_worker_goes_on(monkeypatch):
    """Where no folder has room the parcel goes through the pipe, apart from the message that announces it; the next
    check, a file again, is answered too."""
    from backward_check.plugin import worker
    started = worker.Worker(timeout=120.0)
    try:
        call, job = doubles_call()
        monkeypatch.setattr(worker, "_folders_for_parcels", lambda nbytes: [])
        verdict, why = started.check(call, job)
        assert why is None and verdict.status == "clean", verdict
        monkeypatch.undo()
        verdict, why = started.check(call, job)
        assert why is None and verdict.status == "clean", verdict
        assert started.starts == 1 and started.restarts == 0
    finally:
        started.stop()
