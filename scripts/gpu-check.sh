#!/usr/bin/env bash
# The GPU examples on a real NVIDIA GPU, end to end (at most 8 minutes).
#
# Needs: the NVIDIA driver (libcuda.so.1, nvidia-smi, NVML), Go, make and
# clang (the PTX build), and Fashion-MNIST (Debian's dataset-fashion-mnist);
# no CUDA toolkit. On a machine without Go or clang, bring what `make
# gpu-check-bundle` built elsewhere (bin/idlepool, bin/worker.test,
# bin/fashion-mnist, examples/*/*.wasm and examples/*/*.ptx): the script
# then uses it as it is (also with GPU_CHECK_PREBUILT=1). It
#   1. builds bin/idlepool, the example programs and their PTX, and runs
#      the worker's test of the real CUDA driver (TestRealCUDADriver);
#   2. runs gpupi through `idlepool run` on the GPU and with GPUs disabled
#      and compares the two results byte for byte;
#   3. runs optionmc (float32 on the GPU, float64 on the CPU) both ways and
#      compares the prices with the manifest's tolerance;
#   3b. trains one round of the perceptron (examples/fashion/mlp-gpu.toml,
#      60,000 examples in 32 shards, no held-out set) with `idlepool
#      train`, runs that round's grad job again on the GPU and with GPUs
#      disabled, compares the two merged updates byte for byte, and
#      measures examples/s both ways (GPU: 8 workers sharing it; CPU: a
#      worker per core, WebAssembly);
#   4. measures gpupi's samples/s on the GPU against the CPU WebAssembly
#      path on one core of the same machine, the extra cost per GPU task
#      (context creation, module load) and the time of one launch, and
#      what the GPU run's energy was as idlepool run measured it (NVML's
#      energy counter, or its power readings over time): joules per task
#      and samples per joule (the "energy" line of its output);
#   5. starts a local coordinator (`idlepool serve`) and donor (`idlepool
#      join`), shows nvidia-smi's view of our context while a task runs,
#      pauses the donor (`idlepool settings set pause=1h`) and measures how
#      long until no context of ours is left on the GPU (goal: 5 s);
#   6. prints a summary.
#
# GPUs disabled: the run's settings switch the GPU off
# (gpu.UUID.use=false), and `idlepool run --cpu-only` where the build has
# that flag, else CUDA_VISIBLE_DEVICES= in the run's environment; either
# way the script watches nvidia-smi and fails if a "CPU" run touched the
# GPU. GPU runs have the GPU allowed (gpu.UUID.use=true, gpu-programs on).
#
# Usage: scripts/gpu-check.sh [WORKDIR]   (default: a new temporary
# directory; its logs are kept for reading afterwards)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
limit_s=480 # the whole check, 8 minutes
start_s=$SECONDS

die() {
	echo "gpu-check: $*" >&2
	exit 1
}
left() { echo $((limit_s - (SECONDS - start_s))); }
# bounded CMD...: CMD with the time that is left, at most $1 seconds.
bounded() {
	local most=$1
	shift
	local t
	t=$(left)
	[ "$t" -gt 5 ] || die "out of time (8 minutes) before: $*"
	[ "$t" -lt "$most" ] || t=$most
	timeout --kill-after=10 "$t" "$@"
}

# --- 0. Is there an NVIDIA GPU? -------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep >/dev/null '^GPU '; then
	die "no NVIDIA GPU found (nvidia-smi is missing or lists no GPU): run this on a machine with an NVIDIA GPU and its driver"
fi
if ! { ldconfig -p 2>/dev/null | grep >/dev/null 'libcuda\.so\.1'; } && ! ls /usr/lib*/*/libcuda.so.1 /usr/lib*/libcuda.so.1 >/dev/null 2>&1; then
	die "no NVIDIA GPU usable: nvidia-smi sees one but libcuda.so.1 (the CUDA driver library) is not installed"
fi
bundle=(bin/idlepool examples/gpupi/gpupi.wasm examples/gpupi/gpupi.ptx examples/optionmc/optionmc.wasm examples/optionmc/optionmc.ptx
	examples/fashion/fashion-gpu.wasm examples/fashion/mlp.ptx bin/fashion-mnist/train-images-idx3-ubyte bin/fashion-mnist/train-labels-idx1-ubyte)
prebuilt=${GPU_CHECK_PREBUILT:-}
if ! command -v go >/dev/null 2>&1 || ! command -v clang >/dev/null 2>&1; then
	prebuilt=1
fi
if [ "$prebuilt" = 1 ]; then
	for f in "${bundle[@]}"; do
		[ -f "$f" ] || die "go or clang is missing here (or GPU_CHECK_PREBUILT=1) and $f was not brought: run make gpu-check-bundle where Go and clang are, then bring bin/ (with bin/fashion-mnist) and examples/*/*.wasm, *.ptx (Go 1.26: https://go.dev/dl/; Debian: apt-get install clang)"
	done
fi
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
gpu_uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
echo "gpu-check: $gpu_name ($gpu_uuid), driver $driver, $(nproc) CPU cores"

work=${1:-$(mktemp -d -t idlepool-gpu-check.XXXXXX)}
mkdir -p "$work"
echo "gpu-check: logs in $work"
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# --- 1. Build ---------------------------------------------------------------
if [ "$prebuilt" = 1 ]; then
	echo "gpu-check: using the build brought here (bin/idlepool, the programs and the PTX of make gpu-check-bundle)"
else
	echo "gpu-check: building bin/idlepool, the programs, the PTX and bin/fashion-mnist"
	bounded 240 make -s gpu-check-bundle >"$work/build.log" 2>&1 ||
		die "build failed: see $work/build.log"
fi
bin=$root/bin/idlepool
driver_test="not run (no bin/worker.test)"
if [ -x bin/worker.test ]; then
	if (cd worker && bounded 120 ../bin/worker.test -test.run '^TestRealCUDADriver$' -test.v) >"$work/driver-test.log" 2>&1; then
		if grep >/dev/null -- '--- SKIP' "$work/driver-test.log"; then
			driver_test="skipped: $(grep -A1 -- '--- SKIP' "$work/driver-test.log" | tail -1 | sed 's/^ *//')"
		else
			driver_test="passed"
		fi
	else
		driver_test="FAILED (see $work/driver-test.log)"
	fi
	echo "gpu-check: TestRealCUDADriver $driver_test"
fi

cpu_flag=()
cpu_env=()
if "$bin" run --help 2>&1 | grep >/dev/null -- '-cpu-only'; then
	cpu_flag=(--cpu-only)
	cpu_how="idlepool run --cpu-only"
else
	cpu_env=(CUDA_VISIBLE_DEVICES=)
	cpu_how="CUDA_VISIBLE_DEVICES= (this build of idlepool run has no --cpu-only)"
fi

# A process of ours on the GPU, as nvidia-smi lists compute processes: the
# PID of an idlepool process, or its name where the PID namespace hides
# it. Memory used on the GPU is the fallback signal (a context holds some
# hundreds of MiB) where nvidia-smi lists no processes at all.
mem_base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
ours_on_gpu() {
	local line pid name
	while IFS=, read -r pid name _; do
		pid=${pid// /}
		name=${name# }
		[ -n "$pid" ] || continue
		if [[ $name == *idlepool* ]] || [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$bin" ]]; then
			echo "pid $pid $name"
			return 0
		fi
	done < <(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null)
	line=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
	if [ "$((line - mem_base))" -gt 150 ]; then
		echo "memory.used ${line} MiB (${mem_base} MiB before)"
		return 0
	fi
	return 1
}
# watch FILE: until killed, append to FILE every sighting of ours on the GPU.
watch_gpu() {
	local seen
	while true; do
		if seen=$(ours_on_gpu); then echo "$seen" >>"$1"; fi
		sleep 0.2
	done
}
# run_job NAME MANIFEST gpu|cpu [EXTRA ARGS]: idlepool run --fresh --json
# into $work/NAME.json. GPU runs share one home whose settings allow the
# GPU, CPU runs one whose settings switch it off, as an owner would; each
# home keeps its compiled programs, so only a mode's first run compiles.
# Sets used_gpu=yes|no.
run_job() {
	local name=$1 manifest=$2 mode=$3
	shift 3
	local use=true home
	home=$work/home-$mode
	[ "$mode" = gpu ] || use=false
	"$bin" --home "$home" settings set "gpu.$gpu_uuid.use=$use" "gpu.$gpu_uuid.memory=0.5" \
		"gpu.$gpu_uuid.max_other=1" >"$work/$name.settings.log" 2>&1 ||
		die "idlepool settings set failed: see $work/$name.settings.log"
	if [ "$mode" = gpu ]; then
		"$bin" --home "$home" jobs gpu-programs on >>"$work/$name.settings.log" 2>&1 ||
			die "idlepool jobs gpu-programs on failed: see $work/$name.settings.log"
	fi
	local seen=$work/$name.gpu-seen
	: >"$seen"
	mem_base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
	watch_gpu "$seen" &
	local w=$!
	local rc=0
	if [ "$mode" = cpu ]; then
		bounded 180 env "${cpu_env[@]}" "$bin" --home "$home" run --fresh --json "${cpu_flag[@]}" "$@" "$manifest" \
			>"$work/$name.json" 2>"$work/$name.log" || rc=$?
	else
		bounded 180 "$bin" --home "$home" run --fresh --json "$@" "$manifest" >"$work/$name.json" 2>"$work/$name.log" || rc=$?
	fi
	kill "$w" 2>/dev/null || true
	wait "$w" 2>/dev/null || true
	[ "$rc" -eq 0 ] || die "idlepool run of $name failed (exit $rc): see $work/$name.log"
	if [ -s "$seen" ]; then used_gpu=yes; else used_gpu=no; fi
}
# precise_run NAME ...: run_job timed to the millisecond, in run_ms.
precise_run() {
	local t0 t1
	t0=$(date +%s%N)
	run_job "$@"
	t1=$(date +%s%N)
	run_ms=$(((t1 - t0) / 1000000))
}
# manifest SRC DST TASKS PARAM=VALUE: a copy of SRC beside it (so that its
# relative paths still hold) with another task count and one parameter.
manifest() {
	local src=$1 dst=$2 tasks=$3 kv=$4
	sed -e "s/^tasks = .*/tasks = $tasks/" -e "s/^${kv%%=*} = .*/${kv%%=*} = ${kv#*=}/" \
		-e 's/^time_limit = .*/time_limit = "600s"/' "$src" >"$dst"
}
json_field() { # json_field FILE KEY: the first number after "KEY":
	grep -o "\"$2\": *[-0-9.e+]*" "$1" | head -1 | sed 's/.*: *//'
}

# --- 2. gpupi: GPU and CPU, byte for byte ----------------------------------
m=$root/examples/gpupi
manifest "$m/gpupi.toml" "$m/check-bytes.toml" 16 samples=67108864 # 2^26: one launch per task
trap 'rm -f "$m"/check-*.toml "$root"/examples/optionmc/check-*.toml "$root"/examples/fashion/check-*.toml; cleanup' EXIT
echo "gpu-check: gpupi, 16 tasks of 2^26 samples, on the GPU"
run_job gpupi-gpu "$m/check-bytes.toml" gpu --workers 2
gpupi_gpu_used=$used_gpu
[ "$gpupi_gpu_used" = yes ] || die "the GPU run of gpupi used no GPU (nvidia-smi never showed a process of ours): does this build of idlepool run give solo tasks a GPU? See $work/gpupi-gpu.log"
echo "gpu-check: gpupi, the same on the CPU ($cpu_how)"
run_job gpupi-cpu "$m/check-bytes.toml" cpu --workers "$(nproc)"
[ "$used_gpu" = no ] || die "the CPU run of gpupi touched the GPU: $(head -1 "$work/gpupi-cpu.gpu-seen")"
if cmp -s "$work/gpupi-gpu.json" "$work/gpupi-cpu.json"; then
	gpupi_identical=yes
else
	diff "$work/gpupi-gpu.json" "$work/gpupi-cpu.json" >&2 || true
	die "gpupi's results differ between the GPU and the CPU (above)"
fi
gpupi_pi=$(json_field "$work/gpupi-gpu.json" pi)

# --- 3. optionmc: float32 on the GPU within tolerance of float64 ----------
o=$root/examples/optionmc
manifest "$o/optionmc.toml" "$o/check-tol.toml" 16 paths=2097152
echo "gpu-check: optionmc, 16 tasks, on the GPU and on the CPU"
run_job optionmc-gpu "$o/check-tol.toml" gpu --workers 2
opt_gpu_used=$used_gpu
run_job optionmc-cpu "$o/check-tol.toml" cpu --workers "$(nproc)"
price_gpu=$(json_field "$work/optionmc-gpu.json" mean)
price_cpu=$(json_field "$work/optionmc-cpu.json" mean)
price_bs=10.450583572185565
opt_diff=$(awk -v a="$price_gpu" -v b="$price_cpu" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.3g", d }')
awk -v d="$opt_diff" 'BEGIN { exit !(d <= 1e-4) }' ||
	die "optionmc: GPU mean price $price_gpu and CPU $price_cpu differ by $opt_diff, beyond the tolerance 1e-4"

# --- 3b. The perceptron: one training round, GPU and CPU, byte for byte -----
# The GPU variant of the perceptron (mlp-gpu.toml: fashion-gpu.wasm and
# the kernels of mlp.cu) cut to one round over the whole training set, in
# 32 shards of 1,875 examples, without the held-out set (its evaluation
# is on the CPU either way). idlepool train makes the first model and the
# round's grad job (jobs/round-0001.toml, the model an input); that job
# runs again on the GPU and with GPUs disabled, and the merged updates
# must be the same bytes.
f=$root/examples/fashion
mlp_examples=60000
sed -e 's/^rounds = .*/rounds = 1/' -e 's/^shards = .*/shards = 32/' -e "s/^batch = .*/batch = $mlp_examples/" \
	-e '/^test_images = /d' -e '/^test_labels = /d' -e 's/^time_limit = .*/time_limit = "600s"/' \
	"$f/mlp-gpu.toml" >"$f/check-mlp.toml"
echo "gpu-check: the perceptron, one round of $mlp_examples examples in 32 shards (idlepool train, GPU allowed)"
bounded 180 "$bin" --home "$work/home-gpu" train "$f/check-mlp.toml" --dir "$work/mlp-train" --workers 8 \
	>"$work/mlp-train.out" 2>"$work/mlp-train.log" || die "idlepool train of the perceptron failed: see $work/mlp-train.log"
grad=$work/mlp-train/jobs/round-0001.toml
[ -f "$grad" ] || die "idlepool train wrote no $grad: see $work/mlp-train.log"
# One task alone, on the GPU, shows the program's stderr: a GPU path that
# failed and fell back to the CPU says so there. The same task with
# --cpu-only compiles the program into the CPU runs' home, so that their
# timing below does not include it.
bounded 120 "$bin" --home "$work/home-gpu" task "$grad" --index 0 >"$work/mlp-task-gpu.log" 2>&1 ||
	die "idlepool task of the perceptron's grad job failed: see $work/mlp-task-gpu.log"
if grep >/dev/null 'GPU path failed' "$work/mlp-task-gpu.log"; then
	die "the perceptron's GPU path failed and computed on the CPU: $(grep 'GPU path failed' "$work/mlp-task-gpu.log" | head -1)"
fi
bounded 120 "$bin" --home "$work/home-cpu" task "$grad" --index 0 --cpu-only >"$work/mlp-task-cpu.log" 2>&1 ||
	die "idlepool task --cpu-only of the perceptron's grad job failed: see $work/mlp-task-cpu.log"
echo "gpu-check: the perceptron's round on the GPU (8 workers)"
precise_run mlp-gpu "$grad" gpu --workers 8
mlp_gpu_ms=$run_ms
[ "$used_gpu" = yes ] || die "the GPU run of the perceptron used no GPU (nvidia-smi never showed a process of ours): see $work/mlp-gpu.log"
echo "gpu-check: the same round on the CPU ($cpu_how, $(nproc) workers)"
precise_run mlp-cpu "$grad" cpu --workers "$(nproc)"
mlp_cpu_ms=$run_ms
[ "$used_gpu" = no ] || die "the CPU run of the perceptron touched the GPU: $(head -1 "$work/mlp-cpu.gpu-seen")"
if cmp -s "$work/mlp-gpu.json" "$work/mlp-cpu.json"; then
	mlp_identical=yes
else
	diff <(tr , '\n' <"$work/mlp-gpu.json") <(tr , '\n' <"$work/mlp-cpu.json") | head -20 >&2 || true
	die "the perceptron's merged update differs between the GPU and the CPU (above; $work/mlp-gpu.json, $work/mlp-cpu.json)"
fi
mlp_gpu_rate=$(awk -v n="$mlp_examples" -v ms="$mlp_gpu_ms" 'BEGIN { printf "%.0f", n / (ms / 1000) }')
mlp_cpu_rate=$(awk -v n="$mlp_examples" -v ms="$mlp_cpu_ms" 'BEGIN { printf "%.0f", n / (ms / 1000) }')
mlp_ratio=$(awk -v g="$mlp_gpu_rate" -v c="$mlp_cpu_rate" 'BEGIN { printf "%.1f", g / c }')

# --- 4. Figures -------------------------------------------------------------
echo "gpu-check: speed: gpupi on the GPU (16 tasks of 2^34 samples) and on one CPU core (4 of 2^25)"
manifest "$m/gpupi.toml" "$m/check-small.toml" 16 samples=1024
manifest "$m/gpupi.toml" "$m/check-big.toml" 16 samples=17179869184       # 2^34: 256 launches per task
manifest "$m/gpupi.toml" "$m/check-cpu1.toml" 4 samples=33554432          # 2^25
precise_run gpupi-small-gpu "$m/check-small.toml" gpu --workers 1
small_gpu_ms=$run_ms
precise_run gpupi-small-cpu "$m/check-small.toml" cpu --workers 1
small_cpu_ms=$run_ms
precise_run gpupi-big "$m/check-big.toml" gpu --workers 1
big_ms=$run_ms
[ "$used_gpu" = yes ] || die "the speed run used no GPU"
precise_run gpupi-cpu1 "$m/check-cpu1.toml" cpu --workers 1
cpu1_ms=$run_ms
gpu_rate=$(awk -v ms="$big_ms" 'BEGIN { printf "%.3g", 16 * 2^34 / (ms / 1000) }')
cpu_rate=$(awk -v ms="$cpu1_ms" 'BEGIN { printf "%.3g", 4 * 2^25 / (ms / 1000) }')
ratio=$(awk -v g="$gpu_rate" -v c="$cpu_rate" 'BEGIN { printf "%.0f", g / c }')
task_extra_ms=$(awk -v g="$small_gpu_ms" -v c="$small_cpu_ms" 'BEGIN { printf "%.0f", (g - c) / 16 }')
launch_ms=$(awk -v b="$big_ms" -v s="$small_gpu_ms" 'BEGIN { printf "%.2f", (b - s) / (16 * 256) }')
# idlepool run prints an "energy" line where a counter was read (nothing
# where the energy is only estimated): its tasks per joule give the
# joules per task.
energy_line=$(grep -m1 '^energy ' "$work/gpupi-big.log" || true)
if [ -n "$energy_line" ]; then
	energy_per_task=$(echo "$energy_line" | grep -o '[0-9.e+-]* tasks per joule' | awk '{ if ($1 > 0) printf "%.3g J per task", 1 / $1 }')
else
	energy_line="no energy line: no counter was read (see $work/gpupi-big.log and idlepool status's energy part)"
	energy_per_task="unknown"
fi

# --- 5. NVML's view of a donor's context, and a pause ----------------------
echo "gpu-check: a local pool: serve, join (GPU allowed), a long gpupi job, then pause"
manifest "$m/gpupi.toml" "$m/check-long.toml" 64 samples=274877906944 # 2^38 per task
coord=$work/coord
donor=$work/donor
owner=$work/owner
mkdir -p "$coord" "$donor" "$owner"
"$bin" --home "$coord" serve --listen 127.0.0.1:0 --data "$coord/data" >"$coord/serve.out" 2>"$coord/serve.log" &
pids+=($!)
url=
for _ in $(seq 1 600); do
	url=$(grep -h -o 'http://127\.0\.0\.1:[0-9]*[^ ]*' "$coord/serve.out" "$coord/serve.log" 2>/dev/null | head -1) || true
	[ -n "$url" ] && break
	sleep 0.1
done
[ -n "$url" ] || die "idlepool serve printed no pool URL: see $coord/serve.log"
mem_base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
"$bin" --home "$donor" settings set hours=always idle_for=0 max_other_cpu=100% compute=1h \
	"gpu.$gpu_uuid.use=true" "gpu.$gpu_uuid.memory=0.5" "gpu.$gpu_uuid.max_other=1" >"$donor/settings.log" 2>&1 ||
	die "idlepool settings set failed: see $donor/settings.log"
"$bin" --home "$donor" jobs gpu-programs on >>"$donor/settings.log" 2>&1 || die "idlepool jobs gpu-programs on failed"
"$bin" --home "$donor" join "$url" --workers 1 >"$donor/join.out" 2>"$donor/join.log" &
pids+=($!)
bounded 60 "$bin" --home "$owner" submit "$m/check-long.toml" --pool "$url" >"$owner/submit.log" 2>&1 ||
	die "idlepool submit failed: see $owner/submit.log"
seen=
for _ in $(seq 1 900); do # up to 3 minutes for the donor to lease a task and start it
	if seen=$(ours_on_gpu); then break; fi
	[ "$(left)" -gt 60 ] || break
	sleep 0.2
done
[ -n "$seen" ] || die "no context of ours appeared on the GPU while the donor computed: see $donor/join.log"
echo "gpu-check: nvidia-smi during the task: $seen"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >"$work/nvidia-smi-during.txt" 2>&1 || true
cat "$work/nvidia-smi-during.txt"
t0=$(date +%s%N)
"$bin" --home "$donor" settings set pause=1h >>"$donor/settings.log" 2>&1 || die "idlepool settings set pause=1h failed"
released_ms=
for _ in $(seq 1 300); do # look for 30 s; the goal is 5
	if ! ours_on_gpu >/dev/null; then
		released_ms=$((($(date +%s%N) - t0) / 1000000))
		break
	fi
	sleep 0.1
done
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >"$work/nvidia-smi-after.txt" 2>&1 || true
cleanup
pids=()

# --- 6. Summary ---------------------------------------------------------------
pause_line=${released_ms:+${released_ms} ms}
echo
echo "gpu-check summary ($gpu_name, driver $driver)"
echo "  gpupi GPU vs CPU, 16 x 2^26 samples: byte-identical=$gpupi_identical (pi $gpupi_pi)"
echo "  CPU runs: $cpu_how"
echo "  optionmc mean price: GPU $price_gpu (GPU used: $opt_gpu_used), CPU $price_cpu, |diff| $opt_diff (tolerance 1e-4); Black-Scholes $price_bs"
echo "  perceptron, one round of $mlp_examples examples (32 shards): merged update GPU vs CPU byte-identical=$mlp_identical"
echo "  perceptron examples/s (the whole grad job, idlepool run): GPU $mlp_gpu_rate (8 workers, $mlp_gpu_ms ms), CPU $mlp_cpu_rate ($(nproc) workers, WebAssembly, $mlp_cpu_ms ms): ${mlp_ratio}x"
echo "  gpupi on the GPU: $gpu_rate samples/s (16 x 2^34 in $big_ms ms, one worker)"
echo "  gpupi on one CPU core (WebAssembly): $cpu_rate samples/s (4 x 2^25 in $cpu1_ms ms)"
echo "  GPU / one CPU core: ${ratio}x (goal: 100x)"
echo "  extra cost per GPU task (context, module load): ${task_extra_ms} ms (16 tiny tasks: $small_gpu_ms ms GPU, $small_cpu_ms ms CPU)"
echo "  one launch of 2^26 samples: about ${launch_ms} ms"
echo "  gpupi's energy on the GPU (16 x 2^34, as idlepool run measured it): $energy_per_task; $energy_line"
echo "  pause to no context of ours on the GPU: ${pause_line:-not within 30 s} (goal: 5 s)"
echo "  worker's test of the real CUDA driver (TestRealCUDADriver): $driver_test"
fail=0
case $driver_test in FAILED*)
	echo "gpu-check: FAIL: TestRealCUDADriver failed" >&2
	fail=1
	;;
esac
[ "$ratio" -ge 100 ] || {
	echo "gpu-check: FAIL: GPU speed-up ${ratio}x is below 100x" >&2
	fail=1
}
if [ -z "$released_ms" ] || [ "$released_ms" -gt 5000 ]; then
	echo "gpu-check: FAIL: the context was not released within 5 s of the pause" >&2
	fail=1
fi
[ "$opt_gpu_used" = yes ] || {
	echo "gpu-check: FAIL: the optionmc GPU run used no GPU" >&2
	fail=1
}
echo "gpu-check: took $((SECONDS - start_s)) s"
exit "$fail"
