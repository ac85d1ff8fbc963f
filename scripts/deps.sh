#!/usr/bin/env bash
# Installs everything incastlab needs on a fresh Debian 12 machine or in the Vagrant VM (Debian 12 too).
# Idempotent; run as root. Environment:
#   INCASTLAB_TORCH_INDEX  an extra package index for the CPU build of torch (PyPI's torch wheel for
#                          a Python other than the one whose CPU wheel is on this machine's disk is
#                          a multi-GB CUDA build)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
  echo "make deps: must run as root (try: sudo make deps)" >&2
  exit 1
fi
. /etc/os-release 2>/dev/null || ID=unknown

mapfile -t APT_PACKAGES < <(grep -v '^#' scripts/apt-packages.txt | grep .)
# The dashboard's browser tests use Debian's chromium; Ubuntu ships it only as a snap, so there the
# browser tests skip (the dashboard itself needs no browser on the machine).
[[ "$ID" == "debian" ]] && APT_PACKAGES+=(chromium chromium-driver)
# Docker's default container profile needs apparmor_parser where the kernel runs AppArmor (Debian's
# stock kernel, in the VM); without it every `docker run` fails
[[ -d /sys/module/apparmor ]] && APT_PACKAGES+=(apparmor)
# the worker image's base is Debian bookworm (debootstrap): elsewhere its archive key must be installed
[[ "$ID" != "debian" ]] && APT_PACKAGES+=(debian-archive-keyring)
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
  # no systemd here: start the daemons by hand (kernel datapath if the module loads, else userspace)
  /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null 2>&1 || true
  ovs-vsctl --timeout=5 show >/dev/null || { echo "make deps: Open vSwitch does not start" >&2; exit 1; }
fi

echo "== docker"
# dockerd by systemd where it runs (the VM), else by hand (no systemd here): without a bridge or iptables
# rules of its own, since the containers incastlab starts use --network none (see topologies/containers.py)
if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
  if [[ -d /run/systemd/system ]]; then
    systemctl enable --now docker >/dev/null 2>&1 || systemctl start docker
  else
    env -u INCASTLAB_RUN setsid dockerd --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
      </dev/null >>/var/log/incastlab-dockerd.log 2>&1 &
  fi
  for _ in $(seq 60); do docker version --format '{{.Server.Version}}' >/dev/null 2>&1 && break; sleep 0.5; done
  docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || {
    echo "make deps: dockerd does not start (see /var/log/incastlab-dockerd.log)" >&2; exit 1; }
fi
echo "   dockerd $(docker version --format '{{.Server.Version}}'), $(docker info --format '{{.Driver}}, cgroup v{{.CgroupVersion}}' 2>/dev/null)"

echo "== python venv (.venv from /usr/bin/python3, with system site packages for mininet)"
if ! /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "make deps: /usr/bin/python3 is $(/usr/bin/python3 -V 2>&1); incastlab needs >= 3.11" >&2
  exit 1
fi
if [[ -x .venv/bin/python ]] && ! .venv/bin/python -c 'import mininet.net' >/dev/null 2>&1; then
  echo "   .venv does not see mininet (made elsewhere?): rebuilding it"
  rm -rf .venv
fi
[[ -x .venv/bin/python ]] || /usr/bin/python3 -m venv --system-site-packages .venv
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
if [[ -n "${INCASTLAB_TORCH_INDEX:-}" ]]; then
  pip+=(--extra-index-url "$INCASTLAB_TORCH_INDEX")
fi
"${pip[@]}" -r requirements.txt
"${pip[@]}" --no-deps --no-build-isolation -e . 2>/dev/null || "${pip[@]}" --no-deps -e .
echo "== wheelhouse for the worker image (make image builds it offline from these)"
.venv/bin/python -m topologies.image --wheels
echo "== deps ready: $(.venv/bin/python -c 'import torch, os_ken, scapy, mininet.net; print("torch", torch.__version__)')"
