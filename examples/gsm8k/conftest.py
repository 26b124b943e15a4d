"""Make the example's own module importable in its tests, as it is when a user runs the example from its folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
