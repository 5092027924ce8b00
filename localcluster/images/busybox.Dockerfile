# busybox (Debian's busybox-static) FROM scratch: a small image with a shell, for pods
# that run shell commands in the tests. The base is a build argument, as in the
# project's Dockerfiles.
ARG BASE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d
FROM ${BASE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends busybox-static

FROM scratch
COPY --from=build /bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
CMD ["sh"]
