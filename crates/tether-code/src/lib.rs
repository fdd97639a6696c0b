//! Code mode's engine: an agent's script — the body of an async JavaScript function — run in
//! an embedded QuickJS (`rquickjs`) whose only way out is the tools it is handed.
//!
//! ```no_run
//! # async fn demo() {
//! use serde_json::{Value, json};
//! let names = vec!["test__add".to_owned()];
//! let limits = tether_code::Limits::default();
//! let cancel = tokio_util::sync::CancellationToken::new();
//! let outcome = tether_code::run(
//!     "const r = await tools.test__add({a: 2, b: 40}); return r;",
//!     &names,
//!     &limits,
//!     &cancel,
//!     |_name: String, _arguments: Value, _token| async move { Ok::<Value, String>(json!(42)) },
//! )
//! .await;
//! assert_eq!(outcome.answer.ok().as_deref(), Some("42"));
//! # }
//! ```
//!
//! Each run gets a thread of its own with a fresh QuickJS runtime (nothing persists between
//! runs), bounded by [`Limits`]: wall time (an interrupt handler QuickJS calls while it runs
//! code, and the wait for tool answers), memory (QuickJS's allocator limit), stack depth, tool
//! calls and log bytes. The script has the language's own objects (no `std`/`os` modules, no
//! loader, no timers) plus `tools` and `console`. A tool call is handed to the caller's
//! `call` on the caller's task, so everything a direct call gets (routing, masking, audit) is
//! the caller's to give; calls a script starts together (`Promise.all`) run together.
//! specs/code-mode/TECH.md has the design.

pub mod declare;

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use rquickjs::context::EvalOptions;
use rquickjs::promise::PromiseState;
use rquickjs::{Ctx, Exception, Function, Persistent, Promise};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The prelude run before every script (`prelude.js`).
const PRELUDE: &str = include_str!("prelude.js");
/// The name scripts' errors give for their source.
const SCRIPT: &str = "script.js";
/// What [`thrown`] says of a thrown `null`.
const NULL_THROWN: &str = "null (not an Error)";
/// The JavaScript stack a script may use (recursion ends with a "stack overflow" error).
const STACK_BYTES: usize = 1024 * 1024;
/// The engine thread's own stack: room for [`STACK_BYTES`] and QuickJS's C frames.
const THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

/// What one run may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall time, from the start of the run to its answer.
    pub time: Duration,
    /// Bytes QuickJS may allocate.
    pub memory: usize,
    /// Tool calls the script may start.
    pub calls: usize,
    /// Bytes of `console` output kept.
    pub log_bytes: usize,
}

/// `--code-timeout`'s default.
pub const DEFAULT_TIME: Duration = Duration::from_secs(30);
/// The default memory limit: 64 MiB.
pub const DEFAULT_MEMORY: usize = 64 * 1024 * 1024;
/// The default limit of tool calls per run.
pub const DEFAULT_CALLS: usize = 1_000;
/// The default `console` output kept per run: 64 KiB.
pub const DEFAULT_LOG_BYTES: usize = 64 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Self {
            time: DEFAULT_TIME,
            memory: DEFAULT_MEMORY,
            calls: DEFAULT_CALLS,
            log_bytes: DEFAULT_LOG_BYTES,
        }
    }
}

/// How a run ended.
#[derive(Debug)]
pub struct Outcome {
    /// The script's return value as text (a string as is, anything else as JSON, nothing for
    /// `undefined`), or why there is none.
    pub answer: Result<String, Failure>,
    /// What the script wrote with `console`, one line per call, cut at the log limit.
    pub log: String,
    /// Tool calls the script started.
    pub calls: usize,
}

/// Why a run has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The script threw (or its promise rejected) and did not catch it.
    Thrown {
        /// The error's name and message (`TypeError: x is not a function`).
        message: String,
        /// The script's line the error names, counted from 1.
        line: Option<u32>,
    },
    /// The run went on past its time limit.
    TimedOut(Duration),
    /// The caller gave up on the run.
    Cancelled,
    /// The script waits for a promise nothing can settle (no tool call is under way).
    NeverSettles,
    /// The script used more memory than its limit (bytes).
    OutOfMemory(usize),
    /// The engine could not run it (out of memory before the script started, no thread).
    Engine(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Thrown {
                message,
                line: Some(line),
            } => write!(f, "the script threw {message} (line {line})"),
            Self::Thrown { message, line: None } => write!(f, "the script threw {message}"),
            Self::TimedOut(limit) => write!(
                f,
                "the script ran past its time limit of {} s (--code-timeout) and was stopped",
                limit.as_secs_f64()
            ),
            Self::Cancelled => f.write_str("the run was cancelled"),
            Self::OutOfMemory(limit) => write!(
                f,
                "the script used more than its memory limit of {} MiB (--code-memory) and was stopped",
                limit / (1024 * 1024)
            ),
            Self::NeverSettles => f.write_str(
                "the script awaits a promise that nothing can settle (no tool call is under way, and there are no timers): return a value or await a tool call",
            ),
            Self::Engine(why) => write!(f, "the script could not run: {why}"),
        }
    }
}

/// A tool call the script started: its number in this run, the tool's name, its arguments.
struct Request {
    id: u32,
    name: String,
    arguments: Value,
}

/// What the engine thread waits for between its turns.
enum Wake {
    /// A tool call's answer: its value (JSON) or the error the script gets.
    Answer(u32, Result<Value, String>),
    /// The caller gave up.
    Stop,
}

/// Runs `code` (the body of an async function) with `tools` holding a function for each of
/// `names`, whose calls go to `call(name, arguments, token)`; `cancel` stops the run. A call
/// still under way when the run ends (cancelled, past a limit, or a promise the script left
/// behind) has its `token` cancelled and is given [`CALLS_DRAIN`] to end: the caller passes
/// the cancellation on.
pub async fn run<C, F>(
    code: &str,
    names: &[String],
    limits: &Limits,
    cancel: &CancellationToken,
    mut call: C,
) -> Outcome
where
    C: FnMut(String, Value, CancellationToken) -> F,
    F: Future<Output = Result<Value, String>>,
{
    let (requests, mut requested) = tokio::sync::mpsc::unbounded_channel::<Request>();
    let (wake, woken) = std::sync::mpsc::channel::<Wake>();
    let (done, mut finished) = tokio::sync::oneshot::channel::<Outcome>();
    let stop = Arc::new(AtomicBool::new(false));
    let engine = Engine {
        code: code.to_owned(),
        names: serde_json::to_string(names).unwrap_or_else(|_| "[]".to_owned()),
        limits: limits.clone(),
        requests,
        woken,
        stop: Arc::clone(&stop),
    };
    let spawned = std::thread::Builder::new()
        .name("tether-code".to_owned())
        .stack_size(THREAD_STACK_BYTES)
        .spawn(move || {
            let _ = done.send(engine.run());
        });
    if let Err(error) = spawned {
        return Outcome {
            answer: Err(Failure::Engine(format!("no thread for it: {error}"))),
            log: String::new(),
            calls: 0,
        };
    }
    // The engine keeps its own time; this one only catches an engine stuck outside the
    // interpreter loop (where its interrupt handler is not called).
    let backstop = tokio::time::sleep(limits.time + Duration::from_secs(1));
    tokio::pin!(backstop);
    let mut calls = FuturesUnordered::new();
    // The calls' tokens: cancelled when the run ends with calls under way.
    let leftover = CancellationToken::new();
    let mut cancelled = false;
    let outcome = loop {
        tokio::select! {
            biased;
            outcome = &mut finished => {
                break outcome.unwrap_or_else(|_| Outcome {
                    answer: Err(Failure::Engine("the engine's thread ended without an answer".to_owned())),
                    log: String::new(),
                    calls: 0,
                });
            }
            () = cancel.cancelled(), if !cancelled => {
                cancelled = true;
                stop.store(true, Ordering::SeqCst);
                let _ = wake.send(Wake::Stop);
            }
            () = &mut backstop => {
                stop.store(true, Ordering::SeqCst);
                let _ = wake.send(Wake::Stop);
                break Outcome {
                    answer: Err(Failure::TimedOut(limits.time)),
                    log: String::new(),
                    calls: 0,
                };
            }
            Some(request) = requested.recv(), if !cancelled => {
                let answer = call(request.name, request.arguments, leftover.child_token());
                let id = request.id;
                calls.push(async move { (id, answer.await) });
            }
            Some((id, answer)) = calls.next(), if !calls.is_empty() => {
                let _ = wake.send(Wake::Answer(id, answer));
            }
        }
    };
    if !calls.is_empty() {
        leftover.cancel();
        let drained = async { while calls.next().await.is_some() {} };
        let _ = tokio::time::timeout(CALLS_DRAIN, drained).await;
    }
    outcome
}

/// How long calls still under way when a run ends get to end after their cancellation.
pub const CALLS_DRAIN: Duration = Duration::from_secs(2);

/// What the engine's thread owns.
struct Engine {
    code: String,
    /// The offered tools' names, as a JSON array.
    names: String,
    limits: Limits,
    requests: tokio::sync::mpsc::UnboundedSender<Request>,
    woken: std::sync::mpsc::Receiver<Wake>,
    stop: Arc<AtomicBool>,
}

/// The run's book-keeping the host functions share with the loop.
#[derive(Default)]
struct Books {
    next_id: u32,
    calls: usize,
    under_way: usize,
    log: String,
    log_cut: bool,
}

impl Engine {
    fn run(self) -> Outcome {
        let books = Rc::new(RefCell::new(Books::default()));
        let answer = match rquickjs::Runtime::new() {
            Ok(runtime) => {
                let answer = self.answer(&runtime, &books);
                answer.map_err(|failure| self.out_of_memory(failure))
            }
            Err(error) => Err(Failure::Engine(error.to_string())),
        };
        let books = books.take();
        let mut log = books.log;
        if books.log_cut {
            log.push_str(&format!(
                "… (the log was cut at {} bytes)",
                self.limits.log_bytes
            ));
        }
        Outcome {
            answer,
            log,
            calls: books.calls,
        }
    }

    /// `failure` as [`Failure::OutOfMemory`] when it is QuickJS running out of the memory it
    /// may use: its "out of memory" error, or the `null` it throws when even that error
    /// cannot be allocated (by the time the run ends the memory is freed, so there is no
    /// telling that from a script's own `throw null`; the spec says so).
    fn out_of_memory(&self, failure: Failure) -> Failure {
        let Failure::Thrown { message, line } = &failure else {
            return failure;
        };
        let out = message.starts_with("InternalError: out of memory")
            || (message == NULL_THROWN && line.is_none());
        if out {
            Failure::OutOfMemory(self.limits.memory)
        } else {
            failure
        }
    }

    fn answer(
        &self,
        runtime: &rquickjs::Runtime,
        books: &Rc<RefCell<Books>>,
    ) -> Result<String, Failure> {
        let started = Instant::now();
        let deadline = started + self.limits.time;
        runtime.set_memory_limit(self.limits.memory);
        runtime.set_max_stack_size(STACK_BYTES);
        let stop = Arc::clone(&self.stop);
        runtime.set_interrupt_handler(Some(Box::new(move || {
            stop.load(Ordering::Relaxed) || Instant::now() >= deadline
        })));
        let context =
            rquickjs::Context::full(runtime).map_err(|e| Failure::Engine(e.to_string()))?;
        let ended = || {
            if self.stop.load(Ordering::SeqCst) {
                Some(Failure::Cancelled)
            } else if Instant::now() >= deadline {
                Some(Failure::TimedOut(self.limits.time))
            } else {
                None
            }
        };
        let (settle, promise) = context
            .with(|ctx| self.start(&ctx, books))
            .map_err(|e| ended().unwrap_or(e))?;
        loop {
            loop {
                match runtime.execute_pending_job() {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(job) => {
                        if let Some(failure) = ended() {
                            return Err(failure);
                        }
                        let why = job.0.with(|ctx| thrown(&ctx, ctx.catch()));
                        return Err(why);
                    }
                }
            }
            let settled = context.with(|ctx| {
                let promise = promise.clone().restore(&ctx).map_err(engine_error)?;
                match promise.state() {
                    PromiseState::Pending => Ok(None),
                    PromiseState::Resolved => match promise.result::<rquickjs::Value>() {
                        Some(Ok(value)) => Ok(Some(text_of(&ctx, value))),
                        _ => Ok(Some(Err(thrown(&ctx, ctx.catch())))),
                    },
                    PromiseState::Rejected => {
                        let _ = promise.result::<rquickjs::Value>();
                        Ok(Some(Err(thrown(&ctx, ctx.catch()))))
                    }
                }
            })?;
            if let Some(answer) = settled {
                // A limit hit while the answer was made into text is that limit, not an error.
                return answer.map_err(|e| ended().unwrap_or(e));
            }
            if let Some(failure) = ended() {
                return Err(failure);
            }
            if books.borrow().under_way == 0 {
                return Err(Failure::NeverSettles);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.woken.recv_timeout(left) {
                Ok(Wake::Answer(id, answer)) => {
                    books.borrow_mut().under_way -= 1;
                    let (ok, text) = match answer {
                        Ok(value) => (true, value.to_string()),
                        Err(message) => (false, message),
                    };
                    context
                        .with(|ctx| {
                            let settle = settle.clone().restore(&ctx)?;
                            settle.call::<_, ()>((id, ok, text))
                        })
                        .map_err(|_| {
                            ended().unwrap_or_else(|| {
                                Failure::Engine(
                                    "a tool's answer could not be handed to the script".to_owned(),
                                )
                            })
                        })?;
                }
                Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => {
                    return Err(Failure::Cancelled);
                }
                Err(RecvTimeoutError::Timeout) => return Err(Failure::TimedOut(self.limits.time)),
            }
        }
    }

    /// Runs the prelude and starts the script: the prelude's `settle` and the script's promise.
    fn start<'js>(
        &self,
        ctx: &Ctx<'js>,
        books: &Rc<RefCell<Books>>,
    ) -> Result<(Persistent<Function<'static>>, Persistent<Promise<'static>>), Failure> {
        let caught = |ctx: &Ctx<'js>| thrown(ctx, ctx.catch());
        let call_books = Rc::clone(books);
        let requests = self.requests.clone();
        let max_calls = self.limits.calls;
        let host_call = Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, name: String, arguments: String| -> rquickjs::Result<u32> {
                let mut books = call_books.borrow_mut();
                if books.calls >= max_calls {
                    return Err(Exception::throw_message(
                        &ctx,
                        &format!("this run has made its {max_calls} tool calls, the most one run may make (--code-max-calls)"),
                    ));
                }
                let arguments = match serde_json::from_str::<Value>(&arguments) {
                    Ok(arguments @ Value::Object(_)) => arguments,
                    _ => {
                        return Err(Exception::throw_message(
                            &ctx,
                            &format!("the arguments of tools[\"{name}\"] are one object of the tool's arguments"),
                        ));
                    }
                };
                books.calls += 1;
                books.under_way += 1;
                books.next_id += 1;
                let id = books.next_id;
                if requests.send(Request { id, name, arguments }).is_err() {
                    return Err(Exception::throw_message(&ctx, "the run is over"));
                }
                Ok(id)
            },
        )
        .map_err(|_| caught(ctx))?;
        let log_books = Rc::clone(books);
        let max_log = self.limits.log_bytes;
        let host_log = Function::new(ctx.clone(), move |line: String| {
            let mut books = log_books.borrow_mut();
            if books.log_cut {
                return;
            }
            let room = max_log.saturating_sub(books.log.len());
            if line.len() < room {
                books.log.push_str(&line);
                books.log.push('\n');
            } else {
                let mut end = room;
                while !line.is_char_boundary(end) {
                    end -= 1;
                }
                books.log.push_str(&line[..end]);
                books.log_cut = true;
            }
        })
        .map_err(|_| caught(ctx))?;
        let prelude: Function = ctx.eval(PRELUDE).map_err(|_| caught(ctx))?;
        let settle: Function = prelude
            .call((host_call, host_log, self.names.as_str()))
            .map_err(|_| caught(ctx))?;
        let source = format!("(async function () {{\n{}\n}})()", self.code);
        let mut options = EvalOptions::default();
        options.global = true;
        options.strict = false;
        options.backtrace_barrier = true;
        options.promise = false;
        options.filename = Some(SCRIPT.to_owned());
        let promise: Promise = ctx
            .eval_with_options(source, options)
            .map_err(|_| caught(ctx))?;
        Ok((
            Persistent::save(ctx, settle),
            Persistent::save(ctx, promise),
        ))
    }
}

fn engine_error(error: rquickjs::Error) -> Failure {
    Failure::Engine(error.to_string())
}

/// The script's answer as text: a string as is, `undefined` as nothing, anything else as JSON
/// (what JSON cannot hold, as JavaScript prints it).
fn text_of<'js>(ctx: &Ctx<'js>, value: rquickjs::Value<'js>) -> Result<String, Failure> {
    if value.is_undefined() {
        return Ok(String::new());
    }
    if let Some(text) = value.as_string() {
        return text.to_string().map_err(engine_error);
    }
    match ctx.json_stringify(value.clone()) {
        Ok(Some(text)) => text.to_string().map_err(engine_error),
        Ok(None) => value
            .get::<rquickjs::convert::Coerced<String>>()
            .map(|text| text.0)
            .map_err(|_| thrown(ctx, ctx.catch())),
        Err(_) => Err(thrown(ctx, ctx.catch())),
    }
}

/// What the script threw (`value`): its name and message, and the script's line it names.
fn thrown<'js>(ctx: &Ctx<'js>, value: rquickjs::Value<'js>) -> Failure {
    if let Some(exception) = value.as_exception() {
        let name = exception
            .get::<_, Option<String>>("name")
            .ok()
            .flatten()
            .unwrap_or_else(|| "Error".to_owned());
        let message = exception.message().unwrap_or_default();
        let message = if message.is_empty() {
            name
        } else {
            format!("{name}: {message}")
        };
        let line = exception.stack().as_deref().and_then(script_line);
        return Failure::Thrown { message, line };
    }
    let message = match ctx.json_stringify(value.clone()) {
        Ok(Some(text)) => text.to_string().unwrap_or_default(),
        _ => value
            .get::<rquickjs::convert::Coerced<String>>()
            .map(|text| text.0)
            .unwrap_or_default(),
    };
    Failure::Thrown {
        message: format!("{message} (not an Error)"),
        line: None,
    }
}

/// The first line of the script a stack names (`at … (script:LINE:COLUMN)`), counted from 1
/// in the script as it was given (its wrapper's first line taken off).
fn script_line(stack: &str) -> Option<u32> {
    let marker = format!("{SCRIPT}:");
    stack.lines().find_map(|frame| {
        let at = frame.find(&marker)? + marker.len();
        let digits: String = frame[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits
            .parse::<u32>()
            .ok()?
            .checked_sub(1)
            .filter(|line| *line > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_names_the_scripts_own_line() {
        assert_eq!(
            script_line("    at <anonymous> (script.js:4:11)\n"),
            Some(3)
        );
        assert_eq!(script_line("    at f (script.js:1:1)\n"), None);
        assert_eq!(script_line("    at native\n"), None);
    }
}
