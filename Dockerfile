# syntax=docker/dockerfile:1
# logprobe production image: Node 26 (the Active LTS line; CI runs the unit tests and a serve
# end-to-end test on it), the compiled proxy and its production dependencies only, run as the
# unprivileged `node` user (uid 1000).
#
#   docker build -t logprobe .
#   docker run --rm -p 8080:8080 -p 9464:9464 \
#     -e LOGPROBE_CANDIDATE_URL=http://candidate:30000 -e LOGPROBE_BASELINE_URL=http://baseline:30001 \
#     -e LOGPROBE_BASELINE_API_KEY=… logprobe
#
# Config: /etc/logprobe/logprobe.yaml (container defaults below; mount your own over it, see
# config/logprobe.example.yaml), then LOGPROBE_* variables. Captures: /var/lib/logprobe/captures
# (mount a volume). Smaller still: --build-arg NODE_IMAGE=node:26-alpine (no native modules).
# Size and operations: docs/operations.md.
ARG NODE_IMAGE=node:26-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
# The test engines (the workspace packages/engine) are for the demo and the tests, not the
# product: only their package.json comes in, for the lockfile, and the prune drops them with
# node-llama-cpp, their optional dependency. --ignore-scripts skips node-llama-cpp's download and
# the `prepare` build; the product's own tsc runs once the sources are in.
ENV NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
COPY package.json package-lock.json ./
COPY packages/engine/package.json ./packages/engine/package.json
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npx tsc -p tsconfig.build.json \
 && npx tsc -p src/browser/tsconfig.build.json \
 && npm prune --omit=dev --omit=optional --workspaces=false --include-workspace-root --ignore-scripts --no-audit --no-fund \
 && npm cache clean --force

FROM ${NODE_IMAGE}
ENV NODE_ENV=production \
    NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
WORKDIR /app
# Application files stay owned by root: the process can read them, not change them.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY bin ./bin
COPY config ./config
# Container defaults: both ports on all interfaces (the admin port must be reachable by the
# orchestrator's probes and by Prometheus; publish or expose it only to them), captures on a volume.
RUN mkdir -p /etc/logprobe /var/lib/logprobe/captures \
 && printf '%s\n' \
      '# Container defaults: mount your own config here (every key: /app/config/logprobe.example.yaml).' \
      'listen: { host: 0.0.0.0, port: 8080 }' \
      'admin: { host: 0.0.0.0, port: 9464 }' \
      'capture: { dir: /var/lib/logprobe/captures }' \
      > /etc/logprobe/logprobe.yaml \
 && chown node:node /var/lib/logprobe/captures

USER node
EXPOSE 8080 9464
# V8 sizes its heap from the machine (here up to 4 GB) and then lets the old space grow 4x its live
# size between two major collections: under 1,000 streams the proxy's heap saws 38 -> 120 MB and RSS
# +-21 %. A 512 MB cap makes V8 grow it by about 1.4x instead (RSS +-3 %, 56 MB less, same CPU:
# bench/RESULTS.md, fault soak). Set your own NODE_OPTIONS to change it (docs/operations.md#memory).
ENV NODE_OPTIONS="--max-old-space-size=512"
# No curl in slim images: node's own fetch, on the admin port (LOGPROBE_ADMIN_PORT if moved).
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.LOGPROBE_ADMIN_PORT || 9464) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# node is PID 1 and handles SIGTERM itself: serve drains in-flight requests
# (shutdown.drainSeconds) and flushes the capture file before it exits.
ENTRYPOINT ["node", "bin/logprobe.js"]
CMD ["serve", "--config", "/etc/logprobe/logprobe.yaml"]
