#!/usr/bin/env bash
# Downloads (here, where Debian's registry is reachable) the build dependencies the GPU machine lacks, as .deb
# files into .gpudeps/ (ignored by git), for bench/gpu/device-check.sh to unpack there with dpkg -x.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
pkgs=(libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libtomlplusplus3 libpcre2-dev libpcre2-8-0
      libgtest-dev)
mkdir -p .gpudeps
cd .gpudeps
rm -f ./*.deb
apt-get download "${pkgs[@]}" >/dev/null
ls -la ./*.deb | awk '{print $5, $9}'
du -sh .
