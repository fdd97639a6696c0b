//! MCP Apps (SEP-1865) through the gateway: a server's `ui://` resources are offered under its
//! name, so two servers' apps never collide and a host can read one straight from the tool's
//! `_meta` without listing first.
//!
//! `ui://HOST/PATH` of server `S` is offered as `ui://S__HOST/PATH` — in a tool's
//! `_meta.ui.resourceUri` (and the legacy flat `_meta["ui/resourceUri"]`), in
//! `resources/list` and `resources/templates/list`, and in what `resources/read` answers; a read
//! of such a URI goes to `S` with its own URI, whether or not anything was listed. A tool whose
//! `_meta.ui.visibility` leaves out `"model"` is for the app alone: not offered to the model
//! (nor searched) but callable by the host. Everything else of `_meta.ui` (CSP, permissions,
//! domain) passes unchanged, masked like any text.

use serde_json::Value;

/// The scheme of an app's resources.
pub const UI_SCHEME: &str = "ui://";

/// `uri` (a server's own `ui://HOST/PATH`) as the gateway offers it for `server`; `None` for a
/// URI of another scheme.
pub fn offered_uri(server: &str, uri: &str) -> Option<String> {
    let rest = uri.strip_prefix(UI_SCHEME)?;
    Some(format!("{UI_SCHEME}{server}__{rest}"))
}

/// The server an offered `ui://SERVER__HOST/PATH` names, of `servers` (the longest name that
/// fits, as names may hold `__`), and that server's own URI.
pub fn own_uri<'a>(servers: &'a [String], uri: &str) -> Option<(&'a str, String)> {
    let rest = uri.strip_prefix(UI_SCHEME)?;
    servers
        .iter()
        .filter_map(|server| {
            let own = rest.strip_prefix(server.as_str())?.strip_prefix("__")?;
            Some((server.as_str(), format!("{UI_SCHEME}{own}")))
        })
        .max_by_key(|(server, _)| server.len())
}

/// Offers the `ui://` URIs of a tool definition of `server`: `_meta.ui.resourceUri` and the
/// legacy `_meta["ui/resourceUri"]`.
pub fn offer_tool(definition: &mut Value, server: &str) {
    let Some(meta) = definition.get_mut("_meta").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(ui) = meta.get_mut("ui").and_then(Value::as_object_mut) {
        offer_field(ui, "resourceUri", server);
    }
    offer_field(meta, "ui/resourceUri", server);
}

/// Offers the `ui://` URI under `key` of a resource, a template (`uriTemplate`) or a read's
/// contents item of `server`.
pub fn offer_field(item: &mut serde_json::Map<String, Value>, key: &str, server: &str) {
    let offered = item
        .get(key)
        .and_then(Value::as_str)
        .and_then(|uri| offered_uri(server, uri));
    if let Some(offered) = offered {
        item.insert(key.to_owned(), Value::String(offered));
    }
}

/// Offers the `uri` of every item of a `resources/read` answer of `server`.
pub fn offer_contents(answer: &mut Value, server: &str) {
    for item in answer
        .get_mut("contents")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(item) = item.as_object_mut() {
            offer_field(item, "uri", server);
        }
    }
}

/// Whether a tool is for its app alone: `_meta.ui.visibility` lists who sees it and leaves out
/// `"model"`.
pub fn app_only(definition: &Value) -> bool {
    definition
        .pointer("/_meta/ui/visibility")
        .and_then(Value::as_array)
        .is_some_and(|seen_by| !seen_by.iter().any(|who| who == "model"))
}

/// A tool's `_meta.ui`, for what `tether__find_tools` answers.
pub fn ui_of(definition: &Value) -> Option<&Value> {
    definition.pointer("/_meta/ui")
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_servers_ui_uri_is_offered_under_its_name_and_read_back() {
        let servers = ["app".to_owned(), "app__two".to_owned()];
        let offered = offered_uri("app__two", "ui://get-time/mcp-app.html").expect("a ui URI");
        assert_eq!(offered, "ui://app__two__get-time/mcp-app.html");
        assert_eq!(
            own_uri(&servers, &offered),
            Some(("app__two", "ui://get-time/mcp-app.html".to_owned()))
        );
        assert_eq!(
            own_uri(&servers, "ui://app__get-time/x"),
            Some(("app", "ui://get-time/x".to_owned()))
        );
        assert_eq!(own_uri(&servers, "ui://other__x/y"), None);
        assert_eq!(own_uri(&servers, "file:///app__x"), None);
        assert_eq!(offered_uri("app", "https://x"), None);
    }

    #[test]
    fn a_tools_ui_meta_is_offered_and_visibility_read() {
        let mut tool = json!({"name": "get-time", "_meta": {
            "ui": {"resourceUri": "ui://get-time/mcp-app.html", "csp": {"connectDomains": []}},
            "ui/resourceUri": "ui://get-time/mcp-app.html"
        }});
        offer_tool(&mut tool, "one");
        assert_eq!(
            tool["_meta"]["ui"]["resourceUri"],
            "ui://one__get-time/mcp-app.html"
        );
        assert_eq!(
            tool["_meta"]["ui/resourceUri"],
            "ui://one__get-time/mcp-app.html"
        );
        assert_eq!(tool["_meta"]["ui"]["csp"], json!({"connectDomains": []}));
        assert!(!app_only(&tool));
        assert!(app_only(&json!({"_meta": {"ui": {"visibility": ["app"]}}})));
        assert!(!app_only(
            &json!({"_meta": {"ui": {"visibility": ["model", "app"]}}})
        ));
        let mut read =
            json!({"contents": [{"uri": "ui://get-time/mcp-app.html", "text": "<html>"}]});
        offer_contents(&mut read, "one");
        assert_eq!(
            read["contents"][0]["uri"],
            "ui://one__get-time/mcp-app.html"
        );
    }
}
