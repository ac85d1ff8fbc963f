#!/usr/bin/env bash
# make vm-box: a Debian 12 bookworm box for vagrant-libvirt, built on this machine, that provisions
# with no network: debootstrap + Debian's stock kernel (booted directly by libvirt: no boot loader),
# sshd, sudo, a `vagrant` user with Vagrant's insecure public key, every Debian package `make deps`
# installs, a wheelhouse of requirements.txt (pip in the box reads only it: /etc/pip.conf) and the
# worker image's base tree (/opt/incastlab/base-bookworm.tar, what make image would debootstrap).
# Cached: rebuilt only when its inputs (this script, the box's Vagrantfile, apt-packages.txt,
# requirements.txt) change.
# Needs root and the Debian mirror. Output: build/vm/incastlab-bookworm.box
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "make vm-box: must run as root (try: sudo make vm-box)" >&2; exit 1; }

OUT=build/vm
BOX=$OUT/incastlab-bookworm.box
STAMP=$OUT/incastlab-bookworm.inputs
MIRROR=${INCASTLAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DISK_GB=20
# what a Vagrant box and direct kernel boot need, what make deps installs (scripts/apt-packages.txt)
# and what deps.sh adds on Debian with AppArmor in the kernel (Docker's default profile needs its parser)
mapfile -t DEPS_PACKAGES < <(grep -v '^#' scripts/apt-packages.txt | grep .)
PACKAGES=(linux-image-amd64 systemd-sysv udev dbus kmod openssh-server sudo rsync make ca-certificates
  ifupdown isc-dhcp-client "${DEPS_PACKAGES[@]}" chromium chromium-driver apparmor)
say() { echo "[vm-box] $*" >&2; }

inputs=$(cat scripts/vm-box.sh scripts/vm-box.Vagrantfile scripts/apt-packages.txt requirements.txt |
  sha256sum | cut -c1-16)
# (the box is Debian's bookworm of the day it was built: delete build/vm to take newer packages)
if [[ -f $BOX && -f $STAMP && $(cat "$STAMP") == "$inputs" ]]; then
  say "cached: $BOX ($(du -h "$BOX" | cut -f1), inputs $inputs)"
  exit 0
fi

vagrant_key() { ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub 2>/dev/null | head -1 || true; }
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v qemu-img >/dev/null || need+=(qemu-utils)
[[ -n $(vagrant_key) ]] || need+=(vagrant)  # the box's vagrant user gets Vagrant's insecure key from it
if ((${#need[@]})); then
  say "apt: installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
[[ -x .venv/bin/python ]] || { echo "make vm-box: no .venv here: run make deps first" >&2; exit 1; }
key=$(vagrant_key)
[[ -n $key ]] || { echo "make vm-box: Vagrant's insecure public key is not on this machine (apt install vagrant)" >&2; exit 1; }

t0=$(date +%s)
W=$OUT/work
ROOT=$W/root
unmount() { for m in dev/pts dev sys proc; do mountpoint -q "$ROOT/$m" 2>/dev/null && umount -l "$ROOT/$m"; done; true; }
cleanup() { unmount; rm -rf --one-file-system "$W"; }  # never into a bind mount that survived
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup
mkdir -p "$W/box"

say "debootstrap --variant=minbase bookworm ($MIRROR)"
debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" >"$W/debootstrap.log" 2>&1 || {
  tail -3 "$W/debootstrap.log" >&2; echo "make vm-box: debootstrap failed" >&2; exit 1; }
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"; chmod +x "$ROOT/usr/sbin/policy-rc.d"
cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb ${MIRROR%/debian}/debian-security bookworm-security main
EOF
mount -t proc proc "$ROOT/proc"; mount -t sysfs sys "$ROOT/sys"
mount --bind /dev "$ROOT/dev"; mount --bind /dev/pts "$ROOT/dev/pts"

say "apt in the box: ${#PACKAGES[@]} packages and what they need"
chroot "$ROOT" /bin/sh -c "export DEBIAN_FRONTEND=noninteractive
  echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections
  apt-get update -q && apt-get install -y -q --no-install-recommends ${PACKAGES[*]} && apt-get clean" \
  >"$W/apt.log" 2>&1 || { tail -5 "$W/apt.log" >&2; echo "make vm-box: apt in the box failed" >&2; exit 1; }

say "system: network by DHCP, sshd, the vagrant user"
echo incastlab >"$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 incastlab\n' >"$ROOT/etc/hosts"
echo '/dev/vda / ext4 errors=remount-ro 0 1' >"$ROOT/etc/fstab"
printf 'auto lo\niface lo inet loopback\nauto eth0\niface eth0 inet dhcp\n' >"$ROOT/etc/network/interfaces"
echo 'UseDNS no' >"$ROOT/etc/ssh/sshd_config.d/vagrant.conf"
rm -f "$ROOT"/etc/ssh/ssh_host_*  # each VM makes its own (sshd-keygen at first boot)
mkdir -p "$ROOT/etc/systemd/system/ssh.service.d"
printf '[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n' \
  >"$ROOT/etc/systemd/system/ssh.service.d/keys.conf"
chroot "$ROOT" useradd -m -s /bin/bash -G sudo vagrant
echo 'vagrant:vagrant' | chroot "$ROOT" chpasswd
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >"$ROOT/etc/sudoers.d/vagrant"; chmod 440 "$ROOT/etc/sudoers.d/vagrant"
install -d -m 700 -o 1000 -g 1000 "$ROOT/home/vagrant/.ssh"
install -m 600 -o 1000 -g 1000 "$key" "$ROOT/home/vagrant/.ssh/authorized_keys"
rm -f "$ROOT/usr/sbin/policy-rc.d"

say "wheelhouse: requirements.txt for the box's python (the host's pip downloads it)"
mkdir -p "$ROOT/opt/incastlab/wheelhouse"
.venv/bin/python -m pip download -q --disable-pip-version-check -d "$ROOT/opt/incastlab/wheelhouse" \
  -r requirements.txt setuptools wheel pip
printf '[global]\nno-index = true\nfind-links = /opt/incastlab/wheelhouse\n' >"$ROOT/etc/pip.conf"

say "the worker image's base, debootstrapped ahead (make image in the box imports it: topologies/image.py)"
debootstrap --variant=minbase --include=python3 bookworm "$W/base" "$MIRROR" >"$W/debootstrap-base.log" 2>&1 || {
  tail -3 "$W/debootstrap-base.log" >&2; echo "make vm-box: debootstrap of the image's base failed" >&2; exit 1; }
find "$W/base/var/cache/apt/archives" "$W/base/var/lib/apt/lists" -maxdepth 1 -type f -delete
tar -C "$W/base" --numeric-owner -cf "$ROOT/opt/incastlab/base-bookworm.tar" .
rm -rf "$W/base"

say "kernel and initramfs out of the box's /boot (libvirt boots them directly)"
cp "$(ls "$ROOT"/boot/vmlinuz-* | sort -V | tail -1)" "$W/box/vmlinuz"
cp "$(ls "$ROOT"/boot/initrd.img-* | sort -V | tail -1)" "$W/box/initrd.img"
unmount

say "disk: ext4 of ${DISK_GB} GB from the tree, as qcow2"
mkfs.ext4 -q -F -L incastlab -d "$ROOT" "$W/root.raw" "${DISK_GB}G" >/dev/null
qemu-img convert -O qcow2 "$W/root.raw" "$W/box/box.img"
rm -f "$W/root.raw"
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' "$DISK_GB" >"$W/box/metadata.json"
cp scripts/vm-box.Vagrantfile "$W/box/Vagrantfile"
tar -C "$W/box" -cf "$BOX.tmp" metadata.json Vagrantfile vmlinuz initrd.img box.img
mv "$BOX.tmp" "$BOX"
echo "$inputs" >"$STAMP"
say "built $BOX: $(du -h "$BOX" | cut -f1) in $(( $(date +%s) - t0 )) s (inputs $inputs)"
