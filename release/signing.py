"""A release's signatures, SBOMs and provenance, made with cosign and syft (built from
their Go modules like the other tools, hack/go-tools.txt).

For each pushed image:
- cosign signs its index and each platform's image in it (`--recursive`): an admission
  policy that checks the digest a pod runs finds a signature whichever it resolves;
- syft writes the SPDX SBOM of each platform's image, read back from the registry, and
  cosign attaches it to the index as a signed attestation (predicate type SPDX);
- cosign attaches the SLSA provenance (release/provenance.py) to the index the same way.
The chart's OCI artifact is signed too. cosign 3 stores each as a Sigstore bundle, an OCI
1.1 referrer of what it is about: a registry's referrers API lists them, and `cosign
verify` and `cosign verify-attestation` check them (docs/releasing.md).

Two ways to sign: with a cosign key (`--sign-key cosign.key`, its password in
$COSIGN_PASSWORD; the public key goes beside the release's files), or keyless (`--sign-key
keyless`: Sigstore's public Fulcio and Rekor, with the OIDC identity of the CI that runs
the release, as the release workflow does). A key's signatures stay off the public
transparency log, so they verify offline (`--insecure-ignore-tlog`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from release import provenance
from release.images import Pushed
from release.plan import Plan
from tfjob_localcluster.binaries import cache_root, locate
from tfjob_localcluster.host.procs import failure_excerpt

KEYLESS = "keyless"
SIGN_TIMEOUT = 600
SBOM_TIMEOUT = 1800
#: The files of a release's SBOMs and provenance, below its output directory.
SBOMS = "sbom"
PROVENANCE = "provenance"
PUBLIC_KEY = "cosign.pub"


class SigningError(RuntimeError):
    pass


@dataclass(frozen=True)
class Signer:
    """How a release signs: with a cosign key file, or keyless (key None)."""

    key: Path | None

    @staticmethod
    def of(text: str) -> Signer | None:
        """`--sign-key`'s value: empty, not signed; `keyless`; else a cosign key's path."""
        if not text:
            return None
        if text == KEYLESS:
            return Signer(None)
        key = Path(text).resolve()
        if not key.is_file():
            raise SigningError(f"--sign-key {text}: no such cosign key file")
        return Signer(key)


def environment(work: Path) -> dict[str, str]:
    """cosign's and syft's files in the cache (Sigstore's trust root, syft's caches),
    not under $HOME; registry logins from $REGISTRY_AUTH_FILE (buildah's and helm's)."""
    cache = cache_root()
    config = work / "docker"
    config.mkdir(parents=True, exist_ok=True)
    if auth := os.environ.get("REGISTRY_AUTH_FILE"):
        shutil.copyfile(auth, config / "config.json")
    return {
        **os.environ,
        "TUF_ROOT": str(cache / "sigstore"),
        "DOCKER_CONFIG": str(config),
        "XDG_CACHE_HOME": str(cache / "syft"),
        "XDG_CONFIG_HOME": str(work / "config"),
        "SYFT_CHECK_FOR_APP_UPDATE": "false",
    }


class Signing:
    def __init__(self, plan: Plan, signer: Signer, work: Path, say: Callable[[str], None]) -> None:
        self.plan = plan
        self.signer = signer
        self.say = say
        self.env = environment(work)
        binaries = locate("cosign", "syft")
        self.cosign_path = binaries.cosign
        self.syft_path = binaries.syft

    def cosign(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.cosign_path), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=SIGN_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            raise SigningError(
                f"cosign {args[0]} failed:\n{failure_excerpt(done.stdout + done.stderr)}"
            )
        return done.stdout

    def _flags(self) -> list[str]:
        """What every signing command takes: the key (none: keyless), no prompt, plain
        HTTP to a registry on the loopback."""
        flags = ["--yes"]
        if self.signer.key is not None:
            # A key's signature is not uploaded to the public transparency log.
            flags += [
                f"--key={self.signer.key}",
                "--tlog-upload=false",
                "--use-signing-config=false",
            ]
        if self.plan.plain_http:
            flags += ["--allow-http-registry", "--allow-insecure-registry"]
        return flags

    def sign(self, reference: str, *, recursive: bool) -> None:
        self.cosign("sign", *self._flags(), *(["--recursive"] if recursive else []), reference)

    def attest(self, reference: str, predicate: Path, kind: str) -> None:
        self.cosign(
            "attest", *self._flags(), f"--type={kind}", f"--predicate={predicate}", reference
        )

    def sbom(self, reference: str, architecture: str, out: Path) -> None:
        """The SPDX SBOM of `reference`'s image for `architecture`, into `out`."""
        env = dict(self.env)
        if self.plan.plain_http:
            env["SYFT_REGISTRY_INSECURE_USE_HTTP"] = "true"
        done = subprocess.run(
            [
                str(self.syft_path),
                "scan",
                f"registry:{reference}",
                f"--platform=linux/{architecture}",
                f"--output=spdx-json={out}",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=SBOM_TIMEOUT,
            check=False,
        )
        if done.returncode != 0 or not out.is_file():
            raise SigningError(
                f"syft scan {reference} (linux/{architecture}) failed:\n"
                f"{failure_excerpt(done.stdout + done.stderr)}"
            )

    def public_key(self, out: Path) -> Path | None:
        """The key's public half, written beside the release's files (keyless: none)."""
        if self.signer.key is None:
            return None
        path = out / PUBLIC_KEY
        path.write_text(self.cosign("public-key", f"--key={self.signer.key}"))
        return path


def sign_release(
    signing: Signing,
    pushed: list[Pushed],
    chart: str | None,
    commit: str | None,
    started: datetime,
    finished: datetime,
) -> dict[str, Any]:
    """Signs every pushed image and the chart (`chart`: its reference by digest), attaches
    the images' SBOMs and provenance; what it made, for release.json."""
    plan = signing.plan
    for directory in (SBOMS, PROVENANCE):
        (plan.out / directory).mkdir(parents=True, exist_ok=True)
    images: dict[str, Any] = {}
    builder = provenance.builder_id()
    for image in pushed:
        signing.sign(image.pinned, recursive=True)
        signing.say(f"signed {image.pinned} and its platforms' images")
        sboms = []
        for built in image.platforms:
            sbom = plan.out / SBOMS / f"{image.image.name}-{built.architecture}.spdx.json"
            signing.sbom(image.pinned, built.architecture, sbom)
            signing.attest(image.pinned, sbom, "spdxjson")
            sboms.append(sbom.relative_to(plan.out).as_posix())
        made = plan.out / PROVENANCE / f"{image.image.name}.json"
        made.write_text(
            json.dumps(
                provenance.predicate(plan, image, commit, started, finished, builder), indent=2
            )
            + "\n"
        )
        signing.attest(image.pinned, made, "slsaprovenance1")
        signing.say(f"attested {image.image.name}'s SBOMs ({len(sboms)}) and provenance")
        images[image.image.name] = {
            "sboms": sboms,
            "provenance": made.relative_to(plan.out).as_posix(),
        }
    if chart is not None:
        signing.sign(chart, recursive=False)
        signing.say(f"signed {chart}")
    key = signing.public_key(plan.out)
    return {
        "signer": KEYLESS if signing.signer.key is None else "key",
        "public_key": None if key is None else key.name,
        "images": images,
        "chart": chart is not None,
    }
