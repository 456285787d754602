"""A pytest plugin for this suite: a pytest-xdist worker killed by a fault says where it was.

pytest-xdist reports a worker that dies of a fault in native code (a segmentation fault, an abort) as "worker 'gw1'
crashed while running <test>", and nothing more; faulthandler's account of the fault goes to the worker's stderr,
which a CI log's summary may leave out. Here each worker writes faulthandler's account into a file of its own, and
the crash's report quotes it, so the FAILURES section says which Python frames the fault happened under.

tests/conftest.py takes these hooks in; `-p xdist_faults` (with tests/ on the path) does too. Without pytest-xdist,
or without -n, nothing changes: faulthandler writes to stderr as pytest sets it up.
"""
import faulthandler
import os
import shutil
import tempfile
from pathlib import Path

import pytest

FOLDER_VARIABLE = "CHAPTER17_TEST_FAULT_LOGS"  # where the workers write, set by the controller before they start
QUOTED_CHARACTERS = 12000  # of each log: the faulting thread's stack first, then the others' and the modules'
_LOG = pytest.StashKey()     # a worker's open log
_FOLDER = pytest.StashKey()  # the controller's folder of logs


@pytest.hookimpl(trylast=True)  # after pytest's own faulthandler plugin, which points faulthandler at stderr
def pytest_configure(config):
    if _LOG in config.stash or _FOLDER in config.stash:
        return  # taken in twice (conftest.py and -p xdist_faults): the first set it up
    workerinput = getattr(config, "workerinput", None)  # set on a worker only (not inherited, as its environment is)
    if workerinput is not None:
        folder = os.environ.get(FOLDER_VARIABLE)
        if folder and os.path.isdir(folder):
            log = open(Path(folder) / f"{workerinput['workerid']}-{os.getpid()}.log", "w")  # noqa: SIM115  (kept open)
            config.stash[_LOG] = log
            faulthandler.enable(file=log, all_threads=True)
    elif config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None):
        folder = tempfile.mkdtemp(prefix="chapter17-test-faults-")
        os.environ[FOLDER_VARIABLE] = folder  # the workers, started after this, inherit it
        config.stash[_FOLDER] = folder


def _log_faults_here(config):
    """faulthandler pointed at this worker's log again: a pytest run inside a test (pytester's) ends by pointing it
    back at stderr, which a test's capture holds."""
    log = config.stash.get(_LOG, None)
    if log is not None:
        faulthandler.enable(file=log, all_threads=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _log_faults_here(item.config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    _log_faults_here(item.config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item):
    _log_faults_here(item.config)


@pytest.hookimpl(tryfirst=True)  # before pytest's faulthandler plugin, which then restores what it found
def pytest_unconfigure(config):
    if _LOG in config.stash:
        faulthandler.disable()
        config.stash[_LOG].close()
        del config.stash[_LOG]
    if _FOLDER in config.stash:
        shutil.rmtree(config.stash[_FOLDER], ignore_errors=True)
        os.environ.pop(FOLDER_VARIABLE, None)
        del config.stash[_FOLDER]


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook, called in the controller
def pytest_handlecrashitem(crashitem, report, sched):
    folder = os.environ.get(FOLDER_VARIABLE)
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    if not folder or gateway is None:
        return
    for path in sorted(Path(folder).glob(f"{gateway.id}-*.log")):
        account = path.read_text(errors="replace").strip()
        if account:
            report.longrepr = f"{report.longrepr}\n\nfaulthandler's account ({path.name}):\n" \
                              f"{faulting_thread_first(account)[:QUOTED_CHARACTERS]}"


def faulting_thread_first(account):
    """faulthandler's account with the faulting thread's stack ("Current thread") before the other threads'."""
    header, found, rest = account.partition("\nCurrent thread")
    if not found:
        return account
    error, _, others = header.partition("\n\n")
    current, _, after = rest.partition("\n\n")
    return "\n\n".join(part for part in (error, "Current thread" + current, others, after) if part.strip())
