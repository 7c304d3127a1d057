//! What an I/O error chain says about a request that failed: for adapters deciding whether a
//! request could have reached the server.

use std::error::Error;

/// Whether `error`, or any error it was caused by, is a refused TCP connection: the request
/// never reached a server, so it changed nothing (a retry can help; never ambiguous).
///
/// ```
/// use std::io::{Error, ErrorKind};
/// use fence_core::raw::refused_connection;
/// assert!(refused_connection(&Error::new(ErrorKind::ConnectionRefused, "no one listens")));
/// assert!(!refused_connection(&Error::new(ErrorKind::TimedOut, "sent, no answer")));
/// ```
pub fn refused_connection(error: &(dyn Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        cause = e.source();
    }
    false
}
