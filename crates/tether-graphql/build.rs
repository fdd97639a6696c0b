//! Registers the managed MCP GraphQL schema with cynic, so that every query fragment in this
//! crate is checked against `schema/managed_mcp.graphql` at compile time: a schema change the
//! code does not follow fails the build.

const SCHEMA_PATH: &str = "../../schema/managed_mcp.graphql";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo::rerun-if-changed={SCHEMA_PATH}");
    println!("cargo::rerun-if-changed=build.rs");
    cynic_codegen::register_schema("managed_mcp")
        .from_sdl_file(SCHEMA_PATH)?
        .as_default()?;
    Ok(())
}
