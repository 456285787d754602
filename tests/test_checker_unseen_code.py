"""Right code the checker had never seen, and the bugs beside it (issue 56's classes), each case made here.

- A backward that samples by design (a structured-prediction library's sampled marginals): each call the checker
  compares is seeded alike, so it is no "keeps state between calls", and its gradient, a sample, is not read as "a
  wrong formula": the report says the backward draws random numbers, in those words.
- Round numbers that are no index (a covariance factor of tenths) are differenced like any other values: see
  test_checker_contracts.py, test_round_values_that_are_not_integers_are_differenced.
"""
import sys

import pytest
import torch
from chapter_scripts import REPO, seeded_randn

sys.path.insert(0, str(REPO / "practice"))
from backward_check.report import DRAWS_IN_BACKWARD  # noqa: E402
from backward_checker import check_backward  # noqa: E402


class SampledMarginals(torch.autograd.Function):
    """The log-partition of each row, logsumexp(scores); its backward returns a one-hot sample drawn from the
    row's softmax (Gumbel-max) in place of the softmax itself, as a sampling semiring does: right in expectation,
    and a sample each call."""
    @staticmethod
    def forward(ctx, scores):
        ctx.save_for_backward(scores)
        return scores.logsumexp(dim=-1)

    @staticmethod
    def backward(ctx, grad_output):
        scores, = ctx.saved_tensors
        gumbel = -torch.empty_like(scores).exponential_().log()
        sample = torch.nn.functional.one_hot((scores + gumbel).argmax(dim=-1), scores.shape[-1]).to(scores.dtype)
        return grad_output[..., None] * sample


class NoisyGradient(torch.autograd.Function):
    """x * 3, whose backward adds a little noise it draws, as a differentially private or a perturbed gradient
    does: the same draws every call the checker seeds alike."""
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 3 + 1e-3 * torch.randn_like(grad_output)


@pytest.mark.parametrize("shape", [(4, 6), (3, 37)])
def test_a_backward_that_samples_is_said_to_draw_random_numbers(shape):
    """Before, two identical calls drew apart, and the backward was named 'keeps state between calls', with
    advice to use ctx.save_for_backward. Now neither state nor a wrong formula: a note that it draws, and the
    comparisons said as a sample's distance."""
    scores = seeded_randn(*shape, seed=3)
    for reference in (None, lambda s: s.logsumexp(dim=-1)):
        report = check_backward(SampledMarginals, scores, reference=reference)
        assert report.traps == [], str(report)
        assert report.noted(DRAWS_IN_BACKWARD), str(report)
        assert any("draws random numbers, so its gradient is a sample" in line for line in report.inconclusive)


def test_a_deterministic_backward_draws_nothing():
    """The note is the backward's draws alone: a dropout draws in its forward, and its backward draws nothing."""
    x = seeded_randn(3, 5, seed=30)
    report = check_backward(NoisyGradient, x, reference=lambda t: t * 3)
    assert report.noted(DRAWS_IN_BACKWARD), str(report)
    quiet = type("Tripled", (torch.autograd.Function,), {
        "forward": staticmethod(lambda ctx, t: t * 3), "backward": staticmethod(lambda ctx, g: g * 3)})
    report = check_backward(quiet, x, reference=lambda t: t * 3)
    assert report.clean and report.decided and not report.noted(DRAWS_IN_BACKWARD), str(report)


def test_a_random_backward_with_a_write_into_grad_output_is_still_named():
    """Seeding alike hides no trap the draws do not decide: a sampling backward that scales grad_output in place
    is still named for it."""
    class SampledInPlace(torch.autograd.Function):
        @staticmethod
        def forward(ctx, scores):
            ctx.save_for_backward(scores)
            return scores.logsumexp(dim=-1)

        @staticmethod
        def backward(ctx, grad_output):
            scores, = ctx.saved_tensors
            sample = torch.nn.functional.one_hot(torch.multinomial(scores.softmax(-1), 1)[..., 0],
                                                 scores.shape[-1]).to(scores.dtype)
            doubled = grad_output.mul_(2.0)  # the write: a sibling reading grad_output sees it doubled
            return (doubled / 2)[..., None] * sample

    report = check_backward(SampledInPlace, seeded_randn(4, 6, seed=4))
    assert "mutates grad_output in place" in report.traps, str(report)
