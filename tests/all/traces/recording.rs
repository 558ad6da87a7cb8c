//! `RecordingAllocator`: records exactly what was asked, replays the same.

use std::alloc::Layout;

use tempalloc::trace::{Decode, Event, Trace};
use tempalloc::{
    BumpAllocator, Error, KernelContext, MallocAllocator, RecordingAllocator, TempAllocator,
};

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

#[test]
fn records_every_call_in_order() {
    let mut temp = RecordingAllocator::new(MallocAllocator::new());
    temp.allocate(layout(100, 8)).unwrap();
    temp.allocate(layout(0, 64)).unwrap();
    {
        let ctx = KernelContext::new(&temp);
        ctx.scratch::<f32>(10).unwrap();
        ctx.allocate_temp(4096, 4096).unwrap();
    }
    temp.reset();
    temp.allocate(layout(7, 1)).unwrap();
    temp.mark_inference();
    let expected = Trace::from(vec![
        Event::Alloc {
            size: 100,
            align: 8,
        },
        Event::Alloc { size: 0, align: 64 },
        Event::Alloc { size: 40, align: 4 },
        Event::Alloc {
            size: 4096,
            align: 4096,
        },
        Event::Reset,
        Event::Alloc { size: 7, align: 1 },
        Event::EndInference,
    ]);
    assert_eq!(temp.trace(), Ok(expected.clone()));
    // Calls pass through: the inner allocator saw them all.
    let stats = temp.stats();
    assert_eq!(
        (stats.allocations, stats.resets, stats.bytes_requested),
        (5, 2, 4243)
    );

    let (inner, trace) = temp.into_parts();
    assert_eq!(trace, Ok(expected));
    assert_eq!(inner.stats(), stats);
}

#[test]
fn refused_requests_are_recorded_too() {
    let temp = RecordingAllocator::new(BumpAllocator::with_limit(1024));
    assert!(matches!(
        temp.allocate(layout(1 << 20, 8)),
        Err(Error::BudgetExceeded { .. })
    ));
    assert_eq!(
        temp.trace().unwrap().events(),
        &[Event::Alloc {
            size: 1 << 20,
            align: 8
        }]
    );
}

#[test]
fn take_trace_starts_a_new_log() {
    let mut temp = RecordingAllocator::new(MallocAllocator::new());
    temp.allocate(layout(1, 1)).unwrap();
    temp.reset();
    assert_eq!(temp.take_trace().unwrap().len(), 2);
    temp.mark_inference();
    assert_eq!(temp.trace().unwrap().events(), &[Event::EndInference]);
}

#[test]
fn replaying_a_recording_gives_the_same_stats() {
    // Record a real run: the decode workload driven through the recorder.
    // Under Miri 3 decode steps after the prefill (84 events, not 441):
    // every kind of event, each replayed the same, with fewer repeats.
    let workload = Decode {
        layers: 3,
        steps: crate::scenarios::scaled(20, 3),
        ..Decode::default()
    }
    .generate();
    let mut recorder = RecordingAllocator::new(MallocAllocator::new());
    for event in workload.events() {
        match *event {
            Event::Alloc { size, align } => {
                recorder.allocate(layout(size, align)).unwrap();
            }
            Event::Reset => recorder.reset(),
            Event::EndInference => recorder.mark_inference(),
            other => panic!("the decode generator writes no `{other}`"),
        }
    }
    let (original, recorded) = recorder.into_parts();
    let recorded = recorded.unwrap();
    assert_eq!(recorded, workload);

    for mut other in [
        Box::new(MallocAllocator::new()) as Box<dyn TempAllocator>,
        Box::new(BumpAllocator::new()),
    ] {
        recorded.replay(other.as_mut()).unwrap();
        let (a, b) = (original.stats(), other.stats());
        assert_eq!(
            (a.allocations, a.bytes_requested, a.resets),
            (b.allocations, b.bytes_requested, b.resets)
        );
    }
}

#[test]
fn recording_a_sync_allocator_is_sync() {
    fn assert_sync<T: Sync + Send>(_: &T) {}
    let temp = RecordingAllocator::new(MallocAllocator::new());
    assert_sync(&temp);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for i in 1..=25 {
                    temp.allocate(layout(i, 8)).unwrap();
                }
            });
        }
    });
    let trace = temp.trace().unwrap();
    assert_eq!(trace.requests(), 100);
    assert_eq!(trace.request_sizes().sum::<usize>(), 4 * (25 * 26 / 2));
}

#[test]
fn worker_threads_and_checkpoints_are_recorded_and_replayed_faithfully() {
    use tempalloc::trace::Event;
    use tempalloc::{CachingAllocator, KernelContext, RecordingAllocator, Rewind, TempAllocator};

    let mut temp = RecordingAllocator::new(CachingAllocator::new());
    for _ in 0..2 {
        // One kernel: a checkpoint, a buffer on this thread and one on a worker, a rewind.
        let cp = temp.checkpoint().unwrap();
        KernelContext::new(&temp)
            .scratch::<u8>(4096)
            .expect("the runtime thread's scratch");
        std::thread::scope(|s| {
            s.spawn(|| {
                let ctx = KernelContext::new(&temp);
                ctx.scratch::<u8>(8192).map(|_| ())
            })
            .join()
            .expect("the worker runs")
        })
        .expect("the worker's scratch");
        temp.rewind(cp).expect("a fresh checkpoint rewinds");
    }
    temp.mark_inference();
    let trace = temp.into_parts().1.unwrap();
    assert_eq!(
        trace.to_string(),
        "c 0\na 4096 1\nt 1\na 8192 1\nw 0\nc 1\nt 0\na 4096 1\nt 2\na 8192 1\nw 1\ni\n",
        "each scoped worker is a new thread"
    );
    assert_eq!(
        tempalloc::trace::Trace::parse(&trace.to_string()).unwrap(),
        trace
    );
    assert!(trace.events().contains(&Event::Thread { id: 2 }));
    // The rewind recycles each kernel's scratch: live bytes peak at one kernel's.
    assert_eq!(trace.peak_live_bytes(), 4096 + 8192);

    let mut replay = CachingAllocator::new();
    let first = trace.replay_caching(&mut replay).expect("replays");
    assert_eq!((first.requests, first.inferences), (4, 1));
    // Warm: fresh threads per kernel lease the regions the last ones left,
    // so the same trace again asks the system for nothing (heap blocks, as
    // under Miri, settle on one block sized to the peak a window later).
    let second = trace.replay_caching(&mut replay).expect("replays again");
    assert_eq!((second.requests, second.resets), (4, 1));
    let third = trace.replay_caching(&mut replay).expect("replays again");
    let warm = if cfg!(miri) { third } else { second };
    assert_eq!(warm.system_allocations, 0);
    assert_eq!(replay.stats().allocations, 12);
}

#[test]
#[cfg_attr(miri, ignore = "reads tests/data, which Miri's isolation forbids")]
fn traces_written_before_threads_and_checkpoints_still_read() {
    // The format of the reference traces: `a`, `r`, `i` and comments only.
    let trace = tempalloc::trace::Trace::parse("# old\na 64 64\nr\ni\n").unwrap();
    assert_eq!(trace.to_string(), "a 64 64\nr\ni\n");
    // The first lines of each reference trace, as the package ships them.
    for name in ["steady", "decode", "mixed"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(format!("{name}.head.trace"));
        let text = std::fs::read_to_string(&path).expect("tests/data ships the heads");
        assert!(
            text.starts_with("# "),
            "{name}: the reference's comment line"
        );
        let trace = tempalloc::trace::Trace::parse(&text).expect("an old trace parses");
        assert!(trace.requests() > 100, "{name}");
    }
}

/// A recorder over any `Rewind` allocator runs frames, and
/// the trace replays them through `CachingAllocator` with the same
/// checkpoints and rewinds.
#[test]
fn frames_over_a_recorder_record_their_checkpoints_and_replay() {
    use tempalloc::{Error, MallocAllocator, RecordingAllocator, TempAllocator};
    let mut temp = RecordingAllocator::new(MallocAllocator::new());
    let sum = temp.frame(|inf| {
        let act = inf.scratch_fill(10, 2u32)?;
        let mut sum = 0;
        for _ in 0..2 {
            sum += inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch_copy(act)?.iter().sum::<u32>()))?;
        }
        Ok::<_, Error>(sum)
    });
    assert_eq!(sum, Ok(40));
    assert_eq!(temp.inner().stats().bytes_live, 0);
    let trace = temp.into_parts().1.unwrap();
    assert_eq!(
        trace.to_string(),
        "a 40 4\nc 0\na 40 4\nw 0\nc 1\na 40 4\nw 1\nr\n"
    );
    let replayed = trace
        .replay_caching(&mut tempalloc::CachingAllocator::new())
        .expect("replays");
    assert_eq!((replayed.requests, replayed.resets), (3, 1));
}

/// A reset or an inference end cannot fail, and with no memory left for the
/// log it neither aborts nor goes missing unseen: the one after a request
/// goes into the room the request kept, and one that finds no room still
/// resets the inner allocator and makes the trace an error.
#[test]
fn resets_with_no_memory_for_the_log_never_abort_nor_go_missing() {
    use core::mem::MaybeUninit;

    use crate::counting::NoMemory;
    use tempalloc::FixedAllocator;

    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    let mut temp = RecordingAllocator::new(FixedAllocator::new(&mut buf));
    temp.allocate(layout(64, 8)).unwrap();
    let mut served = 1;
    let refused = {
        let _no_memory = NoMemory::on_this_thread();
        // Requests until the log cannot grow for one (it is not passed on)...
        let refused = (0..1000).find_map(|_| match temp.allocate(layout(8, 8)) {
            Ok(_) => {
                served += 1;
                None
            }
            Err(e) => Some(e),
        });
        // ...and the reset that ends their window.
        temp.reset();
        refused
    };
    assert!(
        matches!(refused, Some(Error::OutOfMemory { .. })),
        "{refused:?}"
    );
    assert_eq!(temp.stats().allocations, served);
    let trace = temp.trace().unwrap();
    assert_eq!(
        (trace.requests(), trace.events().last()),
        (served as usize, Some(&Event::Reset))
    );

    // Closing events in a row, with no request between them to keep room.
    {
        let _no_memory = NoMemory::on_this_thread();
        for _ in 0..4 {
            temp.mark_inference();
            temp.reset();
        }
    }
    assert_eq!(
        temp.stats().resets,
        9,
        "the inner allocator reset every time"
    );
    let lost = temp.trace().unwrap_err();
    let Error::OutOfMemory { size, align } = lost else {
        panic!("{lost}");
    };
    assert!(size > trace.len() && align.is_power_of_two(), "{lost}");
    // Taking the trace says so too, and starts a complete log.
    assert_eq!(temp.take_trace(), Err(lost));
    temp.reset();
    assert_eq!(temp.trace().unwrap().events(), &[Event::Reset]);
}

/// `RecordingAllocator::frame` needs no
/// `use tempalloc::Rewind`, as `CachingAllocator::frame` does not.
mod without_the_rewind_import {
    use tempalloc::{CachingAllocator, Error, RecordingAllocator};

    #[test]
    fn a_recording_allocator_runs_frames() {
        let mut temp = RecordingAllocator::new(CachingAllocator::new());
        let n = temp.frame(|inf| {
            let act = inf.scratch_fill(8, 1u8)?;
            inf.kernel(|ctx| Ok::<_, Error>(ctx.scratch_copy(act)?.len()))
        });
        assert_eq!(n, Ok(8));
        // The frame's requests were recorded: the scratch and the kernel's copy.
        let trace = temp.trace().unwrap();
        assert!(!trace.is_empty());
    }
}
