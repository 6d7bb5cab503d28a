//! etcd v3 discovery's data model, independent of gRPC and of storage: which keys exist
//! ([`keys`]), how revisions are assigned and read ([`state`]) and who may call ([`auth`]). The store persists it
//! (`store::fjall::v3`), the gRPC layer (`grpc`) speaks it.

pub mod auth;
pub mod keys;
pub mod state;
