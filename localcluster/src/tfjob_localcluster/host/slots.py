"""The machine-wide list of local clusters, so several can run at once and none leaks.

Each running cluster holds a slot: a small integer that fixes its subnets, the prefix
of its network names and its cgroup. A slot file records the owning process and every
process the cluster started. Claiming a slot first sweeps the slots of owners that
have died (killing their process groups, deleting their network links and cgroups):
what a SIGKILLed cluster left behind is removed by the next start.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tfjob_localcluster.binaries import cache_root
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host import cgroups, network
from tfjob_localcluster.host.procs import ProcessIdentity, process_table

POD_NETWORK = ipaddress.IPv4Network(
    os.environ.get("TFJOB_LOCALCLUSTER_POD_NETWORK", "10.213.0.0/16")
)
SLOT_PREFIX_LENGTH = 24


class SlotError(LocalClusterError):
    pass


@dataclass
class Slot:
    index: int
    subnet: ipaddress.IPv4Network
    owner: ProcessIdentity
    state_dir: str
    processes: list[ProcessIdentity] = field(default_factory=list)

    @property
    def network(self) -> network.ClusterNetwork:
        return network.ClusterNetwork(self.index, self.subnet, network.node_subnets()[self.index])

    @property
    def cgroup_root(self) -> str:
        return cgroups.root_name(self.index)

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "subnet": str(self.subnet),
            "owner": [self.owner.pid, self.owner.start_ticks],
            "state_dir": self.state_dir,
            "processes": [[p.pid, p.start_ticks] for p in self.processes],
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Slot:
        owner = data["owner"]
        processes = data.get("processes", [])
        if not isinstance(owner, list) or not isinstance(processes, list):
            raise ValueError(f"malformed slot record: {data}")
        return cls(
            index=int(str(data["index"])),
            subnet=ipaddress.IPv4Network(str(data["subnet"])),
            owner=ProcessIdentity(int(owner[0]), int(owner[1])),
            state_dir=str(data["state_dir"]),
            processes=[ProcessIdentity(int(p[0]), int(p[1])) for p in processes],
        )


def candidate_subnets(
    pod_network: ipaddress.IPv4Network = POD_NETWORK,
) -> list[ipaddress.IPv4Network]:
    return list(pod_network.subnets(new_prefix=SLOT_PREFIX_LENGTH))


class Slots:
    def __init__(
        self, directory: Path | None = None, pod_network: ipaddress.IPv4Network = POD_NETWORK
    ) -> None:
        """`directory` defaults to `clusters/` in the cache (`$TFJOB_CACHE`)."""
        self.directory = directory or cache_root() / "clusters"
        self.pod_network = pod_network

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            lock = (self.directory / ".lock").open("a")
        except PermissionError:
            raise SlotError(
                f"cannot write {self.directory}: the local cluster needs root "
                "(it creates network namespaces, veth pairs and a bridge)"
            ) from None
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _path(self, index: int) -> Path:
        return self.directory / f"slot-{index}.json"

    def _load_all(self) -> list[Slot]:
        slots = []
        for path in sorted(self.directory.glob("slot-*.json")):
            try:
                slots.append(Slot.from_json(json.loads(path.read_text())))
            except (ValueError, KeyError, IndexError, TypeError):
                # A slot file cut short by a crash: nothing in it can be trusted.
                path.unlink(missing_ok=True)
        return slots

    def _save(self, slot: Slot) -> None:
        scratch = self._path(slot.index).with_suffix(".tmp")
        scratch.write_text(json.dumps(slot.to_json()))
        scratch.replace(self._path(slot.index))

    def _reclaim(self, slot: Slot) -> None:
        for process in slot.processes:
            process.kill_group(signal.SIGKILL)
        network.remove_all(slot.network.prefix)
        cgroups.remove(slot.cgroup_root)
        self._path(slot.index).unlink(missing_ok=True)

    def _sweep_locked(self) -> list[Slot]:
        dead = [slot for slot in self._load_all() if not slot.owner.alive()]
        for slot in dead:
            self._reclaim(slot)
        return dead

    def sweep(self) -> list[Slot]:
        """Reclaims the slots whose owner has died; returns them."""
        with self._locked():
            return self._sweep_locked()

    def live(self) -> list[Slot]:
        with self._locked():
            return [slot for slot in self._load_all() if slot.owner.alive()]

    def claim(self, state_dir: Path, owner_pid: int | None = None) -> Slot:
        owner = ProcessIdentity.of(owner_pid or os.getpid())
        if owner is None:
            raise SlotError(f"owner process {owner_pid} does not exist")
        with self._locked():
            self._sweep_locked()
            taken = {slot.index for slot in self._load_all()}
            routed = network.routed_networks()
            links = set(network.link_names())
            node_subnets = network.node_subnets()
            for index, subnet in enumerate(candidate_subnets(self.pod_network)):
                if index >= len(node_subnets) or index in taken:
                    continue
                # A cluster of another registry (another cache) may hold it.
                candidate = Slot(index, subnet, owner, str(state_dir))
                if candidate.network.host_link in links or cgroups.in_use(candidate.cgroup_root):
                    continue
                if any(s.overlaps(r) for s in (subnet, node_subnets[index]) for r in routed):
                    continue
                self._save(candidate)
                return candidate
        raise SlotError(
            f"no free pod subnet in {self.pod_network}: {len(taken)} local clusters are running"
        )

    def record(self, index: int, process: ProcessIdentity) -> None:
        """Adds a started process group to slot `index`, to be killed if the owner dies."""
        with self._locked():
            slot = self._reload(index)
            table = process_table()
            slot.processes = [p for p in slot.processes if p.group_members(table)] + [process]
            self._save(slot)

    def _reload(self, index: int) -> Slot:
        """The slot as on disk (another process of the cluster may have added to it)."""
        try:
            return Slot.from_json(json.loads(self._path(index).read_text()))
        except FileNotFoundError:
            raise SlotError(f"slot {index} was released or reclaimed") from None

    def release(self, slot: Slot) -> None:
        """Kills what is left of the slot's processes, deletes its network, frees it."""
        with self._locked():
            with contextlib.suppress(SlotError):
                slot = self._reload(slot.index)
            self._reclaim(slot)
