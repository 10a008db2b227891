#!/usr/bin/env bash
# Installs every Debian package deltaserve needs to build and test. Idempotent: a
# package already present is skipped, so a second run costs only the dpkg query.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libboost1.81-dev nlohmann-json3-dev prometheus-cpp-dev libspdlog-dev libfmt-dev
  libcli11-dev libgtest-dev libgmock-dev libpcre2-dev
  python3 python3-numpy python3-jinja2
  prometheus
  chromium systemd
  hipcc
  clang libclang-rt-14-dev gnuplot-nox
)
# Node.js and npm come with the machine image; Debian's npm conflicts with that install,
# so take Debian's only where none is present.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi
