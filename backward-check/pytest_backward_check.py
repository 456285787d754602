"""pytest --backward-check: the checker inside a library's own test suite, with no new test code.

While the suite's tests run, every call of a torch.autograd.Function's .apply, and of a torch.library custom op
with a registered autograd, that gets an input which requires grad is recorded; each call with a new signature
waits, with copies of its arguments, and is checked with check_backward against finite differences, in a worker
process (backward_check/plugin/worker.py): after its test where it is the op's first or brings a value of an argument
not yet checked, and at the session's end otherwise, the most revealing first, within a time budget relative to the
suite's own time (backward_check/plugin/selection.py). The session ends with a table of what was
found (backward_check/plugin/findings.py). Under pytest-xdist each worker checks its own tests' calls, and the
controller prints one table (backward_check/plugin/xdist.py). Off unless asked:

    pytest --backward-check                  # report: a table at the end, no test fails for it
    pytest --backward-check=fail             # a trap fails the test that made the call
    pytest --backward-check --backward-check-budget=all                     # every signature, however long
    pytest --backward-check=fail --backward-check-accepted=accepted.json   # traps known and kept, by op
    pytest --backward-check --backward-check-accepted=accepted.json --backward-check-accept   # write it
    pytest --backward-check --backward-check-repro=repro   # a script that shows each trap again

Installed with the package (a pytest11 entry point); in a checkout, with backward-check/ on PYTHONPATH:
`pytest -p pytest_backward_check`. pytest imports this module in every run where the package is installed, so it
is a module of its own, outside the package: it imports neither torch nor backward_check until the option is given
(the package chooses, as it is imported, the GPU or Triton's interpreter, and the suite may not want either yet).
"""
import dataclasses
import json
import os
import shlex
import time
from pathlib import Path

import pytest

MODES = ("report", "fail")
SPELLINGS_OF_ON = ("1", "true", "yes", "y", "on")
BUDGET_ALL = "all"


def pytest_addoption(parser):
    group = parser.getgroup("backward-check", "backward-check: check the backward of every autograd.Function and "
                                              "custom op the tests call")
    group.addoption("--backward-check", dest="backward_check", nargs="?", const="report", default=None,
                    metavar="report|fail",
                    help="record each call of an autograd.Function or custom op whose input requires grad, check "
                         "each new signature (after its test where it is the op's first or brings a value not yet "
                         "checked, else at the session's end; the most revealing first, within "
                         "--backward-check-budget), and print a table at the end; "
                         "=fail also fails the test that made a call with a trap, or the run, for a trap found at "
                         "the end (default: report)")
    group.addoption("--backward-check-budget", dest="backward_check_budget", default="1", metavar="FACTOR|all",
                    help="the plugin's time (its copies, its worker's start, its checks) as a multiple of the suite's "
                         "own time so far (the wall clock since the plugin started, less its own), and at least "
                         "60 s; signatures past it are left out, the most revealing checked first (default: 1, so "
                         "the run takes about twice the suite's time); all: check every signature")
    group.addoption("--backward-check-limit", dest="backward_check_limit", type=int, default=None, metavar="N",
                    help="check at most N signatures per op (default: no limit, only the budget)")
    group.addoption("--backward-check-memory", dest="backward_check_memory", type=float, default=None,
                    metavar="MIB", help="MiB of copies of arguments held for checks not yet run; past it the copies "
                                        "of the least revealing calls are dropped (default: 2048, shared among "
                                        "pytest-xdist's workers)")
    group.addoption("--backward-check-accepted", dest="backward_check_accepted", default=None, metavar="PATH",
                    help='a JSON file of traps known and kept, by op, each with its reason: {"mylib::gelu": '
                         '{"trap name": "why it is by design"}} (or a list of trap names an op); they are shown, '
                         "and fail nothing; write it with '=' (--backward-check-accepted=PATH): pytest reads a "
                         "path after a space as a path to test while it chooses its rootdir")
    group.addoption("--backward-check-accept", dest="backward_check_accept", action="store_true",
                    help="write every trap this run found into the --backward-check-accepted file (or set "
                         "BACKWARD_CHECK_ACCEPT=1), each with a reason to fill in; turns --backward-check on")
    group.addoption("--backward-check-accept-only", dest="backward_check_accept_only", action="append", default=[],
                    metavar="OP=TRAP", help="write only this op's trap (or, written OP alone, its every trap) into "
                                            "the --backward-check-accepted file, where this run found it; may be "
                                            "given again; turns --backward-check on")
    group.addoption("--backward-check-repro", dest="backward_check_repro", default=None, metavar="DIR",
                    help="for each call with a trap, write into DIR a script that checks it again from its saved "
                         "arguments (python DIR/OP-N.py, from the folder the suite runs in), and name it in the "
                         "table")
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
    budget: float         # the plugin's time as a multiple of the tests'; None: no budget
    limit: int            # signatures checked per op; None: no limit
    memory_mib: float     # copies held, across pytest-xdist's workers
    timeout: float
    accepted_path: Path   # None: no accepted file
    accepting: bool       # write the accepted file from this run's findings
    accept_only: tuple    # [(op, trap or None)]: only these (empty: every trap found)
    compile: str = None   # --backward-check-compile's backend ("default": inductor or aot_eager); None: off
    repro: Path = None    # --backward-check-repro's folder; None: no repros


def options_of(config):
    """The plugin's options, checked (None where the plugin is off); pytest.UsageError names what is wrong."""
    option = config.option
    mode = option.backward_check
    accepting = option.backward_check_accept or bool(option.backward_check_accept_only)
    if mode is None and not accepting:
        return None
    mode = mode or "report"
    if mode not in MODES:
        raise pytest.UsageError(f"--backward-check takes report or fail (written --backward-check=fail), not {mode!r}")
    accepting = accepting or os.environ.get("BACKWARD_CHECK_ACCEPT", "").lower() in SPELLINGS_OF_ON
    budget = option.backward_check_budget.strip().lower()
    try:
        budget = None if budget == BUDGET_ALL else float(budget.removesuffix("x"))
    except ValueError:
        budget = -1.0
    if budget is not None and not budget > 0:
        raise pytest.UsageError(f"--backward-check-budget takes a multiple of the suite's own time, more than 0 (1: "
                                f"the plugin takes as long as the suite), or all, not "
                                f"{option.backward_check_budget!r}")
    if option.backward_check_limit is not None and option.backward_check_limit < 1:
        raise pytest.UsageError(f"--backward-check-limit takes a number of signatures per op, 1 or more, not "
                                f"{option.backward_check_limit}")
    memory = option.backward_check_memory
    if memory is not None and not memory >= 0:
        raise pytest.UsageError(f"--backward-check-memory takes MiB, 0 or more, not {memory:g}")
    if not option.backward_check_timeout > 0:
        raise pytest.UsageError(f"--backward-check-timeout takes seconds, more than 0, not "
                                f"{option.backward_check_timeout:g}")
    path = option.backward_check_accepted
    if accepting and path is None:
        raise pytest.UsageError("--backward-check-accept (or BACKWARD_CHECK_ACCEPT=1) writes the file that "
                                "--backward-check-accepted names: name one, e.g. --backward-check-accepted="
                                "backward_check_accepted.json")
    path = None if path is None else Path(path)
    if path is not None and not path.is_absolute():
        path = Path(config.invocation_params.dir) / path
    if path is not None:
        after_a_space(config, path)
    repro = option.backward_check_repro
    repro = None if repro is None else Path(config.invocation_params.dir) / repro
    return Options(mode, budget, option.backward_check_limit, memory, option.backward_check_timeout, path,
                   accepting, tuple(option.backward_check_accept_only), option.backward_check_compile, repro)


def after_a_space(config, path):
    """Refuses `--backward-check-accepted PATH` (a space, not '=') where PATH lies outside the folder pytest was
    started in. pytest chooses its rootdir, and the ini file it reads, from the words of its command line before it
    reads a plugin's options, so it takes such a PATH for a path to test: the rootdir moves up to hold it, and the
    suite's own configuration is not read."""
    words = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]
    spaced = any(word == "--backward-check-accepted" for word in words)
    start = Path(config.invocation_params.dir).resolve()
    if spaced and not path.resolve().is_relative_to(start):
        raise pytest.UsageError(f"write --backward-check-accepted={path} (with '='): pytest chooses its rootdir from "
                                f"the words of its command line before it reads this option, so a path after a "
                                f"space outside {start} moves the rootdir, and the suite's configuration is not "
                                f"read")


def read_accepted(options):
    """{op: {trap: reason}} from the accepted file (a missing one is empty where this run will write it), and the
    pairs --backward-check-accept-only names; a pytest.UsageError says what is wrong with either."""
    from backward_check.plugin.accepted import AcceptedFileError, parse, parse_named
    try:
        named = parse_named(options.accept_only)
    except AcceptedFileError as error:
        raise pytest.UsageError(f"--backward-check-accept-only {error}") from None
    path = options.accepted_path
    if path is None or (not path.exists() and options.accepting):
        return {}, named
    if not path.exists():
        raise pytest.UsageError(f"--backward-check-accepted {path}: no such file (--backward-check-accept writes it)")
    try:
        return parse(path.read_text(), str(path)), named
    except (OSError, AcceptedFileError) as error:
        raise pytest.UsageError(f"--backward-check-accepted {path}: " + str(error).removeprefix(f"{path}: ")) \
            from None


def import_the_package():
    """Imports backward_check, leaving the suite's environment as it was. Where no GPU is, the package switches
    Triton's interpreter on as it is imported (TRITON_INTERPRET=1), which would run the suite's own kernels in the
    interpreter too: the checks run in worker processes that choose for themselves, so the suite's process keeps
    its own setting."""
    before = os.environ.get("TRITON_INTERPRET")
    import backward_check
    if before is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = before
    return backward_check


def pytest_configure(config):
    options = options_of(config)
    if options is None:
        return
    package = import_the_package()
    if options.compile:
        from backward_check.compile_backend import backend_for, backend_from_text
        try:
            backend_for(backend_from_text(options.compile), package.DEVICE)
        except package.UsageError as error:
            raise pytest.UsageError(f"--backward-check-compile: {error}") from None
    accepted, named = read_accepted(options)
    from backward_check.plugin.xdist import is_controller
    session_class = XdistController if is_controller(config) else BackwardCheckSession
    config.pluginmanager.register(session_class(options, accepted, named, config), NAME)


def pytest_unconfigure(config):
    session = config.pluginmanager.get_plugin(NAME)
    if session is not None:
        session.stop()
        config.pluginmanager.unregister(session)


NAME = "backward-check-session"


class Reporting:
    """What the plugin does at the session's end, where the tests ran (or, under pytest-xdist, in the controller,
    with every worker's findings merged): the accepted file written, the run failed for a trap found at the end
    under =fail, and the table."""

    def __init__(self, options, accepted, named, config):
        from backward_check.plugin.findings import Findings
        self.options, self.accepted, self.named, self.config = options, accepted, named, config
        self.findings = Findings()
        self.rewritten = None   # a line on the accepted file, once this run wrote it

    def stop(self):
        pass

    def pytest_sessionfinish(self, session):
        if self.options.accepting:
            self.rewrite_accepted()
        elif self.options.mode == "fail" and self.findings.failing_at_the_end() and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def rewrite_accepted(self):
        from backward_check.plugin.accepted import dumped, rewritten, without_reason
        from backward_check.plugin.verdicts import NOT_CHECKED, UNSTABLE
        decided = [c for c in self.findings.checked if c.verdict.status not in (NOT_CHECKED, UNSTABLE)]
        found = {}
        for c in decided:
            found.setdefault(c.op, [])
            found[c.op] += [t for t in c.verdict.traps if t not in found[c.op]]
        accepted, missing = rewritten(self.accepted, found, set(found), self.named or None)
        path = self.options.accepted_path
        try:
            path.write_text(dumped(accepted))
        except OSError as error:
            self.rewritten = [f"accepted file {path}: could not be written: {error}"]
            return
        wanted = without_reason(accepted)
        self.rewritten = [f"accepted file {path}: written, {len(accepted)} op(s) listed"
                          + (f"; {len(wanted)} trap(s) still want the reason they are by design: write it in "
                             f"the file" if wanted else "")]
        self.rewritten += [f"not written, since this run did not find it: {op}" + (f"={trap}" if trap else "")
                           for op, trap in missing]

    def pytest_terminal_summary(self, terminalreporter):
        from backward_check.plugin.accepted import without_reason
        from backward_check.plugin.findings import table
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", "backward-check")
        lines, sections = table(self.findings, self.accepted, self.options, terminal_width(terminalreporter))
        for line in lines:
            write(line)
        for line in self.rewritten or ():
            write(line)
        wanted = without_reason(self.accepted) if not self.options.accepting else []
        if wanted:
            write(f"accepted without a reason ({self.options.accepted_path}): "
                  + ", ".join(f"{op}: {trap}" for op, trap in wanted))
        at_the_end = self.findings.failing_at_the_end() if self.options.mode == "fail" and \
            not self.options.accepting else []
        for c in at_the_end:
            write(f"FAILED the run: a trap found at the session's end, in the call {c.test} made: {c.op} "
                  f"({c.arguments}): {', '.join(c.failing)}")
        if at_the_end:
            write(accept_hint([(c.op, c.failing) for c in at_the_end], self.options))
        for title, report in sections:
            terminalreporter.write_sep("-", title)
            for line in report:
                write(line)


class BackwardCheckSession(Reporting):
    """The plugin where the tests run (a plain run, or one pytest-xdist worker): the recorder's patches, the
    selection of what to check, the worker process, and every verdict."""

    def __init__(self, options, accepted, named, config):
        super().__init__(options, accepted, named, config)
        from backward_check.plugin.recording import Recorder
        from backward_check.plugin.selection import MEMORY_MIB, Budget, Selection
        from backward_check.plugin.worker import Worker
        from backward_check.plugin.xdist import Claims, worker_of
        xdist = worker_of(config)
        self.worker_id, workers, folder = xdist or ("", 1, None)
        self.claims = Claims(folder, self.worker_id) if folder else None
        memory_mib = MEMORY_MIB if options.memory_mib is None else options.memory_mib
        self.budget = Budget(options.budget, plugin_seconds=self.plugin_seconds)
        self.selection = Selection(self.budget, memory_mib * 2 ** 20 / workers, options.limit,
                                   self.claims.others if self.claims else None)
        self.recorder = Recorder(self.offer, self.selection.withdraw)
        self.worker = Worker(options.timeout)
        self.check_seconds = 0.0
        self.recorder.install()

    def pytest_sessionstart(self, session):
        """The worker process starts now, beside the collection (its start imports torch: seconds), so that the
        first check does not wait for it."""
        self.worker.prestart()

    def offer(self, call, copies):
        """A recorded call, offered to the selection; once a call waits for its check, the worker process starts
        where none is running (after a fault), so that its start overlaps the rest of the test."""
        self.selection.offer(call, copies)
        if self.selection.waiting:
            self.worker.prestart()

    def stop(self):
        self.recorder.uninstall()
        self.worker.stop()

    def plugin_seconds(self):
        """The plugin's own time so far: its copies (the recorder's) and its checks."""
        return self.recorder.seconds + self.check_seconds

    # -- each test --------------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item):
        """In report mode, the checks after the test, outside its protocol (so no timeout of the test's counts
        them)."""
        result = yield
        if self.options.mode == "report":
            self.check_after(item.nodeid)
        return result

    # trylast: innermost, inside pytest's output capture, so whatever a check prints is the test's output
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item):
        __tracebackhide__ = True  # a failure shows the checker's report, not the plugin's frames
        self.recorder.test = item.nodeid
        try:
            result = yield
        except (KeyboardInterrupt, pytest.exit.Exception):
            raise
        except BaseException:
            self.recorder.test = None
            if self.options.mode == "fail":
                self.check_after(item.nodeid)  # reported in the table; the test's own failure stands
            raise
        finally:
            self.recorder.test = None
        if self.options.mode == "fail":
            failing = [c for c in self.check_after(item.nodeid) if c.failing]
            if failing and not self.options.accepting:
                raise AssertionError("\n\n".join(failure_message(c, self.options) for c in failing))
        return result

    def check_after(self, test):
        """Checks the test's calls that bring something new, best first, while the budget lasts; the Checked
        entries. Never raises: the plugin's own failure is a line in the table."""
        from backward_check.plugin.findings import AFTER_ITS_TEST
        return self._check_while(lambda: self.selection.next_call(test), AFTER_ITS_TEST)

    def _check_while(self, next_call, when):
        done = []
        try:
            while (call := next_call()) is not None:
                checked = self.check(call, when)
                if checked is not None:
                    done.append(checked)
        except Exception as error:  # noqa: BLE001  (the plugin's own failure: never the test's)
            self.findings.problems.append(f"backward-check itself failed while choosing what to check "
                                          f"({type(error).__name__}: {error}); please report it")
        return done

    def check(self, call, when):
        """One call checked where it is safe to (the Checked entry), or None where another worker claimed it."""
        from backward_check.calling import clip
        from backward_check.plugin.findings import Checked
        from backward_check.plugin.verdicts import NOT_CHECKED, Verdict
        from backward_check.plugin.worker import check_protected, job_of
        if self.claims is not None and not self.claims.claim(call):
            self.selection.checked_elsewhere(call)
            return None
        start = time.perf_counter()
        try:
            job = job_of(call, self.recorder.frozen.get(call.name, ()), self.accepted.get(call.name, {}),
                         self.recorder.made_per_call(call.name), self.options.compile)
            verdict = check_protected(self.worker, call, job, self.recorder)
        except Exception as error:  # the plugin's own failure: a line in the table, not the test's
            if isinstance(error, pytest.exit.Exception):
                self.interrupted_in(call, start)
                raise
            verdict = Verdict(NOT_CHECKED, f"not checked: backward-check itself failed ({type(error).__name__}: "
                                           f"{clip(error, 120)}); please report it")
        except BaseException:  # ^C, a deadline's signal, a test's timeout during the check
            self.interrupted_in(call, start)
            raise
        seconds = time.perf_counter() - start
        self.check_seconds += seconds
        self.selection.checked_here(call, seconds)
        accepted = tuple(t for t in verdict.traps if t in self.accepted.get(call.name, {}))
        checked = Checked(call.name, call.described, call.test, verdict, accepted, when, self.worker_id, call.key)
        if self.options.repro is not None and checked.failing:
            self.write_repro(call, job, checked)
        self.findings.checked.append(checked)
        return checked

    def interrupted_in(self, call, start):
        """Interrupted mid-check: its seconds count, and the call is one the interrupt left unchecked."""
        self.check_seconds += time.perf_counter() - start
        self.selection.interrupted(call)

    def write_repro(self, call, job, checked):
        """The call's repro (--backward-check-repro), named in the row's note; never the test's failure."""
        from backward_check.calling import clip
        from backward_check.plugin.repro import write_repro
        try:
            script, why = write_repro(self.options.repro, call, job, checked.failing, call.test)
        except Exception as error:  # noqa: BLE001  (a folder it cannot write: a line in the table)
            script, why = None, f"no repro: it could not be written ({type(error).__name__}: {clip(error, 120)})"
        line = f"repro: python {script}" if script is not None else why
        checked.verdict.note = f"{checked.verdict.note}; {line}" if checked.verdict.note else line

    # -- the session's end --------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session):
        """After the last test: the calls still waiting, best first, while the budget lasts."""
        from backward_check.plugin.findings import AT_THE_END
        try:
            result = yield
        except BaseException:  # interrupted: no more checks, and what waited is counted as interrupted
            self.close_findings(interrupted=True)
            raise
        try:
            self._check_while(self.selection.next_call, AT_THE_END)
        except BaseException:  # interrupted during the session's end checks: the same, with what was checked
            self.close_findings(interrupted=True)
            raise
        self.close_findings()
        return result

    def close_findings(self, interrupted=False):
        """What is left waiting is left out (past the budget, or where the run was interrupted, still waiting); the
        selection's and the worker's counts, into the findings."""
        from backward_check.plugin.selection import BUDGET, INTERRUPTED
        findings, selection = self.findings, self.selection
        selection.give_up(INTERRUPTED if interrupted else BUDGET)
        for op, calls in selection.left_out.items():
            for key, (why, tier) in calls.items():
                findings.leave_out(op, key, why, tier)
        findings.problems += self.recorder.problems
        findings.worker_starts, findings.worker_start_seconds = self.worker.starts, self.worker.startup_seconds
        findings.faults = self.worker.restarts
        findings.suite_seconds, findings.budget_seconds = self.budget.suite_seconds, self.budget.seconds
        findings.plugin_seconds = self.plugin_seconds()

    def pytest_sessionfinish(self, session):
        if self.worker_id:  # a pytest-xdist worker: the controller reports
            self.config.workeroutput["backward_check"] = self.findings.as_dict()
            return
        super().pytest_sessionfinish(session)

    def pytest_terminal_summary(self, terminalreporter):
        if not self.worker_id:
            super().pytest_terminal_summary(terminalreporter)


class XdistController(Reporting):
    """The plugin in pytest-xdist's controller: the folder where workers claim signatures, and their findings
    merged into one table."""

    def __init__(self, options, accepted, named, config):
        super().__init__(options, accepted, named, config)
        from backward_check.plugin.xdist import new_claims_folder
        self.folder = new_claims_folder()
        self.findings.processes = 0
        self.silent = []   # workers that went down without their findings

    def stop(self):
        from backward_check.plugin.xdist import remove_claims_folder
        remove_claims_folder(self.folder)

    def pytest_configure_node(self, node):
        from backward_check.plugin.xdist import CLAIMS
        node.workerinput[CLAIMS] = self.folder

    def pytest_testnodedown(self, node, error):
        from backward_check.plugin.findings import Findings
        sent = getattr(node, "workeroutput", {}).get("backward_check")
        if sent is None:
            self.findings.problems.append(f"pytest-xdist worker {node.gateway.id} went down without its findings "
                                          f"({error or 'no error given'}): the calls its tests made are missing")
            return
        self.findings.merge(Findings.from_dict(sent))
        self.findings.processes += 1


def terminal_width(terminalreporter):
    """The terminal's columns, as pytest's own lines fit them (COLUMNS, else the terminal, else 80)."""
    writer = getattr(terminalreporter, "_tw", None)
    return getattr(writer, "fullwidth", None) or 80


def accept_hint(pairs, options):
    """How to accept these findings where they are by design: [(op, traps)]."""
    where = f" ({options.accepted_path})" if options.accepted_path else ""
    example = {op: {t: "why it is by design" for t in traps} for op, traps in pairs}
    flags = " ".join(f"--backward-check-accept-only '{op}={t}'" for op, traps in pairs for t in traps)
    return (f"By design? List it, with the reason, in the file --backward-check-accepted names{where}, as "
            f"{json.dumps(example)}; or write it from this run with --backward-check-accepted=FILE {flags}.")


def failure_message(checked, options):
    from backward_check.plugin.verdicts import FAULT
    if checked.verdict.status == FAULT:
        found = f"faulted under the checker ({checked.verdict.summary.removeprefix('FAULT ')})"
    else:
        count = len(checked.failing)
        found = f"has {count} trap{'s' if count > 1 else ''} ({', '.join(checked.failing)})"
    return (f"backward-check: the backward of {checked.op}, as this test called it ({checked.arguments}), {found}:\n"
            f"{checked.verdict.report}\n"
            f"{accept_hint([(checked.op, checked.failing)], options)}")
