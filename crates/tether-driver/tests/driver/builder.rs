//! The session builder: every `--mcp` form read once, the store opened only when a spec needs
//! it (and once), missing inputs asked of the host, tokens applied by it.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::BoxFuture;
use pretty_assertions::assert_eq;
use tether_config::{EmptyEnv, InputPrompt, Origin, SecretValue, Secrets, parse_config};
use tether_driver::{DriverError, McpSpec, Session, SessionBuilder, SpecError, SpecHost};
use tether_store::{Store, StoreError};

#[derive(Debug)]
enum Failed {
    Driver(#[allow(dead_code, reason = "read through Debug")] DriverError),
    Store(#[allow(dead_code, reason = "read through Debug")] StoreError),
    Spec(SpecError),
}

impl From<DriverError> for Failed {
    fn from(error: DriverError) -> Self {
        Failed::Driver(error)
    }
}

impl From<StoreError> for Failed {
    fn from(error: StoreError) -> Self {
        Failed::Store(error)
    }
}

/// A host over a store in `dir` that answers the inputs in `answers` and counts what it is
/// asked for.
struct TestHost {
    dir: PathBuf,
    answers: Vec<(&'static str, &'static str)>,
    asked: Mutex<Vec<String>>,
    stores_opened: AtomicUsize,
    managed_asked: AtomicUsize,
    tokens_applied: AtomicUsize,
}

impl TestHost {
    fn new(dir: &std::path::Path) -> Self {
        Self {
            dir: dir.to_owned(),
            answers: Vec::new(),
            asked: Mutex::new(Vec::new()),
            stores_opened: AtomicUsize::new(0),
            managed_asked: AtomicUsize::new(0),
            tokens_applied: AtomicUsize::new(0),
        }
    }
}

impl SpecHost for TestHost {
    type Error = Failed;

    fn refuse(&self, error: SpecError) -> Failed {
        Failed::Spec(error)
    }

    fn store_exists(&self) -> Result<bool, Failed> {
        Ok(self.dir.join(tether_store::DATABASE_FILE).is_file())
    }

    fn open_store(&self) -> Result<Store, Failed> {
        self.stores_opened.fetch_add(1, Ordering::SeqCst);
        Ok(Store::open(&self.dir)?)
    }

    fn managed_client(
        &self,
    ) -> Result<Option<std::sync::Arc<dyn tether_graphql::ManagedMcpClient>>, Failed> {
        self.managed_asked.fetch_add(1, Ordering::SeqCst);
        Ok(None)
    }

    fn ask_input(&self, input: &InputPrompt) -> Result<Option<SecretValue>, Failed> {
        self.asked.lock().expect("the list").push(input.id.clone());
        Ok(self
            .answers
            .iter()
            .find(|(id, _)| *id == input.id)
            .map(|(_, value)| SecretValue::from(*value)))
    }

    fn step(&self, _step: &str) {}

    fn apply_tokens(&self, session: Session) -> BoxFuture<'_, Session> {
        self.tokens_applied.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { session })
    }
}

fn values(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| (*v).to_owned()).collect()
}

const INPUTS: &str = r#"{"inputs": [{"id": "a", "description": "Token A", "password": true}, {"id": "b"}, {"id": "unused"}],
    "servers": {"s": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer ${input:a}"}, "type": "http"},
                "t": {"command": "x", "args": ["${input:b}"]}}}"#;

#[tokio::test]
async fn inline_specs_open_no_store_and_ask_for_the_inputs_they_use() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let file = dir.path().join("mcp.json");
    std::fs::write(
        &file,
        r#"{"inputs": [{"id": "a"}], "servers": {"u": {"command": "y", "env": {"K": "${input:a}"}}}}"#,
    )
    .expect("writing the spec file");
    let mut host = TestHost::new(dir.path());
    host.answers = vec![("a", "value-a")];
    let builder = SessionBuilder::read(
        &values(&[INPUTS, file.to_str().expect("a UTF-8 path")]),
        None,
        &host,
    )
    .expect("reading the specs");
    let used: Vec<String> = builder.used_inputs().into_iter().map(|i| i.id).collect();
    assert_eq!(used, ["a", "b"]);
    let first = &builder.used_inputs()[0];
    assert_eq!(first.description.as_deref(), Some("Token A"));
    assert!(first.password);

    let mut secrets: Secrets = [("b", "value-b")].into_iter().collect();
    builder
        .ask_for_inputs(&mut secrets, &host)
        .expect("asking for the inputs");
    assert_eq!(*host.asked.lock().expect("the list"), ["a"]);
    let session = builder
        .build(secrets, EmptyEnv, &host)
        .await
        .expect("building the session");
    assert_eq!(session.servers().len(), 3);
    assert_eq!(host.stores_opened.load(Ordering::SeqCst), 0);
    assert_eq!(host.managed_asked.load(Ordering::SeqCst), 0);
    assert_eq!(host.tokens_applied.load(Ordering::SeqCst), 1);
    assert!(!dir.path().join(tether_store::DATABASE_FILE).exists());
}

#[tokio::test]
async fn an_installation_name_opens_the_store_once_for_naming_and_resolving() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let uid = {
        let mut store = Store::open(dir.path()).expect("opening the local store");
        let mut parsed = parse_config(r#"{"local-srv":{"command":"srv"}}"#, Origin::User)
            .expect("parsing the test config");
        store
            .install(&parsed.servers.remove(0).into_installation())
            .expect("installing into the local store")
    };
    let host = TestHost::new(dir.path());
    let builder = SessionBuilder::read(
        &values(&["local-srv", r#"{"other":{"command":"x"}}"#]),
        None,
        &host,
    )
    .expect("reading the specs");
    assert_eq!(builder.specs()[0], McpSpec::Uuid(uid));
    let session = builder
        .resolve(Secrets::new(), EmptyEnv, &host)
        .await
        .expect("resolving");
    let names: Vec<&str> = session.servers().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["local-srv", "other"]);
    assert_eq!(host.stores_opened.load(Ordering::SeqCst), 1);
    assert_eq!(host.managed_asked.load(Ordering::SeqCst), 1);
    assert_eq!(host.tokens_applied.load(Ordering::SeqCst), 0);

    // A word no installation has: refused with the names read, for the hint.
    let Err(Failed::Spec(SpecError::NotASpec {
        index, installed, ..
    })) = SessionBuilder::read(&values(&["local-srv", "nothing-called-so"]), None, &host)
    else {
        panic!("an unknown word is no spec");
    };
    assert_eq!(index, 1);
    assert_eq!(installed, [("local-srv".to_owned(), uid)]);
}

#[test]
fn no_spec_at_all_is_refused() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let host = TestHost::new(dir.path());
    let Err(Failed::Spec(SpecError::Refused(text))) = SessionBuilder::read(&[], None, &host) else {
        panic!("no spec is refused");
    };
    assert!(text.starts_with("no MCP spec given"), "{text}");
}
