"""What one benchmark invocation was asked to do."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.shape import Shape
from harness.operator_process import OperatorCommand


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]
    #: Floor and operator phases per size, alternating: the machine's speed drifts, and
    #: the median of the rounds' ratios is steadier than one round's.
    rounds: int
    shape: Shape
    api_version: str
    crds: tuple[Path, ...]
    operator: OperatorCommand
    nodes: int
    #: Requests in flight of the floor client (it creates the children itself).
    floor_concurrency: int
    #: Requests in flight of the driver (TFJob creates, leader exits).
    driver_concurrency: int
    #: Longest wait for any one step of a phase, in seconds.
    timeout: float
    work_dir: Path
    #: The operator elects a leader, and a second one waits as its standby (as the chart
    #: runs them): the standby's own cost is measured beside the leader's.
    standby: bool = False

    @property
    def group(self) -> str:
        return self.api_version.partition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.partition("/")[2]

    @property
    def driver_connections(self) -> int:
        """The driver's connections, the same in both phases: its requests in flight, its
        three watches (pods, services, TFJobs) and one spare. Fewer would hold the leaders'
        exits to fewer in flight than `driver_concurrency`."""
        return self.driver_concurrency + 4

    def jobs_path(self, namespace: str) -> str:
        return f"/apis/{self.group}/{self.version}/namespaces/{namespace}/tfjobs"

    def state_dir(self, phase: str, size: int, round_: int) -> Path:
        return self.work_dir / f"{phase}-n{size}-r{round_}"
