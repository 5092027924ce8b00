"""buildah, as the release runs it: images of every platform, their indexes, pushes.

buildah builds the project's Dockerfiles without a daemon, for any platform (their build
stage runs on this machine's platform and installs the target's wheels, so nothing runs
emulated), and pushes an index of several platforms' images with its digest. Here:

- its storage (layers, images, the layer cache of `build --layers`) is under the cache,
  `<cache>/buildah/storage`, so a second release reuses every unchanged layer;
- every call runs in a mount namespace of its own (private_run): its mounts, its
  runtime files in /run and the blob cache it would keep in /var/lib/containers never
  reach the host; its temporary files go to the cache's tmp/ (TMPDIR, and a bind over
  /var/tmp, where some of them go whatever TMPDIR says); what it writes to /etc goes to
  `<cache>/buildah/etc` (an overlay): buildah sets up its network backend even when no
  step uses it, and so makes `/etc/cni/net.d/cni.lock`;
- build steps run with chroot isolation and the host's network (no runtime, no CNI).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tfjob_localcluster.binaries import cache_root
from tfjob_localcluster.host import packages, private_run
from tfjob_localcluster.host.procs import failure_excerpt

RUNROOT = "/run/containers/storage"
#: Left unwritable, so that buildah keeps its blob cache in memory (see the docstring).
PRIVATE_READ_ONLY = ("/var/lib",)


class BuildahError(RuntimeError):
    pass


def temporary() -> Path:
    """Where buildah's temporary files go: the cache's tmp/."""
    tmp = cache_root() / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return tmp


class Buildah:
    def __init__(self, say: Callable[[str], None] = print, root: Path | None = None) -> None:
        self.root = root or cache_root() / "buildah"
        self.say = say

    def raw(self, *args: str) -> list[str]:
        """buildah's command line with the project's storage, to run in a namespace
        made by private_run."""
        storage = [f"--root={self.root / 'storage'}", f"--runroot={RUNROOT}"]
        return ["buildah", *storage, "--storage-driver=overlay", *args]

    def argv(self, *args: str) -> list[str]:
        """The command line that runs `buildah args...` in a namespace of its own."""
        return self.private(self.raw(*args))

    def private(self, argv: Sequence[str]) -> list[str]:
        """The command line that runs `argv` (buildah's, or a script calling `raw()`) in
        a mount namespace of its own, as every buildah call here runs. What it writes to
        /etc (a RUN step's network setup makes /etc/cni/net.d/cni.lock) stays in the
        cache: /etc is an overlay there."""
        return private_run.command(
            argv,
            etc_upper=self.root / "etc",
            read_only=PRIVATE_READ_ONLY,
            binds={"/var/tmp": temporary()},
        )

    def environment(self) -> dict[str, str]:
        # buildah keeps big temporary files in TMPDIR (default /var/tmp).
        return {**os.environ, "TMPDIR": str(temporary())}

    def __call__(self, *args: str, timeout: float = 3600) -> str:
        """Runs `buildah args...`; its output, or BuildahError with its last lines."""
        return self.run(*args, timeout=timeout).stdout

    def run(self, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
        """Runs `buildah args...`; what it printed, or BuildahError with its last lines."""
        packages.ensure(["buildah"], say=self.say)
        done = subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            env=self.environment(),
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            printed = failure_excerpt(done.stdout + done.stderr)
            raise BuildahError(f"buildah {' '.join(args[:2])} ... failed:\n{printed}")
        return done

    def inspect(self, reference: str) -> dict[str, Any]:
        """An image's description (buildah's JSON: `OCIv1` is its OCI configuration)."""
        described: dict[str, Any] = json.loads(self("inspect", "--type", "image", reference))
        return described

    def exists(self, reference: str) -> bool:
        query = ("inspect", "--type", "image", "--format", "{{.FromImageID}}", reference)
        return self.succeeds(*query)

    def list_exists(self, reference: str) -> bool:
        """Whether a manifest list of this name is in the storage, whatever it holds (an
        empty one, which `exists` cannot resolve to an image, still takes the name)."""
        return self.succeeds("manifest", "exists", reference)

    def succeeds(self, *args: str) -> bool:
        """Whether `buildah args...` exits 0 (a question, not a step that must work)."""
        done = subprocess.run(
            self.argv(*args), capture_output=True, env=self.environment(), timeout=120, check=False
        )
        return done.returncode == 0

    def build(
        self,
        *,
        context: Path,
        dockerfile: Path,
        reference: str,
        platform: str,
        args: Mapping[str, str],
        labels: Mapping[str, str],
    ) -> float:
        """Builds `dockerfile` for `platform` as `reference`; returns the seconds it took."""
        started = time.monotonic()
        flags = [f"--build-arg={name}={value}" for name, value in args.items()]
        flags += [f"--label={name}={value}" for name, value in labels.items()]
        self(
            "build", "--layers", "--pull=never", "--isolation=chroot", "--network=host",
            f"--platform={platform}", *flags, f"--file={dockerfile}", f"--tag={reference}",
            str(context),
        )  # fmt: skip
        return time.monotonic() - started

    def import_rootfs(
        self, tar: Path, reference: str, architecture: str, config: Sequence[str]
    ) -> None:
        """An image of one layer, the root filesystem in `tar`, for `architecture`;
        `config` are `buildah config` flags (environment, command)."""
        container = self("from", "--pull=never", "scratch").strip()
        try:
            self("add", container, str(tar), "/")
            variant = ["--variant=v8"] if architecture == "arm64" else []
            self("config", "--os=linux", f"--arch={architecture}", *variant, *config, container)
            self("commit", "--quiet", container, reference)
        finally:
            self("rm", container)

    def push_index(
        self, index: str, images: Sequence[str], destination: str, *, plain_http: bool
    ) -> str:
        """Pushes `images` (one per platform) and an index of them to `destination`;
        returns the index's digest."""
        if self.list_exists(index):  # a release's, or one an interrupted release left
            self("manifest", "rm", index)
        self("manifest", "create", index)
        for image in images:
            self("manifest", "add", index, image)
        digest_file = cache_root() / "tmp" / f"digest-{os.getpid()}"
        try:
            done = self.run(
                "manifest", "push", "--all", f"--tls-verify={'false' if plain_http else 'true'}",
                f"--digestfile={digest_file}", index, f"docker://{destination}",
            )  # fmt: skip
            written = digest_file.read_text() if digest_file.exists() else ""
        finally:
            digest_file.unlink(missing_ok=True)
        return pushed_digest(written, destination, failure_excerpt(done.stdout + done.stderr))


def pushed_digest(written: str, destination: str, output: str) -> str:
    """The digest `manifest push --digestfile` wrote. buildah 1.28 (Debian 12's) exits 0
    from a push it could not finish (a registry that refuses the connection) and writes
    an empty digest file: that is a failed push, said here, not a release without digest."""
    digest = written.strip()
    if not digest.startswith("sha256:"):
        raise BuildahError(
            f"buildah manifest push to {destination} wrote no digest: the push did not "
            f"finish, though buildah exited 0. Its output:\n{output}"
        )
    return digest
