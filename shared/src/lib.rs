//! Pieces that both Muster binaries speak: the JSON error shape and its stable kinds, the
//! bootstrap record kept under a discovery token, token and hash helpers, duration parsing,
//! the cluster CA and mutual-TLS configs, the one way we open and flush a fjall database, the
//! process limits budgets are sized by, the one accept path of every listener, and the id
//! Zincati gives a machine.

pub mod bootstrap;
pub mod duration;
pub mod error;
pub mod form;
pub mod limits;
pub mod machine_id;
pub mod policy;
pub mod ratelimit;
pub mod retry;
pub mod serve;
pub mod storage;
pub mod tls;
pub mod token;
