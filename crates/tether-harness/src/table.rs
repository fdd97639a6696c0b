//! The descriptor table: one row per harness or export format, in the order help text lists
//! them. Everything tether knows about a harness except its file layout (the format modules,
//! `json_formats.rs` and `codex.rs`) lives in its row: its name on the command line, the
//! program names that identify it, how it reads secrets, and how `tether run` hands it the
//! servers.

use tether_env::EnvVars;

use crate::Format;

/// One harness or export format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Harness {
    /// The format this row describes (its index in [`HARNESSES`] is the variant's).
    pub format: Format,
    /// The name on the command line (`--format NAME`, `--harness NAME`).
    pub name: &'static str,
    /// What the user knows it as ("Claude Code"), for help text and messages.
    pub title: &'static str,
    /// How the config file is written.
    pub syntax: Syntax,
    /// The config file's name: what tether writes in the run directory or private home for
    /// `tether run`, and the usual name for an exported file.
    pub config_file: &'static str,
    /// The top-level key that holds the servers (`mcpServers`, `mcp_servers`, `mcp`, `servers`).
    pub servers_key: &'static str,
    /// How a value is read from the harness's environment instead of being written inline.
    pub references: References,
    /// What the harness rewrites in the values of a config file it reads (its own variable
    /// syntax), and whether a literal can be escaped: what `tether export` with real values
    /// must escape, or refuse to write.
    pub expansion: Expansion,
    /// How `tether run -- CMD` hands the servers over; `None` for export-only formats
    /// (editors, tether's own JSON).
    pub run: Option<Run>,
    /// Where the harness keeps its own MCP config files, the user's first: what `--mcp NAME:`
    /// reads (never writes). Empty for tether's own format.
    pub own_configs: &'static [ConfigPlace],
    /// Whether the format has VS Code's `inputs` prompts: `tether export` keeps a user config's
    /// `${input:ID}` references as references and writes an `inputs` entry for each (the editor
    /// asks for the values), instead of reading the values itself.
    pub input_prompts: bool,
}

/// A place a harness keeps an MCP config file of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigPlace {
    /// A path under the home directory.
    Home(&'static str),
    /// A path under the current directory (a project's file).
    Project(&'static str),
    /// A file under the home directory that keeps servers per project: the object at
    /// `projects_key` → the current directory's absolute path → the row's `servers_key`
    /// (Claude Code's local scope in `~/.claude.json`).
    HomePerProject {
        /// The file under the home directory.
        path: &'static str,
        /// The key of the per-project objects.
        projects_key: &'static str,
    },
    /// `path` under the directory the variable `env` names, else under `$HOME/default`.
    EnvDir {
        /// The variable naming the directory.
        env: &'static str,
        /// The directory under `$HOME` when the variable is unset.
        default: &'static str,
        /// The file under that directory.
        path: &'static str,
    },
}

/// One of a harness's own config files, placed for a home and current directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnConfig {
    /// The file.
    pub path: std::path::PathBuf,
    /// For a file that keeps servers per project: the key of the per-project objects (the
    /// servers are at `[key][current directory][servers_key]`); `None` for a whole file.
    pub per_project: Option<&'static str>,
    /// Whether the file is the project's own (in the current directory: a cloned repository
    /// wrote it), not the user's.
    pub in_project: bool,
}

impl Harness {
    /// The harness's own config files for this home, current directory and environment,
    /// without repeats, the user's first. Builds paths only: whether they exist is the
    /// caller's question.
    pub fn own_config_paths(
        &self,
        home: &std::path::Path,
        cwd: &std::path::Path,
        env: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Vec<OwnConfig> {
        let mut configs: Vec<OwnConfig> = Vec::new();
        for place in self.own_configs {
            let per_project = match *place {
                ConfigPlace::HomePerProject { projects_key, .. } => Some(projects_key),
                _ => None,
            };
            let path = match *place {
                ConfigPlace::Home(path) | ConfigPlace::HomePerProject { path, .. } => {
                    home.join(path)
                }
                ConfigPlace::Project(path) => cwd.join(path),
                ConfigPlace::EnvDir {
                    env: var,
                    default,
                    path,
                } => env(var)
                    .filter(|dir| !dir.is_empty())
                    .map_or_else(|| home.join(default), std::path::PathBuf::from)
                    .join(path),
            };
            let in_project = matches!(*place, ConfigPlace::Project(_));
            let config = OwnConfig {
                path,
                per_project,
                in_project,
            };
            if !configs.contains(&config) {
                configs.push(config);
            }
        }
        configs
    }
}

/// The syntax of a config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// JSON.
    Json,
    /// TOML.
    Toml,
}

/// How a harness reads a value from its environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum References {
    /// `${NAME}` in any string of the file (Claude Code, Gemini CLI; also used for the
    /// export-only JSON formats).
    Dollar,
    /// `{env:NAME}` pasted as text into the JSON before it is parsed (opencode): the variable
    /// holds the JSON-escaped value.
    OpencodeEnv,
    /// By name only: `env_vars` (a stdio server's variable forwarded under its own name) and
    /// `env_http_headers` (header → variable) (Codex). Any other field is written inline.
    CodexEnvNames,
}

/// What a harness rewrites in the string values of a config file it reads. A value holding
/// such text arrives changed (`${HOME}` becomes the harness's home), so `tether export` writes a
/// sensitive value that holds it escaped, where the format has an escape, or refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expansion {
    /// Nothing: values are read as written (Codex's `config.toml`).
    Nothing,
    /// `${NAME}` and `${NAME:-default}`, NAME an identifier, in command, args, env, url and
    /// headers (Claude Code); no escape.
    DollarBrace,
    /// `$NAME` (NAME a run of letters, digits, `_`) and `${…}` in every string of the settings
    /// (Gemini CLI); no escape.
    Dollar,
    /// `${…}` variables (`${env:NAME}`, `${input:ID}`, `${workspaceFolder}`, `${userHome}`: VS
    /// Code and Cursor); no escape.
    EditorVariables,
    /// `{env:NAME}` and `{file:PATH}` pasted into the file's text before it is parsed
    /// (opencode): escaped by writing that `{` as the JSON escape `\u007b`, which the
    /// substitution does not see and the parser turns back into `{`.
    OpencodeText,
}

impl Expansion {
    /// Whether the harness would rewrite something in `text`.
    pub fn expands(self, text: &str) -> bool {
        match self {
            Expansion::Nothing => false,
            Expansion::DollarBrace => text.match_indices("${").any(|(at, _)| {
                let rest = &text[at + 2..];
                let name_len = rest
                    .char_indices()
                    .find(|&(i, c)| {
                        !(c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
                    })
                    .map_or(rest.len(), |(i, _)| i);
                let after = &rest[name_len..];
                name_len > 0
                    && (after.starts_with('}')
                        || after.strip_prefix(":-").is_some_and(|d| d.contains('}')))
            }),
            Expansion::Dollar => text.match_indices('$').any(|(at, _)| {
                let rest = &text[at + 1..];
                match rest.chars().next() {
                    Some(c) if c == '_' || c.is_ascii_alphanumeric() => true,
                    Some('{') => rest[1..].find('}').is_some_and(|end| end > 0),
                    _ => false,
                }
            }),
            Expansion::EditorVariables => text
                .match_indices("${")
                .any(|(at, _)| text[at + 2..].find('}').is_some_and(|end| end > 0)),
            Expansion::OpencodeText => text.contains("{env:") || text.contains("{file:"),
        }
    }

    /// The syntax the harness expands, for messages.
    pub fn syntax(self) -> &'static str {
        match self {
            Expansion::Nothing => "nothing",
            Expansion::DollarBrace => "${VAR} and ${VAR:-default}",
            Expansion::Dollar => "$VAR and ${VAR}",
            Expansion::EditorVariables => "${…} variables",
            Expansion::OpencodeText => "{env:…} and {file:…}",
        }
    }

    /// Whether the format can write a value holding such text so that it is read back as
    /// written (see [`Expansion::escape_text`]).
    pub fn has_escape(self) -> bool {
        matches!(self, Expansion::OpencodeText)
    }

    /// `text`, a whole config file as written, with every expandable piece escaped so that the
    /// harness reads it literally; `text` unchanged for a format without an escape. Valid for
    /// a file tether wrote with no reference of its own in it.
    pub fn escape_text(self, text: &str) -> String {
        match self {
            // In JSON text tether serialised, `{env:` and `{file:` occur only inside strings,
            // where `\u007b` is read as `{`.
            Expansion::OpencodeText => text
                .replace("{env:", "\\u007benv:")
                .replace("{file:", "\\u007bfile:"),
            Expansion::Nothing
            | Expansion::DollarBrace
            | Expansion::Dollar
            | Expansion::EditorVariables => text.to_owned(),
        }
    }
}

/// How `tether run` hands a harness its servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Program file names that identify the harness in `tether run -- PROGRAM …`.
    pub programs: &'static [&'static str],
    /// Where the config goes.
    pub delivery: Delivery,
    /// How the harness is asked to use only tether's servers (`--strict-mcp`).
    pub strict: Strict,
    /// A variable naming a cache directory the harness logs expanded secrets into: tether
    /// points it into the run directory and gives the stdio servers the user's own value back.
    pub private_cache_env: Option<&'static str>,
    /// The harness's subcommands that read only its own config files and ignore the servers
    /// handed over (`claude mcp list` does not read `--mcp-config`): when the user's command
    /// starts with one, `tether run` says so on stderr (and still runs it).
    pub config_only_subcommands: &'static [&'static str],
    /// How the harness gates MCP servers on trusting the working folder, if it does: `tether
    /// run` refuses a folder the harness would give no servers in.
    pub folder_trust: Option<FolderTrust>,
    /// Whether `tether run` hands this harness the gateway unless `--no-gateway`: where that is
    /// strictly better than handing it the servers (Gemini CLI expands `$VAR` and `${VAR}` in
    /// the values it is given, so a secret holding `$HOME` arrives changed, and hides variables
    /// named like credentials from its servers; through the gateway it is given no value).
    pub gateway_by_default: bool,
    /// Whether the harness lists a server's tools again when told
    /// `notifications/tools/list_changed`, as read in its own code (Claude Code, Gemini CLI and
    /// opencode refresh their tool list on it; Codex only behind its `mcp_tool_list_changed`
    /// feature; Copilot CLI's bundle is compressed, so it is taken to list once). For one that
    /// does not, `tether run --gateway` holds its first `tools/list` until the servers joined
    /// or a grace passed (`--first-list-grace`), so it never starts with a silently partial
    /// toolset.
    pub relists_tools: bool,
}

/// How a harness gates MCP servers on trusting the working folder: Gemini CLI disables every
/// MCP server, the handed-over ones too, in a folder it does not trust, and trusting a folder
/// also turns on that folder's own settings, hooks and servers. So tether never trusts a folder
/// on the user's behalf: it reads the harness's own answer ([`FolderTrust::verdict`]) and
/// refuses a run that would have no servers, naming the step to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FolderTrust {
    /// The variable that trusts (`true`) or distrusts (`false`) the working folder for a run.
    pub trust_env: &'static str,
    /// The variable that, `true`, trusts no folder.
    pub restricted_env: &'static str,
    /// The variable naming the trust rules file.
    pub rules_env: &'static str,
    /// The rules file's name in the harness's own config directory (`~/.gemini`): an object
    /// of path → `TRUST_FOLDER`, `TRUST_PARENT` (the path's parent) or `DO_NOT_TRUST`; the
    /// longest path that holds the folder decides.
    pub rules_file: &'static str,
    /// The variable naming the system settings file.
    pub system_settings_env: &'static str,
    /// The system settings file when that variable is unset.
    pub system_settings: &'static str,
    /// The setting that turns the check off (`false`), in the system settings, else the
    /// user's (`security.folderTrust.enabled`, default on).
    pub enabled_setting: &'static [&'static str],
}

/// The harness's answer for a folder, as [`FolderTrust::verdict`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustVerdict {
    /// Trusted (by a rule, the variable, or the check being off).
    Trusted,
    /// Not trusted: why, for the user (`no rule in trustedFolders.json trusts it`).
    NotTrusted(String),
}

/// What [`FolderTrust::verdict`] reads, gathered by the caller.
pub struct TrustInputs<'a> {
    /// The environment.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// The settings files that exist, parsed, highest precedence first (system, user).
    pub settings: &'a [serde_json::Value],
    /// The rules file, parsed (`None`: there is none).
    pub rules: Option<&'a serde_json::Value>,
    /// The folder, its symbolic links resolved.
    pub folder: &'a std::path::Path,
    /// A path with its symbolic links resolved (the path itself if it cannot be).
    pub real_path: &'a dyn Fn(&std::path::Path) -> std::path::PathBuf,
}

impl FolderTrust {
    /// Whether the harness trusts the folder, read as it reads it: the variables first, then
    /// the setting, then the longest matching rule; no rule is not trusted.
    pub fn verdict(&self, inputs: &TrustInputs<'_>) -> TrustVerdict {
        let env = |name: &str| (inputs.env)(name);
        if env(self.restricted_env).as_deref() == Some("true") {
            return TrustVerdict::NotTrusted(format!("{}=true", self.restricted_env));
        }
        match env(self.trust_env).as_deref() {
            Some("false") => return TrustVerdict::NotTrusted(format!("{}=false", self.trust_env)),
            Some("true") => return TrustVerdict::Trusted,
            _ => {}
        }
        let enabled = inputs.settings.iter().find_map(|settings| {
            self.enabled_setting
                .iter()
                .try_fold(settings, |at, key| at.get(key))
                .and_then(serde_json::Value::as_bool)
        });
        if enabled == Some(false) {
            return TrustVerdict::Trusted;
        }
        let mut best: Option<(usize, &str)> = None;
        let rules = inputs.rules.and_then(serde_json::Value::as_object);
        for (path, level) in rules.into_iter().flatten() {
            let Some(level) = level.as_str() else {
                continue;
            };
            let rule = std::path::Path::new(path);
            let effective = match level {
                "TRUST_PARENT" => rule.parent().unwrap_or(rule),
                _ => rule,
            };
            if inputs.folder.starts_with((inputs.real_path)(effective))
                && best.is_none_or(|(len, _)| path.len() > len)
            {
                best = Some((path.len(), level));
            }
        }
        match best {
            Some((_, "TRUST_FOLDER" | "TRUST_PARENT")) => TrustVerdict::Trusted,
            Some((_, "DO_NOT_TRUST")) => {
                TrustVerdict::NotTrusted(format!("{} marks it DO_NOT_TRUST", self.rules_file))
            }
            _ => TrustVerdict::NotTrusted(format!("no rule in {} trusts it", self.rules_file)),
        }
    }
}

/// Where the config goes for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// A file in the run directory named by a flag, passed as one argument `FLAG=FILE` before
    /// the user's arguments: a flag taking several values cannot swallow them.
    FileFlag {
        /// The flag.
        flag: &'static str,
    },
    /// A private home directory in the run directory, named by `env`. The user's own home
    /// (`$env`, else `$HOME/default_home`) has its entries linked in, except the config file,
    /// which becomes the user's own with tether's servers in place of theirs.
    PrivateHome {
        /// The variable naming the home.
        env: &'static str,
        /// The home's path under `$HOME` when `env` is unset.
        default_home: &'static str,
        /// The directory inside the home that holds the config file (`""`: the home itself).
        config_dir: &'static str,
    },
    /// The whole config text in a variable: no file at all.
    InlineEnv {
        /// The variable.
        env: &'static str,
    },
}

/// How a harness is asked to use only tether's servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strict {
    /// It cannot be asked (or needs no asking: a private home holds only tether's servers).
    Unavailable,
    /// A flag on its own.
    Flag(&'static str),
    /// The names of the servers to allow: `FLAG=NAME` once per server, and the same list
    /// at `setting` in the private home's config (the harness's subcommands take no such
    /// flag, and a subcommand such as `gemini mcp list` reads the setting).
    AllowedNames {
        /// The flag.
        flag: &'static str,
        /// The path of the list in the config file (`["mcp", "allowed"]`).
        setting: &'static [&'static str],
        /// The harness's subcommands: when the user's command starts with one, only the
        /// setting is used.
        subcommands: &'static [&'static str],
    },
}

/// Every harness and export format, one row each, in [`Format`]'s order.
pub const HARNESSES: &[Harness] = &[
    Harness {
        format: Format::Json,
        name: "json",
        title: "tether's portable JSON",
        syntax: Syntax::Json,
        config_file: "mcp.json",
        servers_key: "mcpServers",
        references: References::Dollar,
        // Not modelled yet: tether itself expands `${VAR}`, `$VAR`, `{env:VAR}` and
        // `{{NAME}}` in a file it reads back, so such a real value changes on the way back too.
        expansion: Expansion::Nothing,
        run: None,
        own_configs: &[],
        input_prompts: false,
    },
    Harness {
        format: Format::Claude,
        name: "claude",
        title: "Claude Code",
        syntax: Syntax::Json,
        config_file: "mcp.json",
        servers_key: "mcpServers",
        references: References::Dollar,
        expansion: Expansion::DollarBrace,
        run: Some(Run {
            programs: &["claude"],
            delivery: Delivery::FileFlag {
                flag: "--mcp-config",
            },
            strict: Strict::Flag("--strict-mcp-config"),
            private_cache_env: Some(EnvVars::XDG_CACHE_HOME),
            config_only_subcommands: &["mcp"],
            folder_trust: None,
            gateway_by_default: false,
            relists_tools: true,
        }),
        own_configs: &[
            ConfigPlace::Home(".claude.json"),
            ConfigPlace::Project(".mcp.json"),
            ConfigPlace::HomePerProject {
                path: ".claude.json",
                projects_key: "projects",
            },
        ],
        input_prompts: false,
    },
    Harness {
        format: Format::Codex,
        name: "codex",
        title: "Codex CLI",
        syntax: Syntax::Toml,
        config_file: "config.toml",
        servers_key: "mcp_servers",
        references: References::CodexEnvNames,
        expansion: Expansion::Nothing,
        run: Some(Run {
            programs: &["codex"],
            delivery: Delivery::PrivateHome {
                env: EnvVars::CODEX_HOME,
                default_home: ".codex",
                config_dir: "",
            },
            strict: Strict::Unavailable,
            private_cache_env: None,
            config_only_subcommands: &[],
            folder_trust: None,
            gateway_by_default: false,
            relists_tools: false,
        }),
        own_configs: &[ConfigPlace::EnvDir {
            env: EnvVars::CODEX_HOME,
            default: ".codex",
            path: "config.toml",
        }],
        input_prompts: false,
    },
    Harness {
        format: Format::Gemini,
        name: "gemini",
        title: "Gemini CLI",
        syntax: Syntax::Json,
        config_file: "settings.json",
        servers_key: "mcpServers",
        references: References::Dollar,
        expansion: Expansion::Dollar,
        run: Some(Run {
            programs: &["gemini"],
            delivery: Delivery::PrivateHome {
                env: EnvVars::GEMINI_CLI_HOME,
                default_home: "",
                config_dir: ".gemini",
            },
            strict: Strict::AllowedNames {
                flag: "--allowed-mcp-server-names",
                setting: &["mcp", "allowed"],
                subcommands: &[
                    "mcp",
                    "extensions",
                    "extension",
                    "skills",
                    "skill",
                    "hooks",
                    "hook",
                    "gemma",
                ],
            },
            private_cache_env: None,
            config_only_subcommands: &[],
            folder_trust: Some(FolderTrust {
                trust_env: EnvVars::GEMINI_CLI_TRUST_WORKSPACE,
                restricted_env: EnvVars::GEMINI_RESTRICTED_MODE,
                rules_env: EnvVars::GEMINI_CLI_TRUSTED_FOLDERS_PATH,
                rules_file: "trustedFolders.json",
                system_settings_env: EnvVars::GEMINI_CLI_SYSTEM_SETTINGS_PATH,
                system_settings: "/etc/gemini-cli/settings.json",
                enabled_setting: &["security", "folderTrust", "enabled"],
            }),
            gateway_by_default: true,
            relists_tools: true,
        }),
        own_configs: &[
            ConfigPlace::EnvDir {
                env: EnvVars::GEMINI_CLI_HOME,
                default: "",
                path: ".gemini/settings.json",
            },
            ConfigPlace::Project(".gemini/settings.json"),
        ],
        input_prompts: false,
    },
    Harness {
        format: Format::Opencode,
        name: "opencode",
        title: "opencode",
        syntax: Syntax::Json,
        config_file: "opencode.json",
        servers_key: "mcp",
        references: References::OpencodeEnv,
        expansion: Expansion::OpencodeText,
        run: Some(Run {
            programs: &["opencode"],
            delivery: Delivery::InlineEnv {
                env: EnvVars::OPENCODE_CONFIG_CONTENT,
            },
            strict: Strict::Unavailable,
            private_cache_env: None,
            config_only_subcommands: &[],
            folder_trust: None,
            gateway_by_default: false,
            relists_tools: true,
        }),
        own_configs: &[
            ConfigPlace::Home(".config/opencode/opencode.json"),
            ConfigPlace::Project("opencode.json"),
        ],
        input_prompts: false,
    },
    Harness {
        format: Format::Vscode,
        name: "vscode",
        title: "VS Code",
        syntax: Syntax::Json,
        config_file: ".vscode/mcp.json",
        servers_key: "servers",
        references: References::Dollar,
        expansion: Expansion::EditorVariables,
        run: None,
        own_configs: &[
            ConfigPlace::Home(".config/Code/User/mcp.json"),
            ConfigPlace::Project(".vscode/mcp.json"),
        ],
        input_prompts: true,
    },
    Harness {
        format: Format::Cursor,
        name: "cursor",
        title: "Cursor",
        syntax: Syntax::Json,
        config_file: ".cursor/mcp.json",
        servers_key: "mcpServers",
        references: References::Dollar,
        expansion: Expansion::EditorVariables,
        run: None,
        own_configs: &[
            ConfigPlace::Home(".cursor/mcp.json"),
            ConfigPlace::Project(".cursor/mcp.json"),
        ],
        input_prompts: false,
    },
    Harness {
        format: Format::Copilot,
        name: "copilot",
        title: "GitHub Copilot CLI",
        syntax: Syntax::Json,
        config_file: "mcp-config.json",
        servers_key: "mcpServers",
        references: References::Dollar,
        // Measured with 1.0.102: `$VAR`, `${VAR}` and `${VAR:-default}` in command, args, env
        // and headers are expanded; `${env:VAR}` is not.
        expansion: Expansion::Dollar,
        run: Some(Run {
            programs: &["copilot"],
            // A private `COPILOT_HOME`: `copilot mcp list` reads the home's `mcp-config.json`
            // and not `--additional-mcp-config`, and the user's own servers stay out.
            delivery: Delivery::PrivateHome {
                env: EnvVars::COPILOT_HOME,
                default_home: ".copilot",
                config_dir: "",
            },
            // `--disable-builtin-mcps` turns off the GitHub servers Copilot adds itself; a
            // trusted workspace's `.mcp.json` still loads (Copilot has no flag against it).
            strict: Strict::Flag("--disable-builtin-mcps"),
            private_cache_env: None,
            config_only_subcommands: &[],
            folder_trust: None,
            gateway_by_default: false,
            relists_tools: false,
        }),
        own_configs: &[ConfigPlace::EnvDir {
            env: EnvVars::COPILOT_HOME,
            default: ".copilot",
            path: "mcp-config.json",
        }],
        input_prompts: false,
    },
    Harness {
        own_configs: &[ConfigPlace::Home(
            ".config/Claude/claude_desktop_config.json",
        )],
        ..export_only(
            Format::ClaudeDesktop,
            ("claude-desktop", "Claude Desktop"),
            ("claude_desktop_config.json", "mcpServers"),
            Expansion::Nothing,
        )
    },
    // `${env:VAR}` and `${file:PATH}` in command, args, env, serverUrl and headers.
    export_only(
        Format::Windsurf,
        ("windsurf", "Windsurf"),
        ("mcp_config.json", "mcpServers"),
        Expansion::EditorVariables,
    ),
    export_only(
        Format::Zed,
        ("zed", "Zed"),
        ("settings.json", "context_servers"),
        Expansion::Nothing,
    ),
    // Written as JSON, which is YAML too (a flow mapping): Goose's `config.yaml` reads it.
    export_only(
        Format::Goose,
        ("goose", "Goose"),
        ("config.yaml", "extensions"),
        Expansion::Nothing,
    ),
    export_only(
        Format::Antigravity,
        ("antigravity", "Antigravity"),
        ("mcp_config.json", "mcpServers"),
        Expansion::Nothing,
    ),
];

/// A row for an export-only JSON format (`run: None`) with `${NAME}` references and no config
/// files of its own: `(name, title)`, `(config_file, servers_key)`.
const fn export_only(
    format: Format,
    (name, title): (&'static str, &'static str),
    (config_file, servers_key): (&'static str, &'static str),
    expansion: Expansion,
) -> Harness {
    Harness {
        format,
        name,
        title,
        syntax: Syntax::Json,
        config_file,
        servers_key,
        references: References::Dollar,
        expansion,
        run: None,
        own_configs: &[],
        input_prompts: false,
    }
}

// The table is indexed by `Format as usize`: checked when the crate compiles, so the lookup in
// `Format::harness` cannot miss.
const _: () = {
    let mut i = 0;
    while i < HARNESSES.len() {
        assert!(
            HARNESSES[i].format as usize == i,
            "HARNESSES is out of Format's order"
        );
        i += 1;
    }
    assert!(
        HARNESSES.len() == Format::COUNT,
        "a Format has no row in HARNESSES"
    );
};

/// The harness a program is, from its file name (`/usr/local/bin/claude` → Claude Code);
/// `None` when no row claims it.
pub fn detect(program: &str) -> Option<&'static Harness> {
    let name = std::path::Path::new(program).file_name()?.to_str()?;
    HARNESSES
        .iter()
        .find(|h| h.run.is_some_and(|run| run.programs.contains(&name)))
}
