//! The one GraphQL operation this crate sends, as cynic types generated against
//! `schema/managed_mcp.graphql` (registered in `build.rs`).
//!
//! These types are the wire format and stay private to the crate: callers see
//! [`crate::ManagedMcpClientConfig`] and [`crate::ManagedMcpError`] only.

use cynic::MutationBuilder as _;
use uuid::Uuid;

#[cynic::schema("managed_mcp")]
mod schema {}

/// Variables of the mutation: `{"input":{"uid":"…"}}`.
#[derive(cynic::QueryVariables, Debug)]
pub(crate) struct CreateManagedMcpClientConfigVariables {
    pub(crate) input: CreateManagedMcpClientConfigInput,
}

/// `input CreateManagedMcpClientConfigInput { uid: ID! }`.
#[derive(cynic::InputObject, Debug)]
pub(crate) struct CreateManagedMcpClientConfigInput {
    pub(crate) uid: cynic::Id,
}

/// The mutation root selection: `createManagedMcpClientConfig(input: $input)`.
/// No `Debug`: it holds the secret-bearing output.
#[derive(cynic::QueryFragment)]
#[cynic(
    graphql_type = "Mutation",
    variables = "CreateManagedMcpClientConfigVariables"
)]
pub(crate) struct CreateManagedMcpClientConfig {
    #[arguments(input: $input)]
    pub(crate) create_managed_mcp_client_config: CreateManagedMcpClientConfigResult,
}

/// `union CreateManagedMcpClientConfigResult = CreateManagedMcpClientConfigOutput | UserFacingError`.
/// No `Debug`: it holds the secret-bearing output.
#[derive(cynic::InlineFragments)]
pub(crate) enum CreateManagedMcpClientConfigResult {
    CreateManagedMcpClientConfigOutput(CreateManagedMcpClientConfigOutput),
    UserFacingError(UserFacingError),
    /// A member this crate does not know; holds its `__typename`.
    #[cynic(fallback)]
    Unknown(String),
}

/// `enum ManagedMcpTransportKind { URL COMMAND }`.
#[derive(cynic::Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ManagedMcpTransportKind {
    Url,
    Command,
}

/// `scalar Time`: an RFC 3339 string, parsed when converted to the domain type.
#[derive(cynic::Scalar, Debug)]
pub(crate) struct Time(pub(crate) String);

/// The successful result. Holds secrets in plain `String`s only until it is converted
/// (by move) into [`crate::ManagedMcpClientConfig`]; no `Debug`, so it cannot be printed.
#[derive(cynic::QueryFragment)]
pub(crate) struct CreateManagedMcpClientConfigOutput {
    pub(crate) transport_kind: ManagedMcpTransportKind,
    pub(crate) mcp_config_json: String,
    pub(crate) proxy_url: Option<String>,
    pub(crate) proxy_token: Option<String>,
    pub(crate) authorization_header_name: Option<String>,
    pub(crate) authorization_header_value: Option<String>,
    pub(crate) expires_at: Option<Time>,
}

/// `type UserFacingError { error: UserFacingErrorInterface! }`.
#[derive(cynic::QueryFragment, Debug)]
pub(crate) struct UserFacingError {
    pub(crate) error: UserFacingErrorInterface,
}

/// `interface UserFacingErrorInterface { message: String! }` and its known members.
#[derive(cynic::InlineFragments, Debug)]
pub(crate) enum UserFacingErrorInterface {
    GenericUserFacingError(GenericUserFacingError),
    ManagedMcpNotFoundError(ManagedMcpNotFoundError),
    ManagedMcpInactiveError(ManagedMcpInactiveError),
    /// A member this crate does not know; its `message` is still read through the interface.
    #[cynic(fallback)]
    Unrecognised(UserFacingErrorMessage),
}

/// The interface's own field, selected for members this crate does not know.
#[derive(cynic::QueryFragment, Debug)]
#[cynic(graphql_type = "UserFacingErrorInterface")]
pub(crate) struct UserFacingErrorMessage {
    pub(crate) message: String,
}

/// `type GenericUserFacingError implements UserFacingErrorInterface`.
#[derive(cynic::QueryFragment, Debug)]
pub(crate) struct GenericUserFacingError {
    pub(crate) message: String,
}

/// `type ManagedMcpNotFoundError implements UserFacingErrorInterface`.
#[derive(cynic::QueryFragment, Debug)]
pub(crate) struct ManagedMcpNotFoundError {
    pub(crate) message: String,
}

/// `type ManagedMcpInactiveError implements UserFacingErrorInterface`.
#[derive(cynic::QueryFragment, Debug)]
pub(crate) struct ManagedMcpInactiveError {
    pub(crate) message: String,
}

/// Builds the operation (document + variables) for one uid.
pub(crate) fn build(
    uid: Uuid,
) -> cynic::Operation<CreateManagedMcpClientConfig, CreateManagedMcpClientConfigVariables> {
    CreateManagedMcpClientConfig::build(CreateManagedMcpClientConfigVariables {
        input: CreateManagedMcpClientConfigInput {
            uid: cynic::Id::new(uid.hyphenated().to_string()),
        },
    })
}
