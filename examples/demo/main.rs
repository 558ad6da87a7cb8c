//! `cargo run --release --example demo`: a tiny transformer generates the
//! same tokens once per temp allocator, and the demo prints what each
//! allocator cost: time per token, scratch requests, system allocations and
//! memory held. See docs/demo.md.

mod cli;
mod counting;
mod kernels;
mod model;
mod plot;
mod reference;
mod report;
mod rng;
mod runtime;

use std::process::ExitCode;

use tempalloc::{BumpAllocator, CachingAllocator, MallocAllocator, TempAllocator};

use crate::cli::Args;
use crate::counting::CountingAllocator;
use crate::kernels::sample::Sampling;
use crate::kernels::sdpa::SdpaPlan;
use crate::model::{Config, Model, Weights};
use crate::rng::Rng;
use crate::runtime::{Run, generate, worker_pool};

/// Counts every system allocation in the process, whichever temp allocator
/// runs, so the allocators are measured the same way.
#[global_allocator]
static SYSTEM: CountingAllocator = CountingAllocator::new();

/// Builds a fresh temp allocator for one run.
type MakeAllocator = fn() -> Box<dyn TempAllocator>;

/// The allocators compared, in the order they run and are printed.
const ALLOCATORS: &[(&str, MakeAllocator)] = &[
    ("malloc", || Box::new(MallocAllocator::new())),
    ("bumpalo", || Box::new(BumpAllocator::new())),
    ("caching", || Box::new(CachingAllocator::new())),
];

/// 4 layers, 4 heads of 64, d_model 256, vocabulary 512: a few seconds for
/// every allocator in release mode on two cores.
fn config(workers: usize) -> Config {
    Config {
        layers: 4,
        heads: 4,
        head_dim: 64,
        vocab: 512,
        ffn: 1024,
        prompt_len: 32,
        seed: 0x7E3A_11C0,
        sampling: Sampling {
            k: 40,
            temperature: 0.8,
        },
        attention: SdpaPlan {
            q_tile: 16,
            kv_tile: 64,
            workers,
        },
    }
}

fn main() -> ExitCode {
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
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let config = config(workers);
    // Once, before any timed step: kernels reuse these threads on every call.
    let pool = match worker_pool(workers) {
        Ok(pool) => pool,
        Err(error) => {
            eprintln!("error: cannot start {workers} worker threads: {error}");
            return ExitCode::FAILURE;
        }
    };
    let weights = Weights::random(&config);
    let model = Model {
        config,
        weights: &weights,
        pool: &pool,
    };
    let mut rng = Rng::new(config.seed);
    let prompt: Vec<u32> = (0..config.prompt_len)
        .map(|_| rng.below(config.vocab as u32))
        .collect();
    println!(
        "{} layers, {} heads x {}, vocab {}; prompt {} tokens, generating {} on {workers} worker threads",
        config.layers, config.heads, config.head_dim, config.vocab, config.prompt_len, args.tokens
    );

    let mut runs: Vec<Run> = Vec::with_capacity(ALLOCATORS.len());
    for &(name, make) in ALLOCATORS {
        match generate(name, make(), &model, &prompt, args.tokens) {
            Ok(run) => runs.push(run),
            Err(error) => {
                eprintln!("error: {name}: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("kernels checked against reference: ok");

    report::print_table(&runs);
    if let Err(message) = check_same_tokens(&runs) {
        eprintln!("error: {message}");
        return ExitCode::FAILURE;
    }
    println!("all allocators generated the same {} tokens", args.tokens);

    if let Some(path) = &args.plot {
        if let Err(error) = plot::write_svg(path, &runs, config.prompt_len) {
            eprintln!("error: cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}

/// Scratch memory must not change results: every run must match the first.
fn check_same_tokens(runs: &[Run]) -> Result<(), String> {
    let Some((first, rest)) = runs.split_first() else {
        return Ok(());
    };
    for run in rest {
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
