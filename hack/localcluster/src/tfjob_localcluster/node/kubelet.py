"""The process node's main loop: register the Node, serve, and run the pods bound to it."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
from pathlib import Path
from typing import Any

from tfjob_localcluster import network
from tfjob_localcluster.node.config import NodeConfig
from tfjob_localcluster.node.context import NodeContext
from tfjob_localcluster.node.dns import ClusterDns
from tfjob_localcluster.node.events import EventRecorder
from tfjob_localcluster.node.gpus import GpuAllocator
from tfjob_localcluster.node.informer import Informer
from tfjob_localcluster.node.kube import Kube
from tfjob_localcluster.node.nodeobject import NodeHeartbeat
from tfjob_localcluster.node.pods import PodWorker
from tfjob_localcluster.node.sandbox import SandboxManager
from tfjob_localcluster.node.server import NodeServer
from tfjob_localcluster.procs import ProcessIdentity
from tfjob_localcluster.registry import Registry, RegistryError

Obj = dict[str, Any]
log = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")


class ProcessNode:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.net = network.ClusterNetwork(config.slot, ipaddress.IPv4Network(config.subnet))
        self.host_ip = str(self.net.gateway)
        self.workers: dict[str, PodWorker] = {}
        self._registry = Registry(Path(config.registry_dir))
        self._background: set[asyncio.Task[Any]] = set()

    async def run(self) -> None:
        if self.net.bridge not in network.link_names():
            raise RuntimeError(
                f"bridge {self.net.bridge} does not exist: start the node through LocalCluster"
            )
        kube = await Kube.from_kubeconfig(Path(self.config.kubeconfig))
        dns_kube = await Kube.from_kubeconfig(Path(self.config.dns_kubeconfig))
        pods_dir = Path(self.config.state_dir) / "pods"
        dns = ClusterDns(dns_kube, self.config.cluster_domain)
        context = NodeContext(
            config=self.config,
            kube=kube,
            events=EventRecorder(kube, self.config.node_name),
            gpus=GpuAllocator(self.config.gpu_count),
            sandboxes=SandboxManager(self.net, pods_dir, self.config.cluster_domain),
            dns=dns,
            host_ip=self.host_ip,
            pods_dir=pods_dir,
            record_process=self._record_process,
        )
        server = NodeServer(self.config, self.host_ip, lambda: list(self.workers.values()))
        port = await server.start()
        heartbeat = NodeHeartbeat(kube, self.config, self.host_ip, port)
        await heartbeat.register()
        log.info(
            "node %s registered; kubelet endpoint %s:%d", self.config.node_name, self.host_ip, port
        )

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        pods = Informer(
            kube,
            "/api/v1/pods",
            lambda kind, pod: self._on_pod(context, kind, pod),
            fieldSelector=f"spec.nodeName={self.config.node_name}",
        )
        dns_task = asyncio.create_task(dns.run())
        await dns.synced()
        tasks: list[asyncio.Task[Any]] = [
            dns_task,
            asyncio.create_task(heartbeat.run()),
            asyncio.create_task(pods.run()),
        ]
        stopped: asyncio.Task[Any] = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([*tasks, stopped], return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        log.info("node stopping: %d pods", len(self.workers))
        await asyncio.gather(*(worker.shutdown() for worker in self.workers.values()))
        await server.stop()
        await kube.close()
        await dns_kube.close()
        for task in done:
            if task is not stopped and not task.cancelled() and (error := task.exception()):
                raise error

    def _record_process(self, pid: int) -> None:
        identity = ProcessIdentity.of(pid)
        if identity is None:
            return
        task = asyncio.create_task(
            asyncio.to_thread(self._registry.record, self.config.slot, identity)
        )
        self._background.add(task)
        task.add_done_callback(self._recorded)

    def _recorded(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and isinstance(task.exception(), RegistryError):
            log.warning("container not recorded for the crash sweep: %s", task.exception())

    def _on_pod(self, context: NodeContext, kind: str, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if kind == "DELETED":
            if worker is not None:
                worker.object_deleted()
                self._spawn(self._forget(worker))
            return
        if worker is not None:
            worker.update(pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL_PHASES:
            worker = PodWorker.dormant(context, pod)
            self.workers[uid] = worker
            worker.update(pod)
            return
        worker = PodWorker(context, pod)
        self.workers[uid] = worker
        log.info("pod %s/%s (%s) bound to this node", worker.namespace, worker.name, uid)
        worker.start()
        if pod["metadata"].get("deletionTimestamp"):
            worker.update(pod)

    async def _forget(self, worker: PodWorker) -> None:
        await worker.finished.wait()
        await asyncio.to_thread(worker.remove_files)
        if self.workers.get(worker.uid) is worker:
            del self.workers[worker.uid]

    def _spawn(self, step: Any) -> None:
        task = asyncio.create_task(step)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def run_node(config: NodeConfig) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(ProcessNode(config).run())
