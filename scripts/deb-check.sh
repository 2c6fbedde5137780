#!/usr/bin/env bash
# Checks the Debian package (make deb) as Debian and a donor meet it:
#   - lintian finds no error (its warnings are printed);
#   - `dpkg --root` installs it into a throwaway root, with the CLI, the
#     tray app, the menu entry and the icon where the package says;
#   - the installed CLI runs (version, settings); the installed tray app,
#     started on a private X server and D-Bus session bus with a stand-in
#     panel (bin/panel), shows its tray icon and first-run window and, on
#     this first start, writes the user's autostart entry starting the
#     installed program; it quits on SIGTERM;
#   - `dpkg --root --purge` removes it and leaves no file of it behind.
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
for f in usr/bin/idlepool usr/bin/idlepool-tray usr/share/applications/org.idlepool.tray.desktop \
  usr/share/icons/hicolor/256x256/apps/org.idlepool.tray.png usr/share/doc/idlepool/copyright usr/share/doc/idlepool/donor.md; do
  [ -s "$root/$f" ] || fail "the package installed no /$f"
done
grep -q '^Exec=idlepool-tray$' "$root/usr/share/applications/org.idlepool.tray.desktop" || fail "the menu entry does not start idlepool-tray"
grep -q '^Icon=org.idlepool.tray$' "$root/usr/share/applications/org.idlepool.tray.desktop" || fail "the menu entry names another icon"
echo "installed: $(cd "$root" && find usr -type f | wc -l) files; $(dpkg --root="$root" -s idlepool | grep '^Depends:')"

# The installed CLI.
"$root/usr/bin/idlepool" version > "$tmp/version.out" 2>&1 || fail "idlepool version failed"
echo "idlepool version: $(head -1 "$tmp/version.out")"
"$root/usr/bin/idlepool" --home "$tmp/cli" settings > "$tmp/settings.out" 2>&1 || fail "idlepool settings failed"
grep -q '^pause_for_games' "$tmp/settings.out" || fail "idlepool settings does not show the game signs"

# The installed tray app's first start, in a fresh home.
home="$tmp/home"
mkdir -p "$home"
HOME="$home" XDG_CONFIG_HOME="$home/.config" LANG=C.UTF-8 "$root/usr/bin/idlepool-tray" --home "$tmp/donor" \
  > "$tmp/tray.out" 2> "$tmp/tray.log" &
app=$!
pids+=($app)
wait_for "$tmp/panel.out" '^item .*icon=[0-9]' 60 || fail "no tray icon appeared"
entry="$home/.config/autostart/idlepool-tray.desktop"
for _ in $(seq 300); do [ -s "$entry" ] && break; sleep 0.1; done
[ -s "$entry" ] || fail "the first start wrote no autostart entry $entry"
grep -q "^Exec=$root/usr/bin/idlepool-tray" "$entry" || fail "the autostart entry does not start the installed app: $(grep ^Exec "$entry")"
for _ in $(seq 300); do xdotool search --name 'Welcome to idlepool' > /dev/null 2>&1 && break; sleep 0.1; done
xdotool search --name 'Welcome to idlepool' > /dev/null 2>&1 || fail "no first-run window"
echo "first start: tray icon, first-run window, $(grep ^Exec "$entry" | sed "s|$tmp|\$tmp|g")"
kill -TERM "$app"
for _ in $(seq 400); do kill -0 "$app" 2>/dev/null || break; sleep 0.1; done
kill -0 "$app" 2>/dev/null && fail "the tray app did not quit within 40 s of SIGTERM"
wait "$app" && rc=0 || rc=$?
[ "$rc" -eq 0 ] || fail "the tray app exited with $rc"

# Removed with nothing left: the root holds what it held before, and
# dpkg no longer knows the package.
dpkg --root="$root" --log="$tmp/dpkg.log" --purge idlepool > "$tmp/dpkg-purge.log" 2>&1 || fail "dpkg --purge failed"
# dpkg's own files (its database's format, locks, backups) may appear.
find "$root" | grep -v -e '/var/lib/dpkg/[a-z]*-old$' -e '/var/lib/dpkg/lock' -e '/var/lib/dpkg/triggers/' \
  -e '/var/lib/dpkg/info/format$' | sort > "$tmp/after.txt"
diff -u "$tmp/before.txt" "$tmp/after.txt" > "$tmp/left.diff" || {
  cat "$tmp/left.diff" >&2
  fail "files left behind after dpkg --purge"
}
dpkg --root="$root" -s idlepool > /dev/null 2>&1 && fail "dpkg still knows idlepool after --purge"
echo "purged: nothing left"
echo "deb-check: ok ($(( $(date +%s) - started )) s)"
