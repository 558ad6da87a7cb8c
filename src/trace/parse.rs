//! Reading the text format: [`Trace::parse`], [`Trace::from_reader`], [`ParseError`].

use core::alloc::Layout;
use core::str::FromStr;
use std::io::{self, BufRead};

use super::{Event, Trace};

/// Why a trace could not be read. Every variant names the (1-based) line.
///
/// ```
/// use tempalloc::trace::{ParseError, Trace};
///
/// let err = Trace::parse("a 64 64\nx 1 2\n").unwrap_err();
/// assert_eq!(err.line(), 2);
/// assert!(matches!(err, ParseError::UnknownEvent { .. }));
/// assert_eq!(
///     err.to_string(),
///     "trace line 2: unknown event \"x\" (expected `a SIZE ALIGN`, `r`, `i`, `c ID`, `w ID` or `t ID`)"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The line starts with something other than `a`, `r`, `i` or `#`.
    #[error(
        "trace line {line}: unknown event {verb:?} (expected `a SIZE ALIGN`, `r`, `i`, `c ID`, `w ID` or `t ID`)"
    )]
    UnknownEvent {
        /// The line, counting from 1.
        line: usize,
        /// The first word of the line.
        verb: String,
    },
    /// The line has fewer or more fields than its event takes.
    #[error("trace line {line}: `{verb}` takes {expected} fields, found {found}")]
    FieldCount {
        /// The line, counting from 1.
        line: usize,
        /// The event (`a`, `r` or `i`).
        verb: &'static str,
        /// Fields the event takes after its letter.
        expected: usize,
        /// Fields found after the letter.
        found: usize,
    },
    /// A size or alignment is not a non-negative integer that fits a `usize`.
    #[error(
        "trace line {line}: {field} {text:?} is not a number (0..={})",
        usize::MAX
    )]
    NotANumber {
        /// The line, counting from 1.
        line: usize,
        /// `"size"`, `"align"`, `"checkpoint"` or `"thread"`.
        field: &'static str,
        /// The text found.
        text: String,
    },
    /// The alignment is not a power of two.
    #[error("trace line {line}: alignment {align} is not a power of two")]
    BadAlign {
        /// The line, counting from 1.
        line: usize,
        /// The alignment found.
        align: usize,
    },
    /// The size rounded up to the alignment exceeds `isize::MAX`.
    #[error(
        "trace line {line}: {size} bytes aligned to {align} exceed isize::MAX ({})",
        isize::MAX
    )]
    TooLarge {
        /// The line, counting from 1.
        line: usize,
        /// The size found.
        size: usize,
        /// The alignment found.
        align: usize,
    },
    /// The reader failed (or the text is not UTF-8).
    #[error("trace line {line}: read error: {source}")]
    Io {
        /// The line being read, counting from 1.
        line: usize,
        /// The reader's error.
        #[source]
        source: io::Error,
    },
}

impl ParseError {
    /// The line the error is on, counting from 1.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// assert_eq!(Trace::parse("r\n\n# c\na 12 3\n").unwrap_err().line(), 4);
    /// ```
    pub fn line(&self) -> usize {
        match self {
            ParseError::UnknownEvent { line, .. }
            | ParseError::FieldCount { line, .. }
            | ParseError::NotANumber { line, .. }
            | ParseError::BadAlign { line, .. }
            | ParseError::TooLarge { line, .. }
            | ParseError::Io { line, .. } => *line,
        }
    }
}

/// Parses one line; `Ok(None)` for blank lines and comments.
fn parse_line(text: &str, line: usize) -> Result<Option<Event>, ParseError> {
    let text = text.trim();
    if text.is_empty() || text.starts_with('#') {
        return Ok(None);
    }
    let mut fields = text.split_ascii_whitespace();
    let verb = fields.next().unwrap_or_default();
    let rest: Vec<&str> = fields.collect();
    let (verb, expected): (&'static str, usize) = match verb {
        "a" => ("a", 2),
        "r" => ("r", 0),
        "i" => ("i", 0),
        "c" => ("c", 1),
        "w" => ("w", 1),
        "t" => ("t", 1),
        other => {
            return Err(ParseError::UnknownEvent {
                line,
                verb: other.to_owned(),
            });
        }
    };
    if rest.len() != expected {
        return Err(ParseError::FieldCount {
            line,
            verb,
            expected,
            found: rest.len(),
        });
    }
    let number = |field: &'static str, text: &str| {
        text.parse::<usize>().map_err(|_| ParseError::NotANumber {
            line,
            field,
            text: text.to_owned(),
        })
    };
    Ok(Some(match verb {
        "a" => {
            let size = number("size", rest[0])?;
            let align = number("align", rest[1])?;
            if !align.is_power_of_two() {
                return Err(ParseError::BadAlign { line, align });
            }
            if Layout::from_size_align(size, align).is_err() {
                return Err(ParseError::TooLarge { line, size, align });
            }
            Event::Alloc { size, align }
        }
        "r" => Event::Reset,
        "i" => Event::EndInference,
        "c" => Event::Checkpoint {
            id: number("checkpoint", rest[0])? as u64,
        },
        "w" => Event::Rewind {
            id: number("checkpoint", rest[0])? as u64,
        },
        _ => Event::Thread {
            id: u32::try_from(number("thread", rest[0])?).map_err(|_| ParseError::NotANumber {
                line,
                field: "thread",
                text: rest[0].to_owned(),
            })?,
        },
    }))
}

impl Trace {
    /// Parses the text format. Blank lines and `#` comments are skipped.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// let trace = Trace::parse("# decode step\na 512 64\nr\ni\n")?;
    /// assert_eq!((trace.requests(), trace.inferences()), (1, 1));
    /// assert_eq!(Trace::parse("a 512\n").unwrap_err().line(), 1);
    /// # Ok::<(), tempalloc::trace::ParseError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ParseError`] naming the first malformed line: an unknown event,
    /// a wrong number of fields, a field that is not a number, an alignment
    /// that is not a power of two, or a size too large for a `Layout`.
    pub fn parse(text: &str) -> Result<Trace, ParseError> {
        let mut events = Vec::new();
        for (index, line) in text.lines().enumerate() {
            events.extend(parse_line(line, index + 1)?);
        }
        Ok(Trace { events })
    }

    /// Reads the text format from a buffered reader, line by line.
    ///
    /// ```
    /// use tempalloc::trace::Trace;
    ///
    /// let trace = Trace::from_reader(&b"a 64 64\nr\n"[..])?;
    /// assert_eq!(trace.requests(), 1);
    /// # Ok::<(), tempalloc::trace::ParseError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Trace::parse`], plus [`ParseError::Io`] when the reader fails or
    /// a line is not UTF-8.
    pub fn from_reader(mut reader: impl BufRead) -> Result<Trace, ParseError> {
        let mut events = Vec::new();
        let mut buf = String::new();
        let mut line = 0;
        loop {
            line += 1;
            buf.clear();
            match reader.read_line(&mut buf) {
                Ok(0) => return Ok(Trace { events }),
                Ok(_) => events.extend(parse_line(&buf, line)?),
                Err(source) => return Err(ParseError::Io { line, source }),
            }
        }
    }
}

impl FromStr for Trace {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Trace::parse(text)
    }
}
