# Azure Blob Storage for fence-object-store: Azurite (npm), with @azure/storage-blob to create
# the tests' container. Only installed here: each test starts its own instance on 127.0.0.1
# with data under .services/ (fence-testkit's AzuriteServer). 3.35.0 is the last release that
# runs on Node 20.

AZURITE_VERSION=3.35.0
STORAGE_BLOB_VERSION=12.28.0
export FENCE_AZURITE_DIR="$FENCE_SERVICES_DIR/azurite"

azurite_start() {
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

azurite_stop() { :; }
