"""
The backward checker beside gradcheck and opcheck, on the same code
===================================================================

Runs three tools over the checker's zoos (tests/checker_zoo*.py, the blind one among them): every
planted bug, which each tool should flag (the checker with exactly its traps), and the legal code,
which none should. The tools:

  checker    practice/backward_checker.py's check_backward, with the case's torch reference (and,
             for the third zoo, without one: finite differences), and the seconds it took
  gradcheck  torch.autograd.gradcheck on float64 copies of the inputs, its defaults
  opcheck    torch.library.opcheck, on the cases that are also registered here as custom ops
             (torch.library.custom_op with register_autograd); elsewhere it does not apply

    python research/checker_vs_gradcheck.py            # a Markdown table on stdout
    python research/checker_vs_gradcheck.py --log FILE # and a log naming the tree

Exit status: 0 when the checker flags every planted bug with its trap and no legal case,
1 otherwise, 2 on a usage error.
"""
import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "practice"), str(REPO / "tools")]
import stamp  # noqa: E402
from backward_checker import BACKEND, check_backward  # noqa: E402  (picks the backend first)
from backward_check.calling import Op  # noqa: E402

import torch  # noqa: E402
from checker_zoo import LEGAL, LEGAL_WITHOUT_REFERENCE, dgelu  # noqa: E402
from checker_zoo_blind import BLIND_ALSO, BLIND_LEGAL, BLIND_PLANTED  # noqa: E402
from checker_zoo_planted import MULTIPLE, PLANTED  # noqa: E402


def float64(value):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().double().requires_grad_(True)
    return value


def gradcheck_verdict(op, args, kwargs):
    """gradcheck on float64 copies, every argument bound to the forward's signature, as the checker binds it."""
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in ("no_grad", "second_order")}  # the checker's
    options.pop("second_order", None)
    bound = Op(op, args, kwargs, **options)
    call = op.apply if isinstance(op, type) else op
    positional = [s for s in bound.slots if not isinstance(s.key, str)]
    keywords = [s for s in bound.slots if isinstance(s.key, str)]
    slots = positional + keywords
    values = [float64(s.value) if bound.slots.index(s) in bound.inputs else
              (s.value.detach().double() if isinstance(s.value, torch.Tensor) and s.value.is_floating_point()
               else s.value) for s in slots]

    def f(*values):
        return call(*values[:len(positional)], **{s.key: v for s, v in zip(keywords, values[len(positional):])})

    try:
        torch.autograd.gradcheck(f, values, raise_exception=True)
        return "passes"
    except Exception as error:  # noqa: BLE001  (gradcheck's failure is its verdict)
        first = " ".join(str(error).split())[:70]
        return f"fails ({type(error).__name__}: {first})"


# -- three planted bugs as custom ops, where opcheck applies -------------------------------

def custom_ops():
    """{case: custom op} for three planted bugs, registered with torch.library.custom_op."""
    if not hasattr(torch.library, "custom_op"):
        return {}
    ops = {}

    @torch.library.custom_op("checker_zoo::row_loss_first_scale", mutates_args=())
    def row_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return -torch.log_softmax(logits, dim=-1).gather(1, target[:, None]).squeeze(1)

    @row_loss.register_fake
    def _(logits, target):
        return logits.new_empty(logits.shape[0])

    def row_loss_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def row_loss_backward(ctx, grad_output):
        logits, target = ctx.saved_tensors
        grad = torch.softmax(logits, dim=-1)
        grad[torch.arange(len(target), device=target.device), target] -= 1.0
        return grad * grad_output[0], None  # BUG: grad_output[:, None]

    row_loss.register_autograd(row_loss_backward, setup_context=row_loss_setup)
    ops["a row loss scaled by grad_output[0] (Liger-Kernel#584)"] = row_loss

    @torch.library.custom_op("checker_zoo::cross_entropy_writes_logits", mutates_args=())
    def writes_logits(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits, dim=-1)
        loss = -logp.gather(1, target[:, None]).squeeze(1)
        logits.copy_(logp.exp())  # BUG: the schema says nothing is mutated
        return loss

    @writes_logits.register_fake
    def _(logits, target):
        return logits.new_empty(logits.shape[0])

    def writes_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def writes_backward(ctx, grad_output):
        softmax, target = ctx.saved_tensors
        grad = softmax.clone()
        grad[torch.arange(len(target), device=target.device), target] -= 1.0
        return grad * grad_output[:, None], None

    writes_logits.register_autograd(writes_backward, setup_context=writes_setup)
    ops["forward writes into its logits (Liger-Kernel cross-entropy)"] = writes_logits

    @torch.library.custom_op("checker_zoo::gelu_mul_on_grad_output", mutates_args=())
    def gelu(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x)

    @gelu.register_fake
    def _(x):
        return torch.empty_like(x)

    def gelu_setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def gelu_backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output.mul_(dgelu(x))  # BUG: writes into grad_output

    gelu.register_autograd(gelu_backward, setup_context=gelu_setup)
    ops["mul_ on grad_output"] = gelu
    return ops


def opcheck_verdict(custom, args):
    try:
        torch.library.opcheck(custom, tuple(float64(a) if isinstance(a, torch.Tensor) else a for a in args))
        return "passes"
    except Exception as error:  # noqa: BLE001
        return f"fails ({type(error).__name__}: {' '.join(str(error).split())[:70]})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--log", type=Path, help="also write the table, with the tree and versions, here")
    args = parser.parse_args(argv)
    if args.log:  # refused now, not after the run
        try:
            args.log.open("a").close()
        except OSError as error:
            parser.error(f"--log {args.log}: {error.strerror or error}")
    ops = custom_ops()
    rows, misses = [], 0
    without_reference = {case: (op, a, k, None) for case, (op, a, k) in LEGAL_WITHOUT_REFERENCE.items()}
    multiple = {case: (op, a, k, r, tuple(sorted(traps))) for case, (op, a, k, r, traps) in MULTIPLE.items()}
    blind_planted = {case: (op, a, {**o, **k}, r, tuple(sorted((t, *BLIND_ALSO.get(case, ())))))
                     for case, (op, a, k, r, o, t) in BLIND_PLANTED.items()}
    blind_legal = {case: (op, a, {**o, **k}, r) for case, (op, a, k, r, o) in BLIND_LEGAL.items()}
    zoos = (("planted", {c: (*e[:4], (e[4],)) for c, e in PLANTED.items()}), ("several traps", multiple),
            ("planted blind", blind_planted), ("legal", LEGAL), ("legal blind", blind_legal),
            ("legal, no reference", without_reference))
    for kind, zoo in zoos:
        for case, entry in zoo.items():
            op, call_args, kwargs, reference = entry[:4]
            want = entry[4] if len(entry) > 4 else None
            report = check_backward(op, *call_args, reference=reference, **kwargs)
            ok = tuple(sorted(report.traps)) == want if want else report.clean
            misses += not ok
            checker = ", ".join(report.traps) or "clean"
            opcheck = opcheck_verdict(ops[case], call_args) if case in ops and kind == "planted" else "does not apply"
            rows.append(f"| {kind} | {case} | {checker}{'' if ok else ' (WRONG)'} | {report.seconds:.1f} | "
                        f"{gradcheck_verdict(op, call_args, dict(kwargs))} | {opcheck} |")
    head = [*stamp.lines(), f"torch {torch.__version__}, {BACKEND}", "",
            "| zoo | case | checker | checker's seconds | gradcheck | opcheck |", "|---|---|---|---|---|---|"]
    text = "\n".join(head + rows) + f"\n\n{misses} case(s) where the checker is wrong\n"
    print(text)
    if args.log:
        args.log.write_text(text)
    return 1 if misses else 0


if __name__ == "__main__":
    status = main()
    # Leave without tearing the interpreter down: the autograd engine's device threads, which call into the
    # Python backwards checked here, can abort the process during that teardown (pytorch/pytorch#38228; seen
    # on an H200: "terminate called without an active exception", exit 134, after every report was out).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
