"""
Chapter 17's self-check questions, answered by running code
===========================================================

For each of the chapter's five questions: read it, predict the answer, then let the
code print the evidence. ``python practice/self_check.py`` runs all five;
``python practice/self_check.py 4`` runs one. With ``--predict`` it asks for your
prediction first, then shows it beside the evidence and says whether it matched the
chapter's answer (case and spacing ignored; where the answer is numbers, the numbers are
compared). When your input runs out (Ctrl-D), it stops there. Where the book's worked
solution and the evidence differ in a detail, the answer says so.

The ops are hardened_ops.py's TritonGELU and TritonSquare (the chapter's kernels); what
each backward received is read with node hooks (``grad_fn.register_prehook``), so the
ops themselves record nothing.
"""
import dataclasses
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for hardened_ops
from hardened_ops import DEVICE, TritonGELU, TritonSquare  # noqa: E402  (picks the backend before triton)

import torch  # noqa: E402


def seeded(n, seed):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(DEVICE).requires_grad_(True)


def received_by(node, log, name):
    """Appends (name, the grad_output node received) to log each time the engine calls node."""
    node.register_prehook(lambda grad_outputs: log.append((name, grad_outputs[0].detach().clone())))


def question_1():
    x = seeded(6, 3)
    z = TritonGELU.apply(x)
    log = []
    received_by(z.grad_fn, log, "TritonGELU")
    loss = (2 * z + 1).sum()
    loss.backward()
    print("    loss = (2 * z + 1).sum(); TritonGELU.backward received:", log[0][1].cpu())
    print("    d(loss)/dz = d(sum)/dw * d(2z + 1)/dz = 1 * 2: the '* 2' makes it, the '+ 1' adds nothing.")
    return torch.equal(log[0][1], torch.full_like(z, 2.0))


def question_2():
    x = seeded(4, 4)
    z = TritonGELU.apply(x)
    y = TritonSquare.apply(z)
    loss = y.sum()
    order = []
    for node, name in ((loss.grad_fn, "SumBackward0"), (y.grad_fn, "TritonSquare.backward"),
                       (z.grad_fn, "TritonGELU.backward")):
        received_by(node, order, name)
    loss.backward()
    print("    the engine called:", [name for name, _ in order])
    print("    TritonGELU.backward needs dL/dz, which only TritonSquare.backward computes: it runs second.")
    print("    (The book names the two custom backwards; the engine's first call is .sum()'s own node,")
    print("    and after both, AccumulateGrad writes x.grad.)")
    return [name for name, _ in order] == ["SumBackward0", "TritonSquare.backward", "TritonGELU.backward"]


def question_3():
    x = seeded(4, 4)
    z = TritonGELU.apply(x)
    y = TritonSquare.apply(z)
    edge = y.grad_fn.next_functions[0][0]
    print(f"    y.grad_fn.next_functions: {y.grad_fn.next_functions}")
    print(f"    ... [0][0] is z.grad_fn? {edge is z.grad_fn} (id {id(edge):#x} and {id(z.grad_fn):#x})")
    print("    The edge points at the very node that made z: TritonSquare's input came from TritonGELU's")
    print("    output. A second TritonGELU on the same x is another node, though it prints alike:")
    other = TritonGELU.apply(x)
    print(f"    TritonGELU.apply(x).grad_fn is z.grad_fn? {other.grad_fn is z.grad_fn}")
    return edge is z.grad_fn and other.grad_fn is not z.grad_fn


def question_4():
    x = seeded(4, 5)
    z = TritonGELU.apply(x)
    calls = []
    received_by(z.grad_fn, calls, "TritonGELU")
    (z.sum() + z.sum()).backward()
    print(f"    calls: {len(calls)}, grad_output: {calls[0][1].cpu()}")
    print("    Once, with 1 + 1 = 2 already summed: autograd adds each consumer's contribution in the")
    print("    node's input buffer before it calls the backward.")
    return len(calls) == 1 and torch.equal(calls[0][1], torch.full_like(z, 2.0))


def question_5():
    x = seeded(4, 5)
    received = []
    z = TritonGELU.apply(x)
    received_by(z.grad_fn, received, "two consumers")
    ((2 * z).sum() + (3 * z).sum()).backward()
    z = TritonGELU.apply(x.detach().clone().requires_grad_(True))
    received_by(z.grad_fn, received, "one consumer")
    (5 * z).sum().backward()
    (_, two), (_, one) = received
    print(f"    (2z).sum() + (3z).sum() sends {two.cpu()}; (5z).sum() sends {one.cpu()}")
    print(f"    identical? {torch.equal(two, one)}. The backward cannot tell how many paths made its")
    print("    grad_output, nor their coefficients: a backward that divides by a count, keeps a")
    print("    number from a 'first' call, or keeps grad_output[0] is wrong in some graph.")
    print("    The exercises (practice/exercises.py) catch three such backwards: 2, 3 and 10.")
    return torch.equal(two, one)


QUESTIONS = [
    ('Q1. Chapter 16 built grad_output = [2.0, 2.0, 2.0] by hand to expose the chain-rule bug. Which\n    ordinary line of this chapter produces it automatically, and why?', question_1),
    ('Q2. z = TritonGELU.apply(x), then y = TritonSquare.apply(z): in what order do the two\n    backward methods run, and what must be true first?', question_2),
    ('Q3. What does `y.grad_fn.next_functions[0][0] is z.grad_fn` being True confirm?', question_3),
    ('Q4. z = TritonGELU.apply(x); loss = z.sum() + z.sum(): how many times does\n    TritonGELU.backward run, and with what grad_output?', question_4),
    ('Q5. Why must a backward never assume its grad_output reflects one clean use of its output?', question_5),
]


# ---------------------------------------------------------------------------
# --predict: your prediction beside the evidence
# ---------------------------------------------------------------------------

NUMBER_WORDS = {"once": 1, "one": 1, "single": 1, "twice": 2, "two": 2, "three": 3, "thrice": 3, "four": 4, "five": 5}


def normalised(text):
    """Lower case, no spaces: "loss = (2 * z + 1).sum()" and "Loss=(2*z+1).SUM()" read the same."""
    return "".join(text.lower().split())


def numbers_in(text):
    """The distinct numbers in text, in the order they first appear; number words count ("once" is 1)."""
    found = []
    for token in re.findall(r"\d+(?:\.\d*)?|[a-z]+", text.lower()):
        value = NUMBER_WORDS.get(token) if token.isalpha() else float(token)
        if value is not None and value not in found:
            found.append(value)
    return found


@dataclasses.dataclass
class Answer:
    """The chapter's answer to a question, short, and how a prediction is compared with it: the same
    numbers in the same order, or one of the phrases, or the words in this order (case and spaces ignored)."""
    chapter: str
    numbers: tuple = ()
    phrases: tuple = ()
    in_order: tuple = ()

    def matches(self, prediction):
        if self.numbers:
            return numbers_in(prediction) == list(self.numbers)
        text = normalised(prediction)
        if self.in_order:
            places = [text.find(word) for word in self.in_order]
            return -1 not in places and places == sorted(places)
        return any(normalised(phrase) in text for phrase in self.phrases)


ANSWERS = {
    1: Answer("loss = (2 * z + 1).sum(): its '2 *' makes d(loss)/dz = 2 everywhere",
              phrases=("2 * z + 1", "2z + 1", "2 * z", "2z")),
    2: Answer("TritonSquare.backward first, then TritonGELU.backward: GELU's needs dL/dz, which Square's computes",
              in_order=("square", "gelu")),
    3: Answer("the edge points at the very node that made z (identity, not an equal-looking copy)",
              phrases=("same", "identical", "identity", "very", "that made z", "produced z")),
    4: Answer("once, with grad_output 2 everywhere (1 + 1 summed before the call)", numbers=(1, 2)),
    5: Answer("grad_output is already summed over every path: how many uses, and their coefficients, are lost",
              phrases=("sum", "added", "accumulat", "many paths", "how many", "fan-in", "fan in")),
}


def ask():
    """Your prediction; None when input has run out."""
    try:
        prediction = input("    Your prediction? (Enter shows the evidence) ")
    except EOFError:
        return None
    if not sys.stdin.isatty():  # piped in: end the prompt's line, as the terminal's Enter would
        print()
    return prediction.strip()


def compare(question_number, prediction):
    """Your prediction beside the chapter's answer, which the evidence above shows; True when they match."""
    answer = ANSWERS[question_number]
    matched = bool(prediction) and answer.matches(prediction)
    print(f"    You predicted:    {prediction or '(nothing)'}")
    print(f"    The chapter says: {answer.chapter}")
    print("    Matched." if matched else "    Not matched" + (": compare the two lines above." if prediction else "."))
    return matched


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    usage = "usage: python practice/self_check.py [--predict] [1-5 ...]"
    if {"-h", "--help"} & set(argv):
        print(usage)
        return 0
    predict = "--predict" in argv
    numbers = [a for a in argv if a != "--predict"]
    if not all(a in ("1", "2", "3", "4", "5") for a in numbers):  # not isdigit(): '²' is a digit int() refuses
        print(usage, file=sys.stderr)
        return 2
    chosen = [int(a) for a in numbers] or list(range(1, 6))
    answered = matched = 0
    for n in chosen:
        question, evidence = QUESTIONS[n - 1]
        print(question)
        prediction = ask() if predict else ""
        if prediction is None:
            print(f"\nInput ended: stopped before the evidence of question {n}; {matched} of {answered} predictions "
                  "matched so far.")
            return 0
        answered += bool(evidence())
        if predict:
            matched += compare(n, prediction)
        print()
    print(f"{answered} of {len(chosen)} answers shown as the chapter states them")
    if predict:
        print(f"{matched} of {len(chosen)} of your predictions matched the chapter's answer")
    return 0 if answered == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
