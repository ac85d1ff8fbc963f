#!/usr/bin/env bash
# Installs everything incastlab needs on a fresh Debian 12 / Ubuntu machine. Idempotent; run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
  echo "make deps: must run as root (try: sudo make deps)" >&2
  exit 1
fi

APT_PACKAGES=(mininet openvswitch-switch openvswitch-common tcpdump tshark iperf3 ethtool
  iputils-ping iproute2 cgroup-tools procps psmisc python3-venv python3-pip net-tools
  chromium chromium-driver)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "== apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

echo "== openvswitch"
if ! ovs-vsctl --timeout=2 show >/dev/null 2>&1; then
  /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null 2>&1 \
    || /usr/share/openvswitch/scripts/ovs-ctl start --no-ovs-vswitchd >/dev/null 2>&1 || true
  ovs-vsctl --timeout=5 show >/dev/null
fi

echo "== python venv (.venv, system site packages for mininet)"
if [[ ! -x .venv/bin/python ]]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -r requirements.txt
.venv/bin/python -m pip install -q --no-deps -e .
echo "== deps ready: $(.venv/bin/python -c 'import torch, os_ken, scapy, mininet; print("torch", torch.__version__)')"
