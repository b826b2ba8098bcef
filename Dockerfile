# Multi-stage build of a static bridge binary on a distroless base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.gitCommit=${COMMIT}" \
      -o /out/v2bridge ./cmd/bridge

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/v2bridge /usr/local/bin/v2bridge
USER nonroot:nonroot
EXPOSE 2379
ENTRYPOINT ["/usr/local/bin/v2bridge"]
# Listen on all interfaces inside the container; point at your v3 cluster.
CMD ["--listen-client-urls", "http://0.0.0.0:2379", "--advertise-client-urls", "http://127.0.0.1:2379"]
