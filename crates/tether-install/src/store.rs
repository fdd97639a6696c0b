//! The install: a built config and its secrets into the local store, atomically.

use serde_json::json;
use tether_config::{Origin, Secrets, parse_config};
use tether_registry::add::BuiltConfig;
use tether_registry::model::ServerJson;
use tether_store::{InstallSource, Store};
use uuid::Uuid;

use crate::{Choice, InstallError};

/// Stores `built` as the local installation `local` of `server` from the registry named
/// `registry` (run as `choice`), with
/// `given`'s values in the secret store, atomically (`Store::install_with`: a kill at any
/// point leaves nothing or everything): the new installation's UUID.
pub fn install_built(
    store: &mut Store,
    (registry, server): (&str, &ServerJson),
    choice: &Choice<'_>,
    local: &str,
    built: &BuiltConfig,
    given: &Secrets,
) -> Result<Uuid, InstallError> {
    let text = json!({ local: built.server }).to_string();
    // Registry values are literal: nothing in them is read from the environment.
    let parsed = parse_config(&text, Origin::Registry)?;
    let [parsed_server] =
        <[_; 1]>::try_from(parsed.servers).map_err(|_| InstallError::NotOneServer)?;
    let mut installation = parsed_server.into_installation();
    installation.server.name = local.to_owned();
    let source = InstallSource {
        registry: registry.to_owned(),
        name: server.name.clone(),
        version: server.version.clone(),
        package: choice.describe(),
    };
    Ok(store.install_with(&installation, given, Some(&source))?)
}
