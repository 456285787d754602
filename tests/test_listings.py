"""listings/ holds the book's four files byte for byte, and each script is its listing plus
only what running on a GPU or in Triton's interpreter needs, every such line commented.

The allowed additions (README.md, "Differences from the printed listings"): the PEP 723
header and a comment under it; the backend choice before `import triton`; `.to(DEVICE)`
where a listing draws its input; `.cpu()` on printed tensors; and 17.1.2's two x.grad prints.
"""
import difflib
import hashlib
import re

import pytest
from chapter_scripts import REPO, SCRIPT_NAMES

MOST_ADDED_OR_CHANGED = 40


def sha256sums():
    lines = (REPO / "listings/SHA256SUMS").read_text().splitlines()
    return {name: digest for digest, name in (line.split("  ") for line in lines)}


def test_the_checksums_cover_exactly_the_four_listings():
    assert sorted(sha256sums()) == sorted(f"{name}.py" for name in SCRIPT_NAMES)
    assert sorted(p.name for p in (REPO / "listings").glob("*.py")) == sorted(sha256sums())


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_each_listing_is_the_book_byte_for_byte(name):
    digest = hashlib.sha256((REPO / "listings" / f"{name}.py").read_bytes()).hexdigest()
    assert digest == sha256sums()[f"{name}.py"], f"listings/{name}.py is not the book's text any more"


def undo_allowed_change(line):
    """A changed line without its comment, .cpu() and the move to DEVICE: the printed line, if allowed."""
    code = line.split("  # ", 1)[0]
    code = code.replace(".cpu()", "")
    return re.sub(r"torch\.randn\((\d+)\)\.to\(DEVICE\)\.requires_grad_\(True\)", r"torch.randn(\1, requires_grad=True)",
                  code)


def differences(name):
    printed = (REPO / "listings" / f"{name}.py").read_text().splitlines()
    script = (REPO / f"{name}.py").read_text().splitlines()
    return printed, script, difflib.SequenceMatcher(a=printed, b=script, autojunk=False).get_opcodes()


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_each_script_is_its_listing_plus_commented_additions(name):
    printed, script, opcodes = differences(name)
    added_or_changed, problems = 0, []
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        if tag == "delete":
            problems.append(f"printed lines {i1 + 1}-{i2} were removed: {printed[i1:i2]}")
            continue
        new = script[j1:j2]
        added_or_changed += len(new)
        if tag == "replace":
            old = printed[i1:i2]
            if len(old) != len(new) or any(undo_allowed_change(n) != o for o, n in zip(old, new)):
                problems.append(f"printed lines {old} became {new}: not an allowed change")
            if not all("# changed" in n for n in new):
                problems.append(f"a changed line has no '# changed' comment: {new}")
            continue
        for line in new:  # inserted
            stripped = line.strip()
            if stripped and not stripped.startswith("#") and not re.search(r"  # (added|changed)\b", line):
                problems.append(f"an added line carries no '# added' comment: {line!r}")
    assert not problems, f"{name}.py against listings/{name}.py:\n" + "\n".join(problems)
    assert added_or_changed <= MOST_ADDED_OR_CHANGED, f"{name}.py adds or changes {added_or_changed} lines"


def test_the_line_counts_the_readme_gives():
    readme = (REPO / "README.md").read_text() + (REPO / "docs/differences.md").read_text()
    for name in SCRIPT_NAMES:
        _, script, opcodes = differences(name)
        count = sum(j2 - j1 for tag, _, _, j1, j2 in opcodes if tag != "equal")
        assert re.search(rf"`{name}\.py` \| {count} \|", readme), f"docs/differences.md should give {name}.py: {count}"
