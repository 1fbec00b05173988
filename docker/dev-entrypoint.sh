#!/bin/sh
# Dev-image entrypoint (Tilt): run the service, and restart it in place whenever Tilt's live_update touches
# /tmp/shoal-restart after syncing new sources. A service that exits on its own ends the container with
# its exit status, so Kubernetes restarts it as usual. SIGTERM is passed on for a graceful stop.
set -u
trigger=/tmp/shoal-restart
child=0
stamp() { stat -c %Y "$trigger" 2>/dev/null || echo 0; }
stop() {
  [ "$child" -ne 0 ] && kill -TERM "$child" 2>/dev/null && wait "$child"
  exit 143
}
trap stop TERM INT
while :; do
  last=$(stamp)
  "$@" &
  child=$!
  while kill -0 "$child" 2>/dev/null; do
    if [ "$(stamp)" != "$last" ]; then
      echo "shoal-dev-entrypoint: sources changed, restarting $*" >&2
      kill -TERM "$child" 2>/dev/null
      wait "$child"
      continue 2
    fi
    sleep 1
  done
  wait "$child"
  exit $?
done
