#!/usr/bin/env bash
# Headless Chromium pictures of a run's report page, to look at it as a reader would:
#   bash docs/screenshots.sh results/<run>      (or: make screenshots RUN=results/<run>)
# writes <run>/screenshot-top.png (the first screen) and <run>/screenshot-full.png (the whole page).
# Needs Debian's chromium (apt-get install chromium); not part of `make test`.
set -euo pipefail
run=${1:?usage: screenshots.sh RUN_DIR}
page="$(cd "$run" && pwd)/report.html"
[ -f "$page" ] || { echo "screenshots: $page does not exist; run \`mrclab report $run\` first" >&2; exit 2; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
shot() {  # $1 output file, $2 window size
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$profile" --hide-scrollbars \
    --window-size="$2" --screenshot="$1" "file://$page" >/dev/null 2>&1
  echo "screenshots: $1"
}
shot "$run/screenshot-top.png" 1280,900
shot "$run/screenshot-full.png" 1280,7000
