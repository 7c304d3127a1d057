# Azure Blob Storage for fence-object-store: Azurite (npm), with @azure/storage-blob to create
# containers. 3.35.0 is the last release that runs on Node 20. Tests start Azurites of their
# own (fence-testkit's AzuriteServer, data under .services/); this one, on 127.0.0.1 with data
# under .services/azurite/shared (emptied at each start), serves the examples' container
# (fence-examples' `local::AZURITE_*`; FENCE_AZURITE_URL when FENCE_AZURITE_PORT moves it).
# Idempotent: the Azurite this project started is reused, any other process on the port refused.

AZURITE_VERSION=3.35.0
STORAGE_BLOB_VERSION=12.28.0
AZURITE_PORT=${FENCE_AZURITE_PORT:-10100}
AZURITE_EXAMPLES_CONTAINER=fence-examples
export FENCE_AZURITE_DIR="$FENCE_SERVICES_DIR/azurite"
azurite_url="http://127.0.0.1:$AZURITE_PORT"
export FENCE_AZURITE_URL="$azurite_url/devstoreaccount1"
azurite_shared="$FENCE_AZURITE_DIR/shared"

azurite_install() {
  local bin="$FENCE_AZURITE_DIR/node_modules/.bin/azurite-blob"
  if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null)" = "$AZURITE_VERSION" ] &&
    [ -d "$FENCE_AZURITE_DIR/node_modules/@azure/storage-blob" ]; then
    return 0
  fi
  echo "installing azurite@$AZURITE_VERSION and @azure/storage-blob@$STORAGE_BLOB_VERSION into $FENCE_AZURITE_DIR"
  mkdir -p "$FENCE_AZURITE_DIR"
  npm install --prefix "$FENCE_AZURITE_DIR" --no-save --no-audit --no-fund --loglevel=error \
    "azurite@$AZURITE_VERSION" "@azure/storage-blob@$STORAGE_BLOB_VERSION" >/dev/null
}

azurite_start() {
  azurite_install
  if ours_on_port "$AZURITE_PORT" "$FENCE_AZURITE_DIR/azurite.pid"; then
    echo "Azurite on 127.0.0.1:$AZURITE_PORT was started by this project; reusing it"
  else
    require_free "$AZURITE_PORT" FENCE_AZURITE_PORT azurite || return 1
    rm -rf "$azurite_shared"
    mkdir -p "$azurite_shared"
    "$FENCE_AZURITE_DIR/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 \
      --blobPort "$AZURITE_PORT" --location "$azurite_shared/data" --skipApiVersionCheck --silent \
      >"$azurite_shared/azurite.log" 2>&1 </dev/null &
    echo $! >"$FENCE_AZURITE_DIR/azurite.pid"
    started_here "$FENCE_AZURITE_DIR/azurite.pid"
    wait_for_port "$AZURITE_PORT" 60 || { tail -20 "$azurite_shared/azurite.log" >&2; return 1; }
  fi
  # The emulator's published development account and key (not secrets).
  node -e "$(cat "$services_root/scripts/services.d/azurite-container.js")" "$FENCE_AZURITE_DIR" \
    "$azurite_url/devstoreaccount1" "$AZURITE_EXAMPLES_CONTAINER" devstoreaccount1 \
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
  echo "azurite: $azurite_url (container $AZURITE_EXAMPLES_CONTAINER)"
}

azurite_stop() {
  stop_pidfile "$FENCE_AZURITE_DIR/azurite.pid" 10
}

