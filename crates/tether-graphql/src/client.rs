//! [`ManagedMcpClient`]: the seam the driver depends on (`Arc<dyn ManagedMcpClient>`).

use futures_util::StreamExt as _;
use uuid::Uuid;

use crate::config::ManagedMcpClientConfig;
use crate::error::ManagedMcpError;

/// How many uids [`ManagedMcpClient::resolve_many`] resolves at once unless the client says
/// otherwise.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// Resolves managed MCP installation uids into run-scoped client configs.
///
/// Object safe: the driver holds an `Arc<dyn ManagedMcpClient>`, and tests substitute a fake.
#[async_trait::async_trait]
pub trait ManagedMcpClient: Send + Sync {
    /// Asks the managed server to mint a config for the installation `uid`
    /// (`createManagedMcpClientConfig`). Each call mints afresh; nothing is cached.
    async fn create_managed_mcp_client_config(
        &self,
        uid: Uuid,
    ) -> Result<ManagedMcpClientConfig, ManagedMcpError>;

    /// The most calls [`ManagedMcpClient::resolve_many`] keeps in flight; values below 1
    /// count as 1.
    fn max_concurrency(&self) -> usize {
        DEFAULT_CONCURRENCY
    }

    /// Resolves every uid, at most [`ManagedMcpClient::max_concurrency`] at a time.
    ///
    /// The result has one entry per input uid, in input order; one uid failing never hides
    /// the others. Repeated uids are resolved repeatedly: de-duplicate before calling.
    async fn resolve_many(
        &self,
        uids: &[Uuid],
    ) -> Vec<Result<ManagedMcpClientConfig, ManagedMcpError>> {
        futures_util::stream::iter(uids.iter().copied())
            .map(|uid| self.create_managed_mcp_client_config(uid))
            .buffered(self.max_concurrency().max(1))
            .collect()
            .await
    }
}
