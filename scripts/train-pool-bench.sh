#!/bin/sh
# Rounds an hour of a training on a pool of 4 devices on this machine: a
# coordinator and four agents (idlepool join, one worker each, each its
# own owner), then `idlepool train --pool` of a training file for a few
# rounds; prints the train command's table and its time split
# (docs/benchmarks.md, Training). Everything lives in a temporary
# directory, removed at the end.
#
# Usage: scripts/train-pool-bench.sh [TRAIN.toml] [ROUNDS]
# (default examples/fashion/softmax.toml, 10 rounds; needs bin/idlepool,
# the program and the data: make build train-fashion's prerequisites).
set -eu
train=${1:-examples/fashion/softmax.toml}
rounds=${2:-10}
bin=$(pwd)/bin/idlepool
tmp=$(mktemp -d)
pids=
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
"$bin" --home "$tmp/serve" serve --listen 127.0.0.1:0 --data "$tmp/serve/data" --pool bench >"$tmp/serve.out" 2>"$tmp/serve.err" &
pids="$pids $!"
url=
for _ in $(seq 1 600); do
	url=$(sed -n 's/^idlepool: pool .* serving at \(http:[^ ]*\)$/\1/p' "$tmp/serve.out")
	[ -n "$url" ] && break
	sleep 0.1
done
[ -n "$url" ] || { echo "serve printed no URL:" >&2; cat "$tmp/serve.err" >&2; exit 1; }
for i in 1 2 3 4; do
	"$bin" --home "$tmp/agent$i" join "$url" --workers 1 --always >/dev/null 2>"$tmp/agent$i.err" &
	pids="$pids $!"
done
echo "pool at $url, 4 agents; training $train for $rounds rounds" >&2
"$bin" --home "$tmp/driver" train "$train" --pool "$url" --rounds "$rounds" --dir "$tmp/train" 2>"$tmp/train.err" || {
	tail -20 "$tmp/train.err" >&2
	exit 1
}
