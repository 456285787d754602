"""PyTorch's own F.batch_norm on the CPU: with the weight given as a strided view (every other element of a wider
buffer), the input's gradient is wrong; the forward, and the weight's and the bias's gradients, are right.

The backward reads the weight as if it were contiguous: the input's gradient is the one for the first C elements
of the weight's buffer, gaps included. Its fast path is taken where the input and grad_output are contiguous, the
weight unchecked (the forward checks the weight too), and for an input of one element per sample and channel
((N, C), (N, C, 1), (N, C, 1, 1)) that path reads the weight from its data pointer; an (N, C, L) input with L > 1
takes a path that reads it by its strides, and is right. Training and evaluation mode alike.

    python research/wild/torch_batch_norm.py [--device cuda]

prints how far the input's gradient is from the one for a contiguous weight of the same values (its largest
difference, and relative to the gradient's norm), for the strided weight and for the same made contiguous, and
exits 0 where the first is far off and the second is not (the bug as documented), 1 where it is not (a PyTorch,
or a device, that reads the weight by its strides), 2 for a --device this machine cannot use. Plain torch: no
checker."""
import argparse
import sys

import torch
import torch.nn.functional as F


def off(got, right):
    """(largest difference, norm of the difference over the right gradient's)."""
    return (got - right).abs().max().item(), ((got - right).norm() / right.norm()).item()


def input_gradient(x, weight, bias, grad_output):
    """F.batch_norm(training=True)'s gradient for its input under grad_output."""
    x = x.detach().clone().requires_grad_(True)
    out = F.batch_norm(x, None, None, weight, bias, training=True)
    return torch.autograd.grad(out, x, grad_output)[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    device = parser.parse_args(argv).device
    try:
        if torch.device(device).type == "meta":
            raise RuntimeError("a meta tensor holds no values to compare")
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as error:  # a device torch does not know, or one this machine lacks
        parser.error(f"--device {device}: {str(error).splitlines()[0] if str(error) else type(error).__name__}")
    torch.manual_seed(0)
    n, c = 8, 4
    x, grad_output = torch.randn(n, c, device=device), torch.randn(n, c, device=device)
    weight, bias = 1 + 0.1 * torch.randn(c, device=device), 0.1 * torch.randn(c, device=device)
    buffer = torch.full((2 * c,), 5.0, device=device)   # the gaps hold 5.0, a value no weight has
    buffer[::2] = weight
    strided = buffer[::2]                # the same values as weight, strides (2,)
    assert torch.equal(strided, weight) and strided.stride() == (2,)

    right = input_gradient(x, weight, bias, grad_output)
    strided_off = off(input_gradient(x, strided, bias, grad_output), right)
    contiguous_off = off(input_gradient(x, strided.contiguous(), bias, grad_output), right)
    print(f"torch {torch.__version__}, F.batch_norm(training=True) on {device}, input ({n}, {c}) float32")
    print("  the input's gradient against the one for a contiguous weight of the same values "
          "(largest difference; relative):")
    print("    weight strided (buffer[::2], strides (2,)): {:.3g}; {:.3g}".format(*strided_off))
    print("    weight contiguous (.contiguous() of it):    {:.3g}; {:.3g}".format(*contiguous_off))
    shows = strided_off[1] > 1e-2 and contiguous_off[1] < 1e-5
    print("the bug shows: the backward reads the strided weight as if contiguous" if shows else
          "the bug does not show: this PyTorch reads the strided weight right")
    return 0 if shows else 1


if __name__ == "__main__":
    sys.exit(main())
