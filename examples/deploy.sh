#!/usr/bin/env bash
# Bring up a fleet on a running pantheon-serve, one model at a time: each load is checked with
# `pantheon-ctl fit` first, then loaded through the admin API and waited for, before the next.
#
#   PANTHEON_URL=http://127.0.0.1:8080 examples/deploy.sh fleet.txt [--token-file FILE]
#
# fleet.txt: one model per line, "NAME PATH DIES [CTX] [SLOTS]", e.g.
#   chat   /models/qwen2-7b-q4_k_m.gguf  cpu0        4096  4
#   worker /models/llama3-8b-q4_0.gguf   cpu1,cpu2   2048  2
# Blank lines and lines starting with '#' are skipped. Exit status: 0 when every model loaded,
# 3 when one was refused or failed (the ones after it are not attempted), 4 when the server is down.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ctl="$here/bin/pantheon-ctl"
fleet=${1:?usage: deploy.sh FLEET_FILE [--token-file FILE]}
shift
auth=("$@")

"$ctl" "${auth[@]}" health >/dev/null || { echo "deploy: the server is not healthy" >&2; exit 4; }
while read -r name path dies ctx slots; do
  [[ -z "${name:-}" || "$name" == \#* ]] && continue
  ctx=${ctx:-4096}
  slots=${slots:-4}
  echo "== $name: $path on $dies (ctx $ctx, slots $slots)"
  # A verdict on this host's memory: DOES-NOT-FIT stops the bring-up before anything changes.
  set +e
  "$ctl" fit "$path" --dies "$dies" --ctx "$ctx" --slots "$slots"
  verdict=$?
  set -e
  case $verdict in
    0) ;;
    1) echo "deploy: $name fits only tightly; loading anyway (the server re-checks live pressure)" ;;
    *) echo "deploy: $name does not fit here; stopping" >&2; exit 3 ;;
  esac
  # Blocks until the model is loaded or refused; the server admits one load at a time.
  "$ctl" "${auth[@]}" load "$path" --name "$name" --dies "$dies" --ctx "$ctx" --slots "$slots" || {
    echo "deploy: loading $name failed; stopping" >&2
    exit 3
  }
done < "$fleet"
"$ctl" "${auth[@]}" list
