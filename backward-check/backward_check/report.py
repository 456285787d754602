"""The report: the chapter's traps as constants, the outcomes a check returns, and the Report that
collects them. A check never touches the report; the runner hands each outcome to Report.add.

Adding a trap takes three edits: a Trap constant here (with its section and its remedy), its name in
ALL_TRAPS, and the `traps` of the check in runner.CHECKS that reports it (a check may report only the
traps it declares). docs/practice.md's trap table is generated from ALL_TRAPS (tests/test_checker_docs.py
says when it is stale).
"""
import dataclasses


@dataclasses.dataclass(frozen=True)
class Trap:
    name: str        # the chapter's words, as the report prints them
    section: str     # where the chapter (or the chapters around it) teaches it
    remedy: str      # what to do about it, in one line

    def __str__(self):
        return self.name


IGNORES_GRAD_OUTPUT = Trap("ignores grad_output", "17.1; Chapter 16's chain-rule bug",
                           "multiply the local derivative by grad_output")
UNIFORM_GRAD_OUTPUT = Trap("assumes a uniform grad_output", "17.1 and 17.3: 2, 1 + 1 and 3 + 2 are all uniform",
                           "multiply elementwise: grad_output holds one value per output element")
SINGLE_USE = Trap("assumes a single use", "17.3: two consumers' gradients arrive summed, in one call",
                  "use grad_output as it arrives: it is already the sum over every consumer")
KEEPS_STATE = Trap("keeps state between calls", "17.3: never special-case 'the first time I'm called'",
                   "keep what backward needs on ctx (ctx.save_for_backward), never on the class or a cache")
MUTATES_GRAD_OUTPUT = Trap("mutates grad_output in place", "17.3: AddBackward0 hands both branches one tensor",
                           "write into a new tensor: grad_output belongs to autograd, and a sibling reads it too")
CONTIGUOUS_GRAD_OUTPUT = Trap("assumes a contiguous grad_output", "17.3: after .sum(), grad_output is a stride-0 view",
                              "pass grad_output's own strides to the kernel, or call .contiguous() first")
LAID_OUT_LIKE_INPUT = Trap("assumes grad_output is laid out like its input",
                           "17.3: grad_output's layout is the graph's, not the input's",
                           "give the kernel grad_output's own strides, not the input's")
CONTIGUOUS_INPUT = Trap("assumes a contiguous input", "beyond the chapter: hardened_ops.py makes its inputs contiguous",
                        "call .contiguous() on the inputs (and on what you save), or pass their strides")
WRITES = Trap("writes into an input or a saved tensor", "17.3: another consumer of the same tensor reads it too",
              "write into a new tensor, or declare an in-place forward with ctx.mark_dirty")
COVERS_PART = Trap("covers only part of a large input", "Chapter 16: every block of the grid, and the masked tail",
                   "launch triton.cdiv(n, BLOCK) blocks and mask the tail with offsets < n")
RETURNS_WRONG = Trap("returns the wrong gradients", "Chapter 15: one gradient per input, each like its input",
                     "return one gradient per forward input, shaped and typed like it (None where none is needed)")
EVERY_OUTPUT_USED = Trap("assumes every output is used",
                         "Chapter 15: an unused output's grad_output is zeros, or None after "
                         "set_materialize_grads(False)",
                         "treat a None grad_output as zeros")
WRONG_FORWARD = Trap("a wrong forward", "Chapter 12: check the forward against an oracle first",
                     "fix the forward (or, if it is right, the reference)")
SECOND_ORDER = Trap("a silently wrong second derivative", "Chapter 16: a kernel's output carries no graph",
                    "refuse create_graph=True loudly (raise in backward when torch.is_grad_enabled(), as "
                    "hardened_ops.py does), or build backward from differentiable ops")
WRONG_FORMULA = Trap("a wrong formula", "Chapter 16",
                     "derive the local derivative again, and test it against the reference")
WRONG_UNDER_COMPILE = Trap("wrong under torch.compile",
                           "beyond the chapter: torch.compile traces the Function, then AOTAutograd and the backend "
                           "rewrite it", "eager is right, so the compiler is wrong: find its PyTorch issue and the "
                           "torch that fixes it, or keep the op out of the graph (torch.compiler.disable) until then")
CRASHES = Trap("crashes", "", "run the failing call yourself: the message says where")

ALL_TRAPS = (IGNORES_GRAD_OUTPUT, UNIFORM_GRAD_OUTPUT, SINGLE_USE, KEEPS_STATE, MUTATES_GRAD_OUTPUT,
             CONTIGUOUS_GRAD_OUTPUT, LAID_OUT_LIKE_INPUT, CONTIGUOUS_INPUT, WRITES, COVERS_PART, RETURNS_WRONG,
             EVERY_OUTPUT_USED, WRONG_FORWARD, SECOND_ORDER, WRONG_FORMULA, WRONG_UNDER_COMPILE, CRASHES)
TRAPS = {t.name: t.section for t in ALL_TRAPS}  # name: section, for readers and tools

# The kinds of note a caller may act on (an exercise that must honour ctx.needs_input_grad, say).
WASTED_GRADIENT = "computes a gradient nobody needs"
WIDER_GRADIENT = "returns a wider gradient than its input"
REFUSED = "refuses values the checker made up"
NOT_GROWN = "inputs not grown"
BUFFER_UPDATED = "updates an argument it takes no gradient for"
FORWARD_PRECISION = "the forward's precision"
SUMMED_TO_SIZE = "a gradient autograd sums to its input's shape"
CONTRACT = "the values' contract kept"
REFUSED_FROZEN = "refuses an input frozen, which no caller does"
GRAPH_BREAK = "a graph break under torch.compile"
COMPILE_REFUSED = "torch.compile fails on the op"
NEEDS_A_GPU = "needs a GPU"
DRAWS_IN_BACKWARD = "draws random numbers in its backward"
MADE_PER_CALL = "a class made per call"
COMPLEX_PARTS = "complex values checked as their parts"
OTHER = "other"


# -- the outcomes a check returns --------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Finding:
    """A trap, with its evidence. input: the input whose gradient shows it (None: the op as a whole);
    error: the exception's type where the finding is a raise."""
    check: str
    trap: Trap
    evidence: str
    input: str = None
    error: str = None

    def __post_init__(self):
        if self.trap not in ALL_TRAPS:
            raise ValueError(f"unknown trap {self.trap!r}: add it to report.ALL_TRAPS")

    def __str__(self):
        return self.text()

    def text(self, book=True):
        """The trap and its evidence on one line, then what to do about it on a line of its own; with book, where
        the book teaches it (the chapter's readers), without it the fix alone (a library's suite, the plugin)."""
        where = f" (the book: {self.trap.section})" if book and self.trap.section else ""
        return f"  TRAP  {self.trap.name}: {self.evidence}\n{FIX}{self.trap.remedy}{where}"


FIX = "        fix: "
ALSO = "        also "


@dataclasses.dataclass(frozen=True)
class Note:
    """Legal, but worth knowing (wasted work, an input the op refuses loudly)."""
    check: str
    text: str
    kind: str = OTHER


@dataclasses.dataclass(frozen=True)
class Undecided:
    """A check that could not decide: finite differences too noisy, or another finding (because) that
    makes its comparison meaningless. Never a trap, never 'ok'."""
    check: str
    reason: str
    because: str = None   # the check whose finding stopped this one


@dataclasses.dataclass(frozen=True)
class Passed:
    check: str


@dataclasses.dataclass
class Report:
    """What check_backward found, in the order the checks ran. clean: no trap found; decided: no check
    left undecided. findings holds one Finding per trap (the first evidence, the clearest); every
    finding, with the check that made it, is in all_findings."""
    name: str
    outcomes: list = dataclasses.field(default_factory=list)
    checked: str = ""
    seconds: float = 0.0

    def add(self, outcome):
        if outcome not in self.outcomes:
            self.outcomes.append(outcome)

    def _of(self, kind):
        return [o for o in self.outcomes if isinstance(o, kind)]

    @property
    def all_findings(self):
        return self._of(Finding)

    @property
    def findings(self):
        first = {}
        for f in self.all_findings:
            first.setdefault(f.trap, f)
        return list(first.values())

    @property
    def traps(self):
        return [f.trap.name for f in self.findings]

    @property
    def clean(self):
        return not self.all_findings

    @property
    def undecided(self):
        return self._of(Undecided)

    @property
    def decided(self):
        return not self.undecided

    @property
    def inconclusive(self):
        return [f"{u.check}: {u.reason}" for u in self.undecided]

    @property
    def notes(self):
        return list(dict.fromkeys(n.text for n in self._of(Note)))

    def noted(self, kind):
        return [n.text for n in self._of(Note) if n.kind == kind]

    @property
    def passed(self):
        """The checks that passed, and never found a trap or left a verdict open on any inputs."""
        failed = {o.check for o in self.outcomes if isinstance(o, (Finding, Undecided))}
        return list(dict.fromkeys(p.check for p in self._of(Passed) if p.check not in failed))

    @property
    def headline(self):
        if self.findings:
            count = len(self.findings)
            return f"{count} trap{'s' if count > 1 else ''} found"
        if self.undecided:
            count = len({u.check for u in self.undecided})
            return (f"no trap found, but {count} check{'s' if count > 1 else ''} could not decide (the ?? "
                    f"line{'s' if count > 1 else ''}): not a clean bill")
        return "clean"

    def also(self, finding):
        """The same trap's findings for other inputs than finding's, each with its own evidence: a false alarm on
        one input never hides the bug on another."""
        seen = {finding.input}
        others = []
        for f in self.all_findings:
            if f.trap is finding.trap and f.input is not None and f.input not in seen:
                seen.add(f.input)
                others.append(f)
        return others

    def __str__(self):
        return self.text()

    def text(self, book=True):
        """The report in lines; book=False leaves out where the book teaches each trap (Finding.text)."""
        lines = [f"check_backward({self.name}): {self.headline}"]
        for finding in self.findings:
            lines.append(finding.text(book))
            lines += [f"{ALSO}{f.evidence}" for f in self.also(finding)]
        lines += [f"  note  {n}" for n in self.notes]
        lines += [f"  ??    {u}" for u in dict.fromkeys(self.inconclusive)]
        if self.passed:
            lines.append("  ok    " + ", ".join(self.passed))
        if self.checked:
            lines.append(f"  on    {self.checked} ({self.seconds:.1f} s)")
        return "\n".join(lines)
