//! The throwaway PostgreSQL clusters of `tether-testkit`, under the name the support code uses.

pub use tether_testkit::postgres::*;
