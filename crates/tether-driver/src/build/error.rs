//! Why the specs of a run could not be read.

use uuid::Uuid;

use crate::error::DriverError;

/// Why the specs of a run could not be read. The caller words it ([`super::SpecHost::refuse`]).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// A refusal already worded for the user (a shorthand without files, a name that is also
    /// a path, an unreadable task file, no spec at all).
    #[error("{0}")]
    Refused(String),
    /// The `--mcp` value at `index` is no spec: `error` says what reading it found, and
    /// `installed` lists the installations' names read so far (for a hint).
    #[error("--mcp value #{}: {error}", index + 1)]
    NotASpec {
        /// Its position among the `--mcp` values.
        index: usize,
        /// What reading it as a UUID, file or JSON found.
        error: Box<DriverError>,
        /// The installations' (name, uid) read before it, if any were.
        installed: Vec<(String, Uuid)>,
    },
    /// A spec that was read and is invalid (a bad config, a task's bad `warp_id`).
    #[error(transparent)]
    Driver(Box<DriverError>),
}

impl From<DriverError> for SpecError {
    fn from(error: DriverError) -> Self {
        SpecError::Driver(Box::new(error))
    }
}
