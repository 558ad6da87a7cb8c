//! Command-line arguments: two options, parsed by hand rather than with a
//! parser crate.

use std::path::PathBuf;

pub const USAGE: &str = "\
usage: cargo run --release --example demo -- [--tokens N] [--plot FILE.svg]

  --tokens N       tokens to generate after the prompt (default 256)
  --plot FILE.svg  draw time per token against position, one line per allocator
  -h, --help       print this help";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub tokens: usize,
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
        let mut parsed = Args {
            tokens: 256,
            plot: None,
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--tokens" => {
                    let v = value()?;
                    parsed.tokens = match v.parse() {
                        Ok(n) if n > 0 => n,
                        _ => return Err(format!("--tokens needs a positive integer, got {v:?}")),
                    };
                }
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
        assert_eq!(
            parse(&[]),
            Ok(Some(Args {
                tokens: 256,
                plot: None
            }))
        );
        let args = Args {
            tokens: 9,
            plot: Some("t.svg".into()),
        };
        assert_eq!(parse(&["--tokens", "9", "--plot", "t.svg"]), Ok(Some(args)));
        assert_eq!(parse(&["--help"]), Ok(None));
        assert!(parse(&["--tokens", "0"]).is_err());
        assert!(parse(&["--tokens"]).is_err());
        assert!(parse(&["--frobnicate"]).is_err());
    }
}
