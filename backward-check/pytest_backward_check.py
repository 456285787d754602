"""pytest --backward-check: the checker inside a library's own test suite, with no new test code.

While the suite's tests run, every call of a torch.autograd.Function's .apply, and of a torch.library custom op
with a registered autograd, that gets an input which requires grad is recorded (copies of its arguments, made
before the forward runs); after each test, each new signature of each op (up to --backward-check-limit per op)
is checked with check_backward against finite differences, in a worker process (backward_check/worker.py), and the
session ends with a table of what was found. Off unless asked:

    pytest --backward-check                  # report: a table at the end, no test fails for it
    pytest --backward-check=fail             # a trap fails the test that made the call
    pytest --backward-check=fail --backward-check-accepted accepted.json   # traps known and kept, by op
    pytest --backward-check --backward-check-accepted accepted.json --backward-check-accept   # rewrite it

Installed with the package (a pytest11 entry point); in a checkout, with backward-check/ on PYTHONPATH:
`pytest -p pytest_backward_check`. pytest imports this module in every run where the package is installed, so it
is a module of its own, outside the package: it imports neither torch nor backward_check until the option is given
(the package chooses, as it is imported, the GPU or Triton's interpreter, and the suite may not want either yet).
"""
import dataclasses
import difflib
import json
import os
import time
from pathlib import Path

import pytest

MODES = ("report", "fail")
SPELLINGS_OF_ON = ("1", "true", "yes", "y", "on")


def pytest_addoption(parser):
    group = parser.getgroup("backward-check", "backward-check: check the backward of every autograd.Function and "
                                              "custom op the tests call")
    group.addoption("--backward-check", dest="backward_check", nargs="?", const="report", default=None,
                    metavar="report|fail",
                    help="record each call of an autograd.Function or custom op whose input requires grad, check each "
                         "new signature after its test, and print a table at the end; =fail also fails the test that "
                         "made a call with a trap (default: report)")
    group.addoption("--backward-check-limit", dest="backward_check_limit", type=int, default=2, metavar="N",
                    help="signatures (dtypes, ranks, layouts) checked per op (default: 2)")
    group.addoption("--backward-check-accepted", dest="backward_check_accepted", default=None, metavar="PATH",
                    help='a JSON file of traps known and kept, by op: {"mylib::gelu": ["trap name", ...]}; they are '
                         "shown, and fail no test")
    group.addoption("--backward-check-accept", dest="backward_check_accept", action="store_true",
                    help="rewrite the --backward-check-accepted file from this run's findings (or set "
                         "BACKWARD_CHECK_ACCEPT=1); turns --backward-check on")
    group.addoption("--backward-check-timeout", dest="backward_check_timeout", type=float, default=600.0,
                    metavar="SECONDS", help="seconds one op's check may take before it counts as hung (default: 600)")
    group.addoption("--backward-check-compile", dest="backward_check_compile", nargs="?", const="default",
                    default=None, metavar="BACKEND",
                    help="with --backward-check, also check each op under torch.compile against itself eagerly (and "
                         "custom ops through opcheck): inductor where a compiler exists, else aot_eager, or the "
                         "backend named; seconds to a minute an op")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """`pytest --backward-check tests/` means report mode on tests/, not a mode called tests/ (the option's value is
    optional, so argparse would take the next word for it)."""
    for i, arg in enumerate(args[:-1]):
        following = args[i + 1]
        if arg == "--backward-check" and following not in MODES and not following.startswith("-"):
            args[i] = "--backward-check=report"
            early = early_config.known_args_namespace
            if getattr(early, "backward_check", None) == following:  # the early parse took it too: give it back
                early.backward_check = "report"
                early.file_or_dir = [*getattr(early, "file_or_dir", []), following]


@dataclasses.dataclass(frozen=True)
class Options:
    mode: str             # "report" or "fail"
    limit: int
    timeout: float
    accepted_path: Path   # None: no accepted file
    accepting: bool       # rewrite the accepted file from this run's findings


def options_of(config):
    """The plugin's options, checked (None where the plugin is off); pytest.UsageError names what is wrong."""
    option = config.option
    mode = option.backward_check
    accepting = option.backward_check_accept
    if mode is None and not accepting:
        return None
    mode = mode or "report"
    if mode not in MODES:
        raise pytest.UsageError(f"--backward-check takes report or fail (written --backward-check=fail), not {mode!r}")
    accepting = accepting or os.environ.get("BACKWARD_CHECK_ACCEPT", "").lower() in SPELLINGS_OF_ON
    if option.backward_check_limit < 1:
        raise pytest.UsageError(f"--backward-check-limit takes a number of signatures per op, 1 or more, not "
                                f"{option.backward_check_limit}")
    if not option.backward_check_timeout > 0:
        raise pytest.UsageError(f"--backward-check-timeout takes seconds, more than 0, not "
                                f"{option.backward_check_timeout:g}")
    path = option.backward_check_accepted
    if accepting and path is None:
        raise pytest.UsageError("--backward-check-accept (or BACKWARD_CHECK_ACCEPT=1) rewrites the file that "
                                "--backward-check-accepted names: name one, e.g. --backward-check-accepted "
                                "backward_check_accepted.json")
    path = None if path is None else Path(path)
    if path is not None and not path.is_absolute():
        path = Path(config.invocation_params.dir) / path
    return Options(mode, option.backward_check_limit, option.backward_check_timeout, path, accepting)


def read_accepted(path, accepting):
    """{op name: [trap names]} from the accepted file; a missing file is empty where this run will write it."""
    from backward_check.report import TRAPS
    if path is None:
        return {}
    if not path.exists():
        if accepting:
            return {}
        raise pytest.UsageError(f"--backward-check-accepted {path}: no such file (--backward-check-accept writes it)")
    try:
        accepted = json.loads(path.read_text() or "{}")
    except (OSError, ValueError) as error:
        raise pytest.UsageError(f"--backward-check-accepted {path}: cannot read it as JSON ({error})") from None
    shape = 'an object of op names, each with a list of trap names: {"mylib::gelu": ["ignores grad_output"]}'
    if not isinstance(accepted, dict):
        raise pytest.UsageError(f"--backward-check-accepted {path}: expected {shape}")
    for op, traps in accepted.items():
        if not isinstance(traps, list) or not all(isinstance(t, str) for t in traps):
            raise pytest.UsageError(f"--backward-check-accepted {path}: {op!r} holds {traps!r}; expected {shape}")
        unknown = [t for t in traps if t not in TRAPS]
        if unknown:
            hints = []
            for name in unknown:
                close = difflib.get_close_matches(name, list(TRAPS), n=1)
                hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise pytest.UsageError(f"--backward-check-accepted {path}: {op!r} lists {', '.join(hints)}, which the "
                                    f"checker has no trap of; its traps are " + ", ".join(map(repr, TRAPS)))
    return accepted


def pytest_configure(config):
    options = options_of(config)
    if options is None:
        return
    if config.option.backward_check_compile:  # the worker reads it from its environment, inherited at its start
        from backward_check import DEVICE, UsageError
        from backward_check.compiled import ENVIRONMENT, backend_for, backend_from_environment
        os.environ[ENVIRONMENT] = config.option.backward_check_compile
        try:
            backend_for(backend_from_environment(), DEVICE)
        except UsageError as error:
            raise pytest.UsageError(f"--backward-check-compile: {error}") from None
    session = BackwardCheckSession(options, read_accepted(options.accepted_path, options.accepting))
    config.pluginmanager.register(session, BackwardCheckSession.NAME)
    session.start()


def pytest_unconfigure(config):
    session = config.pluginmanager.get_plugin(BackwardCheckSession.NAME)
    if session is not None:
        session.stop()
        config.pluginmanager.unregister(session)


@dataclasses.dataclass
class Checked:
    """One recorded call, and what checking it found."""
    op: str
    arguments: str      # its signature, in words
    test: str           # the nodeid of the test that first made a call with that signature
    verdict: object     # worker.Verdict
    accepted: tuple     # the traps found that the accepted file lists for the op

    @property
    def failing(self):
        return tuple(t for t in self.verdict.traps if t not in self.accepted)

    @property
    def shown(self):
        """The verdict for the table, each accepted trap marked."""
        from backward_check.worker import FAULT, TRAPS
        if self.verdict.status == TRAPS:
            return "TRAP " + "; ".join(t + (" (accepted)" if t in self.accepted else "") for t in self.verdict.traps)
        if self.verdict.status == FAULT and self.accepted:
            return self.verdict.summary + " (accepted)"
        return self.verdict.summary


class BackwardCheckSession:
    """The plugin while it is on: the recorder's patches, the worker, and every verdict of the session."""
    NAME = "backward-check-session"

    def __init__(self, options, accepted):
        from backward_check.recording import Recorder
        from backward_check.worker import Worker
        self.options, self.accepted = options, accepted
        self.recorder = Recorder(options.limit)
        self.worker = Worker(options.timeout)
        self.checked = []
        self.rewritten = None   # (path, ops listed), once --backward-check-accept rewrote the file

    def start(self):
        self.recorder.install()

    def stop(self):
        self.recorder.uninstall()
        self.recorder.take_pending()
        self.worker.stop()

    # -- after each test --------------------------------------------------------------------------------

    # trylast: innermost, inside pytest's output capture, so whatever a check prints is the test's output
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item):
        __tracebackhide__ = True  # a failure shows the checker's report, not the plugin's frames
        self.recorder.test = item.nodeid
        try:
            result = yield
        except (KeyboardInterrupt, pytest.exit.Exception):
            self.recorder.test = None
            self.recorder.take_pending()
            raise
        except BaseException:
            self.recorder.test = None
            self.check_pending()  # reported in the table; the test's own failure stands
            raise
        self.recorder.test = None
        failing = [c for c in self.check_pending() if c.failing]
        if failing and self.options.mode == "fail" and not self.options.accepting:
            raise AssertionError("\n\n".join(failure_message(c, self.options) for c in failing))
        return result

    def check_pending(self):
        """Checks every call the test recorded with a new signature; the Checked entries, in order."""
        from backward_check.calling import clip
        from backward_check.worker import NOT_CHECKED, Verdict, check_here
        done, pending = [], self.recorder.take_pending()
        while pending:
            call = pending.pop(0)  # its copies of the test's arguments are freed once it is checked
            try:
                verdict, why_here = self.worker.check(call)
                if verdict is None:
                    verdict = check_here(call, why_here, self.recorder)
            except Exception as error:  # noqa: BLE001  (the plugin's own failure: a line in the table, not the test's)
                verdict = Verdict(NOT_CHECKED, f"not checked: backward-check itself failed ({type(error).__name__}: "
                                               f"{clip(error, 120)}); please report it")
            accepted = tuple(t for t in verdict.traps if t in self.accepted.get(call.name, ()))
            done.append(Checked(call.name, call.described, call.test, verdict, accepted))
        self.checked += done
        return done

    # -- at the end -----------------------------------------------------------------------------------

    def pytest_sessionfinish(self, session):
        if self.options.accepting:
            self.rewrite_accepted()

    def rewrite_accepted(self):
        """The accepted file with each op checked this run listing the traps it showed (ops it could not check,
        and ops this run never called, keep their entries)."""
        from backward_check.worker import NOT_CHECKED
        accepted = dict(self.accepted)
        decided = {c.op for c in self.checked if c.verdict.status != NOT_CHECKED}
        for op in decided:
            found = list(dict.fromkeys(t for c in self.checked if c.op == op for t in c.verdict.traps))
            if found:
                accepted[op] = found
            else:
                accepted.pop(op, None)
        path = self.options.accepted_path
        try:
            path.write_text(json.dumps(dict(sorted(accepted.items())), indent=2) + "\n")
            self.rewritten = (path, len(accepted))
        except OSError as error:
            self.rewritten = (path, f"could not be written: {error}")

    def pytest_terminal_summary(self, terminalreporter):
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", "backward-check")
        for problem in self.recorder.problems:
            write(f"not recorded: {problem}")
        if not self.checked:
            write("no autograd.Function or custom op was called with an input that requires grad")
            return
        ops = list(dict.fromkeys(c.op for c in self.checked))
        header = "op, and the arguments it was called with"
        width = min(56, max(len(header) - 2, *(len(c.arguments) for c in self.checked)) + 4)
        test_width = min(60, max(len("first called by"), *(len(c.test) for c in self.checked)))
        write(f"{header:<{width}}{'first called by':<{test_width}}  seconds  verdict")
        for op in ops:
            write(op)
            rows = [c for c in self.checked if c.op == op]
            for c in rows:
                write(f"  {c.arguments:<{width - 2}}{c.test:<{test_width}}  {c.verdict.seconds:7.1f}  {c.shown}")
                if c.verdict.note:
                    write(f"    ({c.verdict.note})")
            beyond = len(self.recorder.beyond_limit.get(op, ()))
            if beyond:
                write(f"  ({beyond} more signature{'s' if beyond > 1 else ''} not checked: "
                      f"--backward-check-limit {self.options.limit})")
            found = {t for c in rows for t in c.verdict.traps}
            gone = [t for t in self.accepted.get(op, ()) if t not in found]
            if gone and not self.options.accepting:
                write(f"  (accepted but not found, so the accepted file may drop it: {', '.join(gone)})")
        total = sum(c.verdict.seconds for c in self.checked)
        failing = sum(1 for c in self.checked if c.failing)
        line = (f"{len(self.checked)} call{'s' if len(self.checked) > 1 else ''} of {len(ops)} "
                f"op{'s' if len(ops) > 1 else ''} checked in {total:.1f} s; {failing} with a finding not accepted")
        if self.worker.starts:
            line += (f"; worker process started {self.worker.starts} time{'s' if self.worker.starts > 1 else ''} "
                     f"({self.worker.startup_seconds:.1f} s)")
        if self.worker.restarts:
            line += f", again after each of {self.worker.restarts} fault{'s' if self.worker.restarts > 1 else ''}"
        write(line)
        if self.rewritten:
            path, listed = self.rewritten
            write(f"accepted file {path}: " + (f"rewritten, {listed} op(s) listed" if isinstance(listed, int)
                                                  else listed))
        failed_already = self.options.mode == "fail" and not self.options.accepting  # its report is the failure's
        details = [c for c in self.checked if (c.verdict.traps or c.verdict.status == "undecided")
                   and not (failed_already and c.failing)]
        for c in details:
            terminalreporter.write_sep("-", f"{c.op} ({c.arguments}), first called by {c.test}")
            for report_line in c.verdict.report.splitlines():
                write(report_line)


def failure_message(checked, options):
    from backward_check.worker import FAULT
    where = f" ({options.accepted_path})" if options.accepted_path else ""
    if checked.verdict.status == FAULT:
        found = f"faulted under the checker ({checked.verdict.summary.removeprefix('FAULT ')})"
    else:
        count = len(checked.failing)
        found = f"has {count} trap{'s' if count > 1 else ''} ({', '.join(checked.failing)})"
    return (f"backward-check: the backward of {checked.op}, as this test called it ({checked.arguments}), {found}:\n"
            f"{checked.verdict.report}\n"
            f"By design? List it in the file --backward-check-accepted names{where}, as "
            f"{json.dumps({checked.op: list(checked.failing)})}; --backward-check-accept writes that file from a run.")
