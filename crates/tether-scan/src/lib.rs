//! The scanners of tether's gateway, each usable (and benchmarked) alone:
//!
//! - [`injection`]: the prompt-injection scan of every text a server offers an agent about its
//!   tools and prompts, against a fixed, documented rule set (`tether serve --scan`).
//! - [`secrets`]: well-known credential shapes in tool arguments and results
//!   (`--secret-scan`), redacted or blocked.
//!
//! No tether dependency and no I/O: text and JSON in, findings out. `tether-gateway`
//! re-exports them as `tether_gateway::scan` and `tether_gateway::secret_scan`.

#![deny(missing_docs)]

pub mod injection;
pub mod secrets;
