#!/usr/bin/env bash
# Compares Envoy's external rate limit service (ShouldRateLimit over gRPC) on
# Sluice with the reference server, envoyproxy/ratelimit backed by Redis, on
# this machine, in one run, and adds Sluice's own POST /v1/check/batch:
#
#   bash cmd/sluice-bench/rls-figures.sh [duration]   # default 10s per workload and target
#
# In a temporary directory it makes and removes, it builds the reference at a
# pinned version from its module source (fetched through the Go module proxy
# into the module cache; nothing of it lands in this repository), starts
# redis-server without persistence, the reference and Sluice, all on
# 127.0.0.1 only, loads both targets with the same config (the workloads' own,
# from `sluice-bench rls -print-config`, which a Sluice tenant applies with
# `sluice apply -f`), and prints one Markdown table. It stops only the
# processes it started, by PID, however it exits.
#
# Environment:
#   RLS_REFERENCE_VERSION  module version of github.com/envoyproxy/ratelimit (default: the pin below)
#   RLS_REFERENCE_ENV      extra settings for the reference, e.g. "REDIS_PIPELINE_WINDOW=150us"
#   RLS_CONNS, RLS_CONCURRENCY  gRPC connections and requests in flight (default 4 and 32)
#   RLS_SKIP_SLUICE=1      the reference alone (also what happens while cmd/server has no --grpc-addr)
#   SLUICE_BENCH_PORT      first of the six loopback ports used (default 18380)
set -euo pipefail
cd "$(dirname "$0")/../.."

dur=${1:-10s}
# The newest version the module proxy served on 2026-11-28 (commit 3fb702589d36 of
# envoyproxy/ratelimit, 2026-01-22); it has no replace directive and builds as is.
ref_version=${RLS_REFERENCE_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
conns=${RLS_CONNS:-4}
conc=${RLS_CONCURRENCY:-32}
base=${SLUICE_BENCH_PORT:-18380}
redis_port=$base ref_grpc=$((base + 1)) ref_http=$((base + 2)) ref_debug=$((base + 3))
sluice_http=$((base + 4)) sluice_grpc=$((base + 5))

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "rls-figures: $1" >&2
  for f in "${@:2}"; do [ -f "$f" ] && { echo "--- tail of $(basename "$f")" >&2; tail -20 "$f" >&2; }; done
  exit 1
}
# wait_for CMD…: up to 10 s for CMD to succeed.
wait_for() {
  for _ in $(seq 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}
for p in $redis_port $ref_grpc $ref_http $ref_debug $sluice_http $sluice_grpc; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then fail "port $p is in use: set SLUICE_BENCH_PORT"; fi
done

if ! command -v redis-server >/dev/null; then
  [ "$(id -u)" = 0 ] || fail "redis-server is missing: install the Debian package redis-server (as root)"
  echo "installing redis-server (apt-get)..." >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

# The reference, from its module source. Outside any module (GOWORK=off, in
# $tmp), so that this repository's go.mod and go.work play no part.
echo "building envoyproxy/ratelimit@$ref_version and the Sluice binaries..." >&2
info=$(cd "$tmp" && GOWORK=off go mod download -json "github.com/envoyproxy/ratelimit@$ref_version")
field() { sed -n 's/^\t"'"$1"'": "\(.*\)",\{0,1\}$/\1/p' <<<"$info"; }
ref_dir=$(field Dir)
ref_sum=$(field Sum)
ref_version=$(field Version)
[ -d "$ref_dir" ] || fail "go mod download gave no source directory: $info"
cp -R "$ref_dir" "$tmp/ratelimit-src"
chmod -R u+w "$tmp/ratelimit-src"
if grep -q '^replace' "$tmp/ratelimit-src/go.mod"; then
  fail "github.com/envoyproxy/ratelimit@$ref_version has replace directives: pin another version or resolve them here"
fi
(cd "$tmp/ratelimit-src" && GOWORK=off go build -trimpath -o "$tmp/ratelimit" ./src/service_cmd) ||
  fail "building the reference failed"

go build -o "$tmp/bench" ./cmd/sluice-bench
sluice=yes
if [ "${RLS_SKIP_SLUICE:-}" = 1 ]; then
  sluice=no
else
  go build -o "$tmp/server" ./cmd/server
  help=$("$tmp/server" --help 2>&1 || true)
  if ! grep -qE -- '(^|[[:space:]])--?grpc-addr([[:space:]=]|$)' <<<"$help"; then
    echo "rls-figures: cmd/server has no --grpc-addr yet: the reference alone" >&2
    sluice=no
  else
    go build -o "$tmp/sluice" ./cmd/sluice
  fi
fi

config=$tmp/runtime/ratelimit/config/sluice-bench.yaml
mkdir -p "$(dirname "$config")"
"$tmp/bench" rls -print-config >"$config"

redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no --dir "$tmp" \
  --logfile "$tmp/redis.log" >/dev/null 2>&1 &
pids+=($!)
wait_for redis-cli -h 127.0.0.1 -p "$redis_port" ping || fail "redis-server did not start" "$tmp/redis.log"

# The reference's settings (src/settings/settings.go): a clean environment,
# every listener on 127.0.0.1, the config read once from $config, no statsd.
# Redis pipelining stays at its default (off) unless RLS_REFERENCE_ENV sets it.
# shellcheck disable=SC2086 # RLS_REFERENCE_ENV is a list of NAME=value words
env -i PATH="$PATH" HOME="$HOME" \
  USE_STATSD=false LOG_LEVEL=warn \
  REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" \
  RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_APPDIRECTORY=config RUNTIME_WATCH_ROOT=false \
  HOST=127.0.0.1 PORT="$ref_http" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$ref_debug" \
  GRPC_HOST=127.0.0.1 GRPC_PORT="$ref_grpc" \
  ${RLS_REFERENCE_ENV:-} \
  "$tmp/ratelimit" >"$tmp/ratelimit.log" 2>&1 &
pids+=($!)
wait_for curl -sf "http://127.0.0.1:$ref_http/healthcheck" || fail "the reference did not become healthy" "$tmp/ratelimit.log"
# Its debug listener shows the config it loaded.
wait_for sh -c "curl -sf http://127.0.0.1:$ref_debug/rlconfig | grep -q sluice-bench" ||
  fail "the reference did not load $config" "$tmp/ratelimit.log"

targets=(-target "reference=127.0.0.1:$ref_grpc")
extra=()
if [ $sluice = yes ]; then
  url=http://127.0.0.1:$sluice_http
  token=op_rls_$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  SLUICE_OPERATOR_TOKEN=$token "$tmp/server" --addr "127.0.0.1:$sluice_http" --grpc-addr "127.0.0.1:$sluice_grpc" \
    --data "$tmp/sluice-data" >"$tmp/server.log" 2>&1 &
  pids+=($!)
  wait_for curl -sf "$url/readyz" || fail "Sluice did not become ready" "$tmp/server.log"
  tenant=$(curl -sS --fail-with-body "$url/v1/admin/tenants" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d '{"name":"rls-bench","owner_email":"bench@bench.test","owner_password":"a long passphrase"}') ||
    fail "creating the tenant failed: $tenant" "$tmp/server.log"
  sk=$(sed -E 's/.*"service_key":"([^"]+)".*/\1/' <<<"$tenant")
  [[ $sk == sk_* ]] || fail "creating the tenant gave no service key: $tenant" "$tmp/server.log"
  SLUICE_URL=$url SLUICE_SERVICE_KEY=$sk "$tmp/sluice" apply -f "$config" >"$tmp/apply.log" 2>&1 ||
    fail "sluice apply -f $(basename "$config") failed" "$tmp/apply.log" "$tmp/server.log"
  # For the batch row: an HTTP policy that admits everything, as figures.sh's.
  policy=$(curl -sS --fail-with-body "$url/v1/policies" -H "Authorization: Bearer $sk" -H 'Content-Type: application/json' \
    -d '{"name":"open","path":"/api/open","tiers":{"anonymous":{"algorithm":"token_bucket","limit":1000000000,"period":"1s"}}}') ||
    fail "creating the /api/open policy failed: $policy" "$tmp/server.log"
  sleep 1
  targets+=(-target "sluice=127.0.0.1:$sluice_grpc")
  extra=(-key "$sk" -batch-url "$url")
fi

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain 2>/dev/null)" ] || commit="$commit (with uncommitted changes)"
echo "## ShouldRateLimit: Sluice and the reference server, $(date -u +%Y-%m-%d)"
echo
echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), $(free -g | awk '/^Mem:/ { print $2 }') GiB, $(uname -sr); load generator and servers share the CPUs"
echo "- reference: github.com/envoyproxy/ratelimit $ref_version ($ref_sum), built with $(go env GOVERSION), Redis backend, default settings (REDIS_POOL_SIZE 10, no pipelining, no local cache)${RLS_REFERENCE_ENV:+ and $RLS_REFERENCE_ENV}"
echo "- redis: $(redis-server --version | sed -E 's/.*v=([^ ]+).*/\1/'), no persistence (--save '' --appendonly no)"
if [ $sluice = yes ]; then
  echo "- sluice: commit $commit, one server, embedded NATS, fresh data dir; the same YAML loaded with \`sluice apply -f\` ($(tail -1 "$tmp/apply.log"))"
else
  echo "- sluice: not measured (cmd/server has no --grpc-addr at commit $commit, or RLS_SKIP_SLUICE=1)"
fi
echo "- command: bash cmd/sluice-bench/rls-figures.sh $dur"
echo
shown=("${targets[@]}")
[ $sluice = no ] || shown+=(-key 'sk_…' -batch-url "$url")
echo "\$ sluice-bench rls ${shown[*]} -duration $dur -conns $conns -concurrency $conc"
# In the background, so that a signal to this script ends the run at once.
"$tmp/bench" rls "${targets[@]}" "${extra[@]}" -duration "$dur" -conns "$conns" -concurrency "$conc" &
pids+=($!)
wait $!
