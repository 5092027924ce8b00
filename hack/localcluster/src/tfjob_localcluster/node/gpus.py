"""GPU device assignment, as the NVIDIA device plugin does it: whole devices per container.

Devices are numbered 0..count-1. A pod's devices stay assigned while it runs (its
containers keep them across restarts) and return to the pool when the pod ends.
"""

from __future__ import annotations


class GpuUnavailableError(Exception):
    pass


class GpuAllocator:
    def __init__(self, count: int) -> None:
        self.count = count
        self._owners: dict[int, str] = {}  # device index -> pod uid

    def free(self) -> list[int]:
        return [index for index in range(self.count) if index not in self._owners]

    def allocate(self, pod_uid: str, wanted: int) -> list[int]:
        """The lowest free `wanted` device indices, now owned by `pod_uid`."""
        free = self.free()
        if wanted > len(free):
            raise GpuUnavailableError(
                f"Allocate failed due to requested number of devices unavailable for "
                f"nvidia.com/gpu. Requested: {wanted}, Available: {len(free)}"
            )
        chosen = free[:wanted]
        for index in chosen:
            self._owners[index] = pod_uid
        return chosen

    def release(self, pod_uid: str) -> None:
        for index in [i for i, owner in self._owners.items() if owner == pod_uid]:
            del self._owners[index]

    def assigned(self, pod_uid: str) -> list[int]:
        return sorted(i for i, owner in self._owners.items() if owner == pod_uid)


def device_environment(devices: list[int]) -> dict[str, str]:
    """What the NVIDIA runtime would hand the container; empty without devices."""
    if not devices:
        return {}
    visible = ",".join(str(index) for index in devices)
    return {"NVIDIA_VISIBLE_DEVICES": visible, "CUDA_VISIBLE_DEVICES": visible}
