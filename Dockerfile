# syntax=docker/dockerfile:1
# runguard: the guardrail sidecar daemon.
#   docker build -t runguard .
#   docker run -p 8787:8787 -v runguard-data:/data runguard
# With no DATABASE_URL the records live in the embedded database under /data (keep the volume);
# the first start prints the API key and saves it to /data/api-key.

# --- build: compile TypeScript with the dev dependencies --------------------------------------
FROM node:20-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` would build before the sources are copied.
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json ./
COPY src ./src
COPY web ./web
COPY scripts/bundle-typebox.mjs ./scripts/
# The API (with TypeBox bundled into one module, as `npm run build` does), then the web dashboard
# (dist/dashboard, served at /).
RUN npx tsc -p tsconfig.json && node scripts/bundle-typebox.mjs && node web/build.mjs

# --- production dependencies only -------------------------------------------------------------
FROM node:20-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts && npm cache clean --force

# --- runtime ----------------------------------------------------------------------------------
FROM node:20-slim AS runtime
# HOST 0.0.0.0: reachable from outside the container (publish the port only where it should be).
# The shutdown grace stays under `docker stop`'s default 10 s, so in-flight calls finish before SIGKILL.
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8787 \
    RUNGUARD_DATA_DIR=/data \
    RUNGUARD_LOG_FORMAT=json \
    RUNGUARD_SHUTDOWN_GRACE_MS=8000
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY bin ./bin
COPY config ./config
# `runguard` on the PATH, so `docker compose exec runguard runguard status` works as documented
# (bin/runguard starts Node with the same flags as the entrypoint).
RUN ln -s /app/bin/runguard /usr/local/bin/runguard && mkdir -p /data && chown node:node /data
# The image's unprivileged user (uid 1000); the app files stay root-owned and read-only to it.
USER node
VOLUME ["/data"]
EXPOSE 8787
# No curl in slim images: Node's own fetch checks /health (200 only when the database and the
# counter store answer).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8787) + '/health', { signal: AbortSignal.timeout(4000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
STOPSIGNAL SIGTERM
# The V8 flags bin/runguard starts Node with (docs/performance.md says why): `node bin/runguard` does not read its first lines.
ENTRYPOINT ["node", "--heap-growing-percent=50", "--incremental-marking-soft-trigger=70", "--incremental-marking-hard-trigger=90", "--v8-pool-size=1", "bin/runguard"]
CMD ["start"]
