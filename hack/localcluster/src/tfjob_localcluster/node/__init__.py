"""The process node: a kubelet and container runtime that runs pods as local processes.

Run as `python -m tfjob_localcluster.node --config node.json` (the launcher does this).
"""
