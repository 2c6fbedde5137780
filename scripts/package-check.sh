#!/usr/bin/env bash
# Checks the tray app's Linux package as a donor meets it: installs
# idlepool.tar.xz (make package) into a throwaway home with the package's
# own `make user-install`, starts the installed program on a private X
# server and D-Bus session bus with a stand-in panel (bin/panel), and
# checks that
#   - the idlepool CLI is installed beside the tray app (~/.local/bin),
#     runs from there, and is what the rest of the check asks;
#   - the icon appears in the tray with its menu, the status line first;
#   - the tray's engine computes for a pool joined on loopback;
#   - hours set outside now make it wait ("outside your hours"), and hours
#     that include now make it compute again, without a restart;
#   - it quits cleanly on SIGTERM;
#   - a first start (a fresh data home) writes the start-at-login entry
#     for the installed program, and the package's `make user-uninstall`
#     removes it with the programs, the menu entry and the icon.
#
#   scripts/package-check.sh        (make package-check)
#
# Needs idlepool.tar.xz, bin/idlepool and bin/panel, Xvfb and dbus-daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
for p in idlepool.tar.xz bin/idlepool bin/panel; do
  [ -e "$p" ] || { echo "package-check: $p is missing: run make package build panel" >&2; exit 1; }
done

. scripts/session.sh
# A desktop session, and a pool on loopback joined once with the CLI (the
# tray computes for the pools joined).
session_start package-check

# Install as the package's Makefile tells a person to.
mkdir -p "$tmp/home" "$tmp/pkg"
tar -xJf idlepool.tar.xz -C "$tmp/pkg"
make -s -C "$tmp/pkg/idlepool-tray" user-install HOME="$tmp/home" > "$tmp/install.out"
tray="$tmp/home/.local/bin/idlepool-tray"
cli="$tmp/home/.local/bin/idlepool"
desktop="$tmp/home/.local/share/applications/org.idlepool.tray.desktop"
[ -x "$tray" ] || fail "the package installed no $tray"
[ -x "$cli" ] || fail "the package installed no $cli (the idlepool CLI)"
[ -x "$tmp/home/.local/bin/idlepool-window" ] || fail "the package installed no $tmp/home/.local/bin/idlepool-window (the tray app's windows)"
grep -q "^Exec=$tray" "$desktop" || fail "the menu entry $desktop does not start $tray"
# The start-at-login entry the app writes names the same icon (Icon=).
grep -q '^Icon=org.idlepool.tray$' "$desktop" && [ -s "$tmp/home/.local/share/icons/org.idlepool.tray.png" ] ||
  fail "the menu entry's icon org.idlepool.tray is not installed as the app's autostart entry names it"
grep -q "installed the command line: $cli" "$tmp/install.out" || fail "user-install did not say where the CLI went: $(cat "$tmp/install.out")"
# The CLI as a person runs it after the install: by name, with
# ~/.local/bin on PATH (and user-install says so when it is not).
user_path="$tmp/home/.local/bin:$PATH"
[ "$(PATH="$user_path" command -v idlepool)" = "$cli" ] || fail "idlepool is not found on PATH in $tmp/home/.local/bin"
grep -q "$tmp/home/.local/bin is not on your PATH" "$tmp/install.out" ||
  fail "user-install does not say that ~/.local/bin is not on PATH"
PATH="$user_path" make -s -C "$tmp/pkg/idlepool-tray" user-install HOME="$tmp/home" | grep >/dev/null "is not on your PATH" &&
  fail "user-install says ~/.local/bin is not on PATH where it is"
echo "installed: $tray, $cli, $(basename "$desktop")"

pool_start
donor="$tmp/donor"
# The check controls what the engine's decision depends on: no idle time
# needed, and other programs' CPU load (a busy CI machine) and the
# temperature allowed, so only the hours below decide.
donor_join "$donor" idle_for=0 max_other_cpu=100% max_temperature=0
# From here on the installed CLI answers, as for a donor.
idlepool() { HOME="$tmp/home" PATH="$user_path" command idlepool "$@"; }
idlepool --home "$donor" settings | grep >/dev/null 'idle_for' || fail "the installed idlepool settings shows no settings: $(idlepool --home "$donor" settings 2>&1)"
echo "installed CLI: idlepool settings: $(idlepool --home "$donor" settings | grep -c .) lines"

HOME="$tmp/home" XDG_CONFIG_HOME="$tmp/home/.config" LANG=C.UTF-8 "$tray" --home "$donor" > "$tmp/tray.out" 2> "$tmp/tray.log" &
app=$!
pids+=($app)
wait_for "$tmp/panel.out" '^item .*icon=[0-9]' || fail "no tray icon appeared"
wait_for "$tmp/panel.out" '^  menu Quit' || fail "the tray icon has no menu"
echo "tray icon and menu:"
sed -n 's/^  menu /  | /p' "$tmp/panel.out"

status() { idlepool --home "$donor" status 2>&1 | sed -n 's/^donor *//p'; }
says() { status | grep >/dev/null "$1"; }
eventually says '^computing' || fail "the tray's engine does not compute: $(status)"
echo "engine: $(status | head -1)"

# Hours that exclude now: it waits, without a restart.
day=$(date +%a)
other=$([ "$day" = Mon ] && echo Tue || echo Mon)
idlepool --home "$donor" settings set "hours=$other 03:00-04:00" > /dev/null
eventually says 'outside your hours' || fail "hours outside now did not make it wait: $(status)"
echo "hours $other 03:00-04:00: $(status | head -1)"
idlepool --home "$donor" settings set hours=always > /dev/null
eventually says '^computing' || fail "hours=always did not make it compute again: $(status)"
echo "hours always: $(status | head -1)"

kill -TERM "$app"
eventually gone "$app" || fail "the tray app did not quit within $patience s of SIGTERM"
wait "$app" && rc=0 || rc=$?
[ "$rc" -eq 0 ] || fail "the tray app exited with $rc"
grep -q 'panic:' "$tmp/tray.log" && fail "the tray app panicked"

# A first start sets up the start at login; user-uninstall takes it away
# with the programs. No system-wide entry counts here ($XDG_CONFIG_DIRS
# empty), as on a machine without the .deb.
entry="$tmp/home/.config/autostart/idlepool-tray.desktop"
mkdir -p "$tmp/xdg"
HOME="$tmp/home" XDG_CONFIG_HOME="$tmp/home/.config" XDG_CONFIG_DIRS="$tmp/xdg" LANG=C.UTF-8 \
  "$tray" --home "$tmp/fresh" > "$tmp/tray-first.out" 2> "$tmp/tray-first.log" &
app=$!
pids+=($app)
eventually test -s "$entry" || fail "the first start wrote no start-at-login entry $entry"
grep -q "^Exec=$tray --home $tmp/fresh$" "$entry" || fail "the start-at-login entry does not start $tray: $(grep ^Exec "$entry")"
kill -TERM "$app"
eventually gone "$app" || fail "the tray app did not quit within $patience s of SIGTERM"
wait "$app" || fail "the tray app's first start exited with $?"
env -u XDG_CONFIG_HOME make -s -C "$tmp/pkg/idlepool-tray" user-uninstall HOME="$tmp/home" > "$tmp/uninstall.out" 2>&1 ||
  fail "user-uninstall failed: $(cat "$tmp/uninstall.out")"
# The app's data stays, as with every uninstall that is no purge: its own
# folders and the window toolkit's preferences of the app; the font index
# (.cache/font_index_*.cache) is the toolkit's, shared by every program
# that uses it. The toolkit writes both only when it gets to, so a quick
# first start may leave neither.
left=$(cd "$tmp/home" && find . -type f ! -path './.config/idlepool/*' ! -path './.local/share/idlepool/*' ! -path './.cache/idlepool/*' \
  ! -path './.config/fyne/org.idlepool.tray/*' ! -path './.cache/font_index_v*.cache')
[ -z "$left" ] || fail "user-uninstall left files in the home: $left"
grep -q "removed the start-at-login entry $entry" "$tmp/uninstall.out" ||
  fail "user-uninstall did not say it removed the start-at-login entry: $(cat "$tmp/uninstall.out")"
echo "uninstalled: the programs, the menu entry, the icon and the start-at-login entry"
echo "package-check: ok"
