"""The case families' claims (tests/checker_zoo_families.py) come from probes made without the checker
(tests/checker_zoo_families_probes.py): every legal family is right in every dtype and scale it takes, at a size
under one block and one past several; every planted family shows exactly its bug there. And the probes have
teeth: each planted family fails the legal probe, on an input past one block (a layout's bug, with grad_output laid
out as autograd hands it on)."""
import pytest
from checker_zoo_families import BLOCK, FAMILIES, LAID_OUT_LIKE_INPUT, numel, shapes_for
from checker_zoo_families_probes import every_other, probe_family, probe_legal

from chapter_scripts import DEVICE  # noqa: F401  (the backend is chosen before the families' kernels run)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_each_family_is_what_its_probe_shows(name):
    assert probe_family(name)


@pytest.mark.parametrize("name", [n for n, f in FAMILIES.items() if not f.legal])
def test_a_planted_family_fails_the_legal_probe(name):
    fam = FAMILIES[name]
    shape = max((s for s in shapes_for(fam) if numel(s) > BLOCK), key=numel)
    dtype = fam.dtypes[0]
    case = fam.make(shape, dtype, 0, 1.0)
    laid_out = LAID_OUT_LIKE_INPUT in fam.traps and case.args[0].is_contiguous()
    with pytest.raises(AssertionError):  # a layout's bug, under the layout autograd hands on (1-D: torch.stack's)
        probe_legal(fam, case, dtype, lay=every_other if laid_out else None)


def test_every_family_declares_a_consistent_claim():
    for fam in FAMILIES.values():
        assert fam.legal == (not fam.traps), fam.name
        assert fam.undecided_ok == "" or fam.legal, f"{fam.name}: only a legal family may allow a ?? line"
        assert shapes_for(fam), f"{fam.name} takes no tabled shape"
