#!/usr/bin/env bash
# Adds the idlepool CLI to the tray app's Linux package: `fyne package`
# (make package) writes idlepool.tar.xz with the tray app, its menu entry,
# its icon and a Makefile; this puts bin/idlepool, and bin/idlepool-window
# (the tray app's windows), beside idlepool-tray in usr/local/bin and makes each of the Makefile's install targets (install,
# uninstall, user-install, user-uninstall) install or remove it too, so
# that `idlepool status` and `idlepool settings`, which the donor's guide
# tells tray users to run, are there after `make user-install`
# (~/.local/bin). The donor's guide goes beside them, in
# share/doc/idlepool/donor.md, where the tray's Help item finds it.
# user-uninstall also removes the start-at-login entry the tray app wrote
# ($XDG_CONFIG_HOME/autostart/idlepool-tray.desktop, default
# ~/.config/autostart) when it starts the ~/.local/bin program, so that
# no login tries to start the removed program; an entry for another
# program (the .deb's /usr/bin/idlepool-tray) stays.
#
#   scripts/package-cli.sh        (part of make package)
set -euo pipefail
cd "$(dirname "$0")/.."
for p in idlepool.tar.xz bin/idlepool bin/idlepool-window; do
  [ -e "$p" ] || { echo "package-cli: $p is missing: run make package" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -xJf idlepool.tar.xz -C "$tmp"
dir="$tmp/idlepool-tray"
install -Dm00755 bin/idlepool "$dir/usr/local/bin/idlepool"
install -Dm00755 bin/idlepool-window "$dir/usr/local/bin/idlepool-window"
install -Dm00644 docs/donor.md "$dir/usr/local/share/doc/idlepool/donor.md"

# After each line that installs or removes the tray app's binary, the same
# for the CLI; user-install then says where it went and whether that
# directory is on PATH.
mk="$dir/Makefile"
if grep -q 'usr/local/bin/idlepool ' "$mk"; then
  echo "package-cli: idlepool.tar.xz has the CLI already" >&2
  exit 0
fi
# user-uninstall's recipe line for the start-at-login entry: the file the
# app writes, removed when its Exec starts the program user-install put in
# ~/.local/bin (quoted or not, with arguments or not).
autostart_rm='@entry="$${XDG_CONFIG_HOME:-}"; case "$$entry" in /*) ;; *) entry="$(HOME)/.config" ;; esac; entry="$(DESTDIR)$$entry/autostart/idlepool-tray.desktop"; if grep -qsE '"'"'^Exec="?$(DESTDIR)$(HOME)/[.]local/bin/idlepool-tray"?( |$$)'"'"' "$$entry"; then rm -f "$$entry" && echo "removed the start-at-login entry $$entry"; fi'
awk -v autostart_rm="$autostart_rm" '
  { print }
  /install -Dm00755 usr\/local\/bin\/\$\(Exec\) / {
    line = $0; sub(/\$\(DESTDIR\).*/, "", line); indent = substr(line, 1, index(line, "install") - 1)
    dest = $0; sub(/.* /, "", dest); sub(/\$\(Exec\)$/, "idlepool", dest)
    print indent "install -Dm00755 usr/local/bin/idlepool " dest; n++
    print indent "install -Dm00755 usr/local/bin/idlepool-window " dest "-window"
    doc = dest; sub(/\/bin\/idlepool$/, "/share/doc/idlepool/donor.md", doc)
    print indent "install -Dm00644 usr/local/share/doc/idlepool/donor.md " doc
    if (dest ~ /HOME/) {
      print indent "@echo \"installed the command line: $(DESTDIR)$(HOME)/.local/bin/idlepool (idlepool status, idlepool settings)\""
      print indent "@case \":$$PATH:\" in *\":$(HOME)/.local/bin:\"*) ;; *) echo \"$(HOME)/.local/bin is not on your PATH: add it (for example in ~/.profile) to run idlepool by name\" ;; esac"
    }
  }
  /-rm \$\(DESTDIR\).*\/bin\/\$\(Exec\)$/ {
    line = $0; sub(/-rm.*/, "", line)
    dest = $0; sub(/.* /, "", dest); sub(/\$\(Exec\)$/, "idlepool", dest)
    print line "-rm " dest; n++
    print line "-rm " dest "-window"
    doc = dest; sub(/\/bin\/idlepool$/, "/share/doc/idlepool/donor.md", doc)
    print line "-rm " doc
    if (dest ~ /HOME/) { print line autostart_rm; n++ }
  }
  END { if (n != 5) { print "package-cli: wrote " n " of the 5 lines it adds after the lines that install or remove the binary in the Makefile" > "/dev/stderr"; exit 1 } }
' "$mk" > "$mk.new"
mv "$mk.new" "$mk"
tar -cJf idlepool.tar.xz.new -C "$tmp" idlepool-tray
mv idlepool.tar.xz.new idlepool.tar.xz
