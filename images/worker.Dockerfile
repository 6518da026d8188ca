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
# - Every built-in method is compiled into mapi-worker (the Python methods'
#   code too); the bases differ in their runtime stage, runtime-${BASE},
#   which the final stage starts from, by the Python packages their methods
#   import (the registry's `needs`) and plugins may import:
#   - base-bayes (mmm.*, sci.*, tabular.*): Debian 12 (bookworm) slim with
#     Debian's python3, numpy, pandas, scipy and matplotlib;
#   - base-ml (sklearn.*): those and scikit-learn;
#   - base-forecast (ts.*, causal.*): those and statsmodels.
#   The worker starts /usr/bin/python3 -I -B -u (docs/python-runtime.md).
#   Each package is pinned to its bookworm version: when Debian's archive
#   moves past one (a point release, a security update), the build fails at
#   apt-get and the pin is raised here and in docs/python-runtime.md. The
#   interpreter itself (python3.11) comes as python3's dependency.
#   - base-dl (dl.*): those (no scikit-learn, no statsmodels) and PyTorch
#     with its CUDA 12 runtime from PyPI's wheels (no NVIDIA base image):
#     images/base-dl-requirements.txt pins torch and every wheel it pulls in
#     (cuBLAS, cuDNN, NCCL, triton, …) by version and hash. pip runs in a
#     stage of its own (dl-wheels), so the image carries no pip; the wheels
#     land in /usr/local/lib/python3.11/dist-packages, which Debian's
#     python3 searches even with -I. About 3 GB of wheels (BENCHMARKS.md).
#     The GPU driver comes from Cloud Run's GPU host, not from the image:
#     the CUDA 12.4 runtime needs a driver of the 12.x line (525 or later).
# - At run time the worker needs glibc, libgcc_s and the CA certificates (it
#   reads its bootstrap from Cloud Storage over TLS): installed
#   (ca-certificates) in the Debian stage every base starts from. It handles
#   SIGTERM itself (exit 143 or 16), so no init process. Every image runs as
#   65532 (distroless's `nonroot` number); the Debian stage adds that user
#   and group.
# - The chef and planner stages are mapi.Dockerfile's (see there). BASE is
#   declared before the first FROM only to name the runtime stage; the build
#   stages declare it after the build, so the four bases share every build
#   layer. BuildKit builds only the runtime stage BASE names.

ARG BASE

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

FROM debian:12.11-slim AS runtime-python
# Debian's own builds, pinned to bookworm's versions (see Rules); no
# recommends, no package lists left behind.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates=20250419~deb12u2 \
      python3=3.11.2-1+b1 \
      python3-numpy=1:1.24.2-1+deb12u1 \
      python3-pandas=1.5.3+dfsg-2 \
      python3-scipy=1.10.1-2 \
      python3-matplotlib=3.6.3-1+b1 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --no-log-init --uid 65532 --gid 65532 --home-dir /home/nonroot --no-create-home \
      --shell /usr/sbin/nologin nonroot

FROM runtime-python AS runtime-base-bayes

FROM runtime-python AS runtime-base-ml
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-sklearn=1.2.1+dfsg-1 \
 && rm -rf /var/lib/apt/lists/*

FROM runtime-python AS runtime-base-forecast
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-statsmodels=0.13.5+dfsg-7 \
 && rm -rf /var/lib/apt/lists/*

FROM runtime-python AS dl-wheels
COPY images/base-dl-requirements.txt /tmp/base-dl-requirements.txt
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-pip=23.0.1+dfsg-1 \
 && rm -rf /var/lib/apt/lists/* \
 && pip install --no-cache-dir --break-system-packages --root-user-action=ignore --no-deps \
      --require-hashes -r /tmp/base-dl-requirements.txt

FROM runtime-python AS runtime-base-dl
COPY --from=dl-wheels /usr/local/lib/python3.11/dist-packages /usr/local/lib/python3.11/dist-packages

# One of the runtime stages above (hadolint cannot tell, hence DL3006).
# hadolint ignore=DL3006
FROM runtime-${BASE}
ARG BASE
LABEL dev.mapi.base="${BASE}"
COPY --from=builder /src/target/release/mapi-worker /usr/local/bin/mapi-worker
# distroless's `nonroot`, by number so any runtime resolves it.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/mapi-worker"]
