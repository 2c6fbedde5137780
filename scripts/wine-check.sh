#!/usr/bin/env bash
# Runs the Windows build under Wine, on a private X server, with a Wine
# prefix of its own in a temporary directory.
#
# Usage: scripts/wine-check.sh [cli|installer|update|train|all]   (default: all)
#
# cli (make wine-cli-check, part of make test): the console program alone,
# bin/windows/unsigned/idlepool.exe, not installed:
#   1. `idlepool.exe run examples\pi\pi.toml --json` prints the same bytes
#      as the Linux build (job ID, seeds and merge agree across OSes);
#      `idlepool.exe status --json` knows the input idle time from
#      GetLastInputInfo and the power from GetSystemPowerStatus;
#   2. `idlepool.exe join` against a Linux coordinator on 127.0.0.1, beside
#      a Linux agent of another owner: the tasks reach quorum, the job's
#      result through the pool equals `run`'s, the Windows device's
#      receipts are confirmed.
# installer (make wine-test runs both parts): the signed installer and
# the tray app:
#   3. an older installer (the same programs, version 0.0.1) installs
#      silently, per user: files under %LOCALAPPDATA%\Programs\idlepool,
#      the Start menu entry, the Run value, the Uninstall entry;
#   4. its idlepool.exe joins a Linux coordinator alone and computes: its
#      results wait for a second replica (pending receipts); a setting is
#      changed;
#   5. the current installer installs over it: the setting and the pending
#      receipts are still there; the new idlepool.exe joins again beside a
#      Linux agent of another owner and its receipts are confirmed;
#   6. the installed tray app starts as the Run value starts it: data in
#      %APPDATA%/%LOCALAPPDATA%, the local API answers only with its token,
#      a second start finds the first (single instance), its engine
#      computes; the Settings window opens (screenshot); synthetic input
#      (xdotool) makes the engine step aside; killing the app kills its
#      workers (Job Object);
#   7. the silent uninstall stops the app and leaves no program file, no
#      Start menu or Run or Uninstall entry and no process, and keeps the
#      owner's data; a second install with /NOAUTOSTART writes no Run
#      value, and `uninstall /S /PURGE` removes the data too.
# update (make wine-update-check; all runs it last): the self-update's
# Windows path:
#   8. an installer of 0.0.1 installs silently; a release 9.9.9 whose file
#      is the installer (the same programs, the installer's version 9.9.9),
#      signed with test keys, is served on 127.0.0.1; the installed
#      idlepool.exe, trusting the release's root, finds it with `update`,
#      verifies it and runs it silently for the user (/S /RESTART): the
#      Uninstall entry says 9.9.9, the setting update_url is kept, and the
#      installer started the tray app again.
# train (make wine-train-check; all runs it too): a training's rounds
# give the same bytes on Windows:
#   9. `idlepool.exe train` on Fashion-MNIST, softmax regression (3
#      rounds of a 600-image batch) and the perceptron (128 hidden units,
#      2 rounds of 300 images), each round in 3 shards, the held-out set
#      (10,000 images) evaluated after every round in 4 tasks, and
#      `idlepool train` of the Linux build, the same training files:
#      every round's model file, merged update and merged evaluation are
#      the same bytes, and the lineages (job IDs, model digests, loss,
#      accuracy, held-out loss) are equal once the wall times are left
#      out. Needs examples/fashion/fashion.wasm
#      and bin/fashion-mnist (make train-fashion's prerequisites).
#
# Needs wine (64-bit), x86_64-w64-mingw32-gcc (the bcryptprimitives.dll
# stand-in below), Xvfb, dbus-daemon, bin/idlepool, bin/panel,
# examples/pi/pi.wasm and bin/windows/unsigned/idlepool.exe (make
# wine-cli-check builds them); the installer part also bin/windows (make
# windows-installer), xdotool, ImageMagick, curl and makensis.
# WINE_SHOTS=DIR keeps the screenshots (settings-wine.png: the window;
# desktop-wine.png: the whole X screen) in DIR; they are otherwise written
# to the temporary directory only.
set -euo pipefail
cd "$(dirname "$0")/.."
win=bin/windows
mode=${1:-all}
case $mode in
  cli | installer | update | train | all) ;;
  *) echo "wine-check: unknown part '$mode': give cli, installer, update, train or all" >&2; exit 2 ;;
esac
has() { [ "$mode" = all ] || [ "$mode" = "$1" ]; }
exe=$win/unsigned/idlepool.exe
need=(bin/idlepool bin/panel)
[ "$mode" = train ] || need+=(examples/pi/pi.wasm)
cmds=(wine wineserver x86_64-w64-mingw32-gcc Xvfb dbus-daemon)
hint="make wine-cli-check"
if has cli || has train; then need+=("$exe"); fi
if has train; then
  need+=(examples/fashion/fashion.wasm bin/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte)
  cmds+=(python3)
  [ "$mode" = train ] && hint="make wine-train-check"
fi
if has installer || has update; then
  setup=$(ls $win/idlepool-*-setup.exe 2>/dev/null | head -1)
  need+=("${setup:-$win/idlepool-VERSION-setup.exe}" "$win/idlepool.exe" "$win/idlepool-tray.exe" "$win/idlepool-window.exe" "$win/res/idlepool.ico")
  cmds+=(xdotool import curl makensis python3)
  hint="make wine-test"
fi
for p in "${need[@]}"; do
  [ -e "$p" ] || { echo "wine-check: $p is missing: $hint builds it" >&2; exit 1; }
done
for c in "${cmds[@]}"; do
  command -v $c >/dev/null || { echo "wine-check: $c is not installed (.ci/run lists the Debian packages)" >&2; exit 1; }
done
started=$(date +%s)
step() { echo "wine-check [$(( $(date +%s) - started ))s]: $*"; }

. scripts/session.sh
session_start wine-check
shots=${WINE_SHOTS:-$tmp}
mkdir -p "$shots"

# Wine: a prefix of our own, no debug output, no Mono/Gecko installers.
# winemenubuilder off: the Start menu entry must not leak into the real
# desktop's menus.
export WINEPREFIX="$tmp/wine" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml=;winemenubuilder.exe=d"
wine_cleanup() {
  WINEPREFIX="$tmp/wine" wineserver -k 2>/dev/null || true
  session_cleanup
}
trap wine_cleanup EXIT
step "wineboot"
wineboot -i > "$tmp/wineboot.log" 2>&1 || fail "wineboot failed"
# Wine 8 (Debian 12) has no bcryptprimitives.dll, whose ProcessPrng the Go
# runtime needs; Wine 9 has. A stand-in goes into this prefix only.
if [ ! -e "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" ]; then
  x86_64-w64-mingw32-gcc -shared -O2 -o "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" \
    packaging/windows/bcryptprimitives.c -ladvapi32 || fail "could not build the bcryptprimitives.dll stand-in"
fi
users="$WINEPREFIX/drive_c/users/$(whoami)"
appdata="$users/AppData/Roaming"
localappdata="$users/AppData/Local"
instdir="$localappdata/Programs/idlepool"
lnk="$appdata/Microsoft/Windows/Start Menu/Programs/idlepool.lnk"
runkey='HKCU\Software\Microsoft\Windows\CurrentVersion\Run'
uninstkey='HKCU\Software\Microsoft\Windows\CurrentVersion\Uninstall\idlepool'
winpath() { local p; p=$(readlink -f "$1"); echo "Z:${p//\//\\}"; }
regvalue() { wine reg query "$1" /v "$2" 2>/dev/null | tr -d '\r' | sed -n "s/^ *$2 *REG_SZ *//p"; }
regkey() { wine reg query "$1" > /dev/null 2>&1; }
# Processes of the installed programs, as Linux sees Wine's processes.
procs() { pgrep -f "Programs.idlepool.idlepool" || true; }

# The small job both parts submit: 6 tasks, each computed by two owners.
write_job() {
  cat > "$1" <<EOF
name = "$2"
program = "$PWD/examples/pi/pi.wasm"
[split]
rule = "range"
tasks = 6
[split.params]
samples = 20000
[[merge]]
field = "inside"
rule = "sum"
[[merge]]
field = "samples"
rule = "sum"
[policy]
time_limit = "60s"
# Short: the check kills agents in the middle of a task (the upgrade),
# and their leases must end in seconds, not in the default 5 minutes.
lease_timeout = "15s"
EOF
}
submit() {
  write_job "$tmp/$1.toml" "$1"
  bin/idlepool --home "$tmp/submitter" submit "$tmp/$1.toml" --pool "$url" > "$tmp/submit-$1.log" 2>&1 || fail "submit of $1 failed"
}
# counts KIND EXE [ARGS]: the sum of the device's receipts of KIND
# (pending, confirmed) in `history --json`.
counts() {
  local kind=$1
  shift
  wine "$@" history --json 2>/dev/null | tr -d '\r' | grep -o "\"$kind\": *[0-9]*" | grep -o '[0-9]*$' | awk '{s+=$1} END {print s+0}'
}
# quorum NAME EXE [ARGS]: a Linux agent of another owner joins beside the
# Windows agent (already started); job NAME must finish with run's result,
# the ledger verify and the Windows device hold 6 confirmed receipts.
quorum() {
  local name=$1 short c ljoin
  shift
  bin/idlepool --home "$tmp/linux-agent" join "$url" --workers 1 --always > /dev/null 2> "$tmp/ljoin.log" &
  ljoin=$!
  pids+=("$ljoin")
  short=$(grep -o '[0-9a-f]\{12\}' "$tmp/submit-$name.log" | head -1)
  timeout 600 bin/idlepool --home "$tmp/submitter" result "$short" --pool "$url" --json > "$tmp/pool-result.json" 2> "$tmp/result.log" ||
    fail "the job did not finish in the pool"
  bin/idlepool --home "$tmp/solo" run "$tmp/$name.toml" --json > "$tmp/solo-result.json" 2> /dev/null || fail "run of the small job failed"
  cmp "$tmp/pool-result.json" "$tmp/solo-result.json" || fail "the pool's result differs from run's"
  bin/idlepool ledger verify "$url" > "$tmp/ledger.log" 2>&1 || fail "the ledger does not verify"
  for _ in $(seq 120); do [ "$(counts confirmed "$@")" -ge 6 ] 2>/dev/null && break; sleep 1; done
  c=$(counts confirmed "$@")
  [ "${c:-0}" -ge 6 ] || fail "the Windows device has ${c:-0} confirmed receipts, want 6 (quorum with the Linux agent)"
  step "quorum: the pool's result equals run's; the Windows device holds $c confirmed receipts"
  { wineserver -k; wineserver -w; } 2>/dev/null || true # stops the Windows agent (every process of the prefix)
  kill "$ljoin" 2>/dev/null || true
  wait "$ljoin" 2>/dev/null || true
}
[ "$mode" = train ] || pool_start

if has cli; then
  # 1. The same bytes as the Linux build.
  step "pi: Linux and Windows builds, 10^9 samples each"
  bin/idlepool --home "$tmp/linux-run" run examples/pi/pi.toml --json > "$tmp/pi-linux.json" 2> "$tmp/pi-linux.log" ||
    fail "the Linux build's run failed"
  step "pi: the Linux build is done"
  wine "$exe" --home "$(winpath "$tmp")\\windows-run" run 'examples\pi\pi.toml' --json > "$tmp/pi-windows.json" 2> "$tmp/pi-windows.log" ||
    fail "idlepool.exe run failed under Wine"
  cmp "$tmp/pi-linux.json" "$tmp/pi-windows.json" || { diff "$tmp/pi-linux.json" "$tmp/pi-windows.json" >&2 || true; fail "idlepool.exe run --json differs from the Linux build's"; }
  step "pi: same $(wc -c < "$tmp/pi-linux.json") bytes from both ($(grep -o '"job": *"[0-9a-f]\{12\}' "$tmp/pi-linux.json" | head -1))"

  # The signals the policy reads, as Windows gives them: input idle time
  # from GetLastInputInfo and power from GetSystemPowerStatus must be known.
  wine "$exe" --home "$(winpath "$tmp")\\windows-run" status --json 2> "$tmp/status-windows.log" | tr -d '\r\n' > "$tmp/status-windows.json" ||
    fail "idlepool.exe status --json failed under Wine: $(cat "$tmp/status-windows.log")"
  # reading NAME: the JSON object of signal NAME, on one line.
  reading() { grep -o "\"$1\": *{[^{}]*\({[^{}]*}[^{}]*\)*}" "$tmp/status-windows.json" || true; }
  reading input_idle_seconds | grep >/dev/null '"known": *true.*"source": *"GetLastInputInfo"' ||
    fail "under Wine the input idle time is not known from GetLastInputInfo: $(reading input_idle_seconds)"
  reading power | grep >/dev/null '"known": *true, *"value": *{ *"on_battery"' ||
    fail "under Wine the power (GetSystemPowerStatus) is not known: $(reading power)"
  step "signals under Wine: input idle from GetLastInputInfo, power from GetSystemPowerStatus ($(reading power | grep -o '"on_battery": *[a-z]*, *"has_battery": *[a-z]*' | tr -s ' '))"
  # Not exercised under Wine (the agent goes on without them): the CPU
  # temperature, from gopsutil's WMI query of MSAcpi_ThermalZoneTemperature
  # in root\wmi, which fails under Wine 8 (no answer within the probe's
  # 500 ms, or 0x80020005 DISP_E_TYPEMISMATCH); and the full-screen game
  # sign: Wine 8's shell32 SHQueryUserNotificationState is a stub that
  # always answers QUNS_ACCEPTS_NOTIFICATIONS, so a full-screen program
  # never shows as a game (the Linux signs are tested under Xvfb by the
  # idle package's tests).
  step "not exercised: the CPU temperature (gopsutil's WMI query of MSAcpi_ThermalZoneTemperature in root\\wmi fails under Wine: $(reading max_temperature_c | sed -n 's/.*"error": *"\([^"]*\)".*/\1/p'))"
  step "not exercised: the full-screen game sign (Wine's SHQueryUserNotificationState is a stub that always answers QUNS_ACCEPTS_NOTIFICATIONS)"

  # 2. The console program, not installed, reaches quorum with a Linux
  #    agent of another owner.
  submit pi-wine-cli
  whome="$(winpath "$tmp")\\windows-agent"
  wine "$exe" --home "$whome" join "$url" --workers 1 --always > "$tmp/wjoin-cli.out" 2> "$tmp/wjoin-cli.log" &
  pids+=($!)
  quorum pi-wine-cli "$exe" --home "$whome"
fi

if has installer; then
  # 3. An older build, installed silently.
  step "building an older installer (0.0.1) to upgrade from"
  makensis -V1 -DFAST -DVERSION=0.0.1 -DBUILD=1 -DBINDIR="$PWD/$win" -DOUTFILE="$tmp/old-setup.exe" \
    -DICON="$PWD/$win/res/idlepool.ico" packaging/windows/idlepool.nsi > "$tmp/makensis.log" 2>&1 || fail "makensis failed"
  step "silent install of 0.0.1"
  wine "$tmp/old-setup.exe" /S > "$tmp/install-old.log" 2>&1 || fail "the 0.0.1 installer failed"
  for f in idlepool.exe idlepool-tray.exe idlepool-window.exe uninstall.exe; do [ -f "$instdir/$f" ] || fail "no $f in $instdir"; done
  [ -f "$lnk" ] || fail "no Start menu entry $lnk"
  want="\"C:\\users\\$(whoami)\\AppData\\Local\\Programs\\idlepool\\idlepool-tray.exe\""
  got=$(regvalue "$runkey" idlepool-tray)
  [ "$got" = "$want" ] || fail "Run value idlepool-tray is '$got', want '$want'"
  [ "$(regvalue "$uninstkey" DisplayVersion)" = 0.0.1 ] || fail "the Uninstall entry does not say 0.0.1"
  step "installed: $(ls "$instdir" | tr '\n' ' '), Start menu entry, Run value $got"
  cli="$instdir/idlepool.exe"

  # 4. The installed CLI (default home: %APPDATA%) computes alone; nobody
  #    confirms its results yet.
  wine "$cli" settings set idle_for=7m > "$tmp/settings.log" 2>&1 || fail "settings set under Wine failed"
  submit pi-wine
  wine "$cli" join "$url" --workers 1 --always > "$tmp/wjoin1.out" 2> "$tmp/wjoin1.log" &
  pids+=($!)
  for _ in $(seq 120); do [ "$(counts pending "$cli")" -gt 0 ] 2>/dev/null && break; sleep 1; done
  # Counted once the agent is stopped: a running one may record more.
  { wineserver -k; wineserver -w; } 2>/dev/null || true # stops the agent (and every process of the prefix)
  p=$(counts pending "$cli")
  [ "${p:-0}" -gt 0 ] || fail "the Windows agent recorded no pending receipt"
  step "the Windows agent computed alone: $p pending receipts"

  # 5. The current build over the older one.
  step "silent install of $(basename "$setup") over 0.0.1"
  wine "$setup" /S > "$tmp/install-new.log" 2>&1 || fail "the installer failed"
  [ "$(regvalue "$uninstkey" DisplayVersion)" != 0.0.1 ] || fail "the Uninstall entry still says 0.0.1"
  wine "$cli" settings --json 2>/dev/null | tr -d '\r' | grep >/dev/null '"idle_for": *"7m' || fail "the upgrade lost the setting idle_for=7m"
  [ "$(counts pending "$cli")" = "$p" ] || fail "the upgrade changed the pending receipts from $p to $(counts pending "$cli")"
  step "upgrade kept idle_for=7m and $p pending receipts"
  wine "$cli" join "$url" --workers 1 --always > "$tmp/wjoin2.out" 2> "$tmp/wjoin2.log" &
  pids+=($!)
  quorum pi-wine "$cli"

  # 6. The tray app, as the Run value starts it, with a longer job to compute.
  write_job "$tmp/long.toml" pi-wine-long
  sed -i -e 's/^tasks = .*/tasks = 400/' -e 's/^samples = .*/samples = 50000000/' -e '/^lease_timeout/d' "$tmp/long.toml" # its held task outlives a short lease
  bin/idlepool --home "$tmp/submitter" submit "$tmp/long.toml" --pool "$url" > "$tmp/submit-long.log" 2>&1 || fail "submit of the long job failed"
  wine "$cli" settings set idle_for=20s max_other_cpu=100% max_temperature=0 > /dev/null 2>&1 || fail "settings set failed"
  wine "$instdir/idlepool-tray.exe" > "$tmp/tray.out" 2> "$tmp/tray.log" &
  pids+=($!)
  # The address file may still be the killed agent's: wait until it names a
  # listener that answers with its token.
  api="$appdata/idlepool/data/agent.sock"
  code=""
  for _ in $(seq 120); do
    base=$(sed -n 1p "$api" 2>/dev/null | tr -d '\r')
    token=$(sed -n 2p "$api" 2>/dev/null | tr -d '\r')
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$base/v1/status" 2>/dev/null || true)
    [ "$code" = 200 ] && break
    sleep 1
  done
  [ "$code" = 200 ] || fail "the tray's engine does not answer on its local API ($api: ${base:-no address}, HTTP $code)"
  [ -d "$localappdata/idlepool" ] || fail "no cache directory in %LOCALAPPDATA%"
  code=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/status")
  [ "$code" = 403 ] || fail "the local API answered HTTP $code without its token, want 403"
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer 0000" "$base/v1/status")
  [ "$code" = 403 ] || fail "the local API answered HTTP $code to a wrong token, want 403"
  step "tray app: data in %APPDATA%\\idlepool, cache in %LOCALAPPDATA%\\idlepool, local API $base only with its token"
  wine "$instdir/idlepool-tray.exe" > /dev/null 2> "$tmp/tray2.log" || fail "a second tray app failed"
  grep -q 'already running' "$tmp/tray2.log" || fail "a second tray app did not find the first: $(cat "$tmp/tray2.log")"
  step "single instance: $(head -1 "$tmp/tray2.log")"
  status() { wine "$cli" status 2>&1 | tr -d '\r' | sed -n 's/^donor *//p'; }
  wine "$instdir/idlepool-window.exe" settings > /dev/null 2> "$tmp/window.log" &
  pids+=($!)
  wid=""
  for _ in $(seq 120); do wid=$(xdotool search --name 'idlepool settings' 2>/dev/null | head -1) && [ -n "$wid" ] && break; sleep 1; done
  [ -n "$wid" ] || fail "no Settings window appeared"
  sleep 3 # let the window paint before the picture (the picture only)
  # Fyne draws with OpenGL into a child window: the picture is the
  # screen's, cut to the window's place.
  import -window root "$shots/desktop-wine.png"
  eval "$(xdotool getwindowgeometry --shell "$wid")"
  convert "$shots/desktop-wine.png" -crop "${WIDTH}x${HEIGHT}+${X}+${Y}" +repage "$shots/settings-wine.png"
  step "Settings window $wid; screenshot $shots/settings-wine.png"

  # Input in the Wine desktop: the engine steps aside. A window that opens
  # under the mouse pointer is input to Wine too (the pointer enters it),
  # so the pointer goes to a corner no window covers, and the engine must
  # first compute after idle_for (20 s) without input.
  wpid() { pgrep -f 'Programs.idlepool.idlepool-tray.exe worker' | head -1; }
  cputicks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null; }
  xdotool mousemove 1279 799
  for _ in $(seq 180); do status | grep >/dev/null '^computing' && break; sleep 1; done
  status | grep >/dev/null '^computing' || fail "the tray's engine does not compute after 20 s without input: $(status)"
  w=$(wpid)
  [ -n "$w" ] || fail "the tray app's engine computes without a worker process"
  t0=$(cputicks "$w")
  for _ in $(seq 120); do [ "$(cputicks "$w")" != "$t0" ] && break; sleep 1; done
  [ "$(cputicks "$w")" != "$t0" ] || fail "the worker $w uses no CPU while the engine computes"
  step "engine computing after 20 s without input (worker $w running)"
  # Not observable under Wine: the worker starts at IDLE_PRIORITY_CLASS
  # (CreateProcess accepts it), but Wine 8 keeps Windows priority classes
  # in wineserver and does not pass them on to Linux.
  step "not observable: IDLE_PRIORITY_CLASS (Wine keeps it to itself; the worker's Linux nice value is $(awk '{print $19}' "/proc/$w/stat" 2>/dev/null))"
  for i in $(seq 30); do
    xdotool mousemove --window "$wid" $(( 50 + i * 5 )) $(( 60 + i * 3 )) 2>/dev/null || true
    status | grep >/dev/null '^computing' || break
  done
  after=$(status | head -1)
  echo "$after" | grep >/dev/null 'active' || fail "input in the Wine desktop (xdotool) did not make the engine step aside: $after"
  # Stepping aside suspends the worker (NtSuspendProcess): its CPU time
  # stops.
  t1=$(cputicks "$w"); sleep 3; t2=$(cputicks "$w")
  [ -n "$t1" ] && [ "$t1" = "$t2" ] || fail "the worker $w went on computing after the engine stepped aside (CPU ticks $t1 then $t2)"
  step "after xdotool input: $after; the worker $w is suspended"
  grep -q 'Cannot suspend running tasks' "$tmp/tray.log" && fail "NtSuspendProcess failed under Wine"
  grep -q 'Worker may outlive' "$tmp/tray.log" && fail "a worker could not join the Job Object"

  # Killing the app kills its workers.
  for _ in $(seq 120); do pgrep -f 'Programs.idlepool.idlepool-tray.exe worker' > /dev/null && break; sleep 1; done
  workers=$(pgrep -f 'Programs.idlepool.idlepool-tray.exe worker' | tr '\n' ' ')
  [ -n "$workers" ] || fail "the tray app started no workers"
  main=$(pgrep -f 'Programs.idlepool.idlepool-tray.exe$' | head -1)
  [ -n "$main" ] || fail "no tray process"
  kill -9 "$main"
  wait "$main" 2>/dev/null || true
  for _ in $(seq 120); do pgrep -f 'Programs.idlepool.idlepool-tray.exe worker' > /dev/null || break; sleep 1; done
  pgrep -f 'Programs.idlepool.idlepool-tray.exe worker' > /dev/null && fail "the workers ($workers) outlived the killed tray app"
  step "killed the tray app ($main): its workers ($workers) ended with it"

  # 7. Uninstall.
  wine "$instdir/idlepool-tray.exe" > /dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 120); do [ -n "$(procs)" ] && break; sleep 1; done
  wine "$instdir/uninstall.exe" /S > /dev/null 2>&1 || fail "the uninstaller failed"
  for _ in $(seq 120); do [ -d "$instdir" ] || break; sleep 1; done
  [ -d "$instdir" ] && fail "the uninstall left $(ls "$instdir")"
  [ -e "$lnk" ] && fail "the uninstall left the Start menu entry"
  [ -n "$(regvalue "$runkey" idlepool-tray)" ] && fail "the uninstall left the Run value"
  regkey "$uninstkey" && fail "the uninstall left the Uninstall entry"
  [ -n "$(procs)" ] && fail "the uninstall left processes: $(procs)"
  [ -f "$appdata/idlepool/device.key" ] || [ -d "$appdata/idlepool" ] || fail "the silent uninstall deleted the owner's data"
  step "uninstalled: no files, entries or processes; the owner's data kept"
  wine "$setup" /S /NOAUTOSTART > /dev/null 2>&1 || fail "the installer with /NOAUTOSTART failed"
  [ -z "$(regvalue "$runkey" idlepool-tray)" ] || fail "/NOAUTOSTART wrote the Run value"
  wine "$instdir/uninstall.exe" /S /PURGE > /dev/null 2>&1 || fail "the uninstaller failed"
  for _ in $(seq 120); do [ -d "$instdir" ] || [ -d "$appdata/idlepool" ] || break; sleep 1; done
  [ -d "$appdata/idlepool" ] && fail "uninstall /PURGE kept the owner's data"
  step "/NOAUTOSTART: no Run value; uninstall /PURGE: data removed"
fi
if has update; then
  # 8. The self-update runs a signed installer silently.
  { wineserver -k; wineserver -w; } 2>/dev/null || true
  [ -d "$instdir" ] && { wine "$instdir/uninstall.exe" /S /PURGE > /dev/null 2>&1 || true; }
  step "update: installing 0.0.1, and a release 9.9.9 of the installer on 127.0.0.1"
  for v in 0.0.1 9.9.9; do
    makensis -V1 -DFAST -DVERSION=$v -DBUILD=1 -DBINDIR="$PWD/$win" -DOUTFILE="$tmp/idlepool-$v-setup.exe" \
      -DICON="$PWD/$win/res/idlepool.ico" packaging/windows/idlepool.nsi > "$tmp/makensis-$v.log" 2>&1 || fail "makensis $v failed"
  done
  wine "$tmp/idlepool-0.0.1-setup.exe" /S > "$tmp/install-u.log" 2>&1 || fail "the 0.0.1 installer failed"
  [ "$(regvalue "$uninstkey" DisplayVersion)" = 0.0.1 ] || fail "the Uninstall entry does not say 0.0.1"
  printf '## 9.9.9\n\nThe release the Wine check updates to.\n' > "$tmp/CHANGELOG.md"
  go run ./scripts/release -dir "$tmp/rel" -test-keys "$tmp/rel-keys" -changelog "$tmp/CHANGELOG.md" -version 9.9.9 \
    "$tmp/idlepool-9.9.9-setup.exe:windows-installer:windows:amd64" > "$tmp/release.log" 2>&1 || fail "signing the release failed: $(cat "$tmp/release.log")"
  cp "$tmp/rel/metadata/1.root.json" "$instdir/release-root.json" # as make release builds it in
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  python3 -m http.server --bind 127.0.0.1 --directory "$tmp/rel" "$port" > "$tmp/http.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/metadata/timestamp.json" > /dev/null && break; sleep 0.2; done
  cli="$instdir/idlepool.exe"
  wine "$cli" settings set update_url="http://127.0.0.1:$port" update_download=unlimited > "$tmp/settings-u.log" 2>&1 || fail "settings set update_url failed"
  # The installer it starts stops the running idlepool programs, this
  # one too: its exit status and last words may be cut short.
  wine "$cli" update > "$tmp/update.out" 2>&1 || true
  for _ in $(seq 180); do [ "$(regvalue "$uninstkey" DisplayVersion)" = 9.9.9 ] && break; sleep 1; done
  [ "$(regvalue "$uninstkey" DisplayVersion)" = 9.9.9 ] ||
    fail "after idlepool.exe update the Uninstall entry says $(regvalue "$uninstkey" DisplayVersion), want 9.9.9; it said: $(tr -d '\r' < "$tmp/update.out")"
  for _ in $(seq 120); do pgrep -f 'Programs.idlepool.idlepool-tray.exe$' > /dev/null && break; sleep 1; done
  pgrep -f 'Programs.idlepool.idlepool-tray.exe$' > /dev/null || fail "the installer (/RESTART) did not start the tray app again"
  wine "$cli" settings > "$tmp/settings-after.log" 2>&1 || true
  tr -d '\r' < "$tmp/settings-after.log" | grep -q "^update_url *http://127.0.0.1:$port" || fail "the update lost the setting update_url"
  step "update: $(tr -d '\r' < "$tmp/update.out" | tail -1); the Uninstall entry says 9.9.9, the tray app runs again, update_url kept"
fi
if has train; then
  # 9. A training's rounds: the same bytes from idlepool.exe and from the
  #    Linux build, for softmax regression and for the perceptron. The
  #    training files name their program and data by relative paths,
  #    which both read the same.
  td="$tmp/train"
  mkdir -p "$td"
  cp examples/fashion/fashion.wasm "$td/"
  ln -s "$PWD/bin/fashion-mnist" "$td/data"
  # train_both NAME ROUNDS PARAMS: trains NAME for ROUNDS rounds (3
  # shards, the held-out set evaluated after every round in 4 tasks) with
  # both builds and compares every round's files and the lineages.
  train_both() {
    local name=$1 rounds=$2 params=$3 files=0 f rel
    cat > "$td/$name.toml" <<EOF
name = "wine-$name"
program = "fashion.wasm"
rounds = $rounds
shards = 3
evaluate_shards = 4

[inputs]
train_images = "data/train-images-idx3-ubyte"
train_labels = "data/train-labels-idx1-ubyte"
test_images = "data/t10k-images-idx3-ubyte"
test_labels = "data/t10k-labels-idx1-ubyte"

[params]
features = 784
classes = 10
$params

[policy]
memory_mib = 512
time_limit = "300s"
EOF
    step "train $name: $rounds rounds, Linux and Windows builds"
    bin/idlepool --home "$tmp/linux-train" train "$td/$name.toml" --dir "$tmp/linux-$name" --workers 2 > "$tmp/train-linux-$name.out" 2> "$tmp/train-linux-$name.log" ||
      fail "the Linux build's train of $name failed"
    wine "$exe" --home "$(winpath "$tmp")\\windows-train" train "$(winpath "$td/$name.toml")" --dir "$(winpath "$tmp")\\windows-$name" --workers 2 \
      > "$tmp/train-windows-$name.out" 2> "$tmp/train-windows-$name.log" || fail "idlepool.exe train of $name failed under Wine"
    tr -d '\r' < "$tmp/windows-$name/jobs/eval-0001.toml" | grep -q '^tasks = 4$' ||
      fail "idlepool.exe's evaluation job of $name's round 1 does not have 4 tasks: $(grep tasks "$tmp/windows-$name/jobs/eval-0001.toml")"
    for f in "$tmp/linux-$name"/models/*.bin "$tmp/linux-$name"/jobs/update-*.json "$tmp/linux-$name"/jobs/evaluation-*.json; do
      rel=${f#"$tmp/linux-$name/"}
      [ -e "$tmp/windows-$name/$rel" ] || fail "idlepool.exe train of $name wrote no $rel"
      cmp "$f" "$tmp/windows-$name/$rel" || fail "$name: $rel differs between the Linux and the Windows builds"
      files=$((files + 1))
    done
    [ "$files" -eq $((3 * rounds + 1)) ] || fail "$name: $files model, update and evaluation files to compare, want $((3 * rounds + 1))"
    lineage "$tmp/linux-$name/lineage.json" > "$tmp/lineage-linux-$name.json"
    lineage "$tmp/windows-$name/lineage.json" > "$tmp/lineage-windows-$name.json"
    diff "$tmp/lineage-linux-$name.json" "$tmp/lineage-windows-$name.json" >&2 || fail "$name: the lineages differ between the Linux and the Windows builds"
    rounds_of "$tmp/linux-$name/lineage.json" > "$tmp/rounds-$name.txt"
    while read -r line; do step "train $name: $line"; done < "$tmp/rounds-$name.txt"
    step "train $name: the same $files model, update and evaluation files and the same lineage from both builds"
  }
  # The lineage without the wall times (seconds, timing), which differ.
  lineage() {
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rounds"]:
    r.pop("seconds", None)
    r.pop("timing", None)
print(json.dumps(d, indent=1, sort_keys=True))' "$1"
  }
  rounds_of() {
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("init %s, first model %s" % (d["init"][:12], d["model0"][:12]))
for r in d["rounds"]:
    print("round %d: job %s, apply %s, evaluation %s, model %s, loss %r, accuracy %r, held-out loss %r" % (r["round"], r["job"][:12],
        r["apply"][:12], r["evaluation"][:12], r["model"][:12], r["loss"], r["accuracy"], r["test_loss"]))' "$1"
  }
  train_both softmax 3 "batch = 600
lr = 0.03"
  train_both mlp 2 "hidden = 128
seed = 1
batch = 300
lr = 0.002"
fi
echo "wine-check: $mode ok ($(( $(date +%s) - started )) s)"
