pytest_plugins = [
    "support.cluster",
    "support.fixtures",
    "support.backends",
    "support.kueue",
]
