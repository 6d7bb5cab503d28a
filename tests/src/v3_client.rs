//! etcd 3.6/3.7's v3 discovery join (`--discovery-token T --discovery-endpoints URL`), written
//! for these tests from the protocol facts (spec/etcd-v3-discovery.md): the same calls in the
//! same order, over a real etcd v3 client library (the `etcd-client` crate), so the service is
//! tested against what stock etcd members send.
//!
//! Sequence: Range the size key; Range the members prefix and remember the header revision R;
//! fail if full; one plain Put of the own key; Range again; while fewer than `size` members are
//! known, Watch the prefix from R+1 (no deadline); then the first `size` by create revision win.
//! A missing or non-numeric size is fatal; any other error is retried with backoff.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, TlsOptions, WatchOptions};

const PREFIX: &str = "/_etcd/registry";
/// etcd's backoff starts at 2 s; tests start smaller and cap sooner, the shape is the same.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// How a join ended, named as etcd's discovery errors are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinError {
    /// `discovery: size key not found`
    SizeNotFound,
    /// `discovery: size key is bad`
    BadSizeKey,
    /// `discovery: cluster is full`
    FullCluster,
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JoinError::SizeNotFound => "discovery: size key not found",
            JoinError::BadSizeKey => "discovery: size key is bad",
            JoinError::FullCluster => "discovery: cluster is full",
        })
    }
}

/// One member's discovery settings.
#[derive(Debug, Clone)]
pub struct Joiner {
    pub endpoints: Vec<String>,
    pub tls: Option<TlsOptions>,
    pub token: String,
    pub name: String,
    pub peer_url: String,
    /// `--discovery-user NAME --discovery-password PW`: Authenticate first, then send the token.
    pub user: Option<(String, String)>,
}

/// A registered member as the Ranges and Watch events show it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Registered {
    value: String,
    create_revision: i64,
}

/// What a round of the sequence failed on: fatal, or worth a retry.
enum Step {
    Fatal(JoinError),
    Retry(String),
}

impl From<etcd_client::Error> for Step {
    fn from(e: etcd_client::Error) -> Self {
        Step::Retry(e.to_string())
    }
}

impl Joiner {
    /// etcd's member id: the first 8 bytes of SHA-1 over the sorted peer URLs followed by the
    /// token (the cluster token is the discovery token), as lowercase hex without leading zeros.
    pub fn member_id(&self) -> String {
        let mut input = self.peer_url.clone().into_bytes();
        input.extend_from_slice(self.token.as_bytes());
        let digest = sha1(&input);
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        format!("{:x}", u64::from_be_bytes(first))
    }

    fn members_prefix(&self) -> String {
        format!("{PREFIX}/{}/members", self.token)
    }

    async fn connect(&self) -> Result<Client, Step> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5))
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(6));
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.clone());
        }
        let Some((user, password)) = &self.user else {
            return Ok(Client::connect(&self.endpoints, Some(options)).await?);
        };
        match Client::connect(&self.endpoints, Some(options.clone().with_user(user, password)))
            .await
        {
            // etcd's client carries on without a token when the server's auth is off.
            Err(etcd_client::Error::GRpcStatus(s))
                // 9: FAILED_PRECONDITION in the gRPC spec.
                if s.code() as i32 == 9
                    && s.message().contains("authentication is not enabled") =>
            {
                Ok(Client::connect(&self.endpoints, Some(options)).await?)
            }
            other => Ok(other?),
        }
    }

    /// Runs the whole join; returns `--initial-cluster` (`name=url,…` in create-revision order)
    /// or etcd's fatal discovery error. Retries everything else until `deadline`.
    pub async fn join(&self, deadline: Duration) -> anyhow::Result<Result<String, JoinError>> {
        let stop = tokio::time::Instant::now() + deadline;
        let mut backoff = FIRST_BACKOFF;
        let mut last = String::new();
        while tokio::time::Instant::now() < stop {
            match tokio::time::timeout_at(stop, self.join_once()).await {
                Ok(Ok(cluster)) => return Ok(Ok(cluster)),
                Ok(Err(Step::Fatal(e))) => return Ok(Err(e)),
                Ok(Err(Step::Retry(why))) => last = why,
                Err(_) => break,
            }
            // etcd's retry backoff, scaled down.
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        anyhow::bail!(
            "{} did not join within {deadline:?}; last error: {last}",
            self.name
        )
    }

    async fn join_once(&self) -> Result<String, Step> {
        let mut client = self.connect().await?;
        let (size, members, revision) = self.check_cluster(&mut client).await?;
        let own_key = format!("{}/{}", self.members_prefix(), self.member_id());
        if members.len() >= size && !first_n(&members, size).contains(&own_key) {
            return Err(Step::Fatal(JoinError::FullCluster));
        }
        let value = format!("{}={}", self.name, self.peer_url);
        client.put(own_key.as_str(), value.as_str(), None).await?;
        let (_, mut members, _) = self.check_cluster(&mut client).await?;
        if members.len() < size {
            self.wait_for_peers(&mut client, &mut members, size, revision)
                .await?;
        }
        let winners = first_n(&members, size);
        if !winners.contains(&own_key) {
            return Err(Step::Fatal(JoinError::FullCluster));
        }
        Ok(winners
            .iter()
            .filter_map(|k| members.get(k).map(|m| m.value.clone()))
            .collect::<Vec<_>>()
            .join(","))
    }

    /// The size, the members by key, and the header revision of the members Range.
    async fn check_cluster(
        &self,
        client: &mut Client,
    ) -> Result<(usize, BTreeMap<String, Registered>, i64), Step> {
        let size_key = format!("{PREFIX}/{}/_config/size", self.token);
        let resp = client.get(size_key.as_str(), None).await?;
        let Some(kv) = resp.kvs().first() else {
            return Err(Step::Fatal(JoinError::SizeNotFound));
        };
        let size = match kv.value_str().ok().and_then(|v| v.parse::<i64>().ok()) {
            Some(n) if n > 0 => n as usize,
            _ => return Err(Step::Fatal(JoinError::BadSizeKey)),
        };
        let resp = client
            .get(
                self.members_prefix().as_str(),
                Some(GetOptions::new().with_prefix()),
            )
            .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let mut members = BTreeMap::new();
        for kv in resp.kvs() {
            record(&mut members, kv);
        }
        Ok((size, members, revision))
    }

    /// One Watch on the members prefix from `revision + 1`, with no deadline, until `size`
    /// members are known. A canceled or compacted watch is opened again from the same start.
    async fn wait_for_peers(
        &self,
        client: &mut Client,
        members: &mut BTreeMap<String, Registered>,
        size: usize,
        revision: i64,
    ) -> Result<(), Step> {
        while members.len() < size {
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(revision + 1);
            let mut stream = client
                .watch(self.members_prefix().as_str(), Some(options))
                .await?;
            while members.len() < size {
                let Some(resp) = stream.message().await? else {
                    return Err(Step::Retry("watch stream ended".into()));
                };
                if resp.header().is_none() {
                    // etcd 3.6's client dereferences it without a check.
                    return Err(Step::Retry("watch response without a header".into()));
                }
                if resp.canceled() || resp.compact_revision() != 0 {
                    break;
                }
                for event in resp.events() {
                    if let Some(kv) = event.kv() {
                        record(members, kv);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Keeps a member whose value looks like `name=url` (etcd skips the others).
fn record(members: &mut BTreeMap<String, Registered>, kv: &etcd_client::KeyValue) {
    let (Ok(key), Ok(value)) = (kv.key_str(), kv.value_str()) else {
        return;
    };
    if !value.contains('=') {
        return;
    }
    members.insert(
        key.to_string(),
        Registered {
            value: value.to_string(),
            create_revision: kv.create_revision(),
        },
    );
}

/// The keys of the first `n` members by create revision.
fn first_n(members: &BTreeMap<String, Registered>, n: usize) -> Vec<String> {
    let mut by_rev: Vec<(&String, &Registered)> = members.iter().collect();
    by_rev.sort_by_key(|(_, m)| m.create_revision);
    by_rev.into_iter().take(n).map(|(k, _)| k.clone()).collect()
}

/// SHA-1 (FIPS 180-4), only for etcd's member id: no crate in the tree offers it.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut message = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&bit_len.to_be_bytes());
    for block in message.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, word) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&word.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_matches_the_standard_vectors() {
        let hex = |d: [u8; 20]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(hex(sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(hex(sha1(long)), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    }
}
