//! Generated v1 contract (prost + tonic). Proto types stop at `api/`: the core never sees them.
#![allow(clippy::all, clippy::pedantic, missing_docs)]

tonic::include_proto!("matchmaker.v1");

/// Encoded descriptor set of `proto/`, served by reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("matchmaker_descriptor");

/// The gRPC path (`/matchmaker.v1.ClientService/EnterQueue`) of every method `proto/` defines.
pub const METHODS: &[&str] = include!(concat!(env!("OUT_DIR"), "/matchmaker_methods.rs"));
