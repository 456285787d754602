"""The plugin's verdict on one recorded call, in plain values: what the worker process hands back, what pytest-xdist's
workers hand the controller, and what the table prints. It imports neither torch nor the checker, so the table
(findings.py) stands on it alone."""
import dataclasses

CLEAN, TRAPPED, UNDECIDED, NOT_CHECKED, FAULT, UNSTABLE = ("clean", "traps", "undecided", "not checked", "fault",
                                                          "unstable")
CRASH_TRAP = "crashes"  # the trap a fault counts as, for the accepted file


@dataclasses.dataclass
class Verdict:
    """What checking one recorded call found, in words the table prints."""
    status: str               # CLEAN, TRAPPED, UNDECIDED, NOT_CHECKED, FAULT or UNSTABLE
    summary: str              # one line: the verdict as the table shows it
    report: str = ""          # the checker's report, or the account of the fault
    traps: tuple = ()         # trap names (a fault counts as "crashes")
    seconds: float = 0.0
    note: str = ""            # how it was checked, where that is worth saying
