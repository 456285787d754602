"""The report: the chapter's traps, each finding with its evidence, and what was checked."""
import dataclasses

# Each trap, with where the chapter (or the chapters around it) teaches it.
TRAPS = {
    "ignores grad_output": "17.1; Chapter 16's chain-rule bug",
    "assumes a uniform grad_output": "17.1 and 17.3: 2, 1 + 1 and 3 + 2 are all uniform",
    "assumes a single use": "17.3: two consumers' gradients arrive summed, in one call",
    "keeps state between calls": "17.3: never special-case 'the first time I'm called'",
    "mutates grad_output in place": "17.3: AddBackward0 hands both branches one tensor",
    "assumes a contiguous grad_output": "17.3: after .sum(), grad_output is a stride-0 view",
    "assumes grad_output is laid out like its input": "17.3: grad_output's layout is the graph's, not the input's",
    "assumes a contiguous input": "beyond the chapter: hardened_ops.py makes its inputs contiguous",
    "writes into an input or a saved tensor": "17.3: another consumer of the same tensor reads it too",
    "covers only part of a large input": "Chapter 16: every block of the grid, and the masked tail",
    "returns the wrong gradients": "Chapter 15: one gradient per input, each like its input",
    "a silently wrong second derivative": "Chapter 16: a kernel's output carries no graph",
    "a wrong formula": "Chapter 16",
    "crashes": "",
}


@dataclasses.dataclass
class Finding:
    trap: str
    evidence: str

    def __post_init__(self):
        if self.trap not in TRAPS:
            raise ValueError(f"unknown trap {self.trap!r}")

    def __str__(self):
        section = TRAPS[self.trap]
        return f"  TRAP  {self.trap}" + (f" [{section}]" if section else "") + f": {self.evidence}"


@dataclasses.dataclass
class Report:
    """What check_backward found. clean: no trap. notes: legal, but worth knowing (wasted work, say).
    inconclusive: checks that could not decide (finite differences too noisy, say), never a trap."""
    name: str
    findings: list = dataclasses.field(default_factory=list)
    passed: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    inconclusive: list = dataclasses.field(default_factory=list)
    checked: str = ""
    seconds: float = 0.0
    failed: set = dataclasses.field(default_factory=set, repr=False)

    @property
    def clean(self):
        return not self.findings

    @property
    def traps(self):
        return [f.trap for f in self.findings]

    def add(self, trap, evidence):
        """Records a finding, once per trap: the first evidence is the clearest (the given inputs)."""
        if trap not in self.traps:
            self.findings.append(Finding(trap, evidence))

    def ok(self, what):
        if what not in self.passed and what not in self.failed:
            self.passed.append(what)

    def fail(self, what):
        """A check that found a trap on some inputs is not 'ok', whatever other inputs showed."""
        self.failed.add(what)
        if what in self.passed:
            self.passed.remove(what)

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)

    def __str__(self):
        head = f"check_backward({self.name}): " + ("clean" if self.clean else f"{len(self.findings)} trap(s) found")
        lines = [head, *map(str, self.findings)]
        lines += [f"  note  {n}" for n in self.notes]
        lines += [f"  ??    inconclusive: {n}" for n in self.inconclusive]
        if self.passed:
            lines.append("  ok    " + ", ".join(self.passed))
        if self.checked:
            lines.append(f"  on    {self.checked} ({self.seconds:.1f} s)")
        return "\n".join(lines)
