#!/usr/bin/env bash
# The Windows build's NVML binding under Wine (make wine-nvml-check):
# builds the worker's Windows test binary and testdata/fakenvml as
# nvml.dll with mingw-w64, and runs TestWindowsGPUListerOnAFakeDLL, which
# loads that DLL through LoadLibraryEx, lists its GPUs and reads their
# energy; then the energy package's Windows test binary, whose
# TestSystemEMI asks pdh.dll for the Energy Meter counters: Wine's pdh.dll
# has none, so it must report "not exposed" (IDLEPOOL_EMI=absent) and
# estimate a task's CPU energy from its CPU time (GetProcessTimes). It
# fails when a test fails or is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
for c in wine wineboot x86_64-w64-mingw32-gcc; do
  command -v $c >/dev/null || { echo "wine-nvml-check: $c is not installed (.ci/run lists the Debian packages)" >&2; exit 1; }
done
tmp=$(mktemp -d)
export WINEPREFIX="$tmp/wine" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml=;winemenubuilder.exe=d"
trap 'wineserver -k 2>/dev/null || true; rm -rf "$tmp"' EXIT
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 $GO test -c -o "$tmp/worker.test.exe" ./worker
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 $GO test -c -o "$tmp/energy.test.exe" ./energy
x86_64-w64-mingw32-gcc -shared -O1 -Wall -o "$tmp/nvml.dll" worker/testdata/fakenvml/fakenvml.c
wineboot -i > "$tmp/wineboot.log" 2>&1 || { cat "$tmp/wineboot.log" >&2; exit 1; }
# Wine 8 has no bcryptprimitives.dll, whose ProcessPrng the Go runtime
# needs: a stand-in goes into this prefix only (as in wine-check.sh).
if [ ! -e "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" ]; then
  x86_64-w64-mingw32-gcc -shared -O2 -o "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" \
    packaging/windows/bcryptprimitives.c -ladvapi32
fi
dll="Z:${tmp//\//\\}\\nvml.dll"
out=$(cd "$tmp" && IDLEPOOL_FAKE_NVML_DLL="$dll" wine ./worker.test.exe -test.run '^TestWindowsGPUListerOnAFakeDLL$' -test.v -test.count=1 2>&1 | tr -d '\r') || { echo "$out"; exit 1; }
echo "$out"
grep -q '^--- PASS: TestWindowsGPUListerOnAFakeDLL' <<< "$out" || { echo "wine-nvml-check: the test did not pass" >&2; exit 1; }
out=$(cd "$tmp" && IDLEPOOL_EMI=absent wine ./energy.test.exe -test.run '^TestSystemEMI$' -test.v -test.count=1 2>&1 | tr -d '\r') || { echo "$out"; exit 1; }
echo "$out"
grep -q '^--- PASS: TestSystemEMI' <<< "$out" || { echo "wine-nvml-check: TestSystemEMI did not pass" >&2; exit 1; }
echo "wine-nvml-check: ok"
