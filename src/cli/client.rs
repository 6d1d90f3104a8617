//! A small blocking HTTP/1.1 client for rtrackd's Unix socket: one request per connection
//! (`Connection: close`), bodies framed by Content-Length, chunked encoding or the end of the
//! connection. Enough for a CLI, and it keeps rtrackctl free of an async runtime.
//!
//! In: the socket path, a method, a target, an optional JSON body and a timeout. Out: a
//! [`Response`] (status, content type, the body with any chunked framing removed), or a
//! [`ClientError`] when connecting, sending or reading fails or the answer is not HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Largest response accepted (the inventory of a big host is a few MB).
const MAX_RESPONSE: usize = 256 << 20;

/// Why a request got no HTTP answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting failed.
    #[error("{path}: cannot connect to rtrackd: {source}{hint}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The error that made connecting fail.
        source: std::io::Error,
        /// What to check.
        hint: &'static str,
    },
    /// Sending or receiving failed.
    #[error("{path}: {what}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The I/O error that made it fail.
        source: std::io::Error,
    },
    /// The answer is not HTTP as expected.
    #[error("{path}: rtrackd's answer is malformed: {message}")]
    Protocol {
        /// The socket.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Content-Type, if any.
    pub content_type: Option<String>,
    /// The response body's bytes (any chunked framing removed).
    pub body: Vec<u8>,
}

impl Response {
    /// The body as JSON (None if it is not JSON).
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// Sends one request over the socket at `path`.
pub fn request(
    path: &Path,
    method: &str,
    target: &str,
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Response, ClientError> {
    let mut stream = UnixStream::connect(path).map_err(|source| {
        let hint = match source.kind() {
            std::io::ErrorKind::NotFound => " (is rtrackd running? set --socket or RTRACK_SOCKET)",
            std::io::ErrorKind::PermissionDenied => {
                " (only root and members of the socket group may connect)"
            }
            std::io::ErrorKind::ConnectionRefused => " (no rtrackd is listening on it)",
            _ => "",
        };
        ClientError::Connect {
            path: path.to_path_buf(),
            source,
            hint,
        }
    })?;
    let io = |what: &'static str| {
        move |source| ClientError::Io {
            path: path.to_path_buf(),
            what,
            source,
        }
    };
    stream
        .set_read_timeout(Some(timeout))
        .map_err(io("set a timeout"))?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(io("set a timeout"))?;
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: rtrackctl/{}\r\nAccept: application/json\r\nConnection: close\r\n",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| body.map_or(Ok(()), |b| stream.write_all(b)))
        .map_err(io("send the request"))?;
    read_response(BufReader::new(stream), path)
}

fn protocol(path: &Path, message: impl Into<String>) -> ClientError {
    ClientError::Protocol {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Parses a response from `r`.
pub fn read_response(mut r: impl BufRead, path: &Path) -> Result<Response, ClientError> {
    let io = |source| ClientError::Io {
        path: path.to_path_buf(),
        what: "read the answer",
        source,
    };
    let mut line = String::new();
    r.read_line(&mut line).map_err(io)?;
    let mut parts = line.trim_end().splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(protocol(path, format!("status line {:?}", line.trim_end())));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol(path, format!("status line {:?}", line.trim_end())))?;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut content_type = None;
    loop {
        line.clear();
        if r.read_line(&mut line).map_err(io)? == 0 {
            return Err(protocol(path, "the connection closed inside the headers"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let Some((name, value)) = l.split_once(':') else {
            return Err(protocol(path, format!("header line {l:?}")));
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                length = Some(
                    value
                        .parse()
                        .map_err(|_| protocol(path, format!("Content-Length {value:?}")))?,
                )
            }
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "content-type" => content_type = Some(value.to_string()),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line).map_err(io)?;
            let size_text = line.trim_end().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_text.trim(), 16)
                .map_err(|_| protocol(path, format!("chunk size {size_text:?}")))?;
            if size == 0 {
                break;
            }
            if body.len() + size > MAX_RESPONSE {
                return Err(protocol(path, "the answer is too large"));
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..]).map_err(io)?;
            line.clear();
            r.read_line(&mut line).map_err(io)?;
        }
    } else if let Some(n) = length {
        if n > MAX_RESPONSE {
            return Err(protocol(path, "the answer is too large"));
        }
        body.resize(n, 0);
        r.read_exact(&mut body).map_err(io)?;
    } else {
        r.take(MAX_RESPONSE as u64)
            .read_to_end(&mut body)
            .map_err(io)?;
    }
    Ok(Response {
        status,
        content_type,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Result<Response, ClientError> {
        read_response(raw.as_bytes(), Path::new("/s"))
    }

    #[test]
    fn length_chunked_and_close_delimited_bodies() {
        let r = parse("HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}").unwrap();
        assert_eq!(r.status, 201);
        assert_eq!(r.json().unwrap()["a"], 1);
        let r = parse("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n").unwrap();
        assert_eq!(r.body, b"abcde");
        let r = parse("HTTP/1.0 200 OK\r\n\r\nuntil close").unwrap();
        assert_eq!(r.body, b"until close");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(parse("").is_err());
        assert!(parse("SSH-2.0-OpenSSH\r\n").is_err());
        assert!(parse("HTTP/1.1 abc OK\r\n\r\n").is_err());
        assert!(parse("HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n").is_err());
        assert!(parse("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort").is_err());
        assert!(parse("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n").is_err());
        assert!(parse("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n").is_err());
    }
}
