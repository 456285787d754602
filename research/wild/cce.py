"""cut-cross-entropy on PyPI (unslothai/cut-cross-entropy, Unsloth's packaging of apple/ml-cross-entropy):
pure Python + Triton, the wheel installed whole.

The PyPI releases (24.11.3 ... 25.1.1) are built from https://github.com/unslothai/cut-cross-entropy,
not from Apple's repository, whose later fixes (bias, integer shift, fp32 backward, ...) were never
released under this name. Between the PyPI releases the backward changed once (25.1.1, the merge of
https://github.com/unslothai/cut-cross-entropy/pull/2): a float32 classifier beside a bf16/fp16 input
was accepted, and the classifier's gradient skipped when it needs none. Neither is one of the
chapter's traps, so there is no case here: only the sweep of the current release.

LinearCrossEntropyFunction.forward(ctx, e, c, params) takes the targets, the valid positions and
the options in a CCEParams dataclass, which the checker passes through as it is (it is no tensor):
its tensors are made on device() here, the way cce_linear_cross_entropy builds them. The
backward refuses float32 embeddings ("Backwards requires embeddings to be bf16 or fp16"), so the
calls are in float16 (bfloat16 works as well on a GPU; Triton's interpreter computes tl.dot wrong
for bfloat16, so float16 keeps the CPU pre-check meaningful)."""
from wild.common import Sweep, device, randn, targets

CASES = ()

SWEEP = Sweep("cut-cross-entropy", "25.1.1")

V, D = 40, 32      # vocabulary, hidden size
DTYPE = "float16"
BATCH, T = 2, 6    # the loss is over BATCH x T positions


def params(labels, ignore_index=-100, softcap=None, reduction="mean", shift=False, filter_eps=None):
    """CCEParams as cce_linear_cross_entropy builds it (flat targets, valid positions, batch shape),
    on device()."""
    import torch
    from cut_cross_entropy.cce import CCEParams
    from cut_cross_entropy.utils import _build_flat_valids, _handle_eps
    labels = labels.to(device()).contiguous()
    valids = _build_flat_valids(labels, ignore_index, shift)
    return CCEParams(labels.flatten(), valids, softcap, reduction, _handle_eps(filter_eps, getattr(torch, DTYPE)),
                     shift, labels.size())


def cce_reference(e, c, params):
    """The loss LinearCrossEntropyFunction means, from torch ops: cross-entropy of e @ c.T (softcapped
    where asked) against the targets, over the valid positions (the next token's target where
    shift), reduced as asked; 'none' is one value per position of the batch shape, 0 at the
    positions left out (as handle_reduction_none places them)."""
    import torch
    import torch.nn.functional as F
    logits = e @ c.t()
    if params.softcap is not None:
        logits = torch.tanh(logits / params.softcap) * params.softcap
    labels = params.targets
    count = labels.numel()
    if params.valids is None:
        rows, label_at = torch.arange(count, device=labels.device), labels
    else:
        rows = params.valids.long()
        label_at = labels[rows + 1] if params.shift else labels[rows]
    nll = F.cross_entropy(logits[rows], label_at, reduction="none")
    if params.reduction == "mean":
        return nll.mean()
    if params.reduction == "sum":
        return nll.sum()
    full = nll.new_zeros((count,)).index_put((rows + 1 if params.shift else rows,), nll)
    return full.view(params.batch_shape)


def with_ignored(labels):
    labels = labels.clone()
    labels.view(-1)[[1, 7]] = -100
    return labels


def sweep_calls():
    """(label, Function, args, kwargs, reference) for each option of the one Function, in float16."""
    import torch
    from cut_cross_entropy.cce import LinearCrossEntropyFunction as fn
    e = randn(BATCH * T, D, seed=1).to(getattr(torch, DTYPE))
    c = (randn(V, D, seed=2) * 0.3).to(getattr(torch, DTYPE))
    labels = targets(BATCH * T, V, seed=3).view(BATCH, T)
    options = [
        ("linear cross entropy, mean", {}),
        ("linear cross entropy, sum", {"reduction": "sum"}),
        ("linear cross entropy, reduction='none'", {"reduction": "none"}),
        ("linear cross entropy, softcap 3", {"softcap": 3.0}),
        ("linear cross entropy, ignore_index + shift", {"shift": True, "labels": with_ignored(labels)}),
        ("linear cross entropy, filter_eps 'auto'", {"filter_eps": "auto"}),
    ]
    calls = []
    for label, option in options:
        option = dict(option)
        made = params(option.pop("labels", labels), **option)
        calls.append((label, fn, (e, c, made), {}, cce_reference))
    return calls


def sweep_probes():
    """Each flag of the sweep provoked by hand, without the checker: (Function, what the probe saw,
    whether the trap showed). The second probe is of no flag: the checker took the softcap forward's
    1% as precision (a note); it is there so the page can say what that 1% is."""
    import torch
    from cut_cross_entropy.cce import LinearCrossEntropyFunction as fn
    dtype = getattr(torch, DTYPE)
    e = randn(BATCH * T, D, seed=1).to(device(), dtype)
    c = (randn(V, D, seed=2) * 0.3).to(device(), dtype)
    labels = targets(BATCH * T, V, seed=3).view(BATCH, T)

    def transposed_grad_output():
        leaf = e.clone().requires_grad_(True)
        loss = fn.apply(leaf, c, params(labels, reduction="none"))   # (BATCH, T)
        g = randn(T, BATCH, seed=21).to(device(), loss.dtype).t()      # the same shape, laid out transposed
        contiguous = torch.autograd.grad(loss, leaf, g.contiguous(), retain_graph=True)[0]
        try:
            torch.autograd.grad(loss, leaf, g)
        except RuntimeError as error:
            return (f"reduction='none': backward with a transposed grad_output (strides {g.stride()}) raises "
                    f"RuntimeError: {' '.join(str(error).split())[:90]}; with its .contiguous() copy it runs "
                    f"(gradient norm {contiguous.double().norm().item():.3g})", True)
        return "reduction='none': backward with a transposed grad_output runs", False

    def softcap_padded_vocabulary():
        made = params(labels, softcap=3.0)
        with torch.no_grad():
            got = fn.apply(e, c, made).double()
            want = cce_reference(e.double(), c.double(), made)
        off = ((got - want).abs() / want.abs()).item()
        return (f"with softcap 3 and a vocabulary of {V} (not a multiple of the kernel's block), the loss is "
                f"{got.item():.4f}, torch's {want.item():.4f} ({off:.3g} relative): the kernel masks the "
                f"block's padding with -inf before the softcap, and tanh(-inf) * 3 = -3 counts in the "
                f"log-sum-exp", off > 1e-3)

    probes = []
    for function, probe in (("LinearCrossEntropyFunction", transposed_grad_output),
                            ("LinearCrossEntropyFunction", softcap_padded_vocabulary)):
        try:
            saw, shown = probe()
        except Exception as error:  # noqa: BLE001  (a probe that cannot run shows nothing)
            saw, shown = f"the probe raised {type(error).__name__}: {' '.join(str(error).split())[:120]}", False
        probes.append((function, saw, shown))
    return probes
