//! A loopback endpoint that speaks just enough of the Kafka protocol to take a client through
//! SASL/OAUTHBEARER authentication (KIP-255) and record what it presented: `ApiVersions`,
//! `SaslHandshake` (v0–v1) and `SaslAuthenticate` (v0–v1). After an authentication it closes
//! the connection (it is no broker): the evidence that a client's token provider is asked and
//! its token reaches the wire, byte for byte, beside the shared brokers (plaintext only).

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const API_VERSIONS: i16 = 18;
const SASL_HANDSHAKE: i16 = 17;
const SASL_AUTHENTICATE: i16 = 36;
const METADATA: i16 = 3;
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;

/// What clients presented.
#[derive(Debug, Default)]
struct Seen {
    mechanisms: Vec<String>,
    authentications: Vec<Vec<u8>>,
}

/// The endpoint; it stops when dropped.
#[derive(Debug)]
pub struct SaslRecorder {
    port: u16,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl SaslRecorder {
    /// Listens on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        SaslRecorder { port, seen, task }
    }

    /// `host:port`, for `bootstrap.servers`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The SASL mechanisms clients asked for, in order.
    pub fn mechanisms(&self) -> Vec<String> {
        self.lock().mechanisms.clone()
    }

    /// The bearer tokens clients authenticated with (from each client's first message,
    /// `n,,\x01auth=Bearer <token>\x01\x01`), in order.
    pub fn bearer_tokens(&self) -> Vec<String> {
        self.lock()
            .authentications
            .iter()
            .filter_map(|message| bearer_token(message))
            .collect()
    }

    /// The raw authentication messages.
    pub fn authentications(&self) -> Vec<Vec<u8>> {
        self.lock().authentications.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().expect("the recorder's lock")
    }
}

impl Drop for SaslRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The token of an OAUTHBEARER client's first message (RFC 7628: `gs2-header kvsep
/// auth=Bearer <token> kvsep kvsep`).
fn bearer_token(message: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(message).ok()?;
    text.split('\u{1}')
        .find_map(|pair| pair.strip_prefix("auth=Bearer "))
        .map(str::to_owned)
}

/// Serves one connection until the client authenticated or left.
async fn serve(mut stream: TcpStream, seen: Arc<Mutex<Seen>>) {
    loop {
        let Ok(size) = stream.read_i32().await else {
            return;
        };
        let mut request = vec![0u8; usize::try_from(size).unwrap_or(0)];
        if stream.read_exact(&mut request).await.is_err() {
            return;
        }
        let mut reader = Reader(&request);
        let (Some(api_key), Some(version), Some(correlation)) =
            (reader.i16(), reader.i16(), reader.i32())
        else {
            return;
        };
        let _client_id = reader.string();
        let mut body = Vec::new();
        match api_key {
            API_VERSIONS => api_versions(&mut body, version),
            SASL_HANDSHAKE => {
                let mechanism = reader.string().unwrap_or_default();
                let supported = mechanism == "OAUTHBEARER";
                seen.lock().expect("lock").mechanisms.push(mechanism);
                put_i16(
                    &mut body,
                    if supported {
                        0
                    } else {
                        UNSUPPORTED_SASL_MECHANISM
                    },
                );
                put_i32(&mut body, 1);
                put_string(&mut body, "OAUTHBEARER");
            }
            SASL_AUTHENTICATE => {
                let message = reader.bytes().unwrap_or_default();
                seen.lock().expect("lock").authentications.push(message);
                put_i16(&mut body, 0); // accepted
                put_i16(&mut body, -1); // no error message
                put_i32(&mut body, 0); // no server message
                if version >= 1 {
                    body.extend_from_slice(&3_600_000i64.to_be_bytes()); // session lifetime
                }
            }
            // Authenticated (or a client that skipped SASL): this is no broker.
            _ => return,
        }
        let mut response = Vec::with_capacity(body.len() + 8);
        put_i32(
            &mut response,
            i32::try_from(body.len() + 4).unwrap_or(i32::MAX),
        );
        put_i32(&mut response, correlation);
        response.extend_from_slice(&body);
        if stream.write_all(&response).await.is_err() {
            return;
        }
    }
}

/// The `ApiVersions` response body at `version` (v3 is the flexible encoding): the APIs a
/// client needs to authenticate, plus Metadata so that it goes on (and is cut off).
fn api_versions(body: &mut Vec<u8>, version: i16) {
    let apis: [(i16, i16, i16); 4] = [
        (API_VERSIONS, 0, 3),
        (SASL_HANDSHAKE, 0, 1),
        (SASL_AUTHENTICATE, 0, 1),
        (METADATA, 0, 9),
    ];
    put_i16(body, 0);
    if version >= 3 {
        body.push(u8::try_from(apis.len() + 1).unwrap_or(0)); // compact array length
        for (key, min, max) in apis {
            put_i16(body, key);
            put_i16(body, min);
            put_i16(body, max);
            body.push(0); // no tagged fields
        }
        put_i32(body, 0); // throttle time
        body.push(0); // no tagged fields
        return;
    }
    put_i32(body, i32::try_from(apis.len()).unwrap_or(0));
    for (key, min, max) in apis {
        put_i16(body, key);
        put_i16(body, min);
        put_i16(body, max);
    }
    if version >= 1 {
        put_i32(body, 0); // throttle time
    }
}

fn put_i16(out: &mut Vec<u8>, value: i16) {
    out.extend_from_slice(&value.to_be_bytes());
}

fn put_i32(out: &mut Vec<u8>, value: i32) {
    out.extend_from_slice(&value.to_be_bytes());
}

fn put_string(out: &mut Vec<u8>, value: &str) {
    put_i16(out, i16::try_from(value.len()).unwrap_or(i16::MAX));
    out.extend_from_slice(value.as_bytes());
}

/// Big-endian fields of a non-flexible request.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn i16(&mut self) -> Option<i16> {
        self.take(2).map(|b| i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A nullable string (length -1 is null).
    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.i16()?).ok()?;
        self.take(len)
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let len = usize::try_from(self.i32()?).ok()?;
        self.take(len).map(<[u8]>::to_vec)
    }
}
