# v2bridge: the etcd v2 keys and watch API served from an etcd v3 cluster.
#
# The image needs its backend; it refuses to start without one:
#
#   docker run -p 2379:2379 v2bridge --endpoints https://m1:2379,https://m2:2379,https://m3:2379 \
#       --cacert /certs/ca.pem --cert /certs/client.pem --key /certs/client-key.pem
#   docker run -e V2BRIDGE_ENDPOINTS=http://m1:2379 -p 2379:2379 v2bridge
#
# To try it on a private embedded etcd instead, opt in (flag or variable; in
# this image the variable V2BRIDGE_EMBEDDED=false outranks a config file) and
# keep the data on a volume:
#
#   docker run -v v2bridge-data:/var/lib/v2bridge -e V2BRIDGE_EMBEDDED=true -p 2379:2379 v2bridge
#
# It listens on 0.0.0.0:2379. With no --advertise-client-urls it advertises
# http://<container host name>:2379 in /v2/members and /v2/machines (never a
# wildcard or 127.0.0.1, which would send v2 clients that sync their endpoint
# list to themselves); set V2BRIDGE_ADVERTISE_CLIENT_URLS to the address your
# clients use. With --network host next to flannel, that is usually
# http://127.0.0.1:<port>; see contrib/kubernetes/.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.gitCommit=${COMMIT}" \
      -o /out/v2bridge ./cmd/bridge \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/v2bridge /usr/local/bin/v2bridge
# The embedded etcd's data directory, owned by the image's nonroot user.
COPY --from=build --chown=65532:65532 /out/data /var/lib/v2bridge
ENV V2BRIDGE_EMBEDDED=false \
    V2BRIDGE_LISTEN_CLIENT_URLS=http://0.0.0.0:2379 \
    V2BRIDGE_DATA_DIR=/var/lib/v2bridge
VOLUME ["/var/lib/v2bridge"]
USER nonroot:nonroot
EXPOSE 2379
ENTRYPOINT ["/usr/local/bin/v2bridge"]
