#!/usr/bin/env bash
# demo.sh: pier's main job on this machine, in under two minutes. Builds pier (static release),
# starts a container with a published port from the `host` root (no image needed), checks that it
# answers, then prints the port-publishing table (`pier bench net`, short cells) and the start-time
# table (`pier bench start`). Extra arguments go to `pier bench start`.
# Needs root. Leaves nothing running: the demo container is removed on exit, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --release
export PATH="$HOME/.cargo/bin:$PATH"
pier="$PWD/target/$(rustc -vV | sed -n 's/^host: //p')/release/pier"
name="pier-demo-$$"
port="${PIER_DEMO_PORT:-18080}"

cleanup() { "$pier" rm -f "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT

echo "== pier run -d --name $name -p $port:8080 host pier bench pong"
# The `host` root holds the host's system directories; the pier binary itself is mounted in.
"$pier" run -d --name "$name" -p "$port:8080" -v "$pier:/tmp/pier:ro" \
    host /tmp/pier bench pong --port 8080
answer=""
for _ in $(seq 100); do
    answer=$(curl -fsS --max-time 1 "http://127.0.0.1:$port/" 2>/dev/null) && break
    sleep 0.05
done
if [ "$answer" != "pong" ]; then
    echo "demo: the container does not answer on 127.0.0.1:$port" >&2
    "$pier" logs "$name" >&2 || true
    exit 1
fi
echo "127.0.0.1:$port answered: $answer"
"$pier" ps
cleanup

echo
echo "== pier bench net (2 s cells, 1 round: a preview; docs/benchmarks.md has the full runs)"
"$pier" bench net --duration 2 --rounds 1 --conc 1,4

echo
echo "== pier bench start"
"$pier" bench start --runs 10 --warmup 1 "$@"
