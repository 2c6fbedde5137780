#!/bin/sh
# build-guest.sh builds one C or Rust job program of examples/c or
# examples/rust, natively or as a WebAssembly (WASI preview 1) command. The
# Makefile (make examples), make bench-guests and the tests build with it,
# so the flags live here alone.
#
#   examples/build-guest.sh LANG TARGET SOURCE OUTPUT
#   examples/build-guest.sh check LANG
#
# The second form builds a program that does nothing for wasm32-wasi and
# exits 0 when LANG's toolchain can, 3 (naming the packages) when not.
#
# LANG is c or rust. TARGET is wasm (wasm32-wasi, the programs a pool
# runs), wasm-simd (the same with WebAssembly SIMD, -msimd128 or
# target-feature=+simd128, for measuring) or native (the host, for
# measuring). The toolchains are Debian 12's: clang, lld and wasi-libc
# with libclang-rt-14-dev-wasm32 for C; rustc and libstd-rust-dev-wasm32
# for Rust (plain rustc, no cargo: the guest crate examples/rust/idlepool_task
# is compiled first, into OUTPUT's directory). RUSTC and CLANG choose the
# compilers; RUSTC defaults to Debian's /usr/bin/rustc where it exists,
# since a rustup toolchain earlier on PATH usually lacks the wasm32-wasi
# standard library.
#
# Both compilers are told exactly what to do: no fused multiply-add (Go
# rounds every operation, and the examples give Go's bytes), no debug
# information, symbols stripped, and no wasm-opt behind our back (clang
# runs binaryen's wasm-opt when it is on PATH and -O is given at link
# time, so C is compiled and linked in two steps). The same sources and
# toolchain give the same bytes wherever the checkout lies, so a C or Rust
# example's job ID is the same on every machine with Debian 12's packages.
#
# C is built at -O2: -O3, -O3 -funroll-loops and binaryen's wasm-opt -O3
# ran the examples' kernels no faster in WebAssembly (measured
# 2026-12-03, docs/benchmarks.md), and would give other bytes.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -eq 2 ] && [ "$1" = check ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	case $2 in
	c) echo 'int main(void) { return 0; }' >"$tmp/t.c" ;;
	rust) echo 'fn main() {}' >"$tmp/t.rs" ;;
	*) echo "build-guest.sh: unknown language $2: want c or rust" >&2; exit 2 ;;
	esac
	rc=0
	ext=$([ "$2" = c ] && echo c || echo rs)
	"$here/build-guest.sh" "$2" wasm "$tmp/t.$ext" "$tmp/t.wasm" >"$tmp/log" 2>&1 || rc=$?
	if [ $rc -ne 0 ]; then
		case $2 in
		c) pkgs="clang lld wasi-libc libclang-rt-14-dev-wasm32" ;;
		rust) pkgs="rustc libstd-rust-dev-wasm32 wasi-libc lld" ;;
		esac
		echo "build-guest.sh: cannot build $2 for wasm32-wasi here (Debian: apt-get install $pkgs):" >&2
		tail -3 "$tmp/log" >&2
		exit 3
	fi
	exit 0
fi
if [ $# -ne 4 ]; then
	echo "usage: $0 c|rust wasm|wasm-simd|native SOURCE OUTPUT" >&2
	exit 2
fi
lang=$1 target=$2 out=$4
src=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
case $target in
wasm | wasm-simd | native) ;;
*) echo "build-guest.sh: unknown target $target: want wasm, wasm-simd or native" >&2; exit 2 ;;
esac
mkdir -p "$(dirname "$out")"

case $lang in
c)
	CLANG=${CLANG:-clang}
	if ! command -v "$CLANG" >/dev/null 2>&1; then
		echo "build-guest.sh: $CLANG not found: C job programs need clang (Debian: apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32)" >&2
		exit 3
	fi
	flags="-std=c11 -O2 -ffp-contract=off -Wall -Wextra -I$here/c"
	case $target in
	native)
		exec "$CLANG" $flags -o "$out" "$src" -lm
		;;
	*)
		wflags=--target=wasm32-wasi
		[ "$target" = wasm-simd ] && wflags="$wflags -msimd128"
		obj=$out.o
		"$CLANG" $wflags $flags -c -o "$obj" "$src"
		"$CLANG" $wflags -Wl,--strip-all -o "$out" "$obj"
		rm -f "$obj"
		;;
	esac
	;;
rust)
	if [ -z "${RUSTC:-}" ]; then
		if [ -x /usr/bin/rustc ]; then RUSTC=/usr/bin/rustc; else RUSTC=rustc; fi
	fi
	if ! command -v "$RUSTC" >/dev/null 2>&1; then
		echo "build-guest.sh: $RUSTC not found: Rust job programs need rustc (Debian: apt-get install rustc libstd-rust-dev-wasm32)" >&2
		exit 3
	fi
	# Source paths land in the module (panic locations): remapped to paths
	# relative to the repository, the bytes do not depend on where the
	# checkout lies or how the source was named.
	root=$(dirname "$here")
	flags="--edition 2021 -C opt-level=3 -C panic=abort -C codegen-units=1 -C strip=symbols --remap-path-prefix=$root/="
	case $target in
	native) ;;
	wasm) flags="$flags --target wasm32-wasi" ;;
	wasm-simd) flags="$flags --target wasm32-wasi -C target-feature=+simd128" ;;
	esac
	dir=$(dirname "$out")/.rlib-$target
	mkdir -p "$dir"
	# The crate is compiled again only when its source or this script
	# is newer than the last build of it for this target.
	rlib=$dir/libidlepool_task.rlib lib=$here/rust/idlepool_task/lib.rs
	if ! [ "$rlib" -nt "$lib" ] || ! [ "$rlib" -nt "$0" ]; then
		# shellcheck disable=SC2086 # flags are words
		"$RUSTC" $flags --crate-type rlib --crate-name idlepool_task -o "$rlib.new" "$lib"
		mv "$rlib.new" "$rlib"
	fi
	# shellcheck disable=SC2086
	"$RUSTC" $flags --crate-type bin --extern idlepool_task="$rlib" -o "$out" "$src"
	;;
*)
	echo "build-guest.sh: unknown language $lang: want c or rust" >&2
	exit 2
	;;
esac
