# Multi-stage build of Sluice's two binaries. SQLite is linked through cgo,
# so the build stage has a C toolchain and the runtime stage is glibc-based.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY sdk/go.mod sdk/go.sum ./sdk/
RUN go mod download
COPY . .
RUN CGO_ENABLED=1 GOWORK=off go build -trimpath -ldflags="-s -w" -o /out/sluice-server ./cmd/server \
 && CGO_ENABLED=1 GOWORK=off go build -trimpath -ldflags="-s -w" -o /out/sluice-worker ./cmd/worker

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home /data --uid 10001 sluice \
 && mkdir -p /data && chown sluice /data
COPY --from=build /out/sluice-server /out/sluice-worker /usr/local/bin/
USER sluice
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080
CMD ["sluice-server", "--addr", "0.0.0.0:8080", "--data", "/data"]
