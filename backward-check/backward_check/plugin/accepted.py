"""The pytest plugin's file of accepted findings: the traps a library keeps by design, by op, each with the reason,
as opcheck's failures_dict.json keeps its expected failures:

    {"mylib.ops.FusedCE": {"writes into an input or a saved tensor": "the gradient is written into the logits, to
     save memory; the logits are never used again"}}

The older shape, a list of trap names an op ({"mylib::gelu": ["ignores grad_output"]}), is read too, as traps
accepted without a reason. --backward-check-accept writes the file from a run, in the newer shape: the reasons
already given are kept, and a trap accepted for the first time gets REASON_WANTED, for the author to replace.
"""
import difflib
import json

from ..report import TRAPS

REASON_WANTED = "why is this by design? (replace this with the reason)"
SHAPE = ('an object of op names, each with an object of trap names and the reason each is by design: '
         '{"mylib.ops.FusedCE": {"writes into an input or a saved tensor": "the gradient goes into the logits, to '
         'save memory"}} (or a list of trap names: {"mylib::gelu": ["ignores grad_output"]})')


class AcceptedFileError(ValueError):
    """The file is not one the plugin can read; the message says where and what it expected."""


def _unknown_traps(names):
    """Each name that is no trap's, with the nearest trap's name where there is one."""
    hints = []
    for name in names:
        if name not in TRAPS:
            close = difflib.get_close_matches(name, list(TRAPS), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return hints


def parse(text, where):
    """{op: {trap: reason}} from the file's text; AcceptedFileError naming `where` when it cannot be read."""
    try:
        accepted = json.loads(text or "{}")
    except ValueError as error:
        raise AcceptedFileError(f"{where}: cannot read it as JSON ({error})") from None
    if not isinstance(accepted, dict):
        raise AcceptedFileError(f"{where}: expected {SHAPE}")
    read = {}
    for op, traps in accepted.items():
        if isinstance(traps, list) and all(isinstance(t, str) for t in traps):
            traps = dict.fromkeys(traps, "")
        if not isinstance(traps, dict) or not all(isinstance(r, str) for r in traps.values()):
            raise AcceptedFileError(f"{where}: {op!r} holds {traps!r}; expected {SHAPE}")
        unknown = _unknown_traps(traps)
        if unknown:
            raise AcceptedFileError(f"{where}: {op!r} lists {', '.join(unknown)}, which the checker has no trap of; "
                                    f"its traps are " + ", ".join(map(repr, TRAPS)))
        read[op] = dict(traps)
    return read


def parse_named(pairs):
    """[(op, trap or None)] from --backward-check-accept-only's values ("op=trap name", or "op" for every trap of
    op's); AcceptedFileError where a trap's name is no trap's."""
    named = []
    for pair in pairs:
        op, _, trap = (p.strip() for p in pair.partition("="))
        if not op:
            raise AcceptedFileError(f"{pair!r} names no op; write op=trap name, e.g. "
                                    f"'mylib.ops.FusedCE=writes into an input or a saved tensor'")
        unknown = _unknown_traps([trap]) if trap else []
        if unknown:
            raise AcceptedFileError(f"{pair!r} names {unknown[0]}, which the checker has no trap of; its traps are "
                                    + ", ".join(map(repr, TRAPS)))
        named.append((op, trap or None))
    return named


def without_reason(accepted):
    """[(op, trap)] accepted with no reason written yet."""
    return [(op, trap) for op, traps in accepted.items() for trap, reason in traps.items()
            if not reason.strip() or reason == REASON_WANTED]


def rewritten(accepted, found, decided, named=None):
    """The accepted traps after a run: found {op: [traps it showed]}, decided: the ops the run could check.
    Without named, each op decided lists what it showed (ops not decided keep their entries); with named
    [(op, trap or None)], only those pairs the run found are added, and nothing else changes. Reasons already
    written are kept. Returns (the new {op: {trap: reason}}, [(op, trap)] named but not found)."""
    new = {op: dict(traps) for op, traps in accepted.items()}
    missing = []
    if named is None:
        for op in decided:
            if found.get(op):
                new[op] = {t: accepted.get(op, {}).get(t) or REASON_WANTED for t in found[op]}
            else:
                new.pop(op, None)
        return new, missing
    for op, trap in named:
        shown = [t for t in found.get(op, ()) if trap is None or t == trap]
        if not shown:
            missing.append((op, trap))
        for t in shown:
            new.setdefault(op, {})[t] = accepted.get(op, {}).get(t) or REASON_WANTED
    return new, missing


def dumped(accepted):
    return json.dumps({op: accepted[op] for op in sorted(accepted)}, indent=2) + "\n"
