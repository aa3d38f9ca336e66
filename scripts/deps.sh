#!/usr/bin/env bash
# Installs (as root) or names (otherwise) the Debian packages longhaul needs to build and test, and
# a Python virtual environment in .venv with the reference packages the differential tests use.
# Usage: scripts/deps.sh [build|test]   (test adds the archive tools, fuzzing runtime and Python)
set -euo pipefail
what=${1:-build}
# help2man makes the man page from the binary's --help (scripts/make_manpage.sh) at build time.
build_pkgs=(build-essential cmake pkg-config libsqlite3-dev libarchive-dev libcjson-dev
  libopenblas-dev libpcre2-dev libutf8proc-dev libcairo2-dev help2man)
# Open MPI: optional for a build (runs over several processes, issue 10), installed for the tests.
# slurm-wlm and munge: tests/slurm/slurm_array.sh starts its own single-node Slurm (the packages'
# own services are not used); man-db renders the man page in tests/install/install.sh.
test_pkgs=(clang libclang-rt-14-dev python3 python3-venv python3-pip sqlite3 libarchive-tools
  zip unzip p7zip-full cpio xorriso genisoimage gzip bzip2 xz-utils zstd lz4 tar
  libopenmpi-dev openmpi-bin slurm-wlm munge man-db)
pkgs=("${build_pkgs[@]}")
[ "$what" = test ] && pkgs+=("${test_pkgs[@]}")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ]; then
    echo "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "deps: missing Debian packages; install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
if [ "$what" = test ]; then
  # Reference implementations for the differential tests (HF tokenizers). Tests fall back to the
  # committed fixtures, loudly, when this cannot be installed (no network).
  if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import tokenizers' 2>/dev/null; then
    python3 -m venv .venv >/dev/null 2>&1 || true
    if [ -x .venv/bin/pip ]; then
      .venv/bin/pip install -q --disable-pip-version-check tokenizers==0.23.2 \
        || echo "deps: could not pip-install tokenizers; differential tests will use committed fixtures" >&2
    fi
  fi
fi
