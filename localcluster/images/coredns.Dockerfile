# CoreDNS (registry.k8s.io/coredns/coredns), built from its Go module by
# hack/build-binaries.sh; the build context is that binary's directory.
FROM scratch
COPY coredns /coredns
EXPOSE 53 53/udp
ENTRYPOINT ["/coredns"]
