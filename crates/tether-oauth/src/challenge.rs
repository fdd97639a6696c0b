//! `WWW-Authenticate: Bearer …` challenges (RFC 6750 §3): the parameters a 401 or 403 names,
//! and the scope a step-up asks for.

/// The parameters of a `WWW-Authenticate: Bearer …` challenge (lower-cased names).
pub(crate) fn challenge_params(header: &str) -> Vec<(String, String)> {
    // The scheme is `Bearer`, or `DPoP` (RFC 9449 §7.1) for a server that binds tokens.
    let header = header.trim();
    let rest = ["Bearer", "DPoP"]
        .iter()
        .find_map(|scheme| {
            let head = header.get(..scheme.len())?;
            head.eq_ignore_ascii_case(scheme)
                .then(|| &header[scheme.len()..])
        })
        .unwrap_or("");
    let mut params = Vec::new();
    let mut chars = rest.trim_start().chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let name: String = chars
            .by_ref()
            .take_while(|c| *c != '=')
            .collect::<String>()
            .trim()
            .to_ascii_lowercase();
        if name.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek() {
                if *c == ',' {
                    break;
                }
                value.push(*c);
                chars.next();
            }
            value = value.trim().to_owned();
        }
        params.push((name, value));
    }
    params
}

/// The scope to ask for in a step-up after a 403 whose `WWW-Authenticate` is `challenge`:
/// the challenge's `scope` joined to `held` (what the token has), in that order, without
/// repeats. `None` when the challenge is not `insufficient_scope`, names no scope, or names
/// only scopes already held (asking again would not change the answer).
pub fn step_up_scope(challenge: &str, held: Option<&str>) -> Option<String> {
    let params = challenge_params(challenge);
    let param = |name: &str| {
        params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    if param("error") != Some("insufficient_scope") {
        return None;
    }
    let held: Vec<&str> = held.unwrap_or("").split_whitespace().collect();
    let wanted: Vec<&str> = param("scope")?.split_whitespace().collect();
    if wanted.iter().all(|scope| held.contains(scope)) {
        return None;
    }
    let mut scopes = held;
    for scope in wanted {
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    Some(scopes.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn challenge_parameters_quoted_and_bare() {
        let params = challenge_params(
            r#"Bearer error="invalid_token", resource_metadata="http://a/.well-known/oauth-protected-resource/mcp", scope=read"#,
        );
        assert_eq!(
            params,
            vec![
                ("error".to_owned(), "invalid_token".to_owned()),
                (
                    "resource_metadata".to_owned(),
                    "http://a/.well-known/oauth-protected-resource/mcp".to_owned()
                ),
                ("scope".to_owned(), "read".to_owned()),
            ]
        );
    }

    #[test]
    fn step_up_asks_for_what_is_missing_only() {
        let challenge = |scope: &str| {
            format!(
                r#"Bearer error="insufficient_scope", scope="{scope}", resource_metadata="http://a/x""#
            )
        };
        assert_eq!(
            step_up_scope(&challenge("mcp mcp:write"), Some("mcp")).as_deref(),
            Some("mcp mcp:write")
        );
        assert_eq!(
            step_up_scope(&challenge("b"), Some("a c")).as_deref(),
            Some("a c b")
        );
        assert_eq!(
            step_up_scope(&challenge("write"), None).as_deref(),
            Some("write")
        );
        assert_eq!(step_up_scope(&challenge("a"), Some("a b")), None);
        assert_eq!(
            step_up_scope(r#"Bearer error="invalid_token", scope="x""#, None),
            None
        );
        assert_eq!(
            step_up_scope(r#"Bearer error="insufficient_scope""#, None),
            None
        );
    }
}
