//! Command-line arguments, parsed by hand: a handful of numeric options.

use std::path::PathBuf;

pub const USAGE: &str = "\
usage: cargo run --release --example demo -- [OPTIONS]

  --context N      prompt tokens, prefilled in chunks (default 1024)
  --tokens N       tokens to generate, the prefill's included (default 64)
  --layers N       transformer layers (default 2; Llama-3.2-1B has 16)
  --chunk N        prefill chunk, in tokens (default 128)
  --tiny           the old toy model (d_model 256, 4 heads, 32-token prompt)
  --plot FILE.svg  draw the allocator's share of each step's time against
                   the context length, one line per allocator
  -h, --help       print this help";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args {
    pub context: Option<usize>,
    pub tokens: Option<usize>,
    pub layers: Option<usize>,
    pub chunk: Option<usize>,
    pub tiny: bool,
    pub plot: Option<PathBuf>,
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
                "--plot" => parsed.plot = Some(PathBuf::from(value()?)),
                "-h" | "--help" => return Ok(None),
                _ => return Err(format!("unknown argument {arg:?}")),
            }
        }
        Ok(Some(parsed))
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
            plot: Some("t.svg".into()),
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
            "--plot",
            "t.svg",
        ];
        assert_eq!(parse(&all), Ok(Some(args)));
        assert_eq!(parse(&["--help"]), Ok(None));
        assert!(parse(&["--tokens", "0"]).is_err());
        assert!(parse(&["--context", "x"]).is_err());
        assert!(parse(&["--tokens"]).is_err());
        assert!(parse(&["--frobnicate"]).is_err());
    }
}
