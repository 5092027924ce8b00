"""The user's path from a release: `make release` to a real OCI registry on the loopback,
then `helm install oci://...` (and `kubectl apply -f install.yaml`) on a fresh local
cluster, whose containerd pulls every image of the project from that registry (none is
imported), and on kind set up as kind's guide to a local registry does; a TFJob trains
with the pulled trainer image. Then an upgrade from the previous release, built from its
commit (release/previous.env) by the same release tool, while TFJobs run.

The release here is built for this machine's platform only; the release workflow builds
linux/amd64 and linux/arm64 (docs/releasing.md says what was built and measured here).
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import os
import re
import secrets
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from packaging.metadata import Metadata
from packaging.version import Version
from support.backends import backend_params
from support.builders import shell_replica, tfjob
from support.checkout import ROOT
from support.cluster import Kubectl, namespace_name
from support.examples import documents
from support.tfjobs import PodCreations, TFJobs, condition, find_condition
from support.waiting import wait_until

from release import signing
from release.wheel import digest as wheel_digest
from tfjob_localcluster.addons.chart import NAMESPACE, RELEASE, helm, wait_available
from tfjob_localcluster.binaries import locate, parse_versions
from tfjob_localcluster.images.catalog import BUSYBOX
from tfjob_localcluster.images.platforms import host_architecture
from tfjob_localcluster.images.registry import OciRegistry
from tfjob_localcluster.kind.cluster import KindCluster
from tfjob_localcluster.local.cluster import LocalCluster
from tfjob_operator import published
from tfjob_operator.client.results import results_in

pytestmark = pytest.mark.own_clusters
log = logging.getLogger(__name__)
TRAINING_TIMEOUT = 420
#: How long the previous operator's pods may take to go after an upgrade.
ROLLOUT_TIMEOUT = 120
#: Where the previous release is pushed in the test's registry, beside the current one.
PREVIOUS_ORGANISATION = "previous"


#: What a notebook would run with the released client: the job's state and results.
READ_BACK = """
import json, sys
from tfjob_operator.client import TFJobClient
tfjobs = TFJobClient(sys.argv[2], kubeconfig=sys.argv[1])
print(json.dumps({"state": tfjobs.get("digits").state, **tfjobs.results("digits")}))
"""


@dataclass(frozen=True)
class Release:
    """A release pushed to the test's registry."""

    registry: str
    version: str
    out: Path
    record: dict[str, Any]

    @property
    def chart(self) -> str:
        return published.chart_reference(self.registry)

    def image(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.record["images"][name]
        return found


@pytest.fixture(scope="module")
def released_client(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release's wheel installed with pip into a new environment: its Python."""
    venv = tmp_path_factory.mktemp("client") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # pip's cache would be the host's ~/.cache/pip: none.
    env = {**os.environ, "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    wheel = release.out / release.record["wheel"]["file"]
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"pip install {wheel.name}:\n{done.stdout}\n{done.stderr}"
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {p["name"].lower() for p in json.loads(listed.stdout)} - {"pip", "setuptools"}
    # The client alone: none of the controller's dependencies (aiohttp, orjson, ...).
    assert installed == {"tfjob-operator", "pyyaml", "jinja2", "markupsafe"}
    return python


def released(out: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((out / "release.json").read_text())
    return record


@dataclass(frozen=True)
class SigningKey:
    """A cosign key pair made for the test's release, and cosign's environment."""

    private: Path
    public: Path
    env: dict[str, str]

    def cosign(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(locate("cosign").cosign), *args],
            env=self.env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if check:
            assert done.returncode == 0, f"cosign {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done

    def verify(self, reference: str, *more: str) -> subprocess.CompletedProcess[str]:
        """`cosign verify` (or `verify-attestation` with `more`) as docs/releasing.md
        says, against the key; the caller reads the outcome."""
        command = "verify-attestation" if more else "verify"
        return self.cosign(
            command, f"--key={self.public}", "--insecure-ignore-tlog", "--allow-http-registry",
            *more, reference, check=False,
        )  # fmt: skip


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> SigningKey:
    """`cosign generate-key-pair`, its password in COSIGN_PASSWORD."""
    where = tmp_path_factory.mktemp("cosign")
    env = {**signing.environment(where), "COSIGN_PASSWORD": secrets.token_hex(16)}
    key = SigningKey(where / "cosign.key", where / "cosign.pub", env)
    made = subprocess.run(
        [str(locate("cosign").cosign), "generate-key-pair"],
        cwd=where, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert key.private.is_file()
    assert key.public.is_file()
    return key


@pytest.fixture(scope="module")
def release(
    oci_registry: OciRegistry, signing_key: SigningKey, tmp_path_factory: pytest.TempPathFactory
) -> Release:
    """This checkout released with the README's command, for this machine's platform,
    signed with the test's key."""
    out = tmp_path_factory.mktemp("release")
    command = [
        "make", "--no-print-directory", "release", f"REGISTRY={oci_registry.address}",
        f"PLATFORMS=linux/{host_architecture()}", "IMAGES=operator,trainer", f"DIST={out}",
        f"SIGN_KEY={signing_key.private}",
    ]  # fmt: skip
    env = {**os.environ, "COSIGN_PASSWORD": signing_key.env["COSIGN_PASSWORD"]}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    log.info("make release:\n%s", done.stdout[-3000:])
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    record = released(out)
    return Release(oci_registry.address, record["version"], out, record)


@pytest.fixture(scope="module")
def previous(oci_registry: OciRegistry, tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The previous release's operator and chart, built from its commit with the release
    tool of this checkout, under the registry's `previous` organisation."""
    pinned = parse_versions((ROOT / "release" / "previous.env").read_text())
    source = tmp_path_factory.mktemp("previous-source")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", pinned["PREVIOUS_COMMIT"]],
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout
    (source / "tree.tar").write_bytes(archive)
    with tarfile.open(source / "tree.tar") as tree:
        tree.extractall(source / "tree", filter="data")
    tree_version = (source / "tree" / "VERSION").read_text().strip()
    assert tree_version == pinned["PREVIOUS_VERSION"], "release/previous.env names another tree"
    out = tmp_path_factory.mktemp("previous-release")
    registry = f"{oci_registry.address}/{PREVIOUS_ORGANISATION}"
    command = [
        sys.executable, "-m", "release", "--source", str(source / "tree"), "--registry", registry,
        "--platforms", f"linux/{host_architecture()}", "--images", "operator", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return Release(registry, tree_version, out, released(out))


@dataclass
class Target:
    """A cluster the release is installed on."""

    name: str
    kubeconfig: str
    kubectl: Kubectl
    api: client.ApiClient


@pytest.fixture(scope="module")
def fresh_cluster(cluster_state_root: Path, oci_registry: OciRegistry) -> Iterator[Target]:
    """A new local cluster whose node has none of the project's images, and pulls from
    the session's registry."""
    cluster = LocalCluster(cluster_state_root / "release-cluster", say=log.info)
    cluster.start()
    try:
        cluster.use_registry(oci_registry.address)
        # The shell jobs' image, which is not the project's: no registry here serves it.
        cluster.load_images([BUSYBOX])
        assert cluster.runtime is not None
        names = cluster.runtime.images()
        assert not [n for n in names if published.OPERATOR in n or published.TRAINER in n]
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        yield Target(
            "local", str(cluster.kubeconfig), Kubectl(cluster.kubectl, cluster.kubeconfig), api
        )
        api.close()
    finally:
        cluster.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`target`: a fresh local cluster, and the session's kind cluster (`--backends`)."""
    if "target" in metafunc.fixturenames:
        metafunc.parametrize("target", backend_params(metafunc.config), indirect=True)


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "local":
        yield request.getfixturevalue("fresh_cluster")
        return
    cluster: KindCluster = request.getfixturevalue("kind_cluster")
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    kubectl = Kubectl(locate("kubectl").kubectl, cluster.kubeconfig)
    yield Target("kind", str(cluster.kubeconfig), kubectl, api)
    api.close()


def install(target: Target, chart: str, version: str, *extra: str) -> None:
    """`helm install` (or upgrade) of the chart from the registry, as the README says."""
    target.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-",
        input=helm(None, "show", "crds", chart, "--version", version, "--plain-http"),
    )  # fmt: skip
    helm(
        target.kubeconfig, "upgrade", "--install", RELEASE, chart, "--version", version,
        "--namespace", NAMESPACE, "--create-namespace", "--plain-http", *extra,
    )  # fmt: skip
    wait_available(target.kubeconfig, NAMESPACE, timeout=300)


def uninstall(target: Target) -> None:
    helm(target.kubeconfig, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")


def assert_runs_pinned(target: Target, pinned: str) -> None:
    """The operator's pods run `pinned` (registry/repository:tag@digest), pulled from the
    registry: `kubectl get pods -n tfjob-system -o jsonpath='{..image}'` shows it (and,
    from the pods' status, the image's ID, never a local name), `{..imageID}` the
    registry's name with the digest."""
    core = client.CoreV1Api(target.api)
    # After an upgrade the previous operator's pods terminate for a while: wait them out.
    running = wait_until(
        lambda: core.list_namespaced_pod(NAMESPACE).items,
        ROLLOUT_TIMEOUT,
        lambda _: (
            f"every pod in {NAMESPACE} to run {pinned}: "
            + target.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide").stdout
        ),
        until=lambda pods: {p.spec.containers[0].image for p in pods} == {pinned},
        interval=1,
    )
    printed = target.kubectl("get", "pods", "-n", NAMESPACE, "-o", "jsonpath={..image}").stdout
    log.info("kubectl get pods -n %s -o jsonpath='{..image}': %s", NAMESPACE, printed)
    for image in printed.split():
        assert image == pinned or re.fullmatch(r"sha256:[0-9a-f]{64}", image), printed
    repository = pinned.split("@")[0].rsplit(":", 1)[0]
    for pod in running:
        (status,) = pod.status.container_statuses
        assert status.image_id.startswith(f"{repository}@sha256:"), status.image_id


def trainer_job(name: str, image: str, epochs: int | None = None) -> dict[str, Any]:
    """examples/digits-mwms.yaml under `name`, its trainer image `image`."""
    job: dict[str, Any] = copy.deepcopy(documents("digits-mwms.yaml")[-1])
    job["metadata"]["name"] = name
    for spec in job["spec"]["tfReplicaSpecs"].values():
        container = spec["template"]["spec"]["containers"][0]
        container["image"] = image
        if epochs is not None:
            container["args"] += ["--epochs", str(epochs)]
    return job


def job_namespace(target: Target, name: str) -> TFJobs:
    """A new namespace of `target` whose default ServiceAccount exists, with TFJob helpers."""
    core = client.CoreV1Api(target.api)
    core.create_namespace({"metadata": {"name": name}})
    jobs = TFJobs(target.kubeconfig, name)
    jobs.poll(
        name,
        lambda: core.list_namespaced_service_account(name).items,
        bool,
        "the namespace's default ServiceAccount",
        30,
    )
    return jobs


@pytest.fixture
def jobs(target: Target, request: pytest.FixtureRequest) -> Iterator[TFJobs]:
    tfjobs = job_namespace(target, namespace_name(request.node.name))
    yield tfjobs
    tfjobs.delete_namespace()


def pulled_digest(pod: dict[str, Any]) -> str:
    """The digest of the image the kubelet ran the pod's tensorflow container from."""
    (status,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == "tensorflow"]
    return str(status["imageID"]).rsplit("@", 1)[1]


def registry_index(address: str, repository: str, tag: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{address}/v2/{repository}/manifests/{tag}",
        headers={"Accept": "application/vnd.oci.image.index.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        index: dict[str, Any] = json.load(reply)
        index["digest"] = reply.headers["Docker-Content-Digest"]
    return index


def test_the_release_pushes_its_images_by_digest_and_its_chart(release: Release) -> None:
    for name, repository, tag in (
        ("operator", published.OPERATOR, release.version),
        ("trainer", published.TRAINER, release.version),
    ):
        index = registry_index(release.registry, repository, tag)
        assert index["digest"] == release.image(name)["digest"]
        assert [m["platform"]["architecture"] for m in index["manifests"]] == [host_architecture()]
        (platform,) = release.image(name)["platforms"]
        assert platform["check"]  # the image ran on its platform before it was pushed
    chart = yaml.safe_load(
        helm(None, "show", "chart", release.chart, "--version", release.version, "--plain-http")
    )
    assert (chart["version"], chart["appVersion"]) == (release.version, release.version)
    values = yaml.safe_load(
        helm(None, "show", "values", release.chart, "--version", release.version, "--plain-http")
    )
    assert values["image"]["registry"] == release.registry
    assert values["image"]["digest"] == release.image("operator")["digest"]
    # The trainer image TensorBoards run by default, pinned too; Artifact Hub's list of
    # images names each by digest.
    assert values["tensorboard"]["digest"] == release.image("trainer")["digest"]
    listed = yaml.safe_load(chart["annotations"]["artifacthub.io/images"])
    assert listed == [
        {
            "name": name,
            "image": f"{release.image(name)['reference']}@{release.image(name)['digest']}",
        }
        for name in ("operator", "trainer")
    ]
    assert chart["annotations"]["artifacthub.io/prerelease"] == str("-" in release.version).lower()
    readme = helm(
        None, "show", "readme", release.chart, "--version", release.version, "--plain-http"
    )
    assert "| `kubeflow.installCRD` | `true` |" in readme
    assert release.record["chart"]["digest"].startswith("sha256:")
    install_yaml = list(yaml.safe_load_all((release.out / "install.yaml").read_text()))
    assert [o["kind"] for o in install_yaml[:2]] == ["Namespace", "CustomResourceDefinition"]
    crds = list(yaml.safe_load_all((release.out / "crds.yaml").read_text()))
    assert [c["metadata"]["name"] for c in crds] == ["tfjobs.tfjob.dev"]
    assert (release.out / "release-notes.md").read_text().strip()
    package = release.out / release.record["wheel"]["file"]
    # Its version as Python packaging writes it: 0.2.0-dev is 0.2.0.dev0.
    assert package.name == f"tfjob_operator-{Version(release.version)}-py3-none-any.whl"
    assert release.record["wheel"]["digest"] == wheel_digest(package)
    # What PyPI checks of a wheel's metadata, and the commands it installs.
    with zipfile.ZipFile(package) as wheel:
        info = next(n.rsplit("/", 1)[0] for n in wheel.namelist() if n.endswith("/METADATA"))
        metadata = Metadata.from_email(wheel.read(f"{info}/METADATA"), validate=True)
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert (metadata.name, metadata.description_content_type) == ("tfjob-operator", "text/markdown")
    assert metadata.description
    assert "pip install tfjob-operator" in metadata.description
    assert metadata.project_urls
    assert "Documentation" in metadata.project_urls
    for command in ("tfjob-operator", "kubectl-tfjob", "kubectl_complete-tfjob"):
        assert f"{command} = tfjob_operator.cli:" in entry_points


def referrers(address: str, repository: str, digest: str) -> dict[str, str]:
    """What is attached to `digest`, as OCI 1.1 defines it: the registry's referrers API,
    or where it has none (CNCF Distribution 3.1) the fallback tag `sha256-<hex>` that
    clients keep. Each referrer's digest and the predicate type of its Sigstore bundle;
    each names `digest` as its subject."""
    index_type = "application/vnd.oci.image.index.v1+json"
    api = urllib.request.Request(
        f"http://{address}/v2/{repository}/referrers/{digest}", headers={"Accept": index_type}
    )
    try:
        with urllib.request.urlopen(api, timeout=10) as reply:
            listed = json.load(reply)["manifests"]
    except urllib.error.HTTPError as missing:
        if missing.code != 404:
            raise
        fallback = digest.replace(":", "-")
        listed = registry_index(address, repository, fallback)["manifests"]
    found = {}
    for entry in listed:
        assert entry["artifactType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
        request = urllib.request.Request(
            f"http://{address}/v2/{repository}/manifests/{entry['digest']}",
            headers={"Accept": entry["mediaType"]},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            manifest = json.load(reply)
        assert manifest["subject"]["digest"] == digest
        found[entry["digest"]] = manifest["annotations"]["dev.sigstore.bundle.predicateType"]
    return found


def statements(verified: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The in-toto statements `cosign verify-attestation` printed, one envelope a line."""
    assert verified.returncode == 0, verified.stderr
    envelopes = [json.loads(line) for line in verified.stdout.splitlines() if line.strip()]
    return [json.loads(base64.b64decode(e["payload"])) for e in envelopes]


def tamper(address: str, repository: str, tag: str) -> str:
    """Pushes the index of `tag`, changed by one annotation, under `tag`-tampered: the
    same images under a digest the release never signed. Returns that tag."""
    index = registry_index(address, repository, tag)
    index.pop("digest")
    index["annotations"] = {"org.opencontainers.image.description": "tampered"}
    tampered = f"{tag}-tampered"
    request = urllib.request.Request(
        f"http://{address}/v2/{repository}/manifests/{tampered}",
        data=json.dumps(index).encode(),
        headers={"Content-Type": index["mediaType"]},
        method="PUT",
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 201
    return tampered


#: Packages each image's SBOM must list one of: what the image is for (the CPU trainer's
#: TensorFlow is tensorflow-cpu on x86_64, tensorflow elsewhere).
SBOM_PACKAGES = {"operator": {"aiohttp"}, "trainer": {"tensorflow-cpu", "tensorflow"}}


def test_the_release_is_signed_with_its_sboms_and_provenance_attached(
    release: Release, signing_key: SigningKey
) -> None:
    """What docs/releasing.md tells a user to run verifies each image (its index and its
    platforms' images) and the chart against the release's key, and the SBOM and
    provenance attestations; the registry lists them as referrers; an image whose digest
    the release did not sign fails."""
    signed = release.record["signatures"]
    assert signed["signer"] == "key"
    assert (release.out / signed["public_key"]).read_text() == signing_key.public.read_text()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    for name, repository in (("operator", published.OPERATOR), ("trainer", published.TRAINER)):
        image = release.image(name)
        index = registry_index(release.registry, repository, release.version)
        platforms = [m["digest"] for m in index["manifests"]]
        for digest in (image["digest"], *platforms):
            verified = signing_key.verify(f"{image['reference']}@{digest}")
            assert verified.returncode == 0, verified.stderr
        # By tag, as a user would: cosign resolves it to the signed index.
        by_tag = signing_key.verify(image["reference"])
        assert by_tag.returncode == 0, by_tag.stderr
        pinned = f"{image['reference']}@{image['digest']}"
        (sbom,) = statements(signing_key.verify(pinned, "--type=spdxjson"))
        assert sbom["predicateType"] == "https://spdx.dev/Document"
        assert sbom["subject"][0]["digest"]["sha256"] == image["digest"].removeprefix("sha256:")
        packages = {p["name"] for p in sbom["predicate"]["packages"]}
        assert SBOM_PACKAGES[name] & packages, sorted(packages)[:40]
        (made,) = statements(signing_key.verify(pinned, "--type=slsaprovenance1"))
        definition = made["predicate"]["buildDefinition"]
        assert definition["externalParameters"]["version"] == release.version
        assert definition["resolvedDependencies"][0]["digest"] == {"gitCommit": commit}
        attached = referrers(release.registry, repository, image["digest"])
        log.info("referrers of %s: %s", pinned, json.dumps(attached))
        assert sorted(attached.values()) == [
            "https://sigstore.dev/cosign/sign/v1",  # its signature
            "https://slsa.dev/provenance/v1",
            "https://spdx.dev/Document",  # one SBOM per platform: one here
        ]
        for digest in platforms:
            assert list(referrers(release.registry, repository, digest).values()) == [
                "https://sigstore.dev/cosign/sign/v1"
            ]
        # The same images under a digest the release never signed: refused.
        tampered = tamper(release.registry, repository, release.version)
        refused = signing_key.verify(f"{image['reference'].rsplit(':', 1)[0]}:{tampered}")
        assert refused.returncode != 0
        log.info("cosign verify of a tampered %s: %s", name, refused.stderr.strip()[-300:])
    chart = f"{release.chart.removeprefix('oci://')}:{release.version}"
    verified = signing_key.verify(chart)
    assert verified.returncode == 0, verified.stderr
    for sbom_file in (release.out / "sbom").iterdir():
        assert json.loads(sbom_file.read_text())["spdxVersion"].startswith("SPDX-")


def test_helm_install_from_the_registry_trains_with_pulled_images(
    release: Release, target: Target, jobs: TFJobs, released_client: Path
) -> None:
    install(target, release.chart, release.version)
    try:
        operator = release.image("operator")
        assert_runs_pinned(target, f"{operator['reference']}@{operator['digest']}")
        trainer = release.image("trainer")
        jobs.create(trainer_job("digits", trainer["reference"]))
        job = jobs.wait_state("digits", "Succeeded", TRAINING_TIMEOUT)
        assert job["status"]["restartCount"] == 0
        pods = jobs.pods("digits")
        # Pulled from the registry: the node ran exactly the pushed image.
        platform_digests = {
            m["digest"]
            for m in registry_index(release.registry, published.TRAINER, release.version)[
                "manifests"
            ]
        }
        assert {pulled_digest(p) for p in pods} <= platform_digests | {trainer["digest"]}
        log_text = jobs.log("digits-worker-0", "tensorflow")
        (result,) = results_in(log_text.splitlines())
        assert result["accuracy"] >= result["accuracy_threshold"]
        # The released client reads the same job and results from outside the cluster.
        read = subprocess.run(
            [str(released_client), "-c", READ_BACK, target.kubeconfig, jobs.namespace],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert read.returncode == 0, read.stderr
        read_back = json.loads(read.stdout)
        assert (read_back["state"], read_back["worker-0"]) == ("Succeeded", result)
        # kubectl runs the released wheel's plugin from PATH.
        path = f"{released_client.parent}:{os.environ['PATH']}"
        listed = subprocess.run(
            [str(target.kubectl.path), "tfjob", "get", "digits", "-n", jobs.namespace,
             "--kubeconfig", target.kubeconfig],
            env={**os.environ, "PATH": path}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines()[1].split()[:2] == ["digits", "Succeeded"]
    finally:
        uninstall(target)


def test_kubectl_apply_of_install_yaml_runs_the_pinned_operator(
    release: Release, fresh_cluster: Target
) -> None:
    manifest = str(release.out / "install.yaml")
    fresh_cluster.kubectl("apply", "--server-side", "-f", manifest)
    try:
        wait_available(fresh_cluster.kubeconfig, NAMESPACE, timeout=300)
        operator = release.image("operator")
        assert_runs_pinned(fresh_cluster, f"{operator['reference']}@{operator['digest']}")
    finally:
        fresh_cluster.kubectl("delete", "-f", manifest, "--wait=true", "--timeout=120s")


def test_upgrade_from_the_previous_release_keeps_running_jobs(
    release: Release, previous: Release, fresh_cluster: Target
) -> None:
    """The previous operator runs a training job and a short one; the upgrade (CRDs, then
    `helm upgrade`) replaces the operator while they run: neither is restarted, no pod is
    created twice, the status the old operator wrote is kept, and both succeed."""
    target = fresh_cluster
    jobs = job_namespace(target, namespace_name("upgrade"))
    namespace = jobs.namespace
    install(target, previous.chart, previous.version)
    old = previous.image("operator")
    assert_runs_pinned(target, f"{old['reference']}@{old['digest']}")
    with PodCreations(target.kubeconfig, namespace, "train") as creations:
        jobs.create(trainer_job("train", release.image("trainer")["reference"], epochs=30))
        jobs.wait_for(
            "train",
            lambda j: (find_condition(j, "Running") or {}).get("status") == "True",
            "Running",
            300,
        )
        # Made once the trainer runs (its first pull can take longer than this job's 45 s),
        # so that it still runs when the upgrade comes.
        jobs.create(tfjob("short", {"Worker": shell_replica("sleep 45")}))
        jobs.wait_for(
            "short",
            lambda j: (find_condition(j, "Running") or {}).get("status") == "True",
            "Running",
            120,
        )
        before = {name: jobs.get(name) for name in ("train", "short")}
        pods_before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in jobs.pods("train")}

        install(target, release.chart, release.version)
        operator = release.image("operator")
        assert_runs_pinned(target, f"{operator['reference']}@{operator['digest']}")

        for name in ("train", "short"):
            job = jobs.wait_state(name, "Succeeded", TRAINING_TIMEOUT)
            assert job["status"]["restartCount"] == 0, jobs.describe(name)
            # What the previous operator wrote is kept: the same Created condition.
            assert condition(job, "Created") == condition(before[name], "Created")
            assert job["status"]["startTime"] == before[name]["status"]["startTime"]
        # The pods left are those from before the upgrade (cleanPodPolicy Running may have
        # deleted a worker still running when the chief succeeded), none replaced.
        finished = {p["metadata"]["name"]: p["metadata"]["uid"] for p in jobs.pods("train")}
        assert set(finished.items()) <= set(pods_before.items())
    assert creations.duplicates() == []
    assert len(creations.added) == 2  # the two workers, once each
    # Reported once: one Event, not counted up by a repeat (events.py aggregates repeats).
    succeeded = [
        e.get("count") or 1 for e in jobs.events("train") if e["reason"] == "TFJobSucceeded"
    ]
    assert succeeded == [1]
    # The new operator runs a job of its own.
    jobs.create(tfjob("after", {"Worker": shell_replica("true")}))
    jobs.wait_state("after", "Succeeded", 120)
    uninstall(target)
    jobs.delete_namespace()
