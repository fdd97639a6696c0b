//! The operation document the client actually sends, validated against the SDL in
//! `schema/managed_mcp.graphql` by a small validator built on `graphql-parser`: every field
//! exists on its parent type, arguments and variables match, inline fragments name possible
//! types, leaves have no selections and composites do. Negative controls prove the check
//! fails when the schema or the document drifts.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic the test"
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use graphql_parser::query::{
    self, Definition, OperationDefinition, Selection, SelectionSet, TypeCondition,
};
use graphql_parser::schema::{self, TypeDefinition};
use tether_graphql::ManagedMcpClient;
use wiremock::MockServer;

use common::{client, command_output, graphql_result, mount, uid};

const SCHEMA: &str = include_str!("../../../schema/managed_mcp.graphql");

const BUILT_IN_SCALARS: [&str; 5] = ["String", "ID", "Int", "Float", "Boolean"];

/// A field of an object or interface: its type as written, its named type, its arguments.
struct FieldDef {
    type_ref: String,
    named_type: String,
    arguments: BTreeMap<String, String>,
}

enum Kind {
    Object {
        fields: BTreeMap<String, FieldDef>,
        interfaces: Vec<String>,
    },
    Interface {
        fields: BTreeMap<String, FieldDef>,
    },
    Union {
        members: Vec<String>,
    },
    Leaf,
    Input,
}

struct Schema {
    types: BTreeMap<String, Kind>,
    query_root: String,
    mutation_root: String,
}

fn named_type(ty: &schema::Type<'_, String>) -> String {
    match ty {
        schema::Type::NamedType(name) => name.clone(),
        schema::Type::ListType(inner) | schema::Type::NonNullType(inner) => named_type(inner),
    }
}

fn fields_of(fields: &[schema::Field<'_, String>]) -> BTreeMap<String, FieldDef> {
    fields
        .iter()
        .map(|field| {
            let arguments = field
                .arguments
                .iter()
                .map(|argument| (argument.name.clone(), argument.value_type.to_string()))
                .collect();
            let def = FieldDef {
                type_ref: field.field_type.to_string(),
                named_type: named_type(&field.field_type),
                arguments,
            };
            (field.name.clone(), def)
        })
        .collect()
}

fn parse_schema(sdl: &str) -> Schema {
    let document = schema::parse_schema::<String>(sdl).expect("the SDL parses");
    let mut types: BTreeMap<String, Kind> = BUILT_IN_SCALARS
        .iter()
        .map(|name| ((*name).to_owned(), Kind::Leaf))
        .collect();
    let (mut query_root, mut mutation_root) = ("Query".to_owned(), "Mutation".to_owned());
    for definition in document.definitions {
        match definition {
            schema::Definition::SchemaDefinition(roots) => {
                query_root = roots.query.unwrap_or(query_root);
                mutation_root = roots.mutation.unwrap_or(mutation_root);
            }
            schema::Definition::TypeDefinition(definition) => {
                let (name, kind) = match definition {
                    TypeDefinition::Object(object) => (
                        object.name,
                        Kind::Object {
                            fields: fields_of(&object.fields),
                            interfaces: object.implements_interfaces,
                        },
                    ),
                    TypeDefinition::Interface(interface) => (
                        interface.name,
                        Kind::Interface {
                            fields: fields_of(&interface.fields),
                        },
                    ),
                    TypeDefinition::Union(union) => (
                        union.name,
                        Kind::Union {
                            members: union.types,
                        },
                    ),
                    TypeDefinition::Scalar(scalar) => (scalar.name, Kind::Leaf),
                    TypeDefinition::Enum(enumeration) => (enumeration.name, Kind::Leaf),
                    TypeDefinition::InputObject(input) => (input.name, Kind::Input),
                };
                types.insert(name, kind);
            }
            schema::Definition::TypeExtension(_) | schema::Definition::DirectiveDefinition(_) => {
                panic!("the validator does not model type extensions or directives")
            }
        }
    }
    Schema {
        types,
        query_root,
        mutation_root,
    }
}

impl Schema {
    /// The object types a value of `name` can be.
    fn possible_types(&self, name: &str) -> BTreeSet<String> {
        match self.types.get(name) {
            Some(Kind::Object { .. }) => BTreeSet::from([name.to_owned()]),
            Some(Kind::Union { members }) => members.iter().cloned().collect(),
            Some(Kind::Interface { .. }) => self
                .types
                .iter()
                .filter(|(_, kind)| {
                    matches!(kind, Kind::Object { interfaces, .. } if interfaces.iter().any(|i| i == name))
                })
                .map(|(object, _)| object.clone())
                .collect(),
            _ => BTreeSet::new(),
        }
    }

    fn is_composite(&self, name: &str) -> bool {
        matches!(
            self.types.get(name),
            Some(Kind::Object { .. } | Kind::Interface { .. } | Kind::Union { .. })
        )
    }
}

struct Validator<'s> {
    schema: &'s Schema,
    variables: BTreeMap<String, String>,
    used_variables: BTreeSet<String>,
    errors: Vec<String>,
}

impl Validator<'_> {
    fn selection_set(&mut self, set: &SelectionSet<'_, String>, parent: &str, path: &str) {
        for selection in &set.items {
            match selection {
                Selection::Field(field) => self.field(field, parent, path),
                Selection::InlineFragment(fragment) => {
                    let Some(TypeCondition::On(condition)) = &fragment.type_condition else {
                        self.selection_set(&fragment.selection_set, parent, path);
                        continue;
                    };
                    if !self.schema.types.contains_key(condition) {
                        self.errors
                            .push(format!("{path}: unknown type `{condition}`"));
                        continue;
                    }
                    let possible = self.schema.possible_types(parent);
                    if self.schema.possible_types(condition).is_disjoint(&possible) {
                        self.errors.push(format!(
                            "{path}: `... on {condition}` can never match a `{parent}`"
                        ));
                    }
                    let path = format!("{path}(on {condition})");
                    self.selection_set(&fragment.selection_set, condition, &path);
                }
                Selection::FragmentSpread(spread) => self.errors.push(format!(
                    "{path}: named fragment `{}` is not supported by this validator",
                    spread.fragment_name
                )),
            }
        }
    }

    fn field(&mut self, field: &query::Field<'_, String>, parent: &str, path: &str) {
        let path = format!("{path}.{}", field.name);
        if field.name == "__typename" {
            if !field.selection_set.items.is_empty() {
                self.errors
                    .push(format!("{path}: a leaf cannot have selections"));
            }
            return;
        }
        let fields = match self.schema.types.get(parent) {
            Some(Kind::Object { fields, .. } | Kind::Interface { fields }) => fields,
            _ => {
                self.errors
                    .push(format!("{path}: `{parent}` has no fields to select"));
                return;
            }
        };
        let Some(def) = fields.get(&field.name) else {
            self.errors
                .push(format!("{path}: `{parent}` has no field `{}`", field.name));
            return;
        };
        for (name, value) in &field.arguments {
            let Some(expected) = def.arguments.get(name) else {
                self.errors
                    .push(format!("{path}: unknown argument `{name}`"));
                continue;
            };
            if let query::Value::Variable(variable) = value {
                self.used_variables.insert(variable.clone());
                match self.variables.get(variable) {
                    Some(declared) if declared == expected => {}
                    Some(declared) => self.errors.push(format!(
                        "{path}: `${variable}` is `{declared}`, argument `{name}` wants `{expected}`"
                    )),
                    None => self.errors.push(format!("{path}: `${variable}` is not declared")),
                }
            }
        }
        for (name, expected) in &def.arguments {
            let given = field.arguments.iter().any(|(given, _)| given == name);
            if expected.ends_with('!') && !given {
                self.errors
                    .push(format!("{path}: required argument `{name}` is missing"));
            }
        }
        let composite = self.schema.is_composite(&def.named_type);
        match (composite, field.selection_set.items.is_empty()) {
            (true, true) => self
                .errors
                .push(format!("{path}: `{}` needs a selection set", def.type_ref)),
            (false, false) => self.errors.push(format!(
                "{path}: `{}` is a leaf and cannot have selections",
                def.type_ref
            )),
            (true, false) => self.selection_set(&field.selection_set, &def.named_type, &path),
            (false, true) => {}
        }
    }
}

/// Every problem found in `document` against `sdl`; empty when it is valid.
fn validate(sdl: &str, document: &str) -> Vec<String> {
    let schema = parse_schema(sdl);
    let document = match query::parse_query::<String>(document) {
        Ok(document) => document,
        Err(error) => return vec![format!("the document does not parse: {error}")],
    };
    let mut errors = Vec::new();
    for definition in &document.definitions {
        let (root, variable_definitions, set) = match definition {
            Definition::Operation(OperationDefinition::Mutation(mutation)) => (
                &schema.mutation_root,
                &mutation.variable_definitions,
                &mutation.selection_set,
            ),
            Definition::Operation(OperationDefinition::Query(query)) => (
                &schema.query_root,
                &query.variable_definitions,
                &query.selection_set,
            ),
            _ => {
                errors.push("only named queries and mutations are supported".to_owned());
                continue;
            }
        };
        let mut validator = Validator {
            schema: &schema,
            variables: BTreeMap::new(),
            used_variables: BTreeSet::new(),
            errors: Vec::new(),
        };
        for variable in variable_definitions {
            let type_name = named_type_of_query(&variable.var_type);
            if !matches!(schema.types.get(&type_name), Some(Kind::Input | Kind::Leaf)) {
                validator.errors.push(format!(
                    "`${}`: `{type_name}` is not an input type of the schema",
                    variable.name
                ));
            }
            validator
                .variables
                .insert(variable.name.clone(), variable.var_type.to_string());
        }
        validator.selection_set(set, root, root);
        for unused in validator
            .variables
            .keys()
            .filter(|name| !validator.used_variables.contains(*name))
        {
            validator
                .errors
                .push(format!("`${unused}` is declared but not used"));
        }
        errors.extend(validator.errors);
    }
    errors
}

fn named_type_of_query(ty: &query::Type<'_, String>) -> String {
    match ty {
        query::Type::NamedType(name) => name.clone(),
        query::Type::ListType(inner) | query::Type::NonNullType(inner) => {
            named_type_of_query(inner)
        }
    }
}

/// The `query` of the one request the client sends for a uid.
async fn sent_document() -> String {
    let server = MockServer::start().await;
    mount(&server, graphql_result(command_output("{}"))).await;
    client(&server)
        .create_managed_mcp_client_config(uid(1))
        .await
        .unwrap();
    let requests = server.received_requests().await.unwrap();
    let body: serde_json::Value = requests[0].body_json().unwrap();
    body["query"].as_str().unwrap().to_owned()
}

/// The `query` of the one request the client sends for three uids in one batch.
async fn sent_batch_document() -> String {
    let server = MockServer::start().await;
    // The answer is not per alias; what matters is the request.
    mount(&server, graphql_result(command_output("{}"))).await;
    let settings = tether_graphql::HttpClientSettings {
        batch_size: 32,
        ..common::settings(&server)
    };
    let _ = tether_graphql::HttpManagedMcpClient::new(settings)
        .unwrap()
        .resolve_many(&[uid(1), uid(2), uid(3)])
        .await;
    let requests = server.received_requests().await.unwrap();
    let body: serde_json::Value = requests[0].body_json().unwrap();
    assert_eq!(body["variables"].as_object().unwrap().len(), 3);
    body["query"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_batch_document_is_valid_and_selects_what_one_call_selects() {
    let single = sent_document().await;
    let batch = sent_batch_document().await;
    assert_eq!(validate(SCHEMA, &batch), Vec::<String>::new());
    // Each alias carries the single operation's selection, word for word.
    let selection = single
        .split_once("createManagedMcpClientConfig(input: $input)")
        .map(|(_, rest)| rest.trim())
        .unwrap();
    let selection = &selection[..selection.rfind('}').unwrap()];
    for index in 0..3 {
        let head = format!("m{index}: createManagedMcpClientConfig(input: $i{index}) ");
        let field = batch.split_once(&head).map(|(_, rest)| rest).unwrap();
        assert!(
            field.starts_with(selection.trim_end()),
            "alias m{index}:\n{batch}"
        );
    }
}

#[tokio::test]
async fn the_sent_document_is_valid_against_the_schema() {
    let document = sent_document().await;
    assert_eq!(validate(SCHEMA, &document), Vec::<String>::new());
    // Every field of the output and of the error interface is selected.
    for field in [
        "transportKind",
        "mcpConfigJson",
        "proxyUrl",
        "proxyToken",
        "authorizationHeaderName",
        "authorizationHeaderValue",
        "expiresAt",
        "... on GenericUserFacingError",
        "... on ManagedMcpNotFoundError",
        "... on ManagedMcpInactiveError",
    ] {
        assert!(document.contains(field), "{field} missing from\n{document}");
    }
}

#[tokio::test]
async fn a_field_renamed_in_the_schema_is_caught() {
    let document = sent_document().await;
    let renamed = SCHEMA.replace("proxyToken: String", "proxyAccessToken: String");
    assert_ne!(renamed, SCHEMA);
    assert_eq!(
        validate(&renamed, &document),
        [
            "Mutation.createManagedMcpClientConfig(on CreateManagedMcpClientConfigOutput).proxyToken: \
             `CreateManagedMcpClientConfigOutput` has no field `proxyToken`"
        ]
    );
}

#[test]
fn drifted_documents_are_caught() {
    let valid = include_str!("data/create_managed_mcp_client_config.graphql");
    assert_eq!(validate(SCHEMA, valid), Vec::<String>::new());
    let drifts = [
        ("mcpConfigJson", "mcpConfig", "has no field `mcpConfig`"),
        ("... on UserFacingError", "... on Query", "can never match"),
        (
            "... on ManagedMcpInactiveError",
            "... on Inactive",
            "unknown type `Inactive`",
        ),
        (
            "CreateManagedMcpClientConfigInput!)",
            "ID!)",
            "argument `input` wants",
        ),
        (
            "(input: $input)",
            "",
            "required argument `input` is missing",
        ),
        ("error {", "error { code", "has no field `code`"),
    ];
    for (from, to, expected) in drifts {
        let drifted = valid.replacen(from, to, 1);
        assert_ne!(drifted, valid, "{from} not found in the document");
        let errors = validate(SCHEMA, &drifted);
        assert!(
            errors.iter().any(|error| error.contains(expected)),
            "replacing `{from}` with `{to}`: expected an error containing `{expected}`, got {errors:?}"
        );
    }
}
