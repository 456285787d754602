"""The blind zoo's truth (tests/checker_zoo_blind.py) comes from a direct probe of each case, never from the
checker: a legal case is right under non-uniform, non-contiguous grad_outputs and frozen inputs, against its
reference and gradcheck; a planted bug shows, provoked by hand (tests/checker_zoo_blind_probes.py)."""
import pytest
from checker_zoo_blind import BLIND_LEGAL, BLIND_PLANTED
from checker_zoo_blind_probes import all_probes

PROBES = all_probes()


@pytest.mark.parametrize("case", sorted(BLIND_LEGAL) + sorted(BLIND_PLANTED))
def test_each_blind_case_is_what_its_probe_shows(case):
    assert case in PROBES, f"{case} has no probe"
    assert PROBES[case](), case
