# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "torch==2.13.0",
#     "triton==3.7.1; sys_platform == 'linux'",
#     "triton-windows==3.7.1.post27; sys_platform == 'win32'",
#     "numpy==2.4.6; python_version >= '3.11'",
#     "numpy==2.2.6; python_version < '3.11'",
# ]
# ///
"""
Beyond the chapter: the chapter's diagrams, drawn from the live autograd graph
==============================================================================

Not part of Chapter 17. The chapter draws its three graphs by hand; this file draws
them from PyTorch's own objects while the backward runs. It walks ``loss.grad_fn``
through ``next_functions`` (section 17.2), puts a hook on every node
(``Node.register_prehook`` for what a node received, ``Node.register_hook`` for what
it sent), and shows for each node the order the engine called it, the grad_output it
received, and what it sent along each edge; where a value had several consumers
(section 17.3), each contribution and their sum, received by one call.

Run as a script, it draws the chapter's graphs (17.1 with the buggy chain beside it,
17.2, 17.3.1 and 17.3.2); stdout is the same on a GPU and on the CPU:

    python extras/autograd_diagram.py                    # ASCII, for a terminal
    python extras/autograd_diagram.py --format mermaid   # Mermaid blocks, as in README.md
    python extras/autograd_diagram.py --format dot       # Graphviz DOT text (render with dot)
    python extras/autograd_diagram.py --scale            # an MLP block and a 12-block stack
    python extras/autograd_diagram.py --overhead         # recording's cost against a plain backward

Or on any loss of your own:

    from autograd_diagram import record_backward, render_ascii
    recording = record_backward(loss, names={"x": x, **dict(model.named_parameters())})
    print(render_ascii(recording))

``record_backward`` runs the backward itself (as ``loss.backward()`` would, leaving
the same ``.grad`` values) and removes every hook afterwards, on error too.

Self-contained on purpose: its kernels and helpers are copies of
04_standalone_complete.py's, and tests/test_drift.py keeps them identical. Its
Functions are the chapter's without the chapter's call recording: the hooks see
every call instead.
"""
import argparse
import contextlib
import dataclasses
import functools
import math
import os
import statistics
import sys
import time

import torch

# Added: choose where the kernels run before triton is imported and any kernel
# is defined. The interpreter is switched on through the environment, so this
# must come first; a TRITON_INTERPRET that the reader switched on is kept.
# Triton 3.7 reads 1, true, yes, y and on, in any case, as on; older releases only
# 1. Any of them is written back as 1, so that every release interprets.
if os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "yes", "y", "on"):  # changed: not "1" alone
    os.environ["TRITON_INTERPRET"] = "1"  # changed: the one spelling every Triton release reads as on
    DEVICE = torch.device("cpu")
    print("TRITON_INTERPRET=1: running on the CPU through the Triton interpreter", file=sys.stderr)
elif torch.cuda.is_available():
    DEVICE = torch.device("cuda", torch.cuda.current_device())
    print(f"running on {torch.cuda.get_device_name(DEVICE)} ({'ROCm' if torch.version.hip else 'CUDA'})", file=sys.stderr)
else:
    os.environ["TRITON_INTERPRET"] = "1"
    DEVICE = torch.device("cpu")
    print("no CUDA GPU visible: running on the CPU through the Triton interpreter", file=sys.stderr)

import triton  # noqa: E402  (after the backend choice above)
import triton.language as tl  # noqa: E402


# ---------------------------------------------------------------------------
# The kernels and launch helpers, copied from 04_standalone_complete.py
# ---------------------------------------------------------------------------

@triton.jit
def compute_dtype(v):
    # Added: tl.math.erf takes only fp32 and fp64, so fp16 and bf16 values are
    # computed in fp32; fp64 stays fp64. tl.store rounds back to the tensor's dtype.
    if v.dtype != tl.float64:
        v = v.to(tl.float32)
    return v


@triton.jit
def gelu_forward_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    SQRT_2_INV: tl.constexpr = 0.7071067811865476
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT_2_INV))
    out = x * cdf
    tl.store(out_ptr + offsets, out, mask=mask)


@triton.jit
def gelu_backward_kernel(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    grad_out = compute_dtype(tl.load(grad_out_ptr + offsets, mask=mask, other=0.0))  # changed: as x
    SQRT_2_INV: tl.constexpr = 0.7071067811865476
    SQRT_2PI_INV: tl.constexpr = 0.3989422804014327
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT_2_INV))
    pdf = SQRT_2PI_INV * tl.exp(-0.5 * x * x)
    d_gelu = cdf + x * pdf  # d/dx[x * Phi(x)] = Phi(x) + x * phi(x)
    grad_in = grad_out * d_gelu  # the chain rule: dL/dx = dL/dz * dz/dx
    tl.store(grad_in_ptr + offsets, grad_in, mask=mask)


@triton.jit
def gelu_backward_kernel_buggy_no_chain_rule(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    SQRT_2_INV: tl.constexpr = 0.7071067811865476
    SQRT_2PI_INV: tl.constexpr = 0.3989422804014327
    cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT_2_INV))
    pdf = SQRT_2PI_INV * tl.exp(-0.5 * x * x)
    d_gelu = cdf + x * pdf
    tl.store(grad_in_ptr + offsets, d_gelu, mask=mask)  # BUG: never multiplied by grad_out


@triton.jit
def square_forward_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    tl.store(out_ptr + offsets, x * x, mask=mask)


@triton.jit
def square_backward_kernel(grad_out_ptr, x_ptr, grad_in_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # changed: int64, or pid * BLOCK wraps past 2**31 elements
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = compute_dtype(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # changed: fp16/bf16 in fp32
    grad_out = compute_dtype(tl.load(grad_out_ptr + offsets, mask=mask, other=0.0))  # changed: as x
    tl.store(grad_in_ptr + offsets, grad_out * 2.0 * x, mask=mask)  # d/dx[x^2] = 2x, times dL/dy


# Added: the kernels read and write one flat, contiguous run of floats on one
# device of DEVICE's kind (any GPU, or the CPU for the interpreter). Anything else
# would give silently wrong numbers, so it is refused here, or (for other strides)
# copied once into a contiguous tensor.
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def kernel_operands(*tensors):
    for t in tensors:
        if t.dtype not in KERNEL_DTYPES:
            raise TypeError(f"the Triton kernels take float16, bfloat16, float32 or float64 tensors, not {t.dtype}")
        if t.device.type != DEVICE.type:
            raise ValueError(f"a tensor is on {t.device}, but the Triton kernels run on {DEVICE.type} tensors here "
                             f"({DEVICE} is current): move it there with .to({str(DEVICE)!r})")
        if t.device != tensors[0].device:
            raise ValueError(f"the kernels need operands on one device, got {tensors[0].device} and {t.device}")
        if t.shape != tensors[0].shape or t.dtype != tensors[0].dtype:
            raise ValueError(f"the kernels need operands of one shape and dtype, got "
                             f"{tuple(tensors[0].shape)} {tensors[0].dtype} and {tuple(t.shape)} {t.dtype}")
    return tuple(t.contiguous() for t in tensors)  # no copy when already contiguous


# Added: Triton launches on the current CUDA device, which refuses a tensor on another
# GPU (cuda:1 while cuda:0 is current, as on every rank but 0 of a multi-GPU job whose
# scripts were imported before it chose its device), so each launch is made with the
# tensor's own device current.
def device_of(t):
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()


# Added: the backward methods launch a kernel, so the gradients they return
# carry no graph, and a double backward (create_graph=True, as in a gradient
# penalty) would silently treat them as constants. torch's once_differentiable
# only catches the case where grad_output requires grad, not where x does, so
# the check is made here, on the grad mode that create_graph=True switches on.
def no_double_backward(backward):
    @functools.wraps(backward)
    def backward_without_graph(ctx, *grad_outputs):
        if torch.is_grad_enabled():
            raise RuntimeError(f"{backward.__qualname__} has no derivative of its own: double backward "
                               "(create_graph=True) through the Triton kernels is not supported")
        return backward(ctx, *grad_outputs)
    return backward_without_graph


def _launch(fwd_kernel, x, BLOCK=None):  # changed: BLOCK=1024, see below
    x, = kernel_operands(x)  # added: dtype and device checked, any strides made contiguous
    BLOCK = BLOCK or 4096 // x.element_size()  # added: 4 KiB a program; fp32 keeps 1024, bf16 gets 2048
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)
    with device_of(x):  # added: launch on x's own GPU, any cuda:N
        fwd_kernel[grid](x, out, n, BLOCK=BLOCK)
    return out


def _launch_bwd(bwd_kernel, grad_output, x, BLOCK=None):  # changed: BLOCK=1024, see below
    grad_output, x = kernel_operands(grad_output, x)  # added: as in the forward
    BLOCK = BLOCK or 4096 // x.element_size()  # added: 4 KiB a program; fp32 keeps 1024, bf16 gets 2048
    grad_input = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)
    with device_of(x):  # added: launch on x's own GPU, any cuda:N
        bwd_kernel[grid](grad_output, x, grad_input, n, BLOCK=BLOCK)
    return grad_input


# The chapter's Functions, without its call-recording lists: the hooks below see every call.
class TritonGELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = _launch(gelu_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return _launch_bwd(gelu_backward_kernel, grad_output.contiguous(), x)


class TritonGELUBuggy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = _launch(gelu_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return _launch_bwd(gelu_backward_kernel_buggy_no_chain_rule, grad_output.contiguous(), x)


class TritonSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = _launch(square_forward_kernel, x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    @no_double_backward
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return _launch_bwd(square_backward_kernel, grad_output.contiguous(), x)


# ---------------------------------------------------------------------------
# Recording: the graph from next_functions, then one backward with a hook on every node
# ---------------------------------------------------------------------------

SMALL = 6  # a gradient of at most this many elements is shown whole


def summarize(t):
    """A gradient in a few characters: a uniform tensor as its value ("2"), a small one as
    its values, a larger one as its shape and range; None as "None"."""
    if t is None:
        return "None"
    shape, numbers = measure(t)
    return describe(shape, read_all([(shape, numbers)])[0])


def measure(t):
    """(shape, numbers) for describe(): a copy of a small tensor's values, else its minimum and
    maximum (equal when it is uniform), as tensors on t's device: the hooks make no GPU-to-CPU
    round trip during the backward, and launch one kernel a gradient."""
    flat = t.detach().flatten()
    if flat.numel() <= SMALL:
        return list(t.shape), (flat.clone(),)
    return list(t.shape), tuple(torch.aminmax(flat))


def read_all(measured):
    """Every measure()'s numbers as Python floats: one copy to the CPU for each dtype."""
    pieces = [piece.reshape(-1) for _, numbers in measured for piece in numbers]
    by_dtype = {}
    for i, piece in enumerate(pieces):
        by_dtype.setdefault(piece.dtype, []).append(i)
    values = [None] * len(pieces)
    for indices in by_dtype.values():
        flat = torch.cat([pieces[i] for i in indices]).double().cpu().tolist()
        offset = 0
        for i in indices:
            values[i] = flat[offset:offset + pieces[i].numel()]
            offset += pieces[i].numel()
    numbers, k = [], 0
    for _, parts in measured:
        numbers.append([v for part in values[k:k + len(parts)] for v in part])
        k += len(parts)
    return numbers


def describe(shape, numbers):
    numbers = numbers.tolist() if isinstance(numbers, torch.Tensor) else list(numbers)
    if math.prod(shape) <= SMALL:
        if not numbers:
            return f"empty {shape}"
        if all(v == numbers[0] for v in numbers):
            return f"{numbers[0]:g}"
        return "[" + ", ".join(f"{v:.4f}" for v in numbers) + "]"
    low, high = numbers
    if low == high:  # uniform
        return f"{low:g}"
    return f"{shape} in [{low:.3g}, {high:.3g}]"


@dataclasses.dataclass(eq=False)
class Node:
    """One autograd node, as the walk found it and as the backward ran it."""
    kind: str                 # node.name(), e.g. "TritonGELUBackward", "AccumulateGrad"
    leaf: str = ""            # for AccumulateGrad: the name of the tensor it writes .grad into
    inputs: list = dataclasses.field(default_factory=list)     # per edge: (Node or None, output slot)
    consumers: list = dataclasses.field(default_factory=list)  # (Node, edge) pairs that point here
    call: int = 0             # the engine's call number, from 1; 0 if it never ran
    received: list = dataclasses.field(default_factory=list)   # per output slot: a summary
    sent: list = dataclasses.field(default_factory=list)       # per edge: a summary
    contributions: dict = dataclasses.field(default_factory=dict)  # slot: [(consumer, summary)]

    @property
    def label(self):
        return f"{self.leaf} (AccumulateGrad)" if self.leaf else self.kind

    @property
    def ref(self):
        return f"#{self.call} {self.label}" if self.call else self.label

    @property
    def op(self):
        """The forward operation's name: MulBackward0 -> Mul, TritonGELUBackward -> TritonGELU."""
        base = self.kind.split("Backward")[0]
        return base or self.kind


@dataclasses.dataclass
class BackwardRecording:
    """What record_backward saw: the nodes, in the order the walk from the loss found them."""
    title: str
    nodes: list
    root: Node
    seed: str                 # the gradient the backward started from, as summarize() gives it

    def called(self):
        return sorted((n for n in self.nodes if n.call), key=lambda n: n.call)


def walk(grad_fn, names):
    """Every node reachable from grad_fn through next_functions, each once (a node shared by
    several paths too), breadth first; and each Node's autograd object, for the hooks."""
    leaf_names = {id(tensor): name for name, tensor in names.items()}
    nodes, functions, found = [], {}, {}

    def node_for(fn):
        if fn not in found:
            kind = fn.name().removeprefix("torch::autograd::")
            leaf = ""
            if kind == "AccumulateGrad":
                unnamed = sum(1 for n in nodes if n.leaf.startswith("leaf "))
                leaf = leaf_names.get(id(fn.variable), f"leaf {unnamed + 1}")
            found[fn] = Node(kind, leaf)
            nodes.append(found[fn])
            functions[found[fn]] = fn
            pending.append(fn)
        return found[fn]

    pending = []
    root = node_for(grad_fn)
    while pending:
        fn = pending.pop(0)
        node = found[fn]
        for edge, (child, slot) in enumerate(fn.next_functions):
            child_node = None if child is None else node_for(child)
            node.inputs.append((child_node, slot))
            if child_node is not None:
                child_node.consumers.append((node, edge))
    return nodes, root, functions


def record_backward(loss, gradient=None, *, names=None, retain_graph=False, title=""):
    """Runs loss.backward(gradient) with a hook on every node, and returns what each node
    received and sent, in the order the engine called them.

    names: {"x": x, "weight": w, ...}, the leaves to name (else "leaf 1", "leaf 2", ...).
    The hooks are removed afterwards, on error too; the .grad values are those of a plain
    backward.
    """
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"record_backward needs a tensor, not {type(loss).__name__}")
    if loss.grad_fn is None:
        why = "it is a leaf" if loss.requires_grad else "it does not require grad (made under torch.no_grad(), or from tensors that need no grad)"
        raise ValueError(f"record_backward: the tensor has no grad_fn, so there is no backward graph to draw: {why}")
    if gradient is None and loss.numel() != 1:
        raise ValueError(f"record_backward: the loss has {loss.numel()} elements; as with loss.backward(gradient), "
                         f"pass gradient=, a tensor of its shape {list(loss.shape)}")
    nodes, root, functions = walk(loss.grad_fn, names or {})
    calls = iter(range(1, len(nodes) + 1))
    measured = []  # (shape, numbers on the device): each gradient the hooks saw, read at the end
    sent_as = {}  # (id of the receiving Node, slot): the last tensor sent there, as signature() gives it

    def signature(g):  # the same storage, dtype and shape: the same tensor, alive in the engine
        return g.data_ptr(), g.dtype, tuple(g.shape)

    def keep(grad):
        if grad is None:
            return None
        measured.append(measure(grad))
        return len(measured) - 1

    def on_receive(node):
        def hook(grad_outputs):
            node.call = next(calls)
            # From a single sender, the grad_output is usually the very tensor it sent, measured
            # already; a sum of several, a cast one, or the loss's seed is measured here.
            node.received = []
            for slot, g in enumerate(grad_outputs):
                senders = node.contributions.get(slot, [])
                same = len(senders) == 1 and g is not None and sent_as.get((id(node), slot)) == signature(g)
                node.received.append(senders[0][1] if same else keep(g))
        return hook

    def on_send(node):
        def hook(grad_inputs, grad_outputs):
            node.sent = [keep(g) for g in grad_inputs]
            for (child, slot), value, g in zip(node.inputs, node.sent, grad_inputs):
                if child is not None:
                    child.contributions.setdefault(slot, []).append((node, value))
                    if g is not None:
                        sent_as[(id(child), slot)] = signature(g)
        return hook

    handles = []
    try:
        for node in nodes:
            fn = functions[node]
            handles.append(fn.register_prehook(on_receive(node)))
            handles.append(fn.register_hook(on_send(node)))
        seed = torch.ones_like(loss) if gradient is None else gradient
        torch.autograd.backward(loss, gradient, retain_graph=retain_graph)
    finally:
        for handle in handles:
            handle.remove()
    # Every number the hooks kept, read at once; then each index becomes its summary.
    texts = [describe(shape, numbers) for (shape, _), numbers in zip(measured, read_all(measured))]
    text = lambda index: "None" if index is None else texts[index]  # noqa: E731
    for node in nodes:
        node.received = [text(i) for i in node.received]
        node.sent = [text(i) for i in node.sent]
        node.contributions = {slot: [(sender, text(i)) for sender, i in pairs]
                              for slot, pairs in node.contributions.items()}
    return BackwardRecording(title, nodes, root, summarize(seed))


# ---------------------------------------------------------------------------
# Renderers: ASCII (the default), Mermaid (GitHub draws it), Graphviz DOT text
# ---------------------------------------------------------------------------

def received_text(node):
    """What a node received: with several contributions to one slot, each and their sum."""
    parts = []
    for slot, value in enumerate(node.received):
        contributions = node.contributions.get(slot, [])
        text = value
        if len(contributions) > 1:
            text = " + ".join(v for _, v in contributions) + f" = {value}"
        parts.append(text if len(node.received) == 1 else f"[{slot}] {text}")
    return "; ".join(parts) or "nothing"


def drawn(recording, max_nodes):
    """The nodes to draw: all, or the first max_nodes the engine called; and a note on the rest."""
    order = recording.called() + [n for n in recording.nodes if not n.call]
    shown = order[:max_nodes]
    left = order[max_nodes:]
    if not left:
        return shown, ""
    counts = {}
    for node in left:
        counts[node.kind] = counts.get(node.kind, 0) + 1
    kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return shown, f"{len(left)} more node(s) not drawn ({kinds}); max_nodes={max_nodes} shows the first the engine called"


def forward_chains(recording, shown):
    """The forward pass as chains of operations, broken where a value feeds several
    operations or an operation takes several values: each a list of nodes."""
    shown_set = set(shown)

    def single_link(node):
        """The one operation this node's output feeds, if the chain may continue into it."""
        if len(node.consumers) != 1:
            return None
        consumer, _ = node.consumers[0]
        tensors_in = [child for child, _ in consumer.inputs if child is not None]
        return consumer if len(tensors_in) == 1 and consumer in shown_set else None

    ops = [n for n in reversed(recording.called()) if n in shown_set and not n.leaf]
    ops += [n for n in recording.nodes if n in shown_set and not n.leaf and not n.call]
    starts = [n for n in ops if not any(child is not None and single_link(child) is n and not child.leaf
                                        for child, _ in n.inputs)]
    chains = []
    for start in starts:
        chain = [start]
        while (following := single_link(chain[-1])) is not None:
            chain.append(following)
        chains.append(chain)
    return chains


def value_names(recording, chains):
    """Names for the values the chains pass between them: leaves by name, the loss, (1), (2), ..."""
    names = {n: n.leaf for n in recording.nodes if n.leaf}
    names[recording.root] = "loss"
    for chain in chains:
        last = chain[-1]
        if last not in names:
            names[last] = f"({sum(1 for v in names.values() if v.startswith('(')) + 1})"
    return names


def render_ascii(recording, max_nodes=40):
    shown, note = drawn(recording, max_nodes)
    chains = forward_chains(recording, shown)
    names = value_names(recording, chains)
    lines = [recording.title] if recording.title else []
    lines.append("FORWARD, left to right (each operation named after its grad_fn; const: an input that needs no grad):")
    for chain in chains:
        inputs = [("const" if child is None else names.get(child, "...")) for child, _ in chain[0].inputs]
        head = ", ".join(i for i in inputs if i != "const") or "const"
        links = "".join(f" --[{n.op}{', const' * sum(1 for c, _ in n.inputs if c is None)}]-->" for n in chain)
        lines.append(f"  {head}{links} {names.get(chain[-1], '...')}")
    lines.append("BACKWARD, in the order the engine called each node (the loss's grad_output: "
                 f"{recording.seed}):")
    width = max((len(n.ref) for n in shown), default=0)
    for node in shown:
        if not node.call:
            lines.append(f"  {node.ref:<{width}}  never called")
            continue
        if node.leaf:
            sends = f"writes {node.leaf}.grad"
        else:
            sends = "sends " + ", ".join(
                f"{value} to {'const' if child is None else child.ref}"
                for (child, _), value in zip(node.inputs, node.sent)) if node.inputs else "sends nothing"
        lines.append(f"  {node.ref:<{width}}  received {received_text(node)}; {sends}")
    if note:
        lines.append(f"  ... {note}")
    return "\n".join(lines) + "\n"


def _graph_elements(recording, max_nodes):
    """Boxes and arrows for the Mermaid and DOT renderers. The arrows point forward, as the
    values flowed; each is labelled with the gradient the backward sent back along it."""
    shown, note = drawn(recording, max_nodes)
    ids = {node: f"n{i}" for i, node in enumerate(shown)}
    boxes, arrows, constants = [], [], 0
    for node in shown:
        if node.leaf:
            text = f"{node.leaf}<br/>#{node.call} AccumulateGrad<br/>.grad = {node.received[0] if node.received else '?'}"
        else:
            text = f"#{node.call} {node.kind}<br/>received {received_text(node)}"
        boxes.append((ids[node], text, bool(node.leaf)))
        for (child, _), value in zip(node.inputs, node.sent or ["?"] * len(node.inputs)):
            if child is None:
                constants += 1
                boxes.append((f"c{constants}", "const", None))
                arrows.append((f"c{constants}", ids[node], "", True))
            elif child in ids:
                arrows.append((ids[child], ids[node], f"grad {value}", False))
    boxes.append(("loss", "loss", True))
    arrows.append((ids[recording.root], "loss", f"grad {recording.seed}", False))
    return boxes, arrows, note


def render_mermaid(recording, max_nodes=40):
    boxes, arrows, note = _graph_elements(recording, max_nodes)
    quote = lambda text: text.replace('"', "#quot;")  # noqa: E731
    lines = ["flowchart LR"]
    if recording.title:
        lines.insert(0, f"%% {recording.title}")
    for box, text, round_box in boxes:
        if round_box is None:
            lines.append(f'  {box}(("{quote(text)}"))')
        else:
            lines.append(f'  {box}{"([" if round_box else "["}"{quote(text)}"{"])" if round_box else "]"}')
    for source, target, label, dotted in arrows:
        arrow = "-.->" if dotted else "-->"
        lines.append(f'  {source} {arrow}{f"|{chr(34)}{quote(label)}{chr(34)}|" if label else ""} {target}')
    if note:
        lines.append(f"  %% {note}")
    return "\n".join(lines) + "\n"


def render_dot(recording, max_nodes=40):
    boxes, arrows, note = _graph_elements(recording, max_nodes)
    escape = lambda text: text.replace("\\", "\\\\").replace('"', '\\"').replace("<br/>", "\\n")  # noqa: E731
    lines = ["digraph backward {", "  rankdir=LR;", '  node [shape=box, fontname="monospace"];']
    if recording.title:
        lines.insert(1, f'  label="{escape(recording.title)}"; labelloc=t;')
    for box, text, round_box in boxes:
        shape = ", shape=plaintext" if round_box is None else ", shape=ellipse" if round_box else ""
        lines.append(f'  {box} [label="{escape(text)}"{shape}];')
    for source, target, label, dotted in arrows:
        attributes = [f'label="{escape(label)}"'] if label else []
        if dotted:
            attributes.append("style=dashed")
        lines.append(f"  {source} -> {target} [{', '.join(attributes)}];")
    if note:
        lines.append(f"  // {note}")
    lines.append("}")
    return "\n".join(lines) + "\n"


RENDERERS = {"ascii": render_ascii, "mermaid": render_mermaid, "dot": render_dot}


# ---------------------------------------------------------------------------
# The chapter's graphs, with the chapter's seeds and expressions
# ---------------------------------------------------------------------------

def chapter_recordings():
    """17.1 (and its buggy chain), 17.2, 17.3.1 and 17.3.2, each recorded as it runs."""
    recordings = []
    torch.manual_seed(3)
    x = torch.randn(6).to(DEVICE).requires_grad_(True)
    z = TritonGELU.apply(x)
    recordings.append(record_backward((2 * z + 1).sum(), names={"x": x},
                                      title="17.1  loss = (2 * TritonGELU(x) + 1).sum()"))
    x_buggy = x.detach().clone().requires_grad_(True)
    z = TritonGELUBuggy.apply(x_buggy)
    recordings.append(record_backward((2 * z + 1).sum(), names={"x": x_buggy},
                                      title="17.1.2  the same chain through TritonGELUBuggy"))

    torch.manual_seed(4)
    x = torch.randn(4).to(DEVICE).requires_grad_(True)
    y = TritonSquare.apply(TritonGELU.apply(x))
    recordings.append(record_backward(y.sum(), names={"x": x},
                                      title="17.2  loss = TritonSquare(TritonGELU(x)).sum()"))

    torch.manual_seed(5)
    x = torch.randn(4).to(DEVICE).requires_grad_(True)
    z = TritonGELU.apply(x)
    recordings.append(record_backward(z.sum() + z.sum(), names={"x": x},
                                      title="17.3.1  loss = z.sum() + z.sum(),  z = TritonGELU(x)"))
    x = x.detach().clone().requires_grad_(True)
    z = TritonGELU.apply(x)
    recordings.append(record_backward((2 * z).sum() + (3 * z).sum(), names={"x": x},
                                      title="17.3.2  loss = (2 * z).sum() + (3 * z).sum(),  z = TritonGELU(x)"))
    return recordings


# ---------------------------------------------------------------------------
# Scale: extras/train_mlp.py's block (LayerNorm, Linear, GELU, Linear), alone and 12 deep
# ---------------------------------------------------------------------------

class TritonGELUModule(torch.nn.Module):
    def forward(self, x):
        return TritonGELU.apply(x)


def mlp_stack(blocks, width=256, hidden=1024):
    layers = []
    for _ in range(blocks):
        layers += [torch.nn.LayerNorm(width), torch.nn.Linear(width, hidden), TritonGELUModule(),
                   torch.nn.Linear(hidden, width)]
    return torch.nn.Sequential(*layers)


def mlp_loss(model, batch, width=256):
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(batch, width, generator=generator).to(DEVICE)
    target = torch.randn(batch, width, generator=generator).to(DEVICE)
    return torch.nn.functional.mse_loss(model(x), target)


def scale_demo():
    torch.manual_seed(0)
    block = mlp_stack(1).to(DEVICE)
    print(render_ascii(record_backward(mlp_loss(block, 16), names=dict(block.named_parameters()),
                                       title="One MLP block (LayerNorm, Linear(256, 1024), TritonGELU, Linear(1024, 256))")))
    stack = mlp_stack(12).to(DEVICE)
    print(render_ascii(record_backward(mlp_loss(stack, 16), names=dict(stack.named_parameters()),
                                       title="12 such blocks"), max_nodes=24))


def measure_overhead(blocks=12, batch=256, repeats=7):
    """Median seconds of a plain backward and of a recorded one, on the same graph each time."""
    torch.manual_seed(0)
    model = mlp_stack(blocks).to(DEVICE)
    names = dict(model.named_parameters())
    synchronize = torch.cuda.synchronize if DEVICE.type == "cuda" else (lambda: None)

    def timed(backward):
        model.zero_grad(set_to_none=True)
        loss = mlp_loss(model, batch)
        synchronize()
        start = time.perf_counter()
        backward(loss)
        synchronize()
        return time.perf_counter() - start

    plain = lambda loss: loss.backward()  # noqa: E731
    recorded = lambda loss: record_backward(loss, names=names)  # noqa: E731
    for backward in (plain, recorded):  # warm-up: kernels compiled, memory allocated
        timed(backward)
    plain_times, recorded_times = [], []
    for _ in range(repeats):  # interleaved, so that drift affects both alike
        plain_times.append(timed(plain))
        recorded_times.append(timed(recorded))
    return statistics.median(plain_times), statistics.median(recorded_times)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Draw the chapter's autograd graphs from the live objects.")
    parser.add_argument("--format", choices=sorted(RENDERERS), default="ascii", help="default: %(default)s")
    parser.add_argument("--scale", action="store_true", help="draw an MLP block and a 12-block stack instead")
    parser.add_argument("--overhead", action="store_true",
                        help="time a recorded backward against a plain one on the 12-block stack")
    parser.add_argument("--batch", type=int, default=256, help="rows for --overhead (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.overhead:
        if args.batch < 1:
            parser.error("--batch must be at least 1")
        plain, recorded = measure_overhead(batch=args.batch)
        where = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "CPU, Triton interpreter"
        print(f"12 MLP blocks, {args.batch} rows ({where}): plain backward {plain * 1e3:.2f} ms, "
              f"recorded {recorded * 1e3:.2f} ms, ratio {recorded / plain:.2f} (medians of 7)")
        return
    if args.scale:
        scale_demo()
        return
    render = RENDERERS[args.format]
    for recording in chapter_recordings():
        print(render(recording))


if __name__ == "__main__":
    main()
