//! `tempalloc::trace`: the text format, the generators, replay.

use std::path::PathBuf;

use tempalloc::trace::{self, Decode, Event, Mixed, ParseError, Steady, Trace};
use tempalloc::{BumpAllocator, MallocAllocator, TempAllocator};

fn a(size: usize, align: usize) -> Event {
    Event::Alloc { size, align }
}

#[test]
fn parse_reads_events_and_skips_comments_and_blank_lines() {
    let trace = Trace::parse("# header\n\na 4096 64\n  a 1 8  \nr\n# mid\ni\n").unwrap();
    assert_eq!(
        trace.events(),
        &[a(4096, 64), a(1, 8), Event::Reset, Event::EndInference]
    );
}

#[test]
fn write_then_parse_round_trips() {
    let trace = Trace::from(vec![
        a(0, 1),
        a(4 << 20, 4096),
        Event::Reset,
        a(usize::MAX / 2, 1),
        Event::EndInference,
    ]);
    let text = trace.to_string();
    assert_eq!(
        text,
        format!("a 0 1\na {} 4096\nr\na {} 1\ni\n", 4 << 20, usize::MAX / 2)
    );
    assert_eq!(Trace::parse(&text).unwrap(), trace);

    let mut bytes = Vec::new();
    trace.write_to(&mut bytes).unwrap();
    assert_eq!(bytes, text.as_bytes());
    assert_eq!(Trace::from_reader(&bytes[..]).unwrap(), trace);
}

#[test]
fn generated_traces_round_trip_through_text() {
    // Under Miri two inferences of fewer kernels: every kind of event is
    // still in it, a tenth as many times.
    let trace = if cfg!(miri) {
        Mixed {
            inferences: 2,
            min_kernels: 4,
            max_kernels: 8,
            ..Mixed::default()
        }
    } else {
        Mixed {
            inferences: 3,
            ..Mixed::default()
        }
    }
    .generate();
    assert_eq!(Trace::parse(&trace.to_string()).unwrap(), trace);
}

/// Parses with both readers; both must give the same error line.
fn error_of(text: &str) -> ParseError {
    let from_str = Trace::parse(text).unwrap_err();
    let from_reader = Trace::from_reader(text.as_bytes()).unwrap_err();
    assert_eq!(
        from_str.line(),
        from_reader.line(),
        "{from_str} vs {from_reader}"
    );
    assert!(
        from_str
            .to_string()
            .starts_with(&format!("trace line {}: ", from_str.line())),
        "{from_str}"
    );
    from_str
}

#[test]
fn bad_verb_reports_its_line() {
    let err = error_of("a 1 1\n# c\nfree 0x10\n");
    assert_eq!(err.line(), 3);
    assert!(
        matches!(&err, ParseError::UnknownEvent { verb, .. } if verb == "free"),
        "{err:?}"
    );
}

#[test]
fn missing_and_extra_fields_report_their_line() {
    let err = error_of("r\na 64\n");
    assert_eq!(err.line(), 2);
    assert!(
        matches!(
            err,
            ParseError::FieldCount {
                expected: 2,
                found: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "trace line 2: `a` takes 2 fields, found 1");

    let err = error_of("r\nr\ni 3\n");
    assert_eq!(err.line(), 3);
    assert!(
        matches!(
            err,
            ParseError::FieldCount {
                expected: 0,
                found: 1,
                ..
            }
        ),
        "{err:?}"
    );

    assert_eq!(error_of("a\n").line(), 1);
    assert_eq!(error_of("a 1 2 3\n").line(), 1);
}

#[test]
fn non_numbers_report_their_line_and_field() {
    let err = error_of("a 1 1\na 12k 64\n");
    assert_eq!(err.line(), 2);
    assert!(
        matches!(&err, ParseError::NotANumber { field: "size", text, .. } if text == "12k"),
        "{err:?}"
    );

    let err = error_of("a 16 -8\n");
    assert!(
        matches!(&err, ParseError::NotANumber { field: "align", .. }),
        "{err:?}"
    );
    let err = error_of("a 99999999999999999999999 8\n");
    assert!(
        matches!(&err, ParseError::NotANumber { field: "size", .. }),
        "{err:?}"
    );
}

#[test]
fn bad_alignments_report_their_line() {
    for align in [0usize, 3, 48, 4097] {
        let err = error_of(&format!("a 8 8\nr\na 100 {align}\n"));
        assert_eq!(err.line(), 3);
        assert!(
            matches!(err, ParseError::BadAlign { align: a, .. } if a == align),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("trace line 3: alignment {align} is not a power of two")
        );
    }
    let err = error_of(&format!("a {} 4096\n", isize::MAX));
    assert!(
        matches!(err, ParseError::TooLarge { line: 1, .. }),
        "{err:?}"
    );
}

#[test]
fn non_utf8_input_is_an_io_error_with_its_line() {
    let err = Trace::from_reader(&b"r\n\xff\xfe\n"[..]).unwrap_err();
    assert!(matches!(err, ParseError::Io { line: 2, .. }), "{err:?}");
}

/// What `tests/data/reference-traces.txt` says of each reference trace
/// (`traces/gen_traces.py`'s `steady`, `decode` and `mixed`, which are
/// megabytes: the package ships their fingerprints and their first lines,
/// `tests/data/NAME.head.trace`, instead).
#[derive(Debug, PartialEq)]
struct Fingerprint {
    events: usize,
    requests: usize,
    inferences: usize,
    /// FNV-1a (64 bits) of the trace as `Trace::to_string` writes it.
    fnv1a: u64,
}

impl Fingerprint {
    fn of(trace: &Trace) -> Self {
        let fnv1a = trace
            .to_string()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        Fingerprint {
            events: trace.len(),
            requests: trace.requests(),
            inferences: trace.inferences(),
            fnv1a,
        }
    }
}

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

/// The stored fingerprint of the reference trace `name`.
fn reference_fingerprint(name: &str) -> Fingerprint {
    let path = format!("{DATA}/reference-traces.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("{path} has no line for {name}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    let number = |i: usize| f[i].parse::<usize>().expect("a count");
    Fingerprint {
        events: number(1),
        requests: number(2),
        inferences: number(3),
        fnv1a: u64::from_str_radix(f[4], 16).expect("a hex hash"),
    }
}

/// Not a test but the tool that rewrites `tests/data` from the reference
/// `.trace` files (the fingerprints and the first 300 lines of each), so
/// ignored: `TEMPALLOC_TRACES=DIR cargo test --test all
/// trace::reference_data -- --ignored`, `DIR` their folder. The tests read
/// only what the package ships.
#[test]
#[ignore = "a tool, not a test: rewrites tests/data from the reference traces (TEMPALLOC_TRACES=DIR)"]
fn reference_data_is_rewritten_from_the_traces_when_asked() {
    let dir = std::env::var_os("TEMPALLOC_TRACES")
        .expect("TEMPALLOC_TRACES=DIR, the folder of the reference .trace files");
    let mut table = String::from(
        "# The reference traces (traces/gen_traces.py: steady, decode, mixed), as\n\
         # fingerprints: name, events, requests, inferences, FNV-1a 64 of the trace\n\
         # as Trace::to_string writes it. Rewritten from the .trace files by\n\
         # TEMPALLOC_TRACES=DIR cargo test --test all trace::reference_data -- --ignored\n",
    );
    for name in ["steady", "decode", "mixed"] {
        let path = PathBuf::from(&dir).join(format!("{name}.trace"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let f = Fingerprint::of(&Trace::parse(&text).expect("a reference trace parses"));
        table += &format!(
            "{name} {} {} {} {:016x}\n",
            f.events, f.requests, f.inferences, f.fnv1a
        );
        let head: String = text.lines().take(300).map(|l| format!("{l}\n")).collect();
        std::fs::write(format!("{DATA}/{name}.head.trace"), head).expect("write a head");
    }
    std::fs::write(format!("{DATA}/reference-traces.txt"), table).expect("write the table");
}

/// The generator's trace against the reference: the same first lines (a
/// readable failure), then the same whole trace (by fingerprint).
fn matches_the_reference(name: &str, generated: &Trace) {
    let head = std::fs::read_to_string(format!("{DATA}/{name}.head.trace")).expect("the head");
    let head = Trace::parse(&head).expect("the head parses");
    for (i, (g, r)) in generated.events().iter().zip(head.events()).enumerate() {
        assert_eq!(g, r, "{name}: event {i}");
    }
    assert_eq!(
        Fingerprint::of(generated),
        reference_fingerprint(name),
        "{name}"
    );
}

#[test]
#[cfg_attr(miri, ignore = "hashes the full reference shape (132 225 requests)")]
fn decode_generator_matches_the_reference_trace() {
    matches_the_reference("decode", &trace::decode());
}

#[test]
#[cfg_attr(miri, ignore = "hashes the full reference shape (32 000 requests)")]
fn steady_generator_matches_the_reference_trace() {
    matches_the_reference("steady", &trace::steady());
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the full reference shape (132 225 requests) by design; safe code only, checked by cargo test"
)]
fn decode_shape_follows_the_formula() {
    let d = Decode::default();
    // Prefill: q = 128, qs = 32, kv = 128.
    assert_eq!(
        d.sdpa_scratch(128, 128),
        [(32 * 128 + 2 * 32 + 32 * 128) * 4 * 4, 128 * 128 * 4 * 4]
    );
    // Decode step with kv past the split: q = 1, kvs = 512.
    assert_eq!(
        d.sdpa_scratch(1, 900),
        [(512 + 2 + 128) * 4 * 4, 512 * 128 * 4 * 4]
    );
    // Long prompts use the larger q splits.
    assert_eq!(
        d.sdpa_scratch(200, 200)[0],
        (64 * 200 + 2 * 64 + 64 * 128) * 16
    );
    assert_eq!(
        d.sdpa_scratch(800, 800)[0],
        (256 * 512 + 2 * 256 + 256 * 128) * 16
    );

    let trace = trace::decode();
    assert_eq!(trace.inferences(), 1025);
    assert_eq!(trace.requests(), 1025 * (32 * 4 + 1));
}

#[test]
fn steady_shape() {
    let trace = Steady {
        layers: 3,
        inferences: 2,
    }
    .generate();
    let one_layer = [
        a(4096, 64),
        a(65536, 64),
        Event::Reset,
        a(262144, 64),
        a(1024, 16),
        a(512, 128),
        Event::Reset,
    ];
    let expected: Vec<Event> = (0..2)
        .flat_map(|_| {
            one_layer
                .iter()
                .copied()
                .cycle()
                .take(7 * 3)
                .chain([Event::EndInference])
        })
        .collect();
    assert_eq!(trace.events(), expected);
}

/// Kernels per inference and buffers per kernel of a generated trace.
fn kernel_shape(trace: &Trace) -> (Vec<usize>, Vec<usize>) {
    let (mut kernels, mut buffers) = (Vec::new(), Vec::new());
    let (mut k, mut b) = (0, 0);
    for event in trace.events() {
        match event {
            Event::Alloc { .. } => b += 1,
            Event::Reset => {
                buffers.push(b);
                b = 0;
                k += 1;
            }
            Event::EndInference => {
                kernels.push(k);
                k = 0;
            }
            _ => {}
        }
    }
    (kernels, buffers)
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the full reference shape by design; safe code only, checked by cargo test"
)]
fn mixed_generator_statistics() {
    let trace = trace::mixed();
    assert_eq!(trace.inferences(), 200);
    assert_eq!(trace.events().last(), Some(&Event::EndInference));

    let (kernels, buffers) = kernel_shape(&trace);
    assert!(kernels.iter().all(|k| (20..=60).contains(k)), "{kernels:?}");
    assert!(buffers.iter().all(|b| (1..=4).contains(b)));
    // Both ends of the ranges are drawn.
    assert_eq!(
        (kernels.iter().min(), kernels.iter().max()),
        (Some(&20), Some(&60))
    );
    assert_eq!(
        (buffers.iter().min(), buffers.iter().max()),
        (Some(&1), Some(&4))
    );
    let mean_kernels = kernels.iter().sum::<usize>() as f64 / kernels.len() as f64;
    assert!(
        (36.0..44.0).contains(&mean_kernels),
        "mean kernels per inference {mean_kernels}"
    );

    // Sizes: log-uniform in 16 B..4 MiB, so log2 is uniform in 4..22.
    let sizes: Vec<usize> = trace.request_sizes().collect();
    assert!(sizes.iter().all(|s| (16..4 << 20).contains(s)));
    let logs: Vec<f64> = sizes.iter().map(|&s| (s as f64).log2()).collect();
    let mean_log = logs.iter().sum::<f64>() / logs.len() as f64;
    assert!(
        (12.8..13.2).contains(&mean_log),
        "mean log2 size {mean_log}"
    );
    // Each of the 18 octaves gets about 1/18 of the requests.
    let mut octaves = [0usize; 18];
    for l in &logs {
        octaves[(*l as usize - 4).min(17)] += 1;
    }
    let expected = sizes.len() as f64 / 18.0;
    for (i, n) in octaves.iter().enumerate() {
        assert!(
            (*n as f64 - expected).abs() < expected * 0.2,
            "octave 2^{}: {n} of {}",
            i + 4,
            sizes.len()
        );
    }

    // Alignments from {8, 16, 64, 128, 4096}, 64 twice as often.
    let mut counts = std::collections::BTreeMap::new();
    for event in trace.events() {
        if let Event::Alloc { align, .. } = event {
            *counts.entry(*align).or_insert(0usize) += 1;
        }
    }
    assert_eq!(
        counts.keys().copied().collect::<Vec<_>>(),
        [8, 16, 64, 128, 4096]
    );
    let n = sizes.len() as f64;
    for (align, share) in [
        (8, 1.0 / 6.0),
        (16, 1.0 / 6.0),
        (64, 2.0 / 6.0),
        (128, 1.0 / 6.0),
        (4096, 1.0 / 6.0),
    ] {
        let got = counts[&align] as f64 / n;
        assert!(
            (got - share).abs() < 0.02,
            "align {align}: share {got}, expected {share}"
        );
    }
}

#[test]
fn mixed_generator_is_seeded() {
    let small = |seed| {
        Mixed {
            inferences: 4,
            seed,
            ..Mixed::default()
        }
        .generate()
    };
    assert_eq!(small(1), small(1));
    assert_ne!(small(1), small(2));
}

#[test]
fn mixed_generator_survives_degenerate_parameters() {
    let trace = Mixed {
        inferences: 2,
        min_kernels: 5,
        max_kernels: 3,
        min_buffers: 0,
        max_buffers: 0,
        min_size: 0,
        max_size: 0,
        aligns: &[],
        ..Mixed::default()
    }
    .generate();
    let (kernels, buffers) = kernel_shape(&trace);
    assert!(kernels.iter().all(|k| (3..=5).contains(k)));
    assert!(buffers.iter().all(|b| *b == 0));
}

#[test]
fn peak_live_bytes_is_the_largest_window() {
    let trace = Trace::parse("a 10 8\na 20 8\nr\na 25 8\ni\na 5 8\na 6 8\na 7 8\n").unwrap();
    assert_eq!(trace.peak_live_bytes(), 30);
    assert_eq!(Trace::new().peak_live_bytes(), 0);
}

#[test]
fn replay_reports_what_the_trace_asked() {
    let trace = Steady {
        layers: 4,
        inferences: 3,
    }
    .generate();
    let mut temp = MallocAllocator::new();
    let report = trace.replay(&mut temp).unwrap();
    assert_eq!(report.requests, 60);
    assert_eq!(
        report.bytes_requested,
        3 * 4 * (4096 + 65536 + 262144 + 1024 + 512)
    );
    assert_eq!((report.resets, report.inferences), (3 * 4 * 2 + 3, 3));
    assert_eq!(report.peak_live_bytes, 262144 + 1024 + 512);
    // malloc holds exactly what is live, and nothing after the last reset.
    assert_eq!(report.peak_bytes_held, report.peak_live_bytes);
    assert_eq!(report.bytes_held_end, 0);
    assert_eq!(report.system_allocations, 60);
    let stats = temp.stats();
    assert_eq!((stats.allocations, stats.resets), (60, 27));

    // A bump arena keeps its chunk: it holds at least the peak.
    let report = trace.replay(&mut BumpAllocator::new()).unwrap();
    assert!(report.peak_bytes_held >= report.peak_live_bytes);
    assert!(report.bytes_held_end > 0);
}

#[test]
fn run_makes_the_same_calls_as_replay() {
    let trace = Mixed {
        inferences: 2,
        ..Mixed::default()
    }
    .generate();
    let (mut a, mut b) = (MallocAllocator::new(), MallocAllocator::new());
    trace.run(&mut a).unwrap();
    trace.replay(&mut b).unwrap();
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (sa.allocations, sa.bytes_requested, sa.resets),
        (sb.allocations, sb.bytes_requested, sb.resets)
    );
}

#[test]
fn replay_returns_the_allocators_error() {
    let trace = Trace::parse("a 100 8\na 100000 8\nr\n").unwrap();
    let err = trace
        .replay(&mut BumpAllocator::with_limit(1024))
        .unwrap_err();
    assert!(
        matches!(err, tempalloc::Error::BudgetExceeded { .. }),
        "{err:?}"
    );
    // A hand-built event that is no valid layout is an error, not a panic.
    let bad = Trace::from(vec![a(8, 3)]);
    assert_eq!(
        bad.run(&mut MallocAllocator::new()).unwrap_err(),
        tempalloc::Error::InvalidAlignment { align: 3 }
    );
}

#[test]
fn compare_gives_one_row_per_allocator_with_caching_as_the_reference() {
    use tempalloc::trace::compare;
    use tempalloc::{BumpAllocator, CachingAllocator, MallocAllocator, TempAllocator};

    // Under Miri two inferences and one timed pass: the warm-up pass is what
    // makes caching take nothing in the timed one, at any count.
    let (inferences, passes) = if cfg!(miri) { (2, 1) } else { (4, 3) };
    let trace = tempalloc::trace::Steady {
        layers: 3,
        inferences,
    }
    .generate();
    let (mut malloc, mut bump, mut caching) = (
        MallocAllocator::new(),
        BumpAllocator::new(),
        CachingAllocator::new(),
    );
    let allocators: [(&str, &mut dyn TempAllocator); 3] = [
        ("malloc", &mut malloc),
        ("bumpalo", &mut bump),
        ("caching", &mut caching),
    ];
    let rows = compare(&trace, allocators, passes).expect("every allocator replays");
    let names: Vec<&str> = rows.iter().map(|r| r.allocator.as_str()).collect();
    assert_eq!(names, ["malloc", "bumpalo", "caching"]);
    assert_eq!(rows[2].vs_reference, 1.0);
    // malloc: one system allocation per request; caching: none once warm.
    assert_eq!(rows[0].system_allocations_per_request, 1.0);
    assert_eq!(rows[2].system_allocations_per_request, 0.0);
    assert_eq!(rows[0].held_over_peak, 1.0);
    assert!(rows.iter().all(|r| r.held_over_peak >= 1.0));
}

#[test]
fn compare_reports_the_first_allocator_error() {
    use tempalloc::trace::{Event, compare};
    use tempalloc::{Error, MallocAllocator, TempAllocator};

    // A trace built by hand may hold a layout no allocator accepts.
    let trace: tempalloc::trace::Trace = [Event::Alloc {
        size: usize::MAX,
        align: 8,
    }]
    .into_iter()
    .collect();
    let mut malloc = MallocAllocator::new();
    let err = compare(
        &trace,
        [("malloc", &mut malloc as &mut dyn TempAllocator)],
        1,
    )
    .expect_err("the layout overflows");
    assert!(matches!(err, Error::SizeOverflow { .. }), "{err:?}");
}
