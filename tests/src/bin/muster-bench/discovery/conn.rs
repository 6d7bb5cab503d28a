//! The load generator's HTTP/1.1 client for `muster-bench discovery`: one keep-alive connection
//! per closed-loop client, speaking directly on a `TcpStream`. Apart from the workloads because
//! it is plumbing they share, and kept this small because on a 2-core machine a general-purpose
//! HTTP client costs as much CPU as the server under test spends.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Per-request ceiling: a hung server must end the benchmark, not stall it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A keep-alive HTTP/1.1 connection that sends one request at a time. It understands exactly
/// what the two servers answer with: a status line, headers, and a body framed by
/// `Content-Length` or `Transfer-Encoding: chunked`.
pub(super) struct Conn {
    authority: String,
    stream: Option<BufReader<TcpStream>>,
    request: Vec<u8>,
}

impl Conn {
    pub(super) fn new(authority: &str) -> Self {
        Conn {
            authority: authority.to_string(),
            stream: None,
            request: Vec::with_capacity(512),
        }
    }

    /// Sends a request and fails unless the answer has status `want`; returns the body.
    pub(super) async fn expect(
        &mut self,
        method: &str,
        path: &str,
        form: Option<&str>,
        want: u16,
    ) -> Result<String> {
        let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, self.send(method, path, form))
            .await
            .context("request timed out")?
            .inspect_err(|_| self.stream = None)?;
        let body = String::from_utf8_lossy(&body).into_owned();
        if status != want {
            bail!(
                "expected {want}, got {status}: {}",
                body.chars().take(200).collect::<String>()
            );
        }
        Ok(body)
    }

    async fn send(
        &mut self,
        method: &str,
        path: &str,
        form: Option<&str>,
    ) -> Result<(u16, Vec<u8>)> {
        if self.stream.is_none() {
            let tcp = TcpStream::connect(&self.authority).await?;
            tcp.set_nodelay(true)?;
            self.stream = Some(BufReader::new(tcp));
        }
        let stream = self.stream.as_mut().context("not connected")?;
        self.request.clear();
        self.request.extend_from_slice(
            format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.authority).as_bytes(),
        );
        if let Some(body) = form {
            self.request.extend_from_slice(
                format!(
                    "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        } else {
            self.request.extend_from_slice(b"\r\n");
        }
        stream.get_mut().write_all(&self.request).await?;

        let mut line = String::new();
        stream.read_line(&mut line).await?;
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {line:?}"))?;
        let mut length = None;
        let mut chunked = false;
        loop {
            line.clear();
            if stream.read_line(&mut line).await? == 0 {
                bail!("connection closed in headers");
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = Some(value.parse::<usize>()?);
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = value.eq_ignore_ascii_case("chunked");
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                stream.read_line(&mut line).await?;
                let size = usize::from_str_radix(line.trim(), 16)?;
                let start = body.len();
                body.resize(start + size + 2, 0);
                stream.read_exact(&mut body[start..]).await?;
                body.truncate(start + size);
                if size == 0 {
                    break;
                }
            }
        } else {
            body.resize(length.unwrap_or(0), 0);
            stream.read_exact(&mut body).await?;
        }
        Ok((status, body))
    }
}
