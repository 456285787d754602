"""Which recorded calls the pytest plugin checks, and when: each call with a new signature waits, with copies of
its arguments, and is ranked by what its check could reveal that the op's checks so far could not (its tier):

    0  the op's first call
    1  an output of a rank not yet checked at its place: a loss per row (reduction='none') after scalar ones, whose
       grad_output is one number and so can hide no uniform, strided or broadcast grad_output's trap
    2  a value of a non-tensor argument not yet checked at its place ('none' after 'sum' and 'mean', a flag, None
       where a tensor went, a number: recording.number_key), or a tensor where None went
    3  a dtype not yet checked at its place
    4  a rank, a layout, a requires-grad pattern, or a container's length not yet checked
    5  a combination of what was checked

After each test, its calls of tiers 0 to 2 are checked, best first, while the time budget lasts (so that =fail
fails the test that made the call), a call of tier 1 or 2 only while half the budget is left for the ops the suite
has yet to call; the rest wait for the session's end, where every call still waiting is checked best first
while the budget lasts: every op's first call, then each op's most revealing call, the ops checked least first. A
check is taken only where the op's checks so far say it fits (at the session's end, a smaller call by its share of
their time), and among calls that bring as much, the one expected to cost least goes first. A
call's tier is taken again before each pick, against what has been checked by then, so the second call that
brings 'none' goes after every other call that brings something new. Checking the lower tiers at the end, not
after their test, ranks them against the whole suite's calls: a dtype that the first test brought does not take
the place of a value that the last test brings.

The budget is the plugin's own seconds (its copies, its worker's start, its checks) against the suite's: at most
factor times the suite's own seconds so far (the wall clock since pytest configured the plugin, through collection,
imports, fixtures and tests, less the plugin's seconds: the time a run without the plugin takes), and at least a
floor, so that a suite of a few seconds is checked too. The copies waiting are held within a number of bytes: past
it, the copies of the least revealing call (by the same rank: the costliest, then the latest among equals) are
dropped first, and the
table counts them.
"""
import bisect
import collections
import dataclasses
import itertools
import math
import time
import typing

FIRST, OUTPUT, VALUE, DTYPE, SHAPE, COMBINATION = range(6)
CHECKED_AFTER_ITS_TEST = (FIRST, OUTPUT, VALUE)   # the other tiers wait for the session's end
TIER_WORDS = {FIRST: "first call of the op", OUTPUT: "with an output of a new rank", VALUE: "with a new value",
              DTYPE: "with a new dtype", SHAPE: "with a new rank, layout or requires-grad pattern",
              COMBINATION: "combining values already checked"}
# The kind of each feature (the first word of its name), and the tier a feature of that kind not yet checked
# gives a call.
TIER_OF_KIND = {"output": OUTPUT, "value": VALUE, "dtype": DTYPE, "shape": SHAPE}

# Why a call with a new signature was not checked. INTERRUPTED: still waiting, or in its check, when the run was
# interrupted (^C, a deadline's signal, pytest.exit, a test's timeout during the check), after its test or during
# the session's end checks.
BUDGET, MEMORY, LIMIT, ELSEWHERE, INTERRUPTED = "time budget", "memory", "limit", "another worker", "interrupted"

# The plugin's seconds are at most this many times the suite's own, by default: the whole run about twice the
# suite's time.
BUDGET_FACTOR = 1.0
# ... and at least this many seconds: the worker's start (importing torch, a few seconds) and some tens of checks
# of small ops, so that a suite of a few seconds is checked too, on a loaded machine as well (at 20 s, the plugin's
# own tests missed the bugs they plant on an H200 that ran the repository's other GPU checks beside them: a check of
# a tiny op there took 9 s).
BUDGET_FLOOR_SECONDS = 60.0
MEMORY_MIB = 2048  # the copies waiting for their check, at most (divided among pytest-xdist's workers)
# The share of the budget a check after its test leaves for ops first called later, unless it is an op's first
# call: an early file's many new values would otherwise spend the budget before the last file's ops are called.
# Half: a check that starts runs to its end, and a later op's first check takes longer than its later ones; the
# values left waiting are checked at the session's end, ranked across ops, with what the first calls left.
RESERVE_FOR_FIRST_CALLS = 0.5
# A call far smaller than an op's checks so far is expected to take its share of their time by size, and at least
# this share: Liger-Kernel's fused loss file checks 'mean' on 1,024 rows of 4,096 classes (15-27 s a check on an
# H100), and its only 'none' calls, 8 rows of 16 classes, come last, where a check of the large size no longer fit
# in what was left of the budget, and the small one was never tried.
SMALLEST_SHARE = 0.05


def features(signature):
    """What a call's signature shows of it, place by place: 'value reduction: 'none'', 'dtype 0: float32',
    'shape 0: 2-d'. A call whose every feature was checked before is a combination of them."""
    positional, keywords = signature
    found = set()
    for place, entry in [*((str(i), e) for i, e in enumerate(positional)), *keywords]:
        _features_of(entry, place, found)
    return frozenset(found)


def output_features(result):
    """What a call's result shows of it: 'output 0: 0-d' for each floating-point tensor it returned (a tuple's
    place by place). Learned once the test's own call returns (recording.Recorder), and added to the call's features:
    the signature holds the arguments alone."""
    import torch
    outputs = result if isinstance(result, (tuple, list)) else (result,)
    return frozenset(f"output {i}: {o.dim()}-d" for i, o in enumerate(outputs)
                     if isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex()))


def _features_of(entry, place, found):
    kind, *rest = entry
    if kind == "tensor":
        dtype, rank, layout, wants_grad = rest
        found |= {f"value {place}: a tensor", f"dtype {place}: {dtype}", f"shape {place}: {rank}-d",
                  f"shape {place}: {layout}", f"shape {place}: {'wants' if wants_grad else 'no'} grad"}
    elif kind in ("list", "tuple", "dict"):
        items, = rest
        found.add(f"shape {place}: a {kind} of {len(items)}")
        for key, item in items:
            _features_of(item, f"{place}.{key}", found)
    else:  # "value", "number" (its kind and key), "type"
        found.add(f"value {place}: " + " ".join(map(repr, rest)))


def tier(call_features, covered):
    """The call's tier against the features of the op's calls checked so far (None: none checked yet)."""
    if covered is None:
        return FIRST
    new = call_features - covered
    return min((TIER_OF_KIND[f.split(" ", 1)[0]] for f in new), default=COMBINATION)


@dataclasses.dataclass
class Budget:
    """The plugin's seconds against the suite's. factor None: no limit (--backward-check-budget=all). clock: the
    wall clock (a test's own, to hold the suite's time still). plugin_seconds: the plugin's own seconds so far, read
    from their one owner (the session's recorder and checks) whenever the budget is asked, never written here."""
    factor: float = BUDGET_FACTOR
    floor: float = BUDGET_FLOOR_SECONDS
    plugin_seconds: typing.Callable[[], float] = lambda: 0.0
    clock: typing.Callable[[], float] = time.perf_counter
    started: float = None        # the clock when the session began (default: now)

    def __post_init__(self):
        if self.started is None:
            self.started = self.clock()

    @property
    def spent(self):
        """The plugin's seconds so far."""
        return self.plugin_seconds()

    @property
    def suite_seconds(self):
        """The suite's own seconds so far: the wall clock since the session began, less the plugin's. (Not the
        tests' calls alone: a GPU suite spends most of its time importing, compiling and collecting.)"""
        return max(0.0, self.clock() - self.started - self.spent)

    @property
    def seconds(self):
        return math.inf if self.factor is None else max(self.floor, self.factor * self.suite_seconds)

    def allows(self, expected=0.0, reserve=0.0):
        """Whether a check expected to take `expected` seconds fits in what is left, less a share `reserve` of the
        budget kept for other checks."""
        seconds = self.seconds * (1.0 - reserve)
        return self.spent < seconds and self.spent + expected <= seconds


class Selection:
    """The calls waiting for their check, and what the op's checks so far have covered. others: a callable that
    returns [(op name, features)] of the calls other processes have checked since it was last called (pytest-xdist's
    workers), or None."""

    def __init__(self, budget, memory_bytes, limit=None, others=None):
        self.budget, self.memory_bytes, self.limit, self.others = budget, memory_bytes, limit, others
        self.waiting = []                         # RecordedCall with copies, in the order they were made
        self.held_bytes = 0
        self.covered = {}                         # op name: the features of its calls checked
        self.checked = collections.Counter()      # op name: calls checked in this process
        self.checked_anywhere = collections.Counter()  # op name: calls checked here or by another process
        self.check_seconds = {}                   # op name: [(seconds, its copies' bytes) of each check here]
        self._sized = {}                          # op name: its checks by size (_size_checks)
        self.left_out = {}                        # op name: {signature key: (why, its tier then)}
        self._order = itertools.count()

    # -- ranking ----------------------------------------------------------------------------------

    def tier(self, call):
        return tier(call.features, self.covered.get(call.name))

    def _rank(self, call):
        """Ops' first calls first; then each op's most revealing call, the ops checked least so far first (one
        op's many new values do not go before another op's second signature); among equals the one expected to
        cost least (a small call before a large one that brings as much), then the earliest."""
        tier = self.tier(call)
        return (tier != FIRST, self.checked_anywhere[call.name], tier,
                self.expected_seconds(call.name, call.nbytes), call.order)

    def _catch_up(self):
        for op, seen in (self.others() if self.others else ()):
            self.covered.setdefault(op, set()).update(seen)
            self.checked_anywhere[op] += 1

    # -- recording's side ---------------------------------------------------------------------------

    def offer(self, call, copy):
        """Keeps the call, with copy()'s copies of its arguments, where the memory allows it, dropping the copies
        of lower-ranked calls to make room; or counts it left out."""
        self._catch_up()
        call.order, call.features = next(self._order), features(call.signature)
        if self.limit is not None and self.checked[call.name] >= self.limit:
            return self._leave_out(call, LIMIT)
        if self.held_bytes + call.nbytes > self.memory_bytes:  # ranked only then: thousands may be waiting
            rank = self._rank(call)
            below = sorted((c for c in self.waiting if self._rank(c) > rank), key=self._rank, reverse=True)
            if self.held_bytes - sum(c.nbytes for c in below) + call.nbytes > self.memory_bytes:
                return self._leave_out(call, MEMORY)
            while self.held_bytes + call.nbytes > self.memory_bytes:
                self._drop(below.pop(0), MEMORY)
        call.args, call.kwargs = copy()
        self.waiting.append(call)
        self.held_bytes += call.nbytes

    def withdraw(self, call):
        """Takes back a call offered whose own run raised: out of the queue (its copies freed) or out of what was
        counted left out; never checked, never counted."""
        held = [k for k, c in enumerate(self.waiting) if c is call]
        if held:
            del self.waiting[held[0]]
            self.held_bytes -= call.nbytes
            call.args = call.kwargs = None
        elif call.name in self.left_out:
            self.left_out[call.name].pop(call.key, None)

    def _leave_out(self, call, why):
        self.left_out.setdefault(call.name, {})[call.key] = why, self.tier(call)

    def _drop(self, call, why):
        self.waiting.remove(call)
        self.held_bytes -= call.nbytes
        call.args = call.kwargs = None
        self._leave_out(call, why)

    # -- the checks' side ---------------------------------------------------------------------------

    def expected_seconds(self, op, nbytes=None):
        """What a check of op is expected to take: the mean of its checks so far after the first, or the first's
        (0 before it). The first check of an op compiles what the checker's calls need that the suite's did not
        (other layouts, float64), often most of its time; the later ones find it compiled. nbytes: the call's copies.
        A call no larger than some of those checks is expected to take its share by size of what the nearest in
        size of them took (their mean), at least SMALLEST_SHARE of it (a check has costs no size removes); a call
        larger than all of them, what the largest of them took. (The ranking asks for every call waiting, so the
        sizes are kept sorted, with their means, as each check ends: _sized.)"""
        entry = self._sized.get(op)
        if entry is None:
            return 0.0
        sizes, means, overall = entry
        if nbytes is None:
            return overall
        k = bisect.bisect_left(sizes, nbytes)
        if k == len(sizes):
            return means[-1]
        return means[k] * max(SMALLEST_SHARE, nbytes / sizes[k]) if sizes[k] > 0 else means[k]

    def _size_checks(self, op):
        """The op's checks after the first (or the first alone), by size: the sizes sorted, each one's mean
        seconds, and the mean of all of them."""
        checks = self.check_seconds[op]
        later = checks[1:] or checks
        by_size = collections.defaultdict(list)
        for seconds, nbytes in later:
            by_size[nbytes].append(seconds)
        sizes = sorted(by_size)
        self._sized[op] = (sizes, [sum(by_size[b]) / len(by_size[b]) for b in sizes],
                           sum(s for s, _ in later) / len(later))

    def next_call(self, test=None):
        """The waiting call to check next, taken out of the queue (its copies are the caller's now), or None.
        test: after that test, only its own calls, of the tiers CHECKED_AFTER_ITS_TEST (the rest wait for the
        session's end); None: at the session's end, any. Ranked by _rank; a call its op's earlier checks say will
        not fit in the budget is passed over, and after its test, a call that is not its op's first leaves
        RESERVE_FOR_FIRST_CALLS of the budget to the ops the suite has yet to call."""
        self._catch_up()
        candidates = sorted((c for c in self.waiting if test is None or c.test == test), key=self._rank)
        for call in candidates:
            tier = self.tier(call)
            if test is not None and tier not in CHECKED_AFTER_ITS_TEST:
                continue
            if self.limit is not None and self.checked[call.name] >= self.limit:
                self._drop(call, LIMIT)
                continue
            reserve = RESERVE_FOR_FIRST_CALLS if test is not None and tier != FIRST else 0.0
            # after its test, a call fits by what the op's checks took, whatever its size: a check's time follows
            # more than its bytes (an ODE solver's method and tolerance), and the reserve is for ops not yet
            # called; at the session's end, where nothing more is coming, a smaller call by its share of that
            nbytes = call.nbytes if test is None else None
            if self.budget.allows(self.expected_seconds(call.name, nbytes), reserve):
                self.waiting.remove(call)
                self.held_bytes -= call.nbytes
                return call
        return None

    def checked_here(self, call, seconds):
        """The call was checked here: what it covers is covered, and its time counts toward its op's."""
        self.covered.setdefault(call.name, set()).update(call.features)
        self.checked[call.name] += 1
        self.checked_anywhere[call.name] += 1
        self.check_seconds.setdefault(call.name, []).append((seconds, call.nbytes))
        self._size_checks(call.name)
        call.args = call.kwargs = None

    def checked_elsewhere(self, call):
        """Another worker claimed the call's signature first (it checks it)."""
        self._leave_out(call, ELSEWHERE)
        call.args = call.kwargs = None

    def interrupted(self, call):
        """The run was interrupted while the call (taken out of the queue) was being checked: it is left out as
        interrupted, with the calls still waiting."""
        self._leave_out(call, INTERRUPTED)
        call.args = call.kwargs = None

    def give_up(self, why=BUDGET):
        """At the session's end, once nothing more fits in the budget (or, why=INTERRUPTED, where the run was
        interrupted, during the tests or the session's end checks): every call still waiting is left out."""
        while self.waiting:
            self._drop(self.waiting[-1], why)
