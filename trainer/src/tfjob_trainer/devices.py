"""Which devices a task trains on, and whether they are the ones the pod was given:
pure decisions, no TensorFlow (tf_runtime applies them).

- GPUs: the pod's `nvidia.com/gpu` limit reaches the container as $TFJOB_GPUS (the
  operator sets it) and, on a node with NVIDIA's device plugin, as
  $NVIDIA_VISIBLE_DEVICES. When the pod was given GPUs and TensorFlow sees none, training
  would silently run on the CPU: the task fails at start instead, saying why (a CPU-only
  TensorFlow, or a node whose driver the container does not see).
- Logical CPU devices (`--cpu-devices N`): the CPU split into N devices, each one model
  replica, as N GPUs would be. MirroredStrategy then all-reduces between them in one
  process, which proves the several-devices-per-pod path where there is no GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import distributions
from typing import Final

from tfjob_trainer.errors import ConfigError

#: Set by the operator: the tensorflow container's nvidia.com/gpu limit.
GPUS_ENV: Final = "TFJOB_GPUS"
#: Set by NVIDIA's container toolkit from the device plugin's allocation.
NVIDIA_ENV: Final = "NVIDIA_VISIBLE_DEVICES"
#: NVIDIA_VISIBLE_DEVICES values that give the container no GPU.
_NO_DEVICES: Final = frozenset({"", "void", "none"})


@dataclass(frozen=True)
class Devices:
    """What this task trains on."""

    #: Physical GPUs TensorFlow sees.
    gpus: int
    #: The devices one model replica each runs on in this process (for MirroredStrategy
    #: and MultiWorkerMirroredStrategy): the GPUs, else the logical CPUs, else the CPU.
    local: tuple[str, ...]

    @property
    def several(self) -> bool:
        return len(self.local) > 1


def allocated_gpus(environ: Mapping[str, str]) -> int:
    """How many GPUs the pod was given: $TFJOB_GPUS, else the devices NVIDIA's toolkit
    lists ("all": at least one), else none."""
    count = environ.get(GPUS_ENV, "").strip()
    if count:
        try:
            return max(int(count), 0)
        except ValueError:
            raise ConfigError(f"${GPUS_ENV}={count!r} is not a number of GPUs") from None
    visible = environ.get(NVIDIA_ENV, "").strip().lower()
    if visible in _NO_DEVICES:
        return 0
    if visible == "all":
        return 1
    return len([device for device in visible.split(",") if device.strip()])


def cuda_libraries_installed() -> bool:
    """Whether CUDA's runtime for TensorFlow is installed as `tensorflow[and-cuda]` installs
    it (the GPU image); the CPU image's TensorFlow finds no GPU without it."""
    return any(
        (dist.metadata["Name"] or "").lower().startswith("nvidia-cuda-runtime")
        for dist in distributions()
    )


def check_gpus(allocated: int, seen: int, cuda_libraries: bool) -> None:
    """Raises ConfigError when the pod was given GPUs that TensorFlow does not see."""
    if allocated == 0 or seen > 0:
        return
    given = f"the pod was given {allocated} GPU(s) but TensorFlow sees none"
    if not cuda_libraries:
        raise ConfigError(
            f"{given}: this image has no CUDA libraries for TensorFlow and would train on "
            "the CPU; use the GPU image (tfjob-trainer:<version>-gpu, tensorflow[and-cuda])"
        )
    raise ConfigError(
        f"{given}: the container does not see the node's NVIDIA driver (is the NVIDIA "
        f"container toolkit set up on the node? ${NVIDIA_ENV} says what was allocated)"
    )


def check_cpu_devices(cpu_devices: int, gpus: int) -> None:
    if cpu_devices > 1 and gpus:
        raise ConfigError(
            f"--cpu-devices {cpu_devices} stands in for GPUs, and this task has {gpus}: "
            "drop --cpu-devices"
        )
