"""Probes of every family in checker_zoo_families.py, made without the backward checker: at a couple of sizes
(under one block and past it) and in every dtype and scale the family takes, the op's gradient under a random,
non-uniform grad_output against torch.autograd through the reference in float64, and, where the trap is about
the chain rule, uniformity, a layout or a tail, under the grad_output or the input that shows it. A legal family
must be right within what its dtype's arithmetic explains; a planted one must show exactly its bug.

    cd tests && ../.venv/bin/python checker_zoo_families_probes.py
"""
import inspect
import math
import sys

import torch

import checker_zoo_families as fz
from checker_zoo_families import BLOCK, F64, FAMILIES

EPS = {torch.float64: 2.0 ** -52, torch.float32: 2.0 ** -23, torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}
# A legal gradient's largest error, relative to the largest right one, by dtype (default; families may set more).
LEGAL_RTOL = {torch.float64: 1e-9, torch.float32: 2e-4, torch.bfloat16: 4e-2, torch.float16: 5e-3}


# ---------------------------------------------------------------------------------------------
# Plumbing: gradients of the op and of the reference, float64 and flat, for every input that takes one
# ---------------------------------------------------------------------------------------------

def wanted(case):
    """Positions of the arguments that take a gradient: floating-point tensors not named in no_grad."""
    names = list(inspect.signature(case.op.forward).parameters)[1:]
    skip = set(case.options.get("no_grad", ()))
    return [i for i, a in enumerate(case.args)
            if isinstance(a, torch.Tensor) and a.is_floating_point() and names[i] not in skip]


def outputs_of(out):
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]


def grads(fn, case, gs, dtype=None, args=None):
    """fn's gradients for the wanted inputs under grad_outputs gs, each float64 and flat (zeros for None).
    dtype: the inputs cast first (float64 for the reference); args: other argument values (their layout kept)."""
    args = list(case.args if args is None else args)
    leaves = {}
    for i in wanted(case):
        # detach() keeps the caller's layout (a row-padded view stays one); the reference's are float64 copies
        leaf = args[i].detach().to(dtype) if dtype is not None else args[i].detach()
        leaves[i] = leaf.requires_grad_(True)
        args[i] = leaves[i]
    outs = outputs_of(fn(*args, **case.kwargs))
    got = torch.autograd.grad(outs, list(leaves.values()), [g.to(o.dtype) for g, o in zip(gs, outs)],
                              allow_unused=True)
    return [torch.zeros(leaves[i].numel(), dtype=F64) if t is None else t.detach().double().reshape(-1).cpu()
            for i, t in zip(leaves, got)]


def op_grads(case, gs, args=None):
    return grads(case.op.apply, case, gs, args=args)


def ref_grads(case, gs, reference=None):
    return grads(reference or case.reference, case, gs, dtype=F64)


def output_shapes(case):
    with torch.no_grad():
        return [o.shape for o in (lambda out: list(out) if isinstance(out, (tuple, list)) else [out])(
            case.op.apply(*case.args, **case.kwargs)) if o.is_floating_point()]


def random_gs(case, seed=0):
    gen = torch.Generator().manual_seed(1000 + seed)
    return [torch.randn(tuple(s), generator=gen, dtype=F64).to(fz.DEVICE) for s in output_shapes(case)]


def uniform_gs(case, value):
    return [torch.full(tuple(s), value, dtype=F64).to(fz.DEVICE) for s in output_shapes(case)]


def rel(got, right):
    """max(|d| / |right|, max|d| / max|right|), as the checker measures (0 where both are exactly 0)."""
    d = got - right
    size, largest = right.norm().item(), right.abs().max().item() if right.numel() else 0.0
    if size == 0.0:
        return 0.0 if not d.abs().max().item() else math.inf
    return max(d.norm().item() / size, d.abs().max().item() / largest)


def close_within(got, right, allowed):
    """Every element within its allowed error (a tensor, or a number)."""
    return bool(((got - right).abs() <= allowed).all())


def reference_of(case):
    if case.reference is not None:
        return case.reference
    return fz.masked_softmax_reference  # the one family without a reference differences a masked softmax


# ---------------------------------------------------------------------------------------------
# What each kind of family must show
# ---------------------------------------------------------------------------------------------

def allowed_error(fam, case, gs, right, k, dtype, in_dtype, typical):
    """The error a legal gradient may have, elementwise: rtol * its largest element; twice PyTorch's own error
    (autograd through the reference in the op's dtype, in_dtype) and a few ulps, so that "legal" means "as
    right as PyTorch itself"; and where the formula's arithmetic explains more, that bound, derived from it.
    A gradient that is exactly 0 (rounding: a bias before a batch norm) may hold rounding of the size of the
    other gradients (typical), summed over at most every element."""
    rtol = (fam.probe_rtol or {}).get(dtype, LEGAL_RTOL[dtype])
    eps = EPS[dtype]
    if right.abs().max().item() <= 1e-6 * typical:
        return 64 * eps * typical * math.sqrt(case.args[0].numel())
    allowed = rtol * right.abs().max().item() + 2 * (in_dtype - right).abs() + 4 * eps * right.abs()
    g = gs[0].double().reshape(-1).cpu()
    if fam.name == "tanh_saturated":
        # from y = tanh(x) rounded to dtype: (1 - y^2) moves by 2|y| eps, times |g|
        return allowed + 4 * eps * g.abs()
    if fam.name.startswith("logsumexp"):
        # exp(x - lse) carries lse's rounding: |p| * (|lse| eps + a few eps)
        x = case.args[0].double().cpu()  # beside g, which is on the CPU (the GPU run found it on another device)
        lse = torch.logsumexp(x, -1, keepdim=True)
        p = torch.exp(x - lse)
        return allowed + ((g.reshape(lse.shape) * p).abs() * (2 * lse.abs() * eps + 8 * eps)).reshape(-1).cpu()
    return allowed


def probe_legal(fam, case, dtype, lay=None):
    """Right under a random grad_output and a uniform one, within what the dtype's arithmetic explains. lay: the
    op's grad_outputs laid out so (the same values), as autograd may hand them on."""
    reference = reference_of(case)
    # the size of the gradients under a random grad_output: a normaliser's are all 0 under a uniform one
    typical = max(r.abs().max().item() for r in ref_grads(case, random_gs(case, 1), reference))
    for what, gs in (("a random", random_gs(case)), ("a uniform", uniform_gs(case, 2.0))):
        laid = gs if lay is None else [lay(g.to(dtype)) for g in gs]
        got, right = op_grads(case, laid), ref_grads(case, gs, reference)
        in_dtype = grads(reference, case, gs)
        for k, (a, b) in enumerate(zip(got, right)):
            allowed = allowed_error(fam, case, gs, b, k, dtype, in_dtype[k], typical)
            assert close_within(a, b, allowed), f"input {k}: {rel(a, b):.3g} off (relative) under {what} grad_output"
    return "right"


def probe_ignores(fam, case, dtype):
    """The gradient under a random grad_output is the one for grad_output = 1 (for some input), and wrong."""
    gs = random_gs(case)
    got, right = op_grads(case, gs), ref_grads(case, gs)
    ones = ref_grads(case, uniform_gs(case, 1.0))
    typical = [r.abs().max().item() for r in right]
    shown = [k for k in range(len(got)) if rel(got[k], right[k]) > 0.1 and
             close_within(got[k], ones[k], 0.05 * max(typical[k], ones[k].abs().max().item()))]
    assert shown, f"no input's gradient is the one for grad_output = 1 ({[rel(a, b) for a, b in zip(got, right)]})"
    return f"inputs {shown}: the gradient for grad_output = 1"


def probe_drops_output(fam, case, dtype):
    """With only the small output's grad_output nonzero, w's gradient is exactly 0, and the right one is not."""
    gs = random_gs(case)
    only_small = [torch.zeros_like(gs[0]), gs[1]]
    got, right = op_grads(case, only_small), ref_grads(case, only_small)
    assert not got[1].any() and right[1].abs().max().item() > 0, "w's gradient for the small output is not dropped"
    full_got, full_right = op_grads(case, gs), ref_grads(case, gs)
    assert rel(full_got[0], full_right[0]) < LEGAL_RTOL[dtype], "x's gradient is wrong too"
    return "w's gradient for the small output alone is 0"


def probe_uniform(fam, case, dtype):
    """Right for grad_output = 2 everywhere; under a random one, the gradient for grad_output[0] everywhere."""
    two = uniform_gs(case, 2.0)
    assert rel(op_grads(case, two)[0], ref_grads(case, two)[0]) < LEGAL_RTOL[dtype], "wrong for a uniform one"
    gs = random_gs(case)
    got, right = op_grads(case, gs)[0], ref_grads(case, gs)[0]
    first = ref_grads(case, [torch.full_like(gs[0], gs[0].reshape(-1)[0].item())])[0]
    assert rel(got, right) > 0.1 and rel(got, first) < LEGAL_RTOL[dtype], "not the gradient for grad_output[0]"
    return "the gradient for grad_output[0] everywhere"


def probe_wrong_formula(fam, case, dtype):
    """Wrong for a uniform grad_output of 2 too, by more than the dtype's tolerance (not a uniformity bug)."""
    two = uniform_gs(case, 2.0)
    got, right = op_grads(case, two), ref_grads(case, two)
    worst = max(rel(a, b) for a, b in zip(got, right))
    floor = 1e-3 if fam.name.startswith("softplus_zero") else 1.5e-2
    assert worst > floor, f"only {worst:.3g} off for grad_output = 2"
    gs = random_gs(case)
    assert max(rel(a, b) for a, b in zip(op_grads(case, gs), ref_grads(case, gs))) > floor
    if fam.name.startswith("softplus"):  # the error sits in the band below -4, the rest is right
        x = case.args[0].double().reshape(-1).cpu()
        a, b = op_grads(case, gs)[0], ref_grads(case, gs)[0]
        assert rel(a[x >= fz.BRANCH], b[x >= fz.BRANCH]) < LEGAL_RTOL[dtype] and rel(a[x < fz.BRANCH], b[x < fz.BRANCH]) > 0.5
    return f"{worst:.3g} off for grad_output = 2"


def probe_covers_part(fam, case, dtype):
    """Right up to a point, exactly 0 after it: the first cdiv(n, BLOCK) - 1 blocks (grid) or n - 1 elements
    (mask); at most one block, the grid's version is right everywhere."""
    n = case.args[0].numel()
    gs = random_gs(case)
    got, right = op_grads(case, gs)[0], ref_grads(case, gs)[0]
    stop = (max(1, math.ceil(n / BLOCK) - 1) * BLOCK if fam.name.endswith("block_short") else n - 1)
    rtol = LEGAL_RTOL[dtype] * right.abs().max().item()
    assert close_within(got[:stop], right[:stop], rtol), "wrong before the point it stops"
    if stop >= n:
        assert fam.expected(case.args[0].shape) == set() or fz.grows(tuple(case.args[0].shape)), \
            "a shape it is right for, expected to be found unseen"
        return "right (a single block)"
    assert not got[stop:].any() and right[stop:].abs().max().item() > 0, "the tail was computed"
    return f"the first {stop} of {n} right, the rest 0"


def probe_contiguous_input(fam, case, dtype):
    """On the row-padded view the forward is wrong; on the same values made contiguous, right."""
    x = case.args[0]
    assert x.stride(-1) == 1 and x.stride(-2) > x.shape[-1], "not a row-padded view"
    with torch.no_grad():
        on_view, packed = case.op.apply(x), case.op.apply(x.contiguous())
    right = x.double() ** 2
    assert rel(packed.double().reshape(-1), right.reshape(-1)) < LEGAL_RTOL[dtype]
    assert rel(on_view.double().reshape(-1), right.reshape(-1)) > 0.1, "the view was read right"
    return "misreads the row-padded view, right on it made contiguous"


def probe_row_padded_legal(fam, case, dtype):
    x = case.args[0]
    assert x.stride(-1) == 1 and x.stride(-2) > x.shape[-1], "not a row-padded view"
    return probe_legal(fam, case, dtype)


def probe_zero_gradient(fam, case, dtype):
    """x's gradient right; b's true gradient exactly 0 (float64 rounding), the op's b gradient rounding only;
    the atomic version's differs from call to call (for batches of 8 or more), as atomic adds do."""
    probe_legal(fam, case, dtype)
    gs = random_gs(case)
    right = ref_grads(case, gs)
    assert right[1].abs().max().item() <= 1e-10 * right[0].abs().max().item(), "b's true gradient is not 0"
    if fam.name.endswith("atomic"):
        rows = math.prod(case.args[0].shape[:-1])
        seen = {tuple(op_grads(case, gs)[1].tolist()) for _ in range(6)}
        assert rows < 8 or len(seen) > 1, "the sum order never changed b's gradient"
        return f"b's gradient 0 up to rounding, {len(seen)} different answers in 6 calls"
    return "b's gradient 0 up to rounding"


def probe_masked(fam, case, dtype):
    probe_legal(fam, case, dtype)
    mask = case.args[1]
    masked = (~mask) if mask.dtype == torch.bool else mask.isinf()
    got = op_grads(case, random_gs(case))[0].reshape(case.args[0].shape)
    assert not got[..., masked.cpu()].any(), "a masked position got a gradient"
    return "right, and 0 under the mask"


def probe_topk(fam, case, dtype):
    x = case.args[0].reshape(-1, case.args[0].shape[-1])
    assert all(len(set(r.tolist())) == r.numel() for r in x), "ties in a row"
    return probe_legal(fam, case, dtype)


def probe_tf32(fam, case, dtype):
    """Off float32 by TF32's rounding: more than float32's own (it is TF32), within TF32's 10-bit precision."""
    probe_legal(fam, case, dtype)
    gs = random_gs(case)
    worst = max(rel(a, b) for a, b in zip(op_grads(case, gs), ref_grads(case, gs)))
    assert worst > 2e-5, f"only {worst:.3g} off: not TF32"
    return f"{worst:.3g} off (TF32's rounding)"


def probe_exact_zero(fam, case, dtype):
    """Right, and with a gradient element that is 0 in exact arithmetic, which the op computes as rounding: the
    first query's dq (it attends to itself alone), or the scan's gate's first element (moving every decay alike
    moves no output)."""
    probe_legal(fam, case, dtype)
    gs = random_gs(case)
    right, got = ref_grads(case, gs), op_grads(case, gs)
    if fam.cls == "k":
        k, zero = 0, right[0].reshape(case.args[0].shape)[..., 0, :]
    else:
        k, zero = 3, right[3].reshape(case.args[3].shape)[..., 0]
    assert zero.abs().max().item() <= 1e-12 * right[k].abs().max().item(), "the element is not 0 in exact arithmetic"
    return f"right; input {k}'s exact zero computed as {got[k].reshape(case.args[k].shape).flatten()[0].item():.3g}"


def probe_far_branch(fam, case, dtype):
    """Below FAR_BRANCH the gradient is twice the right one (off by 100% of gradients of 2e-9 and less); elsewhere
    right."""
    x = case.args[0].double().reshape(-1).cpu()
    far = x < fz.FAR_BRANCH
    gs = random_gs(case)
    got, right = op_grads(case, gs)[0], ref_grads(case, gs)[0]
    assert far.any() and rel(got[~far], right[~far]) < LEGAL_RTOL[dtype], "wrong where it should be right"
    # (where exp(x) is below the dtype's smallest normal number, the dtype says 0 or a few of its steps)
    assert close_within(got[far], 2 * right[far], 1e-6 * right[far].abs() + torch.finfo(dtype).tiny), \
        "not twice the right gradient below -20"
    assert rel(got, right) < max(LEGAL_RTOL[dtype], 1e-8), "the whole gradient is visibly wrong, not only far below 0"
    return f"{int(far.sum())} elements below -20 off by 100%, {rel(got, right):.2g} of the whole"


def probe_returned_dtype(fam, case, dtype):
    """backward returns a float16 gradient for a bfloat16 or float32 input: a dtype that cannot hold every value
    of the input's (float16 stops at 65504; float32's steps are finer)."""
    x = case.args[0].detach().requires_grad_(True)
    y = case.op.apply(x)
    returned = case.op.backward(y.grad_fn, torch.randn_like(y))
    assert returned.dtype == torch.float16 != x.dtype
    wide, narrow = torch.finfo(returned.dtype), torch.finfo(x.dtype)
    assert wide.max < narrow.max or wide.eps > narrow.eps, "float16 holds every value of the input's dtype"
    return f"{x.dtype} input, {returned.dtype} gradient"


def every_other(t):
    """t's values as autograd hands a 1-D grad_output after torch.stack(dim=-1): every other element, NaN between."""
    wider = torch.full((*t.shape, 2), float("nan"), dtype=t.dtype, device=t.device)
    wider[..., 0] = t
    return wider[..., 0]


def probe_laid_out_like_input(fam, case, dtype):
    """Right exactly when grad_output is laid out like x: with x contiguous, right for a contiguous grad_output
    and wrong for every other element (torch.stack's); with x as x[::2], the other way round."""
    gs = random_gs(case)
    right = ref_grads(case, gs)[0]
    x = case.args[0]
    contiguous, strided = (x, every_other(x.contiguous())) if x.is_contiguous() else (x.contiguous(), x)
    laid = [every_other(g.to(x.dtype)) for g in gs]
    for args, g_as, should in (([contiguous], gs, True), ([contiguous], laid, False), ([strided], laid, True),
                               ([strided], gs, False)):
        got = op_grads(case, g_as, args=args)[0]
        assert (got.isfinite().all() and rel(got, right) < LEGAL_RTOL[dtype]) == should, \
            f"x {'contiguous' if args[0].is_contiguous() else 'x[::2]'}, grad_output " \
            f"{'contiguous' if g_as is gs else 'every other element'}: {'wrong' if should else 'right'}"
    return "right exactly when grad_output is laid out like x"


def probe_for(fam):
    if fam.cls == "h" and fam.legal:
        return probe_tf32
    if fam.legal:
        return {"c": probe_zero_gradient, "e": probe_masked, "g": probe_row_padded_legal,
                "i": probe_topk, "k": probe_exact_zero, "l": probe_exact_zero}.get(fam.cls, probe_legal)
    trap, = fam.traps
    if trap == fz.IGNORES:
        return probe_drops_output if fam.cls == "d" else probe_ignores
    if fam.cls == "m" and trap == fz.WRONG_FORMULA:
        return probe_far_branch
    return {fz.UNIFORM: probe_uniform, fz.WRONG_FORMULA: probe_wrong_formula, fz.COVERS_PART: probe_covers_part,
            fz.CONTIGUOUS_INPUT: probe_contiguous_input, fz.RETURNS_WRONG: probe_returned_dtype,
            fz.LAID_OUT_LIKE_INPUT: probe_laid_out_like_input}[trap]


def probe_shapes(fam):
    """Two shapes a family takes: one under a block, one past several (for each of its ranks)."""
    shapes = fz.shapes_for(fam)
    small = [s for s in shapes if fz.numel(s) < BLOCK]
    large = [s for s in shapes if fz.numel(s) > BLOCK]
    return sorted({small[0], (large or small)[-1]}, key=fz.numel)


def probe(name, shape, dtype, seed=0, scale=1.0):
    fam = FAMILIES[name]
    case = fam.make(shape, dtype, seed, scale)
    return probe_for(fam)(fam, case, dtype)


def probe_family(name):
    """Every dtype and scale the family takes, at its two probe shapes and the boundary sizes of (a)."""
    fam = FAMILIES[name]
    shapes = probe_shapes(fam)
    if fam.cls == "a":
        shapes += [(1024,), (1025,), (2048,), (2049,)]
    said = []
    for shape in shapes:
        for dtype in fam.dtypes:
            for scale in fam.scales:
                said.append(f"{shape} {dtype} {scale:g}: {probe(name, shape, dtype, 0, scale)}")
    return said


if __name__ == "__main__":
    failed = 0
    for name in FAMILIES:
        try:
            lines = probe_family(name)
            print(f"ok    {name}: {lines[-1]}")
        except AssertionError as error:
            failed += 1
            print(f"FAIL  {name}: {error}")
    sys.exit(1 if failed else 0)
