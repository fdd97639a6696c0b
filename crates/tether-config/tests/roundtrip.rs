//! Property tests: any Unicode value, as a secret or as a literal env/header value, comes out
//! of rendering exactly, and the rendered config is always valid JSON that parses back.

use proptest::prelude::*;
use serde_json::{Value, json};
use tether_config::{EmptyEnv, Exposure, MASK, Origin, Secrets, parse_config};

/// Arbitrary Unicode, plus strings dense in the characters that break naive renderers.
fn tricky_string() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[{}$\\\\\"'`a-zA-Z0-9_.\\- \n\t\r&=<>\u{0}\u{1F600}é]{0,48}",
        Just("{{B}}".to_owned()),
        Just("{{{X}}}".to_owned()),
        Just("a\"b\\c\nd\te".to_owned()),
    ]
}

/// Renders every server of `text` with `secrets`, serializes the map, and checks it is JSON.
fn render_to_json(text: &str, origin: Origin, secrets: &Secrets, exposure: Exposure) -> Value {
    let parsed = parse_config(text, origin).unwrap_or_else(|e| panic!("parse failed: {e}"));
    let servers: serde_json::Map<String, Value> = parsed
        .servers
        .into_iter()
        .map(|s| {
            let rendered = s.into_installation().render(secrets, &EmptyEnv);
            (rendered.name.clone(), rendered.to_json(exposure))
        })
        .collect();
    let serialized = json!({ "mcpServers": servers }).to_string();
    serde_json::from_str(&serialized).unwrap_or_else(|e| panic!("rendered config is not JSON: {e}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn secret_values_render_exactly(value in tricky_string(), managed in any::<bool>()) {
        let origin = if managed { Origin::Managed } else { Origin::User };
        let config = r#"{"s":{"command":"x","args":["{{A}}","pre-{{A}}-post"],"env":{"E":"{{A}}"}},
                         "r":{"url":"https://h/mcp","headers":{"Authorization":"Bearer {{A}}"}}}"#;
        let secrets: Secrets = [("A", value.clone())].into_iter().collect();
        let out = render_to_json(config, origin, &secrets, Exposure::Real);
        let server = &out["mcpServers"]["s"];
        prop_assert_eq!(server["args"][0].as_str(), Some(value.as_str()));
        let wrapped = format!("pre-{value}-post");
        prop_assert_eq!(server["args"][1].as_str(), Some(wrapped.as_str()));
        prop_assert_eq!(server["env"]["E"].as_str(), Some(value.as_str()));
        let header = &out["mcpServers"]["r"]["headers"]["Authorization"];
        let bearer = format!("Bearer {value}");
        prop_assert_eq!(header.as_str(), Some(bearer.as_str()));
        // Masked output shows the mask in the value's place.
        let masked = render_to_json(config, origin, &secrets, Exposure::Masked);
        let masked_server = &masked["mcpServers"]["s"];
        prop_assert_eq!(masked_server["args"][0].as_str(), Some(MASK));
        let masked_arg = format!("pre-{MASK}-post");
        prop_assert_eq!(masked_server["args"][1].as_str(), Some(masked_arg.as_str()));
        prop_assert_eq!(masked_server["env"]["E"].as_str(), Some(MASK));
    }

    #[test]
    fn literal_env_and_header_values_round_trip(key in tricky_string(), value in tricky_string()) {
        prop_assume!(!key.is_empty());
        // Managed origin: no `${VAR}` expansion, so every literal must come back unchanged,
        // also after a second parse of the rendered output.
        let config = json!({
            "s": {"command": "x", "env": {key.clone(): value.clone()}},
            "r": {"url": "https://h/mcp", "headers": {key.clone(): value.clone()}},
        })
        .to_string();
        let first = render_to_json(&config, Origin::Managed, &Secrets::new(), Exposure::Real);
        prop_assert_eq!(first["mcpServers"]["s"]["env"][&key].as_str(), Some(value.as_str()));
        prop_assert_eq!(first["mcpServers"]["r"]["headers"][&key].as_str(), Some(value.as_str()));
        let second = render_to_json(&first.to_string(), Origin::Managed, &Secrets::new(), Exposure::Real);
        prop_assert_eq!(&first, &second);
    }

    #[test]
    fn user_literals_without_dollar_round_trip(value in tricky_string()) {
        // User origin expands `${VAR}`; any value without `$` must come back unchanged.
        prop_assume!(!value.contains('$'));
        let config = json!({"s": {"command": "x", "env": {"K": value.clone()}}}).to_string();
        let out = render_to_json(&config, Origin::User, &Secrets::new(), Exposure::Real);
        prop_assert_eq!(out["mcpServers"]["s"]["env"]["K"].as_str(), Some(value.as_str()));
    }

    #[test]
    fn parser_never_panics(text in any::<String>()) {
        let _ = parse_config(&text, Origin::User);
    }
}

#[test]
fn one_megabyte_value_round_trips() {
    let value: String = "{{x}}\"\\\n\u{1F600}".repeat(1024 * 1024 / 10);
    let secrets: Secrets = [("A", value.clone())].into_iter().collect();
    let out = render_to_json(
        r#"{"s":{"command":"x","args":["{{A}}"]}}"#,
        Origin::User,
        &secrets,
        Exposure::Real,
    );
    assert_eq!(
        out["mcpServers"]["s"]["args"][0].as_str(),
        Some(value.as_str())
    );
}
