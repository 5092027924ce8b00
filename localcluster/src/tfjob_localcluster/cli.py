"""`tfjob-localcluster`: start, stop and inspect a local cluster from the shell.

    tfjob-localcluster up --state-dir DIR      start in the background (idempotent)
    tfjob-localcluster down --state-dir DIR    stop it
    tfjob-localcluster run --state-dir DIR     run in the foreground until Ctrl-C
    tfjob-localcluster status [--state-dir DIR]
    tfjob-localcluster images [--gpu] [--project]   build the images (`make images`)
    tfjob-localcluster load --state-dir DIR IMAGE...   import built images into the node
    tfjob-localcluster registry [--port N]     an OCI registry on 127.0.0.1 until Ctrl-C

`up` starts a detached supervisor (`run`, output in DIR/supervisor.log) and prints
`export KUBECONFIG=...` on stdout once the cluster is ready, so `eval "$(...)"` works.
The state dir keeps etcd's data and the certificates across down/up.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from tfjob_localcluster.binaries import MissingBinaryError, cache_root
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host.packages import PackageError
from tfjob_localcluster.host.procs import ProcessIdentity, tail
from tfjob_localcluster.host.slots import SlotError, Slots
from tfjob_localcluster.images import catalog
from tfjob_localcluster.images.registry import OciRegistry
from tfjob_localcluster.local.cluster import ClusterError, LocalCluster
from tfjob_localcluster.local.noderuntime import NodeRuntime, NodeRuntimeError

UP_TIMEOUT = 300.0
DOWN_TIMEOUT = 90.0


def _note(message: str) -> None:
    print(f"tfjob-localcluster: {message}", file=sys.stderr, flush=True)


class Paths:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir.expanduser().resolve()
        self.lock = self.state_dir / "supervisor.lock"
        self.supervisor = self.state_dir / "supervisor.json"
        self.log = self.state_dir / "supervisor.log"
        self.ready = self.state_dir / "ready"
        self.info = self.state_dir / "cluster.json"

    def supervisor_identity(self) -> ProcessIdentity | None:
        """The running supervisor, if any."""
        try:
            data = json.loads(self.supervisor.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        identity = ProcessIdentity(int(data["pid"]), int(data["start_ticks"]))
        return identity if identity.alive() else None


@contextlib.contextmanager
def _exclusive(paths: Paths) -> Iterator[TextIO | None]:
    """Holds the state dir's supervisor lock (yields None if another process holds it)."""
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    with paths.lock.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield lock


def _export_line(paths: Paths) -> str:
    return f"export KUBECONFIG={paths.state_dir / 'admin.kubeconfig'}"


def cmd_run(paths: Paths) -> int:
    with _exclusive(paths) as lock:
        if lock is None:
            identity = paths.supervisor_identity()
            _note(f"already running in {paths.state_dir} (pid {identity.pid if identity else '?'})")
            return 1
        me = ProcessIdentity.of(os.getpid())
        assert me is not None
        paths.supervisor.write_text(json.dumps({"pid": me.pid, "start_ticks": me.start_ticks}))
        paths.ready.unlink(missing_ok=True)
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, lambda *_: stop.set())
        cluster = LocalCluster(paths.state_dir, say=_note)
        try:
            cluster.start()
            print(_export_line(paths), flush=True)
            paths.ready.write_text(str(cluster.kubeconfig))
            while not stop.wait(2):
                cluster.check()
        except (
            ClusterError,
            MissingBinaryError,
            SlotError,
            PackageError,
            catalog.MissingImageError,
            NodeRuntimeError,
        ) as error:
            _note(f"error: {error}")
            return 1
        finally:
            paths.ready.unlink(missing_ok=True)
            cluster.stop()
            paths.supervisor.unlink(missing_ok=True)
        _note("stopped")
        return 0


def cmd_up(paths: Paths, timeout: float) -> int:
    if os.geteuid() != 0:
        _note("the local cluster needs root (its node runs in namespaces of its own)")
        return 2
    with _exclusive(paths) as lock:
        running = lock is None
    process: subprocess.Popen[bytes] | None = None
    if not running:
        _note(f"starting the cluster in the background (log: {paths.log})")
        with paths.log.open("ab") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tfjob_localcluster.cli",
                    "run",
                    "--state-dir",
                    str(paths.state_dir),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    started = time.monotonic()
    while not paths.ready.exists():
        waited = time.monotonic() - started
        if process is not None and process.poll() is not None:
            _note(f"the cluster failed to start; last lines of {paths.log}:\n{tail(paths.log)}")
            return 1
        # Another supervisor holds the lock: it writes its pid at once, then starts.
        if process is None and waited > 5 and paths.supervisor_identity() is None:
            _note(f"the supervisor of {paths.state_dir} exited; see {paths.log}")
            return 1
        if waited > timeout:
            _note(f"the cluster was not ready in {timeout:g}s; see {paths.log}")
            return 1
        time.sleep(0.2)
    if running:
        _note(f"already running in {paths.state_dir}")
    print(_export_line(paths), flush=True)
    return 0


def cmd_down(paths: Paths) -> int:
    identity = paths.supervisor_identity()
    if identity is None:
        _note(f"no cluster running in {paths.state_dir}")
    else:
        os.kill(identity.pid, signal.SIGTERM)
        deadline = time.monotonic() + DOWN_TIMEOUT
        while identity.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        if identity.alive():
            _note("the supervisor did not stop in time: killing it")
            identity.kill_group(signal.SIGKILL)
        _note(f"stopped the cluster in {paths.state_dir}")
    # Whatever a killed supervisor left behind (network, stray processes) goes now.
    with contextlib.suppress(SlotError):
        Slots().sweep()
    return 0


def cmd_status(paths: Paths) -> int:
    identity = paths.supervisor_identity()
    if identity is None or not paths.ready.exists():
        state = "starting" if identity else "not running"
        print(f"{paths.state_dir}: {state}")
    else:
        info = json.loads(paths.info.read_text())
        print(f"{paths.state_dir}: running (supervisor pid {identity.pid})")
        print(f"  API server: {info['api_url']}")
        print(f"  node: {info['node_name']} at {info['node_ip']}")
        print(f"  {_export_line(paths)}")
        nodes = subprocess.run(
            [info["kubectl"], f"--kubeconfig={info['kubeconfig']}", "get", "nodes"],
            capture_output=True,
            text=True,
            check=False,
        )
        print("  " + (nodes.stdout or nodes.stderr).strip().replace("\n", "\n  "))
    with contextlib.suppress(SlotError):
        clusters = Slots().live()
        print(f"local clusters on this machine: {len(clusters)}")
        for slot in clusters:
            owner = f"owner pid {slot.owner.pid}"
            print(f"  slot {slot.index}: pods {slot.subnet}, {owner}, {slot.state_dir}")
    return 0 if identity is not None else 3


def cmd_images(gpu: bool, project: bool) -> int:
    chosen = catalog.PROJECT_IMAGES if project else catalog.DEFAULT_IMAGES
    wanted = [*chosen, *([catalog.TRAINER_GPU] if gpu else [])]
    try:
        built = catalog.ImageStore(say=lambda m: _note(f"images: {m}")).build(wanted)
    except LocalClusterError as error:
        _note(f"error: {error}")
        return 1
    print(catalog.describe(built))
    return 0


def cmd_load(paths: Paths, references: list[str]) -> int:
    if paths.supervisor_identity() is None or not paths.ready.exists():
        _note(f"no cluster running in {paths.state_dir}")
        return 1
    info = json.loads(paths.info.read_text())
    runtime = NodeRuntime(int(info["node_init_pid"]), paths.state_dir / "node")
    try:
        runtime.load_all(catalog.ImageStore(), references, _note)
    except LocalClusterError as error:
        _note(f"error: {error}")
        return 1
    return 0


def cmd_registry(port: int | None) -> int:
    """An OCI registry on the loopback in the foreground (its blobs in the cache)."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        with OciRegistry(cache_root() / "registry", port, say=_note) as registry:
            _note(f"push to {registry.address} (plain HTTP); Ctrl-C stops it")
            while not stop.wait(1) and registry.process is not None:
                if not registry.process.running():
                    _note(f"the registry exited:\n{registry.process.tail()}")
                    return 1
    except LocalClusterError as error:
        _note(f"error: {error}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tfjob-localcluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    default_dir = cache_root() / "cluster"
    for name, helptext in (
        ("up", "start in the background and print the KUBECONFIG export"),
        ("down", "stop the background cluster"),
        ("run", "run in the foreground until interrupted"),
        ("status", "show whether the cluster runs, and all local clusters"),
    ):
        command = commands.add_parser(name, help=helptext)
        command.add_argument(
            "--state-dir", type=Path, default=default_dir, help=f"default: {default_dir}"
        )
        if name == "up":
            command.add_argument("--timeout", type=float, default=UP_TIMEOUT)
    build = commands.add_parser("images", help="build the images into the cache")
    build.add_argument("--gpu", action="store_true", help=f"also build {catalog.TRAINER_GPU}")
    build.add_argument(
        "--project",
        action="store_true",
        help="only the operator and trainer images, which need no Go-built tool",
    )
    load = commands.add_parser("load", help="import built images into the running node")
    load.add_argument("--state-dir", type=Path, default=default_dir, help=f"default: {default_dir}")
    load.add_argument("image", nargs="+")
    registry = commands.add_parser("registry", help="run an OCI registry on 127.0.0.1")
    registry.add_argument("--port", type=int, default=None, help="default: a free one")
    args = parser.parse_args(argv)
    if args.command == "images":
        return cmd_images(args.gpu, args.project)
    if args.command == "registry":
        return cmd_registry(args.port)
    paths = Paths(args.state_dir)
    if args.command == "load":
        return cmd_load(paths, args.image)
    if args.command == "up":
        return cmd_up(paths, args.timeout)
    if args.command == "down":
        return cmd_down(paths)
    if args.command == "run":
        return cmd_run(paths)
    return cmd_status(paths)


if __name__ == "__main__":
    sys.exit(main())
