//! etcd v3 discovery's data model, independent of gRPC and of storage: which keys exist
//! ([`keys`]) and how revisions are assigned and read ([`state`]). The store persists it
//! (`store::fjall::v3`), the gRPC layer (`grpc`) speaks it.

pub mod keys;
pub mod state;
