"""
A real library's complex Functions through check_backward: torchkbnufft's table interpolation
==============================================================================================

    PYTHONPATH=SITE:backward-check python research/wild/complex_nufft.py   # SITE: torchkbnufft 1.5.2 and scipy

torchkbnufft (an NUFFT library for MRI) defines its interpolation and its adjoint as autograd Functions on complex
tensors: KbTableInterpForward (the image on the grid to the data at the k-space points) and KbTableInterpAdjoint.
Its own suite, under `pytest --backward-check`, records them and checks them, clean
(benchmarks/results/cpu_suites_torchkbnufft.log): their interpolation tables come as a list of tensors that takes
no gradient, which the checker passes to every call as it is. Here each is checked as the suite calls it, at the
three complex shapes of the suite's own autograd test (1-d, 2-d, 3-d), with the trajectory and the module's float
buffers (n_shift, numpoints, table_oversamp) taking no gradient, as the library's callers pass them (the plugin
reads that from the suite's calls). Beside each, gradcheck on the same call; and each Function again with one
conjugate planted in its backward (the complex bug the convention catches), which the checker must name "a wrong
formula".

Exit status: 0 where every real Function is clean and every planted one named; 1 otherwise; 2 where
torchkbnufft cannot be imported.
"""
import sys
import time

import torch

try:
    import torchkbnufft as tkbn
except ModuleNotFoundError:  # exit 1 is a verdict here: a missing library is no verdict
    print("complex_nufft.py: torchkbnufft is not importable: put its release on PYTHONPATH "
          "(research/wild/cpu_suites.py --download fetches it)", file=sys.stderr)
    sys.exit(2)
from torchkbnufft._autograd.interp import KbTableInterpAdjoint, KbTableInterpForward

from backward_check import check_backward

# The suite's complex autograd cases (tests/test_interp.py, test_interp_autograd): image shape, data shape.
SHAPES = [([1, 1, 19], [1, 1, 25]), ([1, 1, 32, 16], [1, 1, 83]), ([3, 2, 13, 18, 12], [3, 2, 112])]


class ForwardConjugated(KbTableInterpForward):
    """The library's forward, its backward handed the conjugate of grad_output: wrong under PyTorch's convention."""
    @staticmethod
    def backward(ctx, data):
        return KbTableInterpForward.backward(ctx, data.conj())


class AdjointConjugated(KbTableInterpAdjoint):
    @staticmethod
    def backward(ctx, image):
        return KbTableInterpAdjoint.backward(ctx, image.conj())


def calls(image_shape, data_shape):
    """The forward's and the adjoint's arguments, made as the suite makes them (its seed, its trajectory)."""
    torch.manual_seed(123)
    im_size = image_shape[2:]
    image = torch.randn(*image_shape, dtype=torch.complex128)
    data = torch.randn(*data_shape, dtype=torch.complex128)
    omega = (torch.rand(len(im_size), data_shape[2], dtype=torch.float64) * 2 - 1) * torch.pi
    module = tkbn.KbInterp(im_size=im_size, grid_size=im_size)
    tables = [getattr(module, f"table_{i}") for i in range(len(im_size))]
    shared = (omega, tables, module.n_shift, module.numpoints, module.table_oversamp, module.offsets.to(torch.long))
    # what the library's callers pass without a gradient: the trajectory and the module's float buffers (the
    # tables, a list, pass as they are)
    no_grad = ["omega", "n_shift", "numpoints", "table_oversamp"]
    grid_size = torch.tensor(im_size, dtype=torch.long)
    return (image, *shared), (data, *shared, grid_size), no_grad


GRADCHECK_MAX = 2000  # elements: gradcheck steps each one, so the 3-d case's 16,848 would take minutes


def gradcheck(fn, args):
    if args[0].numel() > GRADCHECK_MAX:
        return f"not run (more than {GRADCHECK_MAX} elements)"
    first = args[0].detach().clone().requires_grad_(True)
    try:
        torch.autograd.gradcheck(lambda x: fn(x, *args[1:]), (first,))  # raises where it fails
        return "passes"
    except Exception as error:  # noqa: BLE001  (gradcheck's verdict)
        return f"fails ({type(error).__name__})"


def main():
    torch.set_default_dtype(torch.double)
    print(f"torch {torch.__version__}, torchkbnufft {tkbn.__version__}")
    wrong = 0
    for image_shape, data_shape in SHAPES:
        forward_args, adjoint_args, no_grad = calls(image_shape, data_shape)
        for name, args, real, planted in [("forward", forward_args, KbTableInterpForward, ForwardConjugated),
                                          ("adjoint", adjoint_args, KbTableInterpAdjoint, AdjointConjugated)]:
            for function, want in [(real, []), (planted, ["a wrong formula"])]:
                start = time.perf_counter()
                report = check_backward(function, *args, no_grad=no_grad)
                seconds = time.perf_counter() - start
                verdict = "as expected" if report.traps == want else "NOT as expected"
                wrong += verdict != "as expected"
                print(f"\n== {name}, image {image_shape}, data {data_shape}: {function.__name__} ({seconds:.1f} s); "
                      f"gradcheck {gradcheck(function.apply, args)}; {verdict}")
                print(report.text(book=False))
    print(f"\n{wrong} case(s) not as expected")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
