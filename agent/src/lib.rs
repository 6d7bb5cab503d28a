//! muster: the node agent (`muster agent`) and the operator CLI.

pub mod raft;
