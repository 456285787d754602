"""
Two checkers' costs side by side, from check_cost.py's logs
===========================================================

An A/B of two checkers (docs/check-cost.md): check_cost.py runs in turns over the other checker (B, with
`--checker DIR`) and this tree's (A), twice each, B A B A, with the same options. This reads the four logs and
says, for each size (elements of the op's first input, to the nearest power of ten, as check_cost.py's
--sizes), kind and mode (ref, fd, plugin), the check's seconds in each run, B / A in each round,
and each checker's A/A (its second run over its first). A difference counts only where B / A, in both rounds,
lies further from 1 than the larger A/A distance of the two checkers at that size (the same run's noise). The
op's own seconds are left out: both checkers time the same op, and its best-of-ten moves with the machine.

    python benchmarks/compare_check_cost.py B1.log A1.log B2.log A2.log [--out LOG]

Exit status: 0 done; 2 a log missing, not check_cost.py's or holding more than one run, the logs not of the same
sizes, kinds and modes or not of one device, or an --out that cannot be written.
"""
import argparse
import math
import re
import statistics
import sys
from pathlib import Path

KIND = re.compile(r"^(\w+) \(.*\), ([\d,]+) elements in ")
ROW = re.compile(r"^  (ref|fd|plugin)\s+([\d.]+) s\s+([\d,]+)x the op\s+(.*)$")
SUMMARY = re.compile(r"^summary on (.*?): ")


def seconds_of(path):
    """{(elements, kind, mode): (seconds, the row's last words)} from a check_cost.py log, its first line, and the
    device its summary names (None where it has no summary)."""
    rows, kind, elements = {}, None, None
    lines = path.read_text(errors="replace").splitlines()
    for line in lines:
        found = KIND.match(line)
        if found:
            kind, elements = found.group(1), int(found.group(2).replace(",", ""))
            continue
        found = ROW.match(line)
        if found and kind is not None:
            key = (elements, kind, found.group(1))
            if key in rows:  # an A/B's bundle, or logs pasted together: one run's rows only
                raise ValueError(f"{path}: holds more than one run ({kind} at {elements:,} elements twice); "
                                 f"give each run's own log")
            rows[key] = (float(found.group(2)), found.group(4))
    if not rows:
        raise ValueError(f"{path}: no check_cost.py rows in it")
    device = next((found.group(1) for found in map(SUMMARY.match, lines) if found), None)
    return rows, lines[0] if lines else "", device


def verdict(words):
    """A row's verdict: its last words after the op's calls ('clean', 'TRAP ...', 'undecided')."""
    return words.split("  ")[-1].strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs=4, type=Path, metavar="LOG", help="B1 A1 B2 A2, in the order they ran")
    parser.add_argument("--out", type=Path, help="also write the comparison here")
    options = parser.parse_args()
    try:
        runs = [seconds_of(p) for p in options.logs]
        out_file = options.out.open("w") if options.out else None
    except (OSError, ValueError) as error:
        print(f"compare_check_cost.py: {error}", file=sys.stderr)
        return 2
    (b1, b1_head, _), (a1, a1_head, _), (b2, _, _), (a2, _, _) = runs
    devices = {device for *_, device in runs if device is not None}  # a run cut short has no summary line
    if len(devices) > 1:
        print(f"compare_check_cost.py: the logs were made on different devices ({'; '.join(map(str, devices))}): "
              f"an A/B times both checkers on one machine", file=sys.stderr)
        return 2
    keys = sorted(set(a1) & set(a2) & set(b1) & set(b2))
    every = set(a1) | set(a2) | set(b1) | set(b2)
    if not keys or len(keys) != len(every):
        apart = sorted(every - set(keys))
        print("compare_check_cost.py: " + ("the four logs share no size, kind and mode" if not keys else
              f"the four logs are not of the same sizes, kinds and modes ({len(apart)} row(s) in some logs only, as "
              f"{apart[0][1]} {apart[0][2]} at {apart[0][0]:,} elements): run check_cost.py with the same options"),
              file=sys.stderr)
        return 2
    out = [f"B: {b1_head}", f"A: {a1_head}",
           f"logs, in the order they ran: {', '.join(p.name for p in options.logs)}",
           "seconds of one check; B / A per round; each checker's A/A (second run / first)",
           f"  {'size':>6} {'kind':<10} {'mode':<6} {'B1':>8} {'A1':>8} {'B2':>8} {'A2':>8}   {'B/A':>11}   "
           f"{'A/A of B':>8} {'A/A of A':>8}  verdicts"]
    by_size = {}
    for elements, kind, mode in keys:
        s = [run[(elements, kind, mode)][0] for run in (b1, a1, b2, a2)]
        if min(s) <= 0:
            continue
        ratios = (s[0] / s[1], s[2] / s[3])
        controls = (s[2] / s[0], s[3] / s[1])
        verdicts = {verdict(run[(elements, kind, mode)][1]) for run in (b1, a1, b2, a2)}
        by_size.setdefault(round(math.log10(elements)), []).append((kind, mode, ratios, controls))
        out.append(f"  {elements:>6.0e} {kind:<10} {mode:<6} {s[0]:8.3f} {s[1]:8.3f} {s[2]:8.3f} {s[3]:8.3f}   "
                   f"{ratios[0]:5.2f} {ratios[1]:5.2f}   {controls[0]:8.2f} {controls[1]:8.2f}  "
                   + (next(iter(verdicts)) if len(verdicts) == 1 else "DIFFER: " + " / ".join(sorted(verdicts))))
    out.append("per size: the median B / A over kinds and modes, and how many rows show a difference (B / A further "
               "from 1 in both rounds than the size's largest A/A distance)")
    for power, rows in sorted(by_size.items()):
        spread = max(abs(c - 1) for *_, controls in rows for c in controls)
        median = statistics.median(r for *_, ratios, _ in rows for r in ratios)
        faster = sum(all(r - 1 > spread for r in ratios) for *_, ratios, _ in rows)
        slower = sum(all(1 - r > spread for r in ratios) for *_, ratios, _ in rows)
        out.append(f"  {10.0 ** power:>6.0e}: B / A median {median:.2f}; A/A spread {spread:.2f}; A faster beyond it in "
                   f"{faster} of {len(rows)} rows, slower in {slower}")
    text = "\n".join(out)
    print(text)
    if out_file:
        with out_file:
            out_file.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
