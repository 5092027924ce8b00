"""A Docker engine to build images and run kind with: the machine's own, or the project's.

`DockerEngine()` uses the engine `docker info` reaches (`DOCKER_HOST` or the default
socket), as on most users' machines, if it can start kind's privileged node here: on a
machine whose capability bounding set lacks CAP_SYS_RESOURCE, an engine running plain
runc cannot (capabilities.py), and kind would fail with "unable to apply caps". Where
none answers, or the one that answers cannot, and the machine allows it (root, apt), it
installs Debian's `docker.io` if `dockerd` is missing and runs a private `dockerd` for as
long as it is needed (a second `DockerEngine` in the meantime uses it):

- its data (images, build cache, kind's network) under `<cache>/docker/`, its socket
  and trust key there too;
- in a mount namespace of its own with a private `/run`, so its runtime files and
  mounts never appear on the host;
- without iptables rules, forwarding or masquerading, and without the default bridge:
  builds use the host's network; the bridge of kind's network is the engine's only
  link on the host, and kind/cluster.py removes that network when its cluster is deleted;
- with localcluster/runtime/runc-without-sys-resource as its runtime where the machine lacks
  CAP_SYS_RESOURCE (see capabilities.py), so `docker run --privileged` works for kind.

It is stopped when the `with` block ends; its data stays, so the next build is warm.
An engine this run starts serves no other run yet, so whatever containers, volumes and
networks it holds were left by a run that was killed (a kind node keeps gigabytes in its
volume): they are removed once it answers, before anything else runs.

    with DockerEngine(say=print) as engine:
        engine.docker("build", ...)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from tfjob_localcluster.binaries import cache_root
from tfjob_localcluster.checkout import RUNTIME_WRAPPER
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host import capabilities, packages, private_run
from tfjob_localcluster.host.procs import ManagedProcess, failure_excerpt

START_TIMEOUT = 60.0
RUNTIME_NAME = "runc-without-sys-resource"
#: Why the project would start its own engine: a message's first words.
NO_ENGINE_FOR_KIND = "no Docker engine that can start kind's node answers (`docker info`)"


class EngineUnavailableError(LocalClusterError):
    """No Docker engine answers and none can be started here; the message says why."""


class DockerCommandError(LocalClusterError):
    """A docker command failed; the message has the end of its output."""


def info(field: str, env: Mapping[str, str] | None = None) -> str | None:
    """A field of `docker info` (`ServerVersion`, `DefaultRuntime`), or None where no
    engine answers."""
    if shutil.which("docker") is None:
        return None
    done = subprocess.run(
        ["docker", "info", "--format", f"{{{{.{field}}}}}"],
        capture_output=True,
        text=True,
        env=None if env is None else {**os.environ, **env},
        timeout=30,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def answers(env: Mapping[str, str] | None = None) -> bool:
    return info("ServerVersion", env) is not None


def starts_privileged(default_runtime: str, status: str | None = None) -> bool:
    """Whether an engine whose default runtime is `default_runtime` can start a
    privileged container (kind's node) on this machine: plain runc cannot where the
    bounding set lacks CAP_SYS_RESOURCE."""
    return default_runtime != "runc" or not capabilities.lacks_sys_resource(status)


def machines_engine_runs_kind() -> bool:
    """Whether the engine `docker info` reaches answers and can start kind's node here
    (then DockerEngine uses it, and never starts the project's own)."""
    default_runtime = info("DefaultRuntime")
    return default_runtime is not None and starts_privileged(default_runtime)


def dockerd_major_version() -> int:
    """The major version of the `dockerd` on PATH (`Docker version 20.10.24+dfsg1, ...`)."""
    done = subprocess.run(
        ["dockerd", "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    return int(done.stdout.split()[2].split(".")[0])


def dockerd_argv(directory: Path, major_version: int) -> list[str]:
    argv = [
        "dockerd",
        f"--data-root={directory / 'data'}",
        f"--host=unix://{directory / 'docker.sock'}",
        "--exec-root=/run/docker",
        "--pidfile=/run/docker.pid",
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        "--storage-driver=overlay2",
    ]
    if major_version < 25:
        # Before Docker 25 the daemon writes a trust key, by default /etc/docker/key.json;
        # only its configuration file can move it.
        argv.append(f"--config-file={directory / 'daemon.json'}")
    if capabilities.lacks_sys_resource():
        argv += [
            f"--add-runtime={RUNTIME_NAME}={RUNTIME_WRAPPER}",
            f"--default-runtime={RUNTIME_NAME}",
        ]
    return argv


class DockerEngine:
    def __init__(
        self, directory: Path | None = None, say: Callable[[str], None] = lambda _m: None
    ) -> None:
        self.directory = directory or cache_root() / "docker"
        self.say = say
        self.env: dict[str, str] = {}
        self.process: ManagedProcess | None = None

    def __enter__(self) -> DockerEngine:
        if machines_engine_runs_kind():
            self.say("using the Docker engine that `docker info` reaches")
            return self
        if answers():
            self.say(
                "the Docker engine `docker info` reaches runs plain runc, which cannot start "
                "kind's privileged node on this machine (its capability bounding set lacks "
                "CAP_SYS_RESOURCE): using the project's own engine instead"
            )
        private = {"DOCKER_HOST": f"unix://{self.directory / 'docker.sock'}"}
        if answers(private):
            self.say("using the project's Docker engine, already running")
            self.env = private
            return self
        self._start_private()
        return self

    @property
    def private(self) -> bool:
        """Whether this engine is the project's own (not the machine's)."""
        return bool(self.env)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.process is not None:
            self.say("stopping the project's Docker engine")
            self.process.stop(grace=30)
            self.process = None

    def docker(
        self, *args: str, input: bytes | None = None, timeout: float = 3600, check: bool = True
    ) -> str:
        """Runs the docker CLI against this engine; raises with its output on failure
        unless `check` is false."""
        done = subprocess.run(
            ["docker", *args],
            input=input,
            capture_output=True,
            env={**os.environ, **self.env},
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")
            raise DockerCommandError(
                f"docker {' '.join(args[:3])} ... failed:\n{failure_excerpt(output)}"
            )
        return done.stdout.decode(errors="replace")

    def _start_private(self) -> None:
        if os.geteuid() != 0:
            raise EngineUnavailableError(
                f"{NO_ENGINE_FOR_KIND}, and starting the project's own needs root"
            )
        packages.ensure(["docker"], say=self.say)
        self.directory.mkdir(parents=True, exist_ok=True)
        key = {"deprecated-key-path": str(self.directory / "key.json")}
        (self.directory / "daemon.json").write_text(json.dumps(key))
        socket = self.directory / "docker.sock"
        self.env = {"DOCKER_HOST": f"unix://{socket}"}
        self.say(
            f"starting the project's own dockerd (data in {self.directory}, no changes to "
            "the host's network)"
        )
        self.process = ManagedProcess(
            "dockerd",
            private_run.command(dockerd_argv(self.directory, dockerd_major_version())),
            self.directory / "dockerd.log",
        )
        self.process.start()
        try:
            self.process.wait_ready(
                lambda: answers(self.env),
                START_TIMEOUT,
                EngineUnavailableError,
                what="`docker info`",
                interval=0.5,
            )
        except EngineUnavailableError:
            self.process.stop()
            raise
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Removes the containers (with their volumes), volumes and networks of killed runs."""
        left = self.docker("ps", "--all", "--quiet").split()
        if left:
            self.say(f"removing {len(left)} container(s) a killed run left in the engine")
            self.docker("rm", "--force", "--volumes", *left)
        self.docker("volume", "prune", "--force")
        self.docker("network", "prune", "--force")
