"""Hand checks of every case in checker_zoo_blind.py, made without the backward checker.

Each probe_<name>() returns True when the case behaves as claimed: a legal case is correct (its gradients
agree with the reference's, or with gradcheck, under many grad_output layouts, with inputs frozen in turn, on
transposed and sliced inputs and on a larger input; it writes into nothing it does not declare), a planted
case shows its bug (a wrong number or a crash, provoked directly).

    cd tests && ../.venv/bin/python checker_zoo_blind_probes.py
"""
import math
import sys
import traceback

import torch
import torch.nn.functional as F

from chapter_scripts import DEVICE, seeded_randn  # noqa: I001
import checker_zoo_blind as zoo  # noqa: E402
from checker_zoo_blind import (  # noqa: E402
    randperm, randint, random_cu_seqlens, rotary_tables, silu_derivative)

F64 = torch.float64


# ---------------------------------------------------------------------------
# Plumbing
# ---------------------------------------------------------------------------

def is_float(t):
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def call(op, args, kwargs):
    if isinstance(op, type) and issubclass(op, torch.autograd.Function):
        return op.apply(*args, **kwargs)
    return op(*args, **kwargs)


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def float_slots(args, kwargs):
    return [("a", i) for i, a in enumerate(args) if is_float(a)] + \
           [("k", k) for k, v in kwargs.items() if is_float(v)]


def get(args, kwargs, slot):
    return args[slot[1]] if slot[0] == "a" else kwargs[slot[1]]


def transposed_layout(v):
    """Same values, laid out transposed in the last two dims (non-contiguous)."""
    return v.transpose(-1, -2).contiguous().transpose(-1, -2) if v.dim() >= 2 else v.clone()


def sliced_layout(v):
    """Same values, every other element of a wider tensor (non-contiguous, gaps)."""
    return torch.stack([v, torch.zeros_like(v)], -1)[..., 0] if v.dim() >= 1 else v.clone()


def build(args, kwargs, requires, dtype=None, layout=None, pass_clones=False):
    """Fresh leaves for every floating-point argument. Returns (args, kwargs, leaves by slot)."""
    new_args, new_kwargs, leaves = list(args), dict(kwargs), {}
    for slot in float_slots(args, kwargs):
        v = get(args, kwargs, slot).detach()
        if dtype is not None:
            v = v.to(dtype)
        v = layout(v) if layout is not None else v.clone()
        v.requires_grad_(slot in requires)
        leaves[slot] = v
        passed = v.clone() if pass_clones else v
        if slot[0] == "a":
            new_args[slot[1]] = passed
        else:
            new_kwargs[slot[1]] = passed
    return tuple(new_args), new_kwargs, leaves


def close(actual, expected, rtol, scale=0.0):
    """Elementwise: |a - e| <= rtol * |e| + rtol * max(max|e|, scale): a tolerance scaled to the tensor, or to
    `scale` (the size the gradient has under a random grad_output) where the true values are all about zero."""
    a, e = actual.detach().to(F64), expected.detach().to(F64)
    if a.shape != e.shape:
        return False
    if not torch.isfinite(a).all():
        return False
    scale = max(e.abs().max().item() if e.numel() else 0.0, scale)
    return bool(torch.allclose(a, e, rtol=rtol, atol=rtol * scale + 1e-30))


def grad_layouts(shape, dtype, seed):
    """grad_outputs of `shape` laid out as autograd hands them on (name, tensor)."""
    shape = tuple(shape)
    n = len(shape)

    def rnd(*s, k=0):
        if not s:
            return seeded_randn(1, seed=seed + k).reshape(()).to(dtype)
        return seeded_randn(*s, seed=seed + k).to(dtype)

    if n == 0:
        return [("0-dim random", rnd()), ("0-dim one", torch.ones((), dtype=dtype, device=DEVICE))]
    out = [("contiguous", rnd(*shape))]
    if n >= 2:
        out.append(("transposed", rnd(*shape[:-2], shape[-1], shape[-2], k=1).transpose(-1, -2)))
        out.append(("(1, 0)-strided, as after .sum(dim=-1)", rnd(*shape[:-1], 1, k=3).expand(shape)))
    if n >= 2 or shape[0] > 1:
        row = rnd(*shape[1:], k=2) if n >= 2 else rnd(k=2)
        out.append(("stride 0 on dim 0, as after .sum(dim=0)", row.expand(shape)))
    out.append(("all strides 0, as after .sum()", torch.full((), 0.7, dtype=dtype, device=DEVICE).expand(shape)))
    wide = torch.cat([rnd(*shape, k=4), rnd(*shape, k=5)], dim=-1)
    out.append(("narrow view of a torch.cat", wide[..., shape[-1]:]))
    return out


class Failure(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise Failure(message)


def snapshot(leaves):
    return {slot: v.detach().clone() for slot, v in leaves.items()}


def unchanged(leaves, before, allowed=()):
    for slot, v in leaves.items():
        if slot in allowed:
            continue
        if not torch.equal(v.detach(), before[slot]):
            return False
    return True


def run_grads(op, args, kwargs, requires, grads_by_output, dtype=None, layout=None, pass_clones=False,
              allowed_writes=()):
    """Outputs, and gradients for the `requires` slots of sum_i <out_i, g_i> over the outputs in grads_by_output."""
    a, k, leaves = build(args, kwargs, requires, dtype=dtype, layout=layout, pass_clones=pass_clones)
    before = snapshot(leaves)
    outs = as_tuple(call(op, a, k))
    used = [i for i in grads_by_output if outs[i].requires_grad]
    inputs = [leaves[s] for s in requires]
    if used and inputs:
        gs = [grads_by_output[i] if dtype is None else grads_by_output[i].to(dtype) for i in used]
        grads = torch.autograd.grad([outs[i] for i in used], inputs, gs, allow_unused=True)
    else:
        grads = [None] * len(inputs)
    grads = [torch.zeros_like(leaves[s]) if g is None else g for s, g in zip(requires, grads)]
    expect(unchanged(leaves, before, allowed_writes), "an input was changed")
    return outs, dict(zip(requires, grads))


def perturbed(args, kwargs, no_grad=()):
    """Other values of the same shapes (x * 1.1 - 0.05), for a second round of calls: state would show."""
    new_args, new_kwargs = list(args), dict(kwargs)
    for slot in float_slots(args, kwargs):
        if slot in no_grad:
            continue
        v = get(args, kwargs, slot) * 1.1 - 0.05
        if slot[0] == "a":
            new_args[slot[1]] = v
        else:
            new_kwargs[slot[1]] = v
    return tuple(new_args), new_kwargs


def verify_legal(op, args, kwargs, reference, *, no_grad=(), rtol=1e-4, big=(), pass_clones=False,
                 refuses_noncontiguous=False, allowed_writes=(), gradcheck=True, input_layouts=True,
                 reference_takes_big=True, big_reference=None):
    """Forward and gradients against the float64 reference, every grad_output layout, inputs frozen in turn."""
    slots = float_slots(args, kwargs)
    grad_slots = [s for s in slots if s not in no_grad]
    frozen_patterns = [tuple(grad_slots)]
    if len(grad_slots) > 1:
        frozen_patterns += [tuple(s for s in grad_slots if s != f) for f in grad_slots]
    variants = [(args, kwargs, reference, True), (*perturbed(args, kwargs, no_grad), reference, True)]
    for big_args, big_kwargs in big:
        variants.append((big_args, big_kwargs, reference if reference_takes_big else big_reference, False))
    for case_args, case_kwargs, ref, small in variants:
        layouts = [None]
        if input_layouts:
            layouts += [transposed_layout, sliced_layout]
        for layout in layouts:
            if layout is not None and refuses_noncontiguous and any(
                    get(case_args, case_kwargs, s).dim() >= 1 for s in slots):
                try:
                    call(op, *build(case_args, case_kwargs, (), layout=layout)[:2])
                except ValueError:
                    continue
                raise Failure("a non-contiguous input was not refused")
            outs, _ = run_grads(op, case_args, case_kwargs, (), {}, layout=layout, pass_clones=pass_clones,
                                allowed_writes=allowed_writes)
            ref_outs = as_tuple(call(ref, *build(case_args, case_kwargs, (), dtype=F64, layout=layout)[:2]))
            expect(len(outs) == len(ref_outs), "output count differs from the reference")
            for o, r in zip(outs, ref_outs):
                if is_float(o):
                    expect(close(o, r, rtol), f"forward differs from the reference (layout {layout})")
                else:
                    expect(torch.equal(o, r), "integer output differs from the reference")
            diff_outputs = [i for i, o in enumerate(outs) if is_float(o)]
            output_sets = [diff_outputs] + ([[i] for i in diff_outputs] if len(diff_outputs) > 1 else [])
            patterns = frozen_patterns if small else frozen_patterns[:1]
            for used in output_sets:
                per_output = {i: grad_layouts(outs[i].shape, outs[i].dtype, seed=900 + 10 * i) for i in used}
                count = len(per_output[used[0]])
                typical = {}  # slot -> max|reference gradient| under the first (contiguous, random) grad_output
                for j in range(count if small or layout is None else 3):
                    for requires in patterns:
                        gmap = {i: per_output[i][min(j, len(per_output[i]) - 1)][1] for i in used}
                        name = per_output[used[0]][min(j, len(per_output[used[0]]) - 1)][0]
                        op_outs, op_grads = run_grads(op, case_args, case_kwargs, requires, gmap, layout=layout,
                                                      pass_clones=pass_clones, allowed_writes=allowed_writes)
                        ref_map = {i: g.to(F64) for i, g in gmap.items()}
                        _, ref_grads = run_grads(ref, case_args, case_kwargs, requires, ref_map, dtype=F64,
                                                 layout=layout)
                        for s in requires:
                            typical.setdefault((requires, s), ref_grads[s].abs().max().item())
                            expect(close(op_grads[s], ref_grads[s], rtol, typical[(requires, s)]),
                                   f"gradient for {s} differs (grad_output {name}, outputs {used}, "
                                   f"requires {requires}, layout {layout})")
    if gradcheck:
        gradcheck_ok(op, args, kwargs, no_grad=no_grad, pass_clones=pass_clones)
    return True


def gradcheck_ok(op, args, kwargs, no_grad=(), pass_clones=False):
    slots = [s for s in float_slots(args, kwargs) if s not in no_grad]
    a64, k64, leaves = build(args, kwargs, tuple(slots), dtype=F64)

    def fn(*values):
        a, k = list(a64), dict(k64)
        for s, v in zip(slots, values):
            v = v.clone() if pass_clones else v
            if s[0] == "a":
                a[s[1]] = v
            else:
                k[s[1]] = v
        for s in float_slots(args, kwargs):  # no_grad tensors: fresh copies (an op may update them)
            if s in no_grad:
                fresh = get(args, kwargs, s).detach().to(F64).clone()
                if s[0] == "a":
                    a[s[1]] = fresh
                else:
                    k[s[1]] = fresh
        return call(op, tuple(a), k)

    expect(torch.autograd.gradcheck(fn, tuple(leaves[s] for s in slots), eps=1e-6, atol=1e-6, rtol=1e-4),
           "gradcheck failed")


def second_order_matches(op, x, reference, rtol=1e-4, seed=950):
    """d/dx <grad_x(<op(x), g>), v> against the reference's, in float64 for the reference."""
    g = seeded_randn(*x.shape, seed=seed)
    v = seeded_randn(*x.shape, seed=seed + 1)
    results = []
    for fn, dtype in ((op, x.dtype), (reference, F64)):
        leaf = x.detach().to(dtype).requires_grad_(True)
        gx, = torch.autograd.grad(call(fn, (leaf,), {}) if fn is op else fn(leaf), leaf, g.to(dtype),
                                  create_graph=True)
        hv, = torch.autograd.grad(gx, leaf, v.to(dtype))
        results.append((gx, hv))
    (gx, hv), (rgx, rhv) = results
    return close(gx, rgx, rtol) and close(hv, rhv, rtol)


def double_backward_raises(op, args):
    """True when create_graph=True (then differentiating the gradient) raises rather than going silently wrong."""
    x = args[0].detach().clone().requires_grad_(True)
    rest = args[1:]
    g = seeded_randn(*x.shape, seed=960)
    try:
        gx, = torch.autograd.grad(call(op, (x, *rest), {}), x, g, create_graph=True)
        torch.autograd.grad(gx, x, torch.ones_like(gx))
    except RuntimeError:
        return True
    return False


def ref_grads(fn, inputs, g):
    """Float64 gradients of <fn(*inputs), g> for the float inputs."""
    leaves = [t.detach().to(F64).requires_grad_(True) if is_float(t) else t for t in inputs]
    out = fn(*leaves)
    floats = [v for v in leaves if is_float(v)]
    return torch.autograd.grad(out, floats, g.to(F64))


def raises(fn, kinds=(Exception,)):
    try:
        fn()
    except kinds:
        return True
    return False


def case(name, table=None):
    """(op, args, kwargs, reference, options) of a case (a planted case's trap left off)."""
    table = table or (zoo.BLIND_LEGAL if name in zoo.BLIND_LEGAL else zoo.BLIND_PLANTED)
    return table[name][:5]


# ---------------------------------------------------------------------------
# Legal probes
# ---------------------------------------------------------------------------

A0, A1, A2, A3, A4 = ("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 4)


def legal(name, **config):
    op, args, kwargs, reference, options = case(name)
    no_grad = config.pop("no_grad", ())
    return verify_legal(op, args, kwargs, config.pop("reference", reference), no_grad=no_grad, **config)


def probe_permute_rows_int64_perm():
    big = [((seeded_randn(1500, 3, seed=1), randperm(1500, seed=2)), {})]
    ok = legal("permute_rows_int64_perm", big=big)
    op, args, _, _, _ = case("permute_rows_int64_perm")
    # an invalid permutation (wrong length) is refused with a clear error
    return ok and raises(lambda: op.apply(args[0], args[1][:3]), ValueError)


def probe_varlen_segment_mean_cu_seqlens():
    big = [((seeded_randn(3000, 2, seed=3), random_cu_seqlens(3000, 40, seed=4)), {})]
    ok = legal("varlen_segment_mean_cu_seqlens", big=big)
    op, args, _, _, _ = case("varlen_segment_mean_cu_seqlens")
    bad = torch.tensor([0, 5, 3, 10], dtype=torch.int32, device=DEVICE)
    return ok and raises(lambda: op.apply(args[0], bad), ValueError)


def probe_rotary_embedding_tables_no_grad():
    big = [((seeded_randn(2, 512, 8, seed=5), *rotary_tables(512, 8)), {})]
    return legal("rotary_embedding_tables_no_grad", no_grad=(A1, A2), big=big)


def probe_positive_log_validates_values():
    big = [((seeded_randn(50, 100, seed=6).abs() + 0.5,), {})]
    ok = legal("positive_log_validates_values", big=big)
    op = case("positive_log_validates_values")[0]
    return ok and raises(lambda: op.apply(seeded_randn(4, 6, seed=7)), ValueError)


def probe_softsign_refuses_noncontiguous_input():
    big = [((seeded_randn(60, 70, seed=8),), {})]
    return legal("softsign_refuses_noncontiguous_input", big=big, refuses_noncontiguous=True)


def probe_softmax_bf16():
    big = [((seeded_randn(64, 80, seed=9, dtype=torch.bfloat16),), {})]
    ok = legal("softmax_bf16", big=big, rtol=3e-2, gradcheck=False)
    # and its gradient is torch's own bf16 softmax gradient, to bf16 rounding, for every grad_output layout
    op, args, _, _, _ = case("softmax_bf16")
    for _, g in grad_layouts((4, 6), torch.bfloat16, seed=20):
        x = leaf(args[0])
        mine, = torch.autograd.grad(op.apply(x), x, g)
        x = leaf(args[0])
        theirs, = torch.autograd.grad(torch.softmax(x, -1), x, g)
        ok = ok and (mine.float() - theirs.float()).abs().max().item() <= 2e-2 * max(theirs.abs().max().item(), 0.1)
    return ok


def probe_rmsnorm_bf16():
    big = [((seeded_randn(64, 80, seed=10, dtype=torch.bfloat16),
             (1 + 0.1 * seeded_randn(80, seed=11)).to(torch.bfloat16)), {})]
    return legal("rmsnorm_bf16", big=big, rtol=3e-2, gradcheck=False)


def probe_silu_fp16():
    big = [((seeded_randn(60, 70, seed=12).half(),), {})]
    return legal("silu_fp16", big=big, rtol=5e-3, gradcheck=False)


def probe_triton_gelu_bf16():
    big = [((seeded_randn(40, 130, seed=13, dtype=torch.bfloat16),), {})]
    return legal("triton_gelu_bf16", big=big, rtol=3e-2, gradcheck=False)


def probe_chunked_prefix_variance_fp32():
    """Agrees to ~1e-4 relative (not to fp32's 1e-6), forward and backward; gradcheck in float64 is exact."""
    op, args, _, reference, _ = case("chunked_prefix_variance_fp32")
    big = [((seeded_randn(3, 3000, seed=14) + 40.0,), {})]
    ok = legal("chunked_prefix_variance_fp32", big=big, rtol=2e-3, gradcheck=False)
    small = seeded_randn(2, 300, seed=15) + 3.0
    ok = ok and torch.autograd.gradcheck(op.apply, (small.double().requires_grad_(),), eps=1e-6, atol=1e-6)
    # the forward is not fp32-exact: the point of the case
    x = args[0]
    err = ((op.apply(x).double() - reference(x.double())).norm() / reference(x.double()).norm()).item()
    return ok and 3e-5 < err < 2e-3


def probe_batch_norm_updates_running_stats():
    big = [((seeded_randn(600, 8, seed=16), 1 + 0.1 * seeded_randn(8, seed=17), 0.1 * seeded_randn(8, seed=18),
             torch.zeros(8, device=DEVICE), torch.ones(8, device=DEVICE)), {})]
    ok = legal("batch_norm_updates_running_stats", no_grad=(A3, A4), big=big, allowed_writes=(A3, A4))
    # the running statistics really are updated, like F.batch_norm's
    op, args, _, _, _ = case("batch_norm_updates_running_stats")
    x, w, b = args[:3]
    rm, rv = torch.zeros(4, device=DEVICE), torch.ones(4, device=DEVICE)
    rm2, rv2 = rm.clone(), rv.clone()
    op.apply(x, w, b, rm, rv)
    F.batch_norm(x, rm2, rv2, w, b, training=True, momentum=0.1, eps=1e-5)
    return ok and close(rm, rm2, 1e-5) and close(rv, rv2, 1e-5)


def probe_linear_bias_grad_keepdim_1xD():
    big = [((seeded_randn(700, 8, seed=19), seeded_randn(6, 8, seed=20), seeded_randn(6, seed=21)), {})]
    return legal("linear_bias_grad_keepdim_1xD", big=big)


def probe_linear_bias_grad_unreduced_BxD():
    big = [((seeded_randn(700, 8, seed=22), seeded_randn(6, 8, seed=23), seeded_randn(6, seed=24)), {})]
    return legal("linear_bias_grad_unreduced_BxD", big=big)


def probe_tanh_defines_vjp():
    big = [((seeded_randn(60, 70, seed=25),), {})]
    return legal("tanh_defines_vjp", reference=torch.tanh, big=big)


def probe_cube_setup_context_second_order():
    op, args, _, reference, _ = case("cube_setup_context_second_order")
    big = [((seeded_randn(60, 70, seed=26), 0.5), {})]
    ok = legal("cube_setup_context_second_order", big=big)
    ok = ok and op.apply(args[0]).equal(reference(args[0]))  # the default scale is bound by apply
    ok = ok and second_order_matches(lambda x: op.apply(x, 0.5), args[0], lambda x: reference(x, 0.5))
    x64 = args[0].double().requires_grad_()
    return ok and torch.autograd.gradgradcheck(lambda x: op.apply(x, 0.5), (x64,))


def probe_pairwise_distance_once_differentiable():
    op, args, _, reference, _ = case("pairwise_distance_once_differentiable")
    big = [((seeded_randn(80, 3, seed=27), seeded_randn(60, 3, seed=28)), {})]
    ok = legal("pairwise_distance_once_differentiable", big=big)
    ok = ok and double_backward_raises(op, args)
    # once_differentiable: with a grad_output that requires grad, the double backward raises its own error;
    # with one that does not, the gradient comes back without a graph (and differentiating it raises)
    x = leaf(args[0])
    g = seeded_randn(5, 4, seed=29).requires_grad_(True)
    gx, = torch.autograd.grad(op.apply(x, args[1]), x, g, create_graph=True)
    ok = ok and raises(lambda: torch.autograd.grad(gx.sum(), x), RuntimeError)
    x = leaf(args[0])
    gx, = torch.autograd.grad(op.apply(x, args[1]), x, g.detach(), create_graph=True)
    ok = ok and not gx.requires_grad
    # and the reference has no double backward either
    x = args[0].double().requires_grad_()
    gx, = torch.autograd.grad(reference(x, args[1].double()).sum(), x, create_graph=True)
    return ok and raises(lambda: torch.autograd.grad(gx.sum(), x), RuntimeError)


def probe_triton_gelu_refuses_create_graph():
    op, args, _, _, _ = case("triton_gelu_refuses_create_graph")
    big = [((seeded_randn(50, 90, seed=29),), {})]
    return legal("triton_gelu_refuses_create_graph", big=big) and double_backward_raises(op, args)


def probe_x_sin_x_second_order():
    op, args, _, reference, _ = case("x_sin_x_second_order")
    big = [((seeded_randn(60, 70, seed=30),), {})]
    ok = legal("x_sin_x_second_order", big=big)
    ok = ok and second_order_matches(op, args[0], reference)
    return ok and torch.autograd.gradgradcheck(op.apply, (args[0].double().requires_grad_(),))


def probe_masked_scale_zero_grad_region():
    big = [((seeded_randn(60, 70, seed=31), seeded_randn(60, 70, seed=32) > 0), {})]
    return legal("masked_scale_zero_grad_region", big=big)


def probe_clamp_saturated_regions():
    op, args, _, _, _ = case("clamp_saturated_regions")
    x = args[0]
    saturated = ((x.abs() > 0.5).sum() / x.numel()).item()
    big = [((seeded_randn(60, 70, seed=33),), {})]
    return legal("clamp_saturated_regions", big=big) and saturated > 0.4


def probe_column_scale_fixed_size_reference():
    op, args, _, reference, _ = case("column_scale_fixed_size_reference")
    anywidth = lambda x: x * zoo._column_scale(x.shape[-1], x.dtype, x.device)  # noqa: E731
    big = [((seeded_randn(50, 90, seed=34),), {})]
    ok = legal("column_scale_fixed_size_reference", big=big, reference_takes_big=False, big_reference=anywidth)
    # the reference itself cannot take a grown input
    return ok and raises(lambda: reference(seeded_randn(50, 90, seed=34).double()), RuntimeError)


def probe_gram_matrix_x_xT():
    return legal("gram_matrix_x_xT", big=[((seeded_randn(70, 40, seed=35),), {})])


def probe_matrix_square_nxn():
    return legal("matrix_square_nxn", big=[((seeded_randn(70, 70, seed=36),), {})])


def probe_sin_cos_outputs_lazy_grads():
    """Both outputs, each alone (the other's grad_output None), and gradcheck with undefined grads."""
    return legal("sin_cos_outputs_lazy_grads", big=[((seeded_randn(60, 70, seed=37),), {})])


def probe_layer_norm_returns_stats():
    op, args, _, _, _ = case("layer_norm_returns_stats")
    big = [((seeded_randn(80, 64, seed=38), 1 + 0.1 * seeded_randn(64, seed=39), 0.1 * seeded_randn(64, seed=40)),
            {})]
    ok = legal("layer_norm_returns_stats", big=big)
    y, mean, rstd = op.apply(*[a.clone().requires_grad_() for a in args])
    return ok and y.requires_grad and not mean.requires_grad and not rstd.requires_grad


def probe_softplus_keyword_only_defaults():
    big = [((seeded_randn(60, 70, seed=41),), {"beta": 2.0}), ((seeded_randn(60, 70, seed=42) * 30,), {})]
    return legal("softplus_keyword_only_defaults", big=big)


def probe_affine_keyword_only_tensor():
    big = [((seeded_randn(500, 9, seed=43),), {"weight": seeded_randn(9, seed=44), "scale": 0.5}),
           ((seeded_randn(500, 9, seed=45),), {"weight": seeded_randn(9, seed=46), "bias": seeded_randn(9, seed=47),
                                               "scale": 2.0})]
    return legal("affine_keyword_only_tensor", big=big)


def probe_weighted_sum_star_args():
    big = [(tuple(seeded_randn(50, 60, seed=48 + i) for i in range(4)), {})]
    return legal("weighted_sum_star_args", big=big)


def probe_double_in_place_mark_dirty():
    op, args, _, _, _ = case("double_in_place_mark_dirty")
    ok = legal("double_in_place_mark_dirty", big=[((seeded_randn(60, 70, seed=52),), {})], pass_clones=True)
    x = args[0].clone()
    y = op.apply(x)
    return ok and y is x and torch.equal(x, 2 * args[0])  # it really works in place


def probe_sigmoid_in_place_mark_dirty():
    op, args, _, _, _ = case("sigmoid_in_place_mark_dirty")
    ok = legal("sigmoid_in_place_mark_dirty", big=[((seeded_randn(60, 70, seed=53),), {})], pass_clones=True)
    x = args[0].clone()
    return ok and op.apply(x) is x


def probe_transposed_output_view():
    op, args, _, _, _ = case("transposed_output_view")
    big = [((seeded_randn(500, 8, seed=54), seeded_randn(9, 8, seed=55)), {})]
    return legal("transposed_output_view", big=big) and not op.apply(*args).is_contiguous()


def probe_row_mean_expanded_output():
    op, args, _, _, _ = case("row_mean_expanded_output")
    ok = legal("row_mean_expanded_output", big=[((seeded_randn(60, 70, seed=56),), {})])
    return ok and op.apply(args[0]).stride()[-1] == 0


def probe_mse_loss_0dim():
    op, args, _, _, _ = case("mse_loss_0dim")
    ok = legal("mse_loss_0dim", big=[((seeded_randn(60, 70, seed=57), seeded_randn(60, 70, seed=58)), {})])
    return ok and op.apply(*args).dim() == 0


def probe_cross_entropy_int_targets_0dim():
    big = [((seeded_randn(500, 11, seed=59), randint(11, (500,), seed=60)), {})]
    return legal("cross_entropy_int_targets_0dim", big=big)


def probe_max_with_nondifferentiable_indices():
    return legal("max_with_nondifferentiable_indices", big=[((seeded_randn(60, 70, seed=61),), {})])


def probe_add_returns_one_grad_for_both():
    op, args, _, _, _ = case("add_returns_one_grad_for_both")
    ok = legal("add_returns_one_grad_for_both", big=[((seeded_randn(60, 70, seed=62), seeded_randn(60, 70, seed=63)),
                                                      {})])
    # leaves keep separate .grad tensors, and accumulating into one leaves the other alone
    x, y = (a.clone().requires_grad_() for a in args)
    g = seeded_randn(4, 6, seed=64)
    op.apply(x, y).backward(g)
    op.apply(x, y).backward(g)
    return ok and x.grad is not y.grad and close(x.grad, 2 * g, 1e-6) and close(y.grad, 2 * g, 1e-6)


def probe_embedding_repeated_indices():
    op, args, _, _, _ = case("embedding_repeated_indices")
    ok = legal("embedding_repeated_indices", big=[((seeded_randn(300, 16, seed=65), randint(300, (20, 25), seed=66)),
                                                   {})])
    return ok and args[1].unique().numel() < args[1].numel()  # repeats are there


def probe_rounded_offset_zero_grad():
    big = [((seeded_randn(60, 70, seed=67), 3 * seeded_randn(60, 70, seed=68)), {})]
    return legal("rounded_offset_zero_grad", big=big)


def probe_floor_offset_none_for_zero_grad():
    big = [((seeded_randn(60, 70, seed=69), 3 * seeded_randn(60, 70, seed=70)), {})]
    return legal("floor_offset_none_for_zero_grad", big=big)


def probe_unflatten_contiguous_backward():
    return legal("unflatten_contiguous_backward", big=[((seeded_randn(50, 120, seed=71), 6), {})])


def probe_row_sum_expanded_grad():
    return legal("row_sum_expanded_grad", big=[((seeded_randn(60, 70, seed=72),), {})])


def probe_mul_add_needs_input_grad():
    big = [(tuple(seeded_randn(60, 70, seed=73 + i) for i in range(3)), {})]
    return legal("mul_add_needs_input_grad", big=big)


def probe_triton_leaky_relu():
    return legal("triton_leaky_relu", big=[((seeded_randn(50, 90, seed=76), 0.1), {})])


def probe_triton_square_hardened():
    return legal("triton_square_hardened", big=[((seeded_randn(50, 90, seed=77),), {})])


# ---------------------------------------------------------------------------
# Planted probes: each provokes its bug directly
# ---------------------------------------------------------------------------

def leaf(t):
    return t.detach().clone().requires_grad_(True)


def probe_silu_stride_zero_fast_path():
    op = case("silu_stride_zero_fast_path")[0]
    x0 = seeded_randn(4, 6, seed=301)
    w = seeded_randn(4, seed=302)
    expected = (w[:, None] * silu_derivative(x0.double()))
    seen = []
    x = leaf(x0)
    y = op.apply(x)
    y.register_hook(lambda g: seen.append(g.stride()))
    gx, = torch.autograd.grad((y.sum(-1) * w).sum(), x)
    wrong_10 = seen == [(1, 0)] and not close(gx, expected, 1e-3)
    # right for .sum() (all strides 0), .sum(dim=0) and a random contiguous grad_output
    x = leaf(x0)
    right_sum = close(torch.autograd.grad(op.apply(x).sum(), x)[0], silu_derivative(x0.double()), 1e-5)
    v = seeded_randn(6, seed=303)
    right_sum0 = close(torch.autograd.grad((op.apply(x).sum(0) * v).sum(), x)[0],
                       v * silu_derivative(x0.double()), 1e-5)
    g = seeded_randn(4, 6, seed=304)
    right_random = close(torch.autograd.grad(op.apply(x), x, g)[0], g * silu_derivative(x0.double()), 1e-5)
    return wrong_10 and right_sum and right_sum0 and right_random


def probe_normalizes_frozen_weight_in_place():
    op, args, _, reference, _ = case("normalizes_frozen_weight_in_place")
    x0, w0 = args
    g = seeded_randn(4, 6, seed=305)
    # trained weight: untouched, gradients right
    x, w = leaf(x0), leaf(w0)
    gx, gw = torch.autograd.grad(op.apply(x, w), (x, w), g)
    rx, rw = ref_grads(reference, (x0, w0), g)
    right_trained = close(gx, rx, 1e-5) and close(gw, rw, 1e-5) and torch.equal(w.detach(), w0)
    # frozen weight: the caller's tensor is overwritten (the output is still right)
    x, w = leaf(x0), w0.clone()
    out = op.apply(x, w)
    written = not torch.equal(w, w0) and close(w, w0 / w0.norm(), 1e-6)
    return right_trained and written and close(out, reference(x0.double(), w0.double()), 1e-5)


def probe_mul_shared_workspace():
    op, args, _, _, _ = case("mul_shared_workspace")
    x, y = leaf(args[0]), leaf(args[1])
    g = seeded_randn(4, 6, seed=306)
    gx, gy = torch.autograd.grad(op.apply(x, y), (x, y), g)
    return gx is gy and close(gy, g * args[0], 1e-6) and not close(gx, g * args[1], 1e-3)


def probe_exp_sin_unused_output_crashes():
    op, args, _, _, _ = case("exp_sin_unused_output_crashes")
    x0 = args[0]
    g1, g2 = seeded_randn(4, 6, seed=307), seeded_randn(4, 6, seed=308)
    x = leaf(x0)
    e, s = op.apply(x)
    right_both = close(torch.autograd.grad((e, s), x, (g1, g2))[0], g1 * x0.exp() + g2 * x0.cos(), 1e-5)
    x = leaf(x0)
    e, s = op.apply(x)
    return right_both and raises(lambda: torch.autograd.grad(e, x, g1), TypeError)


def probe_row_mean_dim_mixup_square():
    op = case("row_mean_dim_mixup_square")[0]
    results = []
    for shape, seed in (((5, 5), 309), ((4, 6), 310)):
        x = leaf(seeded_randn(*shape, seed=seed))
        g = seeded_randn(shape[0], seed=seed + 100)
        gx, = torch.autograd.grad(op.apply(x), x, g)
        results.append(close(gx, (g[:, None] / shape[1]).expand(shape), 1e-5))
    return results == [True, False]


def probe_sin_cos_drops_second_output():
    op, args, _, _, _ = case("sin_cos_drops_second_output")
    x0 = args[0]
    g1, g2 = seeded_randn(4, 6, seed=311), seeded_randn(4, 6, seed=312)
    x = leaf(x0)
    gx, = torch.autograd.grad(op.apply(x), x, (g1, g2))
    wrong = not close(gx, g1 * x0.cos() - g2 * x0.sin(), 1e-3)
    x = leaf(x0)
    right_first_only = close(torch.autograd.grad(op.apply(x)[0], x, g1)[0], g1 * x0.cos(), 1e-5)
    return wrong and right_first_only


def probe_token_shift_block_halo_3_of_2000():
    op, args, _, reference, _ = case("token_shift_block_halo_3_of_2000")
    x = leaf(args[0])
    g = seeded_randn(2000, seed=313)
    gx, = torch.autograd.grad(op.apply(x), x, g)
    expected, = ref_grads(reference, (args[0],), g)
    bad = ((gx.double() - expected).abs() > 1e-6).nonzero().flatten().tolist()
    fully_wrong = all(gx[i].item() == 0 and expected[i].item() != 0 for i in bad)
    # small inputs (one block) are right
    xs = leaf(seeded_randn(4, 6, seed=314))
    gs = seeded_randn(4, 6, seed=315)
    right_small = close(torch.autograd.grad(op.apply(xs), xs, gs)[0], ref_grads(reference, (xs,), gs)[0], 1e-6)
    forward_right = close(op.apply(args[0]), reference(args[0].double()), 1e-6)
    return bad == [499, 999, 1499] and fully_wrong and right_small and forward_right


def probe_square_views_saved_input():
    op, args, _, _, _ = case("square_views_saved_input")
    g = seeded_randn(4, 6, seed=316)
    x = leaf(args[0])
    right = close(torch.autograd.grad(op.apply(x), x, g)[0], 2 * g * args[0], 1e-6)
    xt = transposed_layout(args[0].clone()).requires_grad_(True)
    y = op.apply(xt)  # the forward takes it
    return right and raises(lambda: torch.autograd.grad(y, xt, g), RuntimeError)


def probe_mean_forward_wrong_count():
    op, args, _, reference, _ = case("mean_forward_wrong_count")
    x = leaf(args[0])
    forward_wrong = not close(op.apply(x), reference(args[0].double()), 1e-3)
    g = seeded_randn(4, seed=317)
    backward_right = close(torch.autograd.grad(op.apply(x), x, g)[0], ref_grads(reference, (args[0],), g)[0], 1e-6)
    return forward_wrong and backward_right


def probe_fused_cross_entropy_first_element():
    op, args, _, reference, _ = case("fused_cross_entropy_first_element")
    logits0, target = args
    g = seeded_randn(5, seed=318)
    expected, = ref_grads(lambda z: reference(z, target), (logits0,), g)
    x = leaf(logits0)
    gx, = torch.autograd.grad(op.apply(x, target), x, g)
    wrong_random = not close(gx, expected, 1e-3)
    x = leaf(logits0)
    ones = torch.ones(5, device=DEVICE)
    right_uniform = close(torch.autograd.grad(op.apply(x, target), x, ones)[0],
                          ref_grads(lambda z: reference(z, target), (logits0,), ones)[0], 1e-5)
    # the by-design write: the saved gradient was scaled in place, so a second backward is refused
    x = leaf(logits0)
    loss = op.apply(x, target)
    torch.autograd.grad(loss, x, ones, retain_graph=True)
    second_refused = raises(lambda: torch.autograd.grad(loss, x, ones), RuntimeError)
    return wrong_random and right_uniform and second_refused


def _ignores_grad_output(op, x0, derivative):
    g = seeded_randn(*x0.shape, seed=319)
    x = leaf(x0)
    wrong = not close(torch.autograd.grad(op.apply(x), x, g)[0], g * derivative, 1e-3)
    x = leaf(x0)
    right_ones = close(torch.autograd.grad(op.apply(x).sum(), x)[0], derivative, 1e-5)
    return wrong and right_ones


def probe_softplus_no_chain_rule():
    op, args, _, _, _ = case("softplus_no_chain_rule")
    return _ignores_grad_output(op, args[0], torch.sigmoid(args[0].double()))


def probe_triton_gelu_no_chain_rule():
    op, args, _, _, _ = case("triton_gelu_no_chain_rule")
    x = args[0].double()
    derivative = 0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return _ignores_grad_output(op, args[0], derivative)


def _uniform_only(op, x0, derivative):
    g = seeded_randn(*x0.shape, seed=320)
    x = leaf(x0)
    wrong = not close(torch.autograd.grad(op.apply(x), x, g)[0], g * derivative, 1e-3)
    x = leaf(x0)
    right_sum = close(torch.autograd.grad(op.apply(x).sum(), x)[0], derivative, 1e-5)
    right_mean = close(torch.autograd.grad(op.apply(x).mean(), x)[0], derivative / x0.numel(), 1e-5)
    return wrong and right_sum and right_mean


def probe_tanh_grad_output_first_element():
    op, args, _, _, _ = case("tanh_grad_output_first_element")
    x = args[0].double()
    ok = _uniform_only(op, args[0], 1 - torch.tanh(x) ** 2)
    # no reference: finite differences (gradcheck, float64) see it too
    return ok and raises(lambda: torch.autograd.gradcheck(op.apply, (x.clone().requires_grad_(),)))


def probe_sigmoid_grad_output_mean():
    op, args, _, _, _ = case("sigmoid_grad_output_mean")
    s = torch.sigmoid(args[0].double())
    return _uniform_only(op, args[0], s * (1 - s))


def probe_cube_derivative_cached_on_class():
    op = case("cube_derivative_cached_on_class")[0]
    op._derivatives.clear()
    x1, x2 = seeded_randn(4, 6, seed=321), seeded_randn(4, 6, seed=322)
    g = seeded_randn(4, 6, seed=323)
    a = leaf(x1)
    first_right = close(torch.autograd.grad(op.apply(a), a, g)[0], 3 * g * x1 ** 2, 1e-6)
    b = leaf(x2)
    second = torch.autograd.grad(op.apply(b), b, g)[0]
    stale = close(second, 3 * g * x1 ** 2, 1e-6) and not close(second, 3 * g * x2 ** 2, 1e-3)
    return first_right and stale


def probe_sin_mutates_grad_output():
    op, args, _, _, _ = case("sin_mutates_grad_output")
    x0 = args[0]
    g = seeded_randn(4, 6, seed=324)
    g_before = g.clone()
    x = leaf(x0)
    gx, = torch.autograd.grad(op.apply(x), x, g)
    mutated = not torch.equal(g, g_before) and gx is g
    # where autograd hands one grad tensor to two branches (the backward of +), the other branch sees the damage
    x = leaf(x0)
    h = 3 * x
    gx2, = torch.autograd.grad(h + op.apply(x), x, g_before.clone())
    wrong_fan_out = not close(gx2, 3 * g_before + g_before * x0.cos(), 1e-3)
    # and an expanded grad_output (from .sum()) cannot be written into
    x = leaf(x0)
    crashes_on_sum = raises(lambda: torch.autograd.grad(op.apply(x).sum(), x), RuntimeError)
    return mutated and wrong_fan_out and crashes_on_sum


def probe_exp_hard_coded_grad_strides():
    op, args, _, _, _ = case("exp_hard_coded_grad_strides")
    x0 = args[0]
    e = x0.double().exp()
    layouts = dict(grad_layouts((4, 6), torch.float32, seed=325))
    results = {}
    for name in ("contiguous", "transposed", "narrow view of a torch.cat"):
        g = layouts[name]
        x = leaf(x0)
        results[name] = close(torch.autograd.grad(op.apply(x), x, g)[0], g * e, 1e-5)
    x = leaf(x0)
    crashes_on_sum = raises(lambda: torch.autograd.grad(op.apply(x).sum(), x), RuntimeError)
    return results == {"contiguous": True, "transposed": False, "narrow view of a torch.cat": False} \
        and crashes_on_sum


def probe_unflatten_view_without_contiguous():
    op, args, _, _, _ = case("unflatten_view_without_contiguous")
    x0, groups = args
    layouts = dict(grad_layouts((3, 4, 2), torch.float32, seed=326))
    x = leaf(x0)
    right = close(torch.autograd.grad(op.apply(x, groups), x, layouts["contiguous"])[0],
                  2 * layouts["contiguous"].reshape(3, 8), 1e-6)
    crashes = []
    for name in ("transposed", "(1, 0)-strided, as after .sum(dim=-1)", "narrow view of a torch.cat"):
        x = leaf(x0)
        crashes.append(raises(lambda: torch.autograd.grad(op.apply(x, groups), x, layouts[name]), RuntimeError))
    return right and all(crashes)


def probe_triton_leaky_relu_floor_grid():
    op = case("triton_leaky_relu_floor_grid")[0]

    def grad_of(x0):
        x = leaf(x0)
        g = seeded_randn(*x0.shape, seed=327)
        gx, = torch.autograd.grad(op.apply(x, 0.1), x, g)
        expected = torch.where(x0 > 0, g, 0.1 * g)
        return gx.reshape(-1), expected.reshape(-1)

    small, small_expected = grad_of(seeded_randn(4, 6, seed=328))
    big, big_expected = grad_of(seeded_randn(3, 1500, seed=329))  # 4500 elements: 4 full blocks + 404
    bad = ((big - big_expected).abs() > 1e-6).nonzero().flatten()
    return close(small, small_expected, 1e-6) and close(big[:4096], big_expected[:4096], 1e-6) \
        and bad.numel() > 390 and int(bad.min()) >= 4096 and bool((big[4096:] == 0).all())


def probe_gelu_tanh_whole_chunks_only():
    op, args, _, reference, _ = case("gelu_tanh_whole_chunks_only")
    x0 = args[0]
    g = seeded_randn(*x0.shape, seed=330)
    x = leaf(x0)
    gx = torch.autograd.grad(op.apply(x), x, g)[0].reshape(-1)
    expected = ref_grads(reference, (x0,), g)[0].reshape(-1)
    tail_zero = bool((gx[4096:] == 0).all()) and close(gx[:4096], expected[:4096], 1e-5)
    xs = leaf(seeded_randn(4, 6, seed=331))
    gs = seeded_randn(4, 6, seed=332)
    right_small = close(torch.autograd.grad(op.apply(xs), xs, gs)[0], ref_grads(reference, (xs,), gs)[0], 1e-5)
    return tail_zero and not close(gx, expected, 1e-3) and right_small


def probe_half_square_reused_workspace():
    op = case("half_square_reused_workspace")[0]
    a0, b0 = seeded_randn(4, 6, seed=333), seeded_randn(4, 6, seed=334)
    g = seeded_randn(4, 6, seed=335)
    a = leaf(a0)
    ga, = torch.autograd.grad(op.apply(a), a, g)
    right_then = close(ga, g * a0, 1e-6)
    b = leaf(b0)
    gb, = torch.autograd.grad(op.apply(b), b, g)
    return right_then and ga is gb and not close(ga, g * a0, 1e-3)


def probe_mul_compacts_grad_tuple():
    op, args, _, _, _ = case("mul_compacts_grad_tuple")
    g = seeded_randn(4, 6, seed=336)
    x, y = leaf(args[0]), leaf(args[1])
    gx, gy = torch.autograd.grad(op.apply(x, y), (x, y), g)
    right_both = close(gx, g * args[1], 1e-6) and close(gy, g * args[0], 1e-6)
    y = leaf(args[1])
    return right_both and raises(lambda: torch.autograd.grad(op.apply(args[0], y), y, g), RuntimeError)


def probe_linear_forgets_bias_grad():
    op, args, _, _, _ = case("linear_forgets_bias_grad")
    x, w, b = (leaf(a) for a in args)
    g = seeded_randn(5, 3, seed=337)
    op.apply(x, w, b).backward(g)
    return b.grad is None and close(w.grad, g.t() @ args[0], 1e-5)


def probe_mul_needs_input_grad_typo():
    op, args, _, _, _ = case("mul_needs_input_grad_typo")
    g = seeded_randn(4, 6, seed=338)
    x, y = leaf(args[0]), leaf(args[1])
    gx, gy = torch.autograd.grad(op.apply(x, y), (x, y), g)
    right_both = close(gx, g * args[1], 1e-6) and close(gy, g * args[0], 1e-6)
    y = leaf(args[1])
    gy_frozen_x, = torch.autograd.grad(op.apply(args[0], y), y, g, allow_unused=True)
    return right_both and gy_frozen_x is None


def probe_exp_reads_storage_flat():
    op, args, _, _, _ = case("exp_reads_storage_flat")
    x0 = args[0]
    right_contiguous = close(op.apply(x0), x0.double().exp(), 1e-6)
    xt = transposed_layout(x0.clone())
    return right_contiguous and torch.equal(xt, x0) and not close(op.apply(xt), x0.double().exp(), 1e-3)


def probe_x_exp_x_detached_exp():
    op, args, _, reference, _ = case("x_exp_x_detached_exp")
    x0 = args[0]
    g = seeded_randn(4, 6, seed=339)
    x = leaf(x0)
    first_right = close(torch.autograd.grad(op.apply(x), x, g)[0], ref_grads(reference, (x0,), g)[0], 1e-5)
    return first_right and not second_order_matches(op, x0, reference, rtol=1e-3)


def probe_tanh_half_detached():
    op, args, _, reference, _ = case("tanh_half_detached")
    x0 = args[0]
    g = seeded_randn(4, 6, seed=340)
    x = leaf(x0)
    first_right = close(torch.autograd.grad(op.apply(x), x, g)[0], ref_grads(reference, (x0,), g)[0], 1e-5)
    # second derivative: d/dx [g (1 - y^2)] = -2 g y (1 - y^2); the op gives half of it
    x = leaf(x0)
    gx, = torch.autograd.grad(op.apply(x), x, g, create_graph=True)
    hv, = torch.autograd.grad(gx.sum(), x)
    y = torch.tanh(x0.double())
    true = -2 * g * y * (1 - y * y)
    return first_right and close(hv, true / 2, 1e-5) and not close(hv, true, 1e-3)


def probe_softsign_grad_with_input_strides():
    op, args, _, _, _ = case("softsign_grad_with_input_strides")
    x0 = args[0]
    g = seeded_randn(4, 6, seed=341)
    expected = g / (1 + x0.double().abs()) ** 2
    x = leaf(x0)
    right_same = close(torch.autograd.grad(op.apply(x), x, g)[0], expected, 1e-6)
    xt = transposed_layout(x0.clone()).requires_grad_(True)
    wrong_mixed = not close(torch.autograd.grad(op.apply(xt), xt, g)[0], expected, 1e-3)
    xt = transposed_layout(x0.clone()).requires_grad_(True)
    right_both_t = close(torch.autograd.grad(op.apply(xt), xt, transposed_layout(g.clone()))[0], expected, 1e-6)
    return right_same and wrong_mixed and right_both_t


def probe_square_frees_cache_after_one_backward():
    op, args, _, _, _ = case("square_frees_cache_after_one_backward")
    x0 = args[0]
    a, b = seeded_randn(4, 6, seed=342), seeded_randn(4, 6, seed=343)
    x = leaf(x0)
    y = op.apply(x)
    right_one_pass = close(torch.autograd.grad((y * a).sum() + (y * b).sum(), x)[0], 2 * x0 * (a + b), 1e-6)
    x = leaf(x0)
    y = op.apply(x)
    torch.autograd.grad((y * a).sum(), x, retain_graph=True)
    return right_one_pass and raises(lambda: torch.autograd.grad((y * b).sum(), x), AttributeError)


def probe_cos_forgot_unpack():
    op, args, _, _, _ = case("cos_forgot_unpack")
    x = leaf(args[0])
    return raises(lambda: torch.autograd.grad(op.apply(x).sum(), x), TypeError)


def probe_twice_exp_unused_as_ones():
    op, args, _, _, _ = case("twice_exp_unused_as_ones")
    x0 = args[0]
    g1, g2 = seeded_randn(4, 6, seed=344), seeded_randn(4, 6, seed=345)
    x = leaf(x0)
    right_both = close(torch.autograd.grad(op.apply(x), x, (g1, g2))[0], 2 * g1 + g2 * x0.exp(), 1e-5)
    x = leaf(x0)
    wrong_unused = not close(torch.autograd.grad(op.apply(x)[1], x, g2)[0], g2 * x0.exp(), 1e-3)
    return right_both and wrong_unused


def probe_softmax_backward_overwrites_output():
    op, args, _, reference, _ = case("softmax_backward_overwrites_output")
    x0 = args[0]
    g = seeded_randn(4, 6, seed=346)
    x = leaf(x0)
    y = op.apply(x)
    y_before = y.detach().clone()
    gx, = torch.autograd.grad(y, x, g)
    right_grad = close(gx, ref_grads(reference, (x0,), g)[0], 1e-5)
    return right_grad and not torch.equal(y.detach(), y_before)


def probe_rmsnorm_missing_normalizer_term():
    op, args, _, reference, _ = case("rmsnorm_missing_normalizer_term")
    x0, w0 = args
    g = seeded_randn(4, 8, seed=347)
    x, w = leaf(x0), leaf(w0)
    gx, gw = torch.autograd.grad(op.apply(x, w), (x, w), g)
    rx, rw = ref_grads(reference, (x0, w0), g)
    return not close(gx, rx, 1e-3) and close(gw, rw, 1e-5) and close(op.apply(x0, w0), reference(x0.double(),
                                                                                               w0.double()), 1e-5)


# ---------------------------------------------------------------------------

def all_probes():
    probes = {}
    for name in list(zoo.BLIND_LEGAL) + list(zoo.BLIND_PLANTED):
        probes[name] = globals()[f"probe_{name}"]
    return probes


if __name__ == "__main__":
    failures = 0
    only = set(sys.argv[1:])
    for name, probe in all_probes().items():
        if only and name not in only:
            continue
        kind = "legal" if name in zoo.BLIND_LEGAL else "planted"
        try:
            result = bool(probe())
        except Exception as error:  # noqa: BLE001
            result = False
            traceback.print_exc()
            print(f"  ({type(error).__name__}: {error})")
        failures += not result
        print(f"{'OK  ' if result else 'FAIL'} {kind:8s} {name}", flush=True)
    print(f"{failures} failing" if failures else "all probes hold")
    sys.exit(1 if failures else 0)
