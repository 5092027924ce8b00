"""Control-plane benchmark of the TFJob operator against the API server's floor.

`python -m bench --help` runs it; README.md explains what it measures and how.
"""

from pathlib import Path
from typing import Final

#: The repository: where the benchmark's processes run their modules from.
ROOT: Final = Path(__file__).resolve().parents[1]
