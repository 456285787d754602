"""What the benchmarks share for their plots: matplotlib without a display, or a note where it is missing."""
import sys


def pyplot_or_none(path):
    """matplotlib.pyplot on the Agg backend; None, with a note on stderr, where matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no plot written to {path}", file=sys.stderr)
        return None
    return plt
