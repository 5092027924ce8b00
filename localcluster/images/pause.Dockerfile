# The sandbox image of every pod (registry.k8s.io/pause), built from
# localcluster/nodetools/cmd/pause where no registry can be reached. The build context is the
# directory hack/build-binaries.sh built the node tools into.
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
