//! Command-line arguments, parsed by hand: a handful of numeric options.

use std::path::PathBuf;

/// The defaults of the Llama-shaped run, chosen so that the demo takes about
/// a minute on 2 cores with its medians over three rotated rounds: the
/// prefill is most of each child's time, and a 1024-token prompt with 64
/// tokens took 140 to 160 s there; a 384-token prompt with 32 tokens takes
/// 0.33x to 0.40x of its CPU time (docs/demo.md, "How it runs").
pub const DEFAULT_CONTEXT: usize = 384;
pub const DEFAULT_TOKENS: usize = 32;
pub const DEFAULT_ROUNDS: usize = 3;

pub const USAGE: &str = "\
usage: cargo run --release -p demo -- [OPTIONS]

  --context N      prompt tokens, prefilled in chunks (default 384)
  --tokens N       tokens to generate, the prefill's included (default 32)
  --layers N       transformer layers (default 2; Llama-3.2-1B has 16)
  --chunk N        prefill chunk, in tokens (default 128)
  --tiny           the old toy model (d_model 256, 4 heads, 32-token prompt)
  --threads N      kernel worker threads (default: every core)
  --huge-pages     caching asks for transparent huge pages on its regions
                   (CachingConfig::huge_pages; Linux)
  --prewarm        add a caching+prewarm row: its child records the
                   prefill, plans it (Trace::plan) and prewarms a fresh
                   prefaulting allocator (CachingAllocator::prewarm)
                   before the measured run; then show where each row's
                   first-inference page faults were
  --rounds R       run every allocator R times, in a rotated order each
                   round, and report medians (default 3)
  --plot FILE.svg  draw the allocator's share of each step's time against
                   the context length, one line per allocator (first round)
  -h, --help       print this help

Each allocator runs in a child process of its own (the demo runs itself
again with --child NAME).";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args {
    pub context: Option<usize>,
    pub tokens: Option<usize>,
    pub layers: Option<usize>,
    pub chunk: Option<usize>,
    pub tiny: bool,
    pub huge_pages: bool,
    pub prewarm: bool,
    pub threads: Option<usize>,
    pub rounds: Option<usize>,
    pub plot: Option<PathBuf>,
    /// Hidden: run only this allocator and print a report (child.rs).
    pub child: Option<String>,
}

impl Args {
    /// The process's arguments; `Ok(None)` when help was asked for.
    pub fn from_env() -> Result<Option<Args>, String> {
        Self::parse(
            std::env::args_os()
                .skip(1)
                .map(|a| a.to_string_lossy().into_owned()),
        )
    }

    fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
        let mut parsed = Args::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            let mut positive = || {
                let v = value()?;
                match v.parse() {
                    Ok(n) if n > 0 => Ok(Some(n)),
                    _ => Err(format!("{arg} needs a positive integer, got {v:?}")),
                }
            };
            match arg.as_str() {
                "--context" => parsed.context = positive()?,
                "--tokens" => parsed.tokens = positive()?,
                "--layers" => parsed.layers = positive()?,
                "--chunk" => parsed.chunk = positive()?,
                "--tiny" => parsed.tiny = true,
                "--huge-pages" => parsed.huge_pages = true,
                "--prewarm" => parsed.prewarm = true,
                "--threads" => parsed.threads = positive()?,
                "--rounds" => parsed.rounds = positive()?,
                "--plot" => parsed.plot = Some(PathBuf::from(value()?)),
                "--child" => parsed.child = Some(value()?),
                "-h" | "--help" => return Ok(None),
                _ => return Err(format!("unknown argument {arg:?}")),
            }
        }
        Ok(Some(parsed))
    }

    /// The arguments that make a child generate as this run would (not the
    /// parent's own options: rounds, plot; the caller adds `--child NAME`).
    pub fn for_child(&self) -> Vec<String> {
        let mut args = Vec::new();
        let numbers = [
            ("--context", self.context),
            ("--tokens", self.tokens),
            ("--layers", self.layers),
            ("--chunk", self.chunk),
            ("--threads", self.threads),
        ];
        for (flag, value) in numbers {
            if let Some(n) = value {
                args.extend([flag.to_owned(), n.to_string()]);
            }
        }
        if self.tiny {
            args.push("--tiny".to_owned());
        }
        if self.huge_pages {
            args.push("--huge-pages".to_owned());
        }
        // Every child then finds where its first inference's faults were.
        if self.prewarm {
            args.push("--prewarm".to_owned());
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Args>, String> {
        Args::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn options_and_errors() {
        assert_eq!(parse(&[]), Ok(Some(Args::default())));
        let args = Args {
            context: Some(64),
            tokens: Some(9),
            layers: Some(16),
            chunk: Some(8),
            tiny: true,
            huge_pages: true,
            prewarm: true,
            threads: Some(3),
            rounds: Some(2),
            plot: Some("t.svg".into()),
            child: Some("caching".into()),
        };
        let all = [
            "--context",
            "64",
            "--tokens",
            "9",
            "--layers",
            "16",
            "--chunk",
            "8",
            "--tiny",
            "--huge-pages",
            "--prewarm",
            "--threads",
            "3",
            "--rounds",
            "2",
            "--plot",
            "t.svg",
            "--child",
            "caching",
        ];
        assert_eq!(parse(&all), Ok(Some(args.clone())));
        // A child gets what shapes the generation, not the parent's options.
        let child = args.for_child();
        assert_eq!(
            child.join(" "),
            "--context 64 --tokens 9 --layers 16 --chunk 8 --threads 3 --tiny --huge-pages --prewarm"
        );
        let reparsed = parse(&child.iter().map(String::as_str).collect::<Vec<_>>());
        let expected = Args {
            rounds: None,
            plot: None,
            child: None,
            ..args
        };
        assert_eq!(reparsed, Ok(Some(expected)));
        assert_eq!(parse(&["--help"]), Ok(None));
        assert!(parse(&["--tokens", "0"]).is_err());
        assert!(parse(&["--context", "x"]).is_err());
        assert!(parse(&["--tokens"]).is_err());
        assert!(parse(&["--frobnicate"]).is_err());
        assert!(parse(&["--rounds", "0"]).is_err());
        assert!(parse(&["--child"]).is_err());
    }

    /// The help states the defaults the demo runs with.
    #[test]
    fn usage_states_the_defaults() {
        for (option, default) in [
            ("--context", DEFAULT_CONTEXT),
            ("--tokens", DEFAULT_TOKENS),
            ("--rounds", DEFAULT_ROUNDS),
        ] {
            let start = USAGE.find(&format!("\n  {option} ")).expect(option) + 3;
            let help = USAGE[start..].split("\n  --").next().expect(option);
            assert!(help.contains(&format!("(default {default})")), "{help}");
        }
    }
}
