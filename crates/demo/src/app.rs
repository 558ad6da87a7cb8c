//! The demo's driver, shared by its two binaries (`demo`, whose global
//! allocator is the system's, and `demo-mimalloc`, whose global allocator is
//! mimalloc): the parent runs every allocator in a child process of its
//! own, `--rounds` times in a rotated order, and prints medians; a child
//! (`--child NAME`) generates with one allocator and reports.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::Args;
use crate::kernels::sample::Sampling;
use crate::kernels::sdpa::SdpaPlan;
use crate::model::{Config, Model, Weights};
use crate::rng::Rng;
use crate::{allocators, child, cli, plot, prewarm, report};
use tempalloc::Rewind;

use crate::runtime::{Run, StepError, generate, worker_pool};

/// The global allocator of the binary, and so what `malloc` means in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Each binary constructs one of them.
#[allow(dead_code)]
pub enum SystemAllocator {
    /// The platform's (glibc on Linux): the `demo` binary.
    Platform,
    /// mimalloc: the `demo-mimalloc` binary.
    Mimalloc,
}

/// Llama-3.2-1B's attention and MLP: d_model 2048, 32 query heads and 8
/// key/value heads of 64, MLP 8192. The vocabulary is 32 000 (Llama 3.2 has
/// 128 256): the tied output projection would otherwise take twice the time
/// of two layers, and it is not where scratch matters.
fn llama_3_2_1b(workers: usize, args: &Args) -> Config {
    Config {
        layers: args.layers.unwrap_or(2),
        heads: 32,
        kv_heads: 8,
        head_dim: 64,
        vocab: 32_000,
        ffn: 8192,
        prompt_len: args.context.unwrap_or(cli::DEFAULT_CONTEXT),
        chunk: args.chunk.unwrap_or(128),
        seed: 0x7E3A_11C0,
        sampling: Sampling {
            k: 40,
            temperature: 0.8,
        },
        attention: SdpaPlan {
            q_tile: 32,
            kv_tile: 256,
            workers,
        },
    }
}

/// The old toy model: 4 layers, 4 heads of 64, d_model 256, vocabulary 512.
fn tiny(workers: usize, args: &Args) -> Config {
    Config {
        layers: args.layers.unwrap_or(4),
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        vocab: 512,
        ffn: 1024,
        prompt_len: args.context.unwrap_or(32),
        chunk: args.chunk.unwrap_or(32),
        attention: SdpaPlan {
            q_tile: 16,
            kv_tile: 64,
            workers,
        },
        ..llama_3_2_1b(workers, args)
    }
}

pub fn main(system: SystemAllocator) -> ExitCode {
    let args = match Args::from_env() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{}", cli::USAGE);
            return ExitCode::FAILURE;
        }
    };
    // Asked once: the answer may read cgroup files, which the kernels should not do per call.
    let workers = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let config = if args.tiny {
        tiny(workers, &args)
    } else {
        llama_3_2_1b(workers, &args)
    };
    let tokens = args.tokens.unwrap_or(cli::DEFAULT_TOKENS);
    allocators::CACHING_HUGE_PAGES.store(args.huge_pages, std::sync::atomic::Ordering::Relaxed);
    let result = match &args.child {
        Some(name) => run_child(name, &config, tokens, args.prewarm),
        None => run_parent(&args, system, &config, tokens),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// A child: generates with the allocator `name` (or prewarms first, for
/// [`prewarm::ROW`]) and prints its report; with `probe`, finds where the
/// first inference's page faults were.
fn run_child(name: &str, config: &Config, tokens: usize, probe: bool) -> Result<(), String> {
    let workers = config.attention.workers;
    // Once, before any timed step: kernels reuse these threads on every call.
    let pool = worker_pool(workers)
        .map_err(|error| format!("cannot start {workers} worker threads: {error}"))?;
    let weights = Weights::random(config);
    let model = Model {
        config: *config,
        weights: &weights,
        pool: &pool,
    };
    let prompt = prompt(config);
    let run = if name == prewarm::ROW {
        prewarm::run(&model, &prompt, tokens, probe)?
    } else {
        generate_each(&model, &prompt, tokens, Some(name), probe)
            .map_err(|(name, error)| format!("{name}: {error}"))?
            .into_iter()
            .next()
            .ok_or_else(|| format!("unknown allocator {name:?}"))?
    };
    child::print_report(&run);
    Ok(())
}

/// One row of the table: a label, the binary, what it adds to the child's
/// environment, and the allocator it runs.
struct Row {
    label: &'static str,
    exe: PathBuf,
    env: Vec<(&'static str, &'static str)>,
    allocator: &'static str,
}

/// mimalloc asks for transparent huge pages on what it maps (its default on
/// Linux), so in its process the weights and the KV cache would sit on
/// 2 MiB pages and every kernel would read them faster, whichever temp
/// allocator runs; every other child has them on base pages. Off in the
/// `malloc/mimalloc` and `caching/mimalloc` rows, so that they differ from
/// the others only in the global allocator (unless the environment already says);
/// `demo-mimalloc` run on its own keeps mimalloc's default for every row.
const MIMALLOC_BASE_PAGES: (&str, &str) = ("MIMALLOC_ALLOW_THP", "0");

/// The parent: every allocator in a child, `--rounds` times, then the table.
fn run_parent(
    args: &Args,
    system: SystemAllocator,
    config: &Config,
    tokens: usize,
) -> Result<(), String> {
    let rounds = args.rounds.unwrap_or(cli::DEFAULT_ROUNDS);
    println!(
        "{} layers, d_model {}, {} query / {} kv heads x {}, MLP {}, vocab {}, int8 weights and KV cache",
        config.layers,
        config.d_model(),
        config.heads,
        config.kv_heads,
        config.head_dim,
        config.ffn,
        config.vocab
    );
    println!(
        "prompt {} tokens prefilled in chunks of {}, then {} tokens generated, on {} worker threads",
        config.prompt_len, config.chunk, tokens, config.attention.workers
    );
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the demo binary: {e}"))?;
    let mut rows: Vec<Row> = allocators::ALLOCATORS
        .iter()
        .map(|&(name, _)| Row {
            label: name,
            exe: exe.clone(),
            env: Vec::new(),
            allocator: name,
        })
        .collect();
    match system {
        SystemAllocator::Platform => {
            println!(
                "each allocator in a process of its own, {rounds} rounds in rotated order, medians; malloc is the platform's"
            );
            if let Some(exe) = mimalloc_binary(&exe) {
                let env: Vec<(&str, &str)> = std::env::var_os(MIMALLOC_BASE_PAGES.0)
                    .is_none()
                    .then_some(MIMALLOC_BASE_PAGES)
                    .into_iter()
                    .collect();
                // Both in the mimalloc process: caching's scratch against
                // malloc's, over the same global allocator.
                for (at, label, allocator) in [
                    (1, "malloc/mimalloc", "malloc"),
                    (2, "caching/mimalloc", "caching"),
                ] {
                    let (exe, env) = (exe.clone(), env.clone());
                    rows.insert(
                        at,
                        Row {
                            label,
                            exe,
                            env,
                            allocator,
                        },
                    );
                }
            }
        }
        SystemAllocator::Mimalloc => println!(
            "each allocator in a process of its own, {rounds} rounds in rotated order, medians; malloc is mimalloc"
        ),
    }
    if args.prewarm {
        rows.push(Row {
            label: prewarm::ROW,
            exe: exe.clone(),
            env: Vec::new(),
            allocator: prewarm::ROW,
        });
    }

    let child_args = args.for_child();
    let mut runs: Vec<Vec<Run>> = rows.iter().map(|_| Vec::with_capacity(rounds)).collect();
    for round in 0..rounds {
        for k in 0..rows.len() {
            let i = (k + round) % rows.len();
            let row = &rows[i];
            runs[i].push(child::run(
                &row.exe,
                &child_args,
                &row.env,
                row.allocator,
                row.label,
            )?);
        }
    }
    println!("kernels checked against reference: ok");

    let agree = check_same_tokens(runs.iter().flatten());
    report::print_table(&runs, agree.is_ok());
    agree?;
    println!("all allocators generated the same {tokens} tokens in every round");
    let names: Vec<&str> = rows.iter().map(|r| r.label).collect();
    if let Some(reference) = allocators::reference(&names) {
        report::print_summary(&runs, reference);
    }
    for line in report::like_for_like(&runs) {
        println!("{line}");
    }
    if args.prewarm {
        report::print_first_inference(&runs, config);
    }

    if let Some(path) = &args.plot {
        let first: Vec<&Run> = runs.iter().map(|r| &r[0]).collect();
        plot::write_svg(path, &first)
            .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The `demo-mimalloc` binary next to `exe`, for the `malloc/mimalloc` row:
/// a global allocator is one per binary, so that row's child is another
/// binary, built from the same sources (crates/demo/src/mimalloc.rs). Under
/// `cargo run` (which sets `CARGO`) it is built first, with the demo's
/// profile; otherwise it is used if it is there. `None` (and a note) when
/// it cannot be had: the demo runs without that row.
fn mimalloc_binary(exe: &Path) -> Option<PathBuf> {
    let sibling = exe.with_file_name(format!("demo-mimalloc{}", std::env::consts::EXE_SUFFIX));
    if let Some(cargo) = std::env::var_os("CARGO") {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        let stale = |exe: &Path, sibling: &Path| -> Option<bool> {
            Some(sibling.metadata().ok()?.modified().ok()? < exe.metadata().ok()?.modified().ok()?)
        };
        if stale(exe, &sibling).unwrap_or(true) {
            println!(
                "building demo-mimalloc for the malloc/mimalloc row (cargo build -p demo --bin demo-mimalloc)"
            );
        }
        let mut build = std::process::Command::new(cargo);
        build.args([
            "build",
            "--quiet",
            "--bin",
            "demo-mimalloc",
            "--manifest-path",
            manifest,
        ]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        match build.status() {
            Ok(status) if status.success() => {}
            Ok(status) => {
                eprintln!("note: building demo-mimalloc failed ({status}): no malloc/mimalloc row")
            }
            Err(error) => eprintln!("note: cannot run cargo ({error}): no malloc/mimalloc row"),
        }
    }
    if sibling.is_file() {
        Some(sibling)
    } else {
        println!(
            "(no malloc/mimalloc row: build it with `cargo build --release -p demo --bin demo-mimalloc`)"
        );
        None
    }
}

/// The prompt: random tokens from the model's seed.
fn prompt(config: &Config) -> Vec<u32> {
    let mut rng = Rng::new(config.seed);
    (0..config.prompt_len)
        .map(|_| rng.below(config.vocab as u32))
        .collect()
}

/// Generates `tokens` tokens after `prompt` with every allocator in turn (or
/// only the one named `only`), each step in a frame; stops at the first
/// allocator that fails.
fn generate_each(
    model: &Model,
    prompt: &[u32],
    tokens: usize,
    only: Option<&str>,
    probe: bool,
) -> Result<Vec<Run>, (&'static str, StepError)> {
    let mut generate = Generate {
        model,
        prompt,
        tokens,
        only,
        probe,
        runs: Vec::with_capacity(allocators::ALLOCATORS.len()),
    };
    allocators::each(&mut generate)?;
    Ok(generate.runs)
}

/// What `generate_each` does with each allocator.
struct Generate<'a> {
    model: &'a Model<'a>,
    prompt: &'a [u32],
    tokens: usize,
    only: Option<&'a str>,
    probe: bool,
    runs: Vec<Run>,
}

impl allocators::Each for Generate<'_> {
    type Error = (&'static str, StepError);

    fn with<A: Rewind>(&mut self, name: &'static str, temp: A) -> Result<(), Self::Error> {
        if self.only.is_some_and(|only| only != name) {
            return Ok(());
        }
        let run = generate(name, temp, self.model, self.prompt, self.tokens, self.probe)
            .map_err(|error| (name, error))?;
        self.runs.push(run);
        Ok(())
    }
}

/// Scratch memory must not change results: every run must match the first.
fn check_same_tokens<'a>(runs: impl IntoIterator<Item = &'a Run>) -> Result<(), String> {
    let mut runs = runs.into_iter();
    let Some(first) = runs.next() else {
        return Ok(());
    };
    for run in runs {
        if let Some(at) = run
            .tokens
            .iter()
            .zip(&first.tokens)
            .position(|(a, b)| a != b)
        {
            return Err(format!(
                "{} and {} differ at generated token {at}",
                first.name, run.name
            ));
        }
    }
    Ok(())
}

/// Runs `test` with a tiny model of `args`'s sizes on a pool of 2 threads,
/// in a thread of its own: `worker_pool` makes its caller thread 0 of the
/// pool, and a thread can join only one pool.
#[cfg(test)]
pub fn with_tiny_model(args: Args, test: impl FnOnce(&Model, &[u32]) + Send + 'static) {
    std::thread::spawn(move || {
        let pool = worker_pool(2).expect("threads start");
        let config = tiny(2, &Args { tiny: true, ..args });
        let weights = Weights::random(&config);
        let model = Model {
            config,
            weights: &weights,
            pool: &pool,
        };
        test(&model, &prompt(&config));
    })
    .join()
    .expect("the test thread passes");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_allocator_generates_the_same_tokens_in_frames() {
        let args = Args {
            context: Some(6),
            layers: Some(1),
            chunk: Some(4),
            ..Args::default()
        };
        with_tiny_model(args, |model, prompt| {
            let runs = generate_each(model, prompt, 3, None, false).expect("every run");
            assert_eq!(runs.len(), allocators::ALLOCATORS.len());
            assert_eq!(check_same_tokens(&runs), Ok(()));
            let mut changed = runs[1].tokens.clone();
            changed[2] ^= 1;
            let other = Run {
                tokens: changed,
                steps: Vec::new(),
                prewarm: None,
                ..runs[1]
            };
            let err = check_same_tokens([&runs[0], &other]).expect_err("tokens differ");
            assert!(err.contains("differ at generated token 2"), "{err}");
            for run in &runs {
                // Prefill chunks of 4 and 2 positions, then two decode steps.
                assert_eq!((run.prefill_steps, run.steps.len()), (2, 4), "{}", run.name);
                assert_eq!(run.tokens.len(), 3, "{}", run.name);
                assert!(run.peak_live > 0, "{}", run.name);
                assert!(run.peak_held >= run.peak_live, "{}", run.name);
            }
        });
    }
}
