# The noderollout worker (and starter) image: static Go binaries on an empty base holding only
# CA certificates and a non-root user, the contents of a "distroless static nonroot" image.
#   docker build -t noderollout:dev --build-arg VERSION=$(git describe --tags --always) --build-arg COMMIT=$(git rev-parse HEAD) .
# The image runs as UID/GID 65532 with no shell; deploy/base runs it with a read-only root
# file system.

FROM golang:1.27 AS build
WORKDIR /src
# Modules first, so source edits reuse the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Stamped into the binaries (starter version, worker --version, noderollout_build_info).
ARG VERSION=dev
ARG COMMIT=unknown
# The one build command (flags and all) lives in this script; deploy/deploy_test.go runs it.
RUN sh dev/build-image-binaries.sh /out
# The runtime's root file system: CA roots for Temporal Cloud TLS, and a nonroot user whose
# numeric ID lets Kubernetes verify runAsNonRoot.
RUN mkdir -p /rootfs/etc/ssl/certs /rootfs/tmp \
 && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >/rootfs/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' >/rootfs/etc/group \
 && chmod 1777 /rootfs/tmp

FROM scratch
COPY --from=build /rootfs/ /
COPY --from=build /out/worker /out/starter /usr/local/bin/
USER 65532:65532
# /metrics, /healthz and /readyz, when started with --metrics-listen 0.0.0.0:9090.
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/worker"]
