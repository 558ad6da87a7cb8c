//! Every C and C++ block of README.md and docs/capi.md (fences marked
//! `c` and `cpp`) is a whole program: compiled with the flags the docs give,
//! linked against the static library and run. The blocks are read from the
//! files, so the docs and this test cannot drift.
#![cfg(feature = "capi")]

use std::path::Path;

use super::abi::{build_and_run_file, compiler};

/// The fenced blocks of `text` whose info string is `lang`, with the line
/// each starts on.
fn blocks(text: &str, lang: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(info)) if info.trim() == lang => current = Some((n + 1, String::new())),
            (Some(_), Some(_)) => found.extend(current.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, _) => {}
        }
    }
    found
}

/// Builds and runs every `lang` block of the docs; returns how many.
fn check_blocks(lang: &str, ext: &str, cc: &str, flags: &[&str]) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-docs");
    std::fs::create_dir_all(&dir).expect("a directory for the snippets");
    let mut count = 0;
    for doc in ["README.md", "docs/capi.md"] {
        let text = std::fs::read_to_string(root.join(doc)).expect("the docs");
        for (line, body) in blocks(&text, lang) {
            assert!(
                body.contains("int main("),
                "{doc}:{line}: a {lang} block must be a whole program (CI compiles and runs it)"
            );
            let name = format!("{}-{line}", doc.replace(['/', '.'], "-"));
            let source = dir.join(format!("{name}.{ext}"));
            std::fs::write(&source, &body).expect("write the snippet");
            println!("{doc}:{line}: {lang} block");
            build_and_run_file(cc, flags, &source, &name);
            count += 1;
        }
    }
    count
}

#[test]
#[cfg_attr(miri, ignore = "runs a C compiler")]
#[cfg_attr(not(unix), ignore = "the C link line is only set up for Unix")]
fn every_c_block_of_the_docs_compiles_as_c99_and_runs() {
    let cc = compiler("CC", "cc");
    let count = check_blocks("c", "c", &cc, &["-std=c99", "-pedantic"]);
    assert!(
        count >= 3,
        "found {count} C blocks: the docs lost some, or the scan broke"
    );
}

#[test]
#[cfg_attr(miri, ignore = "runs a C++ compiler")]
#[cfg_attr(not(unix), ignore = "the C++ link line is only set up for Unix")]
fn every_cpp_block_of_the_docs_compiles_as_cpp17_and_runs() {
    let cxx = compiler("CXX", "g++");
    let stub = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cpp/stub");
    let stub = format!("-I{}", stub.display());
    let count = check_blocks("cpp", "cc", &cxx, &["-std=c++17", &stub]);
    assert!(
        count >= 3,
        "found {count} C++ blocks: the docs lost some, or the scan broke"
    );
}

#[test]
fn the_block_scan_finds_fenced_blocks_by_their_language() {
    let text = "x\n```c\nint main(void) {}\n```\n```cpp\nA\n```\n  ```c\nB\n  ```\n```sh\nC\n```\n";
    let c = blocks(text, "c");
    assert_eq!(
        c,
        [
            (2, "int main(void) {}\n".to_string()),
            (8, "B\n".to_string())
        ]
    );
    assert_eq!(blocks(text, "cpp"), [(5, "A\n".to_string())]);
}
