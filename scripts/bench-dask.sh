#!/usr/bin/env bash
# Side by side: the same 10,000 empty tasks through an idlepool pool (a
# coordinator in its own process, 8 agents over HTTP on 127.0.0.1, quorum
# 2, an instant executor: BenchmarkCoordinator/subprocess) and through Dask
# distributed (a LocalCluster of 2 worker processes, one thread each,
# client.map of a no-op, results gathered). Prints tasks/s of each and the
# ratio. Needs Debian's python3-distributed (apt-get install
# python3-distributed). A benchmark, not a test: it is not run by CI.
# Usage: scripts/bench-dask.sh [TASKS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
tasks=${1:-10000}
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3 # Debian's, where python3-distributed lives
if ! "$py" -c 'import distributed' 2>/dev/null; then
  echo "bench-dask: Dask distributed is not installed: apt-get install python3-distributed" >&2
  exit 1
fi

dask=$("$py" scripts/bench_dask.py "$tasks")

line=$(go test -run '^$' -bench 'Coordinator/subprocess' -benchtime "${tasks}x" ./agent/ | grep '^BenchmarkCoordinator/subprocess')
idlepool=$(echo "$line" | awk '{for(i=1;i<=NF;i++) if($i=="tasks/s") print $(i-1)}')
coord=$(echo "$line" | awk '{for(i=1;i<=NF;i++) if($i=="coord-cpu-µs/task") print $(i-1)}')

printf 'tasks:        %d empty tasks each\n' "$tasks"
printf 'dask:         %8.1f tasks/s (LocalCluster, 2 worker processes, 1 thread each)\n' "$dask"
printf 'idlepool:     %8.1f tasks/s (quorum 2: %d replicas; coordinator CPU %s µs per accepted task)\n' "$idlepool" "$((2 * tasks))" "$coord"
printf 'ratio:        %.2f (idlepool / dask)\n' "$(echo "$idlepool / $dask" | bc -l)"
