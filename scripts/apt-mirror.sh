# Sourced by the scripts that fetch Debian packages outside the host's own
# apt (scripts/libtorch2-root.sh, scripts/cuda-compile-check.sh): the Debian
# mirror this machine's apt already uses, read from its sources. The repo
# names no registry itself; without a configured mirror the caller stops
# with an error that says where to configure one.
debian_mirror() {
  local uri
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  if [[ -z "$uri" ]]; then
    uri=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  fi
  if [[ -z "$uri" ]]; then
    echo "no Debian mirror found in /etc/apt/sources.list.d/debian.sources (URIs:) or" \
         "/etc/apt/sources.list (a 'deb' line); configure apt's mirror first" >&2
    return 1
  fi
  echo "$uri"
}
