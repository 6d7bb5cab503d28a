//! The agent's HTTP APIs: operator API on a unix socket, and node-to-node over mutual TLS.

pub mod types;
