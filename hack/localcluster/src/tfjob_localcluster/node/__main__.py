"""`python -m tfjob_localcluster.node --config node.json`: run the process node."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from pathlib import Path

from tfjob_localcluster.node.config import NodeConfig
from tfjob_localcluster.node.kubelet import run_node


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfjob_localcluster.node", description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="node settings (JSON)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    if os.geteuid() != 0:
        print(
            "tfjob-localcluster node: must run as root (it creates network namespaces, "
            "veth pairs and mount namespaces for pods)",
            file=sys.stderr,
        )
        return 2
    if shutil.which("ip") is None:
        print("tfjob-localcluster node: the `ip` command (iproute2) is required", file=sys.stderr)
        return 2
    run_node(NodeConfig.load(args.config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
