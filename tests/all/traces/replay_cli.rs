//! The `tempalloc-replay` binary (feature `cli`), run as a user runs it:
//! `--plan` prints each trace's plan, as text or JSON lines, and a bad
//! trace is an error that names the file and the line, with a failing exit
//! code. The replay tables themselves are `trace::compare_counting`'s,
//! tested in `trace.rs`.
#![cfg(feature = "cli")]

use std::path::PathBuf;
use std::process::{Command, Output};

use tempalloc::trace::Trace;

/// Thread 0 takes 100 B, then, inside a checkpoint it rewinds, 8 B aligned
/// to 64 (at offset 128: 136 B), then 50 B from offset 100 again (150 B);
/// thread 1 takes 4096 B in the same window; then thread 0 alone, 1000 B.
const TRACE: &str = "a 100 8\nc 0\na 8 64\nw 0\na 50 2\nt 1\na 4096 64\nr\nt 0\na 1000 8\nr\n";

/// Writes `text` to a file of this test binary's scratch directory.
fn trace_file(name: &str, text: &str) -> String {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn replay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tempalloc-replay"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn plan_prints_what_each_thread_and_region_must_hold() {
    let file = trace_file("plan.trace", TRACE);
    let text = stdout(&replay(&["--plan", &file]));
    let expected = format!(
        "# {file}\n# 2 windows, 2 threads, 2 regions, 4246 bytes in all\n\
         region 0 4096\nregion 1 150\nthread 0 1000\nthread 1 4096\n"
    );
    assert_eq!(text, expected);
}

#[test]
fn plan_of_several_traces_is_the_library_plan_of_each_in_order() {
    let file = trace_file("plan-several.trace", TRACE);
    let text = stdout(&replay(&["--plan", "steady", &file]));
    let steady = tempalloc::trace::workload("steady")
        .unwrap()
        .plan()
        .unwrap();
    let mine = Trace::parse(TRACE).unwrap().plan().unwrap();
    assert_eq!(text, format!("# steady\n{steady}# {file}\n{mine}"));
}

#[test]
fn plan_as_json_is_one_line_per_trace_with_every_number() {
    let file = trace_file("plan-json.trace", TRACE);
    let text = stdout(&replay(&["--plan", "--json", &file, "decode"]));
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(
        lines[0],
        serde_json::json!({
            "trace": file,
            "windows": 2,
            "regions": [4096, 150],
            "total_bytes": 4246,
            "threads": { "0": 1000, "1": 4096 },
        })
    );
    let decode = tempalloc::trace::workload("decode")
        .unwrap()
        .plan()
        .unwrap();
    assert_eq!(lines[1]["trace"], "decode");
    assert_eq!(lines[1]["windows"], decode.windows());
    assert_eq!(lines[1]["regions"], serde_json::json!(decode.regions()));
    assert_eq!(lines[1]["total_bytes"], decode.total_bytes());
}

#[test]
fn a_bad_trace_is_an_error_naming_the_file_and_line() {
    let file = trace_file("plan-bad.trace", "a 100 8\nr\na 64 3\n");
    let out = replay(&["--plan", &file]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&file) && err.contains("line 3") && err.contains("alignment 3"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    let missing = trace_file("plan-missing.trace", "") + ".absent";
    let out = replay(&["--plan", &missing]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8(out.stderr).unwrap().contains(&missing));
}
