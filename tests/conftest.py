import os
import sys
from pathlib import Path

# Test helpers (tests/stats_helpers.py) import as a top-level module.
sys.path.insert(0, str(Path(__file__).parent))

from hypothesis import settings

# CI runs the same examples every time (a failure there is reproducible); locally Hypothesis
# explores new examples on every run.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
