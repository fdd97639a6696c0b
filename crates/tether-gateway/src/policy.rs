//! What the gateway applies to one server's tools, prompts and resources before it offers
//! them: the key its tool pins are kept under and its prompt-injection scan policy. (Who may
//! talk to the gateway's HTTP listener is `tether_http::Admission`'s business, not this.)

use std::collections::HashMap;

use crate::scan::ScanPolicy;

/// How one server's entries are checked before they are offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    /// Where its tools are pinned: its installation's id when it has one, else its name.
    pub pin_key: String,
    /// What the prompt-injection scan does with a finding in its entries.
    pub scan: ScanPolicy,
    /// What goes between `tether trust` and the server's name in the hint for a withheld tool
    /// (e.g. `--mcp ./mcp.json `, shell-quoted, never a secret); empty for an installed server.
    pub trust_with: String,
}

impl ToolPolicy {
    /// `server`'s policy in `policies`; a server not named there is pinned under its name and
    /// scanned under `default_scan`.
    pub fn of(
        policies: &HashMap<String, ToolPolicy>,
        default_scan: ScanPolicy,
        server: &str,
    ) -> Self {
        policies.get(server).cloned().unwrap_or_else(|| Self {
            pin_key: server.to_owned(),
            scan: default_scan,
            trust_with: String::new(),
        })
    }
}
