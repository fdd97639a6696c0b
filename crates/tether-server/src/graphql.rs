//! The GraphQL schema of `schema/managed_mcp.graphql`, served with async-graphql.
//!
//! The Rust types below *are* the schema: `tests/schema.rs` parses [`sdl`] and the checked-in
//! file and compares types, fields, arguments and nullability, so this server and the cynic
//! client (which is generated from the file) cannot drift apart.
//!
//! **Invariant:** async-graphql is used only in this module.

use std::sync::Arc;

use async_graphql::{
    Context, EmptySubscription, Enum, ID, InputObject, InputValueError, InputValueResult,
    Interface, Object, Scalar, ScalarType, Schema, SimpleObject, Union, Value,
};

use crate::error::ServerError;
use crate::service::{Caller, ClientConfig, PROXY_AUTHORIZATION_HEADER, Service, rfc3339};

/// The executable schema, holding the [`Service`].
pub type ManagedMcpSchema = Schema<Query, Mutation, EmptySubscription>;

/// Builds the schema over `service`. Each request must carry its [`Caller`] as request data.
pub fn build_schema(service: Arc<Service>) -> ManagedMcpSchema {
    Schema::build(Query, Mutation, EmptySubscription)
        .data(service)
        .limit_depth(16)
        // A batch of 128 aliased createManagedMcpClientConfig fields (about 16 each) fits.
        .limit_complexity(2048)
        .finish()
}

/// The SDL this server serves.
pub fn sdl() -> String {
    Schema::build(Query, Mutation, EmptySubscription)
        .finish()
        .sdl()
}

/// RFC 3339 date-time text.
struct Time(String);

#[Scalar(name = "Time")]
impl ScalarType for Time {
    fn parse(value: Value) -> InputValueResult<Self> {
        match value {
            Value::String(text) => Ok(Time(text)),
            other => Err(InputValueError::expected_type(other)),
        }
    }

    fn to_value(&self) -> Value {
        Value::String(self.0.clone())
    }
}

#[derive(Enum, Clone, Copy, PartialEq, Eq)]
#[graphql(name = "ManagedMcpTransportKind")]
enum TransportKindGql {
    #[graphql(name = "URL")]
    Url,
    #[graphql(name = "COMMAND")]
    Command,
}

#[derive(InputObject)]
struct CreateManagedMcpClientConfigInput {
    uid: ID,
}

#[derive(SimpleObject)]
struct CreateManagedMcpClientConfigOutput {
    transport_kind: TransportKindGql,
    mcp_config_json: String,
    proxy_url: Option<String>,
    proxy_token: Option<String>,
    authorization_header_name: Option<String>,
    authorization_header_value: Option<String>,
    expires_at: Option<Time>,
}

#[derive(SimpleObject)]
struct GenericUserFacingError {
    message: String,
}

#[derive(SimpleObject)]
struct ManagedMcpNotFoundError {
    message: String,
}

#[derive(SimpleObject)]
struct ManagedMcpInactiveError {
    message: String,
}

#[derive(Interface)]
#[graphql(field(name = "message", ty = "&String"))]
enum UserFacingErrorInterface {
    Generic(GenericUserFacingError),
    NotFound(ManagedMcpNotFoundError),
    Inactive(ManagedMcpInactiveError),
}

#[derive(SimpleObject)]
struct UserFacingError {
    error: UserFacingErrorInterface,
}

#[derive(Union)]
enum CreateManagedMcpClientConfigResult {
    Output(CreateManagedMcpClientConfigOutput),
    UserFacingError(UserFacingError),
}

/// The query root.
#[derive(Debug)]
pub struct Query;

#[Object]
impl Query {
    /// The uids of the active installations the caller's team may use.
    async fn managed_mcp_server_uids(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<ID>> {
        let (service, caller) = request_parts(ctx)?;
        let uids = service.visible_uids(caller).await.map_err(internal)?;
        Ok(uids.into_iter().map(|uid| ID(uid.to_string())).collect())
    }
}

/// The mutation root.
#[derive(Debug)]
pub struct Mutation;

#[Object]
impl Mutation {
    /// Mints a run-scoped client config for a managed installation.
    async fn create_managed_mcp_client_config(
        &self,
        ctx: &Context<'_>,
        input: CreateManagedMcpClientConfigInput,
    ) -> async_graphql::Result<CreateManagedMcpClientConfigResult> {
        let (service, caller) = request_parts(ctx)?;
        let uid = input.uid.0;
        let config = service
            .create_client_config(caller, &uid)
            .await
            .map_err(internal)?;
        let user_facing =
            |error| CreateManagedMcpClientConfigResult::UserFacingError(UserFacingError { error });
        Ok(match config {
            ClientConfig::NotFound => {
                tracing::info!(?uid, team = ?caller.team, "client config: not found");
                user_facing(UserFacingErrorInterface::NotFound(
                    ManagedMcpNotFoundError {
                        message: format!("managed MCP server {uid} was not found"),
                    },
                ))
            }
            ClientConfig::Inactive => {
                tracing::info!(?uid, team = ?caller.team, "client config: inactive");
                user_facing(UserFacingErrorInterface::Inactive(
                    ManagedMcpInactiveError {
                        message: format!(
                            "managed MCP server {uid} is deactivated; ask your administrator"
                        ),
                    },
                ))
            }
            ClientConfig::Command { mcp_config_json } => {
                tracing::debug!(?uid, team = ?caller.team, "client config: command");
                CreateManagedMcpClientConfigResult::Output(CreateManagedMcpClientConfigOutput {
                    transport_kind: TransportKindGql::Command,
                    mcp_config_json: mcp_config_json.to_string(),
                    proxy_url: None,
                    proxy_token: None,
                    authorization_header_name: None,
                    authorization_header_value: None,
                    expires_at: None,
                })
            }
            ClientConfig::Url {
                mcp_config_json,
                proxy_url,
                proxy_token,
                expires_at,
            } => {
                tracing::debug!(?uid, team = ?caller.team, "client config: proxy token minted");
                CreateManagedMcpClientConfigResult::Output(CreateManagedMcpClientConfigOutput {
                    transport_kind: TransportKindGql::Url,
                    mcp_config_json: mcp_config_json.to_string(),
                    proxy_url: Some(proxy_url),
                    proxy_token: Some(proxy_token.to_string()),
                    authorization_header_name: Some(PROXY_AUTHORIZATION_HEADER.to_owned()),
                    authorization_header_value: Some(format!("Bearer {}", proxy_token.as_str())),
                    expires_at: Some(Time(rfc3339(expires_at))),
                })
            }
        })
    }
}

fn request_parts<'a>(ctx: &Context<'a>) -> async_graphql::Result<(&'a Arc<Service>, &'a Caller)> {
    Ok((ctx.data::<Arc<Service>>()?, ctx.data::<Caller>()?))
}

/// Logs a server failure and answers a GraphQL error that says nothing about it.
fn internal(error: ServerError) -> async_graphql::Error {
    tracing::error!("request failed: {error}");
    async_graphql::Error::new("internal server error")
}
