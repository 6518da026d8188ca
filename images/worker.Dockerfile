# A worker image: mapi-worker, which every task of a Cloud Run Job runs with
# no arguments (the supervisor: bootstrap, method, signed events on stdout),
# for one base of the Job inventory. Build it once per base:
#   docker build -f images/worker.Dockerfile --build-arg BASE=base-ml .
#
# Rules:
# - BASE is one of the bases the inventory names (shared/cloudrun: the
#   values of MAPI_CLOUDRUN_PLUGIN_BASES and MAPI_CLOUDRUN_DEFAULT_BASE):
#   base-bayes, base-ml, base-forecast, base-dl. Job mapi-{env}-{base}-{class}
#   runs image worker-{base}.
# - Every method is compiled into mapi-worker, so today the bases differ only
#   in their name: a base whose methods need a runtime of their own gets it in
#   the runtime stage, selected by BASE. The GPU Job's drivers come from Cloud
#   Run, not from the image.
# - At run time the worker needs glibc, libgcc_s and the CA certificates (it
#   reads its bootstrap from Cloud Storage over TLS), all in distroless `cc`;
#   it handles SIGTERM itself (exit 143 or 16), so no init process.
# - The chef and planner stages are mapi.Dockerfile's (see there); BASE is
#   declared after the build, so the four bases share every build layer.

FROM rust:1.95.0-bookworm AS chef
RUN cargo install cargo-chef --locked --version 0.1.78
WORKDIR /src
ENV CARGO_PROFILE_RELEASE_STRIP=symbols CARGO_TERM_COLOR=never

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=planner /src/recipe.json recipe.json
# The workspace's build settings (.cargo/config.toml) apply to the cook too.
COPY .cargo/ .cargo/
RUN cargo chef cook --release --locked --recipe-path recipe.json -p mapi-worker
COPY . .
# The build's identity, as in mapi.Dockerfile.
ARG MAPI_GIT_COMMIT=""
ARG MAPI_BUILD_TIME=""
RUN cargo build --release --locked -p mapi-worker --bin mapi-worker
ARG BASE
RUN case "$BASE" in \
      base-bayes|base-ml|base-forecast|base-dl) ;; \
      *) echo "BASE='$BASE' is not a base of the Job inventory: base-bayes, base-ml, base-forecast or base-dl" >&2; exit 1 ;; \
    esac

FROM gcr.io/distroless/cc-debian12:nonroot
ARG BASE
LABEL dev.mapi.base="${BASE}"
COPY --from=builder /src/target/release/mapi-worker /usr/local/bin/mapi-worker
# distroless's `nonroot`, by number so any runtime resolves it.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/mapi-worker"]
