//! Pieces that both Muster binaries speak: the JSON error shape and its stable kinds, the
//! bootstrap record kept under a discovery token, token and hash helpers, duration parsing,
//! the cluster CA and mutual-TLS configs, and the one way we open and flush a fjall database, and the process limits budgets are sized by.

pub mod bootstrap;
pub mod duration;
pub mod error;
pub mod form;
pub mod limits;
pub mod policy;
pub mod ratelimit;
pub mod retry;
pub mod storage;
pub mod tls;
pub mod token;
