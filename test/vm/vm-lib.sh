# SPDX-License-Identifier: BSD-2-Clause
# vm-lib.sh: the parts of the Soft-RoCE guest harnesses that evr-vm (one
# guest) and evr-2vm (two guests on an emulated link) share.  Sourced, not
# run.  The caller sets VM_PROG (its name, for messages) and calls:
#
#   vm_die MSG...      print "VM_PROG: MSG" and exit 125
#   vm_host_setup      check (as root: install) the host packages; sets CACHE
#   vm_kernel          Debian's kernel package, unpacked once into CACHE;
#                      sets KVER and KROOT
#   vm_initrd          the busybox initramfs, built once into CACHE; sets
#                      INITRD
#
# The guest's init loads the modules, mounts the host's / read-only over 9p
# (tag hostroot) and the work directory read-write (tag work), reads the
# directory's absolute path from .evr-vm/RUN/dir in it -- RUN being the
# kernel parameter evrvm.run -- mounts it at that path, and chroots into the
# host root to run .evr-vm/RUN/guest.sh with bash.
# Kernel and initramfs are cached in $EVR_VM_CACHE (default
# /var/cache/evrdma-vm for root, else ~/.cache/evrdma-vm).

VM_LIB=$(readlink -f "${BASH_SOURCE[0]}")

vm_die() { echo "${VM_PROG:-evr-vm}: $*" >&2; exit 125; }

vm_host_setup() {
	if [ "$(id -u)" = 0 ]; then CACHE=${EVR_VM_CACHE:-/var/cache/evrdma-vm}
	else CACHE=${EVR_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/evrdma-vm}; fi
	mkdir -p "$CACHE" || vm_die "cannot create cache directory $CACHE"

	# Host packages: the guest runs the host's own binaries and libraries.
	local pkgs=(qemu-system-x86 busybox-static cpio kmod iproute2 rdma-core
		ibverbs-providers ibverbs-utils rdmacm-utils perftest)
	local ok missing=() p
	ok=" $(dpkg-query -W -f='${db:Status-Abbrev}${Package} ' "${pkgs[@]}" 2>/dev/null | sed 's/ii /=/g' || :) "
	for p in "${pkgs[@]}"; do [[ $ok == *"=$p "* ]] || missing+=("$p"); done
	if [ ${#missing[@]} -gt 0 ]; then
		[ "$(id -u)" = 0 ] || vm_die "missing host packages; run: sudo apt-get install ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		{ apt-get update -qq && apt-get install -y -qq "${missing[@]}"; } >/dev/null 2>&1 ||
			vm_die "could not install host packages: ${missing[*]}"
	fi
	command -v qemu-system-x86_64 >/dev/null || vm_die "qemu-system-x86_64 not found (package qemu-system-x86)"
}

# Debian's kernel package, unpacked once into the cache.
# vm_tmp_args DIR: QEMU arguments that share the host's /tmp read-write
# when DIR lies under it.  The guest's root is the host's, read-only, with a
# fresh tmpfs on /tmp -- which would hide a source tree or build directory
# that lives in the host's /tmp (a clone in a temporary directory).
vm_tmp_args() {
	case $1 in
	/tmp/*) printf '%s\n' -virtfs "local,path=/tmp,mount_tag=hosttmp,security_model=none,multidevs=remap" ;;
	esac
}

vm__kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}' || :; }
vm_kernel() {
	local KPKG tmp
	# apt-cache is slow without a pkgcache; remember its answer until apt lists change.
	if [ "$CACHE/kernel-package" -nt /var/lib/apt/lists ]; then KPKG=$(cat "$CACHE/kernel-package")
	else KPKG=$(vm__kpkg); [ -z "$KPKG" ] || { echo "$KPKG" > "$CACHE/.kpkg.$$"; mv -f "$CACHE/.kpkg.$$" "$CACHE/kernel-package"; }; fi
	if [ -z "$KPKG" ]; then
		# No apt lists: reuse a cached kernel, else refresh the lists (root only).
		KPKG=$(cd "$CACHE" && ls -d [0-9]*-amd64 2>/dev/null | sort -V | tail -1 | sed 's/^/linux-image-/' || :)
		if [ -z "$KPKG" ] && [ "$(id -u)" = 0 ]; then apt-get update -qq >/dev/null 2>&1 || :; KPKG=$(vm__kpkg); fi
		[ -n "$KPKG" ] || vm_die "cannot find Debian kernel package (apt-cache depends linux-image-amd64 gave nothing)"
	fi
	KVER=${KPKG#linux-image-}
	KROOT=$CACHE/$KVER
	if [ ! -f "$KROOT/boot/vmlinuz-$KVER" ]; then
		tmp=$(mktemp -d "$CACHE/.kernel.XXXXXX")
		(cd "$tmp" && apt-get download "$KPKG") >"$tmp/log" 2>&1 ||
			{ rm -rf "$tmp"; vm_die "cannot download Debian kernel package $KPKG"; }
		{ dpkg-deb -x "$tmp"/*.deb "$tmp/root" && depmod -b "$tmp/root" "$KVER"; } ||
			{ rm -rf "$tmp"; vm_die "cannot unpack kernel package $KPKG"; }
		# Whoever renames first wins a race; the loser just discards its copy.
		mv -T "$tmp/root" "$KROOT" 2>/dev/null || :
		rm -rf "$tmp"
		[ -f "$KROOT/boot/vmlinuz-$KVER" ] || vm_die "kernel $KVER missing from $KROOT"
	fi
}

# Initramfs: busybox and the modules we need, in modules.dep order.
# crc32_generic matters: without it 'rdma link add' fails with ENOENT.
# virtio_net and sch_netem serve the two-guest harness (NIC, netem loss).
vm_initrd() {
	local M work order m
	INITRD=$CACHE/initrd-$KVER.gz
	[ ! -f "$INITRD" ] || [ "$VM_LIB" -nt "$INITRD" ] || return 0
	M=$KROOT/lib/modules/$KVER
	work=$(mktemp -d "$CACHE/.initrd.XXXXXX")
	mkdir -p "$work"/{bin,mods,proc,sys,dev,mnt,host}
	cp "$(command -v busybox)" "$work/bin/busybox"
	order=" "
	vm__add() {
		local line d f
		line=$(grep -E "(^|/)$1\.ko(\.xz|\.zst|\.gz)?:" "$M/modules.dep" | head -1)
		[ -n "$line" ] || { rm -rf "$work"; vm_die "kernel module $1 not found in $KVER"; }
		for d in ${line#*:}; do d=${d##*/}; d=${d%%.ko*}; [[ $order == *" $d "* ]] || vm__add "$d"; done
		[[ $order == *" $1 "* ]] && return
		order+="$1 "; f=$M/${line%%:*}
		case "$f" in
		*.xz) xz -dc "$f" ;; *.zst) zstd -dcq "$f" ;; *.gz) gzip -dc "$f" ;; *) cat "$f" ;;
		esac > "$work/mods/$1.ko"
	}
	for m in crc32_generic virtio_pci 9pnet_virtio 9p rdma_rxe rdma_ucm dummy veth virtio_net sch_netem; do vm__add "$m"; done
	echo "${order# }" > "$work/mods/order"
	cat > "$work/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
fail() { echo "evr-vm: guest: $*"; echo o > /proc/sysrq-trigger; sleep 30; }
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do insmod /mods/$m.ko || echo "evr-vm: guest: insmod $m failed"; done
for w in $(cat /proc/cmdline); do case $w in evrvm.run=*) run=${w#*=} ;; esac; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000 hostroot /host || fail "cannot mount host root"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=mmap work /mnt || fail "cannot mount work dir"
dir=$(cat "/mnt/.evr-vm/$run/dir") || fail "no run directory $run"
mount -t proc proc /host/proc; mount -t sysfs sys /host/sys; mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/pts /host/dev/shm; mount -t devpts devpts /host/dev/pts; mount -t tmpfs shm /host/dev/shm
# /tmp: the host's own when it was shared (the work dir, and so probably the
# source tree, lives under it), else a fresh tmpfs
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 hosttmp /host/tmp 2>/dev/null ||
	mount -t tmpfs tmp /host/tmp
mount -t tmpfs run /host/run
mkdir -p "/host$dir" 2>/dev/null; mount -o bind /mnt "/host$dir" || fail "cannot bind $dir"
exec chroot /host /bin/bash "$dir/.evr-vm/$run/guest.sh"
EOF
	chmod +x "$work/init"
	(cd "$work" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$work.gz" ||
		{ rm -rf "$work" "$work.gz"; vm_die "cannot build initramfs"; }
	mv -f "$work.gz" "$INITRD"
	rm -rf "$work"
}
