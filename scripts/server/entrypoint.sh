#!/bin/sh
# A test server's main process: fresh host keys, a userspace Open vSwitch, then sshd in the foreground.
set -e
ssh-keygen -A >/dev/null
mkdir -p /run/sshd /var/run/openvswitch /var/log/openvswitch
/usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/var/log/openvswitch/ctl.log 2>&1 || {
  # no openvswitch kernel module to load: start the two daemons by hand (userspace datapath only)
  ovsdb-tool create /etc/openvswitch/conf.db 2>/dev/null || true
  ovsdb-server --remote=punix:/var/run/openvswitch/db.sock --pidfile --detach --log-file
  ovs-vsctl --no-wait init
  ovs-vswitchd --pidfile --detach --log-file
}
exec /usr/sbin/sshd -D -e
