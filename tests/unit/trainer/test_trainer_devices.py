"""Which GPUs a task was given, and the refusal when TensorFlow cannot see them."""

from __future__ import annotations

import pytest

from tfjob_trainer.devices import (
    allocated_gpus,
    check_cpu_devices,
    check_gpus,
    cuda_libraries_installed,
)
from tfjob_trainer.errors import ConfigError


@pytest.mark.parametrize(
    ("environ", "count"),
    [
        ({}, 0),
        ({"TFJOB_GPUS": "2"}, 2),
        ({"TFJOB_GPUS": "0", "NVIDIA_VISIBLE_DEVICES": "0,1"}, 0),  # the operator's word
        ({"NVIDIA_VISIBLE_DEVICES": "0,1"}, 2),
        ({"NVIDIA_VISIBLE_DEVICES": "GPU-5f3c"}, 1),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, 1),
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, 0),
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, 0),
    ],
)
def test_allocated_gpus_come_from_the_operator_else_the_nvidia_toolkit(
    environ: dict[str, str], count: int
) -> None:
    assert allocated_gpus(environ) == count


def test_a_gpu_count_that_is_not_a_number_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match=r"\$TFJOB_GPUS='two'"):
        allocated_gpus({"TFJOB_GPUS": "two"})


def test_gpus_given_but_unseen_are_refused_saying_which_cause() -> None:
    check_gpus(0, 0, cuda_libraries=False)
    check_gpus(1, 1, cuda_libraries=True)
    with pytest.raises(ConfigError, match=r"sees none: this image has no CUDA .* the GPU image"):
        check_gpus(1, 0, cuda_libraries=False)
    with pytest.raises(ConfigError, match="sees none: the container does not see the node's"):
        check_gpus(2, 0, cuda_libraries=True)


def test_this_environment_has_no_cuda_libraries() -> None:
    """The development environment installs the CPU trainer, as the CPU image does."""
    assert not cuda_libraries_installed()


def test_logical_cpus_stand_in_for_gpus_only_where_there_are_none() -> None:
    check_cpu_devices(4, 0)
    check_cpu_devices(1, 2)
    with pytest.raises(ConfigError, match="--cpu-devices 4 stands in for GPUs"):
        check_cpu_devices(4, 2)
