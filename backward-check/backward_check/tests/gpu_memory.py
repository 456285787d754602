"""One fixture, shared by the package's tests and the repository's: each test's cached GPU memory handed back."""
import pytest


@pytest.fixture(autouse=True)
def gpu_memory_handed_back():
    """Each test's cached GPU memory handed back after it: pytest-xdist's workers share one card, and a worker's
    caching allocator otherwise keeps its largest test's memory for the rest of the session (sixteen workers' peaks
    filled an 80 GB H100, and checks of tiny ops met "CUDA error: out of memory")."""
    yield
    import torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
