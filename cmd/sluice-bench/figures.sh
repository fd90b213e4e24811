#!/usr/bin/env bash
# Reproduces the HTTP figures in BENCHMARKS.md: builds the server and the
# load harness, starts one server on loopback with a fresh data dir, creates
# a tenant with two policies, and runs sluice-bench for each case, every one
# against the in-process Echo floor as well. Stops the server it started.
#
#   bash cmd/sluice-bench/figures.sh [duration]     # default 10s per target
set -euo pipefail
cd "$(dirname "$0")/../.."

dur=${1:-10s}
tmp=$(mktemp -d)
port=${SLUICE_BENCH_PORT:-18080}
url=http://127.0.0.1:$port
token=op_figures_$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')

go build -o "$tmp/server" ./cmd/server
go build -o "$tmp/bench" ./cmd/sluice-bench

SLUICE_OPERATOR_TOKEN=$token "$tmp/server" --addr "127.0.0.1:$port" --data "$tmp/data" >"$tmp/server.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do
  curl -sf "$url/readyz" >/dev/null && break
  sleep 0.1
done

sk=$(curl -sf "$url/v1/admin/tenants" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"name":"bench","owner_email":"bench@bench.test","owner_password":"a long passphrase"}' |
  sed -E 's/.*"service_key":"([^"]+)".*/\1/')
# /api/open admits everything (every check is an allowed decision that
# updates and persists a bucket); /api/example is the README's 10 per 60 s,
# so under load nearly every check is a denial.
curl -sf "$url/v1/policies" -H "Authorization: Bearer $sk" -H 'Content-Type: application/json' \
  -d '{"name":"open","path":"/api/open","tiers":{"anonymous":{"algorithm":"token_bucket","limit":1000000000,"period":"1s"}}}' >/dev/null
curl -sf "$url/v1/policies" -H "Authorization: Bearer $sk" -H 'Content-Type: application/json' \
  -d '{"name":"heavy-example","path":"/api/example","tiers":{"anonymous":{"algorithm":"token_bucket","limit":10,"period":"60s"}}}' >/dev/null
sleep 1

bench() { echo "\$ sluice-bench $*"; "$tmp/bench" -url "$url" -key "$sk" -duration "$dur" -floor "$@"; echo; }
bench -workers 32 -path /api/open
bench -workers 32 -path /api/open -identities 10000 | tee "$tmp/max.txt"
# Latency at half the maximum throughput just measured, open loop.
half=$(awk '$1 == "sluice" { print int($2 / 2) }' "$tmp/max.txt")
bench -workers 64 -path /api/open -identities 10000 -rate "$half"
bench -workers 32 -path /api/example
bench -workers 32 -path /api/open -identities 10000 -mode batch -batch-size 100

# SQLite bucket writes per allowed check over everything above (the worker
# coalesces repeated states of a bucket; denied checks write nothing).
sleep 2
curl -sf "$url/metrics" -H "Authorization: Bearer $token" | awk '
  /^sluice_checks_total\{.*outcome="allowed"/ { allowed += $NF }
  /^sluice_worker_rows_written_total\{stream="SLUICE_STATE"\}/ { rows = $NF }
  END { printf "allowed checks %d, SQLite bucket rows written %d: %.3f per allowed check\n", allowed, rows, rows / allowed }'
