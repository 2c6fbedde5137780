#!/bin/sh
# bench_ratio.sh measures the pi sampling kernel (BenchmarkKernel, ns per
# sample) natively and compiled to WebAssembly (GOOS=wasip1 GOARCH=wasm) under
# a WASI runtime, and prints both and their ratio. It uses wasmtime or wazero
# from PATH, else wazero through `go run` when the module requires it, and
# skips the WebAssembly side (exit 0) when none is available.
#
#   examples/pi/bench_ratio.sh            # 10^8 samples each
#   BENCHTIME=20000000x examples/pi/bench_ratio.sh
set -eu
cd "$(dirname "$0")/../.."
benchtime=${BENCHTIME:-100000000x}

nsop() { awk '$1 ~ /^BenchmarkKernel/ { print $3 }'; }

native=$(go test -run '^$' -bench '^BenchmarkKernel$' -benchtime "$benchtime" ./examples/pi | nsop)
echo "native: $native ns/sample"

if command -v wasmtime >/dev/null 2>&1; then
	set -- wasmtime run --
	runtime=wasmtime
elif command -v wazero >/dev/null 2>&1; then
	set -- wazero run
	runtime=wazero
elif go list -m github.com/tetratelabs/wazero >/dev/null 2>&1; then
	set -- go run github.com/tetratelabs/wazero/cmd/wazero run
	runtime="wazero (go run)"
else
	echo "wasm: skipped, no WASI runtime (wasmtime or wazero) available"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOOS=wasip1 GOARCH=wasm go test -c -o "$tmp/pi.test.wasm" ./examples/pi
wasm=$("$@" "$tmp/pi.test.wasm" -test.run '^$' -test.bench '^BenchmarkKernel$' -test.benchtime "$benchtime" | nsop)
echo "wasm, $runtime: $wasm ns/sample"
awk -v w="$wasm" -v n="$native" 'BEGIN { printf "ratio wasm/native: %.2f\n", w / n }'
