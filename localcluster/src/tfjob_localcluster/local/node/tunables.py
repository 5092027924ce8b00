"""The kernel settings the kubelet insists on, kept private to the node.

At start the kubelet sets six machine-wide sysctls to the values it wants
(`setupKernelTunables` in its container manager) and fails if it cannot. None of them
is namespaced: on a shared machine the kubelet would change the host's kernel (kind's
nodes do). The node's init gives the kubelet a private copy of each setting that
differs: a file holding the host's current value, bind-mounted over the `/proc/sys`
entry in the node's mount namespace. The kubelet reads and writes its copy; the host's
kernel keeps its own value.
"""

from __future__ import annotations

from pathlib import Path

from tfjob_localcluster.local.node.mounts import bind_file

# The sysctls and values of the kubelet's desiredState, Kubernetes v1.34.
KUBELET_TUNABLES = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}


def differing(proc_sys: Path = Path("/proc/sys")) -> dict[str, int]:
    """The tunables whose current value is not the kubelet's, with that current value."""
    found = {}
    for name, wanted in KUBELET_TUNABLES.items():
        current = int((proc_sys / name).read_text().split()[0])
        if current != wanted:
            found[name] = current
    return found


def shadow(directory: Path, proc_sys: Path = Path("/proc/sys")) -> list[str]:
    """Binds a private copy over each differing tunable; returns their names."""
    names = differing(proc_sys)
    directory.mkdir(parents=True, exist_ok=True)
    for name, current in names.items():
        copy = directory / name.replace("/", ".")
        copy.write_text(f"{current}\n")
        bind_file(str(copy), str(proc_sys / name))
    return sorted(names)
