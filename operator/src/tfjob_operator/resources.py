"""What the operator watches, as data: a resource's name and path, the key of the job its
objects belong to, and how a child's job is read from its labels.

Apart from the watch caches (watchcache.py), which need the controller's dependencies
(aiohttp), so that what only describes the integrations imports in the client's
install too: `tfjob-operator render` and the CLI need no aiohttp.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .api import LABEL_JOB_NAME

#: A job's namespace and name.
JobKey = tuple[str, str]
T = TypeVar("T")


@dataclass(frozen=True)
class Resource:
    plural: str
    group_path: str = "/api/v1"
    label_selector: str | None = None
    #: Another project's resource, which the API server may not serve (its CRD is not
    #: installed): then its store stays empty, and the watch looks again now and then.
    optional: bool = False
    field_selector: str | None = None

    @property
    def name(self) -> str:
        """`pods`, or with its group for other groups: `tfjobs.kubeflow.org`."""
        parts = self.group_path.split("/")
        return self.plural if parts[1] == "api" else f"{self.plural}.{parts[2]}"


def child_reader(
    observe: Callable[[Mapping[str, Any]], T], label: str = LABEL_JOB_NAME
) -> Callable[[Mapping[str, Any]], tuple[str, JobKey, T] | None]:
    """Reads a child of a job (a pod, a service, a PodGroup, a TensorBoard's Deployment or
    Service) into its record, filed under the job its `label` names."""

    def read(body: Mapping[str, Any]) -> tuple[str, JobKey, T] | None:
        metadata = body["metadata"]
        job_name = (metadata.get("labels") or {}).get(label)
        if job_name is None:
            return None
        return metadata["uid"], (metadata["namespace"], job_name), observe(body)

    return read
