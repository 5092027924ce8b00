"""What a release of the project is called, and where it is published.

The version is the file VERSION at the repository root. Every package reads it when it
is built (its pyproject.toml), so it is this package's own version; the chart's
`version` and `appVersion`, the image tags and the examples carry a copy that a test
compares with it (tests/unit/test_version.py).

The release (`make release REGISTRY=...`, release/) pushes the images and the chart under
one registry and organisation: by default the names below, which the chart, the
kustomize install, `tfjob-operator new` and the examples use; a different one (a mirror,
a registry of one's own, the tests' registry on the loopback) is that one setting.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Final

VERSION: Final = version("tfjob-operator")
#: The registry and organisation the release workflow publishes to.
REGISTRY: Final = "ghcr.io/tfjob-operator"
OPERATOR: Final = "tfjob-operator"
TRAINER: Final = "tfjob-trainer"
#: The tag suffix of the trainer built with tensorflow[and-cuda], for NVIDIA GPUs.
GPU_SUFFIX: Final = "-gpu"
#: Where the chart is pushed, as an OCI artifact, below the registry.
CHART: Final = "charts/tfjob-operator"
#: The source repository, named in the images' labels and the release's links.
SOURCE: Final = "https://github.com/tfjob-operator/tfjob-operator"
LICENSE: Final = "Apache-2.0"


def image(repository: str, registry: str = REGISTRY, tag: str = VERSION) -> str:
    """`registry/repository:tag`; an empty registry names a local image."""
    return f"{registry.rstrip('/')}/{repository}:{tag}" if registry else f"{repository}:{tag}"


def operator_image(registry: str = REGISTRY) -> str:
    return image(OPERATOR, registry)


def trainer_image(registry: str = REGISTRY, *, gpu: bool = False) -> str:
    return image(TRAINER, registry, VERSION + (GPU_SUFFIX if gpu else ""))


def chart_reference(registry: str = REGISTRY) -> str:
    """What `helm install` takes, with `--version VERSION`."""
    return f"oci://{registry.rstrip('/')}/{CHART}"
