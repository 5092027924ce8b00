"""The configuration files of the node's components, built as data from NodeConfig.

Each function returns what is written to disk (a dict serialized as TOML, YAML or JSON),
so the choices are readable in one place and testable without starting anything.
"""

from __future__ import annotations

from typing import Any

from tfjob_localcluster.local.node.config import (
    CNI_BIN_DIR,
    CONTAINERD_SOCKET,
    KUBELET_DIR,
    NodeConfig,
)

CRI = "io.containerd.grpc.v1.cri"
#: Below the node's state dir: containerd's registry configuration (`config_path`).
REGISTRY_HOSTS_DIR = "certs.d"
CNI_NETWORK = "tfjob-local"
BRIDGE = "cni0"


def containerd_config(config: NodeConfig) -> dict[str, Any]:
    """containerd (Debian's 1.6) serving CRI to the kubelet, pods networked by CNI."""
    runc_options: dict[str, Any] = {"SystemdCgroup": False}
    if config.runtime_binary != "runc":
        runc_options["BinaryName"] = config.runtime_binary
    return {
        "version": 2,
        "root": "/var/lib/containerd",
        "state": "/run/containerd",
        "grpc": {"address": CONTAINERD_SOCKET},
        "plugins": {
            # Its default, /opt/containerd, would be created on the host.
            "io.containerd.internal.v1.opt": {"path": "/var/lib/containerd/opt"},
            CRI: {
                "sandbox_image": config.sandbox_image,
                "containerd": {
                    "snapshotter": "overlayfs",
                    "default_runtime_name": "runc",
                    "runtimes": {
                        "runc": {"runtime_type": "io.containerd.runc.v2", "options": runc_options}
                    },
                },
                "cni": {"bin_dir": CNI_BIN_DIR, "conf_dir": str(config.path("cni"))},
                # One directory per registry, with its hosts.toml (registry_hosts), read at
                # every pull: a registry can be added while the node runs.
                "registry": {"config_path": str(config.path(REGISTRY_HOSTS_DIR))},
            },
        },
    }


def registry_hosts(address: str) -> dict[str, Any]:
    """containerd's hosts.toml for a registry served over plain HTTP at `address`
    (host:port), such as the OCI registry on the loopback (images/registry.py)."""
    return {
        "server": f"http://{address}",
        "host": {f"http://{address}": {"capabilities": ["pull", "resolve"]}},
    }


def cni_conflist(pod_subnet: str, name: str = CNI_NETWORK) -> dict[str, Any]:
    """A bridge with host-local addresses from the node's pod subnet; hostPort by portmap.
    (The local node's network, and the default CNI of the kind node image.)"""
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                # A pod reaching itself through its Service's address.
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(config: NodeConfig) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": config.cgroup_root,
        # Machines of this project's kind have cgroup v1 only, and no swap accounting.
        "failCgroupV1": False,
        "failSwapOn": False,
        "staticPodPath": "",
        "clusterDNS": [config.cluster_dns],
        "clusterDomain": config.cluster_domain,
        "resolvConf": str(config.path("resolv.conf")),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": config.client_ca},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": config.serving_cert,
        "tlsPrivateKeyFile": config.serving_key,
        # The images were imported, not pulled: they could not be pulled again.
        "imageGCHighThresholdPercent": 100,
        "serializeImagePulls": False,
        # The host's disk is shared with everything else on the machine: no disk-pressure
        # evictions because of files that are not the cluster's.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%",
        },
        "podLogsDir": "/var/log/pods",
        # emptyDir usage (and with it sizeLimit eviction) measured every 10 s, not 60 s.
        "volumeStatsAggPeriod": "10s",
        # Its default, under /usr/libexec, would be created on the host.
        "volumePluginDir": f"{KUBELET_DIR}/volume-plugins",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
    }


def kube_proxy_config(config: NodeConfig) -> dict[str, Any]:
    """iptables mode; the node's network namespace is its own, so its rules are too."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": config.kube_proxy_kubeconfig},
        "mode": "iptables",
        "clusterCIDR": config.pod_subnet,
        "hostnameOverride": config.node_name,
        "bindAddress": config.node_ip,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # The connection-tracking table size is a machine-wide setting: leave it alone.
        "conntrack": {"maxPerCore": 0},
    }


def resolv_conf(config: NodeConfig) -> str:
    """The node's resolver for pods with dnsPolicy Default (CoreDNS's upstream).

    Nothing here reaches outside names, so the host's end of the link is named: a query
    gets an immediate refusal instead of a timeout.
    """
    return f"nameserver {config.gateway}\n"


def kubelet_args(config: NodeConfig, config_file: str) -> list[str]:
    return [
        config.kubelet,
        f"--config={config_file}",
        f"--kubeconfig={config.kubelet_kubeconfig}",
        f"--hostname-override={config.node_name}",
        f"--node-ip={config.node_ip}",
        f"--root-dir={KUBELET_DIR}",
        "--v=1",
    ]
