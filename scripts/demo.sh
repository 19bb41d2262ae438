#!/usr/bin/env bash
# demo.sh: pier's main job on this machine. Builds pier (static release), starts containers from a
# busybox root, then measures container start time side by side with crun and runc
# (`pier bench start`) and prints the table. Extra arguments go to `pier bench start`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --release
export PATH="$HOME/.cargo/bin:$PATH"
exec "target/$(rustc -vV | sed -n 's/^host: //p')/release/pier" bench start "$@"
