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
    assert_eq!(temp.trace(), expected);
    // Calls pass through: the inner allocator saw them all.
    let stats = temp.stats();
    assert_eq!(
        (stats.allocations, stats.resets, stats.bytes_requested),
        (5, 2, 4243)
    );

    let (inner, trace) = temp.into_parts();
    assert_eq!(trace, expected);
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
        temp.trace().events(),
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
    assert_eq!(temp.take_trace().len(), 2);
    temp.mark_inference();
    assert_eq!(temp.trace().events(), &[Event::EndInference]);
}

#[test]
fn replaying_a_recording_gives_the_same_stats() {
    // Record a real run: the decode workload driven through the recorder.
    let workload = Decode {
        layers: 3,
        steps: 20,
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
        }
    }
    let (original, recorded) = recorder.into_parts();
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
    let trace = temp.trace();
    assert_eq!(trace.requests(), 100);
    assert_eq!(trace.request_sizes().sum::<usize>(), 4 * (25 * 26 / 2));
}
