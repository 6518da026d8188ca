# The control-plane image: the six function binaries (mapi-submit,
# mapi-tasks, mapi-push-events, mapi-reconcile-tick, mapi-meter, mapi-admin)
# in one image.
#
# One image, not six: the binaries share almost all their code (the shared/
# crates), so one build compiles it once, the services share every layer, and
# a deploy rolls out one digest. Each Cloud Run service picks its binary with
# its `command` (terraform), e.g. ["/usr/local/bin/mapi-meter"]; the
# ENTRYPOINT below is only the default, mapi-submit.
#
# Rules:
# - The Rust image is the workspace's `rust-version` (Cargo.toml) on the
#   runtime's Debian (bookworm): a binary linked on a newer glibc would not
#   start on distroless cc-debian12.
# - The binaries link only glibc, libm and libgcc_s (SQLite is compiled in,
#   TLS is rustls over aws-lc-rs, built statically): distroless `cc` has those
#   and the CA certificates, and no shell.
# - Dependencies are one layer (cargo-chef cook) that changes only when a
#   manifest or Cargo.lock does; the chef and planner stages are the same in
#   worker.Dockerfile, so one builder runs them once for both.
# - The process runs as distroless's `nonroot` (65532) and listens on
#   $PORT, which Cloud Run sets (8080 when unset).
# - MAPI_GIT_COMMIT and MAPI_BUILD_TIME (build args) stamp the binaries.

FROM rust:1.95.0-bookworm AS chef
RUN cargo install cargo-chef --locked --version 0.1.78
WORKDIR /src
# Stripped binaries; set before the cook so dependencies and binaries are
# built with one profile.
ENV CARGO_PROFILE_RELEASE_STRIP=symbols CARGO_TERM_COLOR=never

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=planner /src/recipe.json recipe.json
# The workspace's build settings (.cargo/config.toml) apply to the cook too.
COPY .cargo/ .cargo/
RUN cargo chef cook --release --locked --recipe-path recipe.json \
      -p mapi-submit -p mapi-tasks -p mapi-push-events -p mapi-reconcile-tick -p mapi-meter -p mapi-admin
COPY . .
# The build's identity (deploy.sh passes both): compiled into every binary,
# shown by /build-info and on each log line's labels. Declared after the
# cook, so a new commit rebuilds only the workspace's own crates.
ARG MAPI_GIT_COMMIT=""
ARG MAPI_BUILD_TIME=""
RUN cargo build --release --locked \
      -p mapi-submit -p mapi-tasks -p mapi-push-events -p mapi-reconcile-tick -p mapi-meter -p mapi-admin \
 && mkdir /out \
 && cp target/release/mapi-submit target/release/mapi-tasks target/release/mapi-push-events target/release/mapi-reconcile-tick \
       target/release/mapi-meter target/release/mapi-admin /out/

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/ /usr/local/bin/
# distroless's `nonroot`, by number so any runtime resolves it.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/mapi-submit"]
