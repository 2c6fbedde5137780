#!/usr/bin/env bash
# Writes the Windows resources (icon, version information, manifest) of
# idlepool.exe and idlepool-tray.exe as .syso files into their package
# directories, where `go build` for windows/amd64 links them. Name,
# version, build number and icon come from FyneApp.toml, as for
# `fyne package`; the icon is converted with ImageMagick and the resource
# objects are written by goversioninfo (pinned).
# Usage: scripts/winres.sh OUTDIR   (OUTDIR keeps the intermediate files)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/winres.sh OUTDIR}
GO=${GO:-go}
GOVERSIONINFO=github.com/josephspurrier/goversioninfo/cmd/goversioninfo@v1.7.0
mkdir -p "$out"

field() { sed -n "s/^ *$1 *= *\"\{0,1\}\([^\"]*\)\"\{0,1\} *$/\1/p" FyneApp.toml | head -1; }
name=$(field Name)
version=$(field Version)
build=$(field Build)
icon=$(field Icon)
IFS=. read -r major minor patch <<<"$version"
if [ -z "$name" ] || [ -z "$major" ] || [ -z "$minor" ] || [ -z "$patch" ] || [ -z "$build" ] || [ ! -f "$icon" ]; then
  echo "winres: FyneApp.toml needs Name, Version (X.Y.Z), Build and an Icon file; got name=$name version=$version build=$build icon=$icon" >&2
  exit 1
fi
convert "$icon" -define icon:auto-resize=256,64,48,32,24,16 "$out/idlepool.ico"
echo "$version" >"$out/version"

# resource PKG EXE DESCRIPTION
resource() {
  "$GO" run "$GOVERSIONINFO" -64 \
    -o "$1/rsrc_windows_amd64.syso" \
    -icon "$out/idlepool.ico" -manifest packaging/windows/idlepool.manifest \
    -product-name "$name" -description "$3" -original-name "$2" -internal-name "${2%.exe}" \
    -company "$name" -copyright "the $name authors" \
    -file-version "$version.$build" -product-version "$version.$build" \
    -ver-major "$major" -ver-minor "$minor" -ver-patch "$patch" -ver-build "$build" \
    -product-ver-major "$major" -product-ver-minor "$minor" -product-ver-patch "$patch" -product-ver-build "$build" \
    packaging/windows/versioninfo.json
}
resource cmd/idlepool-tray idlepool-tray.exe "$name: lend this computer's idle time to compute pools"
resource cmd/idlepool-window idlepool-window.exe "$name: the windows of the tray app"
resource cmd/idlepool idlepool.exe "$name: run, serve and join compute pools"
