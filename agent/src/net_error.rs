//! One way to say why a network call failed: the address, the kind of failure an operator can
//! act on (connection refused, timed out, TLS, DNS, an HTTP status), and the innermost cause in
//! the system's own words. reqwest's top-level text ("error sending request for url …") names
//! neither the host nor the cause, so every client of the agent and the CLI goes through here.

use std::error::Error;
use std::time::Duration;

/// What went wrong, as far as the operator's next step is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Refused,
    TimedOut,
    Tls,
    Dns,
    Http(u16),
    Other,
}

impl Cause {
    /// The words for it, with the next step where there is an obvious one.
    fn words(self) -> String {
        match self {
            Cause::Refused => {
                "connection refused: nothing listens there (check the host and port, and that \
                 the service runs)"
                    .into()
            }
            Cause::TimedOut => {
                "timed out: no answer (a firewall, a partition, or a host that is down)".into()
            }
            Cause::Tls => {
                "TLS handshake failed (is it serving plain HTTP, or another certificate?)".into()
            }
            Cause::Dns => "DNS lookup failed: the host name does not resolve".into(),
            Cause::Http(status) => format!("answered HTTP {status}"),
            Cause::Other => "failed".into(),
        }
    }
}

/// Classifies `e` by walking its source chain.
pub fn cause_of(e: &(dyn Error + 'static)) -> Cause {
    let mut found = Cause::Other;
    for err in chain(e) {
        if let Some(r) = err.downcast_ref::<reqwest::Error>() {
            if let Some(status) = r.status() {
                return Cause::Http(status.as_u16());
            }
            if r.is_timeout() {
                found = Cause::TimedOut;
            }
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return Cause::Refused,
                std::io::ErrorKind::TimedOut => return Cause::TimedOut,
                _ => {}
            }
        }
        if err.downcast_ref::<rustls::Error>().is_some() {
            return Cause::Tls;
        }
        let text = err.to_string().to_ascii_lowercase();
        if text.contains("failed to lookup address")
            || text.contains("dns error")
            || text.contains("name or service not known")
            || text.contains("no address associated")
        {
            return Cause::Dns;
        }
        if text.contains("tls") || text.contains("certificate") || text.contains("handshake") {
            found = Cause::Tls;
        }
        if text.contains("timed out") && found == Cause::Other {
            found = Cause::TimedOut;
        }
    }
    found
}

/// Every error in `e`'s chain, outermost first. An `io::Error` wrapping another error (rustls
/// puts its alert in one) skips that error in `source()`, so it is added from `get_ref()`.
fn chain<'a>(e: &'a (dyn Error + 'static)) -> Vec<&'a (dyn Error + 'static)> {
    let mut out = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        out.push(err);
        next = match err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn Error + 'static)),
            None => err.source(),
        };
    }
    out
}

/// The innermost cause of `e` ("Connection refused (os error 111)"), without internal identity
/// names ([`without_identity_names`]).
pub fn innermost(e: &(dyn Error + 'static)) -> String {
    without_identity_names(&chain(e).last().map(|c| c.to_string()).unwrap_or_default())
}

/// `text` with every internal identity name of a member (`node-<id>.<cluster>.muster`, the name
/// its certificate carries and the agent dials it by), and any URL built on one, replaced by
/// `member <id>`: the id is what `muster status` shows; the name is nothing an operator can
/// look up or type. A TLS failure's innermost cause quotes it ("certificate not valid for
/// name …"), and reqwest's own text quotes the whole URL.
pub fn without_identity_names(text: &str) -> String {
    const SUFFIX: &str = ".muster";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("node-") {
        // A name is one run of DNS characters; a URL around it runs to the next space, quote
        // or bracket.
        let (before, from) = rest.split_at(at);
        let name_len = from
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
            .unwrap_or(from.len());
        let name = &from[..name_len];
        let id = name
            .strip_suffix(SUFFIX)
            .and_then(|n| n.strip_prefix("node-"))
            .and_then(|n| n.split_once('.'))
            .map(|(id, _cluster)| id)
            .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()));
        let Some(id) = id else {
            out.push_str(before);
            out.push_str("node-");
            rest = &from["node-".len()..];
            continue;
        };
        let scheme = ["https://", "http://"]
            .into_iter()
            .find(|s| before.ends_with(s));
        match scheme {
            Some(scheme) => {
                out.push_str(&before[..before.len() - scheme.len()]);
                let url_len = from
                    .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | ']'))
                    .unwrap_or(from.len());
                rest = &from[url_len..];
            }
            None => {
                out.push_str(before);
                // A port after a bare name goes with it.
                let after = &from[name_len..];
                let port_len = after
                    .strip_prefix(':')
                    .map(|p| 1 + p.find(|c: char| !c.is_ascii_digit()).unwrap_or(p.len()))
                    .filter(|len| *len > 1)
                    .unwrap_or(0);
                rest = &after[port_len..];
            }
        }
        out.push_str(&format!("member {id}"));
    }
    out.push_str(rest);
    out
}

/// `<cause in words> (<innermost cause>)`, for errors that carry the address themselves.
pub fn reason(e: &(dyn Error + 'static)) -> String {
    format!("{} ({})", cause_of(e).words(), innermost(e))
}

/// `ADDR: <cause in words> (<innermost cause>)`, the one formatting of a failed call.
pub fn describe(addr: &str, e: &(dyn Error + 'static)) -> String {
    format!("{addr}: {}", reason(e))
}

/// A delay as people read it: `218ms` under a second, `1.2s` under a minute, `3m05s` above.
pub fn rounded(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> reqwest::Client {
        // As main does: reqwest is built without a default crypto provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client")
    }

    #[tokio::test]
    async fn a_refused_port_is_named_refused_with_its_address() {
        // A port that was just free: bound, noted, closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let e = client()
            .get(format!("http://{addr}/x"))
            .send()
            .await
            .expect_err("nothing listens");
        assert_eq!(cause_of(&e), Cause::Refused, "{e:?}");
        let text = describe(&addr, &e);
        assert!(
            text.starts_with(&addr) && text.contains("connection refused"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn tls_to_a_plain_listener_is_named_tls() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        // A plain-HTTP server: answers the ClientHello with an HTTP error and closes.
        let server = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                use tokio::io::AsyncWriteExt;
                let _ = stream
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let e = client()
            .get(format!("https://{addr}/x"))
            .send()
            .await
            .expect_err("not TLS");
        server.abort();
        assert_eq!(cause_of(&e), Cause::Tls, "{e:?}");
        assert!(
            describe(&addr, &e).contains("TLS handshake failed"),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn an_invalid_name_is_named_dns() {
        let e = client()
            .get("http://muster-test.invalid:80/x")
            .send()
            .await
            .expect_err(".invalid never resolves");
        assert_eq!(cause_of(&e), Cause::Dns, "{e:?}");
        let text = describe("muster-test.invalid:80", &e);
        assert!(text.contains("DNS lookup failed"), "{text}");
    }

    #[test]
    fn identity_names_and_urls_become_member_ids() {
        let table = [
            (
                "error sending request for url (https://node-62d9.c0ffee.muster:7001/raft/client)",
                "error sending request for url (member 62d9)",
            ),
            (
                "invalid peer certificate: certificate not valid for name \"node-1b11.c0ffee.muster\"; \
                 certificate is only valid for DnsName(\"node-2c.c0ffee.muster\")",
                "invalid peer certificate: certificate not valid for name \"member 1b11\"; \
                 certificate is only valid for DnsName(\"member 2c\")",
            ),
            ("node-ab.c0ffee.muster:7001 refused", "member ab refused"),
            // Not identity names: left alone.
            (
                "node-7 (10.0.0.7:7000) is down",
                "node-7 (10.0.0.7:7000) is down",
            ),
            ("node-xyz.c.muster", "node-xyz.c.muster"),
            (
                "Connection refused (os error 111)",
                "Connection refused (os error 111)",
            ),
        ];
        for (text, want) in table {
            assert_eq!(without_identity_names(text), want, "{text}");
        }
    }

    #[test]
    fn delays_are_rounded_for_people() {
        assert_eq!(rounded(Duration::from_nanos(218_211_773)), "218ms");
        assert_eq!(rounded(Duration::from_millis(1_234)), "1.2s");
        assert_eq!(rounded(Duration::from_secs(185)), "3m05s");
    }
}
