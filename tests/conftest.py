import sys
from pathlib import Path

# Test helpers (tests/stats_helpers.py) import as a top-level module.
sys.path.insert(0, str(Path(__file__).parent))
