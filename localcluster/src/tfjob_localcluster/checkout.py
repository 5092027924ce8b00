"""Where the local cluster's files are in the checkout it is installed from.

The package is installed editable from the project's workspace, so its sources sit in the
checkout beside what it builds from: the Dockerfiles of the cluster's images, the kind
node's files, the runtime wrapper, the node tools' Go module, the Go-built tools and their
pinned versions, and the chart. Every module reads those paths here. `TFJOB_CHECKOUT` names
another checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The checkout: localcluster/src/tfjob_localcluster/ is three levels below it.
ROOT = Path(os.environ.get("TFJOB_CHECKOUT") or Path(__file__).resolve().parents[3])
LOCALCLUSTER = ROOT / "localcluster"
#: The Dockerfiles of the images the clusters run besides the project's own.
IMAGES = LOCALCLUSTER / "images"
#: What the kind node image adds to the base: its setup, unit and default CNI.
KIND_NODE_FILES = LOCALCLUSTER / "kind" / "node"
#: runc with RLIMIT-free setrlimit, for machines whose runtime refuses them (capabilities.py).
RUNTIME_WRAPPER = LOCALCLUSTER / "runtime" / "runc-without-sys-resource"
#: The Go module of the node tools (pause, the fake GPU device plugin).
NODETOOLS = LOCALCLUSTER / "nodetools"
#: The Go-built tools, how each is built and what binaries it makes (hack/build-binaries.sh
#: builds from it).
GO_TOOLS = ROOT / "hack" / "go-tools.txt"
#: The pinned versions of the Go-built tools (hack/build-binaries.sh reads them too).
VERSIONS_ENV = ROOT / "hack" / "versions.env"
CHART = ROOT / "charts" / "tfjob-operator"
