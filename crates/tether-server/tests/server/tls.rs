//! TLS to PostgreSQL (`sslmode=require`): the database's certificate is verified against the
//! system's authorities and `TETHER_SERVER_DATABASE_CA`. The cluster listens on 127.0.0.1 with
//! TLS only (its `pg_hba.conf` refuses TCP without it), its certificate signed by a CA of its
//! own: trusted through the variable, the admin CLI works; not trusted, it fails naming the
//! certificate; without `sslmode=require` the server refuses the plain connection.

use crate::support::{postgres_installed, run};

#[tokio::test]
async fn sslmode_require_verifies_the_database_certificate() {
    if !postgres_installed() {
        return;
    }
    let (cluster, port, ca) = crate::pg::PgCluster::start_tls();
    cluster.database("tls");
    let ca = ca.to_string_lossy().into_owned();
    let url = format!("postgres://postgres@127.0.0.1:{port}/tls?sslmode=require");
    let url_arg = url.as_str();

    let trusted = run(
        &["admin", "--database-url", url_arg, "api-key", "create"],
        &[("TETHER_SERVER_DATABASE_CA", ca.as_str())],
        "",
    )
    .await;
    assert!(
        trusted.status.success(),
        "with the CA trusted: {}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    let listed = run(
        &["admin", "--database-url", url_arg, "api-key", "list"],
        &[("TETHER_SERVER_DATABASE_CA", ca.as_str())],
        "",
    )
    .await;
    assert!(listed.status.success());
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).lines().count(),
        2,
        "a header and the key created over TLS: {}",
        String::from_utf8_lossy(&listed.stdout)
    );

    // The cluster's CA is not among the system's: the certificate is refused.
    let untrusted = run(&["admin", "--database-url", url_arg, "list"], &[], "").await;
    assert_eq!(untrusted.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");

    // Without sslmode=require tether-server speaks plain TCP, which this server refuses.
    let plain = format!("postgres://postgres@127.0.0.1:{port}/tls");
    let refused = run(&["admin", "--database-url", &plain, "list"], &[], "").await;
    assert_eq!(
        refused.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
