# sg: one static binary, every service as a subcommand. No base image is pulled
# (no registry): build the binary first, then the image FROM scratch.
#
#   CGO_ENABLED=0 go build -trimpath -o bin/sg ./cmd/sg
#   docker build -t sg:local .
FROM scratch
COPY bin/sg /sg
# Credentials (sg auth init) are mounted, never baked in: see docker-compose.yml.
# JetStream storage of `sg nats`, and the temp dir of `sg run`.
ENV TMPDIR=/data
VOLUME ["/data"]
EXPOSE 4222
ENTRYPOINT ["/sg"]
CMD ["--help"]
