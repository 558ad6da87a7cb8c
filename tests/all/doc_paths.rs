//! Every path README.md and docs/ name exists, and either ships in the
//! package (Cargo.toml's `include`) or is said to be the repository's, so a
//! reader of the crates.io or docs.rs copy is never sent to a file that is
//! not there.

use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The top-level folders a doc may name paths in.
const FOLDERS: [&str; 10] = [
    "src/",
    "tests/",
    "examples/",
    "crates/",
    "docs/",
    "benches/",
    "include/",
    "cmake/",
    "scripts/",
    ".ci/",
];

/// Cargo.toml's `include` globs, as regular-expression-free matchers.
fn includes() -> Vec<String> {
    let manifest = std::fs::read_to_string(Path::new(ROOT).join("Cargo.toml")).expect("Cargo.toml");
    let start = manifest.find("include = [").expect("an include list");
    let end = start + manifest[start..].find(']').expect("its end");
    manifest[start..end]
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|glob| glob.trim_start_matches('/').to_string())
        .collect()
}

/// Whether `path` matches `glob` (`*` within a name, `**` across folders).
fn matches(glob: &str, path: &str) -> bool {
    match glob.split_once('*') {
        None => glob == path,
        Some((head, rest)) => {
            let Some(path) = path.strip_prefix(head) else {
                return false;
            };
            if let Some(rest) = rest.strip_prefix("*/") {
                // `**/`: any number of folders, none included.
                (0..=path.len())
                    .filter(|&i| i == 0 || path.as_bytes()[i - 1] == b'/')
                    .any(|i| matches(rest, &path[i..]))
            } else if let Some(rest) = rest.strip_prefix('*') {
                (0..=path.len()).any(|i| matches(rest, &path[i..]))
            } else {
                (0..=path.len())
                    .take_while(|&i| i == 0 || path.as_bytes()[i - 1] != b'/')
                    .any(|i| matches(rest, &path[i..]))
            }
        }
    }
}

/// Whether the package ships `path`: a file an include glob matches, or a
/// folder holding one.
fn shipped(globs: &[String], path: &str) -> bool {
    let full = Path::new(ROOT).join(path);
    if full.is_dir() {
        let mut dirs = vec![full];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).expect("a folder").flatten() {
                let p = entry.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if let Ok(rel) = p.strip_prefix(ROOT) {
                    let rel = rel.to_string_lossy();
                    if globs.iter().any(|g| matches(g, &rel)) {
                        return true;
                    }
                }
            }
        }
        false
    } else {
        globs.iter().any(|g| matches(g, path))
    }
}

/// The code spans of `text` that name a path in one of [`FOLDERS`].
fn paths(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| FOLDERS.iter().any(|f| span.starts_with(f)))
        .filter(|span| !span.contains([' ', '*', '<', '{', '$']))
        .map(|span| span.split([':', '#']).next().unwrap_or(span).to_string())
        .collect()
}

/// The folders `text` says are the repository's: the code spans of its
/// paragraph that begins "Repository paths:".
fn repository_folders(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter(|p| p.trim_start().starts_with("Repository paths:"))
        .flat_map(|p| {
            p.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
#[cfg_attr(miri, ignore = "reads the source tree, which Miri's isolation forbids")]
fn every_path_the_docs_name_exists_and_ships_or_is_the_repositorys() {
    let globs = includes();
    let mut docs = vec!["README.md".to_string()];
    for entry in std::fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("docs/")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    let mut checked = 0;
    for doc in docs {
        let text = std::fs::read_to_string(Path::new(ROOT).join(&doc)).expect("a doc");
        let repository = repository_folders(&text);
        for path in paths(&text) {
            checked += 1;
            assert!(
                Path::new(ROOT).join(&path).exists(),
                "{doc} names `{path}`, which does not exist"
            );
            if shipped(&globs, path.trim_end_matches('/')) {
                continue;
            }
            assert!(
                repository.iter().any(|r| path.starts_with(r.as_str())),
                "{doc} names `{path}`, which the package does not ship: add it to Cargo.toml's \
                 `include`, or its folder to the doc's \"Repository paths:\" paragraph"
            );
        }
    }
    assert!(checked > 50, "the scan found the docs' paths ({checked})");
}

#[test]
fn globs_match_as_cargo_reads_them() {
    assert!(matches("src/**/*.rs", "src/lib.rs"));
    assert!(matches("src/**/*.rs", "src/capi/handles.rs"));
    assert!(!matches("src/**/*.rs", "src/capi/handles.c"));
    assert!(matches("examples/cmake/*", "examples/cmake/main.cpp"));
    assert!(!matches("examples/cmake/*", "examples/cmake/sub/main.cpp"));
    assert!(matches("tests/**", "tests/c/smoke.c"));
    assert!(!matches(
        "examples/**/*.rs",
        "examples/executorch/runner.cpp"
    ));
}
