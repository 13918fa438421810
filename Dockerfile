# Baton's container image: the release binary on a minimal glibc runtime, as a
# non-root user. RocksDB links libstdc++ dynamically, so the runtime is Debian
# slim (glibc, libstdc++), not a static or musl image.
#
# The build stage's RUN lines are also run, one by one, by .ci/fresh-check in a
# clean Debian root, and the binary is then started in a second clean root holding
# only what the runtime stage has: keep each RUN on one line.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
ENV CARGO_TARGET_DIR=/src/target
COPY . .
# libclang (bindgen, for librocksdb-sys) and a C++ compiler, checked and installed by
# the same script a developer's first `make run` uses.
RUN .ci/setup build
RUN cargo build --release --locked --bin baton && install -m 0755 "$CARGO_TARGET_DIR/release/baton" /usr/local/bin/baton

FROM debian:bookworm-slim AS runtime
RUN groupadd --system --gid 10001 baton && useradd --system --uid 10001 --gid baton --home-dir /var/lib/baton --no-create-home --shell /usr/sbin/nologin baton && install -d -o baton -g baton -m 0700 /var/lib/baton
COPY --from=build /usr/local/bin/baton /usr/local/bin/baton
ENV BATON_LISTEN=0.0.0.0:7878 \
    BATON_RAFT_LISTEN=0.0.0.0:7879 \
    BATON_DATA_DIR=/var/lib/baton
VOLUME ["/var/lib/baton"]
EXPOSE 7878 7879
USER 10001:10001
WORKDIR /var/lib/baton
# No shell or curl in the image: the binary probes itself.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/baton", "probe", "http://127.0.0.1:7878/readyz"]
ENTRYPOINT ["/usr/local/bin/baton"]
CMD ["serve"]
