#!/usr/bin/env bash
# The clustered coordinator's figures (docs/benchmarks.md, "A pool on
# several machines"): the same job of empty tasks (quorum 2, 8 agents over HTTP on
# 127.0.0.1, an instant executor: BenchmarkCoordinator/external) through
# a single `idlepool serve` (SQLite), a one-node cluster and a three-node
# cluster (JetStream, replication 3 over TLS routes), each node its own
# process. Prints accepted tasks/s and the coordinator's CPU per accepted
# task, in all and node by node, and each node's HTTP requests and group
# commits (their mean size and time) during the run, and its requests a
# task by route (the devices' `POST /v1/work`, the mergers' results and
# acknowledgements, ...). A run of 100,000
# tasks or more also prints the CPU per accepted task in steady state:
# from the moment the pool has decided STEADY_FROM tasks (default half of
# TASKS; 0 prints none) to the last task, read from each node's /metrics
# twice a second. A node's heap grows over its first 200,000 tasks or so
# (GOGC=400: to 0.7-0.9 GB resident), each new page a page fault, so a
# run of 100,000 tasks measures in part a node warming up; runs of
# 400,000 or more show what a node that has run a while spends. A
# benchmark, not a test: CI does not run it. The nodes snapshot every SNAPSHOT_EVERY state messages (default
# 256, a sixteenth of a pool's default): the node in charge looks every
# three seconds, so a run of 100,000 tasks pays for about three
# snapshots and their archiving, as a busy pool does every 18 s or so;
# a run of 20,000 (two seconds) mostly for none. Usage: [JOBS=12]
# [SETUPS="3cold-jobs 3shards"] [SNAPSHOT_EVERY=4096] [STEADY_FROM=200000]
# scripts/bench-cluster.sh [TASKS]
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_NUMERIC=C # printf's and awk's decimal point, whatever the user's locale
export PATH=/usr/local/go/bin:$PATH
tasks=${1:-5000}
steady_from=${STEADY_FROM:-$((tasks >= 100000 ? tasks / 2 : 0))}
if ! [[ $steady_from =~ ^[0-9]+$ && $tasks =~ ^[0-9]+$ ]]; then
  echo "bench-cluster: TASKS and STEADY_FROM are counts of tasks (digits only)" >&2
  exit 2
fi
work=$(mktemp -d)
pids=()
watcher=
cleanup() {
  stop_watcher
  pkill -f "^$work/agent.test " 2>/dev/null || true # a benchmark cut short
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
# stop_watcher ends watch_steady, if it runs.
stop_watcher() {
  if [ -n "$watcher" ]; then
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
    watcher=
  fi
}
trap cleanup EXIT

go build -o "$work/idlepool" ./cmd/idlepool
go test -c -o "$work/agent.test" ./agent/

# A base port in 20000..29999, different each run, for the nodes' HTTP
# (base, base+1, base+2) and routes (base+10, ...).
base=$((20000 + RANDOM % 1000 * 10))

healthy() { # URL: wait up to 60 s for /healthz to answer 200
  for _ in $(seq 600); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/healthz" || true)" = 200 ]; then return 0; fi
    sleep 0.1
  done
  echo "bench-cluster: $1 not healthy within 60 s" >&2
  return 1
}

bench() { # NAME URL PIDS
  local line out rc=0
  out=$(cd agent && IDLEPOOL_BENCH_POOL=$2 IDLEPOOL_BENCH_PIDS=$3 "$work/agent.test" \
    -test.run '^$' -test.bench 'Coordinator/external' -test.benchtime "${tasks}x" 2>&1) || rc=$?
  if ! line=$(echo "$out" | grep '^BenchmarkCoordinator/external.*tasks/s'); then
    echo "bench-cluster: $1: the benchmark failed (exit $rc):" >&2
    echo "$out" | tail -20 >&2
    return 1
  fi
  if [ "$rc" != 0 ]; then # its figures printed, then an error (an agent's, as it stopped)
    echo "bench-cluster: $1: the benchmark printed its figures, then exited $rc:" >&2
    echo "$out" | grep -v '^BenchmarkCoordinator' | tail -10 >&2
  fi
  local ts cpu nodes
  ts=$(echo "$line" | awk '{for(i=1;i<=NF;i++) if($i=="tasks/s") print $(i-1)}')
  cpu=$(echo "$line" | awk '{for(i=1;i<=NF;i++) if($i=="coord-cpu-µs/task") print $(i-1)}')
  nodes=$(echo "$line" | awk '{s=""; for(i=1;i<=NF;i++) if($i ~ /^node[0-9]+-cpu-µs\/task$/) s=s sprintf(" %s %.0f", substr($i,1,index($i,"-")-1), $(i-1)); print s}')
  printf '%-24s %8.0f tasks/s   coordinator CPU %6.0f µs per accepted task%s\n' "$1" "$ts" "$cpu" "${nodes:+  (per node:$nodes µs)}"
}

# counters URL: the node's HTTP requests, group commits, seconds in
# them and outcomes committed so far (its /metrics, every shard summed).
counters() {
  { curl -sS --max-time 10 "$1/metrics" || echo "bench-cluster: $1/metrics did not answer; its counters read 0" >&2; } | awk '
    /^idlepool_coord_http_requests_total/ {r += $NF}
    /^idlepool_coord_store_commits_total/ {c += $NF}
    /^idlepool_coord_store_commit_seconds_total/ {t += $NF}
    /^idlepool_coord_store_committed_records_total.*kind="outcome"/ {o += $NF}
    END {printf "%d %d %.6f %d\n", r, c, t, o}'
}

# routes URL: the node's HTTP requests so far by route pattern, one
# "METHOD_PATH COUNT" line each, every status code summed.
routes() {
  { curl -sS --max-time 10 "$1/metrics" || echo "bench-cluster: $1/metrics did not answer; its requests by route are not known" >&2; } | awk '
    /^idlepool_coord_http_requests_total/ {
      match($0, /route="[^"]*"/); r = substr($0, RSTART + 7, RLENGTH - 8); gsub(/ /, "_", r); n[r] += $NF }
    END {for (r in n) print r, n[r]}' | LC_ALL=C sort -k1,1
}

# by_route BEFORE AFTER TASKS: one line: the requests a task by route
# between two readings of routes, the most asked first (those of 0.0005
# a task or more); "not known" when the second reading is empty (the
# first is before any request a route counts, for a node just started).
by_route() {
  if [ -z "$2" ]; then echo "not known"; return; fi
  LC_ALL=C join -a 2 -e 0 -o 0,1.2,2.2 <(echo "$1") <(echo "$2") | awk -v t="$3" '{d = $3 - $2; if (d / t >= 0.0005) printf "%.6f %s\n", d / t, $1}' |
    LC_ALL=C sort -rn | awk '{gsub(/_/, " ", $2); s = s sprintf("%s%s %.3f", (NR > 1 ? "; " : ""), $2, $1)} END {print s}'
}

# traffic BEFORE... AFTER...: one line per node, what it served and
# committed between the two readings of counters.
traffic() {
  local n=$(($# / 2)) i b a
  for ((i = 1; i <= n; i++)); do
    b=${!i}; a=$(eval echo "\${$((i + n))}")
    echo "$b $a" | tr '_' ' ' | awk -v node="node$i" '{
      r = $5 - $1; c = $6 - $2; t = $7 - $3; o = $8 - $4
      printf "                         (%s: %d requests, %d group commits", node, r, c
      if (c > 0) printf " of %.1f tasks in %.1f ms", o / c, 1000 * t / c
      printf ")\n"}'
  done
}

# decided URL...: the tasks the pool has decided so far (the outcomes
# committed, summed over the nodes: each shard counts where it is led).
decided() {
  local u sum=0 o
  for u in "$@"; do
    o=$(counters "$u" 2>/dev/null | cut -d' ' -f4) # a node that does not answer reads 0
    sum=$((sum + ${o:-0}))
  done
  echo "$sum"
}

# sample PIDS URL...: one line: the time (s), the tasks decided, and
# each process's CPU time so far (ticks of 1/100 s, /proc/PID/stat).
sample() {
  local p line
  line="$(date +%s.%N) $(decided "${@:2}")"
  for p in ${1//,/ }; do line="$line $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)"; done
  echo "$line"
}

# watch_steady PIDS URL...: waits until the pool has decided
# $steady_from tasks, then writes a sample to $work/steady; then waits
# for the run's last task (the benchmark's first run decides one more),
# and writes another to $work/steady.end. It stops when the first node
# has gone, and does nothing when $steady_from is 0.
watch_steady() {
  rm -f "$work/steady" "$work/steady.end"
  [ "$steady_from" -gt 0 ] || return 0
  local first=${1%%,*}
  while [ "$(decided "${@:2}")" -lt "$steady_from" ]; do
    kill -0 "$first" 2>/dev/null || return 0
    sleep 0.5
  done
  sample "$@" >"$work/steady"
  while [ "$(decided "${@:2}")" -le "$tasks" ]; do
    kill -0 "$first" 2>/dev/null || return 0
    sleep 0.5
  done
  sample "$@" >"$work/steady.end"
}

# steady_end PIDS URL...: the watcher's last sample, or one taken now.
steady_end() {
  if [ -s "$work/steady.end" ]; then cat "$work/steady.end"; else sample "$@"; fi
}

# steady FROM-SAMPLE TO-SAMPLE: prints the CPU per task decided between
# the two samples, in all and node by node, and the tasks a second.
steady() {
  echo "$1 $2" | awk -v n=$(($(echo "$1" | wc -w) - 2)) '{
    t = $(n + 3) - $1; d = $(n + 4) - $2; all = 0; s = ""
    if (d <= 0 || t <= 0) { print "                         (steady state: no tasks decided after the mark)"; exit }
    for (i = 1; i <= n; i++) { c = ($(n + 4 + i) - $(2 + i)) * 10000 / d; all += c; s = s sprintf(" node%d %.0f", i, c) }
    printf "                         (steady, tasks %d to %d: %.0f tasks/s, %.0f µs per accepted task%s)\n",
      $2, $(n + 4), d / t, all, (n > 1 ? "; per node:" s " µs" : "") }'
}

stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

snapshot_every=${SNAPSHOT_EVERY:-256}
echo "tasks: $tasks empty tasks, quorum 2, 8 agents; snapshot_every $snapshot_every; load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# One node, SQLite (SETUPS, a list of the setups below, skips it).
if [ -z "${SETUPS:-}" ]; then
"$work/idlepool" --home "$work/h0" serve --listen "127.0.0.1:$base" --data "$work/sqlite" --pool bench \
  >"$work/serve.out" 2>"$work/serve.err" &
pids+=($!)
healthy "http://127.0.0.1:$base"
watch_steady "${pids[0]}" "http://127.0.0.1:$base" &
watcher=$!
bench "1 node, SQLite" "http://127.0.0.1:$base" "${pids[0]}"
stop_watcher
if [ -s "$work/steady" ]; then steady "$(cat "$work/steady")" "$(steady_end "${pids[0]}" "http://127.0.0.1:$base")"; fi
stop_all
fi

# 1 and 3 nodes, then 3 nodes of which every node not in charge is a
# cold standby (cold_standby = true: it applies none of the state); then
# the same jobs split into $JOBS jobs (default 12) on 3 cold nodes, the
# pool undivided and divided into 3 shards (cluster init --shards 3: each
# node in charge of one shard's jobs).
jobs=${JOBS:-12}
for setup in ${SETUPS:-1 3 3cold 3cold-jobs 3shards 5shards}; do
  n=${setup:0:1}
  dir="$work/c$setup"
  shards=1
  export IDLEPOOL_BENCH_JOBS=1
  case $setup in
    1) off=1 ;; 3) off=3 ;; 3cold) off=5 ;; # ports of its own per setup
    3cold-jobs) off=7; IDLEPOOL_BENCH_JOBS=$jobs ;;
    3shards) off=9; shards=3; IDLEPOOL_BENCH_JOBS=$jobs ;;
    5shards) off=11; shards=5; IDLEPOOL_BENCH_JOBS=$jobs ;;
  esac
  "$work/idlepool" --home "$work/h0" cluster init "$dir" --pool bench --nodes "$n" --shards "$shards" \
    --port $((base + 100 * off)) --route-port $((base + 100 * off + 10)) >/dev/null 2>&1
  urls=()
  for i in $(seq "$n"); do
    sed -i "s/^snapshot_every = .*/snapshot_every = $snapshot_every/" "$dir/node$i/cluster.toml"
    if [ "$setup" != 1 ] && [ "$setup" != 3 ]; then
      sed -i 's/^cold_standby = .*/cold_standby = true/' "$dir/node$i/cluster.toml"
    fi
    "$work/idlepool" --home "$work/hn$n-$i" serve --cluster "$dir/node$i/cluster.toml" \
      >"$work/node$n-$i.out" 2>"$work/node$n-$i.err" &
    pids+=($!)
    urls+=("http://127.0.0.1:$((base + 100 * off + i - 1))")
  done
  for u in "${urls[@]}"; do healthy "$u"; done
  list=$(IFS=,; echo "${urls[*]}")
  plist=$(IFS=,; echo "${pids[*]}")
  case $setup in
    3cold) label="3 nodes, JetStream, cold" ;;
    3cold-jobs) label="3 nodes, cold, $jobs jobs" ;;
    3shards) label="3 shards, cold, $jobs jobs" ;;
    5shards) label="5 nodes, 5 shards, $jobs jobs" ;;
    *) label="$n node$([ "$n" = 1 ] || echo s), JetStream" ;;
  esac
  if [ "$shards" -gt 1 ]; then
    # Wait until each node leads one shard (the first node up leads all
    # of them until the others are live, then hands them over): the
    # nodes named as the shards' leaders, not the other nodes a shard's
    # entry names (its stream's replicas).
    spread=0
    for _ in $(seq 600); do
      spread=$(curl -s "${urls[0]}/v1/cluster" | grep -o '"shard":[0-9]*,"leader":{"node":"[^"]*"' | cut -d'"' -f8 | sort -u | grep -c . || true)
      [ "$spread" = "$n" ] && break
      sleep 0.1
    done
    if [ "$spread" != "$n" ]; then
      echo "bench-cluster: $label: the shards did not spread over the $n nodes within 60 s" >&2
      stop_all
      continue
    fi
  fi
  before=() routes_before=()
  for u in "${urls[@]}"; do before+=("$(counters "$u" | tr ' ' '_')"); routes_before+=("$(routes "$u")"); done
  watch_steady "$plist" "${urls[@]}" &
  watcher=$!
  bench "$label" "$list" "$plist"
  stop_watcher
  end=$(steady_end "$plist" "${urls[@]}")
  after=()
  for u in "${urls[@]}"; do after+=("$(counters "$u" | tr ' ' '_')"); done
  for i in "${!urls[@]}"; do
    echo "                         (node$((i + 1)), requests a task by route: $(by_route "${routes_before[$i]}" "$(routes "${urls[$i]}")" "$tasks"))"
  done
  if [ "$shards" -gt 1 ]; then
    curl -s "${urls[0]}/v1/cluster" | grep -o '"shards":\[.*\]' | grep -o '"shard":[0-9]*,"leader":{"node":"[^"]*"' | sed 's/"shard":\([0-9]*\),"leader":{"node":"\([^"]*\)"/shard \1: \2/' | tr '\n' ' ' | sed 's/^/                         (/; s/ $/)\n/'
    # How the jobs divided: each job's tasks and shard, from the pool's
    # page data (each job names "tasks" before "shard").
    curl -s "${urls[0]}/v1/dashboard" | grep -o '"tasks":[0-9]*\|"shard":[0-9]*' |
      awk -F: '$1=="\"tasks\"" {t=$2} $1=="\"shard\"" {n[$2]++; s[$2]+=t} END {for (k in n) printf "shard %s: %d jobs, %d tasks\n", k, n[k], s[k]}' |
      sort | tr '\n' ';' | sed 's/;$//; s/;/; /g; s/^/                         (/; s/$/)\n/'
  else
    leader=$(curl -s "${urls[0]}/v1/cluster" | grep -o '"leader":{"node":"[^"]*"' | cut -d'"' -f6 || true)
    echo "                         (${leader:-no node} in charge)"
  fi
  traffic "${before[@]}" "${after[@]}"
  if [ -s "$work/steady" ]; then steady "$(cat "$work/steady")" "$end"; fi
  stop_all
done
