#!/usr/bin/env bash
# Reproduces the benchmark figures in docs/benchmarks.md:
#   1. per-task overhead of the solo runner (empty program, µs per task)
#   2. WebAssembly/native speed ratio on the pi kernel (same Go code)
#   3. peak memory of pi runs as tasks grow (must stay flat): real runs of
#      10^4 and 10^5 tasks, and the runner alone (instant executor) up to 10^6
# Usage: scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/idlepool" ./cmd/idlepool
GOOS=wasip1 GOARCH=wasm go build -o "$work/empty.wasm" ./cmd/idlepool/testdata/empty
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$work/empty-reactor.wasm" ./cmd/idlepool/testdata/empty
GOOS=wasip1 GOARCH=wasm go build -o "$work/pi.wasm" ./examples/pi
home="$work/home"

# run TASKS SAMPLES WORKERS PROGRAM FIELD: runs a range job whose results sum FIELD,
# and prints "wall_s max_rss_kib runner_hwm_kib"
run() {
  local tasks=$1 samples=$2 workers=$3 prog=$4 field=$5 m="$work/job-$1-$2.toml"
  cat >"$m" <<EOT
name = "bench"
program = "$prog"
[split]
rule = "range"
tasks = $tasks
[split.params]
samples = $samples
[[merge]]
field = "$field"
rule = "sum"
EOT
  local start end hwm=0 pid
  start=$(date +%s.%N)
  /usr/bin/time -f '%M' -o "$work/rss" "$work/idlepool" --home "$home" run "$m" --workers "$workers" --fresh --json >/dev/null 2>"$work/err" &
  pid=$!
  local runner=""
  while kill -0 "$pid" 2>/dev/null; do
    [ -z "$runner" ] && runner=$(pgrep -P "$pid" -f "idlepool --home" | head -1 || true)
    if [ -n "$runner" ] && [ -r "/proc/$runner/status" ]; then
      h=$(awk '/VmHWM/{print $2}' "/proc/$runner/status" 2>/dev/null || echo 0)
      [ -n "$h" ] && [ "$h" -gt "$hwm" ] && hwm=$h
    fi
    sleep 0.2
  done
  wait "$pid" || { cat "$work/err" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "$(echo "$end - $start" | bc -l) $(cat "$work/rss") $hwm"
}

echo "== 1. per-task overhead of the solo runner (empty program)"
run 100 0 1 "$work/empty.wasm" n >/dev/null # warm the compilation cache
for w in 1 2; do
  read -r wall _ _ < <(run 2000 0 "$w" "$work/empty.wasm" n)
  printf 'workers=%d: 2000 tasks in %.2f s = %.0f µs per task\n' "$w" "$wall" "$(echo "$wall * 1000000 / 2000" | bc -l)"
done
run 100 0 1 "$work/empty-reactor.wasm" n >/dev/null
read -r wall _ _ < <(run 2000 0 1 "$work/empty-reactor.wasm" n)
printf 'the same program as a reactor (docs/author.md), workers=1: %.0f µs per task\n' "$(echo "$wall * 1000000 / 2000" | bc -l)"
echo "   of which: the runner alone (instant executor), the worker pool with a minimal module,"
echo "   and wazero instantiating a Go-built module plus the Go runtime starting in it:"
go test -run '^$' -bench 'SoloMemory/tasks=10000$' -benchtime 3x ./pool | awk '/^Benchmark/{for(i=1;i<=NF;i++) if($i=="µs/task") print "   runner: " $(i-1) " µs/task"}'
go test -run '^$' -bench 'RunEmpty|RunGoModule|InstantiateGoModule' -benchtime 200x ./worker | awk '/^Benchmark/{printf "   %s %.0f µs/task\n", $1, $3/1000}'

echo "== 2. WebAssembly/native speed ratio on the pi kernel"
native=$(go test -run '^$' -bench '^BenchmarkKernel$' -count 3 ./examples/pi | awk '/^BenchmarkKernel/{print $3}' | sort -n | head -1)
run 1 1 1 "$work/pi.wasm" inside >/dev/null # compile pi.wasm into the cache first
samples=500000000
read -r wall _ _ < <(run 1 "$samples" 1 "$work/pi.wasm" inside)
wasm=$(echo "$wall * 1000000000 / $samples" | bc -l)
printf 'native: %s ns/sample; wasm (one task of %d samples, run end to end): %.2f ns/sample; ratio %.2f\n' "$native" "$samples" "$wasm" "$(echo "$wasm / $native" | bc -l)"

echo "== 3. peak memory of pi runs (1 sample per task, 2 workers)"
go test -run '^$' -bench SoloMemory -benchtime 1x ./pool | awk '/^Benchmark/{for(i=1;i<=NF;i++) if($i=="peak-heap-MiB") printf "runner alone, %s: peak Go heap %s MiB\n", $1, $(i-1)}'
for n in 10000 100000; do
  read -r wall rss hwm < <(run "$n" 1 2 "$work/pi.wasm" inside)
  printf 'tasks=%-8d wall %7.1f s  runner peak RSS %6d KiB  largest process in the tree %6d KiB\n' "$n" "$wall" "$hwm" "$rss"
done
