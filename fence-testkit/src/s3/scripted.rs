//! A fake S3 endpoint on loopback whose every answer a test scripts: for the status codes and
//! condition handling real servers cannot be made to produce on demand. Classification only;
//! fencing itself is always tested against the real SeaweedFS.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the endpoint saw of one request.
#[derive(Clone, Debug)]
pub struct Request {
    /// `GET`, `PUT`, `HEAD`, `DELETE`…
    pub method: String,
    /// The request target (path and query).
    pub target: String,
    /// The header block, lowercased.
    pub head: String,
}

impl Request {
    /// True when the request carries header `name` (lowercase).
    pub fn has_header(&self, name: &str) -> bool {
        self.head
            .lines()
            .any(|l| l.starts_with(&format!("{name}:")))
    }
}

/// A scripted answer.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Reply {
    /// 200 with an ETag and no body.
    pub fn ok() -> Self {
        Reply {
            status: 200,
            headers: vec![("ETag".into(), "\"d41d8cd98f00b204e9800998ecf8427e\"".into())],
            body: String::new(),
        }
    }

    /// An S3 error document.
    pub fn error(status: u16, code: &str) -> Self {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/xml".into())],
            body: format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>scripted {code}</Message></Error>"
            ),
        }
    }
}

/// Serves HTTP/1.1 on a free loopback port, answering each request with `script(request)`.
/// Returns the endpoint URL.
pub async fn endpoint(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> String {
    let script = Arc::new(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let script = script.clone();
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    // One request: headers, then a Content-Length body or a chunked body.
                    let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok());
                    let chunked = head.contains("transfer-encoding: chunked");
                    let body_start = end + 4;
                    let complete = |buf: &[u8]| match (length, chunked) {
                        (Some(n), _) => (buf.len() >= body_start + n).then_some(body_start + n),
                        (None, true) => buf[body_start..]
                            .windows(5)
                            .position(|w| w == b"0\r\n\r\n")
                            .map(|p| body_start + p + 5),
                        (None, false) => Some(body_start),
                    };
                    let Some(request_end) = complete(&buffer) else {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let first = String::from_utf8_lossy(&buffer[..end])
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_owned();
                    let mut words = first.split(' ');
                    let request = Request {
                        method: words.next().unwrap_or_default().to_owned(),
                        target: words.next().unwrap_or_default().to_owned(),
                        head,
                    };
                    buffer.drain(..request_end);
                    let reply = script(&request);
                    let mut text = format!("HTTP/1.1 {} Scripted\r\n", reply.status);
                    for (name, value) in &reply.headers {
                        text.push_str(&format!("{name}: {value}\r\n"));
                    }
                    let body = if request.method == "HEAD" {
                        ""
                    } else {
                        &reply.body
                    };
                    text.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
                    if socket.write_all(text.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{address}")
}
