//! What the handlers accept, as pure functions of the decoded request: which token a Range or
//! Watch reads, and what a Put writes. The server runs these on every call; the fuzz target
//! `discovery_grpc` runs them (through [`decode_call`]) on arbitrary bytes.

use prost::Message;
use tonic::Status;

use super::proto::etcdserverpb::watch_request::RequestUnion;
use super::proto::etcdserverpb::{
    AuthenticateRequest, PutRequest, RangeRequest, WatchCreateRequest, WatchRequest,
};
use super::status::key_refused;
use crate::keys::validate_member_value;
use crate::v3::keys::{WriteKey, token_of_range, write_key};

/// What a valid Put writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutCheck {
    /// `…/<token>/_config/size`: create the token with this size.
    Size { token: String, size: u32 },
    /// `…/<token>/members/<id>`: register a member.
    Member {
        token: String,
        key: String,
        value: String,
    },
}

/// The token a Range reads (at any revision: 0 or less is the newest, as in etcd).
pub fn range(r: &RangeRequest) -> Result<String, Status> {
    token_of_range(&r.key, &r.range_end).map_err(|e| key_refused(&e))
}

/// What a Put writes, or why not; `max_size` is `--max-size`.
pub fn put(p: &PutRequest, max_size: u32) -> Result<PutCheck, Status> {
    if p.lease != 0 || p.ignore_lease || p.ignore_value {
        return Err(Status::invalid_argument(
            "leases, ignore_lease and ignore_value are not served: discovery keys live as long as their token",
        ));
    }
    let key = write_key(&p.key).map_err(|e| key_refused(&e))?;
    let value = std::str::from_utf8(&p.value)
        .map_err(|_| Status::invalid_argument("the value is not UTF-8 text"))?;
    match key {
        WriteKey::Size { token } => match value.trim().parse::<u32>() {
            Ok(size) if (1..=max_size).contains(&size) => Ok(PutCheck::Size { token, size }),
            _ => Err(Status::invalid_argument(format!(
                "size {:?} is not allowed: use a whole number from 1 to {max_size} (--max-size)",
                value.chars().take(20).collect::<String>()
            ))),
        },
        WriteKey::Member { token, .. } => {
            validate_member_value(value).map_err(|why| {
                Status::invalid_argument(format!(
                    "member value {why}; etcd writes name=peerURL[,name=peerURL…]"
                ))
            })?;
            Ok(PutCheck::Member {
                token,
                // write_key accepted it, so the key is UTF-8.
                key: String::from_utf8_lossy(&p.key).into_owned(),
                value: value.to_string(),
            })
        }
    }
}

/// The token a watch follows.
pub fn watch_create(c: &WatchCreateRequest) -> Result<String, Status> {
    token_of_range(&c.key, &c.range_end).map_err(|e| key_refused(&e))
}

/// A decoded call and what the checks made of it.
#[derive(Debug)]
pub enum Call {
    Range(Result<String, Status>),
    Put(Result<PutCheck, Status>),
    /// A watch stream message: a create's token check, or another message kind.
    Watch(Option<Result<String, Status>>),
    /// An Authenticate request, decoded (its name and password are checked against the
    /// configured user, which holds no state to fuzz).
    Authenticate,
}

/// Decodes one gRPC message (5-byte prefix: compressed flag, big-endian length) of the method
/// at `path` as the server does (no compression, at most `max_message` bytes), and checks it.
pub fn decode_call(
    path: &str,
    frame: &[u8],
    max_message: usize,
    max_size: u32,
) -> Result<Call, Status> {
    // The server routes by path before it reads a body: an unserved method is Unimplemented
    // whatever it carries.
    if !matches!(
        path,
        "/etcdserverpb.KV/Range"
            | "/etcdserverpb.KV/Put"
            | "/etcdserverpb.Watch/Watch"
            | "/etcdserverpb.Auth/Authenticate"
    ) {
        return Err(Status::unimplemented(super::status::SERVED));
    }
    let (flag, rest) = frame
        .split_first()
        .ok_or_else(|| Status::internal("empty frame"))?;
    if *flag != 0 {
        return Err(Status::unimplemented(
            "compressed messages are not accepted",
        ));
    }
    let (len, body) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| Status::internal("short frame header"))?;
    let len = u32::from_be_bytes(*len) as usize;
    if len > max_message {
        return Err(Status::out_of_range(format!(
            "decoded message length too large: found {len} bytes, the limit is: {max_message} bytes"
        )));
    }
    let message = body
        .get(..len)
        .ok_or_else(|| Status::internal("frame shorter than its length"))?;
    let bad = |e: prost::DecodeError| Status::internal(e.to_string());
    match path {
        "/etcdserverpb.KV/Range" => Ok(Call::Range(range(
            &RangeRequest::decode(message).map_err(bad)?,
        ))),
        "/etcdserverpb.KV/Put" => Ok(Call::Put(put(
            &PutRequest::decode(message).map_err(bad)?,
            max_size,
        ))),
        "/etcdserverpb.Auth/Authenticate" => {
            AuthenticateRequest::decode(message).map_err(bad)?;
            Ok(Call::Authenticate)
        }
        "/etcdserverpb.Watch/Watch" => {
            let req = WatchRequest::decode(message).map_err(bad)?;
            Ok(Call::Watch(match req.request_union {
                Some(RequestUnion::CreateRequest(c)) => Some(watch_create(&c)),
                _ => None,
            }))
        }
        _ => Err(Status::unimplemented(super::status::SERVED)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0123456789abcdef0123456789abcdef";

    fn frame(message: &impl Message) -> Vec<u8> {
        let body = message.encode_to_vec();
        let mut out = vec![0];
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    fn put_call(key: &str, value: &str) -> Result<PutCheck, Status> {
        let req = PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            ..Default::default()
        };
        match decode_call("/etcdserverpb.KV/Put", &frame(&req), 1024, 9) {
            Ok(Call::Put(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn puts_are_size_keys_and_member_keys_only() {
        let size = format!("/_etcd/registry/{T}/_config/size");
        assert_eq!(
            put_call(&size, "3").ok(),
            Some(PutCheck::Size {
                token: T.into(),
                size: 3
            })
        );
        for bad in ["0", "10", "abc", ""] {
            let e = put_call(&size, bad).expect_err(bad);
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}");
        }
        let member = format!("/_etcd/registry/{T}/members/8e9e05c52164694d");
        assert!(matches!(
            put_call(&member, "n1=http://10.0.0.1:2380"),
            Ok(PutCheck::Member { .. })
        ));
        let e = put_call(&member, "no-url").expect_err("bad value");
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        let e = put_call("/foo", "x").expect_err("outside");
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
    }

    #[test]
    fn frames_are_bounded_and_unserved_paths_named() {
        let mut too_big = vec![0];
        too_big.extend_from_slice(&2048u32.to_be_bytes());
        let e = decode_call("/etcdserverpb.KV/Range", &too_big, 1024, 9).expect_err("big");
        assert_eq!(e.code(), tonic::Code::OutOfRange);
        let e = decode_call("/etcdserverpb.KV/Txn", &[7], 1024, 9).expect_err("txn");
        assert_eq!(e.code(), tonic::Code::Unimplemented);
        assert!(e.message().contains("KV/Range"));
        let e =
            decode_call("/etcdserverpb.KV/Range", &[0, 0, 0, 0, 9, 1], 1024, 9).expect_err("short");
        assert_eq!(e.code(), tonic::Code::Internal);
    }
}
