//! Any template string and secret value: rendering never panics, the output is valid JSON,
//! and a secret value comes back exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use tether_config::{EmptyEnv, Exposure, Origin, Secrets, parse_config};

fuzz_target!(|input: (String, String, bool)| {
    let (template, secret, managed) = input;
    let origin = if managed { Origin::Managed } else { Origin::User };
    let config = json!({"s": {"command": "x", "args": [template, "{{S}}"], "env": {"E": "{{S}}"}}});
    let Ok(parsed) = parse_config(&config.to_string(), origin) else {
        panic!("a config built by serde_json must parse");
    };
    let secrets: Secrets = [("S", secret.clone())].into_iter().collect();
    for server in parsed.servers {
        let rendered = server.into_installation().render(&secrets, &EmptyEnv);
        let text = rendered.to_json(Exposure::Real).to_string();
        let back: Value = serde_json::from_str(&text).expect("rendered output is JSON");
        assert_eq!(back["args"][1].as_str(), Some(secret.as_str()));
        assert_eq!(back["env"]["E"].as_str(), Some(secret.as_str()));
    }
});
