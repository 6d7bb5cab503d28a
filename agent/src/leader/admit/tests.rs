//! A discovery registrant's admission against the in-memory replica and a cohort given by the
//! test: who is admitted, who is asked again, and who is refused without a write.

use muster_shared::tls::NodeKey;

use super::*;
use crate::api::ErrorKind;
use crate::api::join::{JoinRequest, SecretHello};
use crate::discovery::Registration;
use crate::leading::fake::{CLUSTER_ID, Fixture, block_on};
use crate::state::member_id;
use crate::state::{FormationRecord, NodeId};

const T0: u64 = 1_700_000_000_000;
const URL: &str = "https://discovery.example/abc123";

/// The cohort as the discovery service would list it, or the service down.
struct Cohort(Option<Vec<Registration>>);

impl Registrations for Cohort {
    async fn cohort(&self, url: &str) -> Result<Vec<Registration>, ApiError> {
        assert_eq!(url, URL, "asked the formation's own URL");
        self.0
            .clone()
            .ok_or_else(|| ApiError::new(ErrorKind::Unavailable, "discovery is down"))
    }
}

/// A registrant with its own key: its member id comes from the key.
struct Registrant {
    key: NodeKey,
    name: String,
    addr: String,
}

impl Registrant {
    fn new(name: &str, addr: &str) -> Self {
        Self {
            key: NodeKey::generate().expect("key"),
            name: name.into(),
            addr: addr.into(),
        }
    }

    fn id(&self) -> NodeId {
        muster_shared::tls::member_id_of_key(&self.key.fingerprint()).expect("an id")
    }

    fn registration(&self) -> Registration {
        Registration {
            id: member_id(self.id()),
            name: self.name.clone(),
            addr: self.addr.clone(),
            created_index: 1,
        }
    }

    fn request(&self) -> JoinRequest {
        JoinRequest {
            discovery_url: URL.into(),
            member_id: member_id(self.id()),
            name: self.name.clone(),
            addr: self.addr.clone(),
            csr_pem: self.key.csr_pem(&self.name, "127.0.0.1").expect("csr"),
        }
    }
}

fn forming() -> Fixture {
    let fx = Fixture::new(T0);
    fx.replica.set_formation(Some(FormationRecord::Discovery {
        url: URL.into(),
        size: 3,
    }));
    fx
}

fn refused<T>(r: Result<T, ApiError>) -> ErrorKind {
    match r {
        Ok(_) => panic!("admitted"),
        Err(e) => e.kind,
    }
}

#[test]
fn a_registrant_of_the_cohort_is_admitted_as_a_nonvoter_and_again_after_a_lost_answer() {
    let fx = forming();
    let n2 = Registrant::new("n2", "127.0.0.2:7000");
    let cohort = Cohort(Some(vec![n2.registration()]));
    block_on(async {
        let admitted = admit_registrant_from(fx.leader(), &cohort, n2.request())
            .await
            .expect("admitted");
        assert_eq!(admitted.cluster_id, CLUSTER_ID);
        assert_eq!(admitted.node_id, member_id(n2.id()));
        assert!(muster_shared::tls::issued_by(
            &admitted.cert_pem,
            fx.ca.cert_pem()
        ));
        let view = fx.replica.view();
        assert!(view.nodes.contains_key(&n2.id()) && !view.voters.contains(&n2.id()));
        // Its answer was lost and the formation has ended since: its key still proves it is
        // that member, and the discovery service is not asked again.
        fx.replica.set_formation(None);
        let again = admit_registrant_from(fx.leader(), &Cohort(None), n2.request())
            .await
            .expect("re-admitted");
        assert!(muster_shared::tls::issued_by(
            &again.cert_pem,
            fx.ca.cert_pem()
        ));
    });
}

#[test]
fn a_registrant_is_refused_without_a_write_unless_its_key_url_and_registration_agree() {
    let n2 = Registrant::new("n2", "127.0.0.2:7000");
    let stranger = Registrant::new("n9", "127.0.0.9:7000");
    let cohort = Cohort(Some(vec![n2.registration()]));
    let fx = forming();
    let before = fx.replica.writes();
    block_on(async {
        let l = fx.leader();
        // A CSR for another key than the one the member id comes from.
        let mut other_key = n2.request();
        other_key.csr_pem = stranger.request().csr_pem;
        assert_eq!(
            refused(admit_registrant_from(l, &cohort, other_key).await),
            ErrorKind::Unauthorized
        );
        let mut not_an_id = n2.request();
        not_an_id.member_id = "0xZZ".into();
        assert_eq!(
            refused(admit_registrant_from(l, &cohort, not_an_id).await),
            ErrorKind::InvalidArgument
        );
        // Not among the first registrants.
        assert_eq!(
            refused(admit_registrant_from(l, &cohort, stranger.request()).await),
            ErrorKind::Unauthorized
        );
        // Registered under another name or address than it asks for.
        let mut moved = n2.request();
        moved.addr = "127.0.0.3:7000".into();
        assert_eq!(
            refused(admit_registrant_from(l, &cohort, moved).await),
            ErrorKind::Unauthorized
        );
        // Through another discovery URL.
        let mut elsewhere = n2.request();
        elsewhere.discovery_url = "https://discovery.example/other".into();
        assert_eq!(
            refused(admit_registrant_from(l, &cohort, elsewhere).await),
            ErrorKind::Unauthorized
        );
        // The discovery service cannot be asked: unavailable, for the registrant to retry.
        assert_eq!(
            refused(admit_registrant_from(l, &Cohort(None), n2.request()).await),
            ErrorKind::Unavailable
        );
    });
    assert_eq!(fx.replica.writes(), before, "no refusal writes");
    // No formation in progress: registrants are not admitted at all.
    let formed = Fixture::new(T0);
    block_on(async {
        assert_eq!(
            refused(admit_registrant_from(formed.leader(), &cohort, n2.request()).await),
            ErrorKind::Unauthorized
        );
    });
    assert!(!formed.replica.view().nodes.contains_key(&n2.id()));
}

// --- the pre-shared join secret -------------------------------------------------------------

/// A cluster formed with `secret`, valid until `expires_ms`.
fn with_secret(secret: &muster_shared::token::JoinSecret, expires_ms: u64) -> Fixture {
    let fx = Fixture::new(T0);
    fx.replica.set_join_token(
        &secret.id(),
        crate::state::JoinTokenRecord::join_secret(
            secret.secret_hash(),
            "pre-shared join secret",
            T0,
            expires_ms,
            None,
            secret.verify_key(),
        ),
    );
    fx
}

/// What a machine holding `secret` sends (`start/secret.rs`): no secret, its signature over
/// what it asks.
fn secret_join(secret: &muster_shared::token::JoinSecret, who: &Registrant) -> TokenJoin {
    let fingerprint = who.key.fingerprint();
    let node_id = member_id(who.id());
    TokenJoin {
        token_id: secret.id(),
        secret_sha256: String::new(),
        secret_signature: Some(secret.sign_join(&muster_shared::token::SecretJoinClaim {
            node_id: &node_id,
            name: &who.name,
            addr: &who.addr,
            key_fingerprint: &fingerprint,
        })),
        node_id,
        name: who.name.clone(),
        addr: who.addr.clone(),
        key_fingerprint: fingerprint,
        csr_pem: who.key.csr_pem(&who.name, "127.0.0.1").expect("csr"),
        zone: None,
        version: None,
        can_start_as_spare: false,
    }
}

#[test]
fn a_member_proves_the_join_secret_it_was_formed_with_and_admits_its_holders() {
    let secret = muster_shared::token::JoinSecret::generate();
    let fx = with_secret(&secret, u64::MAX);
    let nonce = "ab".repeat(16);
    let hello = SecretHello {
        secret_id: secret.id(),
        nonce: nonce.clone(),
    };
    let proof = prove_secret(fx.leader(), &hello).expect("proved");
    assert_eq!(proof.cluster_id, CLUSTER_ID);
    assert_eq!(proof.ca_pin, fx.ca.pin());
    assert_eq!(
        proof.proof,
        muster_shared::token::secret_proof(&secret.secret_hash(), &nonce, fx.ca.pin(), CLUSTER_ID)
    );
    // Another secret is unknown here, and a malformed hello is refused before any lookup.
    let other = muster_shared::token::JoinSecret::generate();
    let unknown = SecretHello {
        secret_id: other.id(),
        nonce: nonce.clone(),
    };
    assert_eq!(
        refused(prove_secret(fx.leader(), &unknown)),
        ErrorKind::NotFound
    );
    let short = SecretHello {
        secret_id: secret.id(),
        nonce: "ab".into(),
    };
    assert_eq!(
        refused(prove_secret(fx.leader(), &short)),
        ErrorKind::InvalidArgument
    );

    let n2 = Registrant::new("n2", "127.0.0.2:7000");
    block_on(async {
        let admitted = admit_with_token(fx.leader(), secret_join(&secret, &n2))
            .await
            .expect("admitted with the secret");
        assert!(muster_shared::tls::issued_by(
            &admitted.cert_pem,
            fx.ca.cert_pem()
        ));
        // Signed by a secret this cluster was not formed with: refused, nobody added.
        let n3 = Registrant::new("n3", "127.0.0.3:7000");
        let mut forged = secret_join(&other, &n3);
        forged.token_id = secret.id();
        assert!(admit_with_token(fx.leader(), forged).await.is_err());
        assert!(!fx.replica.view().nodes.contains_key(&n3.id()));
    });
}

#[test]
fn an_expired_join_secret_proves_nothing() {
    let secret = muster_shared::token::JoinSecret::generate();
    let fx = with_secret(&secret, T0 + 1_000);
    fx.replica.set_wall(T0 + 2_000);
    let hello = SecretHello {
        secret_id: secret.id(),
        nonce: "cd".repeat(16),
    };
    assert_eq!(
        refused(prove_secret(fx.leader(), &hello)),
        ErrorKind::TokenExpired
    );
}
