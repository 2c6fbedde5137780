#!/usr/bin/env bash
# make release: build the release files and sign them into a release
# directory (The Update Framework's layout, docs/operator.md "Publishing
# a release"): the Linux tarball (idlepool-VERSION-linux-ARCH.tar.gz,
# the package of make package), the Debian package (make deb) and, where
# makensis, mingw-w64 and osslsigncode are installed, the Windows
# installer (make windows-installer); without them it says the installer
# was skipped. The version is FyneApp.toml's; CHANGELOG.md must have its
# section. Keys: IDLEPOOL_RELEASE_KEYS (a directory, see
# scripts/release/main.go), else throwaway test keys in
# bin/release-test-keys, as the Windows signing does.
#
# RELEASE_WINDOWS=no skips the Windows installer. RELEASE_DIR
# (bin/release) is the repository to publish; copy it to the
# release location as it is (metadata/ and targets/).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=${RELEASE_DIR:-bin/release}
version=$(sed -n 's/^ *Version *= *"\(.*\)".*/\1/p' FyneApp.toml)
arch=$($GO env GOARCH)
[ -n "$version" ] || { echo "release: no Version in FyneApp.toml" >&2; exit 1; }
grep -qx "## $version" CHANGELOG.md || { echo "release: CHANGELOG.md has no section \"## $version\": add what changed before releasing" >&2; exit 1; }

keys=()
[ -n "${IDLEPOOL_RELEASE_KEYS:-}" ] && keys=(-keys "$IDLEPOOL_RELEASE_KEYS")
# The repository's root first: the programs are built to trust it.
$GO run ./scripts/release -dir "$out" -init "${keys[@]}"
export RELEASE_ROOT=$out/metadata/1.root.json

files=()
make --no-print-directory package
tarball=bin/idlepool-$version-linux-$arch.tar.gz
xz -dc idlepool.tar.xz | gzip -9n > "$tarball"
files+=("$tarball:tarball:linux:$arch")

make --no-print-directory deb
deb=$(ls -t idlepool_"$version"_*.deb | head -1)
files+=("$deb:deb:linux:$arch")

if [ "${RELEASE_WINDOWS:-}" = no ]; then
  echo "release: the Windows installer is skipped (RELEASE_WINDOWS=no)" >&2
elif command -v makensis >/dev/null && command -v x86_64-w64-mingw32-gcc >/dev/null && command -v osslsigncode >/dev/null; then
  make --no-print-directory windows-installer
  files+=("bin/windows/idlepool-$version-setup.exe:windows-installer:windows:amd64")
else
  echo "release: the Windows installer is skipped (it needs makensis, x86_64-w64-mingw32-gcc and osslsigncode)" >&2
fi

$GO run ./scripts/release -dir "$out" -version "$version" "${keys[@]}" "${files[@]}"
cat "$out/signing.txt"
