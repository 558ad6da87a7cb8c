mod util;

mod alignment;
mod bad_input;
mod bump;
mod context;
mod debug_checks;
mod errors;
mod faults;
mod leaks;
mod malloc;
mod model;
mod patterns;
mod stats;
mod stress;
mod vec_in;
