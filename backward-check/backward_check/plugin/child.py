"""The worker process's side of the boundary (the child): the loop a spawned worker serves (serve), a check run in
it or in a forked process (serve_one), and what each check does there: import the op as the suite does, seed every
generator from the op and its signature, run check_backward, and answer with a plain Verdict (verdicts.py). The
parent's side, which starts, feeds and restarts it, is worker.py."""
import contextlib
import faulthandler
import importlib
import io
import os
import random
import re
import sys
import time

import torch

from ..calling import clip
from ..checks.context import FAULT_WORDS
from .recording import CustomOpDef, resolve, restore_arguments, tensors_in

# The verdict model is torch-free, in a module of its own (the table stands on it); here, where verdicts are made.
from .verdicts import CLEAN, CRASH_TRAP, FAULT, NOT_CHECKED, TRAPPED, UNDECIDED, UNSTABLE, Verdict


def cuda_initialised():
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def seed_everything(seed):
    torch.manual_seed(seed)  # every device's
    random.seed(seed)
    try:
        import numpy
        numpy.random.seed(seed % 2 ** 32)
    except ImportError:  # pragma: no cover
        pass


def generator_states():
    """What a draw from torch's (CPU, and CUDA where it is started), Python's or NumPy's generator changes."""
    states = [torch.get_rng_state(), *(torch.cuda.get_rng_state_all() if cuda_initialised() else ())]
    states = [bytes(s.numpy()) for s in states] + [random.getstate()]
    try:
        import numpy
        kind, keys, position, *_ = numpy.random.get_state()
        states.append((keys.tobytes(), position))
    except ImportError:  # pragma: no cover
        pass
    return states


def _text(report):
    """The report for a library's suite: each fix without the book's section (a stand-in report: as it prints)."""
    return report.text(book=False) if hasattr(report, "text") else str(report)


def check_once(op, job, args, kwargs, seed):
    """check_backward on one recorded call, with the generators seeded, as a Verdict; a usage error or the
    checker's own failure is 'not checked', never a raise. Also whether the op drew from the generators."""
    from .. import Sample, UsageError, check_backward
    from ..compile_backend import backend_from_environment, backend_from_text
    seed_everything(seed)
    seeded = generator_states()
    # Keywords past no_grad only where they say something: a check_backward stood in by a test need not take them.
    compile = backend_from_environment() if job.compile is None else backend_from_text(job.compile)
    optional = {"frozen_by_callers": job.frozen_by_callers, "compile": compile, "made_per_call": job.made_per_call}
    try:
        report = check_backward(op, Sample(*args, **kwargs), name=job.name, no_grad=job.no_grad,
                                **{key: value for key, value in optional.items() if value})
    except UsageError as error:
        return Verdict(NOT_CHECKED, f"not checked: {clip(error, 200)}", str(error)), False
    except Exception as error:  # noqa: BLE001  (the checker's own failure, which the table reports)
        return Verdict(NOT_CHECKED, f"not checked: the checker failed ({type(error).__name__}: {clip(error, 120)})",
                       f"{type(error).__name__}: {error}"), False
    drew = generator_states() != seeded  # the checker's own draws come from generators of its own
    if report.traps:
        return Verdict(TRAPPED, "TRAP " + "; ".join(report.traps), _text(report), tuple(report.traps),
                       report.seconds), drew
    if report.undecided:
        return Verdict(UNDECIDED, "undecided (no trap found, but not every check could decide)", _text(report),
                       seconds=report.seconds), drew
    return Verdict(CLEAN, "clean", _text(report), seconds=report.seconds), drew


def _in_brief(verdict):
    return "clean" if verdict.status == CLEAN else verdict.summary


def check_call(op, job, args, kwargs):
    """The check; and where it found a trap, and the op drew from the generators or ran on a GPU (whose atomic
    adds need not sum in the same order twice), the check again with the next seed: the first Verdict where
    both found the same traps, else an unstable one that shows both (it fails no test). Not again where every trap
    found is accepted: it fails nothing either way."""
    first, drew = check_once(op, job, args, kwargs, job.seed)
    on_gpu = any(t.is_cuda for t in tensors_in((args, kwargs)))
    if first.status != TRAPPED or not (drew or on_gpu) or set(first.traps) <= set(job.accepted):
        return first
    second, _ = check_once(op, job, args, kwargs, job.seed + 1)
    if set(second.traps) == set(first.traps):
        first.seconds += second.seconds
        return first
    return Verdict(UNSTABLE, f"UNSTABLE: {_in_brief(first)} with one seed, {_in_brief(second)} with another",
                   f"the op's random draws seeded with {job.seed}:\n{first.report or first.summary}\n\n"
                   f"seeded with {job.seed + 1}:\n{second.report or second.summary}",
                   seconds=first.seconds + second.seconds)


def cuda_contexts():
    """Whether this process made a CUDA context (None where this build of torch cannot tell): a check of an op that
    ran on the CPU alone made none, and has none to lose."""
    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    if has_context is None:
        return None
    return any(has_context(k) for k in range(torch.cuda.device_count()))


def cuda_poisoned(pauses=(0.5, 2.0)):
    """Whether this process's CUDA context is unusable after a check: a sticky error (an illegal memory access, a
    device-side assert) fails every later CUDA call, so a tiny one tells. A probe that finds the GPU out of memory
    (other processes of the suite hold it: 16 pytest-xdist workers on one card) tells nothing of the context, which
    that error does not poison: the probe is tried again after each pause, and memory that stays short is no loss.
    Poisoned, the probe's error in one line (True where it had no words); else False."""
    if not cuda_initialised() or cuda_contexts() is False:
        return False
    for pause in (*pauses, None):
        try:
            torch.cuda.synchronize()
            torch.ones(1, device="cuda").add_(1).item()
            return False
        except Exception as error:  # noqa: BLE001
            if "out of memory" not in str(error):
                return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}" if str(error).strip() else True
            if pause is not None:
                time.sleep(pause)
    return False


def as_fault(verdict, account):
    """A check after which the CUDA context is lost, as a fault: the report's line that names the call that
    faulted (the checker's crash finding), and account (whose context, and what now)."""
    lines = [line.strip() for line in verdict.report.splitlines()]
    named = next((line for line in lines if line.startswith("TRAP") and any(w in line for w in FAULT_WORDS)),
                 "a CUDA error, after the checker's calls")
    named = clip(re.sub(r"^TRAP\s+crashes:\s*", "", named).split("; the GPU context is lost")[0], 220)
    return Verdict(FAULT, f"FAULT {named}", f"{account}:\n{verdict.report}", (CRASH_TRAP,), verdict.seconds)


@contextlib.contextmanager
def rng_kept():
    """The random generators as they were: torch's (CPU, and CUDA where the suite started it), Python's, NumPy's."""
    devices = list(range(torch.cuda.device_count())) if cuda_initialised() else []
    python_state = random.getstate()
    try:
        import numpy
        numpy_state = numpy.random.get_state()
    except ImportError:  # pragma: no cover
        numpy = numpy_state = None
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(python_state)
            if numpy is not None:
                numpy.random.set_state(numpy_state)


def _log_to(log_path):
    """This process's output into a log of its own (the parent quotes its end after a fault), not into the
    suite's; a fault writes the Python stack it happened in there too. Returns the log."""
    log = open(log_path, "ab", buffering=0)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    faulthandler.enable(file=log)
    return log


def _announcing(connection):
    from .. import calling
    calling.LISTENERS.append(lambda what: connection.send(("call", what)))


def _checked(op, job):
    """The Verdict on job in this process; where the check lost the CUDA context, the fault (True: this process
    must leave)."""
    try:
        args, kwargs = restore_arguments(job.args, job.kwargs)
    except Exception as error:  # noqa: BLE001  (out of device memory, say: the worker's, not the op's)
        return Verdict(NOT_CHECKED, f"not checked: its arguments could not be put back on their device "
                                    f"({type(error).__name__}: {error})"), False
    verdict = check_call(op, job, args, kwargs)
    del args, kwargs
    lost = cuda_poisoned()
    if lost:
        probe = f" (a probe after the check: {lost})" if isinstance(lost, str) else ""
        return as_fault(verdict, f"the op lost the CUDA context of the process that checked it{probe}; the suite "
                                 f"went on with a fresh one"), True
    if cuda_initialised():
        torch.cuda.empty_cache()  # the GPU the suite shares, handed back between checks
    return verdict, False


# What torch imports at a process's first autograd.grad (its symbolic shapes, and sympy with them): 0.4 s on a CPU,
# which the worker's first check would pay, beside an op that takes a fraction of a millisecond.
TORCHS_LAZY_IMPORTS = ("torch.fx.experimental.symbolic_shapes",)


def import_what_torch_imports_late():
    """Imports TORCHS_LAZY_IMPORTS now, while the worker starts (which overlaps the suite's test: Worker.prestart),
    not in its first check. A release of torch without one of them goes on without it."""
    for module in TORCHS_LAZY_IMPORTS:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001  (torch imports it later, if at all)
            continue


def serve(connection, log_path):
    """The worker's loop: receive a recorded call, check it, send the Verdict; announce each call of the op."""
    _log_to(log_path)
    _announcing(connection)
    import_what_torch_imports_late()
    connection.send(("ready", None))
    while True:
        try:
            parcel = connection.recv()
            if parcel is not None and parcel[0] == "bytes":
                parcel = ("bytes", connection.recv_bytes())  # sent apart, not pickled again
        except (EOFError, OSError):  # the suite is gone
            return
        if parcel is None:
            return
        if _served(connection, parcel):
            return  # the check lost the CUDA context: the parent starts a fresh worker


def _served(connection, parcel):
    """One check, answered; True where it lost this process's CUDA context. The parcel's file is removed as soon as
    it is mapped (its pages stay while this process holds them, and no file outlives a suite killed mid-check), and
    the mapping goes with this function's frame, before the next check."""
    try:  # the op's module, and the classes of its arguments, imported here
        try:
            sent = unpacked(*parcel)
        finally:
            remove_parcel(parcel)
        _find_modules_as_the_suite_does(sent["path"], sent["cwd"])
        op = _imported(*sent["reference"])
    except Exception as error:  # noqa: BLE001
        connection.send(("cannot import", f"{type(error).__name__}: {error}"))
        return False
    verdict, lost = _checked(op, sent["job"])
    del sent
    connection.send(("done", verdict))
    return lost


def serve_one(connection, log_path, op, job):
    """A forked process's one check: the op and its arguments are the suite's own, inherited."""
    _log_to(log_path)
    torch.set_num_threads(1)  # the parent's OpenMP threads are not the child's: one thread cannot wait on them
    _announcing(connection)
    connection.send(("done", _checked(op, job)[0]))


# Set in a check process that sees one GPU of several (worker.gpu_for_worker): the suite's CUDA tensors, on whichever
# GPU the suite put them, are loaded onto this process's one.
ONE_GPU = "BACKWARD_CHECK_ONE_GPU"


def gpu_map():
    """torch.load's map_location in a check process that sees one GPU of several: every CUDA device to cuda:0 (the
    one it sees), CPU tensors left where they are; else None."""
    if os.environ.get(ONE_GPU) != "1":
        return None
    return {f"cuda:{k}": "cuda:0" for k in range(1, 64)}


def unpacked(kind, value):
    """parcel_of undone, in the worker: a file mapped (its tensors read from the pages the suite wrote; the mapping
    is private, so an op that writes into them changes nothing else), or bytes loaded."""
    if kind == "file":
        return torch.load(value, weights_only=False, mmap=True, map_location=gpu_map())
    return torch.load(io.BytesIO(value), weights_only=False, map_location=gpu_map())


def remove_parcel(parcel):
    if parcel is not None and parcel[0] == "file":
        with contextlib.suppress(OSError):
            os.remove(parcel[1])


def _find_modules_as_the_suite_does(path, cwd):
    """The suite's sys.path and working folder as they are now, not as they were when this process started: a worker
    started with the session, before collection, has not seen the folders pytest puts on sys.path as it collects (a
    test's rootdir, where its helper modules and their Functions are)."""
    if sys.path != path:
        sys.path[:] = path
        importlib.invalidate_caches()  # folders whose files appeared since this process last looked
    with contextlib.suppress(OSError):
        if cwd is not None and os.getcwd() != cwd:
            os.chdir(cwd)


def _working_folder():
    try:
        return os.getcwd()
    except OSError:  # removed under the suite's feet
        return None


def _imported(module, qualname):
    found = resolve(module, qualname, {module: importlib.import_module(module)})
    if (not (isinstance(found, type) and issubclass(found, torch.autograd.Function))
            and not (CustomOpDef is not None and isinstance(found, CustomOpDef))):
        raise TypeError(f"{module}.{qualname} is a {type(found).__name__} here, not the op")
    return found


@contextlib.contextmanager
def environment_while_starting(defaults=None, **values):
    """os.environ while a process starts (it copies the environment then), then as it was: values set over what it
    held, and defaults ({name: value}) set only where it holds nothing (the user's own choice stands)."""
    chosen = {**{k: v for k, v in (defaults or {}).items() if k not in os.environ}, **values}
    before = {k: os.environ.get(k) for k in chosen}
    os.environ.update(chosen)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
