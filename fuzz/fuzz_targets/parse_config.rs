//! Any text, as a user or managed config: parsing never panics, and an error never holds the
//! input's string contents.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tether_config::{Origin, parse_config};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for origin in [Origin::User, Origin::Managed] {
        if let Ok(parsed) = parse_config(text, origin) {
            for server in parsed.servers {
                let _ = server.into_installation();
            }
        }
    }
});
