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

The recorder and renderers hold no kernels: they work on any autograd graph. The
chapter's graphs are built from ``hardened_ops.py``'s Functions, which are the
chapter's without its call recording (the hooks see every call instead).
"""
import argparse
import dataclasses
import math
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for hardened_ops
from hardened_ops import BACKEND, DEVICE, TritonGELU, TritonGELUBuggy, TritonGELUModule, TritonSquare  # noqa: E402


# ---------------------------------------------------------------------------
# Recording: the graph from next_functions, then one backward with a hook on every node
# ---------------------------------------------------------------------------

SMALL = 6  # a gradient of at most this many elements is shown whole


def summarize(t):
    """A gradient in a few characters: a uniform tensor as its value ("2"), a small one as
    its values, a larger one as its shape and range; None as "None"."""
    if t is None:
        return "None"
    measured = measure(t)
    return describe(measured, read_all([measured])[0])


def distinct_elements(t):
    """A view of t without its stride-0 (expanded) dimensions: the same values, none repeated.
    After .sum(), a (8192, 1) gradient expanded to (8192, 8192) is read as its 8192 elements."""
    index = tuple(slice(0, 1) if stride == 0 and size > 1 else slice(None) for size, stride in zip(t.shape, t.stride()))
    return t[index]


def measure(t):
    """(shape, kind, numbers) for describe(): a copy of a small tensor's values, else its minimum
    and maximum (equal when it is uniform), as tensors on t's device: the hooks make no
    GPU-to-CPU round trip during the backward, and launch one kernel a gradient. kind is "" for
    a dense real gradient; a sparse one (nn.Embedding(sparse=True)) is measured on its stored
    values, and a complex one on its magnitudes, and each says so."""
    t, kind, shape = t.detach(), "", list(t.shape)
    if t.is_sparse:
        t, kind = t.coalesce().values(), f"sparse, {t.coalesce().values().numel()} stored"
    if t.is_complex():
        t, kind = t.abs(), "complex, |g|" + (f"; {kind}" if kind else "")
    flat = distinct_elements(t).reshape(-1) if t.numel() > SMALL else t.reshape(-1)
    if t.numel() <= SMALL:
        return shape, kind, (flat.clone(),)
    if flat.numel() == 0:
        return shape, kind, ()
    return shape, kind, tuple(torch.aminmax(flat))


def read_all(measured):
    """Every measure()'s numbers as Python floats: one copy to the CPU for each device and dtype
    (gradients may sit on several GPUs, or on a GPU and the CPU)."""
    pieces = [piece.reshape(-1) for _, _, numbers in measured for piece in numbers]
    groups = {}
    for i, piece in enumerate(pieces):
        groups.setdefault((piece.device, piece.dtype), []).append(i)
    values = [None] * len(pieces)
    for indices in groups.values():
        flat = torch.cat([pieces[i] for i in indices]).double().cpu().tolist()
        offset = 0
        for i in indices:
            values[i] = flat[offset:offset + pieces[i].numel()]
            offset += pieces[i].numel()
    numbers, k = [], 0
    for _, _, parts in measured:
        numbers.append([v for part in values[k:k + len(parts)] for v in part])
        k += len(parts)
    return numbers


def describe(measured, numbers):
    shape, kind, _ = measured
    numbers = list(numbers)
    prefix = f"({kind}) " if kind else ""
    if math.prod(shape) <= SMALL or (not numbers and not kind):
        if not numbers:
            return f"{prefix}empty {shape}"
        if all(v == numbers[0] for v in numbers):
            return f"{prefix}{numbers[0]:g}"
        return prefix + "[" + ", ".join(f"{v:.4f}" for v in numbers) + "]"
    if not numbers:
        return f"({kind}) {shape}, none stored"
    low, high = numbers
    if low == high and not kind:  # uniform
        return f"{low:g}"
    return f"{prefix}{shape} in [{low:.3g}, {high:.3g}]"


@dataclasses.dataclass(eq=False)
class Node:
    """One autograd node, as the walk found it and as the backward ran it."""
    # The fields that hold other nodes are left out of repr and comparison: each node reaches
    # the whole graph through them, and printing them nested grows exponentially with depth.
    kind: str                 # node.name(), e.g. "TritonGELUBackward", "AccumulateGrad"
    leaf: str = ""            # for AccumulateGrad: the name of the tensor it writes .grad into
    name: str = ""            # the name given (names=) to the tensor this node's output is
    constants: list = dataclasses.field(default_factory=list)  # per edge without a node: "x 2", "const"
    inputs: list = dataclasses.field(default_factory=list, repr=False)     # per edge: (Node or None, slot)
    consumers: list = dataclasses.field(default_factory=list, repr=False)  # (Node, edge) pairs that point here
    call: int = 0             # the engine's call number, from 1; 0 if it never ran
    received: list = dataclasses.field(default_factory=list)   # per output slot: a summary
    sent: list = dataclasses.field(default_factory=list)       # per edge: a summary
    contributions: dict = dataclasses.field(default_factory=dict, repr=False)  # slot: [(consumer, summary)]
    changed_by_hook: list = dataclasses.field(default_factory=list)  # per slot: received != what was sent
    accumulated: bool = False  # AccumulateGrad only: the leaf already held a .grad, which this added to

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


@dataclasses.dataclass(repr=False)
class BackwardRecording:
    """What record_backward saw: the nodes, in the order the walk from the loss found them."""
    title: str
    nodes: list
    root: Node
    seed: str                 # the gradient the backward started from, as summarize() gives it

    def called(self):
        return sorted((n for n in self.nodes if n.call), key=lambda n: n.call)

    def __repr__(self):
        return f"BackwardRecording({self.title!r}, {len(self.nodes)} nodes, {len(self.called())} called)"


# An operand that needs no grad has no node; where the node saved it (as 2 * z saves the 2),
# the drawing shows the operation with it: "x 2" rather than a bare "const".
OPERATORS = {"Mul": "x", "Div": "/", "Add": "+", "Sub": "-"}


def constant_text(fn, kind, edge):
    op = OPERATORS.get(kind.split("Backward")[0])
    saved = getattr(fn, "_saved_other" if edge == 1 else "_saved_self", None) if op else None
    if isinstance(saved, torch.Tensor) and saved.numel() == 1 and not saved.is_complex():
        return f"{op} {saved.item():g}"
    if isinstance(saved, (int, float)) and not isinstance(saved, bool):
        return f"{op} {saved:g}"
    return f"{op} const" if op else "const"


def walk(grad_fn, names):
    """Every node reachable from grad_fn through next_functions, each once (a node shared by
    several paths too), breadth first; and each Node's autograd object, for the hooks."""
    leaf_names = {id(tensor): name for name, tensor in names.items() if tensor.grad_fn is None}
    value_names = {id(tensor.grad_fn): name for name, tensor in names.items() if tensor.grad_fn is not None}
    nodes, functions, found = [], {}, {}

    def node_for(fn):
        if fn not in found:
            kind = fn.name().removeprefix("torch::autograd::")
            leaf = ""
            if kind == "AccumulateGrad":
                unnamed = sum(1 for n in nodes if n.leaf.startswith("leaf "))
                leaf = leaf_names.get(id(fn.variable), f"leaf {unnamed + 1}")
            found[fn] = Node(kind, leaf, value_names.get(id(fn), ""))
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
            node.constants.append(constant_text(fn, node.kind, edge) if child is None else "")
            if child_node is not None:
                child_node.consumers.append((node, edge))
    return nodes, root, functions


def record_backward(loss, gradient=None, *, names=None, retain_graph=False, title=""):
    """Runs loss.backward(gradient) with a hook on every node, and returns what each node
    received and sent, in the order the engine called them.

    names: {"x": x, "weight": w, "z": z, ...}: leaves to name (else "leaf 1", "leaf 2", ...),
    and intermediate tensors, whose values the drawing then calls by that name.
    The hooks are removed afterwards, on error too; the .grad values are those of a plain
    backward. Where a tensor hook (z.register_hook) changed a gradient between the node that
    sent it and the node that received it, the recording says so; where a leaf's .grad already
    held a gradient (a second backward), it says that the new one was added to it.
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
    for node in nodes:
        if node.leaf:
            node.accumulated = functions[node].variable.grad is not None
    lock = threading.Lock()  # the engine may run hooks on several threads (one per device) at once
    calls = iter(range(1, len(nodes) + 1))
    measured = []  # (shape, kind, numbers on the device): each gradient the hooks saw, read at the end
    in_flight = {}  # (id of the receiving Node, slot): what was sent there and not yet received (a sum, if several)

    def same_tensor(a, b):  # the very tensor that was sent, alive in the engine
        return a is b or (a.data_ptr(), a.dtype, a.shape, a.stride()) == (b.data_ptr(), b.dtype, b.shape, b.stride())

    def keep(grad):
        if grad is None:
            return None
        measurement = measure(grad)
        with lock:
            measured.append(measurement)
            return len(measured) - 1

    def mismatch(received, sent):
        """Index of a measurement whose (largest difference, largest magnitude) tells whether a
        hook changed the gradient on its way; None where the two cannot be compared."""
        if received.is_sparse or sent.is_sparse or received.shape != sent.shape or received.numel() == 0:
            return None
        sent = sent.to(received.dtype)
        return keep(torch.stack([(received - sent).abs().max(), sent.abs().max()]).real.float())

    def on_receive(node):
        def hook(grad_outputs):
            with lock:
                node.call = next(calls)
            # From a single sender, the grad_output is usually the very tensor it sent, measured
            # already; a sum of several, a changed one, or the loss's seed is measured here.
            node.received, node.changed_by_hook = [], []
            for slot, g in enumerate(grad_outputs):
                senders = node.contributions.get(slot, [])
                sent = in_flight.pop((id(node), slot), None)
                if len(senders) == 1 and g is not None and sent is not None and same_tensor(g, sent):
                    node.received.append(senders[0][1])
                    node.changed_by_hook.append(None)
                    continue
                node.received.append(keep(g))
                node.changed_by_hook.append(mismatch(g, sent) if g is not None and sent is not None else None)
        return hook

    def on_send(node):
        def hook(grad_inputs, grad_outputs):
            node.sent = [keep(g) for g in grad_inputs]
            for (child, slot), value, g in zip(node.inputs, node.sent, grad_inputs):
                if child is not None:
                    key = (id(child), slot)
                    with lock:
                        child.contributions.setdefault(slot, []).append((node, value))
                        if g is not None and not g.is_sparse:
                            earlier = in_flight.get(key)
                            in_flight[key] = g if earlier is None else earlier + g
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
        in_flight.clear()
    # Every number the hooks kept, read at once; then each index becomes its summary.
    numbers = read_all(measured)
    texts = [describe(m, n) for m, n in zip(measured, numbers)]
    text = lambda index: "None" if index is None else texts[index]  # noqa: E731

    def changed(index):
        if index is None:
            return False
        difference, magnitude = numbers[index]
        return difference > 1e-5 * magnitude + 1e-12  # a sum taken in another order differs in rounding only

    for node in nodes:
        node.changed_by_hook = [changed(i) for i in node.changed_by_hook]
        node.received = [text(i) for i in node.received]
        node.sent = [text(i) for i in node.sent]
        node.contributions = {slot: [(sender, text(i)) for sender, i in pairs]
                              for slot, pairs in node.contributions.items()}
    return BackwardRecording(title, nodes, root, summarize(seed))


# ---------------------------------------------------------------------------
# Renderers: ASCII (the default), Mermaid (GitHub draws it), Graphviz DOT text
# ---------------------------------------------------------------------------

def received_text(node):
    """What a node received: with several contributions to one slot, each and their sum; and
    where a tensor hook changed it on the way, what was sent and that a hook changed it."""
    parts = []
    for slot, value in enumerate(node.received):
        contributions = node.contributions.get(slot, [])
        hooked = slot < len(node.changed_by_hook) and node.changed_by_hook[slot]
        text = value
        if len(contributions) > 1:
            text = " + ".join(v for _, v in contributions) + (" then a hook made it " if hooked else " = ") + value
        elif hooked:
            text = f"{value} (sent {contributions[0][1]}; a tensor hook changed it)"
        parts.append(text if len(node.received) == 1 else f"[{slot}] {text}")
    return "; ".join(parts) or "nothing"


def leaf_text(node):
    """What an AccumulateGrad node did with what it received."""
    if node.accumulated:
        return f"added to {node.leaf}.grad, which already held a gradient"
    return f"writes {node.leaf}.grad"


def drawn(recording, max_nodes):
    """The nodes to draw: all, or the first max_nodes the engine called; and a note on the rest."""
    if not isinstance(max_nodes, int) or max_nodes < 1:
        raise ValueError(f"max_nodes must be a whole number of at least 1 (the loss's own node), not {max_nodes!r}")
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
    names |= {n: n.name for n in recording.nodes if n.name}
    names.setdefault(recording.root, "loss")
    for chain in chains:
        last = chain[-1]
        if last not in names:
            names[last] = f"({sum(1 for v in names.values() if v.startswith('(')) + 1})"
    return names


def operation(node):
    """A node's forward operation with its constant operands: "Mul, x 2", "Add, + const"."""
    return ", ".join([node.op] + [c for c in node.constants if c])


def render_ascii(recording, max_nodes=40):
    shown, note = drawn(recording, max_nodes)
    chains = forward_chains(recording, shown)
    names = value_names(recording, chains)
    lines = [recording.title] if recording.title else []
    lines.append("FORWARD, left to right (each operation named after its grad_fn, with any operand that needs no grad):")
    for chain in chains:
        inputs = [names.get(child, "...") for child, _ in chain[0].inputs if child is not None]
        head = ", ".join(inputs) or "const"
        links = "".join(f" --[{operation(n)}]-->" + (f" {names[n]}" if n in names and n is not chain[-1] else "")
                        for n in chain)
        lines.append(f"  {head}{links} {names.get(chain[-1], '...')}")
    lines.append("BACKWARD, in the order the engine called each node (the loss's grad_output: "
                 f"{recording.seed}):")
    width = max((len(n.ref) for n in shown), default=0)
    for node in shown:
        if not node.call:
            lines.append(f"  {node.ref:<{width}}  never called")
            continue
        if node.leaf:
            sends = leaf_text(node)
        else:
            sends = "sends " + ", ".join(
                f"{value} to {constant if child is None else child.ref}"
                for (child, _), constant, value in zip(node.inputs, node.constants, node.sent)) \
                if node.inputs else "sends nothing"
        lines.append(f"  {node.ref:<{width}}  received {received_text(node)}; {sends}")
    if note:
        lines.append(f"  ... {note}")
    return "\n".join(lines) + "\n"


GRAPH_LEGEND = "The arrows point the way the gradient moves, from the loss back to the leaves; each is labelled with the gradient sent along it."


def _graph_elements(recording, max_nodes):
    """Boxes and arrows for the Mermaid and DOT renderers. Each arrow goes from the node that
    sent a gradient to the node that received it, the way the backward moves, labelled with
    that gradient; a constant operand hangs off its operation by a dotted line."""
    shown, note = drawn(recording, max_nodes)
    ids = {node: f"n{i}" for i, node in enumerate(shown)}
    boxes, arrows, constants = [], [], 0
    for node in shown:
        if node.leaf:
            grad = node.received[0] if node.received else "?"
            text = (f"{node.leaf}<br/>#{node.call} AccumulateGrad<br/>"
                    + (f".grad += {grad}" if node.accumulated else f".grad = {grad}"))
        else:
            value = f" ({node.name})" if node.name else ""
            text = f"#{node.call} {node.kind}{value}<br/>received {received_text(node)}"
        boxes.append((ids[node], text, bool(node.leaf)))
        for (child, _), constant, value in zip(node.inputs, node.constants, node.sent or ["?"] * len(node.inputs)):
            if child is None:
                constants += 1
                boxes.append((f"c{constants}", constant, None))
                arrows.append((ids[node], f"c{constants}", "", True))
            elif child in ids:
                arrows.append((ids[node], ids[child], f"grad {value}", False))
    boxes.append(("loss", "loss", True))
    arrows.insert(0, ("loss", ids[recording.root], f"grad {recording.seed}", False))
    return boxes, arrows, note


def render_mermaid(recording, max_nodes=40):
    boxes, arrows, note = _graph_elements(recording, max_nodes)
    quote = lambda text: text.replace('"', "#quot;")  # noqa: E731
    lines = ["flowchart RL", f"  %% {GRAPH_LEGEND}"]  # the loss on the right, the leaves on the left
    if recording.title:
        lines.insert(0, f"%% {recording.title}")
    for box, text, round_box in boxes:
        if round_box is None:
            lines.append(f'  {box}(("{quote(text)}"))')
        else:
            lines.append(f'  {box}{"([" if round_box else "["}"{quote(text)}"{"])" if round_box else "]"}')
    for source, target, label, dotted in arrows:
        arrow = "-.-" if dotted else "-->"
        lines.append(f'  {source} {arrow}{f"|{chr(34)}{quote(label)}{chr(34)}|" if label else ""} {target}')
    if note:
        lines.append(f"  %% {note}")
    return "\n".join(lines) + "\n"


def render_dot(recording, max_nodes=40):
    boxes, arrows, note = _graph_elements(recording, max_nodes)
    escape = lambda text: text.replace("\\", "\\\\").replace('"', '\\"').replace("<br/>", "\\n")  # noqa: E731
    lines = ["digraph backward {", "  rankdir=RL;", '  node [shape=box, fontname="monospace"];']
    title = f"{recording.title}\\n" if recording.title else ""
    lines.insert(1, f'  label="{escape(title)}{escape(GRAPH_LEGEND)}"; labelloc=t;')
    for box, text, round_box in boxes:
        shape = ", shape=plaintext" if round_box is None else ", shape=ellipse" if round_box else ""
        lines.append(f'  {box} [label="{escape(text)}"{shape}];')
    for source, target, label, dotted in arrows:
        attributes = [f'label="{escape(label)}"'] if label else []
        if dotted:
            attributes += ["style=dotted", "arrowhead=none"]
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
    recordings.append(record_backward((2 * z + 1).sum(), names={"x": x, "z": z},
                                      title="17.1  loss = (2 * TritonGELU(x) + 1).sum()"))
    x_buggy = x.detach().clone().requires_grad_(True)
    z = TritonGELUBuggy.apply(x_buggy)
    recordings.append(record_backward((2 * z + 1).sum(), names={"x": x_buggy, "z": z},
                                      title="17.1.2  the same chain through TritonGELUBuggy"))

    torch.manual_seed(4)
    x = torch.randn(4).to(DEVICE).requires_grad_(True)
    z = TritonGELU.apply(x)
    y = TritonSquare.apply(z)
    recordings.append(record_backward(y.sum(), names={"x": x, "z": z, "y": y},
                                      title="17.2  loss = TritonSquare(TritonGELU(x)).sum()"))

    torch.manual_seed(5)
    x = torch.randn(4).to(DEVICE).requires_grad_(True)
    z = TritonGELU.apply(x)
    recordings.append(record_backward(z.sum() + z.sum(), names={"x": x, "z": z},
                                      title="17.3.1  loss = z.sum() + z.sum(),  z = TritonGELU(x)"))
    x = x.detach().clone().requires_grad_(True)
    z = TritonGELU.apply(x)
    recordings.append(record_backward((2 * z).sum() + (3 * z).sum(), names={"x": x, "z": z},
                                      title="17.3.2  loss = (2 * z).sum() + (3 * z).sum(),  z = TritonGELU(x)"))
    return recordings


# ---------------------------------------------------------------------------
# Scale: extras/train_mlp.py's block (LayerNorm, Linear, GELU, Linear), alone and 12 deep
# ---------------------------------------------------------------------------

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
    print(BACKEND, file=sys.stderr)
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
