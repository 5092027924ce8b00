"""The one base of what the local cluster, its images, its tools and its add-ons raise
when they cannot do what was asked.

Each module keeps its own error (a KindError says kind failed, a MissingBinaryError which
tool to build), so that a caller that can act on one failure catches that one; a caller
that can only report and stop (a command line, the demo, a test's setup) catches this
base instead of listing every module's error in a tuple.
"""

from __future__ import annotations


class LocalClusterError(RuntimeError):
    """What the local cluster's modules raise; each module's error derives from it."""
