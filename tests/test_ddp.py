"""extras/train_ddp.py: two DistributedDataParallel processes reach one process's loss.

The CPU run (gloo, the Triton interpreter) runs anywhere; the GPU run (NCCL, one GPU
a rank, each rank choosing its device after its imports) needs two GPUs.
"""
import subprocess
import sys

import pytest
import torch
from chapter_scripts import ON_GPU, REPO, checker_environment


def torchrun(*args, **env):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(REPO / "extras/train_ddp.py"), "--steps", "5", "--global-batch", "16", *args]
    environment = checker_environment(**env)
    environment.pop("PYTHON", None)
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO, env=environment)


def test_two_processes_on_the_cpu_reach_the_one_process_loss():
    result = torchrun(TRITON_INTERPRET="1")  # the interpreter and gloo, on a GPU machine too
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 ranks (gloo) vs one process" in result.stdout
    assert "matches one process? True" in result.stdout


@pytest.mark.skipif(not (ON_GPU and torch.cuda.device_count() >= 2),
                    reason=f"needs two GPUs; {torch.cuda.device_count()} visible")
def test_two_gpus_with_nccl_reach_the_one_process_loss():
    result = torchrun()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 ranks (nccl) vs one process" in result.stdout
    assert "matches one process? True" in result.stdout


@pytest.mark.skipif(not (ON_GPU and torch.cuda.device_count() == 1), reason="needs a machine with exactly one GPU")
def test_more_ranks_than_gpus_is_refused_with_a_reason():
    result = torchrun()
    assert result.returncode != 0
    assert "2 ranks on this machine need 2 GPUs, one a rank; 1 visible" in result.stderr


def test_a_global_batch_of_fewer_rows_than_ranks_is_refused():
    """--global-batch 0 is a multiple of any rank count, and gave each rank no rows: NaN losses, and 'matches one
    process? False', a wrong answer rather than an error. Refused on each rank before the process group starts."""
    environment = checker_environment(WORLD_SIZE="2", LOCAL_RANK="0", TRITON_INTERPRET="1")
    environment.pop("PYTHON", None)
    result = subprocess.run([sys.executable, str(REPO / "extras/train_ddp.py"), "--global-batch", "0"],
                            capture_output=True, text=True, timeout=300, cwd=REPO, env=environment)
    assert result.returncode == 2 and "a positive multiple of the 2 ranks" in result.stderr, result.stderr[-2000:]
