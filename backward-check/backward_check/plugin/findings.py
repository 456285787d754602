"""What the pytest plugin found in a run, in plain values (so that pytest-xdist's workers can hand theirs to the
controller, which merges them), and the table it prints at the end.

The table follows a '=== backward-check ===' rule. Each op's name is on a line of its own; under it each signature
checked is a row that starts on a line indented two spaces, in four columns: the arguments, the test that first
made the call, the seconds the check took, and the verdict ('clean', 'TRAP a; b' with '(accepted)' after each
accepted trap, 'UNSTABLE: ...', 'undecided ...', 'not checked: ...', 'FAULT ...'). An argument list or a test id
too long for its column goes on in the same column on the lines after, indented four spaces or more; a note on
how the row was checked follows on one line, in parentheses, indented four. After the rows, '  (N more signatures
not checked: ...)' says what was left out of the op and why, and '  (N signatures checked by another pytest-xdist
worker ...)' what another worker checked. The table ends with a line 'N calls of M ops checked ...', then one on
what the plugin's time was beside the tests'.
"""
import collections
import dataclasses

from .selection import BUDGET, ELSEWHERE, INTERRUPTED, LIMIT, MEMORY, TIER_WORDS
from .verdicts import FAULT, NOT_CHECKED, TRAPPED, UNDECIDED, UNSTABLE, Verdict

AFTER_ITS_TEST, AT_THE_END = "after its test", "at the session's end"
ARGUMENTS_WIDTH, TEST_WIDTH = 50, 46
ALL_OPTION = "--backward-check-budget=all"   # the one option that checks every signature


@dataclasses.dataclass
class Checked:
    """One recorded call, and what checking it found."""
    op: str
    arguments: str      # its signature, in words
    test: str           # the nodeid of the test that first made a call with that signature
    verdict: Verdict
    accepted: tuple     # the traps found that the accepted file lists for the op
    when: str = AFTER_ITS_TEST
    worker: str = ""    # the pytest-xdist worker that checked it ("" without xdist)
    key: str = ""       # its signature's (recording.RecordedCall.key)

    @property
    def failing(self):
        return tuple(t for t in self.verdict.traps if t not in self.accepted)

    @property
    def shown(self):
        """The verdict for the table: the traps not accepted after TRAP, the accepted ones in parentheses after them,
        or 'accepted (...)' alone where the accepted file lists every trap found."""
        if self.verdict.status == TRAPPED:
            kept = [t for t in self.verdict.traps if t in self.accepted]
            if not self.failing:
                return f"accepted ({'; '.join(kept)})"
            return "TRAP " + "; ".join(self.failing) + (f" (accepted: {'; '.join(kept)})" if kept else "")
        if self.verdict.status == FAULT and self.accepted:
            return self.verdict.summary + " (accepted)"
        return self.verdict.summary

    @property
    def fully_accepted(self):
        """Whether every trap found is one the accepted file lists: the row says so, and no report follows."""
        return bool(self.accepted) and not self.failing

    def as_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values):
        verdict = values["verdict"]
        return cls(**{**values, "verdict": Verdict(**{**verdict, "traps": tuple(verdict["traps"])}),
                      "accepted": tuple(values["accepted"])})


@dataclasses.dataclass
class Findings:
    """Everything a run found: each call checked, the signatures left out of each op and why ({op: {signature key:
    [why, tier]}}; under pytest-xdist, one another worker checked is not left out), the calls that could not be
    recorded, and what the checks cost."""
    checked: list = dataclasses.field(default_factory=list)
    left_out: dict = dataclasses.field(default_factory=dict)
    problems: list = dataclasses.field(default_factory=list)
    worker_starts: int = 0
    worker_start_seconds: float = 0.0
    faults: int = 0
    suite_seconds: float = 0.0      # the suite's own (its wall clock, less the plugin's)
    plugin_seconds: float = 0.0     # the plugin's: its copies, its worker's start, its checks
    budget_seconds: float = 0.0     # what the budget allowed it (inf: no budget)
    processes: int = 1              # pytest-xdist's workers merged in (1 without xdist)

    def leave_out(self, op, key, why, tier):
        self.left_out.setdefault(op, {}).setdefault(key, [why, tier])

    def as_dict(self):
        return {**dataclasses.asdict(self), "checked": [c.as_dict() for c in self.checked]}

    @classmethod
    def from_dict(cls, values):
        return cls(**{**values, "checked": [Checked.from_dict(c) for c in values["checked"]]})

    def merge(self, other):
        """Another worker's findings, added to these."""
        self.checked += other.checked
        for op, calls in other.left_out.items():
            for key, (why, tier) in calls.items():
                self.leave_out(op, key, why, tier)
        self.problems += other.problems
        for name in ("worker_starts", "worker_start_seconds", "faults", "suite_seconds", "plugin_seconds",
                     "budget_seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def ops(self):
        return list(dict.fromkeys([c.op for c in self.checked] + list(self.left_out)))

    def failing_at_the_end(self):
        """The calls checked at the session's end with a trap not accepted: under =fail they fail the run."""
        return [c for c in self.checked if c.failing and c.when == AT_THE_END]


def _wrapped(text, width, breaks=" "):
    """text in lines of at most width, broken after any of breaks where it can be (a long word is cut)."""
    pieces, piece = [], ""
    for character in text:
        piece += character
        if character in breaks:
            pieces.append(piece)
            piece = ""
    pieces.append(piece)
    lines, line = [], ""
    for piece in pieces:
        if line and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        while len(piece.rstrip()) > width:
            lines.append(piece[:width])
            piece = piece[width:]
        line += piece
    return [*lines, line.rstrip()] if line.strip() or not lines else lines


TEST_ID_BREAKS = ":/[-,"   # where a test id may go on to the next line
VERDICT_COLUMN = 2 + ARGUMENTS_WIDTH + TEST_WIDTH + 9
WIDE = VERDICT_COLUMN + 40   # narrower terminals get each row stacked (narrow_row_lines)
UNLIMITED = 10 ** 6


def row_lines(arguments, test, seconds, verdict, width=UNLIMITED):
    """One signature's row: its first line indented two spaces with the verdict, the rest of a long argument list
    or test id on the lines after it, in their columns, indented four spaces or more; a verdict longer than the
    width goes on in its column. A terminal narrower than WIDE gets narrow_row_lines."""
    if width < WIDE:
        return narrow_row_lines(arguments, test, seconds, verdict, width)
    words = _wrapped(arguments, ARGUMENTS_WIDTH - 2, " ")
    if len(words) > 1:
        words = words[:1] + ["  " + w for w in _wrapped(" ".join(words[1:]), ARGUMENTS_WIDTH - 4, " ")]
    tests = _wrapped(test, TEST_WIDTH - 2, TEST_ID_BREAKS)
    verdicts = _wrapped(verdict, width - VERDICT_COLUMN, " ")
    lines = []
    for i in range(max(len(words), len(tests), len(verdicts))):
        left = (words[i] if i < len(words) else "").ljust(ARGUMENTS_WIDTH)
        middle = tests[i] if i < len(tests) else ""
        right = verdicts[i] if i < len(verdicts) else ""
        if i == 0:
            lines.append(f"  {left}{middle:<{TEST_WIDTH}}{seconds:7.1f}  {right}")
        else:
            left = left if left.strip() else "  " + left[2:]  # indented four: a row's going on, not a row
            lines.append(f"  {left}{middle:<{TEST_WIDTH}}         {right}".rstrip())
    return lines


def narrow_row_lines(arguments, test, seconds, verdict, width):
    """A row stacked for a narrow terminal: the arguments (indented two spaces), then, indented four, the test
    that first made the call, broken only where a test id breaks (after : / [ - ,), then the seconds and the
    verdict; every line within width."""
    room = max(width, 40)
    lines = [("  " if i == 0 else "    ") + w for i, w in enumerate(_wrapped(arguments, room - 4, " "))]
    lines += [("    by " if i == 0 else "       ") + w for i, w in enumerate(_wrapped(test, room - 7, TEST_ID_BREAKS))]
    lead = f"    {seconds:.1f} s  "
    lines += [(lead if i == 0 else " " * len(lead)) + w
              for i, w in enumerate(_wrapped(verdict, room - len(lead), " "))]
    return lines


def fitted(line, width, indent="    "):
    """A line of the table's within width, going on in lines indented by indent (a word longer is cut)."""
    if len(line) <= width:
        return [line]
    lead = line[:len(line) - len(line.lstrip())]
    first, *rest = _wrapped(line.lstrip(), width - len(lead), " ")
    rest = _wrapped(" ".join(rest), max(width - len(lead) - len(indent), 20), " ") if rest else []
    return [lead + first] + [lead + indent + r for r in rest]


def left_out_line(left_out, checked, options):
    """'(N more signatures not checked: ...)' for an op's signatures left out ({key: [why, tier]}), less those
    checked after all (by another pytest-xdist worker: checked, the keys of the op's rows)."""
    by_why = collections.defaultdict(collections.Counter)
    for key, (why, tier) in left_out.items():
        if key not in checked or why == ELSEWHERE:
            by_why[why][tier] += 1
    total = sum(sum(tiers.values()) for why, tiers in by_why.items() if why != ELSEWHERE)
    parts = []
    for why, words in ((BUDGET, f"past the time budget ({ALL_OPTION} checks them)"),
                       (MEMORY, "dropped to hold the copies within --backward-check-memory"),
                       (LIMIT, f"past --backward-check-limit {options.limit}"),
                       (INTERRUPTED, "waiting for their check, or in it, when the run was interrupted")):
        tiers = by_why.get(why)
        if tiers:
            kinds = ", ".join(f"{n} {TIER_WORDS[t]}" for t, n in sorted(tiers.items()))
            parts.append(f"{sum(tiers.values())} {words}: {kinds}")
    lines = []
    if total:
        lines.append(f"  ({total} more signature{'s' if total > 1 else ''} not checked: {'; '.join(parts)})")
    elsewhere = sum(by_why.get(ELSEWHERE, {}).values())
    if elsewhere:
        lines.append(f"  ({elsewhere} signature{'s' if elsewhere > 1 else ''} checked by another pytest-xdist "
                     f"worker, shown in its row)")
    return lines


def never_checked_line(findings):
    """'N ops never checked: A, B; --backward-check-budget=all checks them': the ops whose every call was left out
    (an op another pytest-xdist worker checked has its rows), in the summary, not only in their rows."""
    checked = {c.op for c in findings.checked}
    never = {op: {why for why, _ in calls.values()} for op, calls in findings.left_out.items() if op not in checked}
    never = {op: whys - {ELSEWHERE} for op, whys in never.items() if whys - {ELSEWHERE}}
    if not never:
        return []
    whys = set().union(*never.values())
    how = {BUDGET: f"{ALL_OPTION} checks them", MEMORY: "a larger --backward-check-memory keeps their copies",
           INTERRUPTED: "the run was interrupted before their check"}
    hint = "; ".join(how[why] for why in (BUDGET, MEMORY, INTERRUPTED) if why in whys)
    return [f"{len(never)} op{'s' if len(never) > 1 else ''} never checked: {', '.join(never)}"
            + (f"; {hint}" if hint else "")]


def table(findings, accepted, options, width=UNLIMITED):
    """The table's lines (after its rule), each within width (the terminal's), and the sections to print after it:
    [(title, lines)]."""
    lines = _table(findings, accepted, options, width)
    fitted_lines = []
    for line in lines[0]:
        fitted_lines += fitted(line, width)
    return fitted_lines, lines[1]


def _table(findings, accepted, options, width):
    lines = []
    if not findings.checked and not findings.left_out:
        return [*(f"not recorded: {p}" for p in findings.problems),
                "no autograd.Function or custom op was called with an input that requires grad"], []
    lines += [f"not recorded: {p}" for p in findings.problems]
    header = "op, and the arguments it was called with"
    if width >= WIDE:
        lines.append(f"{header:<{ARGUMENTS_WIDTH + 2}}{'first called by':<{TEST_WIDTH}}seconds  verdict")
    else:
        lines.append(f"{header}; the test that first made the call; seconds and verdict")
    seen = {}
    for op in findings.ops():
        lines.append(op)
        rows = [c for c in findings.checked if c.op == op]
        for c in rows:
            lines += row_lines(c.arguments, c.test, c.verdict.seconds, c.shown, width)
            if c.verdict.note:
                lines.append(f"    ({c.verdict.note})")
            twin = seen.setdefault((op, c.arguments), c)
            if twin is not c:
                lines.append(f"    (checked twice: by {twin.worker or 'one process'} and {c.worker or 'another'})")
        lines += left_out_line(findings.left_out.get(op, {}), {c.key for c in rows}, options)
        found = {t for c in rows for t in c.verdict.traps}
        gone = [t for t in accepted.get(op, {}) if t not in found]
        if gone and rows and not options.accepting:
            lines.append(f"  (accepted but not found, so the accepted file may drop it: {', '.join(gone)})")
    # A row the checker could not check (its verdict says why) is counted apart, not as a call checked.
    checked = [c for c in findings.checked if c.verdict.status != NOT_CHECKED]
    unchecked = len(findings.checked) - len(checked)
    failing = sum(1 for c in checked if c.failing)
    ops = len({c.op for c in checked})
    line = (f"{len(checked)} call{'s' if len(checked) != 1 else ''} of {ops} op{'s' if ops != 1 else ''} checked "
            f"in {sum(c.verdict.seconds for c in checked):.1f} s; {failing} with a finding not accepted")
    if unchecked:
        line += (f"; {unchecked} call{'s' if unchecked > 1 else ''} not checked, as "
                 f"{'their rows say' if unchecked > 1 else 'its row says'}")
    if findings.worker_starts and checked:  # (a worker started with the session, never needed, is not worth a word)
        line += (f"; worker process started {findings.worker_starts} time{'s' if findings.worker_starts > 1 else ''}"
                 f" ({findings.worker_start_seconds:.1f} s waited for)")
    if findings.faults:
        line += f", again after each of {findings.faults} fault{'s' if findings.faults > 1 else ''}"
    lines.append(line)
    lines += never_checked_line(findings)
    allowed = "no budget" if findings.budget_seconds == float("inf") else f"a budget of {findings.budget_seconds:.0f} s"
    across = f", across {findings.processes} pytest-xdist workers" if findings.processes > 1 else ""
    lines.append(f"the plugin took {findings.plugin_seconds:.1f} s beside the suite's own "
                 f"{findings.suite_seconds:.1f} s"
                 f" ({allowed}{across})")
    failed_already = options.mode == "fail" and not options.accepting  # a failing test shows its own report
    sections = [(f"{c.op} ({c.arguments}), first called by {c.test}", c.verdict.report.splitlines())
                for c in findings.checked if (c.verdict.traps or c.verdict.status in (UNDECIDED, UNSTABLE))
                and not c.fully_accepted and not (failed_already and c.failing and c.when == AFTER_ITS_TEST)]
    return lines, sections
