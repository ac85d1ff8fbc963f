#!/usr/bin/env bash
# make vm-check: the Vagrant VM, booted for real on this machine. Starts libvirtd/virtlogd if none
# answers, `vagrant up --provider libvirt` with the box make vm-box built (driver kvm where the CPU
# has it, else qemu: QEMU's TCG), lets the Vagrantfile's provisioning run (make deps, make image),
# then inside the VM: make fabric on the kernel datapath with a netem delay, a short make compare,
# and the incast experiment's DCTCP line; copies the run folders back to results/vm-<time>/ and
# destroys everything it made (domain, volumes, network, the daemons it started), also after a
# failure or Ctrl-C. Progress on stderr, each phase's wall time at the end (and in phases.tsv).
# ARGS: --keep (leave the VM up for `vagrant ssh`; then run `make vm-check ARGS=--destroy`).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "make vm-check: must run as root (try: sudo make vm-check)" >&2; exit 1; }
KEEP=0 DESTROY_ONLY=0
for a in "$@"; do
  case $a in
    --keep) KEEP=1 ;;
    --destroy) DESTROY_ONLY=1 ;;
    *) echo "make vm-check: unknown option $a (known: --keep, --destroy)" >&2; exit 2 ;;
  esac
done

OUT=$PWD/build/vm
BOX_FILE=$OUT/incastlab-bookworm.box
BOX_NAME=incastlab/bookworm
LIBVIRT=qemu:///system
VM_NETWORK=incastlab-mgmt  # the Vagrantfile's management network: its own, not vagrant-libvirt's shared one
export VAGRANT_HOME=$OUT/vagrant.d VAGRANT_DOTFILE_PATH=$OUT/dot INCASTLAB_VM_BOX=$BOX_NAME
export VAGRANT_DEFAULT_PROVIDER=libvirt VAGRANT_CHECKPOINT_DISABLE=1 LIBVIRT_DEFAULT_URI=$LIBVIRT
say() { echo "[vm-check] $*" >&2; }
indent() { sed -u -e 's/Progress: [0-9]*%\r\x1b\[K//g' -e 's/^/  /' >&2; }  # vagrant's output, without its progress bar
mkdir -p "$OUT"
exec 9>"$OUT/vm-check.lock"
flock -n 9 || { echo "make vm-check: another vm-check is running (pid $(cat "$OUT/vm-check.pid" 2>/dev/null))" >&2
  exit 1; }
if ((!DESTROY_ONLY)); then
  [[ -f $BOX_FILE ]] || { echo "make vm-check: no box at $BOX_FILE: run make vm-box first" >&2; exit 1; }
fi
echo $$ >"$OUT/vm-check.pid"  # after the early exits: no stale pid file hides a leftover

PHASES=()
phase_t0=0 phase_name=""
phase() {  # end the running phase (if any), start the next
  local now; now=$(date +%s)
  [[ -n $phase_name ]] && PHASES+=("$phase_name	$((now - phase_t0))")
  phase_name=${1:-} phase_t0=$now
  [[ -n $phase_name ]] && say "== $phase_name"
  true
}

# --- what this run started, so that only that is stopped -------------------------------------
STATE=$OUT/started  # kept across --keep, so that --destroy stops what the run started
STARTED_DAEMONS=()
STARTED_POOL=0
FORWARD_BEFORE=$(sysctl -n net.ipv4.ip_forward)
if [[ -f $STATE ]]; then . "$STATE"; fi
save_state() {
  printf 'STARTED_DAEMONS=(%s)\nSTARTED_POOL=%d\nFORWARD_BEFORE=%d\n' "${STARTED_DAEMONS[*]}" "$STARTED_POOL" \
    "$FORWARD_BEFORE" >"$STATE"
}
vm_teardown() {
  say "teardown: domain, volumes, network$( ((${#STARTED_DAEMONS[@]})) && echo ", ${STARTED_DAEMONS[*]}")"
  if command -v vagrant >/dev/null && [[ -d $VAGRANT_DOTFILE_PATH ]]; then
    timeout 300 vagrant destroy -f >/dev/null 2>&1 || true
  fi
  if command -v virsh >/dev/null && virsh version >/dev/null 2>&1; then
    for d in $(virsh list --all --name | grep '^incastlab' || true); do
      virsh destroy "$d" >/dev/null 2>&1 || true
      virsh undefine "$d" --nvram >/dev/null 2>&1 || virsh undefine "$d" >/dev/null 2>&1 || true
    done
    for v in $(virsh vol-list default 2>/dev/null | awk 'NR>2 && $1 ~ /^incastlab/ {print $1}'); do
      virsh vol-delete "$v" --pool default >/dev/null 2>&1 || true
    done
    if virsh net-info "$VM_NETWORK" >/dev/null 2>&1; then
      virsh net-destroy "$VM_NETWORK" >/dev/null 2>&1 || true
      virsh net-undefine "$VM_NETWORK" >/dev/null 2>&1 || true
    fi
    if ((STARTED_POOL)); then virsh pool-destroy default >/dev/null 2>&1 || true; fi
  fi
  local pid
  for pidfile in "${STARTED_DAEMONS[@]}"; do  # and wait for each to end: a libvirtd still shutting
    pid=$(cat "/run/$pidfile.pid" 2>/dev/null) || continue  # down answers nothing to the next run
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  done
  sysctl -q -w net.ipv4.ip_forward="$FORWARD_BEFORE" || true
  rm -f "$STATE"
}
finish() {
  local rc=$?
  trap - EXIT
  trap '' INT TERM  # a second Ctrl-C must not cut the teardown short
  phase ""
  if ((KEEP && rc == 0)); then
    say "the VM stays up (--keep): VAGRANT_DOTFILE_PATH=$VAGRANT_DOTFILE_PATH VAGRANT_HOME=$VAGRANT_HOME vagrant ssh;"
    say "end it with: make vm-check ARGS=--destroy"
  else
    local t0; t0=$(date +%s)
    vm_teardown
    PHASES+=("teardown	$(( $(date +%s) - t0 ))")
  fi
  if ((${#PHASES[@]})); then
    printf 'phase\twall_s\n' >"$OUT/phases.tsv"
    printf '%s\n' "${PHASES[@]}" >>"$OUT/phases.tsv"
    [[ -n ${RESULT_DIR:-} && -d ${RESULT_DIR:-} ]] && cp "$OUT/phases.tsv" "$RESULT_DIR/"
    say "phase wall times (s):"; printf '  %-12s %s\n' $(printf '%s\n' "${PHASES[@]}" | tr '\t' ' ') >&2
  fi
  rm -f "$OUT/vm-check.pid"
  ((rc == 0)) && say "done${RESULT_DIR:+: results in $RESULT_DIR}" || say "failed (exit $rc)"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

if ((DESTROY_ONLY)); then
  vm_teardown
  trap - EXIT; rm -f "$OUT/vm-check.pid"; exit 0
fi

phase host
need=()
for c in vagrant:vagrant virsh:libvirt-clients libvirtd:libvirt-daemon-system qemu-system-x86_64:qemu-system-x86 \
         qemu-img:qemu-utils dnsmasq:dnsmasq-base iptables:iptables rsync:rsync; do
  command -v "${c%%:*}" >/dev/null || [[ -x /usr/sbin/${c%%:*} ]] || need+=("${c#*:}")
done
dpkg-query -W -f='${Status}' vagrant-libvirt 2>/dev/null | grep -q 'install ok installed' || need+=(vagrant-libvirt)
if ((${#need[@]})); then
  say "apt: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need[@]}" >"$OUT/apt.log" 2>&1 || {
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >"$OUT/apt.log" 2>&1; } || {
    tail -3 "$OUT/apt.log" >&2; echo "make vm-check: apt could not install ${need[*]}" >&2; exit 1; }
fi
if ! virsh version >/dev/null 2>&1; then  # no systemd here: the daemons by hand, stopped at the end
  for _ in $(seq 60); do pgrep -x libvirtd >/dev/null || break; sleep 0.25; done  # one that is ending
  # 9>&-: the daemons must not inherit (and hold) this run's lock
  pgrep -x virtlogd >/dev/null || { /usr/sbin/virtlogd -d 9>&-; STARTED_DAEMONS+=(virtlogd); }
  pgrep -x libvirtd >/dev/null || { /usr/sbin/libvirtd -d 9>&-; STARTED_DAEMONS+=(libvirtd); }
  for _ in $(seq 40); do virsh version >/dev/null 2>&1 && break; sleep 0.25; done
  virsh version >/dev/null 2>&1 || { echo "make vm-check: libvirtd does not answer" >&2; exit 1; }
fi
if ! virsh pool-info default >/dev/null 2>&1; then  # where vagrant-libvirt puts the box and the disk
  mkdir -p /var/lib/libvirt/images
  virsh pool-create-as default dir --target /var/lib/libvirt/images >/dev/null; STARTED_POOL=1
fi
save_state
DRIVER=${INCASTLAB_VM_DRIVER:-}
if [[ -z $DRIVER ]]; then
  if grep -qwE 'vmx|svm' /proc/cpuinfo && [[ -w /dev/kvm ]]; then DRIVER=kvm; else DRIVER=qemu; fi
fi
export INCASTLAB_VM_DRIVER=$DRIVER
say "libvirt $(virsh version --daemon 2>/dev/null | awk '/daemon/ {print $NF}'), driver $DRIVER" \
  "($([[ $DRIVER == kvm ]] && echo "hardware virtualisation" || echo "QEMU's TCG: no vmx/svm on this CPU"))"

phase box
stamp=$(sha256sum "$BOX_FILE" | cut -c1-16)
if [[ $(cat "$OUT/box.added" 2>/dev/null) != "$stamp" ]]; then
  vagrant box add --force --name "$BOX_NAME" "$BOX_FILE" >"$OUT/box-add.log" 2>&1 || {
    tail -3 "$OUT/box-add.log" >&2; echo "make vm-check: vagrant box add failed" >&2; exit 1; }
  echo "$stamp" >"$OUT/box.added"
fi

phase boot
if ! vagrant up --provider libvirt --no-provision 2>&1 | indent; then
  echo "make vm-check: vagrant up failed" >&2; exit 1
fi

phase provision
if ! vagrant provision 2>&1 | indent; then
  echo "make vm-check: provisioning (make deps, make image) failed" >&2; exit 1
fi

in_vm() {  # one make target inside the VM, as root, in the synced copy
  vagrant ssh --no-tty -c "cd /vagrant && sudo $*" </dev/null 2>&1 | indent
  return "${PIPESTATUS[0]}"
}
RESULT_DIR=$PWD/results/vm-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULT_DIR"
copy_back() {  # --no-tty: a pty would mangle tar's stream
  vagrant ssh --no-tty -c "sudo tar -C /vagrant/results -cf - ." </dev/null 2>/dev/null | tar -x -C "$RESULT_DIR" || true
}
trap 'copy_back; exit 130' INT TERM

phase fabric
in_vm "make fabric ARGS='--datapath kernel --delay-ms 1 --workdir results/fabric'" || {
  copy_back; echo "make vm-check: make fabric failed in the VM" >&2; exit 1; }
phase compare
in_vm "make compare ARGS='--datapath kernel --steps ${INCASTLAB_VM_STEPS:-5} --results results'" || {
  copy_back; echo "make vm-check: make compare failed in the VM" >&2; exit 1; }
phase incast
in_vm "make incast ARGS='--datapath kernel --senders 1,4,8,15 --rounds 5 --lines base,cc=dctcp --results results'" || {
  copy_back; echo "make vm-check: the DCTCP incast failed in the VM" >&2; exit 1; }
phase copy
copy_back
vagrant ssh --no-tty -c 'uname -r; systemd-detect-virt || true' </dev/null >"$RESULT_DIR/guest.txt" 2>/dev/null || true
