#!/usr/bin/env bash
# Checks the Debian package (make deb) as Debian and a donor meet it:
#   - lintian finds no error (its warnings are printed);
#   - `dpkg --root` installs it into a throwaway root, with the CLI, the
#     tray app, the menu entry, the icon and the start-at-login entry
#     /etc/xdg/autostart/idlepool-tray.desktop (a conffile) where the
#     package says;
#   - the udev rule and the group that let a donor read the CPU's energy
#     counters are installed;
#   - the installed CLI runs (version, settings); the installed tray app,
#     started as a donor starts it (from the menu, no --home, a fresh
#     home; the session's XDG_CONFIG_DIRS and PATH those of the throwaway
#     root) on a private X server and D-Bus session bus with a stand-in
#     panel (bin/panel), shows its tray icon and first-run window, counts
#     the package's entry as its start at login (the menu's check mark)
#     and writes no entry of the user's; it quits on SIGTERM;
#   - `dpkg --root --remove` keeps the conffile, which names the removed
#     program in TryExec so that sessions skip it; `dpkg --root --purge`
#     removes it and leaves no file of the package behind, and no
#     autostart entry for the program is left in the user's home.
#
#   scripts/deb-check.sh        (make deb-check)
#
# Needs the package, bin/panel, lintian, Xvfb, dbus-daemon and xdotool.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^ *Version *= *"\(.*\)"/\1/p' FyneApp.toml)
deb="idlepool_${version}_$(dpkg --print-architecture).deb"
for p in "$deb" bin/panel; do
  [ -e "$p" ] || { echo "deb-check: $p is missing: run make deb panel" >&2; exit 1; }
done
for p in lintian Xvfb dbus-daemon xdotool; do
  command -v "$p" >/dev/null || { echo "deb-check: $p is not installed" >&2; exit 1; }
done
started=$(date +%s)

. scripts/session.sh
session_start deb-check

# lintian: errors fail the check. It warns when run as root, as CI is.
lintian --fail-on error --tag-display-limit 0 "$deb" > "$tmp/lintian.out" 2>&1 || {
  cat "$tmp/lintian.out" >&2
  fail "lintian found errors in $deb"
}
grep -v 'root privileges' "$tmp/lintian.out" | sed 's/^/lintian: /' || true

# An empty dpkg database in a throwaway root. Its libraries are the
# machine's (the package's Depends are not installed there).
root="$tmp/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
find "$root" | sort > "$tmp/before.txt"
dpkg --root="$root" --log="$tmp/dpkg.log" --force-depends -i "$deb" > "$tmp/dpkg-install.log" 2>&1 ||
  fail "dpkg --root could not install $deb"
dpkg --root="$root" -s idlepool | grep >/dev/null '^Status: install ok installed' || fail "dpkg does not list idlepool as installed"
for f in usr/bin/idlepool usr/bin/idlepool-tray usr/bin/idlepool-window usr/share/applications/org.idlepool.tray.desktop etc/xdg/autostart/idlepool-tray.desktop \
  usr/share/icons/hicolor/256x256/apps/org.idlepool.tray.png usr/share/doc/idlepool/copyright usr/share/doc/idlepool/donor.md \
  usr/lib/udev/rules.d/60-idlepool-energy.rules usr/lib/sysusers.d/idlepool.conf; do
  [ -s "$root/$f" ] || fail "the package installed no /$f"
done
grep -q '^Exec=idlepool-tray$' "$root/usr/share/applications/org.idlepool.tray.desktop" || fail "the menu entry does not start idlepool-tray"
grep -q '^Icon=org.idlepool.tray$' "$root/usr/share/applications/org.idlepool.tray.desktop" || fail "the menu entry names another icon"
sysentry="$root/etc/xdg/autostart/idlepool-tray.desktop"
grep -q '^Exec=idlepool-tray$' "$sysentry" && grep -q '^TryExec=idlepool-tray$' "$sysentry" ||
  fail "the start-at-login entry does not start (and try) idlepool-tray: $(cat "$sysentry")"
dpkg --root="$root" -s idlepool | grep -q '^ /etc/xdg/autostart/idlepool-tray.desktop [0-9a-f]' ||
  fail "dpkg does not list /etc/xdg/autostart/idlepool-tray.desktop as a conffile"
echo "installed: $(cd "$root" && find usr -type f | wc -l) files; $(dpkg --root="$root" -s idlepool | grep '^Depends:')"

# The installed CLI.
"$root/usr/bin/idlepool" version > "$tmp/version.out" 2>&1 || fail "idlepool version failed"
echo "idlepool version: $(head -1 "$tmp/version.out")"
"$root/usr/bin/idlepool" --home "$tmp/cli" settings > "$tmp/settings.out" 2>&1 || fail "idlepool settings failed"
grep -q '^pause_for_games' "$tmp/settings.out" || fail "idlepool settings does not show the game signs"

# The installed tray app's first start, in a fresh home, as a donor starts
# it: no --home, the session's XDG directories and PATH (here those of the
# throwaway root).
home="$tmp/home"
mkdir -p "$home"
HOME="$home" XDG_CONFIG_HOME="$home/.config" XDG_DATA_HOME="$home/.local/share" XDG_CACHE_HOME="$home/.cache" \
  XDG_CONFIG_DIRS="$root/etc/xdg" PATH="$root/usr/bin:$PATH" LANG=C.UTF-8 \
  env -u IDLEPOOL_HOME "$root/usr/bin/idlepool-tray" > "$tmp/tray.out" 2> "$tmp/tray.log" &
app=$!
pids+=($app)
wait_for "$tmp/panel.out" '^item .*icon=[0-9]' || fail "no tray icon appeared"
eventually xdotool search --name 'Welcome to idlepool' > /dev/null 2>&1 || fail "no first-run window"
# The first start decides about the start at login before it shows the
# first-run window: the package's entry starts it, so the user gets none.
user_autostart="$home/.config/autostart"
[ -z "$(ls -A "$user_autostart" 2>/dev/null)" ] ||
  fail "the first start wrote an autostart entry of the user's beside the package's: $(cat "$user_autostart"/*)"
wait_for "$tmp/panel.out" '^  menu \[x\] Start at login$' ||
  fail "the tray menu does not count the package's entry as its start at login: $(grep 'Start at login' "$tmp/panel.out")"
echo "first start: tray icon, first-run window, start at login by the package's entry, no entry of the user's"
kill -TERM "$app"
eventually gone "$app" || fail "the tray app did not quit within $patience s of SIGTERM"
wait "$app" && rc=0 || rc=$?
[ "$rc" -eq 0 ] || fail "the tray app exited with $rc"

# Removed: the conffile stays, inert (its TryExec program is gone); then
# purged with nothing left: the root holds what it held before, dpkg no
# longer knows the package, and the user's home has no autostart entry
# for the program.
dpkg --root="$root" --log="$tmp/dpkg.log" --remove idlepool > "$tmp/dpkg-remove.log" 2>&1 || fail "dpkg --remove failed"
[ ! -e "$root/usr/bin/idlepool-tray" ] && [ -s "$sysentry" ] || fail "dpkg --remove did not remove the program and keep the conffile"
PATH="$root/usr/bin:$PATH" command -v "$(sed -n 's/^TryExec=//p' "$sysentry")" > /dev/null &&
  fail "the kept start-at-login entry's TryExec program is still found: sessions would start it"
dpkg --root="$root" --log="$tmp/dpkg.log" --purge idlepool > "$tmp/dpkg-purge.log" 2>&1 || fail "dpkg --purge failed"
# dpkg's own files (its database's format, locks, backups) may appear.
find "$root" | grep -v -e '/var/lib/dpkg/[a-z]*-old$' -e '/var/lib/dpkg/lock' -e '/var/lib/dpkg/triggers/' \
  -e '/var/lib/dpkg/info/format$' | sort > "$tmp/after.txt"
diff -u "$tmp/before.txt" "$tmp/after.txt" > "$tmp/left.diff" || {
  cat "$tmp/left.diff" >&2
  fail "files left behind after dpkg --purge"
}
dpkg --root="$root" -s idlepool > /dev/null 2>&1 && fail "dpkg still knows idlepool after --purge"
[ -z "$(grep -rl 'idlepool-tray' "$user_autostart" 2>/dev/null)" ] ||
  fail "an autostart entry for the program is left in the user's home: $(grep -r '' "$user_autostart")"
echo "removed: the conffile kept, inert; purged: nothing left, in the root or the user's autostart"
echo "deb-check: ok ($(( $(date +%s) - started )) s)"
