"""Where the pytest plugin's checks run: in a worker process of their own (multiprocessing, "spawn"), so that an
op whose fault kills its process (a segfault, an abort) or poisons its CUDA context (an illegal memory access)
takes down the worker, never the test suite. The worker is sent the op as an importable reference (module and
qualname) and the recorded arguments as torch.save bytes; it tells the parent each call the checker is about to
make of the op (calling.LISTENERS), so a death is reported as the op's fault in the call that provoked it. A fresh
worker is started after a fault. An op the worker cannot import (one defined inside a test function) is checked in
the suite's own process, with a note saying so.
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
import signal
import tempfile
import time

import torch

from .calling import clip
from .context import FAULT_WORDS
from .recording import CustomOpDef, importable_reference, resolve, restore_value

CLEAN, TRAPS, UNDECIDED, NOT_CHECKED, FAULT = "clean", "traps", "undecided", "not checked", "fault"
CRASHES = "crashes"  # the trap a fault counts as, for the accepted file


@dataclasses.dataclass
class Verdict:
    """What checking one recorded call found, in words the table prints."""
    status: str               # CLEAN, TRAPS, UNDECIDED, NOT_CHECKED or FAULT
    summary: str              # one line: the verdict as the table shows it
    report: str = ""          # the checker's report, or the account of the fault
    traps: tuple = ()         # trap names (a fault counts as "crashes")
    seconds: float = 0.0
    note: str = ""            # how it was checked, where that is worth saying


# -- one check, in whichever process runs it --------------------------------------------------------

def check_call(op, name, args, kwargs, no_grad):
    """check_backward on one recorded call, as a Verdict; a usage error or the checker's own failure is 'not
    checked', never a raise."""
    from . import Sample, UsageError, check_backward
    from .compiled import backend_from_environment
    try:
        report = check_backward(op, Sample(*args, **kwargs), name=name, no_grad=no_grad,
                                compile=backend_from_environment())
    except UsageError as error:
        return Verdict(NOT_CHECKED, f"not checked: {clip(error, 200)}", str(error))
    except Exception as error:  # noqa: BLE001  (the checker's own failure, which the table reports)
        return Verdict(NOT_CHECKED, f"not checked: the checker failed ({type(error).__name__}: {clip(error, 120)})",
                       f"{type(error).__name__}: {error}")
    if report.traps:
        return Verdict(TRAPS, "TRAP " + "; ".join(report.traps), str(report), tuple(report.traps), report.seconds)
    if report.undecided:
        return Verdict(UNDECIDED, "undecided (no trap found, but not every check could decide)", str(report),
                       seconds=report.seconds)
    return Verdict(CLEAN, "clean", str(report), seconds=report.seconds)


def cuda_poisoned():
    """Whether this process's CUDA context is unusable after a check: a sticky error (an illegal memory access, a
    device-side assert) fails every later CUDA call, so a tiny one tells."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
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
    return Verdict(FAULT, f"FAULT {named}", f"{account}:\n{verdict.report}", (CRASHES,), verdict.seconds)


@contextlib.contextmanager
def rng_kept():
    """The random generators as they were: torch's (CPU, and CUDA where the suite started it), Python's, NumPy's."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    devices = list(range(torch.cuda.device_count())) if cuda else []
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


def check_here(call, why, recorder):
    """The check in this process (the suite's): its generators kept, the recorder quiet, its memory freed."""
    recorder.quiet += 1
    start = time.perf_counter()
    try:
        with rng_kept():
            verdict = check_call(call.op, call.name, restore_value(call.args), restore_value(call.kwargs),
                                 call.no_grad)
    finally:
        recorder.quiet -= 1
    verdict.seconds = time.perf_counter() - start
    if cuda_poisoned():
        verdict = as_fault(verdict, "the op lost the CUDA context of the suite's own process, so later tests "
                                    "that use the GPU fail too")
    elif torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()  # what the checker allocated, handed back
    verdict.note = f"checked in the suite's process: {why}"
    return verdict


# -- the worker's side ---------------------------------------------------------------------------------

def serve(connection, log_path):
    """The worker's loop: receive a recorded call, check it, send the Verdict; announce each call of the op. Its
    output goes to a log of its own (the parent quotes its end after a fault), not into the suite's."""
    log = open(log_path, "ab", buffering=0)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    faulthandler.enable(file=log)  # a fault writes the Python stack it happened in to the log
    from . import calling
    calling.LISTENERS.append(lambda what: connection.send(("call", what)))
    connection.send(("ready", None))
    while True:
        try:
            payload = connection.recv_bytes()
        except (EOFError, OSError):  # the suite is gone
            return
        if not payload:
            return
        try:  # the op's module, and the classes of its arguments, imported here
            job = torch.load(io.BytesIO(payload), weights_only=False)
            op = _imported(*job["reference"])
        except Exception as error:  # noqa: BLE001
            connection.send(("cannot import", f"{type(error).__name__}: {error}"))
            continue
        try:
            args, kwargs = restore_value(job["args"]), restore_value(job["kwargs"])
        except Exception as error:  # noqa: BLE001  (out of device memory, say: the worker's, not the op's)
            connection.send(("done", Verdict(NOT_CHECKED, f"not checked: its arguments could not be put back on "
                                                          f"their device ({type(error).__name__}: {error})")))
            continue
        verdict = check_call(op, job["name"], args, kwargs, job["no_grad"])
        del args, kwargs
        bad = cuda_poisoned()
        if bad:
            verdict = as_fault(verdict, "the op lost the worker's CUDA context; the suite went on with a "
                                        "fresh worker")
        connection.send(("done", verdict))
        if bad:
            return  # the parent starts a fresh worker
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()  # the GPU the suite shares, handed back between checks


def _imported(module, qualname):
    found = resolve(module, qualname, {module: importlib.import_module(module)})
    if not (isinstance(found, type) and issubclass(found, torch.autograd.Function)) and \
            not (CustomOpDef is not None and isinstance(found, CustomOpDef)):
        raise TypeError(f"{module}.{qualname} is a {type(found).__name__} here, not the op")
    return found


# -- the suite's side ----------------------------------------------------------------------------------

@contextlib.contextmanager
def _environment(**values):
    """os.environ with values set where unset, while a worker starts (it copies the environment then)."""
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


class Worker:
    """The worker process, started when first needed and again after a fault; timeout: seconds a check may take."""
    STARTUP_S = 300.0  # importing torch (and CUDA's start) on a loaded machine

    def __init__(self, timeout):
        self.timeout = timeout
        self.process = self.connection = self.log_path = None
        self.starts = 0
        self.restarts = 0           # after a fault
        self.startup_seconds = 0.0
        self.cannot_start = None    # why the worker process could not start, once it could not

    def _start(self):
        start = time.perf_counter()
        context = multiprocessing.get_context("spawn")
        self.connection, child = context.Pipe()
        handle, self.log_path = tempfile.mkstemp(prefix="backward-check-worker-", suffix=".log")
        os.close(handle)
        self.process = context.Process(target=serve, args=(child, self.log_path), name="backward-check worker",
                                       daemon=True)
        # Each kernel launch waits for its kernel, so a CUDA fault surfaces at the call that caused it.
        with _environment(CUDA_LAUNCH_BLOCKING="1"):
            self.process.start()
        child.close()
        self.starts += 1
        try:
            if not self.connection.poll(self.STARTUP_S):
                raise TimeoutError
            self.connection.recv()  # ("ready", None)
        except (EOFError, OSError, TimeoutError):
            tail = self._log_tail()
            self._lost()
            raise WorkerFailed(f"the worker process did not start{': ' + clip(tail, 200) if tail else ''}") from None
        finally:
            self.startup_seconds += time.perf_counter() - start

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

    def stop(self):
        if self.process is None:
            return
        with contextlib.suppress(Exception):
            self.connection.send_bytes(b"")
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self._forget()

    def _lost(self):
        """The worker after a fault: gone, so the next check starts a fresh one; its exit code."""
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
        return Verdict(FAULT, f"FAULT {summary}", report, (CRASHES,), seconds)

    def check(self, call):
        """(the Verdict on call from a worker process, None); or (None, why) where the worker cannot take the op."""
        reference, why = importable_reference(call.op)
        if reference is None:
            return None, f"{why}, so a worker process cannot import it"
        buffer = io.BytesIO()
        try:
            torch.save({"reference": reference, "name": call.name, "args": call.args, "kwargs": call.kwargs,
                        "no_grad": call.no_grad}, buffer)
        except Exception as error:  # noqa: BLE001  (an argument pickle refuses: a lambda, a lock, an open file)
            return None, f"its arguments cannot be sent to a worker process ({type(error).__name__}: {error})"
        if self.cannot_start:
            return None, self.cannot_start
        if self.process is None:
            try:
                self._start()
            except WorkerFailed as error:
                self.cannot_start = str(error)  # so every later check goes straight to the suite's process
                return None, self.cannot_start
        start = time.perf_counter()
        calls = []
        try:
            self.connection.send_bytes(buffer.getvalue())
            del buffer
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
                    if value.status == FAULT:  # a poisoned CUDA context: the worker has left
                        self._lost()
                    value.seconds = time.perf_counter() - start
                    return value, None
        except (EOFError, OSError, ConnectionError):
            self.process.join(5)
            died = how_it_died(self.process.exitcode)
            return self._fault(f"the op's process was {died} {in_the_call(calls)}",
                               f"the worker process that checked it was {died} {in_the_call(calls)}; the suite "
                               f"went on with a fresh worker", time.perf_counter() - start), None


class WorkerFailed(Exception):
    """The worker process could not start (the checks then run in the suite's process)."""
