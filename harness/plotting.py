"""matplotlib, set up to draw PNGs without touching the host: the benchmark's plots and
the monitoring tests' dashboard.

matplotlib keeps its font cache in MPLCONFIGDIR, else in ~/.cache/matplotlib: the
project's cache instead, set before matplotlib is imported. To fill that cache it asks
fc-list for the system's fonts, and fc-list run as root rewrites /var/cache/fontconfig:
it gets a configuration without fonts or caches instead (the plots use matplotlib's own).
"""

from __future__ import annotations

import os
from pathlib import Path

from tfjob_localcluster.binaries import cache_root

os.environ.setdefault("MPLCONFIGDIR", str(cache_root() / "matplotlib"))
os.environ.setdefault("FONTCONFIG_FILE", str(Path(__file__).with_name("fonts.conf")))
import matplotlib  # after MPLCONFIGDIR

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after choosing the backend

__all__ = ["plt"]
