//! muster-discovery: a self-hostable discovery service that real etcd members (`--discovery`)
//! and Muster agents bootstrap through.
//!
//! Flow of a request: [`server`] accepts a connection (optionally TLS) and hands it to the axum
//! router in [`http`]; token paths are parsed by [`keys`], checked against the token's state by
//! [`model`], and made durable by a [`store::Store`] before the answer (shaped by [`v2`]) goes out.

pub mod config;
pub mod grpc;
pub mod http;
pub mod keys;
pub mod limits;
pub mod metrics;
pub mod model;
pub mod server;
pub mod store;
pub mod v2;
pub mod v3;
