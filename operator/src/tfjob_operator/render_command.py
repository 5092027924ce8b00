"""`tfjob-operator render`: the pods and services of a TFJob, and what its integrations make
for it (a PodGroup, a TensorBoard, a disruption budget), printed without a cluster."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

import yaml

from .api import APIS, KIND, JobRef, api_of
from .integrations import Settings, integrations
from .integrations.base import Stage
from .job_view import JobView
from .render import render_pod, render_service
from .spec import InvalidSpec, parse_spec

#: Stands in for the uid the API server assigns when the TFJob is created.
PREVIEW_UID = "00000000-0000-0000-0000-000000000000"


def run(filename: str, default_namespace: str, cluster_domain: str | None) -> int:
    try:
        with _open(filename) as stream:
            documents = [d for d in yaml.safe_load_all(stream) if d]
    except (OSError, yaml.YAMLError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    jobs = [d for d in documents if d.get("kind") == KIND]
    if not jobs:
        print(f"error: {filename} holds no {KIND}", file=sys.stderr)
        return 2
    failed = False
    rendered: list[dict[str, Any]] = []
    for job in jobs:
        try:
            rendered.extend(children(job, default_namespace, cluster_domain))
        except InvalidSpec as error:
            failed = True
            name = (job.get("metadata") or {}).get("name", "<unnamed>")
            for message in error.errors:
                print(f"error: TFJob {name}: {message}", file=sys.stderr)
    if failed:
        return 1
    yaml.safe_dump_all(rendered, sys.stdout, sort_keys=False)
    return 0


def children(
    job: Mapping[str, Any], default_namespace: str, cluster_domain: str | None
) -> Iterator[dict[str, Any]]:
    """Every Service and Pod of `job`, as the controller creates them for a new job, after
    what the integrations that stand before the pods make (a gang's PodGroup) and before
    what those beside the job make (integrations/)."""
    api_version = job.get("apiVersion")
    api = api_of(api_version)
    if api is None:
        served = " or ".join(a.api_version for a in APIS)
        raise InvalidSpec([f"apiVersion: must be {served}, got {api_version!r}"])
    metadata = job.get("metadata") or {}
    name = metadata.get("name") or ""
    spec = parse_spec(name, job.get("spec") or {})
    ref = JobRef(metadata.get("namespace") or default_namespace, name, PREVIEW_UID, api)
    view = JobView(
        ref, "", 0, False, job.get("spec") or {}, {}, annotations=metadata.get("annotations") or {}
    )
    enabled = integrations(Settings(cluster_domain=cluster_domain))
    beside = [i for i in enabled if i.stage is Stage.BESIDE]
    for integration in enabled:
        if integration not in beside:
            yield from integration.preview(view, spec)
    dressings = [d for i in enabled if (d := i.preview_dress(view, spec)) is not None]
    for replica in spec.replicas():
        yield render_service(ref, spec, replica)
        pod = render_pod(ref, spec, replica, 0, cluster_domain)
        for dress in dressings:
            dress(pod, replica)
        yield pod
    for integration in beside:
        yield from integration.preview(view, spec)


def _open(filename: str) -> TextIO:
    if filename == "-":
        return sys.stdin
    return open(filename, encoding="utf-8")
