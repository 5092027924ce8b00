"""What a cluster takes of the host and gives back: processes, ports, network links,
cgroups, Debian packages, state directories, and a snapshot to check that nothing is left."""
