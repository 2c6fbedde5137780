#!/usr/bin/env bash
# Builds the Debian package idlepool_VERSION_ARCH.deb with dpkg-deb from
# bin/deb/idlepool, bin/deb/idlepool-tray and bin/deb/idlepool-window
# (make deb builds them, stripped): the CLI and the tray app (its tray
# program and its windows' program) in /usr/bin, the tray app's menu
# entry and icon, its start-at-login entry for every user's session
# (/etc/xdg/autostart/idlepool-tray.desktop: a conffile, so that a purge
# removes it, with TryExec so that a session skips it once the program is
# removed; a user turns it off with the tray's "Start at login", which
# writes a Hidden=true override in ~/.config/autostart), the copyright and
# changelog, and what lets a donor's tray app read the CPU's energy
# counters: a udev rule that gives them to the group idlepool
# (/usr/lib/udev/rules.d/60-idlepool-energy.rules) and that group
# (/usr/lib/sysusers.d/idlepool.conf, created by systemd-sysusers at
# boot; no maintainer script). The version is FyneApp.toml's, the dependencies are what
# dpkg-shlibdeps finds the binaries linked against, and the changelog's
# date is the last commit's, so the same tree gives the same package.
# Prints the package's path.
#
#   scripts/deb.sh        (make deb)
#
# Needs dpkg-deb and dpkg-shlibdeps (Debian packages dpkg and dpkg-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
for p in bin/deb/idlepool bin/deb/idlepool-tray bin/deb/idlepool-window; do
  [ -x "$p" ] || { echo "deb: $p is missing: run make deb" >&2; exit 1; }
done
version=$(sed -n 's/^ *Version *= *"\(.*\)"/\1/p' FyneApp.toml)
[ -n "$version" ] || { echo "deb: no Version in FyneApp.toml" >&2; exit 1; }
arch=$(dpkg --print-architecture)
out="idlepool_${version}_${arch}.deb"
root=bin/deb/root
rm -rf "$root"
umask 022

install -d "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/applications" "$root/etc/xdg/autostart" \
  "$root/usr/share/icons/hicolor/256x256/apps" "$root/usr/share/doc/idlepool" \
  "$root/usr/lib/udev/rules.d" "$root/usr/lib/sysusers.d"
install -m 0755 bin/deb/idlepool bin/deb/idlepool-tray bin/deb/idlepool-window "$root/usr/bin/"
install -m 0644 packaging/deb/org.idlepool.tray.desktop "$root/usr/share/applications/"
install -m 0644 packaging/deb/idlepool-tray.autostart.desktop "$root/etc/xdg/autostart/idlepool-tray.desktop"
install -m 0644 assets/app.png "$root/usr/share/icons/hicolor/256x256/apps/org.idlepool.tray.png"
install -m 0644 packaging/deb/60-idlepool-energy.rules "$root/usr/lib/udev/rules.d/"
install -m 0644 packaging/deb/idlepool.sysusers "$root/usr/lib/sysusers.d/idlepool.conf"
install -m 0644 packaging/deb/copyright "$root/usr/share/doc/idlepool/copyright"
install -m 0644 docs/donor.md "$root/usr/share/doc/idlepool/donor.md"
when=$(git log -1 --format=%ct 2>/dev/null || date +%s)
sed -e "s/@VERSION@/$version/" -e "s/@DATE@/$(LC_ALL=C date -u -R -d "@$when")/" packaging/deb/changelog.in |
  gzip -9n > "$root/usr/share/doc/idlepool/changelog.gz"
chmod 0644 "$root/usr/share/doc/idlepool/changelog.gz"

# dpkg-shlibdeps wants to run in a source tree: a throwaway one.
abs=$(pwd)/$root
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
mkdir "$src/debian"
printf 'Source: idlepool\n\nPackage: idlepool\nArchitecture: any\n' > "$src/debian/control"
depends=$(cd "$src" && dpkg-shlibdeps -O -e"$abs/usr/bin/idlepool" -e"$abs/usr/bin/idlepool-tray" -e"$abs/usr/bin/idlepool-window" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
size=$(du -k -s -c "$root/usr" "$root/etc" | tail -1 | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" -e "s/@DEPENDS@/$depends/" \
  packaging/deb/control.in > "$root/DEBIAN/control"
(cd "$root" && find usr -type f -print0 | LC_ALL=C sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
(cd "$root" && find etc -type f | LC_ALL=C sort | sed 's|^|/|') > "$root/DEBIAN/conffiles"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums" "$root/DEBIAN/conffiles"

SOURCE_DATE_EPOCH=$when dpkg-deb --root-owner-group -Zxz -z2 --build "$root" "$out" > /dev/null
echo "$out"
