"""CPU time and memory of processes, read from /proc.

A process's peak resident memory is the kernel's own high-water mark (VmHWM), so no
sampling can miss a short peak. The operator runs in a process group of its own: its usage
is the sum over the group's live members, plus the CPU time of children it has reaped.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tfjob_localcluster.host.procs import ProcessIdentity

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024


@dataclass(frozen=True)
class Usage:
    cpu_seconds: float
    rss_bytes: int
    peak_rss_bytes: int
    processes: int

    @classmethod
    def empty(cls) -> Usage:
        return cls(0.0, 0, 0, 0)


def cpu_seconds(pid: int, include_children: bool = False) -> float | None:
    """utime + stime (and, if asked, the reaped children's); None if the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # Fields after the command name, which may hold spaces: utime is field 14.
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])
    if include_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def memory_bytes(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in bytes; None if the process is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    values = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) * 1024
    return values.get("VmRSS", 0), values.get("VmHWM", 0)


def group_usage(leader: ProcessIdentity) -> Usage:
    """The usage of the process group `leader` leads (see the module docstring)."""
    cpu = 0.0
    rss = peak = count = 0
    for pid in leader.group_members():
        seconds = cpu_seconds(pid, include_children=pid == leader.pid)
        memory = memory_bytes(pid)
        if seconds is None or memory is None:
            continue
        cpu += seconds
        rss += memory[0]
        peak += memory[1]
        count += 1
    return Usage(cpu, rss, peak, count)


def cpu_by_name(pids: dict[str, int]) -> dict[str, float]:
    readings = {name: cpu_seconds(pid) for name, pid in pids.items()}
    return {name: seconds for name, seconds in readings.items() if seconds is not None}


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each process used between two `cpu_by_name` readings."""
    return {name: round(after[name] - before[name], 2) for name in after if name in before}


def own_cpu_seconds() -> float:
    """CPU time of this process (the harness) so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Sampler:
    """Samples a process group's usage every `interval` seconds from a thread.

    The samples show how memory grows during a run; the peak comes from VmHWM, which the
    kernel keeps, read once more when sampling stops.
    """

    leader: ProcessIdentity
    interval: float = 0.5
    samples: list[tuple[float, Usage]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="usage-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> Usage:
        """Stops sampling; returns a last reading (the process must still run).

        Stopping again returns the same reading.
        """
        if self._stop.is_set() and self.samples:
            return self.samples[-1][1]
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        last = group_usage(self.leader)
        self.samples.append((time.time(), last))
        return last

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), group_usage(self.leader)))
            self._stop.wait(self.interval)

    def peak_rss_bytes(self) -> int:
        return max((usage.peak_rss_bytes for _, usage in self.samples), default=0)

    def timeline(self, since: float, points: int = 200) -> list[dict[str, float]]:
        """At most `points` samples (time since `since`, RSS MiB, CPU seconds), evenly picked."""
        step = max(1, len(self.samples) // points)
        chosen = self.samples[::step]
        if self.samples and chosen[-1] is not self.samples[-1]:
            chosen.append(self.samples[-1])
        return [
            {
                "t": round(at - since, 2),
                "rss_mib": round(usage.rss_bytes / MIB, 1),
                "cpu_seconds": round(usage.cpu_seconds, 2),
            }
            for at, usage in chosen
        ]


def machine_busy_seconds() -> float:
    """CPU time every core of the machine has spent on anything but idling, so far."""
    fields = [int(f) for f in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


class Meter:
    """CPU use during a phase: the cluster's components, the harness, the whole machine.

    The machine is shared; what the benchmark's own processes did not use tells how busy
    everything else kept the cores while the phase ran.
    """

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._began = time.monotonic()
        self._components = cpu_by_name(pids)
        self._harness = own_cpu_seconds()
        self._machine = machine_busy_seconds()
        self._load = os.getloadavg()

    def reading(self, operator_cpu_seconds: float = 0.0) -> dict[str, object]:
        components = cpu_delta(self._components, cpu_by_name(self.pids))
        harness = own_cpu_seconds() - self._harness
        machine = machine_busy_seconds() - self._machine
        ours = sum(components.values()) + harness + operator_cpu_seconds
        return {
            "wall_seconds": round(time.monotonic() - self._began, 2),
            "control_plane_cpu_seconds": components,
            "harness_cpu_seconds": round(harness, 2),
            "machine_busy_cpu_seconds": round(machine, 2),
            "other_processes_cpu_seconds": round(max(0.0, machine - ours), 2),
            "loadavg": {"before": list(self._load), "after": list(os.getloadavg())},
        }
