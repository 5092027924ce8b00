"""Control-plane benchmark of the TFJob operator against the API server's floor.

`python -m bench --help` runs it; README.md explains what it measures and how.
"""
