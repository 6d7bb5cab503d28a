//! Generates the etcd v3 discovery gRPC types and server traits from `proto/` (needs `protoc`,
//! as etcd-client's build already does).

fn main() {
    println!("cargo:rerun-if-changed=proto");
    if let Err(e) = tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .compile_protos(&["proto/etcd_v3_subset.proto"], &["proto"])
    {
        // A build script reports failure by panicking; say what is missing first.
        panic!("compiling proto/etcd_v3_subset.proto (is protoc installed?): {e}");
    }
}
