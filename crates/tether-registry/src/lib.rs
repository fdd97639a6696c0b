//! Clients for the MCP registries — the official MCP Registry (`/v0.1`) and Smithery — with
//! typed models of `server.json`, a concurrent merged search, `show` (how each package and
//! remote would launch, and every input), and an on-disk response cache that answers offline.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tether_registry::RegistryError> {
//! use tether_registry::{Registries, RegistrySettings, SearchQuery};
//! let registries = Registries::new(RegistrySettings::default())?;
//! let results = registries
//!     .search(&SearchQuery { text: "filesystem".into(), limit: 10, source: None, include_hidden: false })
//!     .await?;
//! for row in &results.rows {
//!     println!("{} {}", row.name, row.description);
//! }
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

pub mod add;
pub mod cache;
mod client;
mod error;
pub mod mcpb;
pub mod model;
mod search;
mod show;
pub mod smithery_add;

pub use client::{
    ApiKey, FRESH_FOR, Freshness, KeyLookup, NamedRegistry, OFFICIAL_NAME, OFFICIAL_URL,
    Registries, RegistrySettings, SMITHERY_NAME, SMITHERY_URL, Source, registry_title,
};
pub use error::RegistryError;
pub use search::{SearchQuery, SearchResults, SearchRow, SourceReport};
pub use show::{
    Found, InputKind, InputRow, LaunchOption, ServerDetails, official_details, package_command,
    package_option, remote_option, runner, smithery_details,
};
