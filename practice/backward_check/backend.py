"""Where the kernels run: the GPU, or Triton's interpreter on the CPU (hardened_ops chooses).

Triton reads TRITON_INTERPRET once, when it is first imported. If the reader's code imported it
before this package could choose, the choice comes too late, and a "0 active drivers" error is
that, not the op's fault: the checker then says so instead of reporting a crash."""
import sys
from pathlib import Path

TRITON_IMPORTED_FIRST = "triton" in sys.modules
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))  # the repository root, for hardened_ops
from hardened_ops import BACKEND, DEVICE  # noqa: E402,F401  (picks the backend before triton is imported)
