// Creates an Azurite container with @azure/storage-blob (installed beside Azurite), run as
// `node -e "<this file>" <install dir> <account URL> <container> <account> <key>`: by
// scripts/services.d/azurite.sh for the examples' container, and by fence-testkit's
// AzuriteServer for the tests'.
const { BlobServiceClient, StorageSharedKeyCredential } =
  require(process.argv[1] + "/node_modules/@azure/storage-blob");
const key = new StorageSharedKeyCredential(process.argv[4], process.argv[5]);
new BlobServiceClient(process.argv[2], key).getContainerClient(process.argv[3])
  .createIfNotExists().then(() => process.exit(0), (e) => { console.error(String(e)); process.exit(1); });
