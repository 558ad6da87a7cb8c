//! `cargo run --release --example demo`: a transformer at Llama-3.2-1B's
//! geometry (2 layers by default) prefills a long prompt and generates the
//! same tokens once per temp allocator, and the demo prints what each
//! allocator cost: time per token, time inside the allocator, page faults,
//! system allocations and memory held over memory live. See docs/demo.md.

#[path = "../common/allocators.rs"]
mod allocators;
mod cli;
#[path = "../common/counting.rs"]
mod counting;
#[path = "../common/exact_size_cache.rs"]
mod exact_size_cache;
mod kernels;
mod model;
mod plot;
mod reference;
mod report;
mod rng;
mod runtime;

use std::process::ExitCode;

use crate::cli::Args;
use crate::kernels::sample::Sampling;
use crate::kernels::sdpa::SdpaPlan;
use crate::model::{Config, Model, Weights};
use crate::rng::Rng;
use crate::runtime::{Run, generate, worker_pool};

/// Counts every system allocation in the process, whichever temp allocator
/// runs, so the allocators are measured the same way.
#[global_allocator]
static SYSTEM: counting::Counting = counting::Counting;

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
        prompt_len: args.context.unwrap_or(1024),
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
    let config = if args.tiny {
        tiny(workers, &args)
    } else {
        llama_3_2_1b(workers, &args)
    };
    let tokens = args.tokens.unwrap_or(64);
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
        "prompt {} tokens prefilled in chunks of {}, then {} tokens generated, on {workers} worker threads",
        config.prompt_len, config.chunk, tokens
    );

    let mut runs: Vec<Run> = Vec::with_capacity(allocators::ALLOCATORS.len());
    for &(name, make) in allocators::ALLOCATORS {
        match generate(name, make(), &model, &prompt, tokens) {
            Ok(run) => runs.push(run),
            Err(error) => {
                eprintln!("error: {name}: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("kernels checked against reference: ok");

    let agree = check_same_tokens(&runs);
    report::print_table(&runs, agree.is_ok());
    if let Err(message) = agree {
        eprintln!("error: {message}");
        return ExitCode::FAILURE;
    }
    println!("all allocators generated the same {tokens} tokens");

    if let Some(path) = &args.plot {
        if let Err(error) = plot::write_svg(path, &runs) {
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
