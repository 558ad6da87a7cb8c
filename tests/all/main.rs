mod util;

mod alignment;
mod bump;
mod capi;
mod context;
mod errors;
mod malloc;
mod patterns;
mod stats;
mod vec_in;
