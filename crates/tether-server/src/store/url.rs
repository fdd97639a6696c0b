//! `--database-url`: which backend, where. A PostgreSQL URL may hold a password, so this type
//! never shows one: `Display` and `Debug` print `postgres://USER@HOST:PORT/DB`.

use std::path::{Path, PathBuf};

use tokio_postgres::config::{Host, SslMode};

use crate::error::StoreError;

/// A parsed database URL.
#[derive(Clone)]
pub enum DatabaseUrl {
    /// `sqlite://DIR`: the SQLite store in a data directory.
    Sqlite {
        /// The data directory.
        dir: PathBuf,
    },
    /// `postgres://…` or `postgresql://…`.
    Postgres {
        /// The connection settings (with the password, if any).
        config: Box<tokio_postgres::Config>,
    },
}

impl DatabaseUrl {
    /// The SQLite store in `dir`.
    pub fn sqlite(dir: &Path) -> Self {
        DatabaseUrl::Sqlite {
            dir: dir.to_owned(),
        }
    }

    /// Parses `sqlite://DIR`, `postgres://…` or `postgresql://…`. `sslmode=require` asks for
    /// TLS with the database's certificate verified (`disable` and `prefer`, the default, use
    /// none). The error never quotes the URL.
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        let invalid = |reason: &str| StoreError::InvalidUrl {
            reason: reason.to_owned(),
        };
        if let Some(dir) = text.strip_prefix("sqlite://") {
            if dir.is_empty() {
                return Err(invalid(
                    "sqlite:// needs a directory: sqlite:///var/lib/tether-server",
                ));
            }
            return Ok(Self::sqlite(Path::new(dir)));
        }
        if !(text.starts_with("postgres://") || text.starts_with("postgresql://")) {
            return Err(invalid(
                "it must start with sqlite://, postgres:// or postgresql://",
            ));
        }
        let config: tokio_postgres::Config = text.parse().map_err(|_| {
            invalid("it is not a valid PostgreSQL URL (postgres://USER@HOST:PORT/DATABASE)")
        })?;
        if !matches!(
            config.get_ssl_mode(),
            SslMode::Disable | SslMode::Prefer | SslMode::Require
        ) {
            return Err(invalid(
                "sslmode must be disable, prefer (no TLS) or require (TLS, certificate verified)",
            ));
        }
        Ok(DatabaseUrl::Postgres {
            config: Box::new(config),
        })
    }

    /// Whether the URL carries a password (refused on the command line).
    pub fn has_password(&self) -> bool {
        match self {
            DatabaseUrl::Sqlite { .. } => false,
            DatabaseUrl::Postgres { config } => config.get_password().is_some(),
        }
    }
}

impl std::fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatabaseUrl::Sqlite { dir } => write!(f, "sqlite://{}", dir.display()),
            DatabaseUrl::Postgres { config } => {
                f.write_str("postgres://")?;
                if let Some(user) = config.get_user() {
                    write!(f, "{user}@")?;
                }
                let ports = config.get_ports();
                for (index, host) in config.get_hosts().iter().enumerate() {
                    if index > 0 {
                        f.write_str(",")?;
                    }
                    match host {
                        Host::Tcp(name) => f.write_str(name)?,
                        Host::Unix(path) => write!(f, "[{}]", path.display())?,
                    }
                    if let Some(port) = ports.get(index).or_else(|| ports.first()) {
                        write!(f, ":{port}")?;
                    }
                }
                write!(f, "/{}", config.get_dbname().unwrap_or(""))
            }
        }
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_password() {
        let url =
            DatabaseUrl::parse("postgres://tether:p%40ss%20$HOME@db.internal:5433/tether").unwrap();
        assert!(url.has_password());
        assert_eq!(url.to_string(), "postgres://tether@db.internal:5433/tether");
        assert!(!format!("{url:?}").contains("ss"));
        let socket = DatabaseUrl::parse("postgresql://postgres@/db?host=/run/pg").unwrap();
        assert!(!socket.has_password());
        assert_eq!(socket.to_string(), "postgres://postgres@[/run/pg]/db");
        assert!(DatabaseUrl::parse("postgres://u@h/db?sslmode=require").is_ok());
        let sqlite = DatabaseUrl::parse("sqlite:///var/lib/t").unwrap();
        assert_eq!(sqlite.to_string(), "sqlite:///var/lib/t");
    }

    #[test]
    fn bad_urls_are_refused_without_being_quoted() {
        for bad in [
            "mysql://u:hunter2@h/db",
            "sqlite://",
            "postgres://u:hunter2@h/db?sslmode=allow-me",
            "postgres://u:hunter2@h/db?nonsense=1",
        ] {
            let error = DatabaseUrl::parse(bad).unwrap_err().to_string();
            assert!(!error.contains("hunter2"), "{error}");
        }
    }
}
