"""extras/autograd_diagram.py: the chapter's diagrams drawn from the live autograd graph.

What it records is checked against the engine itself: the call order against the
chapter's own instrumentation (04's backward methods append to call_order), the
grad_output against what 04's TritonGELU.backward received (captured_grads) and what
the chapter's register_hook reads, and the .grad values against a plain backward.
Every backward here is driven by a non-uniform grad_output unless the chapter's
uniform one is the point.
"""
import re
import subprocess
import sys
import time

import pytest
import torch
from chapter_scripts import ON_GPU, REPO, SCRIPTS, load_extra, requires_gpu, seeded_randn

diagram = load_extra("autograd_diagram")
chapter = SCRIPTS["04_standalone_complete"]
GOLDEN = REPO / "extras/expected_output"


def run_script(*args):
    return subprocess.run([sys.executable, str(REPO / "extras/autograd_diagram.py"), *args], capture_output=True,
                          text=True, timeout=600, cwd=REPO)


def mask_addresses(text):  # as check_outputs.sh masks them
    return re.sub(r"0x[0-9a-fA-F]+", "0x<address>", text)


@pytest.mark.parametrize("fmt, golden", [("ascii", "autograd_diagram.txt"), ("mermaid", "autograd_diagram.mermaid.txt"),
                                         ("dot", "autograd_diagram.dot.txt")])
def test_the_chapter_diagrams_match_the_golden_file(fmt, golden):
    result = run_script("--format", fmt)
    assert result.returncode == 0, result.stderr
    expected = (GOLDEN / golden).read_text()
    assert mask_addresses(result.stdout) == mask_addresses(expected), (
        f"regenerate, if the new drawing is right: python extras/autograd_diagram.py --format {fmt} > "
        f"extras/expected_output/{golden}")


def test_readme_shows_the_generated_mermaid_blocks():
    readme = (REPO / "README.md").read_text() + "".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    blocks = re.findall(r"```mermaid\n(.*?)```", readme, re.S)
    generated = {r.title: diagram.render_mermaid(r) for r in diagram.chapter_recordings()}
    chapter_blocks = [b for b in blocks if b.startswith("%% 17.")]
    assert len(chapter_blocks) >= 3, "the README should show the chapter's diagrams as Mermaid blocks"
    for block in chapter_blocks:
        title = block.splitlines()[0].removeprefix("%% ")
        assert block == generated.get(title), f"README's block for {title!r} is not what the script draws now"


def by_kind(recording, kind):
    return [n for n in recording.nodes if n.kind == kind]


# --- against the engine ------------------------------------------------------

def test_call_order_is_the_order_the_engine_ran_the_nodes():
    x = seeded_randn(6, seed=60).requires_grad_(True)
    weight = seeded_randn(6, seed=61)
    loss = (weight * chapter.TritonSquare.apply(chapter.TritonGELU.apply(x))).sum()
    chapter.call_order.clear()
    recording = diagram.record_backward(loss, names={"x": x})
    recorded = [n.kind.removesuffix("Backward") + ".backward" for n in recording.called()
                if n.kind.startswith("Triton")]
    assert recorded == chapter.call_order == ["TritonSquare.backward", "TritonGELU.backward"]
    calls = [n.call for n in recording.called()]
    assert calls == list(range(1, len(recording.nodes) + 1)), "every node called once, numbered from 1"


def test_recorded_grad_output_is_what_the_backward_received():
    x = seeded_randn(6, seed=62).requires_grad_(True)
    weight = seeded_randn(6, seed=63)  # a non-uniform grad_output for TritonGELU
    z = chapter.TritonGELU.apply(x)
    hooked = {}
    z.register_hook(lambda grad: hooked.setdefault("z", grad.clone()))
    chapter.captured_grads.clear()
    recording = diagram.record_backward((weight * z).sum(), names={"x": x})
    gelu, = by_kind(recording, "TritonGELUBackward")
    assert len(chapter.captured_grads) == 1
    torch.testing.assert_close(chapter.captured_grads[0], hooked["z"])
    torch.testing.assert_close(hooked["z"], weight)
    assert gelu.received == [diagram.summarize(chapter.captured_grads[0])]
    assert gelu.received[0].startswith("[") and gelu.received[0] != "1"


def test_fan_in_is_one_call_with_each_contribution_and_their_sum():
    x = seeded_randn(4, seed=64).requires_grad_(True)
    z = chapter.TritonGELU.apply(x)
    chapter.captured_grads.clear()
    recording = diagram.record_backward((2 * z).sum() + (3 * z).sum(), names={"x": x})
    gelu, = by_kind(recording, "TritonGELUBackward")
    assert len(chapter.captured_grads) == 1 and gelu.call > 0
    assert sorted(v for _, v in gelu.contributions[0]) == ["2", "3"] and gelu.received == ["5"]
    assert re.search(r"received [23] \+ [23] = 5;", diagram.render_ascii(recording))


def test_recording_leaves_the_same_grads_as_a_plain_backward():
    def build(seed):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), diagram.TritonGELUModule(), torch.nn.Linear(16, 3)).to(
            chapter.DEVICE)
        x = seeded_randn(5, 8, seed=seed).requires_grad_(True)
        return model, x, (model(x) * seeded_randn(5, 3, seed=seed + 1)).sum()

    plain_model, plain_x, plain_loss = build(65)
    plain_loss.backward()
    model, x, loss = build(65)
    diagram.record_backward(loss, names={"x": x, **dict(model.named_parameters())})
    torch.testing.assert_close(x.grad, plain_x.grad, rtol=0, atol=0)
    for (name, p), q in zip(model.named_parameters(), plain_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=name)


# --- graph shapes --------------------------------------------------------------

def test_a_constant_input_is_a_none_edge():
    x = seeded_randn(4, seed=66).requires_grad_(True)
    constant = seeded_randn(4, seed=67)  # needs no grad: its edge is None
    recording = diagram.record_backward((chapter.TritonGELU.apply(x) * constant).sum(), names={"x": x})
    mul, = by_kind(recording, "MulBackward0")
    assert [child for child, _ in mul.inputs].count(None) == 1
    assert "None to x const" in diagram.render_ascii(recording)  # a saved operand, but not a single number
    assert "x const" in diagram.render_mermaid(recording) and "style=dotted" in diagram.render_dot(recording)


def test_two_named_leaves_and_one_used_twice():
    x = seeded_randn(4, seed=68).requires_grad_(True)
    w = seeded_randn(4, seed=69).requires_grad_(True)
    recording = diagram.record_backward((chapter.TritonGELU.apply(x) * w + w * w).sum(), names={"x": x, "w": w})
    leaves = {n.leaf: n for n in recording.nodes if n.kind == "AccumulateGrad"}
    assert set(leaves) == {"x", "w"}, "each leaf once, by the name given"
    assert len(leaves["w"].consumers) == 3, "w feeds w * w twice and the product once"
    assert len(leaves["w"].contributions[0]) == 3 and leaves["w"].call > 0
    ascii_text = diagram.render_ascii(recording)
    assert "writes w.grad" in ascii_text and ascii_text.count("w (AccumulateGrad)  received") == 1


def test_unnamed_leaves_are_numbered():
    a, b = seeded_randn(3, seed=70).requires_grad_(True), seeded_randn(3, seed=71).requires_grad_(True)
    recording = diagram.record_backward((a * b).sum())
    assert sorted(n.leaf for n in recording.nodes if n.leaf) == ["leaf 1", "leaf 2"]


def test_a_node_with_several_outputs():
    x = seeded_randn(6, seed=72).requires_grad_(True)
    first, second = chapter.TritonGELU.apply(x).split(3)
    recording = diagram.record_backward((2 * first).sum() + (3 * second).sum(), names={"x": x})
    split, = by_kind(recording, "SplitBackward0")
    assert split.call > 0 and split.received == ["2", "3"]
    assert "[0] 2; [1] 3" in diagram.render_ascii(recording)


def test_retain_graph_allows_a_second_recorded_backward():
    x = seeded_randn(4, seed=73).requires_grad_(True)
    weight = seeded_randn(4, seed=74)
    loss = (weight * chapter.TritonGELU.apply(x)).sum()
    first = diagram.record_backward(loss, names={"x": x}, retain_graph=True)
    grad_after_one = x.grad.clone()
    second = diagram.record_backward(loss, names={"x": x})
    torch.testing.assert_close(x.grad, 2 * grad_after_one)
    first_text, second_text = diagram.render_ascii(first), diagram.render_ascii(second)
    assert "writes x.grad" in first_text and "added to x.grad, which already held a gradient" in second_text
    assert first_text.replace("writes x.grad", "") == second_text.replace(
        "added to x.grad, which already held a gradient", "")
    assert ".grad += " in diagram.render_mermaid(second) and ".grad = " in diagram.render_mermaid(first)


def test_a_non_scalar_loss_takes_a_gradient():
    x = seeded_randn(4, seed=75).requires_grad_(True)
    z = chapter.TritonGELU.apply(x)
    with pytest.raises(ValueError, match="has 4 elements; .* pass gradient="):
        diagram.record_backward(z)
    gradient = seeded_randn(4, seed=76)
    recording = diagram.record_backward(z, gradient, names={"x": x})
    assert recording.seed == diagram.summarize(gradient)
    gelu, = by_kind(recording, "TritonGELUBackward")
    assert gelu.received == [diagram.summarize(gradient)]


@pytest.mark.parametrize("make, why", [
    (lambda: seeded_randn(3, seed=77).requires_grad_(True), "it is a leaf"),
    (lambda: seeded_randn(3, seed=78), "does not require grad"),
], ids=["leaf", "no-grad"])
def test_a_tensor_without_grad_fn_is_refused_with_the_reason(make, why):
    with pytest.raises(ValueError, match=f"has no grad_fn.*{why}"):
        diagram.record_backward(make())


def test_made_under_no_grad_is_refused():
    x = seeded_randn(3, seed=79).requires_grad_(True)
    with torch.no_grad():
        y = (x * 2).sum()
    with pytest.raises(ValueError, match="no grad_fn"):
        diagram.record_backward(y)


@pytest.mark.parametrize("failing", [False, True], ids=["after-success", "after-failure"])
def test_hooks_are_removed_so_a_later_backward_records_nothing(monkeypatch, failing):
    measured = []
    measure = diagram.measure
    monkeypatch.setattr(diagram, "measure", lambda t: measured.append(t.shape) or measure(t))
    x = seeded_randn(4, seed=80).requires_grad_(True)
    z = chapter.TritonGELU.apply(x)
    loss = (z * seeded_randn(4, seed=81)).sum()
    handle = z.register_hook(lambda grad: (_ for _ in ()).throw(RuntimeError("planted failure"))) if failing else None
    if failing:
        with pytest.raises(RuntimeError, match="planted failure"):
            diagram.record_backward(loss, retain_graph=True)
        handle.remove()
    else:
        diagram.record_backward(loss, retain_graph=True)
    assert measured, "the recorded backward measured nothing: is the test still watching it?"
    measured.clear()
    x.grad = None
    loss.backward()
    assert measured == [], "a hook of the recorded backward was still there"
    assert x.grad is not None


# --- scale and the command line ------------------------------------------------

def test_a_large_graph_is_cut_at_the_node_limit_with_what_was_left_out():
    torch.manual_seed(0)
    stack = diagram.mlp_stack(12, width=8, hidden=16).to(chapter.DEVICE)
    generator = torch.Generator().manual_seed(82)
    x = torch.randn(4, 8, generator=generator).to(chapter.DEVICE)
    loss = (stack(x) * torch.randn(4, 8, generator=generator).to(chapter.DEVICE)).sum()
    recording = diagram.record_backward(loss, names=dict(stack.named_parameters()))
    # 12 nodes a block (LayerNorm, 2 Addmm, TritonGELU, 2 T, 6 AccumulateGrad), then the loss's Mul and Sum.
    nodes = len(recording.nodes)
    assert nodes == 146, f"{nodes} nodes: 12 blocks (144) and the loss's Mul and Sum"
    started = time.perf_counter()
    printed = repr(recording) + "".join(repr(node) for node in recording.nodes)
    assert time.perf_counter() - started < 1.0 and len(printed) < 100_000, (
        f"printing the recording took {time.perf_counter() - started:.1f} s, {len(printed)} characters")
    text = diagram.render_ascii(recording, max_nodes=24)
    backward_lines = [line for line in text.splitlines() if re.match(r"  #\d+ ", line)]
    assert len(backward_lines) == 24
    left = re.search(r"\.\.\. (\d+) more node\(s\) not drawn \((.*)\)", text)
    assert left and int(left[1]) == nodes - 24
    assert "TritonGELUBackward" in left[2] and "AccumulateGrad" in left[2]
    assert "not drawn" in diagram.render_mermaid(recording, max_nodes=24)


def test_scale_and_format_options_run():
    result = run_script("--scale")
    assert result.returncode == 0, result.stderr
    one_block, stack = result.stdout.split("12 such blocks")
    assert len(re.findall(r"^  #\d+ ", one_block, re.M)) == 13, "one block draws 13 nodes"
    assert "... 121 more node(s) not drawn" in stack
    bad = run_script("--format", "svg")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


# --- what a hook, a second backward, or an odd gradient does to the drawing --------

def test_a_tensor_hook_that_changes_a_single_senders_gradient_is_shown():
    x = seeded_randn(4, seed=83).requires_grad_(True)
    z = chapter.TritonGELU.apply(x)
    w = 2 * z
    w.register_hook(lambda grad: grad * 10)  # between SumBackward0 (sender) and MulBackward0 (receiver)
    recording = diagram.record_backward((w * seeded_randn(4, seed=84)).sum(), names={"x": x, "z": z})
    mul = by_kind(recording, "MulBackward0")[-1]  # 2 * z, the second Mul the engine calls
    assert mul.changed_by_hook == [True], diagram.render_ascii(recording)
    assert "a tensor hook changed it" in diagram.render_ascii(recording)
    untouched = [n for n in recording.nodes if n is not mul and n.changed_by_hook]
    assert not any(flag for n in untouched for flag in n.changed_by_hook)


def test_a_tensor_hook_on_a_fan_in_value_is_shown_against_the_sum():
    x = seeded_randn(4, seed=85).requires_grad_(True)
    z = chapter.TritonGELU.apply(x)
    z.register_hook(lambda grad: grad * 10)
    recording = diagram.record_backward((2 * z).sum() + (3 * z).sum(), names={"x": x, "z": z})
    gelu, = by_kind(recording, "TritonGELUBackward")
    assert gelu.received == ["50"] and gelu.changed_by_hook == [True]
    assert re.search(r"received [23] \+ [23] then a hook made it 50;", diagram.render_ascii(recording))


def test_named_intermediate_values_and_saved_constants_are_drawn():
    x = seeded_randn(4, seed=86).requires_grad_(True)
    z = chapter.TritonGELU.apply(x)
    recording = diagram.record_backward((2 * z).sum() + (3 * z).sum(), names={"x": x, "z": z})
    text = diagram.render_ascii(recording)
    assert "x --[TritonGELU]--> z" in text
    assert "z --[Mul, x 2]-->" in text and "z --[Mul, x 3]-->" in text


def test_arrows_point_the_way_the_gradient_moves():
    x = seeded_randn(4, seed=87).requires_grad_(True)
    recording = diagram.record_backward(chapter.TritonGELU.apply(x).sum(), names={"x": x})
    mermaid = diagram.render_mermaid(recording)
    assert mermaid.splitlines()[0] == "flowchart RL" and diagram.GRAPH_LEGEND in mermaid
    assert 'loss -->|"grad 1"| n0' in mermaid, "the first arrow leaves the loss"
    assert "rankdir=RL" in diagram.render_dot(recording)


@pytest.mark.parametrize("renderer", ["render_ascii", "render_mermaid", "render_dot"])
@pytest.mark.parametrize("max_nodes", [0, -1])
def test_a_node_limit_below_one_is_refused(renderer, max_nodes):
    x = seeded_randn(4, seed=88).requires_grad_(True)
    recording = diagram.record_backward(chapter.TritonGELU.apply(x).sum())
    with pytest.raises(ValueError, match="max_nodes must be"):
        getattr(diagram, renderer)(recording, max_nodes=max_nodes)


def test_a_sparse_gradient_is_summarised_from_its_stored_values():
    embedding = torch.nn.Embedding(10, 4, sparse=True)
    indices = torch.tensor([1, 2, 1])
    recording = diagram.record_backward((embedding(indices) * torch.randn(3, 4)).sum(),
                                        names=dict(embedding.named_parameters()))
    leaf, = [n for n in recording.nodes if n.leaf == "weight"]
    assert leaf.received[0].startswith("(sparse, 8 stored) [10, 4] in ["), leaf.received


def test_a_complex_gradient_is_labelled_as_its_magnitude():
    c = torch.randn(3, dtype=torch.complex64, generator=torch.Generator().manual_seed(89)).requires_grad_(True)
    recording = diagram.record_backward((c * c).abs().sum(), names={"c": c})
    leaf, = [n for n in recording.nodes if n.leaf == "c"]
    expected = "[" + ", ".join(f"{v:.4f}" for v in c.grad.abs().tolist()) + "]"
    assert leaf.received == [f"(complex, |g|) {expected}"]


def test_an_expanded_gradient_is_measured_without_a_copy(monkeypatch):
    reduced = []
    aminmax = torch.aminmax
    monkeypatch.setattr(torch, "aminmax", lambda t: reduced.append(t.numel()) or aminmax(t))
    e = torch.randn(8192, 1).requires_grad_(True)
    recording = diagram.record_backward(e.expand(8192, 8192).sum(), names={"e": e})  # Sum sends a stride-0 view
    assert max(reduced) <= 8192, f"reduced {max(reduced)} elements: the expanded (8192, 8192) view was copied"
    assert "8192" in diagram.render_ascii(recording)


@requires_gpu
def test_gradients_on_two_devices_are_read_back():
    x = seeded_randn(4, seed=90).requires_grad_(True)
    weight = torch.randn(4)
    recording = diagram.record_backward((chapter.TritonGELU.apply(x).cpu() * weight).sum(), names={"x": x})
    leaf, = [n for n in recording.nodes if n.leaf == "x"]
    assert leaf.received == [diagram.summarize(x.grad)]

