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
use tempalloc::Rewind;

use crate::runtime::{Run, StepError, generate, worker_pool};

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
    let prompt = prompt(&config);
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

    let runs = match generate_with_each(&model, &prompt, tokens) {
        Ok(runs) => runs,
        Err((name, error)) => {
            eprintln!("error: {name}: {error}");
            return ExitCode::FAILURE;
        }
    };
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

/// The prompt: random tokens from the model's seed.
fn prompt(config: &Config) -> Vec<u32> {
    let mut rng = Rng::new(config.seed);
    (0..config.prompt_len)
        .map(|_| rng.below(config.vocab as u32))
        .collect()
}

/// Generates `tokens` tokens after `prompt` with every allocator in turn,
/// each step in a frame; stops at the first allocator that fails.
fn generate_with_each(
    model: &Model,
    prompt: &[u32],
    tokens: usize,
) -> Result<Vec<Run>, (&'static str, StepError)> {
    let mut generate = Generate {
        model,
        prompt,
        tokens,
        runs: Vec::with_capacity(allocators::ALLOCATORS.len()),
    };
    allocators::each(&mut generate)?;
    Ok(generate.runs)
}

/// What `generate_with_each` does with each allocator.
struct Generate<'a> {
    model: &'a Model<'a>,
    prompt: &'a [u32],
    tokens: usize,
    runs: Vec<Run>,
}

impl allocators::Each for Generate<'_> {
    type Error = (&'static str, StepError);

    fn with<A: Rewind>(&mut self, name: &'static str, temp: A) -> Result<(), Self::Error> {
        let run = generate(name, temp, self.model, self.prompt, self.tokens)
            .map_err(|error| (name, error))?;
        self.runs.push(run);
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_allocator_generates_the_same_tokens_in_frames() {
        // A thread of its own: `worker_pool` makes its caller thread 0 of the
        // pool, and a thread can join only one pool.
        std::thread::spawn(|| {
            let args = Args {
                context: Some(6),
                tokens: Some(3),
                layers: Some(1),
                chunk: Some(4),
                tiny: true,
                plot: None,
            };
            let pool = worker_pool(2).expect("threads start");
            let config = tiny(2, &args);
            let weights = Weights::random(&config);
            let model = Model {
                config,
                weights: &weights,
                pool: &pool,
            };
            let runs = generate_with_each(&model, &prompt(&config), 3).expect("every run");
            assert_eq!(runs.len(), allocators::ALLOCATORS.len());
            assert_eq!(check_same_tokens(&runs), Ok(()));
            for run in &runs {
                // Prefill chunks of 4 and 2 positions, then two decode steps.
                assert_eq!((run.prefill_steps, run.steps.len()), (2, 4), "{}", run.name);
                assert_eq!(run.tokens.len(), 3, "{}", run.name);
                assert!(run.peak_live > 0, "{}", run.name);
                assert!(run.peak_held >= run.peak_live, "{}", run.name);
            }
        })
        .join()
        .expect("the test thread passes");
    }
}
