//! Exit codes, decided in one place.
//!
//! 0 success · 1 a server or the harness failed · 2 bad input or usage · 3 managed resolution
//! failed. A harness run passes the harness's own exit code through.

use std::fmt;

use tether_driver::DriverError;

pub const OK: u8 = 0;
/// A server or the harness failed.
pub const FAILED: u8 = 1;
/// Bad input or usage.
pub const USAGE: u8 = 2;
/// Managed resolution failed.
pub const MANAGED: u8 = 3;

/// Bad input detected by the CLI itself (exit 2).
#[derive(Debug)]
pub struct UsageError(String);

impl UsageError {
    /// A usage error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A failure already reported to the user (e.g. servers listed as failed): exit with `code`.
#[derive(Debug)]
pub struct Reported(pub u8);

impl fmt::Display for Reported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "exit {}", self.0)
    }
}

impl std::error::Error for Reported {}

/// The exit code for an error.
pub fn code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(reported) = cause.downcast_ref::<Reported>() {
            return reported.0;
        }
        if cause.downcast_ref::<UsageError>().is_some() {
            return USAGE;
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
                | DriverError::Cancelled { .. }
                | DriverError::Store(_) => FAILED,
            };
        }
        if let Some(handoff) = cause.downcast_ref::<tether_handoff::HandoffError>() {
            use tether_handoff::HandoffError as E;
            return match handoff {
                E::NoCommand | E::NotRunnable { .. } | E::CannotStart { .. } | E::Harness(_) => {
                    USAGE
                }
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
