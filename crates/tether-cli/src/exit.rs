//! Exit codes, decided in one place.
//!
//! 0 success · 1 a server or the harness failed · 2 bad input or usage · 3 managed resolution
//! failed. A harness run passes the harness's own exit code through. The table and the errors
//! both binaries share are `tether_clikit::exit`'s; [`code`] maps the libraries' errors.

use tether_driver::DriverError;

pub use tether_clikit::exit::{FAILED, MANAGED, OK, Reported, USAGE, UsageError};

/// The exit code for an error.
pub fn code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(code) = tether_clikit::exit::shared_code(cause) {
            return code;
        }
        if cause
            .downcast_ref::<tether_harness::HarnessError>()
            .is_some()
        {
            return USAGE;
        }
        if cause
            .downcast_ref::<tether_graphql::ManagedMcpError>()
            .is_some()
        {
            return MANAGED;
        }
        if let Some(registry) = cause.downcast_ref::<tether_registry::RegistryError>() {
            return match registry {
                tether_registry::RegistryError::NotFound { .. }
                | tether_registry::RegistryError::BadUrl { .. }
                | tether_registry::RegistryError::BadRegistry(_)
                | tether_registry::RegistryError::NoSmitheryKey => USAGE,
                _ => FAILED,
            };
        }
        if let Some(driver) = cause.downcast_ref::<DriverError>() {
            return match driver {
                DriverError::ManagedMcpResolutionFailed { .. } | DriverError::ServerNotFound(_) => {
                    MANAGED
                }
                DriverError::InvalidSpec { .. }
                | DriverError::Config { .. }
                | DriverError::MissingVariables { .. }
                | DriverError::DuplicateServerName { .. }
                | DriverError::InvalidServer { .. }
                | DriverError::UnknownServer { .. }
                | DriverError::NotInSession { .. } => USAGE,
                DriverError::StartupFailed { .. }
                | DriverError::ServerFailedToStart { .. }
                | DriverError::ToolCallFailed { .. }
                | DriverError::RequestFailed { .. }
                | DriverError::NeedsCapability { .. }
                | DriverError::Cancelled { .. }
                | DriverError::Store(_) => FAILED,
            };
        }
        if let Some(handoff) = cause.downcast_ref::<tether_handoff::HandoffError>() {
            use tether_handoff::HandoffError as E;
            return match handoff {
                E::NoCommand
                | E::NotRunnable { .. }
                | E::CannotStart { .. }
                | E::Harness(_)
                | E::UntrustedFolder { .. } => USAGE,
                E::InvalidServer { .. }
                | E::NoRandomness(_)
                | E::Io { .. }
                | E::Rewrite(_)
                | E::HttpClient(_)
                | E::ShimUnreachable { .. }
                | E::UnknownServerId { .. }
                | E::NoLaunchCommand => FAILED,
            };
        }
        if let Some(gateway) = cause.downcast_ref::<tether_gateway::GatewayError>() {
            return match gateway {
                tether_gateway::GatewayError::Audit { .. }
                | tether_gateway::GatewayError::NotLoopback { .. } => USAGE,
                tether_gateway::GatewayError::Io { .. }
                | tether_gateway::GatewayError::Handshake { .. } => FAILED,
            };
        }
    }
    FAILED
}
