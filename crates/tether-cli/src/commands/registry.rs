//! `tether search` and `tether show`: the registries, read through `tether-registry`.

use std::fmt::Write as _;

use tether_registry::{
    Freshness, InputRow, LaunchOption, Registries, SearchQuery, ServerDetails, SourceReport,
    registry_title,
};

use crate::cli::{SearchArgs, ShowArgs};
use crate::exit;
use crate::output::print;

fn registries(refresh: bool, flags: &[String]) -> anyhow::Result<Registries> {
    Ok(Registries::new(crate::settings::registry_settings(
        refresh, flags,
    )?)?)
}

/// "just now", "5 minutes ago", "3 hours ago", "2 days ago".
fn ago(seconds: u64) -> String {
    let (count, unit) = match seconds {
        0..60 => return "just now".to_owned(),
        60..3600 => (seconds / 60, "minute"),
        3600..86_400 => (seconds / 3600, "hour"),
        _ => (seconds / 86_400, "day"),
    };
    format!("{count} {unit}{} ago", if count == 1 { "" } else { "s" })
}

/// The stderr notes for registries that answered from an old cache or failed.
fn source_notes(sources: &[SourceReport]) {
    for report in sources {
        let title = registry_title(&report.registry);
        match (&report.freshness, &report.error) {
            (Some(Freshness::Offline { age_secs, reason }), _) => eprintln!(
                "note: {title} could not answer ({reason}); showing its cached answer from {}",
                ago(*age_secs)
            ),
            (_, Some(error)) => eprintln!("warning: {error}; no rows from {title}"),
            _ => {}
        }
    }
}

/// `tether search`.
pub async fn search(args: &SearchArgs) -> anyhow::Result<u8> {
    let registries = registries(args.refresh, &args.registries)?;
    let results = registries
        .search(&SearchQuery {
            text: args.query.clone(),
            limit: usize::from(args.limit),
            source: args.source.clone(),
            include_hidden: args.all,
        })
        .await?;
    if args.json {
        print(&format!("{}\n", serde_json::to_string_pretty(&results)?));
        return Ok(exit::OK);
    }
    source_notes(&results.sources);
    if results.rows.is_empty() {
        eprintln!("no servers match {:?}", args.query);
        return Ok(exit::OK);
    }
    print(&results.table());
    Ok(exit::OK)
}

/// A token of a command line as a user would type it: quoted when it holds whitespace or a
/// quote (placeholders `<name>` stay as they are, to be replaced).
fn shell_word(token: &str) -> String {
    if token.is_empty()
        || token
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '"')
    {
        format!("'{}'", token.replace('\'', r"'\''"))
    } else {
        token.to_owned()
    }
}

fn input_line(input: &InputRow) -> String {
    let mut facts = vec![input.kind.as_str().to_owned()];
    if let Some(of) = &input.of {
        facts.push(format!("in {of}"));
    }
    facts.push(
        if input.required {
            "required"
        } else {
            "optional"
        }
        .to_owned(),
    );
    if input.secret {
        facts.push("secret".to_owned());
    }
    if input.repeated {
        facts.push("repeatable".to_owned());
    }
    if let Some(format) = &input.format {
        facts.push(format.clone());
    }
    if let Some(default) = &input.default {
        facts.push(format!("default {default}"));
    }
    if !input.choices.is_empty() {
        facts.push(format!("one of {}", input.choices.join("|")));
    }
    if let Some(placeholder) = &input.placeholder {
        facts.push(format!("e.g. {placeholder}"));
    }
    let mut line = format!("{} ({})", input.name, facts.join(", "));
    if let Some(description) = &input.description {
        let _ = write!(line, ": {description}");
    }
    line
}

fn option_text(index: usize, option: &LaunchOption, out: &mut String) {
    let what = option.package.as_deref().unwrap_or("");
    let _ = writeln!(
        out,
        "\n[{index}] {}{}{} ({})",
        option.kind,
        if what.is_empty() { "" } else { " " },
        what,
        option.transport
    );
    if let Some(command) = &option.command {
        let words: Vec<String> = command.iter().map(|t| shell_word(t)).collect();
        let _ = writeln!(out, "    command: {}", words.join(" "));
    }
    if !option.env.is_empty() {
        let _ = writeln!(out, "    env: {}", option.env.join(" "));
    }
    if let Some(url) = &option.url {
        let _ = writeln!(out, "    url: {url}");
    }
    for header in &option.headers {
        let _ = writeln!(out, "    header: {header}");
    }
    if let Some(note) = &option.note {
        let _ = writeln!(out, "    note: {note}");
    }
    if option.inputs.is_empty() {
        let _ = writeln!(out, "    inputs: none");
    } else {
        let _ = writeln!(out, "    inputs:");
        for input in &option.inputs {
            let _ = writeln!(out, "      {}", input_line(input));
        }
    }
}

/// The text of `show`.
fn details_text(details: &ServerDetails) -> String {
    let mut out = String::new();
    let _ = write!(out, "{}", details.name);
    if let Some(version) = &details.version {
        let _ = write!(out, " {version}");
    }
    let _ = writeln!(out, ", from {}", registry_title(&details.registry));
    match &details.title {
        Some(title) => {
            let _ = writeln!(out, "{title}: {}", details.description);
        }
        None => {
            let _ = writeln!(out, "{}", details.description);
        }
    }
    if details.status != "active" {
        let _ = writeln!(
            out,
            "status: {}{}",
            details.status,
            details
                .status_message
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        );
    }
    if details.versions.len() > 1 {
        let _ = writeln!(out, "versions: {}", details.versions.join(", "));
    }
    if let Some(website) = &details.website {
        let _ = writeln!(out, "website: {website}");
    }
    if let Some(repository) = &details.repository {
        let _ = writeln!(out, "repository: {repository}");
    }
    if details.options.is_empty() {
        let _ = writeln!(out, "\nno packages or remotes: nothing to launch");
    }
    for (i, option) in details.options.iter().enumerate() {
        option_text(i + 1, option, &mut out);
    }
    out
}

/// `tether show`.
pub async fn show(args: &ShowArgs) -> anyhow::Result<u8> {
    let registries = registries(args.refresh, &args.registries)?;
    let details = registries
        .show(&args.name, args.version.as_deref(), args.source.as_deref())
        .await?;
    if args.json {
        print(&format!("{}\n", serde_json::to_string_pretty(&details)?));
        return Ok(exit::OK);
    }
    if let Freshness::Offline { age_secs, reason } = &details.freshness {
        eprintln!(
            "note: {} could not answer ({reason}); showing its cached answer from {}",
            registry_title(&details.registry),
            ago(*age_secs)
        );
    }
    print(&details_text(&details));
    Ok(exit::OK)
}
