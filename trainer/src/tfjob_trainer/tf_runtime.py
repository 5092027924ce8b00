"""Loading TensorFlow, configuring devices and creating the distribution strategy.

Order matters and is enforced here:

1. `prepare_environment` before TensorFlow is imported (tf_keras as `tf.keras`, log
   level, gRPC fail-fast for ParameterServerStrategy).
2. `configure_devices` before any op runs: GPU memory growth or limits can only be set
   while the runtime is uninitialised, and MultiWorkerMirroredStrategy refuses to start
   ("Collective ops must be configured at program startup") once an op has run.
3. `create_strategy`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from tfjob_trainer.devices import (
    Devices,
    allocated_gpus,
    check_cpu_devices,
    check_gpus,
    cuda_libraries_installed,
)
from tfjob_trainer.strategy_choice import StrategyName
from tfjob_trainer.tf_config import EVALUATOR, TFConfig

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    import tensorflow as tf

    from tfjob_trainer.options import TrainerOptions


def prepare_environment(environ: MutableMapping[str, str], *, parameter_server: bool) -> None:
    """Set the variables TensorFlow reads at import time."""
    # Keras 3 `fit` fails under both multi-worker strategies; tf_keras works. With this
    # set, user code that writes `tf.keras` gets tf_keras too.
    environ["TF_USE_LEGACY_KERAS"] = "1"
    environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    if parameter_server:
        # TensorFlow's recommendation for ParameterServerStrategy: an RPC to a dead
        # task fails at once instead of retrying, so a lost ps surfaces within seconds.
        environ.setdefault("GRPC_FAIL_FAST", "use_caller")


class _SaverRetracingNoise(logging.Filter):
    """Drops TensorFlow's retracing warning about its own checkpoint saver.

    With variables on several tasks (ParameterServerStrategy), every checkpoint save
    defines a new tf.function inside TensorFlow (MultiDeviceSaver.save), and from the
    fifth epoch on each save logs a long "triggered tf.function retracing" warning that
    user code can do nothing about.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("MultiDeviceSaver.save" in message and "retracing" in message)


def quiet_known_noise() -> None:
    logging.getLogger("tensorflow").addFilter(_SaverRetracingNoise())


def configure_devices(options: TrainerOptions, environ: Mapping[str, str]) -> Devices:
    """Applies GPU memory settings, logical CPU devices and device-placement logging,
    checks the pod's GPUs are seen (devices.py), and logs the devices a replica uses."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    check_gpus(allocated_gpus(environ), len(gpus), cuda_libraries_installed())
    check_cpu_devices(options.cpu_devices, len(gpus))
    for gpu in gpus:
        if options.gpu_memory_limit_mb is not None:
            limit = tf.config.LogicalDeviceConfiguration(memory_limit=options.gpu_memory_limit_mb)
            tf.config.set_logical_device_configuration(gpu, [limit])
        elif options.gpu_memory_growth:
            tf.config.experimental.set_memory_growth(gpu, True)
    if options.cpu_devices > 1:
        (cpu,) = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(options.cpu_devices)]
        )
    if options.log_device_placement:
        tf.debugging.set_log_device_placement(True)
    if gpus:
        local = tuple(f"/gpu:{i}" for i in range(len(gpus)))
    else:
        local = tuple(f"/cpu:{i}" for i in range(options.cpu_devices))
    devices = Devices(gpus=len(gpus), local=local)
    logger.info(
        "devices: %s (TensorFlow %s, %s)",
        ", ".join(devices.local),
        tf.__version__,
        "with CUDA's libraries" if cuda_libraries_installed() else "CPU only",
    )
    return devices


def cluster_resolver(config: TFConfig, devices: Devices) -> Any:
    """A resolver built from the validated TF_CONFIG, not from the environment.

    Training tasks get the cluster without the evaluator (a ParameterServerStrategy
    coordinator hangs on an evaluator address with no server behind it); the
    evaluator keeps the full cluster for information.
    """
    import tensorflow as tf

    cluster = dict(config.cluster) if config.task_type == EVALUATOR else config.training_cluster
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster),
        task_type=config.task_type,
        task_id=config.task_index,
        rpc_layer=config.rpc_layer,
        num_accelerators={"GPU": devices.gpus},
    )


def create_strategy(
    name: StrategyName, resolver: Any, options: TrainerOptions, devices: Devices
) -> tf.distribute.Strategy:
    import tensorflow as tf

    if name == StrategyName.MULTI_WORKER_MIRRORED:
        timeout = options.collective_timeout_seconds or None
        communication = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout)
        if devices.several and not devices.gpus:
            return _multi_worker_over_logical_cpus(resolver, communication, len(devices.local))
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=communication
        )
    if name == StrategyName.PARAMETER_SERVER:
        return tf.distribute.ParameterServerStrategy(resolver)
    if name == StrategyName.MIRRORED:
        return tf.distribute.MirroredStrategy(devices=list(devices.local))
    return tf.distribute.get_strategy()


def _multi_worker_over_logical_cpus(
    resolver: Any, communication: Any, count: int
) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy with `count` replicas per task on logical CPUs.

    TensorFlow's strategy takes a task's local devices from its GPU count, and one CPU
    device when there is none. This override of that one choice
    (`CollectiveAllReduceExtended._initialize_local_devices`, TensorFlow 2.21) makes each
    logical CPU a replica, as each GPU would be: the same collectives then all-reduce
    across every device of every task. It is how the several-devices-per-worker path is
    tested where there is no GPU; with GPUs the public strategy is used.
    """
    import tensorflow as tf
    from tensorflow.python.distribute import collective_all_reduce_strategy as collective

    class LogicalCpuExtended(collective.CollectiveAllReduceExtended):
        def _initialize_local_devices(
            self, cluster_resolver: Any, worker_device: str
        ) -> tuple[tuple[str, ...], str]:
            return tuple(f"{worker_device}/device:CPU:{i}" for i in range(count)), "CPU"

    class LogicalCpuStrategy(tf.distribute.MultiWorkerMirroredStrategy):
        def __init__(self) -> None:
            extended = LogicalCpuExtended(
                self, cluster_resolver=resolver, communication_options=communication
            )
            tf.distribute.Strategy.__init__(self, extended)

    return LogicalCpuStrategy()


def start_server(resolver: Any) -> Any:
    """Start this task's gRPC server (ParameterServerStrategy ps and workers)."""
    import tensorflow as tf

    return tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer,
        start=True,
    )
