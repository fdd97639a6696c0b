//! The engine end to end: scripts run in QuickJS on their own thread, tool calls answered by
//! a closure on the test's runtime; every limit ends its run with a clear failure and the
//! next run answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tether_code::{DEFAULT_MEMORY, Failure, Limits, Outcome, run};
use tokio_util::sync::CancellationToken;

fn names() -> Vec<String> {
    ["math__add", "math__fail", "math__slow", "files__read"]
        .map(str::to_owned)
        .to_vec()
}

/// The test's tools: `math__add` adds `a` and `b`; `math__fail` fails with its `why`;
/// `math__slow` answers after `ms`; `files__read` answers `{"path", "size"}`.
async fn tool(name: String, arguments: Value, _token: CancellationToken) -> Result<Value, String> {
    match name.as_str() {
        "math__add" => Ok(json!(
            arguments["a"].as_i64().unwrap_or(0) + arguments["b"].as_i64().unwrap_or(0)
        )),
        "math__fail" => Err(arguments["why"].as_str().unwrap_or("failed").to_owned()),
        "math__slow" => {
            tokio::time::sleep(Duration::from_millis(arguments["ms"].as_u64().unwrap_or(0))).await;
            Ok(json!("slept"))
        }
        "files__read" => {
            let path = arguments["path"].as_str().unwrap_or_default().to_owned();
            Ok(json!({"path": path, "size": path.len() * 10}))
        }
        other => Err(format!("no tool {other}")),
    }
}

async fn script(code: &str, limits: &Limits) -> Outcome {
    run(code, &names(), limits, &CancellationToken::new(), tool).await
}

async fn answer(code: &str) -> Result<String, Failure> {
    script(code, &Limits::default()).await.answer
}

fn short(time_ms: u64) -> Limits {
    Limits {
        time: Duration::from_millis(time_ms),
        ..Limits::default()
    }
}

#[tokio::test]
async fn a_script_calls_tools_and_returns_text_or_json() {
    assert_eq!(
        answer("return await tools.math__add({a: 2, b: 40});").await,
        Ok("42".to_owned())
    );
    assert_eq!(
        answer(
            "const r = await tools['files__read']({path: 'a.txt'}); return `${r.path}:${r.size}`;"
        )
        .await,
        Ok("a.txt:50".to_owned())
    );
    assert_eq!(
        answer("return {sum: (await tools.math__add({a: 1, b: 1})), list: [1, 'x']};").await,
        Ok(r#"{"sum":2,"list":[1,"x"]}"#.to_owned())
    );
    assert_eq!(answer("const x = 1;").await, Ok(String::new()));
}

#[tokio::test]
async fn loops_filter_and_join_across_many_calls_and_only_the_answer_comes_back() {
    let outcome = script(
        "const files = Array.from({length: 20}, (_, i) => `src/file${'x'.repeat(i)}.rs`);
         const read = await Promise.all(files.map(path => tools.files__read({path})));
         read.sort((a, b) => b.size - a.size);
         console.log('read', read.length, 'files');
         return read.slice(0, 3).map(r => r.path);",
        &Limits::default(),
    )
    .await;
    let answer = outcome.answer.expect("an answer");
    let longest: Vec<String> = serde_json::from_str(&answer).expect("JSON");
    assert_eq!(longest.len(), 3);
    assert!(longest[0].contains(&"x".repeat(19)), "{answer}");
    assert_eq!(outcome.log, "read 20 files\n");
    assert_eq!(outcome.calls, 20);
}

#[tokio::test]
async fn a_tool_error_throws_an_error_the_script_can_catch() {
    assert_eq!(
        answer("try { await tools.math__fail({why: 'disk full'}); } catch (e) { return 'caught: ' + e.message; }").await,
        Ok("caught: disk full".to_owned())
    );
    let uncaught = answer("const a = 1;\nawait tools.math__fail({why: 'disk full'});").await;
    assert_eq!(
        uncaught,
        Err(Failure::Thrown {
            message: "Error: disk full".to_owned(),
            line: None
        })
    );
    let unknown = answer("return await tools.nope__missing({});").await;
    match unknown {
        Err(Failure::Thrown { message, .. }) => {
            assert!(
                message.contains("no tool named 'nope__missing'"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    let bad_args = answer("return await tools.math__add(3);").await;
    match bad_args {
        Err(Failure::Thrown { message, .. }) => {
            assert!(message.contains("one object"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_uncaught_exception_names_its_message_and_line() {
    let thrown = answer("const a = 1;\nconst b = 2;\nnull.f();").await;
    match thrown {
        Err(Failure::Thrown { message, line }) => {
            assert!(message.starts_with("TypeError"), "{message}");
            assert_eq!(line, Some(3));
        }
        other => panic!("{other:?}"),
    }
    let syntax = answer("return (;").await;
    assert!(
        matches!(&syntax, Err(Failure::Thrown { message, .. }) if message.starts_with("SyntaxError")),
        "{syntax:?}"
    );
    assert_eq!(
        answer("throw 'plain';").await,
        Err(Failure::Thrown {
            message: "\"plain\" (not an Error)".to_owned(),
            line: None
        })
    );
}

#[tokio::test]
async fn calls_started_together_run_together() {
    let started = std::time::Instant::now();
    let outcome = script(
        "await Promise.all(Array.from({length: 8}, () => tools.math__slow({ms: 300}))); return 'done';",
        &Limits::default(),
    )
    .await;
    assert_eq!(outcome.answer, Ok("done".to_owned()));
    // Eight 300 ms calls one after another would take 2.4 s.
    assert!(
        started.elapsed() < Duration::from_millis(2_000),
        "{:?}",
        started.elapsed()
    );
}

/// Each limit ends its run with its own failure, and a run after it answers.
#[tokio::test]
async fn every_limit_ends_its_run_and_the_next_run_answers() {
    let endless = script("while (true) {}", &short(300)).await;
    assert_eq!(
        endless.answer,
        Err(Failure::TimedOut(Duration::from_millis(300)))
    );
    let endless_caught = script(
        "try { for (;;) {} } catch (e) { return 'escaped'; }",
        &short(300),
    )
    .await;
    assert_eq!(
        endless_caught.answer,
        Err(Failure::TimedOut(Duration::from_millis(300)))
    );

    let memory = Limits {
        memory: 16 * 1024 * 1024,
        ..Limits::default()
    };
    let bomb = script(
        "const a = []; for (;;) { a.push({x: [1, 2, 3, 4]}); }",
        &memory,
    )
    .await;
    assert_eq!(bomb.answer, Err(Failure::OutOfMemory(16 * 1024 * 1024)));
    let huge = script(
        "const s = 'x'.repeat(100 * 1024 * 1024); return s.length;",
        &Limits::default(),
    )
    .await;
    assert_eq!(huge.answer, Err(Failure::OutOfMemory(DEFAULT_MEMORY)));
    let deep = answer("function f(n) { return f(n + 1) + 1; } return f(0);").await;
    assert!(
        matches!(&deep, Err(Failure::Thrown { message, .. }) if message.contains("Maximum call stack size exceeded")),
        "{deep:?}"
    );
    let never = answer("await new Promise(() => {}); return 'unreachable';").await;
    assert_eq!(never, Err(Failure::NeverSettles));

    let many = script(
        "let n = 0; try { for (let i = 0; i < 10000; i++) { await tools.math__add({a: i, b: 0}); n++; } } catch (e) { return n + ' then: ' + e.message; }",
        &Limits::default(),
    )
    .await;
    let text = many.answer.expect("caught");
    assert!(
        text.starts_with("1000 then: this run has made its 1000 tool calls"),
        "{text}"
    );
    assert_eq!(many.calls, 1000);

    let log = Limits {
        log_bytes: 100,
        ..Limits::default()
    };
    let chatty = script(
        "for (let i = 0; i < 1000; i++) console.log('line', i); return 'ok';",
        &log,
    )
    .await;
    assert_eq!(chatty.answer, Ok("ok".to_owned()));
    assert!(chatty.log.len() < 160, "{}", chatty.log);
    assert!(
        chatty.log.ends_with("(the log was cut at 100 bytes)"),
        "{}",
        chatty.log
    );

    assert_eq!(
        answer("return 'still here';").await,
        Ok("still here".to_owned())
    );
}

#[tokio::test]
async fn the_script_reaches_nothing_but_tools_and_console() {
    let reach = answer(
        "return [typeof require, typeof process, typeof std, typeof os, typeof fetch, typeof setTimeout, typeof import_meta, typeof globalThis.tools].join(',');",
    )
    .await;
    assert_eq!(
        reach,
        Ok(
            "undefined,undefined,undefined,undefined,undefined,undefined,undefined,object"
                .to_owned()
        )
    );
    let import = answer("const m = await import('os'); return 'imported';").await;
    assert!(import.is_err(), "{import:?}");
}

#[tokio::test]
async fn cancelling_stops_the_run_and_its_calls_under_way() {
    let cancel = CancellationToken::new();
    let answered = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&answered);
    let trigger = cancel.clone();
    let (names, limits) = (names(), Limits::default());
    let run = run(
        "await tools.math__slow({ms: 60000}); return 'late';",
        &names,
        &limits,
        &cancel,
        move |name, arguments, token: CancellationToken| {
            let counted = Arc::clone(&counted);
            let trigger = trigger.clone();
            async move {
                // The call is under way: the client gives up now, and the call is told.
                trigger.cancel();
                tokio::select! {
                    answer = tool(name, arguments, token.clone()) => {
                        counted.fetch_add(1, Ordering::SeqCst);
                        answer
                    }
                    () = token.cancelled() => Err("cancelled".to_owned()),
                }
            }
        },
    );
    let outcome = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the run ends at once");
    assert_eq!(outcome.answer, Err(Failure::Cancelled));
    assert_eq!(
        answered.load(Ordering::SeqCst),
        0,
        "the call was told and ended"
    );
    assert_eq!(answer("return 1;").await, Ok("1".to_owned()));
}
