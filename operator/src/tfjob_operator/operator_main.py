"""Wires kopf, the API client, metrics and the controller together and runs them."""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from typing import Any

import kopf
from kubernetes_asyncio import client

from .controller import Controller, register
from .kube import Kube, kopf_credentials, load_configuration
from .metrics import Metrics

logger = logging.getLogger(__name__)


async def run_operator(
    *,
    namespaces: Sequence[str],
    cluster_domain: str | None,
    health_port: int,
    metrics_port: int,
    max_in_flight: int,
    verbose: bool,
) -> None:
    api_client = client.ApiClient(await load_configuration())
    metrics = Metrics()
    metrics.serve(metrics_port)
    controller = Controller(Kube(api_client, max_in_flight), metrics, cluster_domain)
    registry = kopf.OperatorRegistry()
    register(registry, controller)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.reporting_component = "tfjob-operator"
        # Watch only what exists at startup: no list/watch on namespaces and CRDs, so the
        # operator's RBAC stays at the resources it manages.
        settings.scanning.disabled = True

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await kopf_credentials()

    kopf.configure(verbose=verbose, log_format=kopf.LogFormat.PLAIN)
    if not verbose:
        # kopf logs every handler call at INFO: one line per watch event of every pod.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    scope = f"namespaces {', '.join(namespaces)}" if namespaces else "all namespaces"
    logger.info(
        "tfjob-operator watching %s; /healthz on :%d, /metrics on :%d",
        scope,
        health_port,
        metrics_port,
    )
    try:
        await kopf.operator(
            registry=registry,
            # kopf would derive this from the user name, and an image may run under a uid
            # with no passwd entry (the chart's 65532 in a slim image).
            # kopf's Identity is a NewType of str that kopf does not export.
            identity=f"tfjob-operator@{socket.gethostname()}",  # type: ignore[arg-type]
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            standalone=True,
            liveness_endpoint=f"http://0.0.0.0:{health_port}/healthz",
        )
    finally:
        await api_client.close()
