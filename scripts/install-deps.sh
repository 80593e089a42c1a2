#!/usr/bin/env bash
# Install what heaptrace needs to build and test, from Debian 12 packages only.
# Runs as root (or with sudo). Idempotent: only missing packages are installed.
set -euo pipefail

pkgs=(build-essential cmake pkg-config libuv1-dev libcjson-dev)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
