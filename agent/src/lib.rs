//! muster: the node agent (`muster agent`) and the operator CLI.

pub mod admission;
pub mod api;
pub mod backup;
pub mod bootstrap;
pub mod cli;
pub mod cli_output;
pub mod config;
pub mod demo;
pub mod discovery;
pub mod identity;
pub mod join;
pub mod operator;
pub mod raft;
pub mod reconcile;
pub mod removal;
pub mod server;
pub mod service;
pub mod tokens;
