//! The harness shared by the integration tests.
//!
//! - `servers`: real `redis-server`s (and Sentinels) on free loopback ports, a server that
//!   never answers, TLS certificates. A new backend's server goes here, beside `redis.rs`.
//! - `processes`: the `dlock` command with a clean environment, holders, signals, polling.
//! - `backends`: the store of a CLI test and the conformance factories, one per backend of
//!   the list in `macros.rs`.
//! - `requests`: requests and wait options for library tests.
//! - `loops`: contending `exec` loops for the fault tests, their marks and exit codes.

#![allow(dead_code)]

pub mod backends;
pub mod loops;
mod processes;
mod requests;
mod servers;

pub use backends::Store;
pub use processes::*;
pub use requests::*;
pub use servers::*;
