#!/usr/bin/env bash
# A Debian 13 (trixie) root with LibTorch 2.6, for testing libfsdp against
# LibTorch 2.x on a Debian 12 host (which has 1.13), and a way to run a
# command in it with this source tree at /src.
#
#   scripts/libtorch2-root.sh                 create the root (once) and exit
#   scripts/libtorch2-root.sh CMD [ARGS...]   run CMD inside it, as root
#
# The root lives in $FSDP_LIBTORCH2_ROOT (default /var/lib/libfsdp/trixie-root)
# and is made once: debootstrap from the mirror apt already uses, then the
# packages below. A marker file written last says it is complete, so a root
# left half-made by an interrupted run is made again. A root made by hand
# without the marker is adopted when every package is installed in it.
#
# To run CMD, the script mounts what the tests need (proc, sys, dev, dev/pts,
# dev/shm, a private /run for `ip netns`, the source tree at /src and a ccache
# directory kept outside the tree, $FSDP_LIBTORCH2_CCACHE, default
# /var/cache/libfsdp-ccache-trixie) and unmounts on exit whatever it mounted.
# Runs are serialized by a lock, since they share the mounts.
# Needs root (debootstrap, mount, chroot).
set -euo pipefail

root=${FSDP_LIBTORCH2_ROOT:-/var/lib/libfsdp/trixie-root}
ccache_dir=${FSDP_LIBTORCH2_CCACHE:-/var/cache/libfsdp-ccache-trixie}
src=$(cd "$(dirname "$0")/.." && pwd)
suite=trixie
marker=.libfsdp-root-complete

# debootstrap's --include: what builds the tree.
base_packages=(libtorch-dev libgloo-dev g++ cmake make ccache)
# Then apt-get install: what the tests and tools use (as scripts/install-deps.sh).
extra_packages=(
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
  libfmt-dev libxxhash-dev rapidjson-dev libopenblas0-openmp fortunes gnuplot-nox
  openmpi-bin libopenmpi-dev iproute2 python3-torch
)

# shellcheck source=scripts/apt-mirror.sh
source "$src/scripts/apt-mirror.sh"

log() { echo "libtorch2-root: $*" >&2; }
die() { log "$*"; exit 1; }

if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || die "needs root (debootstrap, mount, chroot); run it as root"
  exec sudo --preserve-env=FSDP_LIBTORCH2_ROOT,FSDP_LIBTORCH2_CCACHE "$0" "$@"
fi

# --- mounts ----------------------------------------------------------------

mounted=()  # what this run mounted, in order; unmounted in reverse on exit

# Whether a file system other than the root's is mounted on TARGET. (Not
# `mountpoint`: it reads the mount table by path, and counts a mount that the
# root's bind onto itself hides.)
has_own_mount() { [[ $(stat -c %d "$1") != $(stat -c %d "$1/..") ]]; }

mount_once() {  # mount_once TARGET MOUNT-ARGS...: skips a target already mounted
  local target=$root/$1
  shift
  mkdir -p "$target"
  if has_own_mount "$target"; then return; fi
  mount "$@" "$target"
  mounted+=("$target")
}

bind_once() {  # bind_once TARGET SOURCE: skips a target that already shows SOURCE
  local target=$root/$1 source=$2
  mkdir -p "$target"
  if [[ $(stat -c %d:%i "$target") == $(stat -c %d:%i "$source") ]]; then return; fi
  mount --bind "$source" "$target"
  mounted+=("$target")
}

unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" ||
      log "could not unmount ${mounted[i]}"
  done
  mounted=()
}

mount_system() {
  # The root bound onto itself, so that / is a mount point in the chroot:
  # `ip netns exec` runs `mount --make-rslave /`, which needs one.
  if ! mountpoint -q "$root"; then
    mount --bind "$root" "$root"
    mounted+=("$root")
  fi
  mount_once proc -t proc proc
  mount_once sys -t sysfs sysfs
  mount_once dev --bind /dev
  mount_once dev/pts --bind /dev/pts
  mount_once dev/shm -t tmpfs -o mode=1777 tmpfs
  mount_once run -t tmpfs -o mode=0755 tmpfs  # `ip netns` keeps its names in /run/netns
}

# Refuses to delete a root that still has something mounted inside it
# (a bind mount of /dev or of the source tree would be deleted with it).
check_nothing_mounted() {
  local inside
  inside=$(findmnt -rn -o TARGET | grep -F "$root/" || true)
  [[ -z "$inside" ]] || die "will not delete $root: still mounted inside it:
$inside
unmount these first (umount -R)"
}

# --- the root --------------------------------------------------------------

missing_packages() {  # the packages not installed in the root
  local p status
  for p in "${base_packages[@]}" "${extra_packages[@]}"; do
    # shellcheck disable=SC2016  # ${Status} is dpkg-query's, not the shell's
    status=$(chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || echo "$p"
  done
}

# debootstrap deletes $root/debootstrap when it has finished; a root with
# dpkg and without that directory is one that apt can complete.
is_bootstrapped() {
  [[ -x "$root/usr/bin/dpkg-query" && -x "$root/usr/bin/apt-get" && ! -d "$root/debootstrap" ]]
}

install_in_root() {
  local packages=("$@")
  log "installing in the root: ${packages[*]}"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount_system
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  chroot "$root" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${packages[@]}"
  unmount_all
}

wanted_list() { printf '%s\n' "${base_packages[@]}" "${extra_packages[@]}"; }

make_root() {
  # The marker lists the packages; a list changed since adds what is new.
  if [[ -f "$root/$marker" && "$(cat "$root/$marker")" == "$(wanted_list)" ]]; then return; fi
  if is_bootstrapped; then
    local missing
    missing=$(missing_packages)
    if [[ -n "$missing" ]]; then
      # shellcheck disable=SC2086
      install_in_root $missing
    fi
    log "using $root (every package is installed)"
  else
    if [[ -e "$root" ]]; then
      log "$root is half-made (no $marker, debootstrap unfinished): making it again"
      check_nothing_mounted
      rm -rf --one-file-system "$root"
    fi
    if ! command -v debootstrap >/dev/null; then
      log "installing debootstrap"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap ||
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap; }
    fi
    local url
    url=$(debian_mirror) || die "cannot debootstrap without a Debian mirror"
    log "debootstrap $suite into $root from $url (about 5 minutes)"
    mkdir -p "$(dirname "$root")"
    local include
    include=$(IFS=,; echo "${base_packages[*]}")
    debootstrap --variant=minbase --include="$include" "$suite" "$root" "$url"
    install_in_root "${extra_packages[@]}"
  fi
  wanted_list > "$root/$marker"
}

# --- main ------------------------------------------------------------------

mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9

trap unmount_all EXIT
trap 'exit 130' INT TERM

make_root
(($# > 0)) || exit 0

mkdir -p "$ccache_dir"
mount_system
bind_once src "$src"
bind_once var/cache/libfsdp-ccache "$ccache_dir"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

chroot "$root" env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  CCACHE_DIR=/var/cache/libfsdp-ccache "$@"
