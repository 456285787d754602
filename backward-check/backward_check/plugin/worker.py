"""Where the pytest plugin's checks run: in a worker process of their own (multiprocessing, "spawn"), so that an
op whose fault kills its process (a segfault, an abort) or poisons its CUDA context (an illegal memory access)
takes down the worker, never the test suite. The worker is sent the op as an importable reference (module and
qualname) and the recorded arguments in a file torch.save wrote (in shared memory where the machine has it), which
it maps rather than copies; it tells the parent each call the checker is about to
make of the op (calling.LISTENERS), so a death is reported as the op's fault in the call that provoked it. A fresh
worker is started after a fault.

An op the worker cannot import (one defined inside a test function), or an argument it cannot be sent (pickle
refuses a lambda, an odict_keys), is checked in a process forked from the suite's for that one check, where the
suite's process holds no CUDA context (a forked child cannot use its parent's) and the platform forks; else, on the
CPU, in the suite's own process, and with CUDA, not at all: each with a note saying why.

Each check seeds torch's, Python's and NumPy's generators from the op and its signature, so that an op that draws
from them (a random start) is checked alike in every run; a check that finds a trap is run again with another
seed, and where the second run finds other traps, or none, the verdict is 'unstable', with both; not where every
trap it found is one the accepted file accepts for the op (a finding that fails nothing is not worth a second check).
"""
import contextlib
import dataclasses
import faulthandler
import importlib
import io
import multiprocessing
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import zlib

import torch

from ..calling import clip
from ..checks.context import FAULT_WORDS
from .recording import CustomOpDef, importable_reference, resolve, restore_arguments, tensors_in

# The verdict model is torch-free, in a module of its own (the table stands on it); here, where verdicts are made.
from .verdicts import CLEAN, CRASH_TRAP, FAULT, NOT_CHECKED, TRAPPED, UNDECIDED, UNSTABLE, Verdict


@dataclasses.dataclass
class Job:
    """What one check needs besides the op, in whichever process runs it: the copies of the call's arguments, the
    floating-point tensors it passed frozen, those the suite's calls of the op ever passed frozen, the seed, and the
    traps the accepted file accepts for the op."""
    name: str
    args: tuple
    kwargs: dict
    no_grad: tuple
    frozen_by_callers: tuple
    seed: int
    accepted: tuple = ()
    made_per_call: bool = False   # a class the suite made afresh for each call (check_backward's made_per_call)
    compile: str = None           # --backward-check-compile's value (None: as ENVIRONMENT says, unset: off)


def seed_of(name, signature):
    """The seed of every check of this op and signature: the same in every run and every process."""
    return zlib.crc32(f"{name} {signature!r}".encode())


def job_of(call, frozen_by_callers, accepted=(), made_per_call=False, compile=None):
    frozen = tuple(sorted((p for p in frozen_by_callers if p in call.places), key=str))
    return Job(call.name, call.args, call.kwargs, call.no_grad, frozen, seed_of(call.name, call.signature),
               tuple(sorted(accepted)), made_per_call, compile)


# -- one check, in whichever process runs it --------------------------------------------------------

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


def cuda_poisoned():
    """Whether this process's CUDA context is unusable after a check: a sticky error (an illegal memory access, a
    device-side assert) fails every later CUDA call, so a tiny one tells."""
    if not cuda_initialised():
        return False
    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
    except Exception:  # noqa: BLE001
        return True
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


def check_here(call, job, recorder):
    """The check in this process (the suite's): its generators kept, the recorder quiet, its memory freed."""
    recorder.quiet += 1
    start = time.perf_counter()
    try:
        with rng_kept():
            verdict = check_call(call.op, job, *restore_arguments(job.args, job.kwargs))
    finally:
        recorder.quiet -= 1
    verdict.seconds = time.perf_counter() - start
    if cuda_poisoned():
        verdict = as_fault(verdict, "the op lost the CUDA context of the suite's own process, so later tests "
                                    "that use the GPU fail too")
    elif cuda_initialised():
        torch.cuda.empty_cache()  # what the checker allocated, handed back
    return verdict


def can_fork():
    """Whether a check can run in a process forked from this one: a platform that forks safely (not macOS, whose
    system libraries do not survive a fork), and no CUDA context here (a forked child cannot use it)."""
    return "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin" and not cuda_initialised()


def check_protected(worker, call, job, recorder):
    """The Verdict on call from the worker process; where the worker cannot take it, from a process forked for it;
    else from the suite's process where no CUDA context is at risk, or none; each with a note saying why."""
    verdict, why = worker.check(call, job)
    if verdict is not None:
        return verdict
    if can_fork():
        verdict = ForkedCheck(worker.timeout).check(call.op, job)
        verdict.note = f"checked in a process forked from the suite's: {why}"
    elif not cuda_initialised():
        verdict = check_here(call, job, recorder)
        verdict.note = f"checked in the suite's own process: {why}, and this platform cannot fork a process for it"
    else:
        verdict = Verdict(NOT_CHECKED, f"not checked: {why}, and a process forked from the suite's cannot use its "
                                       f"CUDA context, while a check in the suite's own process could lose it")
    return verdict


# -- the worker's side ---------------------------------------------------------------------------------

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
    if cuda_poisoned():
        return as_fault(verdict, "the op lost the CUDA context of the process that checked it; the suite went on "
                                 "with a fresh one"), True
    if cuda_initialised():
        torch.cuda.empty_cache()  # the GPU the suite shares, handed back between checks
    return verdict, False


def serve(connection, log_path):
    """The worker's loop: receive a recorded call, check it, send the Verdict; announce each call of the op."""
    _log_to(log_path)
    _announcing(connection)
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


def parcel_of(sent, nbytes):
    """What the worker is sent of a check (sent: torch.save's to take; nbytes: about what its tensors hold): ("file",
    the path of a file torch.save wrote it to), which the worker maps instead of receiving its bytes through the pipe
    and copying them again (a second or more for the half GiB of a large loss's logits), in the machine's shared
    memory where it has room; else ("bytes", what torch.save wrote). Raises what torch.save raises of an argument
    pickle refuses, and leaves no file behind whatever stops it (Ctrl-C included)."""
    for folder in _folders_for_parcels(nbytes):
        try:
            handle, path = tempfile.mkstemp(prefix="backward-check-call-", suffix=".pt", dir=folder)
        except OSError:
            continue
        try:
            with os.fdopen(handle, "wb") as out:
                torch.save(sent, out)
            return "file", path
        except Exception:  # noqa: BLE001  (a full disk, or pickle's refusal: the bytes below tell which)
            remove_parcel(("file", path))
            break
        except BaseException:  # interrupted while writing
            remove_parcel(("file", path))
            raise
    buffer = io.BytesIO()
    torch.save(sent, buffer)
    return "bytes", buffer.getvalue()


# A parcel goes to a folder only where it takes at most this share of the room left there: a container's /dev/shm is
# often 64 MiB, which the suite's own DataLoader workers need too, and each pytest-xdist process writes its own.
PARCEL_SHARE_OF_FREE = 1 / 8


def _folders_for_parcels(nbytes):
    """Where a parcel of about nbytes may be written: shared memory (/dev/shm, no disk behind it), then the temporary
    folder, each where it takes at most PARCEL_SHARE_OF_FREE of the room left; none where the platform cannot remove
    a file another process maps (Windows)."""
    if os.name != "posix":
        return []
    folders = [folder for folder in dict.fromkeys(("/dev/shm", tempfile.gettempdir())) if os.path.isdir(folder)]
    fits = []
    for folder in folders:
        with contextlib.suppress(OSError):
            if os.access(folder, os.W_OK) and nbytes + 2 ** 20 <= PARCEL_SHARE_OF_FREE * shutil.disk_usage(folder).free:
                fits.append(folder)
    return fits


def unpacked(kind, value):
    """parcel_of undone, in the worker: a file mapped (its tensors read from the pages the suite wrote; the mapping
    is private, so an op that writes into them changes nothing else), or bytes loaded."""
    if kind == "file":
        return torch.load(value, weights_only=False, mmap=True)
    return torch.load(io.BytesIO(value), weights_only=False)


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
    if not (isinstance(found, type) and issubclass(found, torch.autograd.Function)) and \
            not (CustomOpDef is not None and isinstance(found, CustomOpDef)):
        raise TypeError(f"{module}.{qualname} is a {type(found).__name__} here, not the op")
    return found


# -- the suite's side ----------------------------------------------------------------------------------

@contextlib.contextmanager
def _environment(**values):
    """os.environ with values set where unset, while a process starts (it copies the environment then)."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def how_it_died(exitcode):
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def in_the_call(calls):
    """The last call the checker announced, in the report's words; its backward where it was announced twice in a
    row (a check announces the forward, then the backward of the same call)."""
    if not calls:
        return "before the checker's first call of the op (while importing it, or loading its arguments)"
    last = calls[-1]
    where = ", in its backward" if len(calls) > 1 and calls[-2] == last else ""
    return f"in the call: {last}{where}"


def fault_excerpt(log):
    """What the worker's log says of a fault: faulthandler's account with the frames of the op's own code (not
    torch's, the checker's or Python's), or else its last lines."""
    start = log.rfind("Fatal Python error")
    if start < 0:
        return "\n".join(log.splitlines()[-15:])
    machinery = [os.path.dirname(os.path.dirname(torch.__file__)), os.path.dirname(__file__),
                 os.path.dirname(os.__file__)]
    kept = []
    for line in log[start:].splitlines():
        if line.startswith("Extension modules"):
            break
        frame = line.strip().startswith("File ")
        if line.strip() and (not frame or not any(f'"{m}' in line for m in machinery) and '"<string>"' not in line):
            kept.append(line)
    return "\n".join(kept)


class CheckProcess:
    """A process that checks calls for the suite, and what the suite sees of it: its answers, its log, its death.
    timeout: seconds a check may take before it counts as hung."""

    def __init__(self, timeout):
        self.timeout = timeout
        self.process = self.connection = self.log_path = None
        self.restarts = 0           # after a fault

    def _launch(self, context, target, *args):
        """Starts target(connection, log path, *args) in a process of context's start method."""
        self.connection, child = context.Pipe()
        handle, self.log_path = tempfile.mkstemp(prefix="backward-check-worker-", suffix=".log")
        os.close(handle)
        self.process = context.Process(target=target, args=(child, self.log_path, *args),
                                       name="backward-check worker", daemon=True)
        # Each kernel launch waits for its kernel, so a CUDA fault surfaces at the call that caused it; without a
        # GPU, the op's Triton kernels run in the interpreter, which the suite's process need not have switched on.
        from ..backend import DEVICE
        interpreter = {"TRITON_INTERPRET": "1"} if DEVICE.type == "cpu" else {}
        with _environment(CUDA_LAUNCH_BLOCKING="1", **interpreter):
            self.process.start()
        child.close()

    def _log_tail(self, lines=25):
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 8192))
                text = log.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _forget(self):
        if self.connection is not None:
            self.connection.close()
        if self.log_path is not None:
            with contextlib.suppress(OSError):
                os.remove(self.log_path)
        self.process = self.connection = self.log_path = None

    def _lost(self):
        """The process after a fault: gone, so the next check starts a fresh one; its exit code."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        exitcode = self.process.exitcode
        self._forget()
        self.restarts += 1
        return exitcode

    def _fault(self, summary, account, seconds):
        tail = fault_excerpt(self._log_tail(200))
        self._lost()
        report = account + (f"\nthe worker's last output:\n{tail}" if tail else "")
        return Verdict(FAULT, f"FAULT {summary}", report, (CRASH_TRAP,), seconds)

    def _answer(self, start):
        """(the Verdict the process sends, None), or (None, why) where it cannot import the op; a death or a hang
        is the op's fault, in the last call it announced."""
        calls = []
        try:
            while True:
                left = self.timeout - (time.perf_counter() - start)
                if left <= 0:
                    return self._fault(f"no answer after {self.timeout:.0f} s {in_the_call(calls)}",
                                       f"the check ran past --backward-check-timeout ({self.timeout:.0f} s), "
                                       f"{in_the_call(calls)}", time.perf_counter() - start), None
                if not self.connection.poll(min(left, 1.0)):
                    continue
                kind, value = self.connection.recv()
                if kind == "call":
                    calls.append(value)
                elif kind == "cannot import":
                    return None, f"a worker process cannot import it ({value})"
                else:
                    if value.status == FAULT:  # a poisoned CUDA context: the process has left
                        self._lost()
                    value.seconds = time.perf_counter() - start
                    return value, None
        except (EOFError, OSError, ConnectionError):
            self.process.join(5)
            died = how_it_died(self.process.exitcode)
            return self._fault(f"the op's process was {died} {in_the_call(calls)}",
                               f"the process that checked it was {died} {in_the_call(calls)}; the suite went on",
                               time.perf_counter() - start), None


class ForkedCheck(CheckProcess):
    """One check in a process forked from the suite's, for an op or arguments a worker cannot be sent."""

    def check(self, op, job):
        start = time.perf_counter()
        self._launch(multiprocessing.get_context("fork"), serve_one, op, job)
        verdict, _ = self._answer(start)
        if self.process is not None:
            self.process.join(5)
            self._forget()
        return verdict


def unpicklable(call):
    """Which of the call's arguments pickle refuses, in words (or the whole call's error, where each alone
    pickles)."""
    for place, value in [*enumerate(call.args), *call.kwargs.items()]:
        try:
            torch.save(value, io.BytesIO())
        except Exception as error:  # noqa: BLE001
            return (f"its argument {place} (a {type(value).__name__}) cannot be sent to a worker process: pickle "
                    f"refuses it ({type(error).__name__}: {clip(error, 100)})")
    return "its arguments cannot be sent to a worker process"


class Worker(CheckProcess):
    """The worker process, started when first needed (or early: prestart) and again after a fault."""
    STARTUP_S = 300.0  # importing torch (and CUDA's start) on a loaded machine

    def __init__(self, timeout):
        super().__init__(timeout)
        self.starts = 0
        self.startup_seconds = 0.0  # what the suite waited for the worker to be ready
        self.cannot_start = None    # why the worker process could not start, once it could not
        self.ready = False

    def _launch_worker(self):
        self._launch(multiprocessing.get_context("spawn"), serve)
        self.starts += 1
        self.ready = False

    def prestart(self):
        """Starts the worker process without waiting for it (the suite has just recorded its first call: a check
        is coming), so that its start (importing torch, seconds) overlaps the test instead of delaying the check;
        the first check waits for what is left of it."""
        if self.process is None and not self.cannot_start:
            try:
                self._launch_worker()
            except Exception:  # noqa: BLE001  (tried again, and said why, at the first check)
                self._forget()

    def _start(self):
        start = time.perf_counter()
        if self.process is None:
            self._launch_worker()
        try:
            if not self.connection.poll(self.STARTUP_S):
                raise TimeoutError
            self.connection.recv()  # ("ready", None)
            self.ready = True
        except (EOFError, OSError, TimeoutError):
            tail = self._log_tail()
            self._lost()
            raise WorkerFailed(f"the worker process did not start{': ' + clip(tail, 200) if tail else ''}") from None
        finally:
            self.startup_seconds += time.perf_counter() - start

    def stop(self):
        if self.process is None:
            return
        with contextlib.suppress(Exception):
            self.connection.send(None)
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self._forget()

    def check(self, call, job):
        """(the Verdict on call from the worker process, None); or (None, why) where the worker cannot take it."""
        reference, why = importable_reference(call.op)
        if reference is None:
            return None, f"{why}, so a worker process cannot import it"
        if self.cannot_start or self._started():
            return None, self.cannot_start
        try:  # written once the worker is ready, so no parcel waits for its start
            parcel = parcel_of({"reference": reference, "job": job, "path": list(sys.path), "cwd": _working_folder()},
                               call.nbytes)
        except Exception:  # noqa: BLE001  (an argument pickle refuses: a lambda, a lock, an open file)
            return None, unpicklable(call)
        start = time.perf_counter()
        try:
            try:
                self._send(parcel)
            except (OSError, ConnectionError):
                return self._fault("the worker process died as the check was sent", "the worker process died as "
                                   "the check was sent; the suite went on", 0.0), None
            return self._answer(start)
        except BaseException:  # interrupted (Ctrl-C, a test's timeout): its answer must not be read as the next
            self._abandon()
            raise
        finally:
            remove_parcel(parcel)

    def _started(self):
        """Starts the worker process where it is not running and ready; True where it cannot start (cannot_start
        says why)."""
        if self.process is not None and not self.process.is_alive():
            if self.ready:
                self._lost()  # it died between checks, of nothing this op did
            else:
                self._forget()  # it died while starting early: started again below, where a failure says why
        if self.process is None or not self.ready:
            try:
                self._start()
            except WorkerFailed as error:
                self.cannot_start = str(error)  # so every later check goes straight to the fallback
                return True
        return False

    def _send(self, parcel):
        kind, value = parcel
        if kind == "bytes":  # the bytes apart, not pickled again inside the message
            self.connection.send((kind, None))
            self.connection.send_bytes(value)
        else:
            self.connection.send(parcel)

    def _abandon(self):
        """The process stopped without an answer read, not counted as a fault: the next check starts a fresh one."""
        if self.process is not None:
            with contextlib.suppress(Exception):
                self.process.kill()
                self.process.join(5)
            self._forget()


class WorkerFailed(Exception):
    """The worker process could not start (the checks then run in a forked process, or in the suite's)."""
