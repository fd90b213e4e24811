#!/usr/bin/env bash
# Reproduces the cluster throughput figures in BENCHMARKS.md: docker-compose's
# topology as processes on loopback (nats-server with JetStream, one worker,
# three servers), a tenant with an exact and a local policy, and sluice-bench
# spreading its workers round-robin over the three servers. Stops what it started.
#
#   bash cmd/sluice-bench/cluster-figures.sh [duration]     # default 10s per run
set -euo pipefail
cd "$(dirname "$0")/../.."

dur=${1:-10s}
tmp=$(mktemp -d)
base=${SLUICE_BENCH_PORT:-18180}
token=op_cluster_$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
nats=nats://127.0.0.1:$((base + 9))

go build -o "$tmp/nats-server" github.com/nats-io/nats-server/v2
go build -o "$tmp/server" ./cmd/server
go build -o "$tmp/worker" ./cmd/worker
go build -o "$tmp/bench" ./cmd/sluice-bench

pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
"$tmp/nats-server" -a 127.0.0.1 -p $((base + 9)) -js -sd "$tmp/nats" >"$tmp/nats.log" 2>&1 & pids+=($!)
sleep 1
"$tmp/worker" --nats-url "$nats" --data "$tmp/worker-data" >"$tmp/worker.log" 2>&1 & pids+=($!)
urls=()
for i in 1 2 3; do
  SLUICE_OPERATOR_TOKEN=$token "$tmp/server" --nats-url "$nats" --worker=external --node "s$i" \
    --addr "127.0.0.1:$((base + i))" --data "$tmp/s$i" >"$tmp/s$i.log" 2>&1 & pids+=($!)
  urls+=("http://127.0.0.1:$((base + i))")
done
for u in "${urls[@]}"; do
  for _ in $(seq 300); do curl -sf "$u/readyz" >/dev/null && break; sleep 0.1; done
done
sleep 5 # partitions settle among the three servers

s1=${urls[0]}
sk=$(curl -sf "$s1/v1/admin/tenants" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"name":"bench","owner_email":"bench@bench.test","owner_password":"a long passphrase"}' |
  sed -E 's/.*"service_key":"([^"]+)".*/\1/')
for c in exact local; do
  curl -sf "$s1/v1/policies" -H "Authorization: Bearer $sk" -H 'Content-Type: application/json' \
    -d '{"name":"'$c'","path":"/'$c'","consistency":"'$c'","tiers":{"anonymous":{"algorithm":"token_bucket","limit":1000000000,"period":"1s"}}}' >/dev/null
done
sleep 1

all=$(IFS=,; echo "${urls[*]}")
fwd() { curl -sf "$1/metrics" -H "Authorization: Bearer $token" | awk '/^sluice_cluster_forwards_total/ { print $NF }'; }
for c in exact local; do
  before=0; for u in "${urls[@]}"; do before=$(awk -v a="$before" -v b="$(fwd "$u")" 'BEGIN { print a + b }'); done
  echo "\$ sluice-bench -url <3 servers> -workers 48 -identities 10000 -path /$c"
  "$tmp/bench" -url "$all" -key "$sk" -duration "$dur" -workers 48 -identities 10000 -path "/$c"
  after=0; for u in "${urls[@]}"; do after=$(awk -v a="$after" -v b="$(fwd "$u")" 'BEGIN { print a + b }'); done
  echo "checks forwarded to their owner during the run: $(awk -v a="$after" -v b="$before" 'BEGIN { print a - b }')"
  echo
done
echo "\$ sluice-bench -url <server 1 only> -workers 48 -identities 10000 -path /exact"
"$tmp/bench" -url "$s1" -key "$sk" -duration "$dur" -workers 48 -identities 10000 -path /exact
