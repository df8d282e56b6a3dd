#!/usr/bin/env bash
# Build the Debian 12 systemd image molecule's hosts boot from: no registry, only Debian's own packages.
# Usage: build-image.sh [TAG]   (default pi-dispatch-molecule-debian12:latest; skipped when it exists)
set -euo pipefail
TAG="${1:-pi-dispatch-molecule-debian12:latest}"
if docker image inspect "$TAG" >/dev/null 2>&1; then echo "$TAG exists"; exit 0; fi
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
ROOTFS="$(mktemp -d /var/tmp/pi-dispatch-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT
debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-apt,python3-packaging,ca-certificates,systemd,systemd-sysv,sudo,procps,iproute2 \
    bookworm "$ROOTFS" >"$ROOTFS.log" 2>&1 || { tail -20 "$ROOTFS.log" >&2; exit 1; }
rm -f "$ROOTFS.log"
# pip inside the hosts must trust what this machine trusts (an egress proxy's CA, for one)
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$ROOTFS/usr/local/share/ca-certificates/"
    chroot "$ROOTFS" update-ca-certificates >/dev/null
fi
for unit in systemd-remount-fs.service getty.target console-getty.service systemd-udevd.service \
    systemd-udev-trigger.service systemd-firstboot.service; do
    ln -sf /dev/null "$ROOTFS/etc/systemd/system/$unit"
done
: > "$ROOTFS/etc/machine-id"
tar -C "$ROOTFS" -c . | docker import -c 'CMD ["/lib/systemd/systemd"]' -c 'ENV container=docker' - "$TAG" >/dev/null
echo "built $TAG"
