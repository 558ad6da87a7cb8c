//! A workload recorded (`recording`), written and read as text and replayed
//! (`trace`), planned (`plan`), and the `tempalloc-replay` binary
//! (`replay_cli`).

mod plan;
mod recording;
mod replay_cli;
mod trace;
