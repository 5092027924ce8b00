pytest_plugins = [
    "tfjob_localcluster.pytest_plugin",
    "support.fixtures",
    "support.backends",
    "support.kueue",
]
