"""Where the pytest plugin's checks run: in a worker process of their own (multiprocessing, "spawn"), so that an
op whose fault kills its process (a segfault, an abort) or poisons its CUDA context (an illegal memory access)
takes down the worker, never the test suite. The worker is sent the op as an importable reference (module and
qualname) and the recorded arguments in a file torch.save wrote (in shared memory where the machine has it), which
it maps rather than copies; it tells the parent each call the checker is about to
make of the op (calling.LISTENERS), so a death is reported as the op's fault in the call that provoked it. A fresh
worker is started after a fault. This module is the parent's side, the handle; child.py is what runs in the
worker.

An op the worker cannot import (one defined inside a test function), or an argument it cannot be sent (pickle
refuses a lambda, an odict_keys), is checked in a process forked from the suite's for that one check, where the
suite's process holds no CUDA context (a forked child cannot use its parent's) and the platform forks; else, on the
CPU, in the suite's own process, and with CUDA, not at all: each with a note saying why.

Each check seeds torch's, Python's and NumPy's generators from the op and its signature, so that an op that draws
from them (a random start) is checked alike in every run; a check that finds a trap is run again with another
seed, and where the second run finds other traps, or none, the verdict is 'unstable', with both; not where every
trap it found is one the accepted file accepts for the op (a finding that fails nothing is not worth a second check).

Under pytest-xdist on a machine with several GPUs, each xdist worker's check process sees one GPU, its own (worker
gwN takes the N-th visible GPU, round-robin: gpu_for_worker), so that N workers' checks spread over the GPUs rather
than all landing on the first; the child loads the recorded CUDA tensors onto that GPU.
"""
import contextlib
import dataclasses
import io
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
import zlib

import torch

from ..calling import clip
# The child's side of the process boundary: what runs in the worker process (and in a forked check).
from .child import (ONE_GPU, _working_folder, environment_while_starting, as_fault, check_call, cuda_initialised,
                    cuda_poisoned, remove_parcel, rng_kept, serve, serve_one)
from .recording import importable_reference, restore_arguments

# The verdict model is torch-free, in a module of its own (the table stands on it).
from .verdicts import CRASH_TRAP, FAULT, NOT_CHECKED, Verdict


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


def visible_gpus():
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (their indices where it is unset)."""
    names = os.environ.get("CUDA_VISIBLE_DEVICES")
    if names is not None:
        return [n.strip() for n in names.split(",") if n.strip()]
    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def gpu_for_worker(worker_id, visible):
    """The GPU (one of visible, CUDA_VISIBLE_DEVICES's names) that pytest-xdist worker worker_id's checks run on:
    gwN takes visible[N % len(visible)]. None outside pytest-xdist, with fewer than two GPUs, or for a worker id
    that is not gwN: the check process then sees what the suite sees."""
    number = (worker_id or "").removeprefix("gw")
    if len(visible) < 2 or not number.isdigit():
        return None
    return visible[int(number) % len(visible)]


def own_gpu_environment(device_type, worker_id):
    """What the check process's environment sets for it to see its xdist worker's GPU alone (gpu_for_worker), and to
    load the suite's CUDA tensors onto it (child.gpu_map): nothing on the CPU, outside xdist, or with one GPU."""
    gpu = gpu_for_worker(worker_id, visible_gpus()) if device_type == "cuda" else None
    return {"CUDA_VISIBLE_DEVICES": gpu, ONE_GPU: "1"} if gpu is not None else {}


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
        own_gpu = own_gpu_environment(DEVICE.type, os.environ.get("PYTEST_XDIST_WORKER"))
        with environment_while_starting({"CUDA_LAUNCH_BLOCKING": "1", **interpreter}, **own_gpu):
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
