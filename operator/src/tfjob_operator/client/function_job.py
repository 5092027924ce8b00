"""The TFJob and ConfigMap that run a shipped function (shipping.py): `TFJobClient.train`.

The job is what `tfjob-operator new` writes for the same choices, its trainer told to run
the function (`--entrypoint /opt/tfjob-function/tfjob_function.py:NAME`) instead of the
built-in workload. Each replica's pod gets:

- the function's module from the ConfigMap `<job>-function` (key `tfjob_function.py`),
  mounted as that one file into /opt/tfjob-function, an emptyDir;
- for `packages`, an init container of the same image that installs them with uv into
  that emptyDir (`uv pip install --target`), which the trainer puts first on the module
  path with the function's directory. Each pod installs them again when it starts: what
  that costs is the packages' download and install, a few seconds for small pure-Python
  ones. `package_index` names another index (a mirror inside the cluster's network).
  Where no index answers, uv exits 2 and its error becomes the container's termination
  message: the replica fails, not retryable under ExitCode, and the TFJob's Failed
  condition quotes uv (observe.py: a failed init container);
- `resources` on the training container, when given (what Kueue counts).

The ConfigMap is owned by the TFJob (`owned_config_map`), so it goes with the job.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

from .. import scaffold
from ..api import CONTAINER_NAME
from .shipping import MODULE, Shipped

#: Where the function's module (and its packages) live in the pods.
FUNCTION_DIR: Final = "/opt/tfjob-function"
FUNCTION_FILE: Final = f"{MODULE}.py"
#: The volumes: the emptyDir the module and packages share, the ConfigMap it comes from.
WORK_VOLUME: Final = "tfjob-function"
SOURCE_VOLUME: Final = "tfjob-function-source"
INSTALLER: Final = "install-packages"
#: A ConfigMap holds at most 1 MiB; the module stays well inside it.
MAX_SOURCE_BYTES: Final = 900 * 1024


def function_job_name(function: str) -> str:
    """A TFJob name from a function's (`train_model` -> `train-model`)."""
    name = re.sub(r"[^a-z0-9-]+", "-", function.lower()).strip("-") or "function"
    return name if name[0].isalpha() else f"fn-{name}"


def config_map_name(job: str) -> str:
    return f"{job}-function"


def entrypoint(shipped: Shipped) -> str:
    return f"{FUNCTION_DIR}/{FUNCTION_FILE}:{shipped.function}"


def function_job(
    choices: scaffold.Choices,
    shipped: Shipped,
    *,
    packages: Sequence[str] = (),
    package_index: str | None = None,
    resources: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The TFJob (without its namespace), the ConfigMap (without its owner) that run
    `shipped` as `choices` say, and the claims the choices declare (`pvc_size`);
    ScaffoldError for choices that make no job. `package_index` is the index `packages`
    come from, PyPI's unless given (a cluster's own mirror)."""
    if len(shipped.source.encode()) > MAX_SOURCE_BYTES:
        raise scaffold.ScaffoldError(
            f"the function's module is {len(shipped.source.encode())} bytes, more than a "
            f"ConfigMap holds ({MAX_SOURCE_BYTES}): load large data in the function instead"
        )
    chosen = scaffold.Choices(
        **{
            **vars(choices),
            "extra_args": ("--entrypoint", entrypoint(shipped), *choices.extra_args),
        }
    )
    text = scaffold.render(chosen, f"TFJobClient.train({shipped.function}, ...)")
    scaffold.validate_rendered(text)
    *claims, job = [d for d in yaml.safe_load_all(text) if d]
    for replica in job["spec"]["tfReplicaSpecs"].values():
        _dress(replica["template"]["spec"], choices.name, packages, package_index, resources)
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config_map_name(choices.name)},
        "data": {FUNCTION_FILE: shipped.source},
    }
    return job, config_map, claims


def _dress(
    pod: dict[str, Any],
    job: str,
    packages: Sequence[str],
    package_index: str | None,
    resources: Mapping[str, Any] | None,
) -> None:
    pod["volumes"] = [
        *(pod.get("volumes") or []),
        {"name": WORK_VOLUME, "emptyDir": {}},
        {"name": SOURCE_VOLUME, "configMap": {"name": config_map_name(job)}},
    ]
    container = next(c for c in pod["containers"] if c["name"] == CONTAINER_NAME)
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": WORK_VOLUME, "mountPath": FUNCTION_DIR},
        {
            "name": SOURCE_VOLUME,
            "mountPath": f"{FUNCTION_DIR}/{FUNCTION_FILE}",
            "subPath": FUNCTION_FILE,
            "readOnly": True,
        },
    ]
    if resources:
        container["resources"] = copy.deepcopy(dict(resources))
    if packages:
        pod["initContainers"] = [
            *(pod.get("initContainers") or []),
            {
                "name": INSTALLER,
                "image": container["image"],
                "imagePullPolicy": container.get("imagePullPolicy", "IfNotPresent"),
                "command": [
                    "uv",
                    "pip",
                    "install",
                    "--no-cache",
                    "--quiet",
                    "--python",
                    "python",
                    "--target",
                    FUNCTION_DIR,
                    *packages,
                ],
                "env": [{"name": "UV_DEFAULT_INDEX", "value": package_index}]
                if package_index
                else [],
                # uv's error, as the pod's status says it (observe.py: a failed init
                # container fails the replica with its message).
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "securityContext": copy.deepcopy(container.get("securityContext") or {}),
                "volumeMounts": [{"name": WORK_VOLUME, "mountPath": FUNCTION_DIR}],
            },
        ]


def owned_config_map(config_map: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """The ConfigMap, owned by the created TFJob `owner`: deleted with it."""
    metadata = owner["metadata"]
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }
    return {
        **config_map,
        "metadata": {
            **config_map["metadata"],
            "namespace": metadata["namespace"],
            "ownerReferences": [reference],
        },
    }
