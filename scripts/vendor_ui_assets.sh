#!/usr/bin/env bash
# Refresh the vendored third-party browser files from the npm registry (run by hand; the
# service and the tests only read the committed copies):
#   scripts/vendor_ui_assets.sh [SWAGGER_UI_DIST_VERSION] [AXE_CORE_VERSION]
# Swagger UI (served at /docs) goes to service/ui/static/swagger/, axe-core (the browser
# tests' accessibility check) to tests/assets/.
set -euo pipefail
cd "$(dirname "$0")/.."
swagger="${1:-5.35.0}"
axe="${2:-4.14.1}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "swagger-ui-dist@$swagger" "axe-core@$axe" >/dev/null)
mkdir -p "$tmp/swagger" "$tmp/axe"
tar xzf "$tmp/swagger-ui-dist-$swagger.tgz" -C "$tmp/swagger"
tar xzf "$tmp/axe-core-$axe.tgz" -C "$tmp/axe"
for f in swagger-ui-bundle.js swagger-ui-bundle.js.LICENSE.txt swagger-ui.css LICENSE NOTICE; do
  cp "$tmp/swagger/package/$f" service/ui/static/swagger/
done
cp "$tmp/axe/package/axe.min.js" tests/assets/axe.min.js
cp "$tmp/axe/package/LICENSE" tests/assets/axe-core.LICENSE
echo "swagger-ui-dist $swagger, axe-core $axe vendored; update the versions in" \
     "service/ui/static/swagger/README.md and tests/assets/README.md"
