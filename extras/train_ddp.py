"""
Beyond the chapter: TritonGELU under DistributedDataParallel
=============================================================

Not part of Chapter 17. Trains train_mlp.py's MLP block, with TritonGELU, in several
processes with DistributedDataParallel, then checks that it reached the loss of one
process training on the same global batch.

Each rank imports first and picks its device afterwards, as real jobs do: every
rank imports the kernels with cuda:0 current, then rank 1 moves to cuda:1, so its
kernels are launched on a GPU other than the one current at import.

    torchrun --standalone --nproc_per_node 2 extras/train_ddp.py      # NCCL, one GPU a rank
    TRITON_INTERPRET=1 torchrun --standalone --nproc_per_node 2 extras/train_ddp.py
                                                                      # gloo on the CPU

Without GPUs the second form needs no TRITON_INTERPRET=1: the CPU is then the only
choice. On a machine with fewer GPUs than ranks on it it says so and exits 2.

It builds on train_mlp.py (the model, the data, one-process training) and imports it;
the kernels come, through it, from hardened_ops.py.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import train_mlp  # picks the backend, as the chapter's scripts do, before this rank chooses its device


def train_data_parallel(steps, global_batch, device):
    """Each rank trains on its shard of every global batch; DDP averages the gradients."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights as train_mlp.train's
    model = train_mlp.mlp_block("TritonGELU").to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    losses = []
    for x, target in train_mlp.teacher_batches(steps, global_batch, 100, device):  # train_mlp.train's data
        loss = torch.nn.functional.mse_loss(ddp(x.chunk(world)[rank]).float(), target.chunk(world)[rank])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)  # equal shards: the mean of the shards' means is the batch's mean
        losses.append(global_loss.item() / world)
    return losses, model


def main():
    parser = argparse.ArgumentParser(description="Train the MLP block with TritonGELU under DDP.")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--global-batch", type=int, default=64, help="rows a step, over all ranks")
    args = parser.parse_args()
    world, local_rank = int(os.environ.get("WORLD_SIZE", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    # The ranks on this machine, each wanting a GPU of its own (torchrun sets it; WORLD_SIZE
    # counts the ranks of every machine).
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if world < 1:
        sys.exit("run it with torchrun, e.g. torchrun --standalone --nproc_per_node 2 extras/train_ddp.py")
    if args.steps < 1 or args.global_batch < world or args.global_batch % world:  # 0 rows a rank: a NaN loss
        parser.error(f"--steps must be at least 1 and --global-batch a positive multiple of the {world} ranks")

    if train_mlp.DEVICE.type == "cuda":
        if torch.cuda.device_count() < local_world:
            print(f"{local_world} ranks on this machine need {local_world} GPUs, one a rank; "
                  f"{torch.cuda.device_count()} visible", file=sys.stderr)
            sys.exit(2)
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # after the imports, as real jobs do
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)
    try:
        losses, _ = train_data_parallel(args.steps, args.global_batch, device)
        if dist.get_rank() == 0:
            single, _ = train_mlp.train("TritonGELU", steps=args.steps, batch=args.global_batch, device=device)
            worst = max(abs(a - b) / b for a, b in zip(losses, single))
            print(f"{world} ranks ({backend}) vs one process, same global batch of {args.global_batch}:")
            print(f"{'step':>5} {'DDP':>12} {'one process':>12}")
            for step in range(args.steps):
                print(f"{step + 1:>5} {losses[step]:>12.6f} {single[step]:>12.6f}")
            matches = worst < 1e-4
            print(f"largest relative loss difference: {worst:.2e}; matches one process? {matches}")
            if not matches:
                sys.exit(1)
    finally:
        dist.destroy_process_group()


def exit_status(stop):
    """What sys.exit(code) would have made the exit status (a message is printed, and is 1)."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    try:
        main()
        status = 0
    except SystemExit as stop:
        status = exit_status(stop)
    # Leave without tearing the interpreter down: the autograd engine's threads can abort a rank during
    # that teardown (pytorch/pytorch#38228: "terminate called without an active exception", exit -6, seen
    # in a CPU run of tests/test_ddp.py after every line was printed).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
