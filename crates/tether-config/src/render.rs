//! Applying secrets to an installation and rendering it, in memory, in one pass.
//!
//! Rules:
//! - For each variable: if its value holds `{{NAME}}` references, they are filled from the
//!   secrets; otherwise a secret named exactly like the variable replaces the value, unless
//!   the value is locked. A missing secret leaves the placeholder in place.
//! - Substitution works on parsed strings, never on serialized JSON: a value is inserted
//!   verbatim, never escaped and never expanded again.
//! - `${VAR}` expansion (user origin only) runs on text the user wrote, never on a secret's
//!   value and never on a managed config.
//!
//! **Invariant:** this is the only way from an [`Installation`] to launchable or exportable
//! config, so local, inline and managed installations all get the same secret handling.

use std::collections::BTreeSet;
use std::fmt;

use indexmap::IndexMap;
use serde_json::{Map, Value, json};

use crate::env_expand::{EnvLookup, Expanded, expand};
use crate::model::{
    Installation, Origin, RemoteTransport, ServerOptions, ServerTemplate, VariableValue,
};
use crate::placeholder::{
    Segment, has_placeholders, is_placeholder_of, is_valid_name, placeholder, segments,
};
use crate::provenance::{is_credential_name, url_passwords};
use tether_secret::{MASK, SecretValue, Secrets};

/// One piece of rendered text.
#[derive(Clone, PartialEq, Eq)]
enum Piece {
    /// Text from the template or a placeholder left in place.
    Plain(String),
    /// Text from a secret, the environment, a managed server, a credential-named env or
    /// header entry, or a URL's password.
    Sensitive(SecretValue),
}

/// A rendered string that remembers which parts are sensitive, so it can be shown masked.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RenderedText {
    pieces: Vec<Piece>,
}

impl RenderedText {
    /// Text with no sensitive part: a value tether supplies itself (its own path, say).
    pub fn plain(text: &str) -> Self {
        let mut rendered = Self::default();
        rendered.push_plain(text);
        rendered
    }

    /// `prefix` then a sensitive `value`: a header tether adds itself (`Bearer ` and an OAuth
    /// access token), masked wherever it is shown.
    pub fn plain_then_sensitive(prefix: &str, value: SecretValue) -> Self {
        let mut rendered = Self::plain(prefix);
        rendered.pieces.push(Piece::Sensitive(value));
        rendered
    }

    /// The real text. Use it only where the value is really needed.
    pub fn expose(&self) -> String {
        self.join(|piece| match piece {
            Piece::Plain(text) => text,
            Piece::Sensitive(value) => value.expose(),
        })
    }

    /// The text with every sensitive part replaced by [`MASK`].
    pub fn masked(&self) -> String {
        self.join(|piece| match piece {
            Piece::Plain(text) => text,
            Piece::Sensitive(_) => MASK,
        })
    }

    /// The text as `exposure` asks.
    pub fn show(&self, exposure: Exposure) -> String {
        match exposure {
            Exposure::Real => self.expose(),
            Exposure::Masked => self.masked(),
        }
    }

    /// Whether any part is sensitive (from a secret, the environment, a managed server, a
    /// credential-named entry or a URL's password).
    pub fn is_sensitive(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::Sensitive(_)))
    }

    /// The sensitive parts, e.g. to mask them in a child's stderr.
    pub fn sensitive_values(&self) -> impl Iterator<Item = &SecretValue> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Sensitive(value) => Some(value),
            Piece::Plain(_) => None,
        })
    }

    /// Sized once: a `String` that grows leaves copies of what it held (secret values
    /// among them) in the memory it frees, and costs an allocation per doubling.
    fn join<'a>(&'a self, part: impl Fn(&'a Piece) -> &'a str) -> String {
        let mut out = String::with_capacity(self.pieces.iter().map(|p| part(p).len()).sum());
        for piece in &self.pieces {
            out.push_str(part(piece));
        }
        out
    }

    fn push_plain(&mut self, text: &str) {
        if let Some(Piece::Plain(last)) = self.pieces.last_mut() {
            last.push_str(text);
        } else if !text.is_empty() {
            self.pieces.push(Piece::Plain(text.to_owned()));
        }
    }

    /// Appends text written in the config: plain, except the password of a URL in it.
    fn push_written(&mut self, text: &str) {
        let mut at = 0;
        for password in url_passwords(text) {
            self.push_plain(&text[at..password.start]);
            self.pieces
                .push(Piece::Sensitive(SecretValue::from(&text[password.clone()])));
            at = password.end;
        }
        self.push_plain(&text[at..]);
    }

    fn extend(&mut self, other: &RenderedText) {
        for piece in &other.pieces {
            match piece {
                Piece::Plain(text) => self.push_plain(text),
                Piece::Sensitive(_) => self.pieces.push(piece.clone()),
            }
        }
    }
}

impl fmt::Debug for RenderedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.masked(), f)
    }
}

/// Whether rendered output shows real values or masks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// Real values (for a child process, a 0600 file, or `--show-secrets`).
    Real,
    /// Sensitive parts replaced by [`MASK`].
    Masked,
}

/// A rendered server's launch description.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum RenderedTransport {
    /// A stdio server.
    Stdio {
        /// The program.
        command: RenderedText,
        /// Its arguments.
        args: Vec<RenderedText>,
        /// Its environment.
        env: IndexMap<String, RenderedText>,
        /// Its working directory.
        cwd: Option<RenderedText>,
    },
    /// A remote server.
    Remote {
        /// The endpoint.
        url: RenderedText,
        /// Request headers.
        headers: IndexMap<String, RenderedText>,
        /// Streamable HTTP or SSE.
        transport: RemoteTransport,
    },
}

/// A server with secrets applied. `Debug` shows masked values only.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RenderedServer {
    /// The server's name.
    pub name: String,
    /// How to launch or reach it.
    pub transport: RenderedTransport,
    /// What the config says besides how to launch it (`disabled`, tool filters, …).
    pub options: ServerOptions,
    unresolved: BTreeSet<String>,
    unset_env: BTreeSet<String>,
}

/// Where a text sits in a rendered server; shown as in the config (`command`, `args[1]`,
/// `env.API_KEY`, `cwd`, `url`, `headers.Authorization`), formatted only when shown.
#[derive(Clone, Copy)]
enum Field<'a> {
    Command,
    Arg(usize),
    Env(&'a str),
    Cwd,
    Url,
    Header(&'a str),
}

impl fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Command => f.write_str("command"),
            Self::Arg(index) => write!(f, "args[{index}]"),
            Self::Env(name) => write!(f, "env.{name}"),
            Self::Cwd => f.write_str("cwd"),
            Self::Url => f.write_str("url"),
            Self::Header(name) => write!(f, "headers.{name}"),
        }
    }
}

impl RenderedServer {
    /// A stdio server tether supplies itself (no template, no secret, default options): the
    /// one entry a hand-off through the gateway gives a harness, `tether __gateway SOCKET`.
    pub fn plain_stdio(name: &str, command: &str, args: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            transport: RenderedTransport::Stdio {
                command: RenderedText::plain(command),
                args: args.iter().map(|arg| RenderedText::plain(arg)).collect(),
                env: IndexMap::new(),
                cwd: None,
            },
            options: ServerOptions::default(),
            unresolved: BTreeSet::new(),
            unset_env: BTreeSet::new(),
        }
    }

    /// Placeholder names still in the output because no secret supplied them. A strict caller
    /// refuses to launch when this is not empty.
    pub fn unresolved_placeholders(&self) -> &BTreeSet<String> {
        &self.unresolved
    }

    /// Where each unresolved placeholder sits: `(field, name)` pairs in field order, a field
    /// named as in the config (`command`, `args[1]`, `env.API_KEY`, `cwd`, `url`,
    /// `headers.Authorization`). Only text from the template is searched, never a value, so a
    /// secret that itself reads `{{X}}` is not taken for a placeholder.
    pub fn unresolved_fields(&self) -> Vec<(String, String)> {
        if self.unresolved.is_empty() {
            return Vec::new();
        }
        let mut found = Vec::new();
        for (field, text) in self.fields() {
            for piece in &text.pieces {
                let Piece::Plain(plain) = piece else { continue };
                for name in crate::placeholder::placeholder_names(plain) {
                    if self.unresolved.contains(name) {
                        found.push((field.to_string(), name.to_owned()));
                    }
                }
            }
        }
        found
    }

    /// Every text of the server with where it sits, in config order.
    fn fields(&self) -> Vec<(Field<'_>, &RenderedText)> {
        let mut fields: Vec<(Field<'_>, &RenderedText)> = Vec::new();
        match &self.transport {
            RenderedTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                fields.push((Field::Command, command));
                fields.extend(args.iter().enumerate().map(|(i, a)| (Field::Arg(i), a)));
                fields.extend(env.iter().map(|(k, v)| (Field::Env(k), v)));
                fields.extend(cwd.iter().map(|c| (Field::Cwd, c)));
            }
            RenderedTransport::Remote { url, headers, .. } => {
                fields.push((Field::Url, url));
                fields.extend(headers.iter().map(|(k, v)| (Field::Header(k), v)));
            }
        }
        fields
    }

    /// Makes every part that came from one of `values` (clones of them, as rendering places
    /// them: [`SecretValue::is_clone_of`]) plain text, shown and exported as is. For values
    /// that are not secrets although the secrets supplied them: a VS Code export fills each
    /// `${input:ID}` with the text `${input:ID}` itself, which VS Code resolves.
    pub fn declassify(&mut self, values: &[SecretValue]) {
        let texts: Vec<&mut RenderedText> = match &mut self.transport {
            RenderedTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => std::iter::once(command)
                .chain(args.iter_mut())
                .chain(env.values_mut())
                .chain(cwd.iter_mut())
                .collect(),
            RenderedTransport::Remote { url, headers, .. } => {
                std::iter::once(url).chain(headers.values_mut()).collect()
            }
        };
        for text in texts {
            let pieces = std::mem::take(&mut text.pieces);
            for piece in pieces {
                match piece {
                    Piece::Sensitive(value) if values.iter().any(|v| value.is_clone_of(v)) => {
                        text.push_plain(value.expose());
                    }
                    Piece::Plain(plain) => text.push_plain(&plain),
                    sensitive @ Piece::Sensitive(_) => text.pieces.push(sensitive),
                }
            }
        }
    }

    /// `${VAR}` names left literal because the variable is unset and has no default.
    pub fn unset_env_vars(&self) -> &BTreeSet<String> {
        &self.unset_env
    }

    /// Every sensitive value in the output, to mask in logs or captured output.
    pub fn sensitive_values(&self) -> Vec<&SecretValue> {
        self.fields()
            .into_iter()
            .flat_map(|(_, text)| text.sensitive_values())
            .collect()
    }

    /// The server in the portable JSON form: stdio `{command, args, env[, cwd]}`, remote
    /// `{url, headers, type}` with `type` `http` or `sse`, plus the options that are set
    /// (`disabled`, …).
    pub fn to_json(&self, exposure: Exposure) -> Value {
        let mut server = self.launch_json(exposure);
        self.options.write_json(&mut server);
        server
    }

    fn launch_json(&self, exposure: Exposure) -> Value {
        let map = |m: &IndexMap<String, RenderedText>| -> Map<String, Value> {
            m.iter()
                .map(|(k, v)| (k.clone(), Value::String(v.show(exposure))))
                .collect()
        };
        match &self.transport {
            RenderedTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut server = json!({
                    "command": command.show(exposure),
                    "args": args.iter().map(|a| a.show(exposure)).collect::<Vec<_>>(),
                    "env": map(env),
                });
                if let Some(cwd) = cwd {
                    server["cwd"] = Value::String(cwd.show(exposure));
                }
                server
            }
            RenderedTransport::Remote {
                url,
                headers,
                transport,
            } => json!({
                "url": url.show(exposure),
                "headers": map(headers),
                "type": transport.type_name(),
            }),
        }
    }
}

/// `{"mcpServers": {name: server}}` for the given servers, in order.
pub fn render_server_map(servers: &[RenderedServer], exposure: Exposure) -> Value {
    let map: Map<String, Value> = servers
        .iter()
        .map(|s| (s.name.clone(), s.to_json(exposure)))
        .collect();
    json!({ "mcpServers": map })
}

impl Installation {
    /// Applies `secrets` and renders the server, in memory. `env` serves `${VAR}` expansion
    /// for user-origin installations and is never read for managed ones.
    pub fn render(&self, secrets: &Secrets, env: &dyn EnvLookup) -> RenderedServer {
        let mut renderer = Renderer {
            installation: self,
            secrets,
            env: (self.origin == Origin::User).then_some(env),
            unresolved: BTreeSet::new(),
            unset_env: BTreeSet::new(),
            next: 0,
        };
        let transport = match &self.server.template {
            ServerTemplate::Stdio(stdio) => RenderedTransport::Stdio {
                command: renderer.text(&stdio.command),
                args: stdio.args.iter().map(|a| renderer.text(a)).collect(),
                env: renderer.captured_map(&stdio.env),
                cwd: stdio.cwd.as_deref().map(|c| renderer.text(c)),
            },
            ServerTemplate::Remote(remote) => RenderedTransport::Remote {
                url: renderer.text(&remote.url),
                headers: renderer.captured_map(&remote.headers),
                transport: remote.transport,
            },
        };
        RenderedServer {
            name: self.server.name.clone(),
            transport,
            options: self.server.options.clone(),
            unresolved: renderer.unresolved,
            unset_env: renderer.unset_env,
        }
    }
}

struct Renderer<'a> {
    installation: &'a Installation,
    secrets: &'a Secrets,
    env: Option<&'a dyn EnvLookup>,
    unresolved: BTreeSet<String>,
    unset_env: BTreeSet<String>,
    /// The position in the installation's values after the variable looked up last.
    next: usize,
}

impl<'a> Renderer<'a> {
    /// Renders a template string: literals (env-expanded for user origin) and placeholders.
    fn text(&mut self, template: &str) -> RenderedText {
        let mut out = RenderedText::default();
        for segment in segments(template) {
            match segment {
                Segment::Literal(literal) => self.literal(literal, &mut out),
                Segment::Placeholder(name) => self.variable(name, &mut out),
            }
        }
        out
    }

    /// Renders an env or header map: an entry whose template is `{{KEY}}` for its own key is
    /// the captured variable KEY, whatever characters KEY holds.
    fn captured_map(&mut self, map: &IndexMap<String, String>) -> IndexMap<String, RenderedText> {
        map.iter()
            .map(|(key, template)| {
                let value = if is_placeholder_of(template, key) {
                    let mut value = RenderedText::default();
                    self.variable(key, &mut value);
                    value
                } else {
                    self.text(template)
                };
                (key.clone(), value)
            })
            .collect()
    }

    /// Appends the value of the variable `name` to `out`. Computed where it is used, with no
    /// cache: a variable is rarely used twice, and a cache held a second copy of every value
    /// and its allocations (what made rendering 40,000 placeholders cost ×6 the time of 10,000).
    ///
    /// Every placeholder of a template is one of its variables (parsing makes it so), so the
    /// installation's values are looked up directly: one lookup per placeholder.
    fn variable(&mut self, name: &str, out: &mut RenderedText) {
        match self.value_of(name) {
            None => self.secret_or_placeholder(name, out),
            // The value `{{NAME}}` that stands for a missing one: filled from the secrets, as
            // scanning it would (only a valid name makes it a placeholder).
            Some(value) if is_placeholder_of(value.value.expose(), name) && is_valid_name(name) => {
                self.secret_or_placeholder(name, out);
            }
            Some(value) => {
                let text = value.value.expose();
                if has_placeholders(text) {
                    for part in segments(text) {
                        match part {
                            Segment::Literal(literal) => self.literal(literal, out),
                            Segment::Placeholder(inner) => {
                                self.secret_or_placeholder(inner, out);
                            }
                        }
                    }
                } else if let Some(secret) = self.secrets.get(name).filter(|_| !value.locked) {
                    out.pieces.push(Piece::Sensitive(secret.clone()));
                } else {
                    let mut expanded = RenderedText::default();
                    self.literal(text, &mut expanded);
                    if self.installation.origin == Origin::Managed || is_credential_name(name) {
                        // A server-issued value, or one under a credential's name: sensitive
                        // as a whole, also after `${VAR}` expansion.
                        out.pieces
                            .push(Piece::Sensitive(SecretValue::new(expanded.expose())));
                    } else {
                        // A plain value the user wrote: only what came from the environment
                        // (and a URL's password) is sensitive.
                        out.extend(&expanded);
                    }
                }
            }
        }
    }

    /// The installation's value of the variable `name`. Rendering walks a template in the
    /// order parsing found its variables, so the entry after the last one found is tried
    /// first: most lookups compare one name with no hashing and no random access into the
    /// table (which, with tens of thousands of variables, no longer fits the CPU's cache).
    fn value_of(&mut self, name: &str) -> Option<&'a VariableValue> {
        let values = &self.installation.values;
        if let Some((key, value)) = values.get_index(self.next)
            && key == name
        {
            self.next += 1;
            return Some(value);
        }
        let (index, _, value) = values.get_full(name)?;
        self.next = index + 1;
        Some(value)
    }

    fn secret_or_placeholder(&mut self, name: &str, out: &mut RenderedText) {
        match self.secrets.get(name) {
            Some(secret) => out.pieces.push(Piece::Sensitive(secret.clone())),
            None => {
                self.unresolved.insert(name.to_owned());
                out.push_plain(&placeholder(name));
            }
        }
    }

    /// Appends literal template text, expanding `${VAR}` for user-origin installations.
    fn literal(&mut self, literal: &str, out: &mut RenderedText) {
        let Some(env) = self.env else {
            out.push_written(literal);
            return;
        };
        for piece in expand(literal, env) {
            match piece {
                Expanded::Text(text) | Expanded::Default(text) => out.push_written(text),
                Expanded::Value(value) => {
                    out.pieces.push(Piece::Sensitive(SecretValue::new(value)))
                }
                Expanded::Unset { literal, name } => {
                    self.unset_env.insert(name.to_owned());
                    out.push_plain(literal);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env_expand::EmptyEnv;
    use crate::parse::parse_config;
    use pretty_assertions::assert_eq;
    use std::collections::BTreeMap;

    fn render_one(
        text: &str,
        origin: Origin,
        secrets: &Secrets,
        env: &dyn EnvLookup,
    ) -> RenderedServer {
        parse_config(text, origin)
            .expect("parsing the test config")
            .servers
            .remove(0)
            .into_installation()
            .render(secrets, env)
    }

    fn secrets(pairs: &[(&str, &str)]) -> Secrets {
        pairs.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Rendering tries the variable after the last one found first; a template that uses
    /// variables out of the order parsing found them, or more than once, renders the same.
    #[test]
    fn variables_out_of_order_and_repeated_render_exactly() {
        let text = r#"{"s":{"command":"x{{C}}","args":["{{B}}","{{A}}","{{B}}{{A}}{{C}}{{B}}","{{D}}"],
            "env":{"A":"{{A}}","E":"e-{{B}}","F":"{{F}}"}}}"#;
        let given = secrets(&[("A", "$HOME a"), ("B", "{{x}} b"), ("C", "ü c"), ("F", "f")]);
        for origin in [Origin::User, Origin::Managed] {
            let server = render_one(text, origin, &given, &EmptyEnv);
            let json = server.to_json(Exposure::Real);
            assert_eq!(json["command"], "xü c", "{origin:?}");
            assert_eq!(
                json["args"],
                serde_json::json!(["{{x}} b", "$HOME a", "{{x}} b$HOME aü c{{x}} b", "{{D}}"]),
                "{origin:?}"
            );
            assert_eq!(json["env"]["A"], "$HOME a", "{origin:?}");
            assert_eq!(json["env"]["E"], "e-{{x}} b", "{origin:?}");
            assert_eq!(json["env"]["F"], "f", "{origin:?}");
            assert_eq!(
                server.unresolved.iter().collect::<Vec<_>>(),
                ["D"],
                "{origin:?}"
            );
        }
    }

    #[test]
    fn declassify_makes_plain_only_the_clones_of_the_given_values() {
        let mut given = Secrets::new();
        given.insert("tok", "${input:tok}");
        let reference = given.get("tok").expect("stored");
        // Same text, another value: stays sensitive.
        given.insert("other", "${input:tok}");
        // More secrets after the reference was taken: the stored value does not move.
        for i in 0..1_000 {
            given.insert(format!("more{i}"), format!("value {i}"));
        }
        let mut server = render_one(
            r#"{"s":{"url":"https://h/mcp","headers":{"A":"Bearer {{tok}}","B":"{{other}}"}}}"#,
            Origin::User,
            &given,
            &EmptyEnv,
        );
        server.declassify(&[reference]);
        let RenderedTransport::Remote { headers, .. } = &server.transport else {
            panic!("not remote");
        };
        assert_eq!(headers["A"].masked(), "Bearer ${input:tok}");
        assert!(!headers["A"].is_sensitive());
        assert_eq!(headers["B"].masked(), MASK);
    }

    #[test]
    fn masked_output_hides_only_sensitive_parts() {
        let server = render_one(
            r#"{"s":{"url":"https://h/mcp","headers":{"Authorization":"Bearer {{TOKEN}}","X-Api-Key":"lit"}}}"#,
            Origin::User,
            &secrets(&[("TOKEN", "t0k-SENTINEL")]),
            &EmptyEnv,
        );
        assert_eq!(
            server.to_json(Exposure::Masked),
            json!({"url":"https://h/mcp","headers":{"Authorization":"Bearer ********","X-Api-Key":"********"},"type":"http"})
        );
        assert_eq!(
            server.to_json(Exposure::Real)["headers"]["Authorization"],
            "Bearer t0k-SENTINEL"
        );
        assert!(!format!("{server:?}").contains("SENTINEL"));
        let values: Vec<&str> = server
            .sensitive_values()
            .iter()
            .map(|v| v.expose())
            .collect();
        assert_eq!(values, ["t0k-SENTINEL", "lit"]);
    }

    /// What the user wrote is shown unless it is a credential by its key or a
    /// URL's password; what came from a secret, the environment or a managed server is masked.
    #[test]
    fn masking_follows_provenance() {
        let env: BTreeMap<String, String> =
            [("TOK".to_owned(), "t0k".to_owned())].into_iter().collect();
        let text = r#"{"s":{"command":"npx","args":["--db=postgresql://u:pw@h/db","--base=${BASE:-http://localhost:3000}/mcp"],
            "env":{"SLACK_TEAM_ID":"T01","SLACK_BOT_TOKEN":"xoxb-1","LOG":"Bearer ${TOK}","S":"{{S}}"}}}"#;
        let user = render_one(text, Origin::User, &secrets(&[("S", "s3")]), &env);
        assert_eq!(
            user.to_json(Exposure::Masked),
            json!({"command":"npx","args":["--db=postgresql://u:********@h/db","--base=http://localhost:3000/mcp"],
                   "env":{"SLACK_TEAM_ID":"T01","SLACK_BOT_TOKEN":"********","LOG":"Bearer ********","S":"********"}})
        );
        let values: Vec<&str> = user.sensitive_values().iter().map(|v| v.expose()).collect();
        assert_eq!(values, ["pw", "xoxb-1", "t0k", "s3"]);
        let managed = render_one(
            r#"{"s":{"url":"https://p/mcp","headers":{"Content-Type":"application/json"}}}"#,
            Origin::Managed,
            &Secrets::new(),
            &EmptyEnv,
        );
        assert_eq!(
            managed.to_json(Exposure::Masked)["headers"]["Content-Type"],
            "********"
        );
    }

    #[test]
    fn names_the_field_of_each_unresolved_placeholder() {
        let server = render_one(
            r#"{"s":{"command":"srv","args":["--x","--token={{A}}"],"env":{"K":"{{B}}","L":"{{C}}"}}}"#,
            Origin::User,
            &secrets(&[("C", "{{A}} is a value, not a placeholder")]),
            &EmptyEnv,
        );
        assert_eq!(
            server.unresolved_fields(),
            [
                ("args[1]".to_owned(), "A".to_owned()),
                ("env.K".to_owned(), "B".to_owned())
            ]
        );
    }

    #[test]
    fn reports_unresolved_placeholders_by_name() {
        let server = render_one(
            r#"{"s":{"command":"x","args":["--token={{API_TOKEN}}","{{B}}"],"env":{"E":"{{C}}"}}}"#,
            Origin::Managed,
            &secrets(&[("B", "b")]),
            &EmptyEnv,
        );
        let unresolved: Vec<&str> = server
            .unresolved_placeholders()
            .iter()
            .map(String::as_str)
            .collect();
        assert_eq!(unresolved, ["API_TOKEN", "C"]);
        assert_eq!(
            server.to_json(Exposure::Real),
            json!({"command":"x","args":["--token={{API_TOKEN}}","b"],"env":{"E":"{{C}}"}})
        );
    }

    #[test]
    fn env_expansion_for_user_configs_only() {
        let env: BTreeMap<String, String> = [
            ("HOST".to_owned(), "h.example".to_owned()),
            ("TOK".to_owned(), "t".to_owned()),
        ]
        .into_iter()
        .collect();
        let text = r#"{"s":{"url":"https://${HOST}/${NOPE}/$${KEEP}","headers":{"A":"Bearer ${TOK}","B":"${NOPE:-d}"}}}"#;
        let user = render_one(text, Origin::User, &Secrets::new(), &env);
        assert_eq!(
            user.to_json(Exposure::Real),
            json!({"url":"https://h.example/${NOPE}/${KEEP}","headers":{"A":"Bearer t","B":"d"},"type":"http"})
        );
        assert_eq!(user.unset_env_vars().iter().collect::<Vec<_>>(), ["NOPE"]);
        assert_eq!(
            user.to_json(Exposure::Masked)["url"],
            "https://********/${NOPE}/${KEEP}"
        );

        let managed = render_one(text, Origin::Managed, &Secrets::new(), &env);
        assert_eq!(
            managed.to_json(Exposure::Real),
            json!({"url":"https://${HOST}/${NOPE}/$${KEEP}","headers":{"A":"Bearer ${TOK}","B":"${NOPE:-d}"},"type":"http"})
        );
        assert!(managed.unset_env_vars().is_empty());
    }

    #[test]
    fn registry_configs_are_literal_and_take_only_their_secrets() {
        let env: BTreeMap<String, String> = [("HOME".to_owned(), "/home/u".to_owned())]
            .into_iter()
            .collect();
        let text = r#"{"s":{"command":"x","args":["--dir","$HOME/${HOME}/{env:HOME}/${input:v}/%41","{{K}}"],"env":{"A":"Bearer ${HOME}","B":"{{B}}"}}}"#;
        let server = render_one(
            text,
            Origin::Registry,
            &secrets(&[("K", "k"), ("B", "b"), ("A", "a")]),
            &env,
        );
        assert_eq!(
            server.to_json(Exposure::Real),
            json!({"command":"x","args":["--dir","$HOME/${HOME}/{env:HOME}/${input:v}/%41","k"],"env":{"A":"a","B":"b"}})
        );
        assert!(server.unset_env_vars().is_empty());
        let unmasked = render_one(text, Origin::Registry, &Secrets::new(), &env);
        assert_eq!(
            unmasked.to_json(Exposure::Masked)["env"]["A"],
            "Bearer ${HOME}",
            "a published value is not a secret"
        );
    }

    #[test]
    fn secret_values_are_never_env_expanded() {
        let env: BTreeMap<String, String> = [("HOME".to_owned(), "/home/u".to_owned())]
            .into_iter()
            .collect();
        let server = render_one(
            r#"{"s":{"command":"x","args":["{{A}}"],"env":{"B":"keep"}}}"#,
            Origin::User,
            &secrets(&[("A", "${HOME}"), ("B", "${HOME}")]),
            &env,
        );
        assert_eq!(
            server.to_json(Exposure::Real),
            json!({"command":"x","args":["${HOME}"],"env":{"B":"${HOME}"}})
        );
    }

    #[test]
    fn invalid_key_names_keep_their_values_and_take_secrets() {
        let server = render_one(
            r#"{"s":{"command":"x","env":{"1KEY":"one","A.B":"two"}}}"#,
            Origin::User,
            &secrets(&[("A.B", "override")]),
            &EmptyEnv,
        );
        assert_eq!(
            server.to_json(Exposure::Real)["env"],
            json!({"1KEY":"one","A.B":"override"})
        );
    }
}
