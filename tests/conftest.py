import sys
from pathlib import Path

# The tests import their shared helpers (tests/chapter_scripts.py) by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))
