mod util;

mod alignment;
mod bump;
mod caching;
mod context;
mod errors;
mod malloc;
mod patterns;
mod stats;
mod vec_in;
