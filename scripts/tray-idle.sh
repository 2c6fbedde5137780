#!/usr/bin/env bash
# Measures the tray app at rest: resident memory and CPU of the app process
# (and, apart, of its sandboxed worker processes) while it has joined a pool
# that has no work, so that it polls for tasks and samples the machine's
# signals as it does on a donor's desk, with ten programs in "Pause while
# these programs run" (none of them running), so that every sample also
# looks for running programs. It runs on a private X server (Xvfb)
# and a private D-Bus session bus, so that the system tray is live.
#
#   scripts/tray-idle.sh [SECONDS]     (default 60; `make tray-idle`)
#
# Needs bin/idlepool, bin/idlepool-tray and bin/panel (make build tray
# panel), Xvfb and dbus-daemon. bin/panel stands in for the desktop's panel
# (the StatusNotifierWatcher), so that the app lives in the tray with no
# window open, as on a donor's desktop. Prints one line per process kind and the targets: under
# 50 MB resident and under 0.2% of one core for the app.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
warm=15
for p in bin/idlepool bin/idlepool-tray bin/panel; do
  [ -x "$p" ] || { echo "tray-idle: $p is missing: run make build tray panel" >&2; exit 1; }
done
for p in Xvfb dbus-daemon; do
  command -v "$p" >/dev/null || { echo "tray-idle: $p is not installed" >&2; exit 1; }
done

. scripts/session.sh
session_start tray-idle
# A pool with no work, on loopback, joined; settings saved, so no first-run
# window.
pool_start
home="$tmp/donor"
# Ten programs, as a gamer lists them (Windows names, Linux names, a path).
programs='steam,game.exe,Cyberpunk2077.exe,eldenring.exe,witcher3.exe,hl2_linux,dota2,factorio,obs,C:\Games\Minecraft\javaw.exe'
donor_join "$home" idle_for=5m "pause_for=$programs"
echo "pause list: $programs"
HOME="$tmp" XDG_CONFIG_HOME="$tmp/xdg" bin/idlepool-tray --home "$home" > "$tmp/tray.out" 2> "$tmp/tray.log" &
app=$!
pids+=($app)
sleep "$warm"
kill -0 "$app" 2>/dev/null || { echo "tray-idle: the tray app exited:" >&2; cat "$tmp/tray.log" >&2; exit 1; }
grep -q '^item ' "$tmp/panel.out" || { echo "tray-idle: no tray icon registered:" >&2; cat "$tmp/panel.out" "$tmp/tray.log" >&2; exit 1; }
sed -n 's/^/panel: /p' "$tmp/panel.out" | grep -v watching

hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
workers() { pgrep -P "$app" || true; }

t0=$(ticks "$app"); w0=0; for w in $(workers); do w0=$((w0 + $(ticks "$w"))); done
start=$(date +%s.%N)
peak=0; wpeak=0
end=$(( $(date +%s) + secs ))
while [ "$(date +%s)" -lt "$end" ]; do
  r=$(rss_kib "$app"); [ "$r" -gt "$peak" ] && peak=$r
  wr=0; for w in $(workers); do wr=$((wr + $(rss_kib "$w"))); done
  [ "$wr" -gt "$wpeak" ] && wpeak=$wr
  sleep 1
done
t1=$(ticks "$app"); w1=0; for w in $(workers); do w1=$((w1 + $(ticks "$w"))); done
elapsed=$(echo "$(date +%s.%N) - $start" | bc -l)
nw=$(workers | wc -l)
verdict=$(awk -v t="$((t1 - t0))" -v hz="$hz" -v e="$elapsed" -v p="$peak" 'BEGIN { print (p*1024/1e6 < 50 && 100*t/hz/e < 0.2) ? "ok" : "over" }')
awk -v t="$((t1 - t0))" -v hz="$hz" -v e="$elapsed" -v p="$peak" -v n="$nw" -v wt="$((w1 - w0))" -v wp="$wpeak" 'BEGIN {
  printf "tray app:  peak RSS %.1f MB, CPU %.2f%% of one core over %.0f s (targets: < 50 MB, < 0.2%%)\n", p*1024/1e6, 100*t/hz/e, e
  printf "workers:   %d processes, peak RSS %.1f MB together, CPU %.2f%% of one core\n", n, wp*1024/1e6, 100*wt/hz/e
}'
[ "$verdict" = ok ] || { echo "tray-idle: the tray app is over a target" >&2; exit 1; }
