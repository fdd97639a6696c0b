//! tether's own HTTP listeners and reverse proxies share what decides who may talk to them.
//!
//! Every HTTP listener tether opens on this machine — the gateway's `/mcp`, the setup-mcp
//! endpoint and its entry page, the hand-off bridge and the OAuth redirect listener — admits a
//! request through one [`Admission`]: the `Host` header must name that very listener (address
//! *and* port), which defeats DNS rebinding; an `Origin`, where one is sent or required, must be
//! that listener too, which defeats cross-site requests from a browser; and where the listener
//! has a bearer token, the `Authorization` header must carry it, compared in constant time.
//! Tokens come from [`token::generate`]. The header rules of tether's two reverse proxies (the
//! hand-off bridge and the team server's `/mcp-proxy`) are in [`proxy`]; what a POST body of
//! tether's MCP endpoints must be (one JSON-RPC message, else 400), in [`json_rpc`].
//!
//! ```
//! use tether_http::{Admission, OriginRule};
//! use axum::http::{HeaderMap, HeaderValue, header};
//!
//! let admission = Admission::for_address("127.0.0.1:4242".parse().unwrap())
//!     .with_bearer(tether_secret::SecretValue::new("t0ken".to_owned()));
//! let mut headers = HeaderMap::new();
//! headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:4242"));
//! headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t0ken"));
//! assert!(admission.check(&headers, OriginRule::IfPresent).is_ok());
//! headers.insert(header::HOST, HeaderValue::from_static("evil.example:4242"));
//! assert!(admission.check(&headers, OriginRule::IfPresent).is_err());
//! ```

pub mod admission;
pub mod json_rpc;
pub mod proxy;
pub mod token;

pub use admission::{Admission, Caller, OriginRule, Refusal, admit};
pub use token::{constant_time_eq, generate};
