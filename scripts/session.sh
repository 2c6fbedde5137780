# Shared by scripts/tray-idle.sh and scripts/package-check.sh (sourced, not
# run): a throwaway desktop session for the tray app and a pool on loopback.
#
#   session_start NAME   temp dir $tmp (removed on exit), a private X server
#                        ($DISPLAY), D-Bus session bus
#                        ($DBUS_SESSION_BUS_ADDRESS) and bin/panel, the
#                        stand-in panel, printing to $tmp/panel.out
#   pool_start           `idlepool serve` on 127.0.0.1; its URL in $url
#   donor_join HOME [KEY=VALUE...]
#                        settings saved under HOME (no first-run window) and
#                        the pool joined with `idlepool join`, stopped once
#                        it says it joins: the store the tray app reads has
#                        it joined
#   fail MESSAGE         prints MESSAGE and the logs' tails, exits 1
#   eventually CMD...    runs CMD every 0.2 s until it succeeds; fails
#                        (returns 1) after $patience seconds
#   wait_for FILE PATTERN
#                        eventually FILE has a line matching PATTERN
#   gone PID             the process PID has exited
#
# Every wait ends as soon as its condition holds; $patience (300 s, or
# IDLEPOOL_PATIENCE) only stops a check that would otherwise hang. It is
# not a verdict on speed: CI runs these checks at nice 19 beside the go
# tests on a busy 2-core machine, where a program can take a minute to
# start or to answer.
#
# Every process started is in $pids and killed on exit.

patience=${IDLEPOOL_PATIENCE:-300}

eventually() {
  local end=$((SECONDS + patience))
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.2
  done
}

session_start() {
  script=$1
  tmp=$(mktemp -d)
  pids=()
  trap session_cleanup EXIT
  exec 5> "$tmp/display"
  Xvfb -displayfd 5 -screen 0 1280x800x24 -nolisten tcp -noreset 2>/dev/null &
  pids+=($!)
  eventually test -s "$tmp/display" || fail "Xvfb did not start"
  export DISPLAY=:$(head -1 "$tmp/display")
  dbus-daemon --session --nofork --print-address=1 > "$tmp/bus" 2>/dev/null &
  pids+=($!)
  eventually test -s "$tmp/bus" || fail "dbus-daemon did not start"
  export DBUS_SESSION_BUS_ADDRESS=$(head -1 "$tmp/bus")
  bin/panel > "$tmp/panel.out" 2>&1 &
  pids+=($!)
  wait_for "$tmp/panel.out" watching || fail "the stand-in panel did not start"
}

session_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}

fail() {
  echo "$script: $*" >&2
  for f in "$tmp"/*.log "$tmp"/*.out; do [ -s "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}

# gone PID: the process has exited.
gone() { ! kill -0 "$1" 2>/dev/null; }

wait_for() {
  eventually grep -q -- "$2" "$1" 2>/dev/null
}

pool_start() {
  bin/idlepool serve --home "$tmp/pool" --listen 127.0.0.1:0 --pool lab-a > "$tmp/serve.log" 2>&1 &
  pids+=($!)
  wait_for "$tmp/serve.log" 'http://127.0.0.1:[0-9]' || fail "the coordinator did not start"
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$tmp/serve.log" | head -1)
}

donor_join() {
  local h=$1
  shift
  [ $# -gt 0 ] || set -- idle_for=5m
  bin/idlepool --home "$h" settings set "$@" > /dev/null
  bin/idlepool --home "$h" join "$url" --workers 1 2> "$tmp/join.log" &
  local join=$!
  wait_for "$tmp/join.log" "joining $url" || { kill "$join"; fail "could not join the pool"; }
  kill -TERM "$join"
  wait "$join" || true
}
