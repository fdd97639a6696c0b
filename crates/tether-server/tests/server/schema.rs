//! The schema the server serves is the checked-in contract, compared structurally: types,
//! fields, arguments, nullability, interfaces, union members, enum values and root types.
//! Descriptions, directive definitions and formatting are ignored.

use std::collections::BTreeMap;

use graphql_parser::schema::{Definition, Document, TypeDefinition, parse_schema};
use pretty_assertions::assert_eq;

use crate::support::run;

fn contract() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../schema/managed_mcp.graphql"
    );
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// One line per type (and one for the schema roots), members sorted.
fn shape(sdl: &str) -> BTreeMap<String, String> {
    let document: Document<'_, String> =
        parse_schema(sdl).unwrap_or_else(|e| panic!("invalid SDL: {e}\n{sdl}"));
    let mut shapes = BTreeMap::new();
    let mut roots = ("Query".to_owned(), None, None);
    for definition in document.definitions {
        let (name, text) = match definition {
            Definition::SchemaDefinition(schema) => {
                roots = (
                    schema.query.unwrap_or_else(|| "Query".to_owned()),
                    schema.mutation,
                    schema.subscription,
                );
                continue;
            }
            Definition::TypeDefinition(definition) => type_shape(definition),
            Definition::DirectiveDefinition(_) | Definition::TypeExtension(_) => continue,
        };
        shapes.insert(name, text);
    }
    shapes.insert("(schema)".to_owned(), format!("{roots:?}"));
    shapes
}

fn type_shape(definition: TypeDefinition<'_, String>) -> (String, String) {
    let fields = |fields: Vec<graphql_parser::schema::Field<'_, String>>| {
        let mut lines: Vec<String> = fields
            .into_iter()
            .map(|f| {
                let args: Vec<String> = f
                    .arguments
                    .iter()
                    .map(|a| format!("{}: {} = {:?}", a.name, a.value_type, a.default_value))
                    .collect();
                format!("{}({}): {}", f.name, args.join(", "), f.field_type)
            })
            .collect();
        lines.sort();
        lines.join("; ")
    };
    let sorted = |mut items: Vec<String>| {
        items.sort();
        items.join(" | ")
    };
    match definition {
        TypeDefinition::Scalar(t) => (t.name, "scalar".to_owned()),
        TypeDefinition::Object(t) => (
            t.name,
            format!(
                "type implements [{}] {{ {} }}",
                sorted(t.implements_interfaces),
                fields(t.fields)
            ),
        ),
        TypeDefinition::Interface(t) => (
            t.name,
            format!(
                "interface implements [{}] {{ {} }}",
                sorted(t.implements_interfaces),
                fields(t.fields)
            ),
        ),
        TypeDefinition::Union(t) => (t.name, format!("union = {}", sorted(t.types))),
        TypeDefinition::Enum(t) => (
            t.name,
            format!(
                "enum {{ {} }}",
                sorted(t.values.into_iter().map(|v| v.name).collect())
            ),
        ),
        TypeDefinition::InputObject(t) => {
            let mut lines: Vec<String> = t
                .fields
                .iter()
                .map(|f| format!("{}: {} = {:?}", f.name, f.value_type, f.default_value))
                .collect();
            lines.sort();
            (t.name, format!("input {{ {} }}", lines.join("; ")))
        }
    }
}

#[test]
fn served_schema_is_the_contract() {
    assert_eq!(shape(&tether_server::sdl()), shape(&contract()));
}

#[test]
fn the_comparison_catches_drift() {
    let contract = contract();
    let drifted = [
        contract.replace("mcpConfigJson: String!", "mcpConfigJson: String"),
        contract.replace("uid: ID!", "uid: String!"),
        contract.replace("proxyToken: String", "proxyTokens: String"),
        contract.replace("URL COMMAND", "URL COMMAND STDIO"),
        contract.replace(
            "= CreateManagedMcpClientConfigOutput | UserFacingError",
            "= CreateManagedMcpClientConfigOutput",
        ),
        contract.replace(
            "createManagedMcpClientConfig(input: CreateManagedMcpClientConfigInput!)",
            "createManagedMcpClientConfig(input: CreateManagedMcpClientConfigInput)",
        ),
    ];
    let served = shape(&tether_server::sdl());
    for text in drifted {
        assert_ne!(text, contract, "the edit did not apply");
        assert_ne!(shape(&text), served);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_command_prints_the_served_schema() {
    let output = run(&["schema"], &[], "").await;
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        tether_server::sdl()
    );
}
