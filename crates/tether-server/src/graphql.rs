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

/// The most top-level fields (aliases included) one request may select: the client's batches
/// (`tether-graphql`, 32 by default) fit many times over, a flood of aliases does not.
pub const MAX_ROOT_FIELDS: usize = 128;

/// Fragment spreads are followed this deep when counting (a deeper document is refused by
/// the depth limit anyway).
const MAX_SPREAD_DEPTH: usize = 16;

/// How many top-level fields `request` selects, over every operation of its document, with
/// fragment spreads and inline fragments expanded and `@skip`/`@include` ignored (a field
/// counts even if a directive would drop it). Each is one resolution — a minted config for
/// every aliased `createManagedMcpClientConfig` — and is charged to the rate limit. `None`
/// when the document does not parse (executing it then answers the parse error, resolving
/// nothing).
pub fn root_fields(request: &mut async_graphql::Request) -> Option<usize> {
    use async_graphql::parser::types::{
        ExecutableDocument, FragmentDefinition, Selection, SelectionSet,
    };
    use std::collections::HashMap;

    fn count(
        set: &SelectionSet,
        document: &ExecutableDocument,
        depth: usize,
        memo: &mut HashMap<String, usize>,
    ) -> usize {
        set.items.iter().fold(0usize, |total, item| {
            let more = match &item.node {
                Selection::Field(_) => 1,
                Selection::InlineFragment(inline) => {
                    count(&inline.node.selection_set.node, document, depth, memo)
                }
                Selection::FragmentSpread(spread) => {
                    let name = spread.node.fragment_name.node.as_str();
                    if let Some(known) = memo.get(name) {
                        *known
                    } else if depth >= MAX_SPREAD_DEPTH {
                        // Deeper than any valid document: count it as over every limit.
                        MAX_ROOT_FIELDS + 1
                    } else {
                        let fragment: Option<&FragmentDefinition> =
                            document.fragments.get(name).map(|fragment| &fragment.node);
                        let inner = fragment.map_or(0, |fragment| {
                            count(&fragment.selection_set.node, document, depth + 1, memo)
                        });
                        memo.insert(name.to_owned(), inner);
                        inner
                    }
                }
            };
            total.saturating_add(more)
        })
    }

    let document = request.parsed_query().ok()?;
    let mut memo = HashMap::new();
    Some(
        document
            .operations
            .iter()
            .fold(0usize, |total, (_, operation)| {
                total.saturating_add(count(
                    &operation.node.selection_set.node,
                    document,
                    0,
                    &mut memo,
                ))
            }),
    )
}

/// A GraphQL answer with one request error (no `path`: the request as a whole was refused,
/// which `tether-graphql` answers by splitting its batch).
pub fn request_error(message: String, code: &'static str) -> async_graphql::Response {
    let mut error = async_graphql::ServerError::new(message, None);
    let mut extensions = async_graphql::ErrorExtensionValues::default();
    extensions.set("code", code);
    error.extensions = Some(extensions);
    async_graphql::Response::from_errors(vec![error])
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(query: &str) -> Option<usize> {
        root_fields(&mut async_graphql::Request::new(query))
    }

    #[test]
    fn top_level_fields_are_counted_through_fragments_and_aliases() {
        assert_eq!(fields("{ managedMcpServerUids }"), Some(1));
        assert_eq!(
            fields("{ a: managedMcpServerUids b: managedMcpServerUids }"),
            Some(2)
        );
        // A fragment spread twice counts twice; nested selections are not top-level fields.
        assert_eq!(
            fields(
                "mutation { ...F ...F ... on Mutation { c: createManagedMcpClientConfig(input: {uid: \"x\"}) { __typename } } } \
                 fragment F on Mutation { a: createManagedMcpClientConfig(input: {uid: \"x\"}) { __typename ... on UserFacingError { error { message } } } }"
            ),
            Some(3)
        );
        // Spreads that double at every level cannot hide their count (nor take long).
        let mut doubling = String::from("query { ...F0 } ");
        for level in 0..40 {
            doubling.push_str(&format!(
                "fragment F{level} on Query {{ ...F{next} ...F{next} }} ",
                next = level + 1
            ));
        }
        doubling.push_str("fragment F40 on Query { managedMcpServerUids }");
        assert!(fields(&doubling).is_some_and(|count| count > MAX_ROOT_FIELDS));
        assert_eq!(fields("{ not graphql"), None);
    }
}
