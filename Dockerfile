# joiner's container image: one static binary (musl), non-root, on a distroless base with no
# shell or package manager. Not built by the test suite (no Docker engine there);
# crates/cli/tests/dockerfile.rs checks that it builds the binary the workspace defines.
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg JOINER_COMMIT=$(git rev-parse --short=12 HEAD) -t REGISTRY/joiner:TAG .
#
# `joiner --version` prints the version and JOINER_COMMIT.
#
# Both base images are pinned by the digest of their multi-architecture index, so a build
# today and a build next year start from the same bytes. To move to newer ones, read the
# tag's current digest and replace it here (the tag stays beside it for people):
#   docker buildx imagetools inspect rust:1.95-bookworm --format '{{json .Manifest.Digest}}'
#   docker buildx imagetools inspect gcr.io/distroless/static-debian12:nonroot --format '{{json .Manifest.Digest}}'

FROM rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1 AS build
ARG TARGETARCH
ARG JOINER_COMMIT=unknown
# musl for a static binary; cmake and clang build aws-lc (the TLS crypto of kube and the AWS SDK).
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools cmake clang \
 && rm -rf /var/lib/apt/lists/*
RUN case "$TARGETARCH" in \
      amd64) echo x86_64-unknown-linux-musl > /target ;; \
      arm64) echo aarch64-unknown-linux-musl > /target ;; \
      *) echo "unsupported architecture $TARGETARCH" >&2; exit 1 ;; \
    esac \
 && rustup target add "$(cat /target)"
WORKDIR /src
COPY . .
ENV JOINER_COMMIT=$JOINER_COMMIT
RUN cargo build --release --locked -p joiner --bin joiner --target "$(cat /target)" \
 && cp "target/$(cat /target)/release/joiner" /joiner

FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
COPY --from=build /joiner /usr/local/bin/joiner
# The chart's pod securityContext runs as this user too (runAsUser 65532).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/joiner"]
CMD ["controller"]
