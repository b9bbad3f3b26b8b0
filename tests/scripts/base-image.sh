#!/usr/bin/env bash
# Build a local Debian 12 base image with Python 3.11 (no registry here): debootstrap + docker import.
# Usage: base-image.sh [TAG]   (idempotent: does nothing when the tag exists)
set -euo pipefail
tag="${1:-envbuilder-test/debian12-python:1}"
if docker image inspect "$tag" >/dev/null 2>&1; then echo "$tag exists"; exit 0; fi
mirror="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
mirror="${mirror:-http://deb.debian.org/debian}"
root="$(mktemp -d /tmp/eb-rootfs.XXXXXX)"
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" "$mirror" >/dev/null
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import - "$tag" >/dev/null
echo "$tag built"
