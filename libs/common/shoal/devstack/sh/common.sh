# Sourced by the build scripts: the cache dir, the Go caches in it, and one builder at a time per part
# (`one_builder NAME`: a second run waits for the first, then finds the cache warm).
CACHE=${SHOAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal}
mkdir -p "$CACHE"
export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build GOFLAGS=-buildvcs=false CGO_ENABLED=0
one_builder() {
  exec 9>"$CACHE/.$1.lock"
  flock -n 9 || { echo "$1: another build is running; waiting for it"; flock 9; }
}
