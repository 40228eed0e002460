#!/bin/sh
# Corral VM initramfs /init: load the kit's modules, mount the sandbox's EROFS layers as
# read-only lowers under a writable upper, switch root and hand PID 1 to the guest agent.
# Kernel command line contract (guestkit.kernel_cmdline builds it):
#   corral.lowers=<dev>[,<dev>...]  base first; <dev> = pmem<N> | vd:<serial>
#   corral.upper=vd:<serial>        the writable upper: the sandbox's ext4 disk (its disk_mb)
#   corral.upper_mb=<N>             ...or a tmpfs of N MiB in guest RAM (bare boots)
#   corral.hostname=<name>
#   corral.tty=1                    also keep a shell on /dev/tty1 (the display)
#   corral.net=<addr>,<gw>          eth0 (virtio-net) at <addr>/31, default route and DNS via <gw>
# Any failure prints one `CORRAL-INIT-ERROR: <why>` console line and powers off.

# busybox's applet links are in the initramfs already (guestkit writes them): every fork
# and exec counts under TCG, so this script keeps them few.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

fail() {
    echo "CORRAL-INIT-ERROR: $*" > /dev/console
    sync
    poweroff -f
    reboot -f   # no power-off method: QEMU runs with -no-reboot, so this ends it too
    sleep 3600
}

log() {
    [ -n "$verbose" ] || return 0
    read -r up _ < /proc/uptime
    echo "[$up] corral-init: $*" > /dev/console
}

lowers=""
upper=""
upper_mb=""
hostname="sandbox"
tty=""
verbose=""
read -r cmdline < /proc/cmdline
for arg in $cmdline; do
    case "$arg" in
        corral.lowers=*) lowers="${arg#corral.lowers=}" ;;
        corral.upper=vd:*) upper="${arg#corral.upper=}" ;;
        corral.upper_mb=*) upper_mb="${arg#corral.upper_mb=}" ;;
        corral.hostname=*) hostname="${arg#corral.hostname=}" ;;
        corral.tty=1) tty=1 ;;
        corral.net=*) net="${arg#corral.net=}" ;;
        corral.verbose=1) verbose=1 ;;
    esac
done
[ -n "$lowers" ] || fail "no corral.lowers= on the kernel command line"
if [ -z "$upper" ]; then
    case "$upper_mb" in
        ''|*[!0-9]*) fail "corral.upper_mb must be a number of MiB, got '$upper_mb'" ;;
    esac
fi

log "init started"
# Module groups (guestkit lists each in dependency order), only those this machine uses,
# all loaded by one process, which passes <module>.<param>= options from the command line.
groups=/lib/modules/core.list
for d in /sys/bus/pci/devices/*; do
    [ -e "$d" ] && groups="$groups /lib/modules/pci.list"
    break
done
case ",$lowers" in *,pmem*) groups="$groups /lib/modules/pmem.list" ;; esac
[ -n "$tty" ] && groups="$groups /lib/modules/input.list"
[ -n "$net" ] && groups="$groups /lib/modules/net.list"
corral-agent load-modules /lib/modules $groups || log "some modules did not load"
log "modules loaded"

# Waits (up to 5 s: probing may be asynchronous) for a path to exist.
wait_for() {
    i=0
    while [ ! -e "$1" ]; do
        i=$((i + 1))
        [ $i -gt 500 ] && return 1
        usleep 10000
    done
}

# vd:<serial> -> /dev/vdX whose virtio-blk serial matches.
find_serial() {
    i=0
    while [ $i -le 500 ]; do
        for s in /sys/block/vd*/serial; do
            [ -e "$s" ] || continue
            if [ "$(cat "$s")" = "$1" ]; then
                d="${s%/serial}"
                echo "/dev/${d##*/}"
                return 0
            fi
        done
        i=$((i + 1))
        usleep 10000
    done
    return 1
}

mkdir -p /lowers /upper /newroot
n=0
lowerdir=""
layers_status=""
for dev in $(echo "$lowers" | tr ',' ' '); do
    mnt="/lowers/$n"
    mkdir -p "$mnt"
    case "$dev" in
        pmem[0-9]*)
            wait_for "/dev/$dev" || fail "layer $n: no device /dev/$dev"
            how=dax
            if ! mount -t erofs -o ro,dax=always "/dev/$dev" "$mnt" 2>/dev/null; then
                echo "corral-init: layer $n: /dev/$dev cannot be mounted with DAX, mounting without" > /dev/console
                mount -t erofs -o ro "/dev/$dev" "$mnt" || fail "layer $n: /dev/$dev is not a mountable EROFS image"
                how=pmem
            fi
            ;;
        vd:*)
            blk=$(find_serial "${dev#vd:}") || fail "layer $n: no virtio disk with serial ${dev#vd:}"
            mount -t erofs -o ro "$blk" "$mnt" || fail "layer $n: $blk (serial ${dev#vd:}) is not a mountable EROFS image"
            how=blk
            ;;
        *) fail "layer $n: unknown device '$dev' (want pmem<N> or vd:<serial>)" ;;
    esac
    # overlay wants the top layer first; the command line lists the base first
    lowerdir="$mnt${lowerdir:+:$lowerdir}"
    layers_status="$layers_status$n $dev $how
"
    n=$((n + 1))
done
log "layers mounted: $lowerdir"

if [ -n "$upper" ]; then
    # The sandbox's own disk: what it writes stays out of guest RAM, and a full disk is ENOSPC.
    blk=$(find_serial "${upper#vd:}") || fail "no virtio disk with serial ${upper#vd:} for the upper"
    mount -t ext4 -o noinit_itable "$blk" /upper || fail "upper: $blk is not a mountable ext4 disk"
else
    mount -t tmpfs -o "size=${upper_mb}m,mode=0755" upper /upper || fail "cannot mount a ${upper_mb} MiB tmpfs upper"
fi
mkdir -p /upper/upper /upper/work
mount -t overlay overlay -o "lowerdir=$lowerdir,upperdir=/upper/upper,workdir=/upper/work" /newroot \
    || fail "cannot mount the overlay root (lowerdir=$lowerdir)"

R=/newroot
mkdir -p $R/proc $R/sys $R/dev $R/tmp $R/run $R/.corral
if [ ! -e $R/home/user ]; then
    mkdir -p $R/home/user
    chown 1000:1000 $R/home/user
fi
chmod 1777 $R/tmp
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts $R/dev/pts
# RAM-backed mounts stay well below guest RAM together: a guest whose RAM is all tmpfs
# pages panics (PID 1, the agent, cannot be OOM-killed). With a disk upper, /tmp is on the disk.
mount -t tmpfs -o mode=1777,size=25% shm $R/dev/shm
[ -n "$upper" ] || mount -t tmpfs -o mode=1777,nosuid,nodev,size=25% tmp $R/tmp
mount -t tmpfs -o mode=0755,nosuid,nodev,size=10% run $R/run
# switch_root empties the initramfs: the agent (and a shell for the display) move along
cp /bin/corral-agent /bin/busybox $R/.corral/
# how each layer got mounted (index, device, dax|pmem|blk), for the host to report
printf '%s' "$layers_status" > $R/.corral/layers
hostname "$hostname"
ip link set lo up 2>/dev/null
if [ -n "$net" ]; then
    # The host side (the sandbox's namespace, its veth and the egress rules) is the node's;
    # root in the guest can change these, and reaches nothing more for it.
    wait_for /sys/class/net/eth0 || fail "no eth0 for corral.net"
    ip addr add "${net%,*}/31" dev eth0 && ip link set eth0 up && ip route add default via "${net#*,}" \
        || fail "cannot configure eth0 ($net)"
    echo "nameserver ${net#*,}" > $R/etc/resolv.conf 2>/dev/null || log "no /etc/resolv.conf in the image"
fi

agent_args="--port-name corral.agent"
[ -n "$tty" ] && agent_args="$agent_args --tty /dev/tty1"
log "root ready, switching to the agent"
exec switch_root $R /.corral/corral-agent $agent_args
fail "switch_root failed"
