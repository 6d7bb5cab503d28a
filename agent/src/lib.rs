//! muster: the node agent (`muster agent`) and the operator CLI.

pub mod api;
pub mod bootstrap;
pub mod cli_output;
pub mod config;
pub mod demo;
pub mod discovery;
pub mod identity;
pub mod operator;
pub mod raft;
pub mod server;
pub mod service;
