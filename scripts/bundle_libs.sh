#!/usr/bin/env bash
# Copies the shared libraries a binary needs beyond the C/C++ runtime (spdlog, fmt,
# prometheus-cpp, PCRE2) next to it, so a build from this Debian machine runs on a GPU host
# that lacks those packages:  LD_LIBRARY_PATH=DIR/lib DIR/deltaserve ...
# Usage: scripts/bundle_libs.sh OUT_DIR BINARY...
set -euo pipefail
out=${1:?usage: bundle_libs.sh OUT_DIR BINARY...}
shift
mkdir -p "$out/lib"
for bin in "$@"; do
  cp -f "$bin" "$out/"
  # The C and C++ runtimes are on every host, newer there than here: never ship them.
  ldd "$bin" | awk '/=> \// {print $3}' | grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -fL "$lib" "$out/lib/"; done || true  # none needed: grep finds nothing
done
ls -l "$out" "$out/lib"
