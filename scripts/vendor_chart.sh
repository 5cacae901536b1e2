#!/usr/bin/env bash
# Re-vendor the dashboard's chart library (uPlot, MIT) from the npm registry into app/api/static/vendor/.
# The dashboard loads only these local files: no CDN and no build step at run time.
# Usage: scripts/vendor_chart.sh [VERSION]   (default: the pinned version below)
set -euo pipefail
VERSION="${1:-1.6.32}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/app/api/static/vendor"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
npm pack --silent "uplot@${VERSION}" >/dev/null
tar -xzf "uplot-${VERSION}.tgz"
mkdir -p "$DEST"
cp package/dist/uPlot.iife.min.js "$DEST/uPlot.iife.min.js"
cp package/dist/uPlot.min.css "$DEST/uPlot.min.css"
cp package/LICENSE "$DEST/uPlot.LICENSE"
printf 'uPlot %s (MIT), from the npm package "uplot"; reproduce with scripts/vendor_chart.sh\n' "$VERSION" >"$DEST/README.txt"
echo "vendored uPlot ${VERSION} into ${DEST}"
