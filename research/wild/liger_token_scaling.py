"""
Liger-Kernel's token-scaled fused loss: a gradient that holds its scale constant, by design
==========================================================================================

The only `reduction='none'` calls in Liger-Kernel's fused linear cross-entropy test file
(`test_correctness_token_scaling`) pass `use_token_scaling=True`: each row's loss is multiplied by the
predicted probability of its target, and that probability is a constant in the gradient (the test's own
reference detaches it: `pred_probs = softmax(logits).gather(...).detach()`). Finite differences see the
whole derivative, the scale's included, so against them that call is off in the buggy release (0.8.1) and the
fixed one (0.8.2) alike, for any grad_output. The checker tells them apart by comparing the op with itself
(0.8.1's gradient under a random grad_output is its own answer for grad_output[0] everywhere: "assumes a uniform
grad_output"; 0.8.2's is not: "a wrong formula", by design). This probe decides both against the gradient the
library means: the test's own reference, with the scale detached, under a grad_output of ones (what the test
backpropagates), a random one, and 2 everywhere, each on a call of its own.

    python research/wild/liger_token_scaling.py [--log PATH]     # both releases from .wild-suites
    python research/wild/liger_token_scaling.py --check          # and check_backward's verdict on the call

Each release runs in a process of its own (their modules share a name). Without a CUDA GPU the kernels run
in Triton's interpreter (TRITON_INTERPRET=1), which says what the code computes, not what a GPU does.

Exit status: 0 done; 2 a release is not downloaded (research/wild/suites.py --download).
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELEASES = ("0.8.1", "0.8.2")


def probe(site, check=False):
    """In this process, with site's liger_kernel first on the path: one line a grad_output."""
    import torch
    sys.path.insert(0, str(site))
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    rows, hidden, classes = 2 * 4, 8, 16  # the test's B * T, H, V
    x = torch.randn(rows, hidden, device=device, requires_grad=True)
    target = torch.randint(0, classes, (rows,), device=device)
    weight = torch.randn(classes, hidden, device=device)
    bias = torch.randn(classes, device=device)

    def loss():
        """The call as the test makes it: reduction 'none', use_token_scaling=True, the rest at their defaults. A
        fresh call for each grad_output: 0.8.1's backward scales what it saved in place, so a second backward over
        one graph would start from the first one's answer."""
        return LigerFusedLinearCrossEntropyFunction.apply(x, weight, target, bias, None, -100, 0.0, 0.0, "none",
                                                          None, False, None, True, False, False)[0]
    # The test's reference: cross entropy per row, times the target's probability, detached.
    logits = x @ weight.t() + bias
    per_row = torch.nn.functional.cross_entropy(logits, target, reduction="none")
    scale = torch.softmax(logits, dim=-1).gather(1, target[:, None]).squeeze(-1).detach()
    expected = per_row * scale
    for name, grad_output in (("ones (the test's)", torch.ones(rows, device=device)),
                              ("random", torch.randn(rows, device=device)),
                              ("2 everywhere", torch.full((rows,), 2.0, device=device))):
        got, = torch.autograd.grad(loss(), x, grad_output)
        want, = torch.autograd.grad(expected, x, grad_output, retain_graph=True)
        off = ((got - want).norm() / want.norm()).item()
        print(f"  grad_output {name:<18} the input's gradient {off:.3g} (relative) off the detached-scale reference")
    if check:  # the checker on the same call, as the plugin checks it: no reference, finite differences
        sys.path.insert(0, str(REPO / "backward-check"))
        from backward_check import check_backward
        report = check_backward(LigerFusedLinearCrossEntropyFunction, x, weight, target, bias, None, -100, 0.0, 0.0,
                                "none", None, False, None, True, False, False)
        print(f"  check_backward, no reference: {'; '.join(report.traps) or 'clean'}")
        for line in str(report).splitlines():
            if "TRAP  a wrong formula" in line or "TRAP  assumes a uniform grad_output" in line:
                print(f"    {line.strip()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", type=Path, help="also write the output here")
    parser.add_argument("--check", action="store_true", help="also check the call with check_backward, without a "
                                                                 "reference, as the pytest plugin does (minutes in the "
                                                                 "interpreter)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        probe(Path(options.child), options.check)
        return 0
    if options.log:  # refused now, not after the probes' minutes
        try:
            options.log.open("a").close()
        except OSError as error:
            parser.error(f"--log {options.log}: {error.strerror or error}")
    sites = {v: REPO / ".wild-suites" / f"liger-kernel-{v}" / "site" for v in RELEASES}
    missing = [str(s.relative_to(REPO)) for s in sites.values() if not s.is_dir()]
    if missing:
        print(f"liger_token_scaling.py: {', '.join(missing)} missing; run research/wild/suites.py --download first",
              file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO / "tools"))
    import stamp
    import torch
    environment = dict(os.environ)
    if not torch.cuda.is_available():
        environment["TRITON_INTERPRET"] = "1"
    where = torch.cuda.get_device_name() if torch.cuda.is_available() else "the CPU, in Triton's interpreter"
    lines = [*stamp.lines(), f"python {sys.version.split()[0]}, torch {torch.__version__}, on {where}",
             f"command: python research/wild/liger_token_scaling.py{' --check' if options.check else ''}"]
    for version, site in sites.items():
        done = subprocess.run([sys.executable, __file__, "--child", str(site), *(["--check"] if options.check else [])],
                              env=environment, capture_output=True, text=True, timeout=900, check=False)
        lines += [f"liger-kernel {version}:", *done.stdout.splitlines()]
        if done.returncode:
            lines.append(f"  the probe failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    print("\n".join(lines))
    if options.log:
        options.log.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
